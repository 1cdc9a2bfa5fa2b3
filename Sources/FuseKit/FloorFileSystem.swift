import Glibc
import LinuxGNU
import SystemPackage
import Synchronization

/// A file system that does no work: the floor of what any FUSE daemon costs on this kernel
/// (`coordfs-bench floor`, docs/benchmarks.md "The kernel's floor").
///
/// An in-memory tree answered the way coordfs answers it, but with no backing folder, no
/// coordination and no log: a missing name is a negative entry cached for `negativeTimeout` (as
/// coordfs's watched folders give), names and attributes are kept for `entryTimeout` and
/// `attributeTimeout`, a listing is READDIRPLUS with each entry's attributes (a regular file the
/// kernel was given less than half an entry lifetime ago and not opened since by name alone, as
/// coordfs gives it),
/// GETXATTR is ENODATA (coordfs's answer for a file without the attribute: `security.capability`,
/// `security.selinux`, `system.posix_acl_access`), LISTXATTR empty, SETXATTR accepted and dropped,
/// ACCESS allowed (a single-user mount), FLUSH and RELEASE are OK, FORGET is nothing. It takes the
/// INIT capabilities coordfs's Loopback takes on a single-user mount (no POSIX ACLs, no writeback
/// cache). mkdir, create, symlink, setattr (mode, owner, size, times), unlink, rmdir and rename
/// change the tree; attributes are the node's own (made up at create: the caller's ids, the mode
/// asked for, size 0).
///
/// Data never goes through the daemon when the session took kernel passthrough:
/// - `scratchBacking` (a descriptor of any regular file): every file made through the mount is
///   opened with that one registered backing file, as coordfs's creates carry each file's own, so
///   a write is no request (the data lands in the scratch file and is not kept: a written file's
///   size stays what the node says, 0). Without passthrough each write(2) is a WRITE round trip,
///   accepted and dropped.
/// - `mirroring` (a folder): the tree starts as a copy of that folder's names and attributes
///   (walked once at init), and a regular file of it is opened with its real file as the backing
///   file, registered at its first open and kept (as coordfs keeps a node's until the kernel
///   forgets it), so a later open is an answer without a system call and a read is the kernel's.
///   Such files open read-only (EROFS for writing).
/// Closes send no FLUSH (`noflush`, as coordfs for files on a local file system).
///
/// `init(storingIn:)` ("floor+backing"): the same daemon, but the files live in a real backing
/// folder, as any daemon that stores the user's files in a folder must keep them. The tree starts as
/// a copy of that folder (walked once) and still answers every lookup, getattr and listing (no
/// system call where the tree knows), but each change is also made for real, relative to the
/// folder's descriptor (each folder node keeps one, O_PATH): create is openat(O_CREAT|O_EXCL) of the
/// real file, whose descriptor is the open's (registered as the passthrough backing file at the
/// inode's first open, its id closed at the last release, the descriptor at each), mkdir is mkdirat
/// (and an O_PATH open of the new folder), symlink symlinkat, unlink and rmdir unlinkat, rename
/// renameat2, setattr fchmodat, fchownat, utimensat (truncate: ftruncate), open openat. The tree does
/// not know the size of a file written since it last looked (through passthrough, or truncated):
/// such a file's size and times are read from the real file (fstat of an open that may write it,
/// else fstatat) for its next getattr, lookup or setattr reply (the kernel takes a setattr reply's
/// size as the file's). A caller other than the daemon's user gets the item (fchown). Without
/// passthrough, writes and reads go to the real file (pwrite, pread). `backingSystemCalls` counts the
/// calls made on the backing folder.
public final class FloorFileSystem: FuseFileSystem, @unchecked Sendable {
    /// Seconds the kernel keeps names, attributes and "no such name" (coordfs's watched lifetimes).
    public let entryTimeout: Double
    public let attributeTimeout: Double
    public let negativeTimeout: Double

    /// Guarded by `state` (the one lock).
    private final class Node: @unchecked Sendable {
        var st: stat
        /// A folder's names (its children's ids).
        var children: [[UInt8]: UInt64] = [:]
        /// A symlink's target, NUL-terminated.
        var target: [CChar] = []
        /// A mirrored regular file's real path, NUL-terminated (nil: made through the mount).
        var source: [CChar]? = nil
        /// Its registered backing file (0: not yet, -1: refused).
        var backing: Int32 = 0
        /// When the kernel was last given this node's entry (nanoseconds, CLOCK_MONOTONIC).
        var given: UInt64 = 0
        // Storing (`init(storingIn:)`):
        /// The folder it is named in (0: the root, or no name any more) and that name, NUL-terminated.
        var parent: UInt64 = 0
        var name: [CChar] = []
        /// A folder's descriptor (O_PATH), the base of its children's calls (-1: none).
        var folder: Int32 = -1
        /// Opens of it with passthrough to `backing` (its id closed when the last one goes).
        var backingOpens = 0
        /// Opens that may write it; while there are any, or since one was made, `dirty`.
        var writers = 0
        /// Its data may have changed since the tree last read its size and times from the real file.
        var dirty = false
        /// The descriptor of its latest open that may write (-1: none): what `refresh` reads.
        var writerFD: Int32 = -1
        init(_ st: stat) { self.st = st }
    }

