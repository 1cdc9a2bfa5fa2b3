import Glibc
import FuseKit
import NameBytes
import SystemPackage
import Synchronization
import LinuxGNU

/// Settings of the passthrough.
public struct LoopbackOptions: Sendable {
    /// Seconds the kernel may cache attributes and names (the backing folder can change underneath:
    /// keep it short).
    public var attributeTimeout: Double = 1.0
    public var entryTimeout: Double = 1.0
    /// Seconds for attributes and names instead, for items on the backing root's own local file
    /// system while a watcher sees every change made there directly (`setPathsAreWatched(true)`): the
    /// watcher drops each changed item's cached name and attributes, so these only bound what a
    /// missed change could leave stale. Nil: the timeouts above always.
    public var watchedAttributeTimeout: Double? = nil
    public var watchedEntryTimeout: Double? = nil
    /// Seconds the kernel may cache "no such name" (0: a file created in the backing folder shows at once).
    public var negativeTimeout: Double = 0
    /// Seconds instead, in a directory on the backing root's own local file system while a watcher
    /// sees every change made there directly: it drops the cached "no such name" when the name
    /// appears (created, linked or renamed there; `namesMayHaveAppeared()`). Nil: `negativeTimeout`
    /// always.
    public var watchedNegativeTimeout: Double? = nil
    /// Keep page cache across opens; the kernel drops it when it sees mtime or size change.
    public var keepCache: Bool = true
    /// Names in the root directory that do not exist through the mount (the state folder).
    public var hiddenRootNames: Set<String> = []
    /// Refuse every change (the mount is read-only).
    public var readOnly: Bool = false
    /// How the daemon's descriptors are shared out (node budget, callers' names, other users'
    /// share); nil: cut from RLIMIT_NOFILE as in force when the Loopback is made.
    public var descriptors: DescriptorShares? = nil
    /// Take FUSE_POSIX_ACL at INIT: the kernel then honours POSIX ACLs in its own permission checks
    /// and keeps each inode's ACLs (asking the daemon once, until the item changes), instead of
    /// passing every `system.posix_acl_*` read on. The kernel then always checks permissions itself
    /// (as `default_permissions`), so only for mounts that do that anyway.
    public var posixACLs: Bool = false
    /// Other users may use the mount (`allow_other`): files are registered for kernel passthrough
    /// with the blocks kept for root withheld (`RootReserve`), since the kernel writes every later
    /// open of the file, whoever's, with the credentials of the registration.
    public var sharedWithOtherUsers: Bool = false
    public init() {}
}

/// A POSIX-correct passthrough of a backing folder (libfuse's passthrough_ll design, in Swift):
/// inodes are O_PATH descriptors (or, beyond the descriptor budget, kernel file handles) found by
/// backing (dev, ino) and told apart by file handle (`InodeTable`); every path is resolved relative to a
/// parent descriptor, never by string concatenation; open files are real descriptors on the backing
/// file, and reads and writes splice through them.
///
/// Lock order: `InodeTable` lock, then nothing. Directory handles have their own lock.
public final class Loopback: FuseFileSystem, @unchecked Sendable {
    public let backingRoot: String
    public let options: LoopbackOptions
    let inodes: InodeTable
    /// The hidden root names' bytes (the state folder).
    let hidden: [[UInt8]]
    private let runningAsRoot = geteuid() == 0
    /// Hidden names in the root that are directories (counted once: the state folder exists before
    /// the mount and for its whole life).
    private let hiddenRootDirectories: Int
    let backingRootBytes: [UInt8]
    /// Where the backing root is, as far as known: `backingRootBytes` until it was renamed or
    /// moved while mounted (`readLinkRelative`).
    let rootPathBytes: Mutex<[UInt8]>
    /// See `path(of:)`.
    private let pathsAreWatched = Atomic<Bool>(false)
    /// The backing root's device, and whether its file system is local (`LocalFileSystems`): only
    /// its items get the watched timeouts.
    private let rootDevice: dev_t
    private let rootIsLocal: Bool
    private let pathGeneration = Atomic<UInt64>(0)
    /// Counts the watcher's reports of names that may have appeared (`namesMayHaveAppeared()`): a
    /// lookup that found nothing gives a cacheable "no such name" only if none came in meanwhile.
    private let appearances = Atomic<UInt64>(0)
    private let backingFiles = Mutex<(any BackingFileRegistry)?>(nil)
    /// The descriptors other users' opens may hold (`max_user_open_files`, and a reserve for root
    /// and the owner); unbounded until the daemon configures it.
    public let openFiles = OpenFileBounds()
    /// How the descriptors are shared out (`LoopbackOptions.descriptors`, or the limit in force at
    /// the Loopback's making).
    public let descriptors: DescriptorShares
    /// How many node descriptors the inode table may hold (`DescriptorBudget`).
    public var nodeDescriptorBudget: Int { inodes.budget.limit }
    private let dataRequestCount = Atomic<Int>(0)
    private let quietCloses = QuietCloses()
    /// When every node's absent attributes were last forgotten (`forgetAbsentXattrs`).
    private let absentXattrsForgotten = Mutex(AbsentXattrs.Forgotten())
    private let absentXattrAnswerCount = Atomic<Int>(0)
    private let xattrCallsOnOpensCount = Atomic<Int>(0)

    /// Reads and writes that reached the daemon so far (with passthrough, an open file's do not).
    public var dataRequests: Int { dataRequestCount.load(ordering: .relaxed) }
    private let flushRequestCount = Atomic<Int>(0)
    /// FLUSH requests so far (close(2) of a file whose close can report an error; `QuietCloses`).
    public var flushRequests: Int { flushRequestCount.load(ordering: .relaxed) }
    /// Whether items can be opened by their file handles (`reopen`): the daemon has
    /// CAP_DAC_READ_SEARCH and the backing root's file system gives handles (probed at start).
    let opensByHandle: Bool
    /// Walks through `/proc/self/fd` by every Loopback of this process so far (tests count them).
    public static var procPathWalks: Int { procPathWalkCount.load(ordering: .relaxed) }
    private let listedKnownCount = Atomic<Int>(0)
    /// Entries of listings (READDIRPLUS) given from a node the table held, without opening the item
    /// (`listedEntry`; tests count them).
    public var listedKnownEntries: Int { listedKnownCount.load(ordering: .relaxed) }

    public init(backingRoot: String, options: LoopbackOptions = LoopbackOptions()) throws(Errno) {
        self.options = options
        self.hidden = options.hiddenRootNames.map { Array($0.utf8) }
        let fd = Glibc.open(backingRoot, O_PATH | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw Errno(rawValue: errno) }
        var st = stat()
        if let e = sys({ fstatat(fd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) }) { close(fd); throw e }
        self.backingRoot = backingRoot
        backingRootBytes = Array(backingRoot.nameBytes)
        rootPathBytes = Mutex(backingRootBytes)
        rootDevice = st.st_dev
        rootIsLocal = LocalFileSystems.contains(fd)
        hiddenRootDirectories = options.hiddenRootNames.filter { name in
            var sub = stat()
            return fstatat(fd, name, &sub, AT_SYMLINK_NOFOLLOW) == 0 && (sub.st_mode & S_IFMT) == S_IFDIR
        }.count
        let shares = options.descriptors ?? DescriptorShares.inForce()
        descriptors = shares
        inodes = InodeTable(rootFD: fd, rootStat: st, budget: DescriptorBudget(limit: shares.nodes))
        opensByHandle = Self.canOpenByHandle(fd)
    }

    /// True when `open_by_handle_at` opens the backing root by its handle (not without
    /// CAP_DAC_READ_SEARCH, nor on a file system without handles: overlayfs without nfs_export).
    private static func canOpenByHandle(_ rootFD: Int32) -> Bool {
        guard let (handle, _) = LinuxCalls.fileHandle(of: rootFD) else { return false }
        let anchor = openat(rootFD, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard anchor >= 0 else { return false }
        defer { close(anchor) }
        let fd = LinuxCalls.open(handle, mountFD: anchor, flags: O_PATH | O_CLOEXEC)
        guard fd >= 0 else { return false }
        close(fd)
        return true
    }

    /// Opens the backing item itself (not O_PATH) with `flags`: by its kernel file handle where it
    /// can (`open_by_handle_at`, a couple of microseconds), else through `/proc/self/fd/N` (a procfs
    /// walk, ten times that: it was most of the cost of an open through the mount). Both reach the
    /// inode the node holds, whatever its names are now, and check the daemon's access the same
    /// way; a handle that fails for any reason (the file is gone, a file system that refuses)
    /// leaves the answer to /proc.
    func reopen(_ node: BackingNode, flags: Int32) -> Result<Int32, Errno> {
        if opensByHandle, let (handle, mountFD) = inodes.handleToOpen(node) {
            let fd = retryingEINTR { LinuxCalls.open(handle, mountFD: mountFD, flags: flags) }
            if fd >= 0 { return .success(fd) }
        }
        return node.withFD { fd in withProcPath(fd) { p in sysValue { Glibc.open(p, flags) } } }
    }

    /// An xattr call on `node`: on a descriptor of the item for regular files and directories (a
    /// file's open through the mount while there is one, else the file by `reopen`, read-only:
    /// f*xattr need no more; a directory reopened from its own descriptor), by its /proc path for the others (symlinks, devices, FIFOs and sockets, which must not
    /// or cannot be opened) and when the item cannot be opened (a daemon that is not root, on a
    /// file it may not read: the path call needs no read permission).
    func xattrCall<T: BinaryInteger>(_ node: BackingNode, onDescriptor: (Int32) -> T, onPath: (UnsafePointer<CChar>) -> T) -> Result<T, Errno> {
        // A file open through the mount already has a descriptor of the item: one call, no reopen
        // (f*xattr need no access mode, and the open's inode is the node's).
        if node.type == S_IFREG, let open = node.latestOpen.withLock({ $0.file }) {
            xattrCallsOnOpensCount.add(1, ordering: .relaxed)
            return withExtendedLifetime(open) { sysValue { onDescriptor(open.fd) } }
        }
        let opened: Result<Int32, Errno>? = switch node.type {
        case S_IFDIR: node.withFD { fd in sysValue { openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC) } }
        case S_IFREG: reopen(node, flags: O_RDONLY | O_NONBLOCK | O_CLOEXEC)
        default: nil
        }
        if case .success(let fd)? = opened {
            defer { close(fd) }
            return sysValue { onDescriptor(fd) }
        }
        return node.withFD { fd in withProcPath(fd) { p in sysValue { onPath(p) } } }
    }

