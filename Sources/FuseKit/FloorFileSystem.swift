import Glibc
import SystemPackage
import Synchronization

/// A file system that does no work: the floor of what any FUSE daemon costs on this kernel
/// (`coordfs-bench floor`, docs/benchmarks.md "The kernel's floor").
///
/// An in-memory tree answered the way coordfs answers it, but with no backing folder, no
/// coordination and no log: a missing name is a negative entry cached for `negativeTimeout` (as
/// coordfs's watched folders give), names and attributes are kept for `entryTimeout` and
/// `attributeTimeout`, a listing is READDIRPLUS with each entry's attributes (a regular file the
/// kernel was given less than half an entry lifetime ago by name alone, as coordfs gives it),
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

    public init(entryTimeout: Double = 10, attributeTimeout: Double = 10, negativeTimeout: Double = 10, scratchBacking: Int32? = nil,
                mirroring folder: String? = nil) {
        self.entryTimeout = entryTimeout
        self.attributeTimeout = attributeTimeout
        self.negativeTimeout = negativeTimeout
        self.scratch = scratchBacking
        uid = getuid()
        gid = getgid()
        if scratchBacking == nil { backingID.store(-1, ordering: .relaxed) }
        var root = stat()
        root.st_ino = 1
        root.st_mode = S_IFDIR | 0o755
        root.st_nlink = 2
        root.st_uid = uid
        root.st_gid = gid
        root.st_blksize = 4096
        state.withLock { s in
            s.nodes[1] = Node(root)
            if let folder { Self.mirror(Array(folder.utf8CString), into: 1, &s) }
        }
    }

    /// Copies the names and attributes under `path` (NUL-terminated) into folder `parent`.
    private static func mirror(_ path: [CChar], into parent: UInt64, _ s: inout State) {
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
            switch st.st_mode & S_IFMT {
            case S_IFREG: node.source = child
            case S_IFLNK:
                var buf = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
                let n = child.withUnsafeBufferPointer { Glibc.readlink($0.baseAddress!, &buf, Int(PATH_MAX)) }
                node.target = Array(buf[0..<max(n, 0)]) + [0]
            default: break
            }
            s.nodes[id] = node
            s.nodes[parent]!.children[name.map { UInt8(bitPattern: $0) }] = id
            if st.st_mode & S_IFMT == S_IFDIR { mirror(child, into: id, &s) }
        }
    }

    /// The session that registers backing files (`FuseSession` is one); before the mount.
    public func setBackingFileRegistry(_ r: (any BackingFileRegistry)?) { registry.withLock { $0 = r } }

    /// Whether creates were answered with the scratch backing file (kernel passthrough: writes are
    /// no requests).
    public var writesPassThrough: Bool { backingID.load(ordering: .relaxed) > 0 }

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

    /// A new node under a new name; EEXIST when the name is taken.
    private func add(_ parent: InodeID, _ name: FileName, _ st: stat, target: [CChar] = []) -> Result<EntryReply, Errno> {
        let k = Self.key(name)
        return state.withLock { s in
            guard let p = s.nodes[parent.rawValue], p.st.st_mode & S_IFMT == S_IFDIR else { return .failure(.noSuchFileOrDirectory) }
            guard p.children[k] == nil else { return .failure(.fileExists) }
            let id = s.next
            s.next += 1
            let node = Node(st)
            node.st.st_ino = __ino_t(id)
            node.target = target
            s.nodes[id] = node
            p.children[k] = id
            return .success(entry(id, node))
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
            p.children[k] = nil
            if node.st.st_nlink > 0 { node.st.st_nlink -= 1 }
            return nil
        }
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
        let node = state.withLock { $0.nodes[id] }
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
            return entry(id, node)
        }
        request.reply(entry: found ?? .negative(timeout: negativeTimeout))
    }

    public func getattr(_ request: consuming Request, inode: InodeID, file: FileInfo?) {
        guard let st = state.withLock({ $0.nodes[inode.rawValue]?.st }) else { return request.reply(error: .noSuchFileOrDirectory) }
        request.reply(attributes: st, timeout: attributeTimeout)
    }

    public func setattr(_ request: consuming Request, inode: InodeID, attributes a: stat, changing: SetAttributes, file: FileInfo?) {
        var t = timespec()
        clock_gettime(CLOCK_REALTIME, &t)
        let st = state.withLock { s -> stat? in
            guard let node = s.nodes[inode.rawValue] else { return nil }
            if changing.contains(.mode) { node.st.st_mode = node.st.st_mode & S_IFMT | a.st_mode & 0o7777 }
            if changing.contains(.uid) { node.st.st_uid = a.st_uid }
            if changing.contains(.gid) { node.st.st_gid = a.st_gid }
            if changing.contains(.size) { node.st.st_size = a.st_size }
            if changing.contains(.atimeNow) { node.st.st_atim = t } else if changing.contains(.atime) { node.st.st_atim = a.st_atim }
            if changing.contains(.mtimeNow) { node.st.st_mtim = t } else if changing.contains(.mtime) { node.st.st_mtim = a.st_mtim }
            node.st.st_ctim = t
            return node.st
        }
        guard let st else { return request.reply(error: .noSuchFileOrDirectory) }
        request.reply(attributes: st, timeout: attributeTimeout)
    }

    public func mkdir(_ request: consuming Request, parent: InodeID, name: FileName, mode: mode_t) {
        let st = made(S_IFDIR | mode & 0o7777, request.context)
        request.reply(add(parent, name, st))
    }

    public func symlink(_ request: consuming Request, target: UnsafePointer<CChar>, parent: InodeID, name: FileName) {
        var st = made(S_IFLNK | 0o777, request.context)
        let n = strlen(target)
        st.st_size = off_t(n)
        request.reply(add(parent, name, st, target: Array(UnsafeBufferPointer(start: target, count: n)) + [0]))
    }

    public func readlink(_ request: consuming Request, inode: InodeID) {
        guard let target = state.withLock({ $0.nodes[inode.rawValue]?.target }), !target.isEmpty else { return request.reply(error: .invalidArgument) }
        let link = UnsafeMutablePointer<CChar>.allocate(capacity: target.count)
        link.initialize(from: target, count: target.count)
        defer { link.deallocate() }
        request.reply(link: link)
    }

    public func create(_ request: consuming Request, parent: InodeID, name: FileName, mode: mode_t, file: FileInfo) {
        let st = made(S_IFREG | mode & 0o7777, request.context)
        switch add(parent, name, st) {
        case .success(let e):
            switch openReply(e.inode.rawValue, flags: file.flags) {
            case .success(let open): request.reply(create: e, open: open, flags: file.flags)
            case .failure(let err): request.reply(error: err)
            }
        case .failure(let e): request.reply(error: e)
        }
    }

    public func open(_ request: consuming Request, inode: InodeID, file: FileInfo) {
        switch openReply(inode.rawValue, flags: file.flags) {
        case .success(let open): request.reply(open: open, flags: file.flags)
        case .failure(let e): request.reply(error: e)
        }
    }

    public func write(_ request: consuming Request, inode: InodeID, data: IncomingData, offset: Int, file: FileInfo) {
        request.reply(written: data.count)
    }

    public func read(_ request: consuming Request, inode: InodeID, size: Int, offset: Int, file: FileInfo) {
        request.reply(buffer: UnsafeRawBufferPointer(start: nil, count: 0))
    }

    public func flush(_ request: consuming Request, inode: InodeID, file: FileInfo) { request.replyOK() }
    public func fsync(_ request: consuming Request, inode: InodeID, dataOnly: Bool, file: FileInfo) { request.replyOK() }

    public func unlink(_ request: consuming Request, parent: InodeID, name: FileName) {
        request.reply(remove(parent, name, folder: false))
    }

    public func rmdir(_ request: consuming Request, parent: InodeID, name: FileName) {
        request.reply(remove(parent, name, folder: true))
    }

    public func rename(_ request: consuming Request, parent: InodeID, name: FileName, newParent: InodeID, newName: FileName, flags: UInt32) {
        let from = Self.key(name), to = Self.key(newName)
        let e = state.withLock { s -> Errno? in
            guard let p = s.nodes[parent.rawValue], let np = s.nodes[newParent.rawValue], let id = p.children[from] else { return .noSuchFileOrDirectory }
            if let old = np.children[to], let o = s.nodes[old], o.st.st_mode & S_IFMT == S_IFDIR, !o.children.isEmpty { return .directoryNotEmpty }
            p.children[from] = nil
            np.children[to] = id
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