    private struct State {
        var nodes: [UInt64: Node] = [:]
        var next: UInt64 = 2
        var listings: [UInt64: [(name: [CChar], id: UInt64)]] = [:]
        var nextListing: UInt64 = 1
    }
    private let state = Mutex<State>(State())
    private let uid: uid_t, gid: gid_t

    private let scratch: Int32?
    private let registry = Mutex<(any BackingFileRegistry)?>(nil)
    /// The scratch file's backing id once registered (0: not yet, -1: refused or not wanted).
    private let backingID = Atomic<Int32>(0)
    private let mirroredOpens = Atomic<Int>(0)

    /// Storing: the backing folder's path (NUL-terminated; nil: not storing) and the umask of the
    /// process when the mount was made (the real items' modes are the asked ones less it).
    private let storePath: [CChar]?
    private let storeMask: mode_t
    private let storeCalls = Atomic<Int>(0)
    private let storedPassthroughOpens = Atomic<Int>(0)

    public convenience init(entryTimeout: Double = 10, attributeTimeout: Double = 10, negativeTimeout: Double = 10, scratchBacking: Int32? = nil,
                            mirroring folder: String? = nil) {
        self.init(entryTimeout: entryTimeout, attributeTimeout: attributeTimeout, negativeTimeout: negativeTimeout,
                  scratchBacking: scratchBacking, mirroring: folder, store: nil)
    }

    /// Floor+backing: the files live in `folder` (see the type's comment); its items so far are
    /// copied into the tree. Throws when the folder cannot be opened.
    public convenience init(storingIn folder: String, entryTimeout: Double = 10, attributeTimeout: Double = 10, negativeTimeout: Double = 10) throws {
        let path = Array(folder.utf8CString)
        let fd = path.withUnsafeBufferPointer { Glibc.open($0.baseAddress!, LinuxCalls.O_PATH | O_DIRECTORY | O_CLOEXEC) }
        guard fd >= 0 else { throw Errno(rawValue: errno) }
        self.init(entryTimeout: entryTimeout, attributeTimeout: attributeTimeout, negativeTimeout: negativeTimeout,
                  scratchBacking: nil, mirroring: folder, store: (path, fd))
    }

    private init(entryTimeout: Double, attributeTimeout: Double, negativeTimeout: Double, scratchBacking: Int32?,
                 mirroring folder: String?, store: ([CChar], Int32)?) {
        self.entryTimeout = entryTimeout
        self.attributeTimeout = attributeTimeout
        self.negativeTimeout = negativeTimeout
        self.scratch = scratchBacking
        self.storePath = store?.0
        let mask = umask(0o022)
        umask(mask)
        storeMask = mask
        uid = getuid()
        gid = getgid()
        if scratchBacking == nil { backingID.store(-1, ordering: .relaxed) }
        var root = stat()
        if let store, store.0.withUnsafeBufferPointer({ lstat($0.baseAddress!, &root) }) != 0 { root = stat() }
        root.st_ino = 1
        if store == nil {
            root.st_mode = S_IFDIR | 0o755
            root.st_nlink = 2
            root.st_uid = uid
            root.st_gid = gid
            root.st_blksize = 4096
        }
        state.withLock { s in
            let node = Node(root)
            node.folder = store?.1 ?? -1
            s.nodes[1] = node
            if let folder { Self.mirror(Array(folder.utf8CString), into: 1, storing: store != nil, &s) }
        }
    }

    deinit { closeFolders() }

    /// Storing: closes the folders' descriptors (the backing folder's file system can then be
    /// unmounted); the mount must be gone. Nothing after it reaches the backing folder.
    public func closeFolders() {
        guard storePath != nil else { return }
        state.withLock { s in
            for node in s.nodes.values where node.folder >= 0 {
                close(node.folder)
                node.folder = -1
            }
        }
    }

    /// Copies the names and attributes under `path` (NUL-terminated) into folder `parent`; storing,
    /// each node also keeps its name and each folder its descriptor.
    private static func mirror(_ path: [CChar], into parent: UInt64, storing: Bool, _ s: inout State) {
        guard let dir = path.withUnsafeBufferPointer({ Glibc.opendir($0.baseAddress!) }) else { return }
        defer { closedir(dir) }
        let base = Array(path.dropLast()) + [CChar(UInt8(ascii: "/"))]
        while let ent = Glibc.readdir(dir) {
            let name: [CChar] = withUnsafePointer(to: &ent.pointee.d_name) { p in
                p.withMemoryRebound(to: CChar.self, capacity: 256) { Array(UnsafeBufferPointer(start: $0, count: strlen($0))) }
            }
            if name == [46] || name == [46, 46] { continue }
            let child = base + name + [0]
            var st = stat()
            guard child.withUnsafeBufferPointer({ lstat($0.baseAddress!, &st) }) == 0 else { continue }
            let id = s.next
            s.next += 1
            st.st_ino = __ino_t(id)
            let node = Node(st)
            if storing {
                node.parent = parent
                node.name = name + [0]
                if st.st_mode & S_IFMT == S_IFDIR {
                    node.folder = child.withUnsafeBufferPointer { Glibc.open($0.baseAddress!, LinuxCalls.O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) }
                }
            }
            switch st.st_mode & S_IFMT {
            case S_IFREG: if !storing { node.source = child }
            case S_IFLNK:
                var buf = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
                let n = child.withUnsafeBufferPointer { Glibc.readlink($0.baseAddress!, &buf, Int(PATH_MAX)) }
                node.target = Array(buf[0..<max(n, 0)]) + [0]
            default: break
            }
            s.nodes[id] = node
            s.nodes[parent]!.children[name.map { UInt8(bitPattern: $0) }] = id
            if st.st_mode & S_IFMT == S_IFDIR { mirror(child, into: id, storing: storing, &s) }
        }
    }

