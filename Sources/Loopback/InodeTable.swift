import Glibc
import Linux
import FuseKit
import SystemPackage
import Synchronization
import LinuxGNU

/// A backing item the kernel knows, and the kernel's lookup count.
///
/// It is reached through an O_PATH descriptor while the daemon's descriptor budget allows; beyond the
/// budget a node (a directory too) keeps only its kernel file handle (a few bytes) and is reopened
/// with `open_by_handle_at` for each use, and takes a descriptor of its own again at a use once the
/// budget has room. So the number of items the kernel may hold is not capped by RLIMIT_NOFILE, and
/// the daemon's node descriptors never pass the budget.
///
/// A node is the backing file it was looked up as, or nothing: a descriptor pins its inode, and a
/// file handle carries the inode's generation, so a handle whose file is gone fails (ESTALE, given
/// as ENOENT) instead of reaching a new file that took the same inode number.
///
/// The FUSE node id is the object's address (as libfuse's passthrough_ll does): the kernel sends no
/// request for a node after its lookup count reached zero, so the address stays valid while used.
public final class BackingNode: @unchecked Sendable {
    /// O_PATH | O_NOFOLLOW descriptor on the backing item, or -1 while only `handle` is kept. Set at
    /// most once after init (from -1 to a descriptor), closed only in deinit: a descriptor read from
    /// it stays valid while the node lives.
    private let slot: Atomic<Int32>
    /// Nil for nodes that hold their descriptor from the start (within the budget, or on a file
    /// system without file handles).
    let handle: LinuxCalls.KernelFileHandle?
    /// A readable descriptor on the item's mount, for `open_by_handle_at` with `handle` (-1: none).
    var mountFD: Int32 { anchor?.fd ?? -1 }
    /// Where `mountFD` comes from: held by each node that uses it, so it stays open while one does.
    private let anchor: MountAnchor?
    /// Where a descriptor this node holds is counted (nil: not counted, the root and items without
    /// file handles).
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
    ///
    /// `served`: opens the daemon serves with direct_io on purpose (`Loopback.openFile(passthrough:
    /// false)`) that the kernel may not have taken yet. The kernel refuses an open without
    /// passthrough while the inode has a passthrough open (EIO), so such an open is made only while
    /// it has none, and until the kernel surely took it (its first request: a read, a write, a
    /// flush, its release) the inode's new opens are served so too, and counted alike.
    let passthrough = Mutex<(backingID: Int32, opens: Int, served: Int)>((0, 0, 0))
    /// The directory a non-directory was last looked up in: its path when /proc cannot give it
    /// (beyond PATH_MAX; `LongPaths.swift`).
    let lookedUpIn = Mutex(WeakNode())
    /// A regular file's attributes known to be absent (`AbsentXattrs`: the state word).
    let absentXattrs = Atomic<UInt64>(0)
    /// How the item itself (not O_PATH) is opened (`Loopback.reopen`): by a file handle read at its
    /// first such open, or through /proc/self/fd where it has none.
    let reopening = Mutex<Reopening>(.unknown)
    enum Reopening { case unknown, byHandle(LinuxCalls.KernelFileHandle, anchor: MountAnchor), byProcPath }
    /// A regular file's latest open through the mount while it is open (weak: gone with its last
    /// reference): extended-attribute calls go through its descriptor instead of reopening the file
    /// (`Loopback.xattrCall`), which is the case of the kernel's `security.capability` at each write.
    let latestOpen = Mutex(WeakOpen())
    struct WeakOpen: Sendable { weak var file: OpenFile? }

    init(fd: Int32, key: InodeKey, type: mode_t, budget: DescriptorBudget?) {
        slot = Atomic(fd); handle = nil; anchor = nil; self.key = key; self.type = type; self.budget = budget
    }

    init(handle: LinuxCalls.KernelFileHandle, anchor: MountAnchor, key: InodeKey, type: mode_t, budget: DescriptorBudget) {
        slot = Atomic(-1); self.handle = handle; self.anchor = anchor; self.key = key; self.type = type; self.budget = budget
    }

    deinit {
        let fd = slot.load(ordering: .acquiring)
        if fd >= 0 {
            close(fd)
            budget?.release()
        }
    }

    public var isDirectory: Bool { type == S_IFDIR }

    /// True while the node holds a descriptor (false: reopened by handle for each use). A node that
    /// holds one pins its backing inode, whose number therefore cannot have been reused.
    public var holdsDescriptor: Bool { slot.load(ordering: .acquiring) >= 0 }

