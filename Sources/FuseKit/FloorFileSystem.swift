import Glibc
import Synchronization

/// A file system that does no work: the floor of what any FUSE daemon costs on this kernel
/// (`coordfs-bench floor`, docs/benchmarks.md "The kernel's floor").
///
/// It answers exactly the requests a create + write + stat + unlink workload sends, the way coordfs
/// answers them, but with no backing folder, no coordination and no log: a missing name is a
/// negative entry cached for `negativeTimeout` (as coordfs's watched folders give), a create gets a
/// made-up node id and attributes (a regular file `0644`, or a folder for mkdir, owned by the
/// caller), GETXATTR is ENODATA, GETATTR the node's attributes, UNLINK and RMDIR drop the name,
/// FLUSH and RELEASE are OK, FORGET is nothing. Its one state is the table of names that exist
/// (a lookup of a created name after its entry expired must find it); a node's attributes follow
/// from its id (the low bit: a folder), so GETATTR looks nothing up.
///
/// Writes: with `scratchBacking` (a descriptor of any regular file) and a session that took kernel
/// passthrough, every create's reply carries that one registered backing file, as coordfs's carry
/// each file's own: the kernel writes there itself and a write is no request. Otherwise each
/// write(2) is a WRITE round trip, accepted and dropped. Closes send no FLUSH (`noflush`, as coordfs
/// for files on a local file system).
public final class FloorFileSystem: FuseFileSystem, @unchecked Sendable {
    /// Seconds the kernel keeps names, attributes and "no such name" (coordfs's watched lifetimes).
    public let entryTimeout: Double
    public let attributeTimeout: Double
    public let negativeTimeout: Double

    private struct Name: Hashable {
        let parent: UInt64
        let bytes: [UInt8]
    }
    private let names = Mutex<[Name: UInt64]>([:])
    /// Node ids: `next << 1`, `| 1` for a folder (the root, 1, is a folder).
    private let next = Atomic<UInt64>(1)
    private let uid: uid_t, gid: gid_t

    private let scratch: Int32?
    private let registry = Mutex<(any BackingFileRegistry)?>(nil)
    /// The scratch file's backing id once registered (0: not yet, -1: refused or not wanted).
    private let backingID = Atomic<Int32>(0)

    public init(entryTimeout: Double = 10, attributeTimeout: Double = 10, negativeTimeout: Double = 10, scratchBacking: Int32? = nil) {
        self.entryTimeout = entryTimeout
        self.attributeTimeout = attributeTimeout
        self.negativeTimeout = negativeTimeout
        self.scratch = scratchBacking
        uid = getuid()
        gid = getgid()
        if scratchBacking == nil { backingID.store(-1, ordering: .relaxed) }
    }

    /// The session that registers the scratch backing file (`FuseSession` is one); before the mount.
    public func setBackingFileRegistry(_ r: (any BackingFileRegistry)?) { registry.withLock { $0 = r } }

    /// Whether creates were answered with the scratch backing file (kernel passthrough: writes are
    /// no requests).
    public var writesPassThrough: Bool { backingID.load(ordering: .relaxed) > 0 }

    private func attributes(_ id: UInt64) -> stat {
        var st = stat()
        st.st_ino = __ino_t(id)
        let folder = id & 1 == 1
        st.st_mode = folder ? S_IFDIR | 0o755 : S_IFREG | 0o644
        st.st_nlink = folder ? 2 : 1
        st.st_uid = uid
        st.st_gid = gid
        st.st_blksize = 4096
        return st
    }

    private func entry(_ id: UInt64) -> EntryReply {
        EntryReply(inode: InodeID(rawValue: id), attributes: attributes(id), attributeTimeout: attributeTimeout, entryTimeout: entryTimeout)
    }

    private static func key(_ parent: InodeID, _ name: FileName) -> Name {
        Name(parent: parent.rawValue, bytes: Array(UnsafeRawBufferPointer(start: name.cString, count: strlen(name.cString))))
    }

    /// A new name for a new node; EEXIST when the name is taken.
    private func add(_ parent: InodeID, _ name: FileName, folder: Bool) -> UInt64? {
        let id = next.wrappingAdd(1, ordering: .relaxed).newValue << 1 | (folder ? 1 : 0)
        let k = Self.key(parent, name)
        return names.withLock { table in
            guard table[k] == nil else { return nil }
            table[k] = id
            return id
        }
    }