    /// The session that registers backing files (`FuseSession` is one); before the mount.
    public func setBackingFileRegistry(_ r: (any BackingFileRegistry)?) { registry.withLock { $0 = r } }

    /// Whether creates were answered with the scratch backing file, or (storing) with the real
    /// file's (kernel passthrough: writes are no requests).
    public var writesPassThrough: Bool { backingID.load(ordering: .relaxed) > 0 || storedPassthroughOpens.load(ordering: .relaxed) > 0 }

    /// Whether the files live in a backing folder (`init(storingIn:)`).
    public var stores: Bool { storePath != nil }

    /// System calls made on the backing folder so far (storing; registrations of backing files and
    /// their closes included).
    public var backingSystemCalls: Int { storeCalls.load(ordering: .relaxed) }

    /// Opens of mirrored files answered with their registered backing file (tests, benchmarks).
    public var mirroredPassthroughOpens: Int { mirroredOpens.load(ordering: .relaxed) }

    private static func now() -> UInt64 {
        var t = timespec()
        clock_gettime(CLOCK_MONOTONIC, &t)
        return UInt64(t.tv_sec) * 1_000_000_000 + UInt64(t.tv_nsec)
    }

    private func entry(_ id: UInt64, _ node: Node) -> EntryReply {
        node.given = Self.now()
        return EntryReply(inode: InodeID(rawValue: id), attributes: node.st, attributeTimeout: attributeTimeout, entryTimeout: entryTimeout)
    }

    private static func key(_ name: FileName) -> [UInt8] {
        Array(UnsafeRawBufferPointer(start: name.cString, count: strlen(name.cString)))
    }

    private func made(_ mode: mode_t, _ context: RequestContext) -> stat {
        var st = stat()
        st.st_mode = mode
        st.st_nlink = mode & S_IFMT == S_IFDIR ? 2 : 1
        st.st_uid = context.uid
        st.st_gid = context.gid
        st.st_blksize = 4096
        var t = timespec()
        clock_gettime(CLOCK_REALTIME, &t)
        st.st_atim = t; st.st_mtim = t; st.st_ctim = t
        return st
    }

    /// A new node under a new name; EEXIST when the name is taken. Storing, `store` makes it for
    /// real first (given the folder's descriptor and the name; it returns a descriptor or -1), and
    /// `made` sees the node and that descriptor (under the lock).
    private func add(_ parent: InodeID, _ name: FileName, _ st: stat, target: [CChar] = [],
                     store: ((Int32, UnsafePointer<CChar>) -> Result<Int32, Errno>)? = nil,
                     made: ((Node, Int32) -> Void)? = nil) -> Result<(EntryReply, Int32), Errno> {
        let k = Self.key(name)
        return state.withLock { s in
            guard let p = s.nodes[parent.rawValue], p.st.st_mode & S_IFMT == S_IFDIR else { return .failure(.noSuchFileOrDirectory) }
            guard p.children[k] == nil else { return .failure(.fileExists) }
            var fd: Int32 = -1
            if storePath != nil, let store {
                guard p.folder >= 0 else { return .failure(.noSuchFileOrDirectory) }
                switch store(p.folder, name.cString) {
                case .success(let got): fd = got
                case .failure(let e): return .failure(e)
                }
            }
            let id = s.next
            s.next += 1
            let node = Node(st)
            node.st.st_ino = __ino_t(id)
            node.target = target
            if storePath != nil {
                node.parent = parent.rawValue
                node.name = k.map { CChar(bitPattern: $0) } + [0]
            }
            made?(node, fd)
            s.nodes[id] = node
            p.children[k] = id
            return .success((entry(id, node), fd))
        }
    }

    private func remove(_ parent: InodeID, _ name: FileName, folder: Bool) -> Errno? {
        let k = Self.key(name)
        return state.withLock { s -> Errno? in
            guard let p = s.nodes[parent.rawValue], let id = p.children[k], let node = s.nodes[id] else { return .noSuchFileOrDirectory }
            let isFolder = node.st.st_mode & S_IFMT == S_IFDIR
            if folder && !isFolder { return .notDirectory }
            if !folder && isFolder { return .isDirectory }
            if folder && !node.children.isEmpty { return .directoryNotEmpty }
            if storePath != nil {
                guard p.folder >= 0 else { return .noSuchFileOrDirectory }
                storeCalls.add(1, ordering: .relaxed)
                guard unlinkat(p.folder, name.cString, folder ? AT_REMOVEDIR : 0) == 0 else { return Errno(rawValue: errno) }
                detach(node)
            }
            p.children[k] = nil
            if node.st.st_nlink > 0 { node.st.st_nlink -= 1 }
            return nil
        }
    }

    // MARK: storing

    /// A stored node's name no longer refers to it (unlinked, renamed over): its folder's
    /// descriptor goes; an open of it keeps its own.
    private func detach(_ node: Node) {
        node.parent = 0
        if node.folder >= 0 {
            storeCalls.add(1, ordering: .relaxed)
            close(node.folder)
            node.folder = -1
        }
    }

