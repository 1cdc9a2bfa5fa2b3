import Glibc
import FuseKit
import Synchronization

/// A backing item the kernel knows, and the kernel's lookup count.
///
/// It is reached through an O_PATH descriptor while the daemon's descriptor budget allows (always for
/// directories: they are the parents every name is resolved against); beyond the budget, a file keeps
/// only its kernel file handle (a few bytes) and is reopened with `open_by_handle_at` for each use.
/// So the number of items the kernel may hold is not capped by RLIMIT_NOFILE.
///
/// The FUSE node id is the object's address (as libfuse's passthrough_ll does): the kernel sends no
/// request for a node after its lookup count reached zero, so the address stays valid while used.
public final class BackingNode: @unchecked Sendable {
    /// O_PATH | O_NOFOLLOW descriptor on the backing item, or -1 when only `handle` is kept.
    private let storedFD: Int32
    private let handle: LinuxCalls.KernelFileHandle?
    private let mountFD: Int32
    private let budget: DescriptorBudget?
    let key: InodeKey
    /// Guarded by the table's lock.
    var lookups: UInt64 = 0
    /// The file type bits (S_IFMT) at lookup; the type of an inode never changes.
    public let type: mode_t
    /// A directory's path as last read (as the caller's type: a string, a parsed path), with the
    /// path generation it was read in (`Loopback.path(of:as:)`).
    let cachedPath = Mutex<(generation: UInt64, path: any Sendable)?>(nil)
    /// A regular file's opens that take part in kernel passthrough, and the backing id they share
    /// (0: none; the kernel then caches the file's pages as without passthrough). The kernel wants
    /// every open of an inode in one mode, so the first open decides for the rest. The id stays
    /// registered until the kernel forgets the node, so every later open uses the same one (a new id
    /// could reach the kernel before it let go of the old one at a release, and fail with EBUSY).
    let passthrough = Mutex<(backingID: Int32, opens: Int)>((0, 0))
    /// The directory a non-directory was last looked up in: its path when /proc cannot give it
    /// (beyond PATH_MAX; `LongPaths.swift`).
    let lookedUpIn = Mutex(WeakNode())

    init(fd: Int32, key: InodeKey, type: mode_t, budget: DescriptorBudget?) {
        storedFD = fd; handle = nil; mountFD = -1; self.key = key; self.type = type; self.budget = budget
    }

    init(handle: LinuxCalls.KernelFileHandle, mountFD: Int32, key: InodeKey, type: mode_t) {
        storedFD = -1; self.handle = handle; self.mountFD = mountFD; self.key = key; self.type = type; budget = nil
    }

    deinit {
        if storedFD >= 0 {
            close(storedFD)
            budget?.release()
        }
    }

    public var isDirectory: Bool { type == S_IFDIR }

    /// True when the node holds a descriptor (false: reopened by handle for each use).
    public var holdsDescriptor: Bool { storedFD >= 0 }

    /// Runs `body` with an O_PATH descriptor on the item (-1 if it can no longer be reopened: the
    /// calls then fail with EBADF, as for a vanished file).
    @inline(__always)
    public func withFD<R>(_ body: (Int32) -> R) -> R {
        if storedFD >= 0 { return body(storedFD) }
        let fd = handle.map { LinuxCalls.open($0, mountFD: mountFD, flags: O_PATH | O_NOFOLLOW | O_CLOEXEC) } ?? -1
        defer { if fd >= 0 { close(fd) } }
        return body(fd)
    }

    /// The descriptor of a directory (directories always hold one).
    public var directoryFD: Int32 {
        precondition(storedFD >= 0, "a directory node always holds its descriptor")
        return storedFD
    }
}

/// Told when the kernel starts and stops knowing a directory (the backing watcher marks them).
public protocol DirectoryObserver: AnyObject, Sendable {
    func directoryAppeared(_ node: BackingNode)
    func directoryForgotten(_ node: BackingNode)
}

struct InodeKey: Hashable {
    var dev: dev_t
    var ino: ino_t
}

/// How many node descriptors the daemon may hold: half the descriptor limit, the rest is for open
/// files, directory streams, the store and the sockets.
final class DescriptorBudget: Sendable {
    private let used = Atomic<Int>(0)
    let limit: Int

    init() {
        var r = rlimit()
        let soft = getrlimit(Int32(RLIMIT_NOFILE.rawValue), &r) == 0 ? Int(min(r.rlim_cur, 1 << 30)) : 1024
        limit = max(256, soft / 2)
    }

    /// Takes one descriptor from the budget if there is room.
    func take() -> Bool {
        while true {
            let n = used.load(ordering: .relaxed)
            if n >= limit { return false }
            if used.compareExchange(expected: n, desired: n + 1, ordering: .relaxed).exchanged { return true }
        }
    }

    func release() { used.subtract(1, ordering: .relaxed) }
    var inUse: Int { used.load(ordering: .relaxed) }
}

