// Thin errno-capturing wrappers over the syscalls the suites compare, plus the Linux calls and
// constants Swift's Glibc module does not import (renameat2, fallocate, copy_file_range, xattrs,
// SEEK_DATA, OFD locks, ...). Everything returns values, never throws, so that one operation can
// be run on the native folder and on the mount and the two outcomes compared with `==`.
import Glibc
import LinuxGNU

/// The result of one syscall: its return value, and the errno when it failed.
struct Outcome: Equatable, CustomStringConvertible {
    var ret: Int
    var err: Int32

    var ok: Bool { err == 0 }
    var description: String { err == 0 ? "ok(\(ret))" : "-1 \(errnoName(err))" }

    static func success(_ ret: Int = 0) -> Outcome { Outcome(ret: ret, err: 0) }
    static func failure(_ err: Int32) -> Outcome { Outcome(ret: -1, err: err) }
}

/// A symbolic name for an errno, for failure messages ("ENOENT (2)").
func errnoName(_ e: Int32) -> String {
    let names: [Int32: String] = [
        EPERM: "EPERM", ENOENT: "ENOENT", EIO: "EIO", EBADF: "EBADF", EAGAIN: "EAGAIN",
        EACCES: "EACCES", EEXIST: "EEXIST", EXDEV: "EXDEV", ENOTDIR: "ENOTDIR", EISDIR: "EISDIR",
        EINVAL: "EINVAL", ENOSPC: "ENOSPC", EROFS: "EROFS", EMLINK: "EMLINK", ENAMETOOLONG: "ENAMETOOLONG",
        ENOTEMPTY: "ENOTEMPTY", ELOOP: "ELOOP", ENODATA: "ENODATA", ENOSYS: "ENOSYS", ENXIO: "ENXIO",
        EOPNOTSUPP: "EOPNOTSUPP", ENOTCONN: "ENOTCONN", EBUSY: "EBUSY", ERANGE: "ERANGE",
        EFBIG: "EFBIG", ESPIPE: "ESPIPE", ETXTBSY: "ETXTBSY", EDEADLK: "EDEADLK", ENOLCK: "ENOLCK",
    ]
    return "\(names[e] ?? "errno") (\(e))"
}

/// Linux constants missing from Swift's Glibc module (values from the kernel uapi headers).
enum Linux {
    static let SEEK_DATA: Int32 = 3
    static let SEEK_HOLE: Int32 = 4
    static let O_PATH: Int32 = 0o10000000
    static let O_NOATIME: Int32 = 0o1000000
    static let O_TMPFILE: Int32 = 0o20000000 | O_DIRECTORY
    static let F_OFD_GETLK: Int32 = 36
    static let F_OFD_SETLK: Int32 = 37
    static let RENAME_NOREPLACE: UInt32 = 1
    static let RENAME_EXCHANGE: UInt32 = 2
    static let FALLOC_FL_KEEP_SIZE: Int32 = 1
    static let FALLOC_FL_PUNCH_HOLE: Int32 = 2
    static let FALLOC_FL_ZERO_RANGE: Int32 = 0x10
    static let XATTR_CREATE: Int32 = 1
    static let XATTR_REPLACE: Int32 = 2
    static let UTIME_NOW: Int = (1 << 30) - 1
    static let UTIME_OMIT: Int = (1 << 30) - 2
    static let FUSE_SUPER_MAGIC: Int = 0x6573_5546
}