    /// Runs `body` with an O_PATH descriptor on the item (valid only during `body`), or fails with
    /// the errno of an item that can no longer be reopened: ENOENT when its file is gone (ESTALE),
    /// as for a name removed natively; EMFILE and the like as they come.
    @inline(__always)
    public func withDescriptor<R>(_ body: (Int32) -> R) -> Result<R, Errno> {
        let fd = slot.load(ordering: .acquiring)
        if fd >= 0 { return .success(body(fd)) }
        return reopened(body)
    }

    /// `withDescriptor` for a body that returns an errno or nil.
    @inline(__always)
    public func withFD(_ body: (Int32) -> Errno?) -> Errno? {
        switch withDescriptor(body) {
        case .success(let e): return e
        case .failure(let e): return e
        }
    }

    /// `withDescriptor` for a body that returns a result.
    @inline(__always)
    public func withFD<T>(_ body: (Int32) -> Result<T, Errno>) -> Result<T, Errno> {
        withDescriptor(body).flatMap { $0 }
    }

    /// Beyond the budget: opens the item by its handle for `body`, and keeps the descriptor when the
    /// budget has room again (the kernel forgot other nodes) and its number is not one the daemon
    /// keeps for its own files (`DescriptorReserve`).
    private func reopened<R>(_ body: (Int32) -> R) -> Result<R, Errno> {
        guard let handle else { return .failure(.badFileDescriptor) } // cannot happen: such nodes hold one
        let fd = retryingEINTR { LinuxCalls.open(handle, mountFD: mountFD, flags: O_PATH | O_NOFOLLOW | O_CLOEXEC) }
        guard fd >= 0 else {
            let e = errno
            // ESTALE: the inode is gone (its number may belong to another file now).
            return .failure(e == ESTALE ? .noSuchFileOrDirectory : Errno(rawValue: e))
        }
        if let budget, DescriptorReserve.admits(fd), budget.take() {
            if slot.compareExchange(expected: -1, desired: fd, ordering: .acquiringAndReleasing).exchanged {
                return .success(body(fd))
            }
            budget.release() // another use kept one first
        }
        defer { close(fd) }
        return .success(body(fd))
    }

