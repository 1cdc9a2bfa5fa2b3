import CFuse3
import Glibc
import NameBytes

/// A FUSE node id (`fuse_ino_t`). Not the backing inode number: the filesystem chooses it.
public struct InodeID: RawRepresentable, Hashable, Sendable {
    public var rawValue: UInt64
    public init(rawValue: UInt64) { self.rawValue = rawValue }
    /// `FUSE_ROOT_ID`: the mount's root directory.
    public static let root = InodeID(rawValue: 1)
}

/// The per-open handle a filesystem returns from open/create/opendir (`fuse_file_info.fh`).
public struct FileHandleID: RawRepresentable, Hashable, Sendable {
    public var rawValue: UInt64
    public init(rawValue: UInt64) { self.rawValue = rawValue }
}

/// Who made a request (`fuse_req_ctx`): the calling process's ids and umask.
public struct RequestContext: Sendable, Hashable {
    public var uid: uid_t
    public var gid: gid_t
    public var pid: pid_t
    public var umask: mode_t
    public init(uid: uid_t, gid: gid_t, pid: pid_t, umask: mode_t) {
        self.uid = uid; self.gid = gid; self.pid = pid; self.umask = umask
    }
}

/// The answer to lookup/mknod/mkdir/symlink/link/create (`fuse_entry_param`).
public struct EntryReply {
    public var inode: InodeID
    public var generation: UInt64
    public var attributes: stat
    public var attributeTimeout: Double
    public var entryTimeout: Double
    public init(inode: InodeID, generation: UInt64 = 0, attributes: stat, attributeTimeout: Double, entryTimeout: Double) {
        self.inode = inode; self.generation = generation; self.attributes = attributes
        self.attributeTimeout = attributeTimeout; self.entryTimeout = entryTimeout
    }
    /// A negative entry: "this name does not exist", cached by the kernel for `timeout` seconds.
    public static func negative(timeout: Double) -> EntryReply {
        EntryReply(inode: InodeID(rawValue: 0), attributes: stat(), attributeTimeout: 0, entryTimeout: timeout)
    }
    var c: fuse_entry_param {
        var e = fuse_entry_param()
        e.ino = inode.rawValue
        e.generation = generation
        e.attr = attributes
        e.attr_timeout = attributeTimeout
        e.entry_timeout = entryTimeout
        return e
    }
}

/// The answer to open/create/opendir: the handle and the kernel cache flags.
public struct OpenReply: Sendable {
    public var handle: FileHandleID
    /// Bypass the kernel page cache for this open (`direct_io`).
    public var directIO: Bool
    /// Keep cached pages from earlier opens (`keep_cache`).
    public var keepCache: Bool
    /// The file is not seekable (`nonseekable`), e.g. a FIFO.
    public var nonSeekable: Bool
    /// Cache directory entries across opendir (`cache_readdir`).
    public var cacheDirectory: Bool
    /// Kernel passthrough to this registered backing file (`BackingFileRegistry.openBacking`).
    public var backingID: Int32? = nil
    /// close(2) of this open sends no FLUSH (`noflush`, FOPEN_NOFLUSH): nothing to report there.
    public var noFlush = false
    public init(handle: FileHandleID, directIO: Bool = false, keepCache: Bool = false, nonSeekable: Bool = false, cacheDirectory: Bool = false) {
        self.handle = handle; self.directIO = directIO; self.keepCache = keepCache
        self.nonSeekable = nonSeekable; self.cacheDirectory = cacheDirectory
    }
    func apply(to fi: inout fuse_file_info) {
        fi.fh = handle.rawValue
        fi.direct_io = directIO ? 1 : 0
        fi.keep_cache = keepCache ? 1 : 0
        fi.nonseekable = nonSeekable ? 1 : 0
        fi.cache_readdir = cacheDirectory ? 1 : 0
        fi.noflush = noFlush ? 1 : 0
    }
}

