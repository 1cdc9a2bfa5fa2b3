import Glibc
import FuseKit
import Synchronization

/// A backing item the kernel knows: an O_PATH descriptor and the kernel's lookup count.
///
/// The FUSE node id is the object's address (as libfuse's passthrough_ll does): the kernel sends no
/// request for a node after its lookup count reached zero, so the address stays valid while used.
public final class BackingNode: @unchecked Sendable {
    /// O_PATH | O_NOFOLLOW descriptor on the backing item; closed when the kernel forgets it.
    public let fd: Int32
    let key: InodeKey
    /// Guarded by the table's lock.
    var lookups: UInt64 = 0
    /// The file type bits (S_IFMT) at lookup; the type of an inode never changes.
    public let type: mode_t

    init(fd: Int32, key: InodeKey, type: mode_t) {
        self.fd = fd; self.key = key; self.type = type
    }
    deinit { close(fd) }

    public var isDirectory: Bool { type == S_IFDIR }
}

struct InodeKey: Hashable {
    var dev: dev_t
    var ino: ino_t
}

/// Every inode the kernel holds, by backing (dev, ino), so hard links and repeated lookups share one
/// node. Lock order: the table lock is a leaf; nothing else is taken while holding it.
final class InodeTable: Sendable {
    private let byKey = Mutex<[InodeKey: BackingNode]>([:])
    let root: BackingNode

    init(rootFD: Int32, rootStat: stat) {
        root = BackingNode(fd: rootFD, key: InodeKey(dev: rootStat.st_dev, ino: rootStat.st_ino), type: S_IFDIR)
        root.lookups = 2 // never forgotten
    }

    @inline(__always)
    func id(of inode: BackingNode) -> InodeID {
        inode === root ? .root : InodeID(rawValue: UInt64(UInt(bitPattern: Unmanaged.passUnretained(inode).toOpaque())))
    }

    @inline(__always)
    func inode(_ id: InodeID) -> BackingNode {
        if id == .root { return root }
        return Unmanaged<BackingNode>.fromOpaque(UnsafeRawPointer(bitPattern: UInt(id.rawValue))!).takeUnretainedValue()
    }

    /// Registers one kernel lookup of the item `fd` refers to. Takes ownership of `fd` (closed when an
    /// inode for the same item already exists).
    func remember(fd: Int32, stat st: stat) -> BackingNode {
        let key = InodeKey(dev: st.st_dev, ino: st.st_ino)
        if key == root.key { close(fd); return root }
        var duplicate = false
        let node = byKey.withLock { table -> BackingNode in
            if let existing = table[key] {
                existing.lookups += 1
                duplicate = true
                return existing
            }
            let node = BackingNode(fd: fd, key: key, type: st.st_mode & S_IFMT)
            node.lookups = 1
            table[key] = node
            return node
        }
        if duplicate { close(fd) }
        return node
    }

    /// One more lookup of an inode already known (readdirplus of the same entry, link).
    func retain(_ node: BackingNode) {
        if node === root { return }
        byKey.withLock { _ in node.lookups += 1 }
    }

    /// The kernel forgets `count` lookups; the inode is released at zero.
    func forget(_ node: BackingNode, count: UInt64) {
        if node === root { return }
        byKey.withLock { table in
            node.lookups = node.lookups >= count ? node.lookups - count : 0
            if node.lookups == 0, table[node.key] === node { table[node.key] = nil }
        }
    }

    var count: Int { byKey.withLock { $0.count } }
}