/// C entry points resolved at run time: Glibc exports them, the Swift module map does not.
enum LinuxCalls {
    typealias Renameat2 = @convention(c) (Int32, UnsafePointer<CChar>?, Int32, UnsafePointer<CChar>?, UInt32) -> Int32
    typealias Fallocate = @convention(c) (Int32, Int32, Int, Int) -> Int32
    typealias CopyFileRange = @convention(c) (Int32, UnsafeMutablePointer<Int>?, Int32, UnsafeMutablePointer<Int>?, Int, UInt32) -> Int
    typealias SetXattr = @convention(c) (UnsafePointer<CChar>?, UnsafePointer<CChar>?, UnsafeRawPointer?, Int, Int32) -> Int32
    typealias GetXattr = @convention(c) (UnsafePointer<CChar>?, UnsafePointer<CChar>?, UnsafeMutableRawPointer?, Int) -> Int
    typealias ListXattr = @convention(c) (UnsafePointer<CChar>?, UnsafeMutablePointer<CChar>?, Int) -> Int
    typealias RemoveXattr = @convention(c) (UnsafePointer<CChar>?, UnsafePointer<CChar>?) -> Int32
    typealias FSetXattr = @convention(c) (Int32, UnsafePointer<CChar>?, UnsafeRawPointer?, Int, Int32) -> Int32
    typealias FGetXattr = @convention(c) (Int32, UnsafePointer<CChar>?, UnsafeMutableRawPointer?, Int) -> Int

    private static func resolve<T>(_ name: String, as type: T.Type) -> T {
        guard let handle = dlopen(nil, RTLD_NOW), let sym = dlsym(handle, name) else {
            fatalError("libc does not export \(name)")
        }
        return unsafeBitCast(sym, to: type)
    }

    typealias StatFS = @convention(c) (UnsafePointer<CChar>?, UnsafeMutableRawPointer?) -> Int32
    static let statfs = resolve("statfs", as: StatFS.self)
    static let renameat2 = resolve("renameat2", as: Renameat2.self)
    static let fallocate = resolve("fallocate64", as: Fallocate.self)
    static let copyFileRange = resolve("copy_file_range", as: CopyFileRange.self)
    static let lsetxattr = resolve("lsetxattr", as: SetXattr.self)
    static let lgetxattr = resolve("lgetxattr", as: GetXattr.self)
    static let llistxattr = resolve("llistxattr", as: ListXattr.self)
    static let lremovexattr = resolve("lremovexattr", as: RemoveXattr.self)
    static let fsetxattr = resolve("fsetxattr", as: FSetXattr.self)
    static let fgetxattr = resolve("fgetxattr", as: FGetXattr.self)
}

/// The metadata the suites compare (everything in `struct stat` that is not per-filesystem
/// identity: inode and device numbers differ between a mount and its backing by design).
struct Meta: Equatable, CustomStringConvertible {
    var mode: mode_t
    var nlink: UInt
    var uid: uid_t
    var gid: gid_t
    var rdev: UInt
    var size: Int
    var blocks: Int
    var atime: timespec
    var mtime: timespec
    var ctime: timespec

    init(_ st: stat) {
        mode = st.st_mode; nlink = UInt(st.st_nlink); uid = st.st_uid; gid = st.st_gid
        rdev = UInt(st.st_rdev); size = Int(st.st_size); blocks = Int(st.st_blocks)
        atime = st.st_atim; mtime = st.st_mtim; ctime = st.st_ctim
    }

    var type: mode_t { mode & S_IFMT }
    var perm: mode_t { mode & 0o7777 }

    /// Equality on what must match between two folders holding the same tree, built by
    /// different operations at different moments: no times, no block counts.
    func sameShape(as other: Meta) -> Bool {
        mode == other.mode && nlink == other.nlink && uid == other.uid && gid == other.gid
            && rdev == other.rdev && size == other.size
    }

    var shape: String {
        "mode=\(String(mode, radix: 8)) nlink=\(nlink) uid=\(uid) gid=\(gid) size=\(size)" + (rdev != 0 ? " rdev=\(rdev)" : "")
    }
    var description: String { shape + " blocks=\(blocks) mtime=\(mtime.tv_sec).\(mtime.tv_nsec)" }

    static func == (a: Meta, b: Meta) -> Bool {
        a.sameShape(as: b) && a.blocks == b.blocks && a.atime == b.atime && a.mtime == b.mtime && a.ctime == b.ctime
    }
}

extension timespec: @retroactive Equatable {
    public static func == (a: timespec, b: timespec) -> Bool { a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec }
    /// Nanoseconds since the epoch.
    var ns: Int { tv_sec * 1_000_000_000 + tv_nsec }
}