/// The per-call file info the kernel sends with open/read/write/release and friends.
public struct FileInfo: Sendable {
    public var flags: Int32
    public var handle: FileHandleID
    public var writePage: Bool
    public var flush: Bool
    public var lockOwner: UInt64
    public var flockRelease: Bool
    init(_ fi: UnsafeMutablePointer<fuse_file_info>?) {
        if let fi {
            flags = fi.pointee.flags
            handle = FileHandleID(rawValue: fi.pointee.fh)
            writePage = fi.pointee.writepage != 0
            flush = fi.pointee.flush != 0
            lockOwner = fi.pointee.lock_owner
            flockRelease = fi.pointee.flock_release != 0
        } else {
            flags = 0; handle = FileHandleID(rawValue: 0); writePage = false; flush = false; lockOwner = 0; flockRelease = false
        }
    }
    /// A file info as the kernel would send it (for requests given to a file system by a test,
    /// `EmbeddedRequest`).
    public init(flags: Int32, handle: FileHandleID = FileHandleID(rawValue: 0), writePage: Bool = false, flush: Bool = false,
                lockOwner: UInt64 = 0, flockRelease: Bool = false) {
        self.flags = flags; self.handle = handle; self.writePage = writePage; self.flush = flush
        self.lockOwner = lockOwner; self.flockRelease = flockRelease
    }
}

/// Which attributes a setattr call changes (`FUSE_SET_ATTR_*`).
public struct SetAttributes: OptionSet, Sendable {
    public var rawValue: Int32
    public init(rawValue: Int32) { self.rawValue = rawValue }
    public static let mode = SetAttributes(rawValue: FUSE_SET_ATTR_MODE)
    public static let uid = SetAttributes(rawValue: FUSE_SET_ATTR_UID)
    public static let gid = SetAttributes(rawValue: FUSE_SET_ATTR_GID)
    public static let size = SetAttributes(rawValue: FUSE_SET_ATTR_SIZE)
    public static let atime = SetAttributes(rawValue: FUSE_SET_ATTR_ATIME)
    public static let mtime = SetAttributes(rawValue: FUSE_SET_ATTR_MTIME)
    public static let atimeNow = SetAttributes(rawValue: FUSE_SET_ATTR_ATIME_NOW)
    public static let mtimeNow = SetAttributes(rawValue: FUSE_SET_ATTR_MTIME_NOW)
    public static let ctime = SetAttributes(rawValue: FUSE_SET_ATTR_CTIME)
    public static let killSUID = SetAttributes(rawValue: 1 << 11) // FUSE_SET_ATTR_KILL_SUID (3.15+ name)

    /// Nothing to set but the change time: chown(f, -1, -1), or (with FUSE_HANDLE_KILLPRIV_V2) the
    /// kernel's way of saying that a write by a caller without CAP_FSETID must drop set-user-ID and
    /// set-group-ID (or, after the kernel removed a file capability, that root's write drops nothing).
    /// The Loopback tells them apart by the caller's system call (`CallerSystemCall`).
    public var dropsPrivileges: Bool {
        isDisjoint(with: [.mode, .uid, .gid, .size, .atime, .mtime, .atimeNow, .mtimeNow])
    }
}

/// A name inside a directory, borrowed from the kernel's request for the duration of one callback.
/// Valid only until the callback returns: copy it (`copy` for I/O, `string` for paths) to keep it.
/// Linux names are bytes: both copies keep every byte (`string` by `LosslessName`'s rule).
public struct FileName {
    public let cString: UnsafePointer<CChar>
    public init(_ cString: UnsafePointer<CChar>) { self.cString = cString }
    /// The name as a lossless string (`LosslessName`): for item paths, never for I/O.
    public var string: String { String(nameCString: cString) }
    /// The kernel's bytes, kept past the callback: the name to do I/O with later.
    public var copy: NameCopy { NameCopy(self) }
    /// Byte-wise comparison without allocating.
    public func equals(_ other: StaticString) -> Bool {
        other.withUTF8Buffer { buf in
            var i = 0
            while i < buf.count { if UInt8(bitPattern: cString[i]) != buf[i] { return false }; i += 1 }
            return cString[i] == 0
        }
    }
}

/// A name's bytes copied out of a request (NUL-terminated), for I/O after the callback returned:
/// the kernel's bytes, never a re-encoded string.
public struct NameCopy: Sendable {
    private let bytes: [CChar]
    public init(_ name: FileName) {
        var n = 0
        while name.cString[n] != 0 { n += 1 }
        bytes = Array(UnsafeBufferPointer(start: name.cString, count: n + 1))
    }
    /// Calls `body` with the NUL-terminated name.
    public func withCString<R>(_ body: (UnsafePointer<CChar>) throws -> R) rethrows -> R {
        try bytes.withUnsafeBufferPointer { try body($0.baseAddress!) }
    }
}