    private func remove(_ parent: InodeID, _ name: FileName) -> Bool {
        let k = Self.key(parent, name)
        return names.withLock { $0.removeValue(forKey: k) != nil }
    }

    /// The scratch file's id for an open's reply (registered at the first one, once INIT took
    /// passthrough); nil: writes come to the daemon.
    private func backing() -> Int32? {
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

    private func openReply() -> OpenReply {
        var reply = OpenReply(handle: FileHandleID(rawValue: 1))
        reply.noFlush = true
        reply.backingID = backing()
        return reply
    }

    // MARK: FuseFileSystem

    public func initialize(connection c: inout ConnectionInfo) {
        // The capabilities coordfs's Loopback takes (a single-user mount: no POSIX ACLs).
        c.want.insert([.exportSupport, .atomicOTrunc, .spliceRead, .spliceWrite, .spliceMove, .autoInvalidateData,
                       .readdirPlus, .readdirPlusAuto, .parallelDirectoryOps, .asyncDirectIO, .cacheSymlinks])
        c.want.remove([.writebackCache, .posixLocks, .flockLocks])
    }

    public func lookup(_ request: consuming Request, parent: InodeID, name: FileName) {
        let k = Self.key(parent, name)
        if let id = names.withLock({ $0[k] }) { return request.reply(entry: entry(id)) }
        request.reply(entry: .negative(timeout: negativeTimeout))
    }

    public func getattr(_ request: consuming Request, inode: InodeID, file: FileInfo?) {
        request.reply(attributes: attributes(inode.rawValue), timeout: attributeTimeout)
    }

    public func setattr(_ request: consuming Request, inode: InodeID, attributes: stat, changing: SetAttributes, file: FileInfo?) {
        request.reply(attributes: self.attributes(inode.rawValue), timeout: attributeTimeout)
    }

    public func mkdir(_ request: consuming Request, parent: InodeID, name: FileName, mode: mode_t) {
        guard let id = add(parent, name, folder: true) else { return request.reply(error: .fileExists) }
        request.reply(entry: entry(id))
    }

    public func create(_ request: consuming Request, parent: InodeID, name: FileName, mode: mode_t, file: FileInfo) {
        guard let id = add(parent, name, folder: false) else { return request.reply(error: .fileExists) }
        request.reply(create: entry(id), open: openReply(), flags: file.flags)
    }

    public func open(_ request: consuming Request, inode: InodeID, file: FileInfo) {
        request.reply(open: openReply(), flags: file.flags)
    }

    public func write(_ request: consuming Request, inode: InodeID, data: IncomingData, offset: Int, file: FileInfo) {
        request.reply(written: data.count)
    }

    public func read(_ request: consuming Request, inode: InodeID, size: Int, offset: Int, file: FileInfo) {
        request.reply(buffer: UnsafeRawBufferPointer(start: nil, count: 0))
    }

    public func flush(_ request: consuming Request, inode: InodeID, file: FileInfo) { request.replyOK() }

    public func unlink(_ request: consuming Request, parent: InodeID, name: FileName) {
        request.reply(remove(parent, name) ? nil : .noSuchFileOrDirectory)
    }

    public func rmdir(_ request: consuming Request, parent: InodeID, name: FileName) {
        request.reply(remove(parent, name) ? nil : .noSuchFileOrDirectory)
    }

    public func getxattr(_ request: consuming Request, inode: InodeID, name: FileName, size: Int) {
        request.reply(error: .noData)
    }

    public func listxattr(_ request: consuming Request, inode: InodeID, size: Int) {
        request.reply(xattrSize: 0)
    }

    public func opendir(_ request: consuming Request, inode: InodeID, file: FileInfo) {
        request.reply(open: OpenReply(handle: FileHandleID(rawValue: 1)), flags: file.flags)
    }

    public func readdir(_ request: consuming Request, inode: InodeID, size: Int, offset: Int, file: FileInfo, plus: Bool) {
        request.reply(buffer: UnsafeRawBufferPointer(start: nil, count: 0))   // lists nothing (no workload lists)
    }
}
