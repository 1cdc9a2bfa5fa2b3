import CFuse3
import Glibc
import SystemPackage

/// A filesystem served through FUSE's low-level API.
///
/// Each operation receives a `Request` to answer exactly once, now or later (`park()`). Operations not
/// implemented answer ENOSYS, which the kernel remembers and stops sending for most operations.
/// Methods are called on libfuse worker threads, concurrently: implementations must be thread-safe and
/// must never sleep waiting on another party (park the request instead).
public protocol FuseFileSystem: AnyObject, Sendable {
    /// The kernel's INIT: choose capabilities.
    func initialize(connection: inout ConnectionInfo)
    /// The session ends (unmount).
    func destroy()

    func lookup(_ request: consuming Request, parent: InodeID, name: FileName)
    func forget(_ inode: InodeID, count: UInt64)
    func getattr(_ request: consuming Request, inode: InodeID, file: FileInfo?)
    func setattr(_ request: consuming Request, inode: InodeID, attributes: stat, changing: SetAttributes, file: FileInfo?)
    func readlink(_ request: consuming Request, inode: InodeID)
    func mknod(_ request: consuming Request, parent: InodeID, name: FileName, mode: mode_t, device: dev_t)
    func mkdir(_ request: consuming Request, parent: InodeID, name: FileName, mode: mode_t)
    func unlink(_ request: consuming Request, parent: InodeID, name: FileName)
    func rmdir(_ request: consuming Request, parent: InodeID, name: FileName)
    func symlink(_ request: consuming Request, target: UnsafePointer<CChar>, parent: InodeID, name: FileName)
    func rename(_ request: consuming Request, parent: InodeID, name: FileName, newParent: InodeID, newName: FileName, flags: UInt32)
    func link(_ request: consuming Request, inode: InodeID, newParent: InodeID, newName: FileName)
    func open(_ request: consuming Request, inode: InodeID, file: FileInfo)
    func read(_ request: consuming Request, inode: InodeID, size: Int, offset: Int, file: FileInfo)
    func write(_ request: consuming Request, inode: InodeID, data: IncomingData, offset: Int, file: FileInfo)
    func flush(_ request: consuming Request, inode: InodeID, file: FileInfo)
    func release(_ request: consuming Request, inode: InodeID, file: FileInfo)
    func fsync(_ request: consuming Request, inode: InodeID, dataOnly: Bool, file: FileInfo)
    func opendir(_ request: consuming Request, inode: InodeID, file: FileInfo)
    func readdir(_ request: consuming Request, inode: InodeID, size: Int, offset: Int, file: FileInfo, plus: Bool)
    func releasedir(_ request: consuming Request, inode: InodeID, file: FileInfo)
    func fsyncdir(_ request: consuming Request, inode: InodeID, dataOnly: Bool, file: FileInfo)
    func statfs(_ request: consuming Request, inode: InodeID)
    func setxattr(_ request: consuming Request, inode: InodeID, name: FileName, value: UnsafeRawBufferPointer, flags: Int32)
    func getxattr(_ request: consuming Request, inode: InodeID, name: FileName, size: Int)
    func listxattr(_ request: consuming Request, inode: InodeID, size: Int)
    func removexattr(_ request: consuming Request, inode: InodeID, name: FileName)
    func access(_ request: consuming Request, inode: InodeID, mask: Int32)
    func create(_ request: consuming Request, parent: InodeID, name: FileName, mode: mode_t, file: FileInfo)
    /// FUSE_TMPFILE (open(2) of a folder with O_TMPFILE): an unnamed regular file in `parent`, opened,
    /// answered as a create (entry and open). ENOSYS makes the kernel answer EOPNOTSUPP for good.
    func tmpfile(_ request: consuming Request, parent: InodeID, mode: mode_t, file: FileInfo)
    func fallocate(_ request: consuming Request, inode: InodeID, mode: Int32, offset: Int, length: Int, file: FileInfo)
    func copyFileRange(_ request: consuming Request, input: InodeID, inputOffset: Int, inputFile: FileInfo, output: InodeID, outputOffset: Int, outputFile: FileInfo, length: Int, flags: Int32)
    func lseek(_ request: consuming Request, inode: InodeID, offset: Int, whence: Int32, file: FileInfo)