    /// Where a stored node is: its folder's descriptor and its name (the root: its path), or nil
    /// when it has no name any more.
    private func location(_ id: UInt64, _ node: Node, _ s: borrowing State) -> (dir: Int32, name: [CChar])? {
        if id == 1 { return storePath.map { (AT_FDCWD, $0) } }
        guard node.parent != 0, let p = s.nodes[node.parent], p.folder >= 0 else { return nil }
        return (p.folder, node.name)
    }

    /// A stored file whose data may have changed: its size, blocks and times read from the real
    /// file (`fd`, an open of it, or its name); the rest stays the tree's.
    private func refresh(_ id: UInt64, _ node: Node, _ s: borrowing State, fd: Int32? = nil) {
        guard storePath != nil, node.dirty else { return }
        var st = stat()
        let got: Int32
        if let fd = fd ?? (node.writerFD >= 0 ? node.writerFD : nil) { got = fstat(fd, &st) }
        else if let (dir, name) = location(id, node, s) { got = name.withUnsafeBufferPointer { fstatat(dir, $0.baseAddress!, &st, AT_SYMLINK_NOFOLLOW) } }
        else { return }
        storeCalls.add(1, ordering: .relaxed)
        guard got == 0 else { return }
        node.st.st_size = st.st_size
        node.st.st_blocks = st.st_blocks
        node.st.st_atim = st.st_atim
        node.st.st_mtim = st.st_mtim
        node.st.st_ctim = st.st_ctim
        if node.writers == 0 { node.dirty = false }
    }

    /// The caller gets what it made when it is not the daemon's user (as coordfs's `giveToCaller`).
    private func giveToCaller(_ context: RequestContext, _ give: (uid_t, gid_t) -> Int32) -> Errno? {
        guard context.uid != uid || context.gid != gid else { return nil }
        storeCalls.add(1, ordering: .relaxed)
        return give(context.uid, context.gid) == 0 ? nil : Errno(rawValue: errno)
    }

    /// A stored open's handle: its descriptor, whether it may write, whether it passes through.
    private static func handle(fd: Int32, writer: Bool, through: Bool) -> FileHandleID {
        FileHandleID(rawValue: UInt64(UInt32(bitPattern: fd)) | (writer ? 1 << 32 : 0) | (through ? 1 << 33 : 0))
    }
    private static func opened(_ h: FileHandleID) -> (fd: Int32, writer: Bool, through: Bool) {
        (Int32(bitPattern: UInt32(truncatingIfNeeded: h.rawValue)), h.rawValue & 1 << 32 != 0, h.rawValue & 1 << 33 != 0)
    }

    private static func writes(_ flags: Int32) -> Bool { flags & O_ACCMODE != O_RDONLY || flags & O_TRUNC != 0 }

    /// The reply to a stored open of `node` with descriptor `fd` (under the lock): the real file
    /// registered as its backing file at the inode's first passthrough open.
    private func storedOpen(_ node: Node, fd: Int32, flags: Int32) -> OpenReply {
        let writer = Self.writes(flags)
        node.given = 0   // the kernel drops the inode's atime at a read (openReply)
        if writer { node.writers += 1; node.dirty = true; node.writerFD = fd }
        var through = false
        if node.backing > 0 {
            through = true
        } else if let r = registry.withLock({ $0 }), r.passthroughEnabled {
            storeCalls.add(1, ordering: .relaxed)
            if case .success(let got) = r.openBacking(fd) { node.backing = got; through = true }
        }
        if through { node.backingOpens += 1; storedPassthroughOpens.add(1, ordering: .relaxed) }
        var reply = OpenReply(handle: Self.handle(fd: fd, writer: writer, through: through))
        reply.noFlush = true
        if through { reply.backingID = node.backing }
        return reply
    }

    /// The scratch file's id for an open's reply (registered at the first one, once INIT took
    /// passthrough); nil: writes come to the daemon.
    private func scratchBackingID() -> Int32? {
        let id = backingID.load(ordering: .acquiring)
        if id != 0 { return id > 0 ? id : nil }
        return registry.withLock { r -> Int32? in
            let again = backingID.load(ordering: .acquiring)
            if again != 0 { return again > 0 ? again : nil }
            guard let r, r.passthroughEnabled, let scratch, case .success(let got) = r.openBacking(scratch) else {
                backingID.store(-1, ordering: .releasing)
                return nil
            }
            backingID.store(got, ordering: .releasing)
            return got
        }
    }

    /// A mirrored file's backing id: registered at its first open (its real file opened, registered,
    /// closed: the kernel keeps its own reference), then kept.
    private func mirroredBackingID(_ node: Node, _ source: [CChar]) -> Int32? {
        if node.backing != 0 { return node.backing > 0 ? node.backing : nil }
        return registry.withLock { r -> Int32? in
            guard let r, r.passthroughEnabled else { node.backing = -1; return nil }
            let fd = source.withUnsafeBufferPointer { Glibc.open($0.baseAddress!, O_RDONLY | O_CLOEXEC) }
            guard fd >= 0 else { node.backing = -1; return nil }
            defer { close(fd) }
            guard case .success(let got) = r.openBacking(fd) else { node.backing = -1; return nil }
            node.backing = got
            return got
        }
    }