/// Errno-capturing syscall helpers. Each returns an `Outcome` (or a value plus outcome) so both
/// sides of a comparison can be checked with one `==`.
enum Sys {
    /// Runs `body`, capturing errno when it returns a negative value.
    static func call<I: BinaryInteger>(_ body: () -> I) -> Outcome {
        errno = 0
        let r = body()
        return r < 0 ? .failure(errno) : .success(Int(r))
    }

    static func lstat(_ path: String) -> (Meta?, Outcome) {
        var st = Glibc.stat()
        let o = call { fstatat(AT_FDCWD, path, &st, AT_SYMLINK_NOFOLLOW) }
        return (o.ok ? Meta(st) : nil, o)
    }

    static func stat(_ path: String) -> (Meta?, Outcome) {
        var st = Glibc.stat()
        let o = call { fstatat(AT_FDCWD, path, &st, 0) }
        return (o.ok ? Meta(st) : nil, o)
    }

    static func fstat(_ fd: Int32) -> (Meta?, Outcome) {
        var st = Glibc.stat()
        let o = call { Glibc.fstat(fd, &st) }
        return (o.ok ? Meta(st) : nil, o)
    }

    /// Opens `path`; the outcome's `ret` is the fd on success.
    static func open(_ path: String, _ flags: Int32, _ mode: mode_t = 0o644) -> Outcome {
        call { Glibc.open(path, flags, mode) }
    }

    /// Writes all of `bytes` at `offset` (or at the file position when nil).
    static func write(_ fd: Int32, _ bytes: [UInt8], at offset: Int? = nil) -> Outcome {
        bytes.withUnsafeBytes { buf in
            call { offset.map { pwrite(fd, buf.baseAddress, buf.count, off_t($0)) } ?? Glibc.write(fd, buf.baseAddress, buf.count) }
        }
    }

    /// Reads up to `count` bytes at `offset` (or at the file position when nil).
    static func read(_ fd: Int32, count: Int, at offset: Int? = nil) -> ([UInt8], Outcome) {
        var buf = [UInt8](repeating: 0, count: count)
        let o = buf.withUnsafeMutableBytes { b in
            call { offset.map { pread(fd, b.baseAddress, count, off_t($0)) } ?? Glibc.read(fd, b.baseAddress, count) }
        }
        return (o.ok ? Array(buf.prefix(o.ret)) : [], o)
    }