    /// True when this node is the backing item `handle` names (`handle` nil: could not be read).
    func isSameItem(as handleOfItem: LinuxCalls.KernelFileHandle?) -> Bool {
        if holdsDescriptor { return true } // pinned: its inode number is its own
        guard let handle, let handleOfItem else { return false }
        return handle == handleOfItem
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

/// How many node descriptors the daemon may hold (`DescriptorShares.nodes`: half the descriptor
/// limit in force; the rest is for open files, directory streams, the store and the sockets).
final class DescriptorBudget: Sendable {
    private let used = Atomic<Int>(0)
    let limit: Int

    init(limit: Int) { self.limit = limit }

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
///
/// Node identity: a node found by (dev, ino) is the item looked up only if it holds a descriptor (its
/// inode is pinned, so the number is still its own) or its file handle equals the item's (the
/// handle carries the inode's generation). Otherwise the node's file is gone and the number was
/// reused: the new item gets a node of its own, and the old one is kept aside (`displaced`) until
/// the kernel forgets it, its uses failing with ENOENT.
/// A readable descriptor on a backing mount (`InodeTable.anchor`), closed with its last holder.
typealias MountAnchor = OwnedDescriptor

final class InodeTable: Sendable {
    private struct Nodes {
        var byKey: [InodeKey: BackingNode] = [:]
        /// Nodes the kernel still knows whose backing file is gone and whose number another item took.
        var displaced: [ObjectIdentifier: BackingNode] = [:]
    }
    private let nodes = Mutex<Nodes>(Nodes())
    /// Called outside the table lock.
    let observer = Mutex<(any DirectoryObserver)?>(nil)
    /// One descriptor per backing mount, for `open_by_handle_at`: kept while the table or a node
    /// that uses it lives, closed after (a daemon that ended in a process that goes on would
    /// otherwise keep its backing folder's file system busy: it could not be unmounted).
    private let mountAnchors = Mutex<[Int32: MountAnchor]>([:])
    let budget: DescriptorBudget
    let root: BackingNode

    init(rootFD: Int32, rootStat: stat, budget: DescriptorBudget = DescriptorBudget(limit: DescriptorShares.inForce().nodes)) {
        self.budget = budget
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
    /// inode for the same item already exists, or when the node keeps only a file handle). Nil, with
    /// `fd` closed, for a new node that would have to hold `fd` at a number the daemon keeps for its
    /// own files (`DescriptorReserve`): its item has no file handle to keep instead.
    func remember(fd: Int32, stat st: stat, parent: BackingNode) -> BackingNode? {
        let key = InodeKey(dev: st.st_dev, ino: st.st_ino)
        if key == root.key { close(fd); return root }
        // The item's handle, read only when a node that keeps just its handle has the same number.
        var item: (handle: LinuxCalls.KernelFileHandle, mountID: Int32)? = nil
        if let known = nodes.withLock({ $0.byKey[key] }) {
            if !known.holdsDescriptor { item = LinuxCalls.fileHandle(of: fd) }
            if known.isSameItem(as: item?.handle), retainIfCurrent(known) { close(fd); return known }
        }
        guard let fresh = makeNode(fd: fd, key: key, type: st.st_mode & S_IFMT, parent: parent, item: item) else { return nil }
        var isNew = false
        let node = nodes.withLock { n -> BackingNode in
            if let current = n.byKey[key] {
                // A racing lookup of the same item won: `fresh` is dropped and closes its descriptor.
                if current.isSameItem(as: fresh.handle ?? item?.handle) {
                    current.lookups += 1
                    return current
                }
                n.displaced[ObjectIdentifier(current)] = current
            }
            fresh.lookups = 1
            n.byKey[key] = fresh
            isNew = true
            return fresh
        }
        if isNew, node.isDirectory { observer.withLock { $0 }?.directoryAppeared(node) }
        return node
    }

    /// Counts one lookup of the node that holds a descriptor on the item numbered `ino` on `dev`, if
    /// the table has one (its inode cannot be freed, so the number is that item's), without opening
    /// the item. Nil for the root (never counted) and for a node keeping only its file handle.
    func retainPinned(dev: dev_t, ino: ino_t) -> BackingNode? {
        let key = InodeKey(dev: dev, ino: ino)
        if key == root.key { return nil }
        return nodes.withLock { n in
            guard let node = n.byKey[key], node.holdsDescriptor else { return nil }
            node.lookups += 1
            return node
        }
    }

    /// Registers the kernel's one lookup of an unnamed file (O_TMPFILE) through `fd`, an O_PATH
    /// descriptor on it (owned). Its node holds that descriptor whatever the budget (counted in it
    /// while there is room): an unnamed file has no name to be looked up by, and a file handle of an
    /// inode without links need not open again. A node the table held for the same number is one
    /// whose file is gone (the new file took its number): kept aside as for a lookup.
    func rememberUnnamed(fd: Int32, stat st: stat) -> BackingNode {
        let key = InodeKey(dev: st.st_dev, ino: st.st_ino)
        let node = BackingNode(fd: fd, key: key, type: S_IFREG, budget: budget.take() ? budget : nil)
        nodes.withLock { n in
            if let current = n.byKey[key] { n.displaced[ObjectIdentifier(current)] = current }
            node.lookups = 1
            n.byKey[key] = node
        }
        return node
    }

    /// Counts one lookup of `node` if it still is the table's node for its key.
    private func retainIfCurrent(_ node: BackingNode) -> Bool {
        nodes.withLock { n in
            guard n.byKey[node.key] === node else { return false }
            node.lookups += 1
            return true
        }
    }

    /// A node holding `fd` while the budget allows, else keeping only its file handle (`item`, when
    /// read already). Items without file handles hold their descriptor whatever the budget, but not
    /// at a number the daemon keeps for its own files (`DescriptorReserve`): nil then, `fd` closed.
    private func makeNode(fd: Int32, key: InodeKey, type: mode_t, parent: BackingNode,
                          item: (handle: LinuxCalls.KernelFileHandle, mountID: Int32)?) -> BackingNode? {
        let admitted = DescriptorReserve.admits(fd)
        if admitted, budget.take() { return BackingNode(fd: fd, key: key, type: type, budget: budget) }
        guard let (handle, mountID) = item ?? LinuxCalls.fileHandle(of: fd), let anchor = anchor(mountID, parent: parent) else {
            // No file handles here (or the file is a mount of its own): hold the descriptor anyway.
            guard admitted else { close(fd); return nil }
            return BackingNode(fd: fd, key: key, type: type, budget: nil)
        }
        close(fd)
        return BackingNode(handle: handle, anchor: anchor, key: key, type: type, budget: budget)
    }

    /// The file handle and mount descriptor to open `node` by (`Loopback.reopen`): the handle a node
    /// beyond the budget keeps, else one read from its descriptor at its first reopening and kept.
    /// Nil where the item has none (its file system gives no handles, or it is a mount of its own).
    func handleToOpen(_ node: BackingNode) -> (handle: LinuxCalls.KernelFileHandle, mountFD: Int32)? {
        if let handle = node.handle { return (handle, node.mountFD) }
        switch node.reopening.withLock({ $0 }) {
        case .byHandle(let h, let a): return (h, a.fd)
        case .byProcPath: return nil
        case .unknown: break
        }
        var found: (handle: LinuxCalls.KernelFileHandle, anchor: MountAnchor)? = nil
        if case .success(let item?) = node.withDescriptor({ LinuxCalls.fileHandle(of: $0) }),
           let anchor = anchor(item.mountID, parent: root) {
            found = (item.handle, anchor)
        }
        node.reopening.withLock { $0 = found.map { .byHandle($0.handle, anchor: $0.anchor) } ?? .byProcPath }
        return found.map { ($0.handle, $0.anchor.fd) }
    }

    /// A readable descriptor on the mount `mountID` (open_by_handle_at refuses O_PATH ones): the
    /// backing root, or else the parent directory, opened once per mount and kept (`mountAnchors`).
    private func anchor(_ mountID: Int32, parent: BackingNode) -> MountAnchor? {
        if let a = mountAnchors.withLock({ $0[mountID] }) { return a }
        func open(_ directory: BackingNode) -> Int32 {
            let opened = directory.withDescriptor { dfd -> Int32 in
                guard let (_, directoryMount) = LinuxCalls.fileHandle(of: dfd), directoryMount == mountID else { return -1 }
                return openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            }
            return (try? opened.get()) ?? -1
        }
        var fd = open(root)
        if fd < 0 { fd = open(parent) }
        guard fd >= 0 else { return nil }
        return mountAnchors.withLock { anchors in
            if let a = anchors[mountID] { close(fd); return a }
            let made = MountAnchor(fd)
            anchors[mountID] = made
            return made
        }
    }

    /// One more lookup of an inode already known (readdirplus of the same entry, link).
    func retain(_ node: BackingNode) {
        if node === root { return }
        nodes.withLock { _ in node.lookups += 1 }
    }

    /// The kernel forgets `count` lookups; the inode is released at zero.
    /// Returns true when the node left the table (the kernel no longer knows it).
    @discardableResult
    func forget(_ node: BackingNode, count: UInt64) -> Bool {
        if node === root { return false }
        let removed = nodes.withLock { n -> Bool in
            node.lookups = node.lookups >= count ? node.lookups - count : 0
            guard node.lookups == 0 else { return false }
            if n.byKey[node.key] === node {
                n.byKey[node.key] = nil
                return true
            }
            return n.displaced.removeValue(forKey: ObjectIdentifier(node)) != nil
        }
        if removed, node.isDirectory { observer.withLock { $0 }?.directoryForgotten(node) }
        return removed
    }

    /// The node of a backing item the kernel knows, without counting a lookup. `handle` reads the
    /// item's file handle, asked for only when the node with its number keeps just a handle.
    func existing(dev: dev_t, ino: ino_t, handle: () -> LinuxCalls.KernelFileHandle?) -> BackingNode? {
        let key = InodeKey(dev: dev, ino: ino)
        if key == root.key { return root }
        guard let node = nodes.withLock({ $0.byKey[key] }) else { return nil }
        return node.isSameItem(as: node.holdsDescriptor ? nil : handle()) ? node : nil
    }

    /// Up to `limit` regular files the kernel holds (its lookups not all forgotten), the first the
    /// table meets: the scan stops there, so it is short unless the kernel holds mostly folders.
    func regularFiles(limit: Int) -> [BackingNode] {
        nodes.withLock { n in
            var found: [BackingNode] = []
            for node in n.byKey.values where node.type == S_IFREG && node.lookups > 0 {
                found.append(node)
                if found.count >= limit { break }
            }
            return found
        }
    }

    /// Every directory the kernel knows, and the root.
    var directories: [BackingNode] { [root] + nodes.withLock { $0.byKey.values.filter(\.isDirectory) } }

    var count: Int { nodes.withLock { $0.byKey.count + $0.displaced.count } }

    /// Node descriptors held now (counted in the budget).
    var descriptorsInUse: Int { budget.inUse }
}