    private func openReply(_ id: UInt64, flags: Int32) -> Result<OpenReply, Errno> {
        var reply = OpenReply(handle: FileHandleID(rawValue: 1))
        reply.noFlush = true
        // An open's reads bypass the page cache, so the kernel drops the inode's atime: the next
        // listing gives the entry with its attributes again, as coordfs's does.
        let node = state.withLock { s -> Node? in
            let node = s.nodes[id]
            node?.given = 0
            return node
        }
        if let node, let source = node.source {
            guard flags & O_ACCMODE == O_RDONLY else { return .failure(.readOnlyFileSystem) }
            // Nodes are never freed and a node's backing id is set under the lock once.
            reply.backingID = state.withLock { _ in mirroredBackingID(node, source) }
            if reply.backingID != nil { mirroredOpens.add(1, ordering: .relaxed) }
            return .success(reply)
        }
        reply.backingID = scratchBackingID()
        return .success(reply)
    }

    // MARK: FuseFileSystem

    public func initialize(connection c: inout ConnectionInfo) {
        // The capabilities coordfs's Loopback takes (a single-user mount: no POSIX ACLs).
        c.want.insert([.exportSupport, .atomicOTrunc, .spliceRead, .spliceWrite, .spliceMove, .autoInvalidateData,
                       .readdirPlus, .readdirPlusAuto, .parallelDirectoryOps, .asyncDirectIO, .cacheSymlinks])
        c.want.remove([.writebackCache, .posixLocks, .flockLocks])
    }

    public func lookup(_ request: consuming Request, parent: InodeID, name: FileName) {
        let k = Self.key(name)
        let found = state.withLock { s -> EntryReply? in
            guard let id = s.nodes[parent.rawValue]?.children[k], let node = s.nodes[id] else { return nil }
            refresh(id, node, s)
            return entry(id, node)
        }
        request.reply(entry: found ?? .negative(timeout: negativeTimeout))
    }

    public func getattr(_ request: consuming Request, inode: InodeID, file: FileInfo?) {
        let fd = storePath != nil ? file.map { Self.opened($0.handle).fd } : nil
        guard let st = state.withLock({ s -> stat? in
            guard let node = s.nodes[inode.rawValue] else { return nil }
            refresh(inode.rawValue, node, s, fd: fd)
            return node.st
        }) else { return request.reply(error: .noSuchFileOrDirectory) }
        request.reply(attributes: st, timeout: attributeTimeout)
    }

    public func setattr(_ request: consuming Request, inode: InodeID, attributes a: stat, changing: SetAttributes, file: FileInfo?) {
        var t = timespec()
        clock_gettime(CLOCK_REALTIME, &t)
        let fh = storePath != nil ? file.map { Self.opened($0.handle).fd } : nil
        let st = state.withLock { s -> Result<stat, Errno> in
            guard let node = s.nodes[inode.rawValue] else { return .failure(.noSuchFileOrDirectory) }
            if storePath != nil, let e = store(a, changing, node, fh, location(inode.rawValue, node, s)) { return .failure(e) }
            if changing.contains(.mode) { node.st.st_mode = node.st.st_mode & S_IFMT | a.st_mode & 0o7777 }
            if changing.contains(.uid) { node.st.st_uid = a.st_uid }
            if changing.contains(.gid) { node.st.st_gid = a.st_gid }
            if changing.contains(.size) { node.st.st_size = a.st_size }
            if changing.contains(.atimeNow) { node.st.st_atim = t } else if changing.contains(.atime) { node.st.st_atim = a.st_atim }
            if changing.contains(.mtimeNow) { node.st.st_mtim = t } else if changing.contains(.mtime) { node.st.st_mtim = a.st_mtim }
            node.st.st_ctim = t
            // A file written through passthrough: the kernel takes the reply's size as the file's.
            refresh(inode.rawValue, node, s, fd: fh)
            return .success(node.st)
        }
        switch st {
        case .success(let st): request.reply(attributes: st, timeout: attributeTimeout)
        case .failure(let e): request.reply(error: e)
        }
    }