    /// Installs the observer of known directories and tells it about those known already.
    public func setDirectoryObserver(_ observer: (any DirectoryObserver)?) {
        inodes.observer.withLock { $0 = observer }
        if let observer { for d in inodes.directories { observer.directoryAppeared(d) } }
    }

    /// The FUSE node id of a node.
    public func id(of node: BackingNode) -> InodeID { inodes.id(of: node) }

    /// The node of `name` in `directory` if the kernel knows it (no lookup is counted).
    public func knownChild(of directory: BackingNode, named name: String) -> BackingNode? {
        let found = directory.withDescriptor { dfd -> BackingNode? in
            name.withNameCString { cname -> BackingNode? in
                var st = stat()
                guard fstatat(dfd, cname, &st, AT_SYMLINK_NOFOLLOW) == 0 else { return nil }
                return inodes.existing(dev: st.st_dev, ino: st.st_ino) { LinuxCalls.fileHandle(in: dfd, name: cname) }
            }
        }
        return (try? found.get()) ?? nil
    }

    /// How many inodes the kernel currently holds (for status and memory measurements).
    public var inodeCount: Int { inodes.count }

    // MARK: Helpers shared by operations

    public func inode(_ id: InodeID) -> BackingNode { inodes.inode(id) }

    /// True for a reserved name in the mount's root.
    @inline(__always)
    public func isHidden(parent: InodeID, _ name: FileName) -> Bool {
        guard parent == .root, !hidden.isEmpty else { return false }
        for h in hidden {
            var i = 0
            var same = true
            while i < h.count { if UInt8(bitPattern: name.cString[i]) != h[i] { same = false; break }; i += 1 }
            if same && name.cString[i] == 0 { return true }
        }
        return false
    }

    @inline(__always)
    func attributes(of node: BackingNode) -> Result<stat, Errno> {
        var st = stat()
        if let e = node.withFD({ fd in sys { fstatat(fd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) } }) { return .failure(e) }
        return .success(st)
    }

    /// The root as seen through the mount: hidden subdirectories do not count in its link count.
    /// (The hidden folder is the daemon's own and exists for the mount's life: counted once, at start.)
    func rootAttributes(_ st: stat) -> stat {
        var st = st
        if st.st_nlink > UInt(2 + hiddenRootDirectories) { st.st_nlink -= UInt(hiddenRootDirectories) }
        return st
    }



    /// Looks `name` up in `parent` and counts one kernel lookup.
    public func lookupEntry(parent: BackingNode, name: UnsafePointer<CChar>) -> Result<EntryReply, Errno> {
        let fd: Int32
        switch parent.withFD({ pfd in sysValue { openat(pfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC) } }) {
        case .success(let f): fd = f
        case .failure(let e): return .failure(e)
        }
        var st = stat()
        if let e = sys({ fstatat(fd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) }) { close(fd); return .failure(e) }
        guard let node = inodes.remember(fd: fd, stat: st, parent: parent) else { return .failure(openFiles.refusedAtReserve()) }
        let e = entry(node, st)
        // The kernel keeps what this reply gives at least this long (it starts counting later).
        let lifetime = min(e.attributeTimeout, e.entryTimeout)
        noteLookup(of: node, in: parent, name: name, freshUntil: lifetime > 0 ? Self.entryClock() &+ UInt64(lifetime * 1e9) : 0)
        return .success(e)
    }