    /// Up to `limit` regular files the kernel holds now (looked up and not forgotten), any of them.
    /// FUSE over io_uring's pulls go through one (`RingTransport.pull`: the kernel answers a retrieve
    /// notification only of a regular file it holds) when the parked request's own node is not one,
    /// a folder's (an unlink, a rename or a create under a presented folder). Called on the ring's
    /// puller thread, never on a request's; it must not wait on anyone. Empty by default (such a park
    /// then pulls only through a file a pull went through before).
    func regularFilesTheKernelHolds(limit: Int) -> [InodeID]
}

extension FuseFileSystem {
    public func initialize(connection: inout ConnectionInfo) {}
    public func destroy() {}
    public func lookup(_ request: consuming Request, parent: InodeID, name: FileName) { request.reply(error: .noFunction) }
    public func forget(_ inode: InodeID, count: UInt64) {}
    public func getattr(_ request: consuming Request, inode: InodeID, file: FileInfo?) { request.reply(error: .noFunction) }
    public func setattr(_ request: consuming Request, inode: InodeID, attributes: stat, changing: SetAttributes, file: FileInfo?) { request.reply(error: .noFunction) }
    public func readlink(_ request: consuming Request, inode: InodeID) { request.reply(error: .noFunction) }
    public func mknod(_ request: consuming Request, parent: InodeID, name: FileName, mode: mode_t, device: dev_t) { request.reply(error: .noFunction) }
    public func mkdir(_ request: consuming Request, parent: InodeID, name: FileName, mode: mode_t) { request.reply(error: .noFunction) }
    public func unlink(_ request: consuming Request, parent: InodeID, name: FileName) { request.reply(error: .noFunction) }
    public func rmdir(_ request: consuming Request, parent: InodeID, name: FileName) { request.reply(error: .noFunction) }
    public func symlink(_ request: consuming Request, target: UnsafePointer<CChar>, parent: InodeID, name: FileName) { request.reply(error: .noFunction) }
    public func rename(_ request: consuming Request, parent: InodeID, name: FileName, newParent: InodeID, newName: FileName, flags: UInt32) { request.reply(error: .noFunction) }
    public func link(_ request: consuming Request, inode: InodeID, newParent: InodeID, newName: FileName) { request.reply(error: .noFunction) }
    public func open(_ request: consuming Request, inode: InodeID, file: FileInfo) { request.reply(error: .noFunction) }
    public func read(_ request: consuming Request, inode: InodeID, size: Int, offset: Int, file: FileInfo) { request.reply(error: .noFunction) }
    public func write(_ request: consuming Request, inode: InodeID, data: IncomingData, offset: Int, file: FileInfo) { request.reply(error: .noFunction) }
    public func flush(_ request: consuming Request, inode: InodeID, file: FileInfo) { request.reply(error: .noFunction) }
    public func release(_ request: consuming Request, inode: InodeID, file: FileInfo) { request.replyOK() }
    public func fsync(_ request: consuming Request, inode: InodeID, dataOnly: Bool, file: FileInfo) { request.reply(error: .noFunction) }
    public func opendir(_ request: consuming Request, inode: InodeID, file: FileInfo) { request.reply(error: .noFunction) }
    public func readdir(_ request: consuming Request, inode: InodeID, size: Int, offset: Int, file: FileInfo, plus: Bool) { request.reply(error: .noFunction) }
    public func releasedir(_ request: consuming Request, inode: InodeID, file: FileInfo) { request.replyOK() }
    public func fsyncdir(_ request: consuming Request, inode: InodeID, dataOnly: Bool, file: FileInfo) { request.reply(error: .noFunction) }
    public func statfs(_ request: consuming Request, inode: InodeID) { request.reply(error: .noFunction) }
    public func setxattr(_ request: consuming Request, inode: InodeID, name: FileName, value: UnsafeRawBufferPointer, flags: Int32) { request.reply(error: .noFunction) }
    public func getxattr(_ request: consuming Request, inode: InodeID, name: FileName, size: Int) { request.reply(error: .noFunction) }
    public func listxattr(_ request: consuming Request, inode: InodeID, size: Int) { request.reply(error: .noFunction) }
    public func removexattr(_ request: consuming Request, inode: InodeID, name: FileName) { request.reply(error: .noFunction) }
    public func access(_ request: consuming Request, inode: InodeID, mask: Int32) { request.reply(error: .noFunction) }
    public func create(_ request: consuming Request, parent: InodeID, name: FileName, mode: mode_t, file: FileInfo) { request.reply(error: .noFunction) }
    public func tmpfile(_ request: consuming Request, parent: InodeID, mode: mode_t, file: FileInfo) { request.reply(error: .noFunction) }
    public func fallocate(_ request: consuming Request, inode: InodeID, mode: Int32, offset: Int, length: Int, file: FileInfo) { request.reply(error: .noFunction) }
    public func copyFileRange(_ request: consuming Request, input: InodeID, inputOffset: Int, inputFile: FileInfo, output: InodeID, outputOffset: Int, outputFile: FileInfo, length: Int, flags: Int32) { request.reply(error: .noFunction) }
    public func lseek(_ request: consuming Request, inode: InodeID, offset: Int, whence: Int32, file: FileInfo) { request.reply(error: .noFunction) }
    public func regularFilesTheKernelHolds(limit: Int) -> [InodeID] { [] }
}