/// Every inode the kernel holds, by backing (dev, ino), so hard links and repeated lookups share one
/// node. Lock order: the table lock is a leaf; nothing else is taken while holding it.
final class InodeTable: Sendable {
    private let byKey = Mutex<[InodeKey: BackingNode]>([:])
    /// Called outside the table lock.
    let observer = Mutex<(any DirectoryObserver)?>(nil)
    /// One descriptor per backing mount, for `open_by_handle_at` (kept for the daemon's life).
    private let mountAnchors = Mutex<[Int32: Int32]>([:])
    let budget = DescriptorBudget()
    let root: BackingNode

    init(rootFD: Int32, rootStat: stat) {
        root = BackingNode(fd: rootFD, key: InodeKey(dev: rootStat.st_dev, ino: rootStat.st_ino), type: S_IFDIR, budget: nil)
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
    /// inode for the same item already exists, or when the node keeps only a file handle).
    func remember(fd: Int32, stat st: stat, parent: BackingNode) -> BackingNode {
        let key = InodeKey(dev: st.st_dev, ino: st.st_ino)
        if key == root.key { close(fd); return root }
        if let existing = retainExisting(key) { close(fd); return existing }
        let type = st.st_mode & S_IFMT
        let fresh = makeNode(fd: fd, key: key, type: type, parent: parent)
        var duplicate: BackingNode? = nil
        let node = byKey.withLock { table -> BackingNode in
            if let existing = table[key] {
                existing.lookups += 1
                duplicate = existing
                return existing
            }
            fresh.lookups = 1
            table[key] = fresh
            return fresh
        }
        // A racing lookup won: `fresh` is dropped and closes its descriptor.
        if duplicate == nil, type == S_IFDIR { observer.withLock { $0 }?.directoryAppeared(node) }
        return node
    }

    private func retainExisting(_ key: InodeKey) -> BackingNode? {
        byKey.withLock { table in
            guard let existing = table[key] else { return nil }
            existing.lookups += 1
            return existing
        }
    }

    /// A node holding `fd` while the budget allows (always for directories), else its file handle.
    private func makeNode(fd: Int32, key: InodeKey, type: mode_t, parent: BackingNode) -> BackingNode {
        if type == S_IFDIR {
            _ = budget.take() // directories are counted but never refused
            return BackingNode(fd: fd, key: key, type: type, budget: budget)
        }
        if budget.take() { return BackingNode(fd: fd, key: key, type: type, budget: budget) }
        guard let (handle, mountID) = LinuxCalls.fileHandle(of: fd), let anchor = anchor(mountID, parent: parent) else {
            // No file handles here (or the file is a mount of its own): hold the descriptor anyway.
            return BackingNode(fd: fd, key: key, type: type, budget: nil)
        }
        close(fd)
        return BackingNode(handle: handle, mountFD: anchor, key: key, type: type)
    }

    /// A readable descriptor on the mount `mountID` (open_by_handle_at refuses O_PATH ones): the
    /// parent directory, opened once per mount and kept.
    private func anchor(_ mountID: Int32, parent: BackingNode) -> Int32? {
        if let a = mountAnchors.withLock({ $0[mountID] }) { return a }
        guard let (_, parentMount) = LinuxCalls.fileHandle(of: parent.directoryFD), parentMount == mountID else { return nil }
        let fd = openat(parent.directoryFD, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        return mountAnchors.withLock { anchors in
            if let a = anchors[mountID] { close(fd); return a }
            anchors[mountID] = fd
            return fd
        }
    }

    /// One more lookup of an inode already known (readdirplus of the same entry, link).
    func retain(_ node: BackingNode) {
        if node === root { return }
        byKey.withLock { _ in node.lookups += 1 }
    }

    /// The kernel forgets `count` lookups; the inode is released at zero.
    /// Returns true when the node left the table (the kernel no longer knows it).
    @discardableResult
    func forget(_ node: BackingNode, count: UInt64) -> Bool {
        if node === root { return false }
        let removed = byKey.withLock { table -> Bool in
            node.lookups = node.lookups >= count ? node.lookups - count : 0
            guard node.lookups == 0, table[node.key] === node else { return false }
            table[node.key] = nil
            return true
        }
        if removed, node.isDirectory { observer.withLock { $0 }?.directoryForgotten(node) }
        return removed
    }

    /// The node of a backing item the kernel knows, without counting a lookup.
    func existing(dev: dev_t, ino: ino_t) -> BackingNode? {
        let key = InodeKey(dev: dev, ino: ino)
        if key == root.key { return root }
        return byKey.withLock { $0[key] }
    }

    /// Every directory the kernel knows, and the root.
    var directories: [BackingNode] { [root] + byKey.withLock { $0.values.filter(\.isDirectory) } }

    var count: Int { byKey.withLock { $0.count } }
}