    /// The whole content of the file at `path`, following symlinks; nil with the outcome on error.
    static func contents(_ path: String) -> ([UInt8]?, Outcome) {
        let o = open(path, O_RDONLY)
        guard o.ok else { return (nil, o) }
        let fd = Int32(o.ret)
        defer { close(fd) }
        var out: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let n = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if n < 0 { if errno == EINTR { continue }; return (nil, .failure(errno)) }
            if n == 0 { break }
            out.append(contentsOf: chunk[0..<n])
        }
        return (out, .success(out.count))
    }

    /// Creates (or replaces) the file at `path` holding `bytes`.
    @discardableResult
    static func put(_ path: String, _ bytes: [UInt8], mode: mode_t = 0o644) -> Outcome {
        let o = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode)
        guard o.ok else { return o }
        let fd = Int32(o.ret)
        let w = write(fd, bytes)
        let c = call { close(fd) }
        return w.ok ? c : w
    }

    static func readlink(_ path: String) -> (String?, Outcome) {
        var buf = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let o = call { Glibc.readlink(path, &buf, buf.count - 1) }
        guard o.ok else { return (nil, o) }
        return (String(decoding: buf[0..<o.ret].map { UInt8(bitPattern: $0) }, as: UTF8.self), o)
    }

    /// Names and d_type of every entry of a directory except "." and "..", sorted by name.
    static func readdir(_ path: String) -> ([Entry], Outcome) {
        errno = 0
        guard let dir = opendir(path) else { return ([], .failure(errno)) }
        defer { closedir(dir) }
        var entries: [Entry] = []
        while true {
            errno = 0
            guard let ent = Glibc.readdir(dir) else {
                if errno != 0 { return (entries, .failure(errno)) }
                break
            }
            let name = withUnsafeBytes(of: ent.pointee.d_name) { raw in
                String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
            }
            if name == "." || name == ".." { continue }
            entries.append(Entry(name: name, type: ent.pointee.d_type))
        }
        return (entries.sorted { $0.name < $1.name }, .success(entries.count))
    }

    struct Entry: Equatable, CustomStringConvertible {
        var name: String
        var type: UInt8
        var description: String { "\(name)[\(type)]" }
    }

    /// user.* extended attributes of `path` (not following symlinks), sorted by name.
    static func xattrs(_ path: String) -> ([String: [UInt8]], Outcome) {
        let size = call { LinuxCalls.llistxattr(path, nil, 0) }
        guard size.ok else { return ([:], size) }
        if size.ret == 0 { return ([:], .success(0)) }
        var names = [CChar](repeating: 0, count: size.ret)
        let got = call { LinuxCalls.llistxattr(path, &names, names.count) }
        guard got.ok else { return ([:], got) }
        var result: [String: [UInt8]] = [:]
        for raw in names[0..<got.ret].split(separator: 0) {
            let name = String(decoding: raw.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            guard name.hasPrefix("user.") else { continue }
            let (value, o) = getxattr(path, name)
            guard o.ok else { return ([:], o) }
            result[name] = value
        }
        return (result, .success(result.count))
    }

    static func getxattr(_ path: String, _ name: String) -> ([UInt8], Outcome) {
        var buf = [UInt8](repeating: 0, count: 65536)
        let o = call { LinuxCalls.lgetxattr(path, name, &buf, buf.count) }
        return (o.ok ? Array(buf.prefix(o.ret)) : [], o)
    }

    static func setxattr(_ path: String, _ name: String, _ value: [UInt8], _ flags: Int32 = 0) -> Outcome {
        value.withUnsafeBytes { v in call { LinuxCalls.lsetxattr(path, name, v.baseAddress, v.count, flags) } }
    }

    static func rename2(_ from: String, _ to: String, _ flags: UInt32) -> Outcome {
        call { LinuxCalls.renameat2(AT_FDCWD, from, AT_FDCWD, to, flags) }
    }

    static func utimens(_ path: String, atime: timespec, mtime: timespec, flags: Int32 = 0) -> Outcome {
        let times = [atime, mtime]
        return call { utimensat(AT_FDCWD, path, times, flags) }
    }

    /// statfs(2)'s f_type (the filesystem magic) of the filesystem holding `path`.
    static func filesystemType(_ path: String) -> Int? {
        // struct statfs is not imported; f_type is its first field (a long) on Linux.
        var buf = [Int](repeating: 0, count: 32)
        return LinuxCalls.statfs(path, &buf) == 0 ? buf[0] : nil
    }

    static func lseek(_ fd: Int32, _ offset: Int, _ whence: Int32) -> Outcome {
        call { Glibc.lseek(fd, off_t(offset), whence) }
    }

    /// The current wall-clock time as the kernel's coarse clock sees it: file timestamps come
    /// from that clock, which may lag CLOCK_REALTIME by a tick.
    static func coarseNow() -> timespec {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME_COARSE, &ts)
        return ts
    }
}

func ts(_ sec: Int, _ nsec: Int) -> timespec { timespec(tv_sec: sec, tv_nsec: nsec) }

/// Deterministic pseudo-random numbers (SplitMix64), so a failing integrity run can be replayed
/// from its seed.
struct SeededRandom: RandomNumberGenerator {
    private var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// glibc's makedev(3) (a macro, so not imported).
func makedev(_ major: UInt32, _ minor: UInt32) -> dev_t {
    let ma = dev_t(major), mi = dev_t(minor)
    return ((ma & 0xffff_f000) << 32) | ((ma & 0x0000_0fff) << 8) | ((mi & 0xffff_ff00) << 12) | (mi & 0x0000_00ff)
}