    /// A listing's entry for `name` in `parent` (READDIRPLUS), counting one lookup, as `lookupEntry`
    /// gives it; but when the table holds a node pinned by its descriptor for the item the name is
    /// now (a folder listed again, `rm -rf` of what was just made), one fstatat by name instead of
    /// openat, fstat and close. A pinned node's inode cannot be freed, so its number is its own: the
    /// number the name has now is that node's item, and the attributes are read now, as a lookup
    /// reads them. Otherwise (a new item, a node keeping only its handle, the root) `lookupEntry`.
    func listedEntry(parent: BackingNode, name: UnsafePointer<CChar>) -> Result<EntryReply, Errno> {
        var st = stat()
        if parent.withFD({ pfd in sys { fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) } }) == nil,
           let node = inodes.retainPinned(dev: st.st_dev, ino: st.st_ino) {
            listedKnownCount.add(1, ordering: .relaxed)
            let e = entry(node, st)
            let lifetime = min(e.attributeTimeout, e.entryTimeout)
            noteLookup(of: node, in: parent, name: name, freshUntil: lifetime > 0 ? Self.entryClock() &+ UInt64(lifetime * 1e9) : 0)
            return .success(e)
        }
        return lookupEntry(parent: parent, name: name)
    }

    /// Whether the kernel surely still holds a fresh entry and attributes for `name` in `parent`,
    /// the non-directory with inode number `ino`: the node it knows by that number was last given to
    /// it under this name in this folder, less than half the lifetime of that reply ago. A listing
    /// (READDIRPLUS) then gives the name alone (node id 0), which the kernel takes as "no attributes
    /// for this entry" and leaves that entry as it is. Given again, the kernel would take the
    /// attributes anew and drop the inode's cached POSIX ACLs (`fuse_direntplus_link`), so every
    /// `ls -l` asked the daemon for every file's ACL again on mounts whose kernel keeps them.
    /// Nothing is held past its lifetime: what the kernel keeps expires when it would have, and a
    /// change the watcher reports drops it as before; the half lifetime left is for the next listing
    /// to give the entry again before it expires, so a folder listed over and over keeps its entries.
    func kernelHoldsFreshEntry(in parent: BackingNode, name: UnsafePointer<CChar>, ino: ino_t) -> Bool {
        // Only a node pinned by its descriptor: its inode number cannot have been reused.
        guard let node = inodes.existing(dev: parent.key.dev, ino: ino, handle: { nil }), !node.isDirectory else { return false }
        return node.lookedUpIn.withLock { last in
            guard last.node === parent, last.freshUntil != 0, last.name.count == strlen(name) + 1,
                  last.name.withUnsafeBytes({ memcmp($0.baseAddress!, name, $0.count) == 0 }) else { return false }
            let now = Self.entryClock()
            guard now < last.freshUntil else { return false }
            // Half of the lifetime is left only if the reply was given less than half of it ago:
            // freshUntil - now > (freshUntil - givenAt) / 2, with givenAt unknown here, so the
            // lifetime itself is used: the watched one or the plain one, whichever the reply had.
            return last.freshUntil - now > halfLifetime(of: node)
        }
    }

    /// An open of the regular file `node`: what the kernel holds of its attributes may not stay
    /// whole. A read that bypasses the page cache (kernel passthrough, or direct I/O to the daemon)
    /// makes the kernel drop the inode's atime (`fuse_invalidate_atime`), and the next `fstat` of
    /// any caller asks the daemon (a GETATTR round trip: `grep -r` of a tree listed before sent one
    /// per file). So the next listing gives this entry with its attributes again, which the kernel
    /// takes whole, rather than by name alone (`kernelHoldsFreshEntry`). Not where the kernel keeps
    /// POSIX ACLs (`posixACLs`): an entry given again drops the inode's cached ACLs, one request at
    /// the next `ls -l` for the one this saves.
    @inline(__always)
    private func kernelMayDropTimes(of node: BackingNode) {
        guard !options.posixACLs else { return }
        node.lookedUpIn.withLock { $0.freshUntil = 0 }
    }

    /// Half of the entry lifetime the kernel would be given for `node` now, in nanoseconds.
    private func halfLifetime(of node: BackingNode) -> UInt64 {
        let t = timeouts(forDevice: node.key.dev)
        return UInt64(min(t.attribute, t.entry) * 0.5e9)
    }

    /// Nanoseconds of the coarse monotonic clock.
    @inline(__always)
    static func entryClock() -> UInt64 {
        var t = timespec()
        clock_gettime(CLOCK_MONOTONIC_COARSE, &t)
        return UInt64(t.tv_sec) &* 1_000_000_000 &+ UInt64(t.tv_nsec)
    }

    @inline(__always)
    func entry(_ node: BackingNode, _ st: stat) -> EntryReply {
        let t = timeouts(forDevice: st.st_dev)
        return EntryReply(inode: inodes.id(of: node), attributes: st, attributeTimeout: t.attribute, entryTimeout: t.entry)
    }

    /// Seconds the kernel may cache the attributes `st` (see `LoopbackOptions.watchedAttributeTimeout`).
    @inline(__always)
    public func attributeTimeout(for st: stat) -> Double { timeouts(forDevice: st.st_dev).attribute }

    /// The watched timeouts for an item on `dev` when every change made directly to it reaches a watcher (it is on
    /// the backing root's local file system, and every directory the kernel knows is watched), else
    /// the plain ones.
    @inline(__always)
    private func timeouts(forDevice dev: dev_t) -> (attribute: Double, entry: Double) {
        guard rootIsLocal && dev == rootDevice && pathsAreWatched.load(ordering: .relaxed) else {
            return (options.attributeTimeout, options.entryTimeout)
        }
        return (options.watchedAttributeTimeout ?? options.attributeTimeout, options.watchedEntryTimeout ?? options.entryTimeout)
    }

    /// The mode a new item asked for with `mode` is made with in `parent`: the caller's umask taken
    /// off, unless the folder has a default ACL, which then decides the item's permissions instead
    /// (the kernel's `posix_acl_create`, done by the backing file system: the daemon's own umask is
    /// 0). The kernel sends the mode unmasked with the caller's umask (FUSE_DONT_MASK); a kernel
    /// that masked it already sends it with nothing left to take off. Costs one getxattr of the
    /// folder when the umask takes bits off.
    func creationMode(_ mode: mode_t, in parent: BackingNode, context: RequestContext) -> mode_t {
        let masked = mode & ~(context.umask & 0o777)
        guard masked != mode, hasDefaultACL(parent) else { return masked }
        return mode
    }

    /// Whether the folder `directory` has a default ACL (`system.posix_acl_default`); false when it
    /// cannot be read (a file system without ACLs).
    func hasDefaultACL(_ directory: BackingNode) -> Bool {
        let name = "system.posix_acl_default"
        let size = directory.withDescriptor { fd -> Int in
            let n = LinuxCalls.getxattrat(fd, ".", name, nil, 0)
            guard n < 0, errno == ENOSYS else { return n }
            // Before Linux 6.13 (no getxattrat): by the folder descriptor's path in /proc.
            return withProcPath(fd) { LinuxCalls.getxattr($0, name, nil, 0) }
        }
        return ((try? size.get()) ?? -1) > 0
    }

    /// `body` (a write of data to an open file) as `context`'s caller's: for a user other than root,
    /// without the blocks the file system keeps for root (`RootReserve`), so that its writes end with
    /// ENOSPC where they end on the native folder, and the last blocks stay for root's own work, the
    /// mount's event log and store among it. Root's own are made as before.
    @inline(__always)
    func asCaller<T>(_ context: RequestContext, _ body: () -> T) -> T {
        RootReserve.withheld(as: context.uid, body)
    }

    /// New items belong to the caller, as on the native folder. The daemon creates them as root, then
    /// hands them over; in a set-group-ID directory the group stays the directory's (as the kernel
    /// already chose).
    func giveToCaller(parent: BackingNode, name: UnsafePointer<CChar>, context: RequestContext) -> Errno? {
        guard runningAsRoot, context.uid != 0 || context.gid != 0 else { return nil }
        return parent.withFD { pfd in
            var pst = stat()
            if let e = sys({ fstatat(pfd, "", &pst, AT_EMPTY_PATH) }) { return e }
            let gid: gid_t = (pst.st_mode & S_ISGID) != 0 ? gid_t.max : context.gid
            return sys { fchownat(pfd, name, context.uid, gid, AT_SYMLINK_NOFOLLOW) }
        }
    }

    /// chown(2) clears a regular file's set-user-ID and set-group-ID (root's own chown too), which a
    /// caller making its own file keeps natively: after `giveToCaller`, the bits the file was made
    /// with (`made`: its mode before) are set again on `fd`; set-group-ID with group execute only if
    /// the caller is in the file's group (the kernel drops it at creation otherwise: the group is a
    /// set-group-ID folder's).
    func keepSetIDBits(_ fd: Int32, made: mode_t, caller: RequestContext) -> Errno? {
        var keep = made & (S_ISUID | S_ISGID)
        guard runningAsRoot, keep != 0 else { return nil }
        var st = stat()
        if let e = sys({ fstat(fd, &st) }) { return e }
        if keep & S_ISGID != 0, made & S_IXGRP != 0, !ProcessGroups.contains(st.st_gid, caller: caller) { keep &= ~S_ISGID }
        guard keep != 0, st.st_mode & keep != keep else { return nil }
        return sys { fchmod(fd, (st.st_mode & 0o7777) | keep) }
    }

    /// Drops set-user-ID and set-group-ID as the kernel does for chown(2), a write or a truncate by
    /// `caller`, and touches the change time: what FUSE_HANDLE_KILLPRIV_V2 leaves to the file system.
    /// chown(-1, -1) by the daemon (root) does most of it on the backing file, capabilities included:
    /// set-user-ID always, set-group-ID of a group-executable file. A caller who is not root and not in
    /// the file's group also loses set-group-ID without group execute (the VFS's rule).
    /// `onlyIfSet`: nothing at all unless one of the bits is set (after a truncate, which already
    /// changed the times and dropped capabilities).
    public func dropPrivileges(of node: BackingNode, caller: RequestContext, onlyIfSet: Bool = false) -> Errno? {
        if onlyIfSet {
            switch attributes(of: node) {
            case .failure(let e): return e
            case .success(let st): guard st.st_mode & (S_ISUID | S_ISGID) != 0 else { return nil }
            }
        }
        if let e = node.withFD({ fd in sys { fchownat(fd, "", uid_t.max, gid_t.max, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) } }) { return e }
        guard caller.uid != 0, node.type == S_IFREG else { return nil }
        let st: stat
        switch attributes(of: node) {
        case .failure(let e): return e
        case .success(let s): st = s
        }
        guard st.st_mode & (S_ISGID | S_IXGRP) == S_ISGID, !ProcessGroups.contains(st.st_gid, caller: caller) else { return nil }
        return node.withFD { fd in chmod(pathDescriptor: fd, st.st_mode & 0o7777 & ~S_ISGID) }
    }

    /// The item's current path relative to the backing root ("" for the root), read from the kernel
    /// (`/proc/self/fd`), so it is right even after renames made outside the mount; beyond PATH_MAX,
    /// built from the tree (`LongPaths.swift`). Nil when the item was deleted or is outside the
    /// backing root.
    ///
    /// A directory's path is kept between calls while `pathsAreWatched` (every rename or removal
    /// through the mount, and every one the backing watcher reports, starts a new path generation);
    /// without a watcher, or for other items, it is read each time.
    public func path(of node: BackingNode) -> String? { path(of: node, as: { $0 }) }

    /// `path(of:)` turned into a `T` by `transform` (nil: no such path); for a directory the `T`
    /// is what is kept, so a caller that parses paths does it once per path generation.
    public func path<T: Sendable>(of node: BackingNode, as transform: (String) -> T?) -> T? {
        if node === inodes.root { return transform("") }
        guard node.isDirectory, pathsAreWatched.load(ordering: .relaxed) else { return readPath(of: node).flatMap(transform) }
        let generation = pathGeneration.load(ordering: .acquiring)
        if let cached = node.cachedPath.withLock({ $0 }), cached.generation == generation, let value = cached.path as? T {
            return value
        }
        let value = readPath(of: node).flatMap(transform)
        if let value { node.cachedPath.withLock { $0 = (generation, value) } }
        return value
    }

    /// Turns keeping directory paths on (the caller watches the backing folder for renames and
    /// removals made outside the mount, and calls `pathsChanged()` for each) or off.
    public func setPathsAreWatched(_ watched: Bool) {
        pathGeneration.add(1, ordering: .releasing)
        pathsAreWatched.store(watched, ordering: .relaxed)
    }

    /// Forgets every kept directory path (a rename or removal happened).
    public func pathsChanged() { pathGeneration.add(1, ordering: .releasing) }

    /// The path from `pathBytes(of:)` (beyond PATH_MAX too: `LongPaths.swift`).
    private func readPath(of node: BackingNode) -> String? {
        guard let bytes = pathBytes(of: node) else { return nil }
        return String(nameBytes: bytes)
    }

    // MARK: FuseFileSystem

    public func initialize(connection c: inout ConnectionInfo) {
        // Without writeback caching, a write is in the backing file when write(2) returns.
        c.want.insert([.exportSupport, .atomicOTrunc, .spliceRead, .spliceWrite, .spliceMove, .autoInvalidateData,
                       .readdirPlus, .readdirPlusAuto, .parallelDirectoryOps, .asyncDirectIO])
        c.want.remove(.writebackCache)
        if options.posixACLs { c.want.insert(.posixACL) }
        // New items' modes arrive as the caller asked, with its umask beside them: a folder's default
        // ACL, not the umask, decides them natively (`creationMode`).
        c.want.insert(.dontMask)
        // A symlink's target is kept in the kernel's page cache of its inode: a link's target never
        // changes in place (a new target is a new link: a new inode, and a new node here).
        c.want.insert(.cacheSymlinks)
        // Locks stay in the kernel (POSIX and flock semantics among every user of the mount).
        c.want.remove([.posixLocks, .flockLocks])
    }

    public func lookup(_ request: consuming Request, parent: InodeID, name: FileName) {
        if isHidden(parent: parent, name) { return request.reply(entry: .negative(timeout: options.negativeTimeout)) }
        let node = inode(parent)
        let seen = appearances.load(ordering: .acquiring)
        switch lookupEntry(parent: node, name: name.cString) {
        case .success(let e): request.reply(entry: e)
        case .failure(.noSuchFileOrDirectory): request.reply(entry: .negative(timeout: negativeTimeout(in: node, since: seen)))
        case .failure(let e): request.reply(error: e)
        }
    }

    /// Seconds the kernel may cache "no such name" in `directory` (the watched lifetime when the
    /// backing watcher sees every name that appears there: `timeouts(forDevice:)`'s rule), for a lookup
    /// that began when `appearances` was `seen`. A name the watcher reported meanwhile may be this
    /// one, and its invalidation may have come before the kernel has the answer to drop (it drops
    /// only what it holds): then nothing is cached.
    func negativeTimeout(in directory: BackingNode, since seen: UInt64) -> Double {
        guard let watched = options.watchedNegativeTimeout, rootIsLocal, directory.key.dev == rootDevice,
              pathsAreWatched.load(ordering: .relaxed) else { return options.negativeTimeout }
        return appearances.load(ordering: .acquiring) == seen ? watched : 0
    }

    /// The backing watcher saw a name appear, or may have (a create, link or rename made directly in
    /// the backing folder, or lost events), and is about to drop the kernel's cached entry for it:
    /// a lookup answering "no such name" right now caches nothing.
    public func namesMayHaveAppeared() { appearances.add(1, ordering: .releasing) }

    /// How many `namesMayHaveAppeared()` so far.
    var appearanceCount: UInt64 { appearances.load(ordering: .acquiring) }

    public func forget(_ id: InodeID, count: UInt64) {
        forget(inode(id), count: count)
    }

    public func regularFilesTheKernelHolds(limit: Int) -> [InodeID] {
        inodes.regularFiles(limit: limit).map(inodes.id(of:))
    }

    /// Counts down the kernel's lookups of `node`; once it is gone, so is its passthrough backing file.
    private func forget(_ node: BackingNode, count: UInt64) {
        guard inodes.forget(node, count: count), node.type == S_IFREG else { return }
        let id = node.passthrough.withLock { use -> Int32 in
            defer { use.backingID = 0 }
            return use.backingID
        }
        if id > 0 { backingFiles.withLock { $0 }?.closeBacking(id) }
    }

    public func getattr(_ request: consuming Request, inode id: InodeID, file: FileInfo?) {
        switch attributes(of: inode(id)).map({ id == .root ? rootAttributes($0) : $0 }) {
        case .success(let st): request.reply(attributes: st, timeout: attributeTimeout(for: st))
        case .failure(let e): request.reply(error: e)
        }
    }

    /// chmod, chown, truncate and utimens, in that order; returns the new attributes. A SETATTR with
    /// nothing to set drops privileges (`SetAttributes.dropsPrivileges`), as does a truncate the
    /// kernel marks `killSUID`.
    public func setAttributes(_ node: BackingNode, _ attr: stat, changing: SetAttributes, open: OpenFile?,
                              caller: RequestContext) -> Result<stat, Errno> {
        if changing.dropsPrivileges {
            // chown(f, -1, -1), or a write's removal of privileges: the caller's system call tells
            // (`CallerSystemCall`); when it cannot be read, both are taken as chown(-1, -1) was.
            switch CallerSystemCall.isChown(caller.pid) {
            case true?:
                if case .success(let st) = attributes(of: node), CallerSystemCall.chownIsRefused(st, caller: caller) {
                    return .failure(.notPermitted)
                }
            case false? where caller.uid == 0:
                // Root's write (CAP_FSETID) drops no set-ID bit: the kernel sent this SETATTR after
                // removing the file's capability (a REMOVEXATTR), the only privilege root's write drops.
                return attributes(of: node)
            default: break
            }
            if let e = dropPrivileges(of: node, caller: caller) { return .failure(e) }
            return attributes(of: node)
        }
        let fh: Int32? = open?.fd
        if changing.contains(.mode) {
            let e: Errno? = if let fh { sys { fchmod(fh, attr.st_mode) } }
                            else { node.withFD { fd in chmod(pathDescriptor: fd, attr.st_mode) } }
            if let e { return .failure(e) }
        }
        if !changing.isDisjoint(with: [.uid, .gid]) {
            let uid = changing.contains(.uid) ? attr.st_uid : uid_t.max
            let gid = changing.contains(.gid) ? attr.st_gid : gid_t.max
            if let e = node.withFD({ fd in sys { fchownat(fd, "", uid, gid, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) } }) { return .failure(e) }
        }
        if changing.contains(.size) {
            open?.markModified()
            let e: Errno? = if let fh { sys { ftruncate(fh, attr.st_size) } }
                            else { node.withFD { fd in withProcPath(fd) { p in sys { truncate(p, attr.st_size) } } } }
            if let e { return .failure(e) }
            // The daemon truncated as root: set-user-ID and set-group-ID stay unless dropped for the
            // caller (marked by the kernel with KILLPRIV_V2; without it, any caller but root).
            if changing.contains(.killSUID) || caller.uid != 0,
               let e = dropPrivileges(of: node, caller: caller, onlyIfSet: true) { return .failure(e) }
        }
        if !changing.isDisjoint(with: [.atime, .mtime, .atimeNow, .mtimeNow]) {
            var times = (timespec(tv_sec: 0, tv_nsec: Int(UTIME_OMIT)), timespec(tv_sec: 0, tv_nsec: Int(UTIME_OMIT)))
            if changing.contains(.atimeNow) { times.0.tv_nsec = Int(UTIME_NOW) } else if changing.contains(.atime) { times.0 = attr.st_atim }
            if changing.contains(.mtimeNow) { times.1.tv_nsec = Int(UTIME_NOW) } else if changing.contains(.mtime) { times.1 = attr.st_mtim }
            let e: Errno? = withUnsafePointer(to: &times) { tp in
                tp.withMemoryRebound(to: timespec.self, capacity: 2) { ts in
                    if let fh { return sys { futimens(fh, ts) } }
                    return node.withFD { nfd in
                        if node.type == S_IFLNK { return sys { utimensat(nfd, "", ts, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) } }
                        return setTimes(pathDescriptor: nfd, ts)
                    }
                }
            }
            if let e { return .failure(e) }
        }
        return attributes(of: node)
    }

    public func setattr(_ request: consuming Request, inode id: InodeID, attributes attr: stat, changing: SetAttributes, file: FileInfo?) {
        switch setAttributes(inode(id), attr, changing: changing, open: file.map { OpenFile.from($0.handle) }, caller: request.context) {
        case .success(let st): request.reply(attributes: st, timeout: attributeTimeout(for: st))
        case .failure(let e): request.reply(error: e)
        }
    }

    public func readlink(_ request: consuming Request, inode id: InodeID) {
        let buf = UnsafeMutablePointer<CChar>.allocate(capacity: Int(PATH_MAX) + 1)
        defer { buf.deallocate() }
        switch inode(id).withFD({ fd in sysValue { readlinkat(fd, "", buf, Int(PATH_MAX)) } }) {
        case .success(let n):
            buf[n] = 0
            request.reply(link: buf)
        case .failure(let e): request.reply(error: e)
        }
    }

    // MARK: Logic shared with the coordinated layer (no request; an errno or a result)

    /// Hands a just-created item to the caller and looks it up; removes it again on failure.
    private func finishCreate(parent: BackingNode, name: UnsafePointer<CChar>, context: RequestContext, directory: Bool) -> Result<EntryReply, Errno> {
        if let e = giveToCaller(parent: parent, name: name, context: context) {
            _ = parent.withDescriptor { unlinkat($0, name, directory ? AT_REMOVEDIR : 0) }
            return .failure(e)
        }
        return lookupEntry(parent: parent, name: name)
    }

    public func makeNode(parent: BackingNode, name: UnsafePointer<CChar>, mode: mode_t, device: dev_t, context: RequestContext) -> Result<EntryReply, Errno> {
        let mode = creationMode(mode, in: parent, context: context)
        if let e = parent.withFD({ pfd in sys { mknodat(pfd, name, mode, device) } }) { return .failure(e) }
        return finishCreate(parent: parent, name: name, context: context, directory: false)
    }

    public func makeDirectory(parent: BackingNode, name: UnsafePointer<CChar>, mode: mode_t, context: RequestContext) -> Result<EntryReply, Errno> {
        let mode = creationMode(mode, in: parent, context: context)
        if let e = parent.withFD({ pfd in sys { mkdirat(pfd, name, mode) } }) { return .failure(e) }
        return finishCreate(parent: parent, name: name, context: context, directory: true)
    }

    public func makeSymlink(target: UnsafePointer<CChar>, parent: BackingNode, name: UnsafePointer<CChar>, context: RequestContext) -> Result<EntryReply, Errno> {
        if let e = parent.withFD({ pfd in sys { symlinkat(target, pfd, name) } }) { return .failure(e) }
        return finishCreate(parent: parent, name: name, context: context, directory: false)
    }

    public func makeLink(_ node: BackingNode, newParent: BackingNode, newName: UnsafePointer<CChar>) -> Result<EntryReply, Errno> {
        let e = node.withFD { fd in
            newParent.withFD { pfd in withProcPath(fd) { path in sys { linkat(AT_FDCWD, path, pfd, newName, AT_SYMLINK_FOLLOW) } } }
        }
        if let e { return .failure(e) }
        return attributes(of: node).map { st in
            inodes.retain(node)
            // An unnamed file's first name (one link now): its path from now on, which /proc cannot
            // give (its descriptor never had a name). A hard link of a named file keeps its own.
            if st.st_nlink == 1, node.type == S_IFREG { noteLookup(of: node, in: newParent, name: newName) }
            return entry(node, st)
        }
    }

    public func removeItem(parent: BackingNode, name: UnsafePointer<CChar>, directory: Bool) -> Errno? {
        let e = parent.withFD { pfd in sys { unlinkat(pfd, name, directory ? AT_REMOVEDIR : 0) } }
        if directory { pathsChanged() }
        return e
    }

    public func renameItem(parent: BackingNode, name: UnsafePointer<CChar>, newParent: BackingNode, newName: UnsafePointer<CChar>, flags: UInt32) -> Errno? {
        let e = parent.withFD { from in newParent.withFD { to in sys { LinuxCalls.renameat2(from, name, to, newName, flags) } } }
        pathsChanged()
        return e
    }

    /// The attributes of `name` in `parent` without following a final symlink, or nil if absent.
    public func itemAttributes(parent: BackingNode, name: UnsafePointer<CChar>) -> stat? {
        let found = parent.withDescriptor { pfd -> stat? in
            var st = stat()
            return fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 ? st : nil
        }
        return (try? found.get()) ?? nil
    }

    // MARK: Adapters

    public func mknod(_ request: consuming Request, parent: InodeID, name: FileName, mode: mode_t, device: dev_t) {
        if isHidden(parent: parent, name) { return request.reply(error: .notPermitted) }
        request.reply(makeNode(parent: inode(parent), name: name.cString, mode: mode, device: device, context: request.context))
    }

    public func mkdir(_ request: consuming Request, parent: InodeID, name: FileName, mode: mode_t) {
        if isHidden(parent: parent, name) { return request.reply(error: .notPermitted) }
        request.reply(makeDirectory(parent: inode(parent), name: name.cString, mode: mode, context: request.context))
    }

    public func symlink(_ request: consuming Request, target: UnsafePointer<CChar>, parent: InodeID, name: FileName) {
        if isHidden(parent: parent, name) { return request.reply(error: .notPermitted) }
        request.reply(makeSymlink(target: target, parent: inode(parent), name: name.cString, context: request.context))
    }

    public func link(_ request: consuming Request, inode id: InodeID, newParent: InodeID, newName: FileName) {
        if isHidden(parent: newParent, newName) { return request.reply(error: .notPermitted) }
        request.reply(makeLink(inode(id), newParent: inode(newParent), newName: newName.cString))
    }

    public func unlink(_ request: consuming Request, parent: InodeID, name: FileName) {
        if isHidden(parent: parent, name) { return request.reply(error: .noSuchFileOrDirectory) }
        request.reply(removeItem(parent: inode(parent), name: name.cString, directory: false))
    }

    public func rmdir(_ request: consuming Request, parent: InodeID, name: FileName) {
        if isHidden(parent: parent, name) { return request.reply(error: .noSuchFileOrDirectory) }
        request.reply(removeItem(parent: inode(parent), name: name.cString, directory: true))
    }

    public func rename(_ request: consuming Request, parent: InodeID, name: FileName, newParent: InodeID, newName: FileName, flags: UInt32) {
        if isHidden(parent: parent, name) { return request.reply(error: .noSuchFileOrDirectory) }
        if isHidden(parent: newParent, newName) { return request.reply(error: .notPermitted) }
        request.reply(renameItem(parent: inode(parent), name: name.cString, newParent: inode(newParent), newName: newName.cString, flags: flags))
    }

    /// Opens the backing file for an open/create handle. O_NOFOLLOW is dropped: the O_PATH descriptor
    /// already is the file. O_DIRECT is honoured by the kernel side (direct_io), not on the backing file,
    /// whose alignment rules the caller's buffers need not meet.
    ///
    /// An O_TRUNC open by a caller other than root drops set-user-ID and set-group-ID as the VFS
    /// would (the daemon's own truncate, as root, keeps them; with FUSE_HANDLE_KILLPRIV_V2 the kernel
    /// leaves this to the file system).
    ///
    /// A user other than root and the owner at its bound of open files (`OpenFileBounds`) gets
    /// ENFILE, nothing opened or truncated.
    ///
    /// `passthrough` false: the daemon serves this open's reads and writes whatever the mount's
    /// passthrough (the layer above must see its writes), with `direct_io`, when the inode has no
    /// passthrough open (else it is an open as any other: `servedByDaemon` false).
    public func openFile(_ node: BackingNode, flags: Int32, caller: RequestContext, passthrough: Bool = true) -> Result<OpenFile, Errno> {
        let hold: OpenFileBounds.Hold?
        switch openFiles.take(caller.uid) {
        case .success(let h): hold = h
        case .failure(let e): return .failure(e)
        }
        guard roomToTruncate(flags) else {
            hold?.giveBack()
            return .failure(Errno(rawValue: ENFILE))
        }
        let f = (flags & ~(O_NOFOLLOW | O_DIRECT | O_CREAT | O_EXCL)) | O_CLOEXEC
        var opened = reopen(node, flags: f)
        // Not kept at a number the daemon keeps for itself (`DescriptorReserve`); a truncating open,
        // asked before, is never refused once it has changed its file.
        if case .success(let fd) = opened, flags & O_TRUNC == 0, !openFiles.mayKeep(fd) {
            close(fd)
            opened = .failure(Errno(rawValue: ENFILE))
        }
        if case .success = opened, flags & O_TRUNC != 0, caller.uid != 0 {
            _ = dropPrivileges(of: node, caller: caller, onlyIfSet: true)
        }
        switch opened {
        case .success(let fd):
            let open = passthrough || node.type != S_IFREG ? makeOpen(fd, node, flags) : makeServedOpen(fd, node, flags)
            open.hold = hold
            if node.type == S_IFREG { kernelMayDropTimes(of: node) }
            return .success(open)
        case .failure(let e):
            hold?.giveBack()
            return .failure(e)
        }
    }

    /// Whether an open that changes its file as it opens (`O_TRUNC`) may be made: a descriptor below
    /// the daemon's reserve is free (`OpenFileBounds.hasRoom`, probed with the backing root's).
    /// Other opens are checked on the descriptor they took (`OpenFileBounds.mayKeep`).
    private func roomToTruncate(_ flags: Int32) -> Bool {
        flags & O_TRUNC == 0 || ((try? inodes.root.withDescriptor { openFiles.hasRoom(probing: $0) }.get()) ?? true)
    }

    /// An open the daemon serves on purpose (`openFile(passthrough: false)`): only while the inode
    /// has no passthrough open, else an open as any other.
    private func makeServedOpen(_ fd: Int32, _ node: BackingNode, _ flags: Int32) -> OpenFile {
        let served = node.passthrough.withLock { use -> Bool in
            if use.backingID > 0 && use.opens > 0 { return false }
            use.served += 1
            return true
        }
        guard served else { return makeOpen(fd, node, flags) }
        let open = OpenFile(fd: fd, inode: node, flags: flags, servedByDaemon: true)
        node.latestOpen.withLock { $0.file = open }
        return open
    }

    /// Lets regular files use kernel passthrough through `registry` once it is enabled.
    public func setBackingFileRegistry(_ registry: (any BackingFileRegistry)?) {
        backingFiles.withLock { $0 = registry }
    }

    /// An open of a backing file: with passthrough when the mount has it, the file is regular, and the
    /// inode's first open could register it (an O_DIRECT open too: the kernel refuses one without
    /// passthrough while the inode has passthrough opens).
    private func makeOpen(_ fd: Int32, _ node: BackingNode, _ flags: Int32) -> OpenFile {
        let open = makeOpen(passthrough: fd, node, flags)
        if node.type == S_IFREG { node.latestOpen.withLock { $0.file = open } }
        return open
    }

    private func makeOpen(passthrough fd: Int32, _ node: BackingNode, _ flags: Int32) -> OpenFile {
        guard node.type == S_IFREG,
              let registry = backingFiles.withLock({ $0 }), registry.passthroughEnabled else {
            return OpenFile(fd: fd, inode: node, flags: flags)
        }
        let id = node.passthrough.withLock { use -> Int32 in
            // While an open the daemon serves on purpose is held, the inode's opens are served so.
            if use.served > 0 {
                use.served += 1
                return -1
            }
            // Registered already, or the first open (a failed registration leaves the inode's opens
            // to the daemon until the last one closes, then the next open tries again).
            if use.backingID == 0, use.opens == 0 {
                let registered = Self.readOnlyDescriptor(of: fd, flags)
                let registering = { registry.openBacking(registered ?? fd) }
                if case .success(let id) = options.sharedWithOtherUsers ? RootReserve.withheld(as: RootReserve.anyUser, registering) : registering() {
                    use.backingID = id
                }
                if let registered { close(registered) }
            }
            use.opens += 1
            return use.backingID
        }
        if id < 0 { return OpenFile(fd: fd, inode: node, flags: flags, servedByDaemon: true) }
        return OpenFile(fd: fd, inode: node, flags: flags, backingID: id > 0 ? id : nil, sharesInodeMode: true)
    }

    /// A read-only descriptor of the file a writable open `fd` holds, to register as the node's
    /// passthrough backing file instead of `fd` (nil: `fd` is read-only already, or the file could
    /// not be opened for reading: `fd` is registered then). The kernel keeps the registered file
    /// until the node is forgotten, and opens each passthrough open's own backing file from its
    /// path with that open's flags and the daemon's credentials, so a read-only one serves writers
    /// as well; a writable one (a create's) kept the file open for writing after its last writer
    /// closed, and running it from the backing folder failed with ETXTBSY for as long as the kernel
    /// knew the node, where natively it runs once the writer closed.
    private static func readOnlyDescriptor(of fd: Int32, _ flags: Int32) -> Int32? {
        guard flags & O_ACCMODE != O_RDONLY else { return nil }
        // The same open file's inode, by its /proc magic link (no name is walked); the path formatted
        // in a stack buffer (an interpolated String cost 2,200 instructions a create).
        let ro = withProcPathName(fd) { Glibc.open($0, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK) }
        return ro >= 0 ? ro : nil
    }

    /// The end of an open's part in its inode's passthrough mode (the backing id stays registered
    /// until the node is forgotten).
    private func endPassthrough(_ open: OpenFile) {
        open.taken()
        guard open.sharesInodeMode else { return }
        open.noteChangesSinceOpen()
        open.inode.passthrough.withLock { $0.opens -= 1 }
    }

    /// The open a kernel file handle refers to.
    @inline(__always)
    public func openFile(_ file: FileInfo) -> OpenFile { OpenFile.from(file.handle) }

    /// The open's reply: takes a reference the kernel holds until release.
    public func openReply(_ open: OpenFile) -> OpenReply {
        _ = Unmanaged.passRetained(open)
        var reply = OpenReply(handle: open.handle, directIO: open.flags & O_DIRECT != 0 || open.servedByDaemon,
                              keepCache: options.keepCache, nonSeekable: open.inode.type == S_IFIFO || open.inode.type == S_IFSOCK)
        reply.noFlush = open.inode.type == S_IFREG && quietCloses.neverReportErrors(open.fd, device: open.inode.key.dev)
        if let id = open.backingID {
            // The kernel refuses a passthrough open with page-cache flags (no cache to keep), and
            // direct_io would send its I/O to the daemon: the kernel opens the backing file with the
            // caller's flags, O_DIRECT included.
            reply.backingID = id
            reply.keepCache = false
            reply.directIO = false
        }
        return reply
    }

    public func open(_ request: consuming Request, inode id: InodeID, file: FileInfo) {
        switch openFile(inode(id), flags: file.flags, caller: request.context) {
        case .success(let f): request.reply(open: openReply(f), flags: file.flags)
        case .failure(let e): request.reply(error: e)
        }
    }

    /// A create the kernel sent for a name it last knew as missing, where an item appeared since
    /// (made beside the mount: by another user, or on another host). The daemon is root: opening
    /// it as a new file would skip every permission check and hand another user's file to the
    /// creator (`giveToCaller`). It is opened as natively: a regular file only (no link followed),
    /// by the kernel as the caller (`ActingAsUser`: the caller's fsuid, fsgid and supplementary
    /// groups on this thread, so its mode bits, POSIX ACL and groups decide as they do for the
    /// caller's own open), truncated only by that open, after the kernel's check, and it keeps its
    /// owner. Refused as the kernel refuses; EEXIST when it is no regular file.
    private func openAppeared(parent p: BackingNode, name: FileName, flags: Int32, context: RequestContext) -> Result<(EntryReply, OpenFile), Errno> {
        guard roomToTruncate(flags) else { return .failure(Errno(rawValue: ENFILE)) }
        let groups = ProcessGroups.supplementary(of: context)
        let fd: Int32
        switch p.withFD({ pfd -> Result<Int32, Errno> in
            var before = stat()
            if let e = sys({ fstatat(pfd, name.cString, &before, AT_SYMLINK_NOFOLLOW) }) { return .failure(e) }
            guard before.st_mode & S_IFMT == S_IFREG else { return .failure(.fileExists) }
            let f = (flags & ~(O_NOFOLLOW | O_DIRECT | O_CREAT | O_EXCL)) | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC
            return ActingAsUser.run(uid: context.uid, gid: context.gid, groups: groups) {
                sysValue { openat(pfd, name.cString, f, 0) }
            } ?? .failure(.permissionDenied)
        }) {
        case .success(let d): fd = d
        case .failure(let e): return .failure(e)
        }
        // Whatever the name is by now, the caller's open of it: a regular file only.
        var st = stat()
        guard fstat(fd, &st) == 0, st.st_mode & S_IFMT == S_IFREG else { close(fd); return .failure(.fileExists) }
        guard openFiles.mayKeep(fd) else { close(fd); return .failure(Errno(rawValue: ENFILE)) }
        if flags & O_NONBLOCK == 0 { _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) }
        switch lookupEntry(parent: p, name: name.cString) {
        case .success(let e): return .success((e, makeOpen(fd, inode(e.inode), flags)))
        case .failure(let e): close(fd); return .failure(e)
        }
    }

    /// Creates and opens `name` in `parent` for the caller (create(2) with O_CREAT), counting one
    /// lookup. A user other than root and the owner at its bound of open files (`OpenFileBounds`)
    /// gets ENFILE, nothing made.
    public func createFile(parent p: BackingNode, name: FileName, mode: mode_t, flags: Int32, context: RequestContext) -> Result<(EntryReply, OpenFile), Errno> {
        Self.holding(openFiles.take(context.uid)) { createCounted(parent: p, name: name, mode: mode, flags: flags, context: context) }
    }

    /// `make`'s open, holding `taken` (given back when it fails, else when the open's descriptor
    /// closes); `taken`'s refusal as it is.
    private static func holding(_ taken: Result<OpenFileBounds.Hold?, Errno>,
                                _ make: () -> Result<(EntryReply, OpenFile), Errno>) -> Result<(EntryReply, OpenFile), Errno> {
        let hold: OpenFileBounds.Hold?
        switch taken {
        case .success(let h): hold = h
        case .failure(let e): return .failure(e)
        }
        let made = make()
        switch made {
        case .success(let (_, open)): open.hold = hold
        case .failure: hold?.giveBack()
        }
        return made
    }

    private func createCounted(parent p: BackingNode, name: FileName, mode: mode_t, flags: Int32, context: RequestContext) -> Result<(EntryReply, OpenFile), Errno> {
        let f = (flags & ~(O_NOFOLLOW | O_DIRECT)) | O_CREAT | O_CLOEXEC
        let mode = creationMode(mode, in: p, context: context)
        let handsOver = runningAsRoot && (context.uid != 0 || context.gid != 0)
        // Always made with O_EXCL, so the daemon knows whether this create made the file: a create
        // that fails after making it (a descriptor limit reached by the node's descriptor, a chown
        // refused) takes its file away again, as a failed open(2) leaves none natively, and never
        // removes a file that was there before. The kernel sends a create for a name it knows as
        // missing; one that appeared since (beside the mount, another host) is opened as it is:
        // for another user through `openAppeared` (the item must be new to be handed over), else
        // as open(2) without O_EXCL would (it may go again before that: then made anew).
        var made = stat()
        var fd: Int32 = -1
        var isNew = true
        for _ in 0..<3 where fd < 0 {
            switch p.withFD({ pfd in sysValue { openat(pfd, name.cString, f | O_EXCL, mode) } }) {
            case .success(let d): fd = d; isNew = true
            case .failure(let e) where e == .fileExists && flags & O_EXCL == 0:
                if handsOver { return openAppeared(parent: p, name: name, flags: flags, context: context) }
                // An existing file, which O_TRUNC changes as it opens: asked before (a new one is
                // checked on its descriptor below, and taken away again if refused).
                guard roomToTruncate(flags) else { return .failure(Errno(rawValue: ENFILE)) }
                switch p.withFD({ pfd in sysValue { openat(pfd, name.cString, f & ~O_CREAT, 0) } }) {
                case .success(let d): fd = d; isNew = false
                case .failure(let e) where e == .noSuchFileOrDirectory: continue
                case .failure(let e): return .failure(e)
                }
            case .failure(let e): return .failure(e)
            }
        }
        guard fd >= 0 else { return .failure(.fileExists) }
        /// Closes `fd` and, when this create made the file, removes it (only while the name still
        /// is that file): the failed create leaves the folder as it found it.
        func fail(_ e: Errno) -> Result<(EntryReply, OpenFile), Errno> {
            close(fd)
            if isNew { removeMade(parent: p, name: name.cString, dev: made.st_dev, ino: made.st_ino) }
            return .failure(e)
        }
        if let e = sys({ fstat(fd, &made) }) {
            close(fd)
            if isNew { _ = p.withDescriptor { unlinkat($0, name.cString, 0) } }  // made with O_EXCL just now
            return .failure(e)
        }
        // Not kept at a number the daemon keeps for itself: the file this create made goes again; an
        // existing file truncated as it opened (asked before) is kept open.
        if (isNew || flags & O_TRUNC == 0), !openFiles.mayKeep(fd) { return fail(Errno(rawValue: ENFILE)) }
        if let e = giveToCaller(parent: p, name: name.cString, context: context) ?? keepSetIDBits(fd, made: made.st_mode, caller: context) {
            return fail(e)
        }
        // Handed to the caller (chown, set-ID bits set again): the reply gives the file as it is now.
        if handsOver || made.st_mode & (S_ISUID | S_ISGID) != 0, let e = sys({ fstat(fd, &made) }) {
            return fail(e)
        }
        switch createdEntry(parent: p, name: name.cString, fd: fd, stat: made) {
        case .success(let e): return .success((e, makeOpen(fd, inode(e.inode), flags)))
        case .failure(let e): return fail(e)
        }
    }

    /// Removes `name` from `parent` if it still is the file `dev`/`ino` (a create's own file, taken
    /// away again when the create failed after making it).
    func removeMade(parent: BackingNode, name: UnsafePointer<CChar>, dev: dev_t, ino: ino_t) {
        _ = parent.withDescriptor { pfd -> Int32 in
            var now = stat()
            guard fstatat(pfd, name, &now, AT_SYMLINK_NOFOLLOW) == 0, now.st_dev == dev, now.st_ino == ino else { return -1 }
            return unlinkat(pfd, name, 0)
        }
    }

    /// The entry of the file a create opened as `fd` (`st`: its attributes now), counting one
    /// lookup: the node is the file the create's descriptor is (not whatever the name is by the
    /// time it is looked up again), from the table when it holds that file pinned (a create of an
    /// existing name), else with an O_PATH descriptor opened from `fd` itself (one open_tree, no
    /// path walked, no stat: the create's own fstat gives the attributes).
    func createdEntry(parent: BackingNode, name: UnsafePointer<CChar>, fd: Int32, stat st: stat) -> Result<EntryReply, Errno> {
        let node: BackingNode
        if let known = inodes.retainPinned(dev: st.st_dev, ino: st.st_ino) {
            node = known
        } else {
            var pathFD = LinuxCalls.pathDescriptor(of: fd)
            if pathFD < 0, errno == ENOSYS || errno == EPERM { // no open_tree (or a filter refuses it)
                pathFD = withProcPath(fd) { path in Glibc.open(path, O_PATH | O_CLOEXEC) }
            }
            guard pathFD >= 0 else { return .failure(Errno(rawValue: errno)) }
            guard let made = inodes.remember(fd: pathFD, stat: st, parent: parent) else { return .failure(openFiles.refusedAtReserve()) }
            node = made
        }
        let e = entry(node, st)
        let lifetime = min(e.attributeTimeout, e.entryTimeout)
        noteLookup(of: node, in: parent, name: name, freshUntil: lifetime > 0 ? Self.entryClock() &+ UInt64(lifetime * 1e9) : 0)
        return .success(e)
    }

    public func create(_ request: consuming Request, parent: InodeID, name: FileName, mode: mode_t, file: FileInfo) {
        if isHidden(parent: parent, name) { return request.reply(error: .notPermitted) }
        let ctx = request.context
        switch createFile(parent: inode(parent), name: name, mode: mode, flags: file.flags, context: ctx) {
        case .success(let (entry, f)): request.reply(create: entry, open: openReply(f), flags: file.flags)
        case .failure(let e): request.reply(error: e)
        }
    }

    // MARK: Unnamed files (O_TMPFILE)

    /// O_TMPFILE's bits (`__O_TMPFILE | O_DIRECTORY`; Glibc's module does not carry the macro).
    static let openTemporaryFile: Int32 = 0o20000000 | O_DIRECTORY

    /// Makes and opens an unnamed regular file in `parent` for the caller (open(2) of a folder with
    /// O_TMPFILE: FUSE_TMPFILE), counting the kernel's one lookup of its node. It is made in the
    /// backing folder's matching directory with the caller's flags (O_EXCL: it can never be
    /// linked), and belongs to the caller as a created file does (`giveToCaller`; a set-group-ID
    /// folder's group kept). Being new, no other user's file can be taken in its place. The kernel
    /// has checked that the caller may write the folder (where it checks permissions); otherwise the
    /// daemon acts with the mounting user's ids and the backing folder's checks answer. Its node holds
    /// a descriptor whatever the budget (`InodeTable.rememberUnnamed`): without a name, nothing else
    /// reaches it. Never linked, it goes when its last descriptor and the kernel's node are let go.
    /// It counts two descriptors in `OpenFileBounds` while open (its own and its node's).
    public func createUnnamedFile(parent p: BackingNode, mode: mode_t, flags: Int32, context: RequestContext) -> Result<(EntryReply, OpenFile), Errno> {
        Self.holding(openFiles.take(context.uid, 2)) { createUnnamedCounted(parent: p, mode: mode, flags: flags, context: context) }
    }

    private func createUnnamedCounted(parent p: BackingNode, mode: mode_t, flags: Int32, context: RequestContext) -> Result<(EntryReply, OpenFile), Errno> {
        let f = (flags & ~(O_NOFOLLOW | O_DIRECT | O_CREAT | O_TRUNC | Self.openTemporaryFile)) | Self.openTemporaryFile | O_CLOEXEC
        let mode = creationMode(mode, in: p, context: context)
        let fd: Int32
        switch p.withFD({ pfd in sysValue { openat(pfd, ".", f, mode) } }) {
        case .success(let d): fd = d
        case .failure(let e): return .failure(e)
        }
        var st = stat()
        if let e = sys({ fstat(fd, &st) }) { close(fd); return .failure(e) }
        if runningAsRoot, context.uid != 0 || context.gid != 0 {
            let given = p.withFD { pfd -> Errno? in
                var pst = stat()
                if let e = sys({ fstatat(pfd, "", &pst, AT_EMPTY_PATH) }) { return e }
                return sys { fchown(fd, context.uid, (pst.st_mode & S_ISGID) != 0 ? gid_t.max : context.gid) }
            } ?? keepSetIDBits(fd, made: st.st_mode, caller: context) ?? sys({ fstat(fd, &st) })
            if let given { close(fd); return .failure(given) }
        }
        let pathFD: Int32
        switch withProcPath(fd, { path in sysValue { Glibc.open(path, O_PATH | O_CLOEXEC) } }) {
        case .success(let d): pathFD = d
        case .failure(let e): close(fd); return .failure(e)
        }
        // Both kept below the daemon's reserve, else neither (the unnamed file goes with them).
        guard openFiles.mayKeep(fd), openFiles.mayKeep(pathFD) else {
            close(pathFD); close(fd)
            return .failure(Errno(rawValue: ENFILE))
        }
        let node = inodes.rememberUnnamed(fd: pathFD, stat: st)
        return .success((entry(node, st), makeOpen(fd, node, flags & ~Self.openTemporaryFile)))
    }

    /// Whether `node` is a regular file without a name: made with O_TMPFILE and not linked in (a
    /// removed file that is still open has none either, but the kernel never links one).
    public func isUnnamed(_ node: BackingNode) -> Bool {
        guard node.type == S_IFREG, case .success(let st) = attributes(of: node) else { return false }
        return st.st_nlink == 0
    }

    public func tmpfile(_ request: consuming Request, parent: InodeID, mode: mode_t, file: FileInfo) {
        switch createUnnamedFile(parent: inode(parent), mode: mode, flags: file.flags, context: request.context) {
        case .success(let (entry, f)): request.reply(create: entry, open: openReply(f), flags: file.flags)
        case .failure(let e): request.reply(error: e)
        }
    }

    public func read(_ request: consuming Request, inode id: InodeID, size: Int, offset: Int, file: FileInfo) {
        dataRequestCount.add(1, ordering: .relaxed)
        let f = openFile(file)
        f.taken()
        request.reply(dataFrom: f.fd, offset: offset, size: size)
    }

    public func write(_ request: consuming Request, inode id: InodeID, data: IncomingData, offset: Int, file: FileInfo) {
        dataRequestCount.add(1, ordering: .relaxed)
        let f = openFile(file)
        f.taken()
        f.markModified()
        switch asCaller(request.context, { data.write(to: f.fd, at: offset) }) {
        case .success(let n): request.reply(written: n)
        case .failure(let e): request.reply(error: e)
        }
    }

    public func flush(_ request: consuming Request, inode id: InodeID, file: FileInfo) {
        // Closing a duplicate reports delayed write errors (NFS, quotas) to the caller's close(2).
        // Only opens of files whose close can report one get here (`QuietCloses`).
        flushRequestCount.add(1, ordering: .relaxed)
        openFile(file).taken()
        switch sysValue({ dup(openFile(file).fd) }) {
        case .success(let d):
            if let e = sys({ close(d) }) { return request.reply(error: e) }
            request.replyOK()
        case .failure(let e): request.reply(error: e)
        }
    }

    public func release(_ request: consuming Request, inode id: InodeID, file: FileInfo) {
        release(file)
        request.replyOK()
    }

    /// Drops the kernel's reference to an open (the descriptor closes with the last reference).
    public func release(_ file: FileInfo) {
        endPassthrough(openFile(file))
        Unmanaged<OpenFile>.fromOpaque(UnsafeRawPointer(bitPattern: UInt(file.handle.rawValue))!).release()
    }

    public func fsync(_ request: consuming Request, inode id: InodeID, dataOnly: Bool, file: FileInfo) {
        let fd = openFile(file).fd
        if let e = sys({ dataOnly ? fdatasync(fd) : Glibc.fsync(fd) }) { return request.reply(error: e) }
        request.replyOK()
    }

    // MARK: Directories

    /// A user other than root and the owner at its bound of open files (`OpenFileBounds`) gets ENFILE.
    public func opendir(_ request: consuming Request, inode id: InodeID, file: FileInfo) {
        let node = inode(id)
        let hold: OpenFileBounds.Hold?
        switch openFiles.take(request.context.uid) {
        case .success(let h): hold = h
        case .failure(let e): return request.reply(error: e)
        }
        let fd: Int32
        switch node.withFD({ dfd in sysValue { openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC) } }) {
        case .success(let f) where openFiles.mayKeep(f): fd = f
        case .success(let f):
            close(f)
            hold?.giveBack()
            return request.reply(error: Errno(rawValue: ENFILE))
        case .failure(let e):
            hold?.giveBack()
            return request.reply(error: e)
        }
        guard let dir = fdopendir(fd) else {
            let e = Errno(rawValue: errno); close(fd)
            hold?.giveBack()
            return request.reply(error: e)
        }
        let handle = DirectoryHandle(dir: dir, hidesReservedNames: id == .root && !hidden.isEmpty, hold: hold)
        let raw = UInt64(UInt(bitPattern: Unmanaged.passRetained(handle).toOpaque()))
        request.reply(open: OpenReply(handle: FileHandleID(rawValue: raw)), flags: file.flags)
    }

    @inline(__always)
    func directoryHandle(_ file: FileInfo) -> DirectoryHandle {
        Unmanaged<DirectoryHandle>.fromOpaque(UnsafeRawPointer(bitPattern: UInt(file.handle.rawValue))!).takeUnretainedValue()
    }

    public func readdir(_ request: consuming Request, inode id: InodeID, size: Int, offset: Int, file: FileInfo, plus: Bool) {
        let handle = directoryHandle(file)
        let parent = inode(id)
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: size, alignment: 8)
        defer { buffer.deallocate() }
        var used = 0
        var failure: Errno? = nil
        handle.lock.withLock { _ in
            if offset != handle.offset {
                seekdir(handle.dir, offset)
                handle.pending = nil
                handle.offset = offset
            }
            while true {
                if handle.pending == nil {
                    errno = 0
                    guard let ent = Glibc.readdir(handle.dir) else {
                        if errno != 0 { failure = Errno(rawValue: errno) }
                        break
                    }
                    handle.pending = ent
                }
                let ent = handle.pending!
                let nextOffset = Int(ent.pointee.d_off)
                let added: Int = withUnsafePointer(to: &ent.pointee.d_name) { namePtr in
                    namePtr.withMemoryRebound(to: CChar.self, capacity: 256) { name in
                        if handle.hidesReservedNames && isHidden(parent: .root, FileName(name)) { return 0 }
                        let remaining = size - used
                        if plus && !isDotOrDotDot(name)
                            && !(ent.pointee.d_type != UInt8(DT_DIR) && kernelHoldsFreshEntry(in: parent, name: name, ino: ent.pointee.d_ino)) {
                            switch listedEntry(parent: parent, name: name) {
                            case .success(let e):
                                let n = request.addDirectoryEntryPlus(into: buffer + used, capacity: remaining, name: name, entry: e, nextOffset: nextOffset)
                                if n > remaining { forget(inode(e.inode), count: 1) }
                                return n
                            case .failure(.noSuchFileOrDirectory):
                                return 0 // removed since readdir saw it
                            case .failure(let e):
                                failure = e
                                return -1
                            }
                        }
                        var st = stat()
                        st.st_ino = ent.pointee.d_ino
                        st.st_mode = mode_t(ent.pointee.d_type) << 12
                        if plus {
                            return request.addDirectoryEntryPlus(into: buffer + used, capacity: remaining, name: name,
                                                                 entry: EntryReply(inode: InodeID(rawValue: 0), attributes: st, attributeTimeout: 0, entryTimeout: 0),
                                                                 nextOffset: nextOffset)
                        }
                        return request.addDirectoryEntry(into: buffer + used, capacity: remaining, name: name, attributes: st, nextOffset: nextOffset)
                    }
                }
                if added < 0 { break }
                if added > size - used { break }
                used += added
                handle.pending = nil
                handle.offset = nextOffset
            }
        }
        // An error after some entries were added: return those (their lookups are counted already).
        if let failure, used == 0 { return request.reply(error: failure) }
        request.reply(buffer: UnsafeRawBufferPointer(start: buffer, count: used))
    }

    public func releasedir(_ request: consuming Request, inode id: InodeID, file: FileInfo) {
        Unmanaged<DirectoryHandle>.fromOpaque(UnsafeRawPointer(bitPattern: UInt(file.handle.rawValue))!).release()
        request.replyOK()
    }

    public func fsyncdir(_ request: consuming Request, inode id: InodeID, dataOnly: Bool, file: FileInfo) {
        let fd = dirfd(directoryHandle(file).dir)
        if let e = sys({ dataOnly ? fdatasync(fd) : Glibc.fsync(fd) }) { return request.reply(error: e) }
        request.replyOK()
    }

    // MARK: Extended attributes known to be absent

    /// Seconds a regular file's absent attributes may be kept (`AbsentXattrs`): the watched
    /// attribute lifetime while the backing watcher keeps the file fresh (`timeouts(forDevice:)`'s rule),
    /// else nil (never kept).
    @inline(__always)
    func absenceLifetime(of node: BackingNode) -> UInt64? {
        guard node.type == S_IFREG, let lifetime = options.watchedAttributeTimeout, lifetime >= 1, rootIsLocal,
              node.key.dev == rootDevice, pathsAreWatched.load(ordering: .relaxed) else { return nil }
        return UInt64(lifetime)
    }

    /// Keeps "no such attribute" for the name of bit `index`, read while the node's state was
    /// `seen` and every node's answers were last forgotten at `forgotten`: nothing when the node's
    /// were forgotten meanwhile (a change being told); when every node's were, the answer is kept
    /// with the older count and so never counts.
    private func noteAbsent(_ node: BackingNode, _ index: Int, seen: UInt64, _ forgotten: AbsentXattrs.Forgotten, lifetime: UInt64) {
        let kept = AbsentXattrs.adding(index, to: seen, now: Self.xattrClock(), forgotten, lifetime: lifetime)
        _ = node.absentXattrs.compareExchange(expected: seen, desired: kept, ordering: .acquiringAndReleasing)
    }

    /// The file's extended attributes may have changed (set through the mount, or an ATTRIB event
    /// from the backing watcher): it forgets which are absent.
    public func xattrsMayHaveChanged(_ node: BackingNode) {
        var state = node.absentXattrs.load(ordering: .relaxed)
        while true {
            let (done, now) = node.absentXattrs.compareExchange(expected: state, desired: AbsentXattrs.forgetting(state),
                                                                ordering: .acquiringAndReleasing)
            if done { return }
            state = now
        }
    }

    /// Every node forgets which attributes are absent (the watcher lost events): answers kept up to
    /// this second no longer count.
    public func forgetAbsentXattrs() {
        absentXattrsForgotten.withLock { f in
            f.count &+= 1
            f.second = max(f.second, Self.xattrClock())
        }
    }

    /// Answers of "no such attribute" given from the nodes so far (tests, benchmarks).
    public var absentXattrAnswers: Int { absentXattrAnswerCount.load(ordering: .relaxed) }

    /// Extended-attribute calls made through the descriptor of a file's open so far, not a reopen
    /// (`xattrCall`; tests, benchmarks).
    public var xattrCallsOnOpens: Int { xattrCallsOnOpensCount.load(ordering: .relaxed) }

    /// Whole seconds since the daemon's start, plus one (0 stays "never").
    @inline(__always)
    static func xattrClock() -> UInt64 {
        entryClock() / 1_000_000_000 &- xattrClockBase &+ 1
    }
    private static let xattrClockBase: UInt64 = entryClock() / 1_000_000_000

    // MARK: Everything else

    public func statfs(_ request: consuming Request, inode id: InodeID) {
        var s = statvfs()
        if let e = inode(id).withFD({ fd in sys { fstatvfs(fd, &s) } }) { return request.reply(error: e) }
        request.reply(statfs: s)
    }

    public func setxattr(_ request: consuming Request, inode id: InodeID, name: FileName, value: UnsafeRawBufferPointer, flags: Int32) {
        if let e = setExtendedAttribute(inode(id), name: name.cString, value: value, flags: flags) { return request.reply(error: e) }
        request.replyOK()
    }

    /// Sets an extended attribute of `node` (SETXATTR's work, for a caller that coordinates it first).
    public func setExtendedAttribute(_ node: BackingNode, name: UnsafePointer<CChar>, value: UnsafeRawBufferPointer, flags: Int32) -> Errno? {
        let result = xattrCall(node, onDescriptor: { LinuxCalls.fsetxattr($0, name, value.baseAddress, value.count, flags) },
                               onPath: { LinuxCalls.setxattr($0, name, value.baseAddress, value.count, flags) })
        xattrsMayHaveChanged(node)
        if case .failure(let e) = result { return e }
        return nil
    }

    public func getxattr(_ request: consuming Request, inode id: InodeID, name: FileName, size: Int) {
        let node = inode(id)
        // A name this file is known not to have (`AbsentXattrs`) is answered without a system call.
        let absence = absenceLifetime(of: node).flatMap { lifetime in AbsentXattrs.index(of: name.cString).map { ($0, lifetime) } }
        var seen: UInt64 = 0, forgotten = AbsentXattrs.Forgotten()
        if let (index, lifetime) = absence {
            forgotten = absentXattrsForgotten.withLock { $0 }
            seen = node.absentXattrs.load(ordering: .acquiring)
            if AbsentXattrs.isAbsent(seen, index, now: Self.xattrClock(), forgotten, lifetime: lifetime) {
                absentXattrAnswerCount.add(1, ordering: .relaxed)
                return request.reply(error: .noData)
            }
        }
        let buf = UnsafeMutableRawBufferPointer.allocate(byteCount: max(size, 1), alignment: 1)
        defer { buf.deallocate() }
        let value = size == 0 ? nil : buf.baseAddress
        let result = xattrCall(node, onDescriptor: { LinuxCalls.fgetxattr($0, name.cString, value, size) },
                               onPath: { LinuxCalls.getxattr($0, name.cString, value, size) })
        if case .failure(.noData) = result, let (index, lifetime) = absence {
            noteAbsent(node, index, seen: seen, forgotten, lifetime: lifetime)
        }
        switch result {
        case .success(let n) where size == 0: request.reply(xattrSize: n)
        case .success(let n): request.reply(buffer: UnsafeRawBufferPointer(rebasing: buf[0..<n]))
        case .failure(let e): request.reply(error: e)
        }
    }

    public func listxattr(_ request: consuming Request, inode id: InodeID, size: Int) {
        if runningAsRoot, request.context.uid != 0 {
            switch namesWithoutTrusted(inode(id)) {
            case .success(let names) where size == 0: return request.reply(xattrSize: names.count)
            case .success(let names) where names.count > size: return request.reply(error: Errno(rawValue: ERANGE))
            case .success(let names):
                let copy = UnsafeMutableRawBufferPointer.allocate(byteCount: max(names.count, 1), alignment: 1)
                defer { copy.deallocate() }
                copy.copyBytes(from: names)
                return request.reply(buffer: UnsafeRawBufferPointer(rebasing: copy[0..<names.count]))
            case .failure(let e): return request.reply(error: e)
            }
        }
        let buf = UnsafeMutableRawBufferPointer.allocate(byteCount: max(size, 1), alignment: 1)
        defer { buf.deallocate() }
        let list = size == 0 ? nil : buf.baseAddress?.assumingMemoryBound(to: CChar.self)
        let result = xattrCall(inode(id), onDescriptor: { LinuxCalls.flistxattr($0, list, size) },
                               onPath: { LinuxCalls.listxattr($0, list, size) })
        switch result {
        case .success(let n) where size == 0: request.reply(xattrSize: n)
        case .success(let n): request.reply(buffer: UnsafeRawBufferPointer(rebasing: buf[0..<n]))
        case .failure(let e): request.reply(error: e)
        }
    }

    /// The extended attributes' names of `node` (LISTXATTR's list: names each ending in a NUL) but
    /// those in `trusted.*`, for a caller other than root. The file system lists `trusted.*` names
    /// only to a caller with CAP_SYS_ADMIN, judged with the lister's credentials, and the daemon
    /// lists as root: another user saw the names of root's `trusted.*` attributes through the mount
    /// (their values stay refused by the kernel), where natively it sees none. The whole list is
    /// read (at most XATTR_LIST_MAX, 64 KiB) to answer a size query with the size of what is kept.
    private func namesWithoutTrusted(_ node: BackingNode) -> Result<[UInt8], Errno> {
        let capacity = 65_536
        let buf = UnsafeMutableRawBufferPointer.allocate(byteCount: capacity, alignment: 1)
        defer { buf.deallocate() }
        let list = buf.baseAddress!.assumingMemoryBound(to: CChar.self)
        return xattrCall(node, onDescriptor: { LinuxCalls.flistxattr($0, list, capacity) },
                         onPath: { LinuxCalls.listxattr($0, list, capacity) }).map { n in
            var kept: [UInt8] = []
            var start = 0
            for i in 0..<n where buf[i] == 0 {
                let name = UnsafeRawBufferPointer(rebasing: buf[start...i])
                if !name.starts(with: "trusted.".utf8) { kept += name }
                start = i + 1
            }
            return kept
        }
    }

    public func removexattr(_ request: consuming Request, inode id: InodeID, name: FileName) {
        if let e = removeExtendedAttribute(inode(id), name: name.cString, caller: request.context) { return request.reply(error: e) }
        request.replyOK()
    }

    /// Removes an extended attribute of `node` for `caller` (REMOVEXATTR's work, for a caller that
    /// coordinates it first).
    public func removeExtendedAttribute(_ node: BackingNode, name: UnsafePointer<CChar>, caller: RequestContext) -> Errno? {
        // The kernel removes a file's capability itself before the SETATTR of chown(f, -1, -1)
        // (`setattr_prepare`); where Linux refuses that chown (EPERM) before removing anything, so
        // does this removal, and the chown fails with it. Anyone else's removal of
        // `security.capability` needs CAP_SETFCAP, which the kernel checks before asking.
        if caller.uid != 0, strcmp(name, "security.capability") == 0,
           CallerSystemCall.isChown(caller.pid) == true,
           case .success(let st) = attributes(of: node), CallerSystemCall.chownIsRefused(st, caller: caller) {
            return .notPermitted
        }
        // A removal makes nothing appear: the node's absent attributes stay.
        let result = xattrCall(node, onDescriptor: { LinuxCalls.fremovexattr($0, name) },
                               onPath: { LinuxCalls.removexattr($0, name) })
        if case .failure(let e) = result { return e }
        return nil
    }

    public func access(_ request: consuming Request, inode id: InodeID, mask: Int32) {
        // Only reached without default_permissions: a single-user mount, whose one user the daemon
        // acts as (same ids), so the daemon's own answer is the caller's.
        // On the descriptor itself (faccessat2's AT_EMPTY_PATH), not through /proc.
        let e = inode(id).withFD { fd in sys { faccessat(fd, "", mask, AT_EMPTY_PATH) } }
        if let e { return request.reply(error: e) }
        request.replyOK()
    }

    public func fallocate(_ request: consuming Request, inode id: InodeID, mode: Int32, offset: Int, length: Int, file: FileInfo) {
        let f = openFile(file)
        f.taken()
        f.markModified()
        if let e = asCaller(request.context, { sys({ LinuxCalls.fallocate(f.fd, mode, offset, length) }) }) { return request.reply(error: e) }
        request.replyOK()
    }

    public func copyFileRange(_ request: consuming Request, input: InodeID, inputOffset: Int, inputFile: FileInfo, output: InodeID, outputOffset: Int, outputFile: FileInfo, length: Int, flags: Int32) {
        var inOff = inputOffset, outOff = outputOffset
        let fin = openFile(inputFile).fd, target = openFile(outputFile), fout = target.fd
        target.markModified()
        switch asCaller(request.context, { sysValue({ LinuxCalls.copyFileRange(fin, &inOff, fout, &outOff, length, UInt32(flags)) }) }) {
        case .success(let n): request.reply(written: n)
        case .failure(let e): request.reply(error: e)
        }
    }

    public func lseek(_ request: consuming Request, inode id: InodeID, offset: Int, whence: Int32, file: FileInfo) {
        switch sysValue({ Glibc.lseek(openFile(file).fd, offset, whence) }) {
        case .success(let n): request.reply(seekOffset: n)
        case .failure(let e): request.reply(error: e)
        }
    }
}

@inline(__always)
func isDotOrDotDot(_ name: UnsafePointer<CChar>) -> Bool {
    name[0] == 46 && (name[1] == 0 || (name[1] == 46 && name[2] == 0))
}

/// An open directory stream and where the kernel is in it.
final class DirectoryHandle: @unchecked Sendable {
    let dir: OpaquePointer
    let hidesReservedNames: Bool
    let lock = Mutex<Void>(())
    var offset: Int = 0
    var pending: UnsafeMutablePointer<dirent>? = nil
    /// Its descriptor, counted for a user other than root and the owner (`OpenFileBounds`).
    let hold: OpenFileBounds.Hold?
    init(dir: OpaquePointer, hidesReservedNames: Bool, hold: OpenFileBounds.Hold?) {
        self.dir = dir; self.hidesReservedNames = hidesReservedNames; self.hold = hold
    }
    deinit {
        closedir(dir)
        hold?.giveBack()
    }
}