    /// A setattr made on the stored item: through its open `fh` when the kernel names one, else by
    /// its name in its folder (an item without a name and without an open: the tree's only).
    private func store(_ a: stat, _ changing: SetAttributes, _ node: Node, _ fh: Int32?, _ at: (dir: Int32, name: [CChar])?) -> Errno? {
        guard fh != nil || at != nil else { return nil }
        func call(_ r: Int32) -> Errno? {
            storeCalls.add(1, ordering: .relaxed)
            return r == 0 ? nil : Errno(rawValue: errno)
        }
        return (at?.name ?? [0]).withUnsafeBufferPointer { n -> Errno? in
            let name = n.baseAddress!, dir = at?.dir ?? -1
            let link = node.st.st_mode & S_IFMT == S_IFLNK
            if changing.contains(.mode), !link,
               let e = call(fh.map { fchmod($0, a.st_mode & 0o7777) } ?? fchmodat(dir, name, a.st_mode & 0o7777, 0)) { return e }
            if !changing.isDisjoint(with: [.uid, .gid]) {
                let u = changing.contains(.uid) ? a.st_uid : uid_t.max, g = changing.contains(.gid) ? a.st_gid : gid_t.max
                if let e = call(fh.map { fchown($0, u, g) } ?? fchownat(dir, name, u, g, AT_SYMLINK_NOFOLLOW)) { return e }
            }
            if changing.contains(.size) {
                node.dirty = true
                if let fh {
                    if let e = call(ftruncate(fh, a.st_size)) { return e }
                } else {
                    storeCalls.add(1, ordering: .relaxed)
                    let fd = openat(dir, name, O_WRONLY | O_NOFOLLOW | O_CLOEXEC)
                    guard fd >= 0 else { return Errno(rawValue: errno) }
                    defer { storeCalls.add(1, ordering: .relaxed); close(fd) }
                    if let e = call(ftruncate(fd, a.st_size)) { return e }
                }
            }
            if !changing.isDisjoint(with: [.atime, .mtime, .atimeNow, .mtimeNow]) {
                var times = (timespec(tv_sec: 0, tv_nsec: LinuxCalls.UTIME_OMIT), timespec(tv_sec: 0, tv_nsec: LinuxCalls.UTIME_OMIT))
                if changing.contains(.atimeNow) { times.0.tv_nsec = LinuxCalls.UTIME_NOW } else if changing.contains(.atime) { times.0 = a.st_atim }
                if changing.contains(.mtimeNow) { times.1.tv_nsec = LinuxCalls.UTIME_NOW } else if changing.contains(.mtime) { times.1 = a.st_mtim }
                let r = withUnsafePointer(to: &times) { tp in
                    tp.withMemoryRebound(to: timespec.self, capacity: 2) { ts in
                        fh.map { futimens($0, ts) } ?? utimensat(dir, name, ts, AT_SYMLINK_NOFOLLOW)
                    }
                }
                if let e = call(r) { return e }
            }
            return nil
        }
    }

    public func mkdir(_ request: consuming Request, parent: InodeID, name: FileName, mode: mode_t) {
        let bits = mode & 0o7777 & ~(storePath != nil ? storeMask : 0)
        let st = made(S_IFDIR | bits, request.context)
        let context = request.context
        request.reply(add(parent, name, st, store: { dir, name in
            self.storeCalls.add(2, ordering: .relaxed)
            guard mkdirat(dir, name, bits) == 0 else { return .failure(Errno(rawValue: errno)) }
            let fd = openat(dir, name, LinuxCalls.O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            var e = fd < 0 ? Errno(rawValue: errno) : nil
            if e == nil { e = self.giveToCaller(context) { fchownat(fd, "", $0, $1, LinuxCalls.AT_EMPTY_PATH) } }
            if let e {
                if fd >= 0 { close(fd) }
                unlinkat(dir, name, AT_REMOVEDIR)
                return .failure(e)
            }
            return .success(fd)
        }, made: { node, fd in node.folder = fd }).map(\.0))
    }

    public func symlink(_ request: consuming Request, target: UnsafePointer<CChar>, parent: InodeID, name: FileName) {
        var st = made(S_IFLNK | 0o777, request.context)
        let n = strlen(target)
        st.st_size = off_t(n)
        let context = request.context
        request.reply(add(parent, name, st, target: Array(UnsafeBufferPointer(start: target, count: n)) + [0], store: { dir, name in
            self.storeCalls.add(1, ordering: .relaxed)
            guard symlinkat(target, dir, name) == 0 else { return .failure(Errno(rawValue: errno)) }
            if let e = self.giveToCaller(context, { fchownat(dir, name, $0, $1, AT_SYMLINK_NOFOLLOW) }) {
                unlinkat(dir, name, 0)
                return .failure(e)
            }
            return .success(-1)
        }).map(\.0))
    }

    public func readlink(_ request: consuming Request, inode: InodeID) {
        guard let target = state.withLock({ $0.nodes[inode.rawValue]?.target }), !target.isEmpty else { return request.reply(error: .invalidArgument) }
        let link = UnsafeMutablePointer<CChar>.allocate(capacity: target.count)
        link.initialize(from: target, count: target.count)
        defer { link.deallocate() }
        request.reply(link: link)
    }

    public func create(_ request: consuming Request, parent: InodeID, name: FileName, mode: mode_t, file: FileInfo) {
        let bits = mode & 0o7777 & ~(storePath != nil ? storeMask : 0)
        let st = made(S_IFREG | bits, request.context)
        if storePath != nil {
            let context = request.context, flags = file.flags
            var reply: OpenReply? = nil
            let made = add(parent, name, st, store: { dir, name in
                self.storeCalls.add(1, ordering: .relaxed)
                let fd = openat(dir, name, (flags & ~(O_NOFOLLOW | LinuxCalls.O_DIRECT)) | O_CREAT | O_EXCL | O_CLOEXEC, bits)
                guard fd >= 0 else { return .failure(Errno(rawValue: errno)) }
                if let e = self.giveToCaller(context, { fchown(fd, $0, $1) }) {
                    close(fd)
                    unlinkat(dir, name, 0)
                    return .failure(e)
                }
                return .success(fd)
            }, made: { node, fd in reply = self.storedOpen(node, fd: fd, flags: flags) })
            switch made {
            case .success(let (e, _)): request.reply(create: e, open: reply!, flags: flags)
            case .failure(let e): request.reply(error: e)
            }
            return
        }
        switch add(parent, name, st).map(\.0) {
        case .success(let e):
            switch openReply(e.inode.rawValue, flags: file.flags) {
            case .success(let open): request.reply(create: e, open: open, flags: file.flags)
            case .failure(let err): request.reply(error: err)
            }
        case .failure(let e): request.reply(error: e)
        }
    }

    public func open(_ request: consuming Request, inode: InodeID, file: FileInfo) {
        if storePath != nil {
            let flags = file.flags
            let got = state.withLock { s -> Result<OpenReply, Errno> in
                guard let node = s.nodes[inode.rawValue], let (dir, name) = location(inode.rawValue, node, s) else { return .failure(.noSuchFileOrDirectory) }
                storeCalls.add(1, ordering: .relaxed)
                let fd = name.withUnsafeBufferPointer { openat(dir, $0.baseAddress!, (flags & ~(O_CREAT | O_EXCL | O_NOFOLLOW | LinuxCalls.O_DIRECT)) | O_NOFOLLOW | O_CLOEXEC) }
                guard fd >= 0 else { return .failure(Errno(rawValue: errno)) }
                return .success(storedOpen(node, fd: fd, flags: flags))
            }
            switch got {
            case .success(let open): request.reply(open: open, flags: flags)
            case .failure(let e): request.reply(error: e)
            }
            return
        }
        switch openReply(inode.rawValue, flags: file.flags) {
        case .success(let open): request.reply(open: open, flags: file.flags)
        case .failure(let e): request.reply(error: e)
        }
    }

    public func write(_ request: consuming Request, inode: InodeID, data: IncomingData, offset: Int, file: FileInfo) {
        guard storePath != nil else { return request.reply(written: data.count) }
        storeCalls.add(1, ordering: .relaxed)
        switch data.write(to: Self.opened(file.handle).fd, at: offset) {
        case .success(let n): request.reply(written: n)
        case .failure(let e): request.reply(error: e)
        }
    }

    public func read(_ request: consuming Request, inode: InodeID, size: Int, offset: Int, file: FileInfo) {
        guard storePath != nil else { return request.reply(buffer: UnsafeRawBufferPointer(start: nil, count: 0)) }
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: max(size, 1), alignment: 8)
        defer { buffer.deallocate() }
        storeCalls.add(1, ordering: .relaxed)
        let n = pread(Self.opened(file.handle).fd, buffer, size, off_t(offset))
        if n < 0 { return request.reply(error: Errno(rawValue: errno)) }
        request.reply(buffer: UnsafeRawBufferPointer(start: buffer, count: n))
    }