/// The data of a write, as libfuse received it (possibly still in a pipe, for splice).
/// Valid only during the callback.
public struct IncomingData {
    let bufv: UnsafeMutablePointer<fuse_bufvec>

    /// Total bytes.
    public var count: Int { fuse_buf_size(bufv) }

    /// Copy everything to `fd` at `offset` (pwrite, or splice when the data is in a pipe).
    public func write(to fd: Int32, at offset: Int) -> Result<Int, Errno> {
        var out = fuse_bufvec()
        out.count = 1
        out.buf.size = count
        out.buf.flags = fuse_buf_flags(rawValue: FUSE_BUF_IS_FD.rawValue | FUSE_BUF_FD_SEEK.rawValue)
        out.buf.fd = fd
        out.buf.pos = offset
        let n = fuse_buf_copy(&out, bufv, fuse_buf_copy_flags(rawValue: 0))
        return n < 0 ? .failure(Errno(rawValue: Int32(-n))) : .success(n)
    }
}

/// Capabilities negotiated at INIT (`FUSE_CAP_*`).
public struct Capabilities: OptionSet, Sendable {
    public var rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }
    public static let asyncRead = Capabilities(rawValue: UInt32(FUSE_CAP_ASYNC_READ))
    public static let posixLocks = Capabilities(rawValue: UInt32(FUSE_CAP_POSIX_LOCKS))
    public static let atomicOTrunc = Capabilities(rawValue: UInt32(FUSE_CAP_ATOMIC_O_TRUNC))
    public static let exportSupport = Capabilities(rawValue: UInt32(FUSE_CAP_EXPORT_SUPPORT))
    public static let dontMask = Capabilities(rawValue: UInt32(FUSE_CAP_DONT_MASK))
    public static let spliceWrite = Capabilities(rawValue: UInt32(FUSE_CAP_SPLICE_WRITE))
    public static let spliceMove = Capabilities(rawValue: UInt32(FUSE_CAP_SPLICE_MOVE))
    public static let spliceRead = Capabilities(rawValue: UInt32(FUSE_CAP_SPLICE_READ))
    public static let flockLocks = Capabilities(rawValue: UInt32(FUSE_CAP_FLOCK_LOCKS))
    public static let autoInvalidateData = Capabilities(rawValue: UInt32(FUSE_CAP_AUTO_INVAL_DATA))
    public static let readdirPlus = Capabilities(rawValue: UInt32(FUSE_CAP_READDIRPLUS))
    public static let readdirPlusAuto = Capabilities(rawValue: UInt32(FUSE_CAP_READDIRPLUS_AUTO))
    public static let asyncDirectIO = Capabilities(rawValue: UInt32(FUSE_CAP_ASYNC_DIO))
    public static let writebackCache = Capabilities(rawValue: UInt32(FUSE_CAP_WRITEBACK_CACHE))
    public static let parallelDirectoryOps = Capabilities(rawValue: UInt32(FUSE_CAP_PARALLEL_DIROPS))
    public static let handleKillPriv = Capabilities(rawValue: UInt32(FUSE_CAP_HANDLE_KILLPRIV))
    public static let cacheSymlinks = Capabilities(rawValue: UInt32(FUSE_CAP_CACHE_SYMLINKS))
    public static let posixACL = Capabilities(rawValue: UInt32(FUSE_CAP_POSIX_ACL))
}

/// The connection parameters at INIT (`fuse_conn_info`).
public struct ConnectionInfo {
    public let capable: Capabilities
    public var want: Capabilities
    public var maxWrite: UInt32
    public var maxReadahead: UInt32
    public var maxBackground: UInt32
    public var congestionThreshold: UInt32
    public var timeGranularity: UInt32
}