    public func flush(_ request: consuming Request, inode: InodeID, file: FileInfo) { request.replyOK() }

    public func fsync(_ request: consuming Request, inode: InodeID, dataOnly: Bool, file: FileInfo) {
        guard storePath != nil else { return request.replyOK() }
        storeCalls.add(1, ordering: .relaxed)
        let fd = Self.opened(file.handle).fd
        request.reply((dataOnly ? fdatasync(fd) : Glibc.fsync(fd)) == 0 ? nil : Errno(rawValue: errno))
    }

    /// Storing: the open's descriptor goes, and with the inode's last passthrough open its backing id.
    public func release(_ request: consuming Request, inode: InodeID, file: FileInfo) {
        guard storePath != nil else { return request.replyOK() }
        let (fd, writer, through) = Self.opened(file.handle)
        let done = state.withLock { s -> Int32 in
            guard let node = s.nodes[inode.rawValue] else { return 0 }
            if writer { node.writers -= 1 }
            if node.writerFD == fd { node.writerFD = -1 }
            guard through else { return 0 }
            node.backingOpens -= 1
            guard node.backingOpens == 0 else { return 0 }
            defer { node.backing = 0 }
            return node.backing
        }
        if done > 0, let r = registry.withLock({ $0 }) {
            storeCalls.add(1, ordering: .relaxed)
            r.closeBacking(done)
        }
        storeCalls.add(1, ordering: .relaxed)
        close(fd)
        request.replyOK()
    }

    public func unlink(_ request: consuming Request, parent: InodeID, name: FileName) {
        request.reply(remove(parent, name, folder: false))
    }

    public func rmdir(_ request: consuming Request, parent: InodeID, name: FileName) {
        request.reply(remove(parent, name, folder: true))
    }

    public func rename(_ request: consuming Request, parent: InodeID, name: FileName, newParent: InodeID, newName: FileName, flags: UInt32) {
        let from = Self.key(name), to = Self.key(newName)
        let noReplace = LinuxCalls.renameNoReplace, exchange = LinuxCalls.renameExchange
        let e = state.withLock { s -> Errno? in
            guard let p = s.nodes[parent.rawValue], let np = s.nodes[newParent.rawValue], let id = p.children[from], let node = s.nodes[id] else { return .noSuchFileOrDirectory }
            let old = np.children[to]
            if flags & noReplace != 0, old != nil { return .fileExists }
            if flags & exchange != 0, old == nil { return .noSuchFileOrDirectory }
            if flags & exchange == 0, let old, let o = s.nodes[old], o.st.st_mode & S_IFMT == S_IFDIR, !o.children.isEmpty { return .directoryNotEmpty }
            if old == id { return nil }
            if storePath != nil {
                guard p.folder >= 0, np.folder >= 0 else { return .noSuchFileOrDirectory }
                storeCalls.add(1, ordering: .relaxed)
                guard LinuxCalls.renameat2(p.folder, name.cString, np.folder, newName.cString, flags) == 0 else { return Errno(rawValue: errno) }
            }
            let replaced = old.flatMap { s.nodes[$0] }
            if flags & exchange != 0, let old, let replaced {
                p.children[from] = old
                if storePath != nil { replaced.parent = parent.rawValue; replaced.name = from.map { CChar(bitPattern: $0) } + [0] }
            } else {
                p.children[from] = nil
                if let replaced, storePath != nil { detach(replaced) }
            }
            np.children[to] = id
            if storePath != nil { node.parent = newParent.rawValue; node.name = to.map { CChar(bitPattern: $0) } + [0] }
            return nil
        }
        request.reply(e)
    }

    public func lseek(_ request: consuming Request, inode: InodeID, offset: Int, whence: Int32, file: FileInfo) {
        let size = Int(state.withLock { $0.nodes[inode.rawValue]?.st.st_size } ?? 0)
        let seekData: Int32 = 3, seekHole: Int32 = 4   // SEEK_DATA, SEEK_HOLE (GNU: not in Glibc's module)
        switch whence {
        case seekData, seekHole:
            if offset >= size { return request.reply(error: Errno(rawValue: ENXIO)) }
            request.reply(seekOffset: whence == seekData ? offset : size)
        default: request.reply(seekOffset: offset)
        }
    }

    public func access(_ request: consuming Request, inode: InodeID, mask: Int32) { request.replyOK() }

    public func statfs(_ request: consuming Request, inode: InodeID) {
        var s = statvfs()
        s.f_bsize = 4096; s.f_frsize = 4096; s.f_namemax = 255
        request.reply(statfs: s)
    }

    public func getxattr(_ request: consuming Request, inode: InodeID, name: FileName, size: Int) {
        request.reply(error: .noData)
    }

    public func listxattr(_ request: consuming Request, inode: InodeID, size: Int) {
        request.reply(xattrSize: 0)
    }

    public func setxattr(_ request: consuming Request, inode: InodeID, name: FileName, value: UnsafeRawBufferPointer, flags: Int32) {
        request.replyOK()
    }

    public func removexattr(_ request: consuming Request, inode: InodeID, name: FileName) {
        request.reply(error: .noData)
    }

    /// The folder's names at opendir, listed by index (the offset) until releasedir.
    public func opendir(_ request: consuming Request, inode: InodeID, file: FileInfo) {
        let handle = state.withLock { s -> UInt64? in
            guard let node = s.nodes[inode.rawValue], node.st.st_mode & S_IFMT == S_IFDIR else { return nil }
            var list: [(name: [CChar], id: UInt64)] = [([46, 0], 0), ([46, 46, 0], 0)]
            list.reserveCapacity(node.children.count + 2)
            for (name, id) in node.children { list.append((name.map { CChar(bitPattern: $0) } + [0], id)) }
            let h = s.nextListing
            s.nextListing += 1
            s.listings[h] = list
            return h
        }
        guard let handle else { return request.reply(error: .notDirectory) }
        request.reply(open: OpenReply(handle: FileHandleID(rawValue: handle)), flags: file.flags)
    }

    public func readdir(_ request: consuming Request, inode: InodeID, size: Int, offset: Int, file: FileInfo, plus: Bool) {
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: size, alignment: 8)
        defer { buffer.deallocate() }
        var used = 0
        let fresh = Self.now() &- UInt64(entryTimeout * 5e8)   // given less than half a lifetime ago
        state.withLock { s in
            guard let list = s.listings[file.handle.rawValue] else { return }
            var i = offset
            while i < list.count {
                let (name, id) = list[i]
                let node = id == 0 ? nil : s.nodes[id]
                let n: Int = name.withUnsafeBufferPointer { p in
                    let remaining = size - used
                    guard let node else {
                        var st = stat()
                        st.st_mode = S_IFDIR
                        return plus
                            ? request.addDirectoryEntryPlus(into: buffer + used, capacity: remaining, name: p.baseAddress!,
                                                            entry: EntryReply(inode: InodeID(rawValue: 0), attributes: st, attributeTimeout: 0, entryTimeout: 0), nextOffset: i + 1)
                            : request.addDirectoryEntry(into: buffer + used, capacity: remaining, name: p.baseAddress!, attributes: st, nextOffset: i + 1)
                    }
                    if !plus { return request.addDirectoryEntry(into: buffer + used, capacity: remaining, name: p.baseAddress!, attributes: node.st, nextOffset: i + 1) }
                    if node.st.st_mode & S_IFMT != S_IFDIR && node.given > fresh {
                        var st = stat()
                        st.st_ino = node.st.st_ino
                        st.st_mode = node.st.st_mode & S_IFMT
                        return request.addDirectoryEntryPlus(into: buffer + used, capacity: remaining, name: p.baseAddress!,
                                                             entry: EntryReply(inode: InodeID(rawValue: 0), attributes: st, attributeTimeout: 0, entryTimeout: 0), nextOffset: i + 1)
                    }
                    refresh(id, node, s)
                    let given = node.given
                    let n = request.addDirectoryEntryPlus(into: buffer + used, capacity: remaining, name: p.baseAddress!, entry: entry(id, node), nextOffset: i + 1)
                    if n > remaining { node.given = given }
                    return n
                }
                if n > size - used { break }
                used += n
                i += 1
            }
        }
        request.reply(buffer: UnsafeRawBufferPointer(start: buffer, count: used))
    }

    public func releasedir(_ request: consuming Request, inode: InodeID, file: FileInfo) {
        state.withLock { _ = $0.listings.removeValue(forKey: file.handle.rawValue) }
        request.replyOK()
    }
}
