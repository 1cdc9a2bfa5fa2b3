import Glibc
import NameBytes
import Linux
import LinuxGNU

/// The few system calls the store makes, each retrying `EINTR` and turning errno into
/// ``DocumentStoreError/system(operation:path:errno:)``.
enum FileSystem {
    /// The POSIX access ACL of the open file `fd` (the raw `system.posix_acl_access` value), nil
    /// when it has none or it cannot be read.
    static func accessACL(_ fd: Int32) -> [UInt8]? {
        var buffer = [UInt8](repeating: 0, count: 4 + 8 * 8192)  // more entries than ext4 or XFS allow
        let n = buffer.withUnsafeMutableBytes { LinuxCalls.fgetxattr(fd, "system.posix_acl_access", $0.baseAddress, $0.count) }
        return n > 0 ? Array(buffer[0..<n]) : nil
    }

    /// Opens for reading the regular file at `path` that `st` (an `lstat` of that path) described:
    /// not through a symbolic link in its last name, and only if it still is that file (device and
    /// inode). Another user who may write a folder on the path can swap a name between the `lstat`
    /// and the open; what is read, and the owner, mode and ACL recorded with it, are then always
    /// the same file's. A swapped file throws `ESTALE`.
    static func openSame(_ path: String, as st: stat) throws -> Int32 {
        let fd = try open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK)
        guard let now = try? fstat(fd, path), now.st_dev == st.st_dev, now.st_ino == st.st_ino, (now.st_mode & S_IFMT) == S_IFREG else {
            close(fd)
            throw error("open", path, ESTALE)
        }
        return fd
    }

    /// `FICLONE` from `<linux/fs.h>`: `_IOW(0x94, 9, int)`.
    static let ficlone: UInt = 0x4004_9409

    // ioctl and copy_file_range are variadic or hidden behind _GNU_SOURCE, so Swift cannot call
    // them directly; resolve them once through the dynamic linker. Both take only integer and
    // pointer arguments, which the x86-64 and AArch64 calling conventions pass identically to
    // variadic and fixed-argument functions.
    private typealias IoctlInt = @convention(c) (Int32, UInt, Int32) -> Int32
    private typealias CopyFileRange = @convention(c) (
        Int32, UnsafeMutablePointer<Int64>?, Int32, UnsafeMutablePointer<Int64>?, Int, UInt32
    ) -> Int

    private static let ioctlInt: IoctlInt? = {
        guard let symbol = dlsym(dlopen(nil, RTLD_NOW), "ioctl") else { return nil }
        return unsafeBitCast(symbol, to: IoctlInt.self)
    }()

    private static let copyFileRange: CopyFileRange? = {
        guard let symbol = dlsym(dlopen(nil, RTLD_NOW), "copy_file_range") else { return nil }
        return unsafeBitCast(symbol, to: CopyFileRange.self)
    }()

    private typealias StatFS = @convention(c) (UnsafePointer<CChar>, UnsafeMutableRawPointer) -> Int32

    /// `statfs(2)`'s `f_type` (the first field of `struct statfs` on Linux); `<sys/vfs.h>` is not
    /// part of the Glibc module.
    static func filesystemType(_ path: String) -> UInt64? {
        guard let symbol = dlsym(dlopen(nil, RTLD_NOW), "statfs") else { return nil }
        let statfs = unsafeBitCast(symbol, to: StatFS.self)
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: 512, alignment: 16)
        defer { buffer.deallocate() }
        guard statfs(path, buffer) == 0 else { return nil }
        return UInt64(bitPattern: Int64(buffer.load(as: Int.self)))
    }

    static func error(_ operation: String, _ path: String, _ code: Int32 = errno) -> DocumentStoreError {
        .system(operation: operation, path: HeldPath.shown(path), errno: code)
    }

    /// Runs a call that returns -1 and sets errno on failure, retrying EINTR.
    @discardableResult
    static func retrying<T: BinaryInteger>(_ operation: String, _ path: String, _ call: () -> T) throws -> T {
        switch sysValue(call) {
        case .success(let result): return result
        case .failure(let e): throw error(operation, path, e.rawValue)
        }
    }

    static func lstatIfPresent(_ path: String) throws -> stat? {
        var st = stat()
        if path.withNameCString({ lstat($0, &st) }) == 0 { return st }
        let code = errno
        if code == ENOENT || code == ENOTDIR { return nil }
        throw error("lstat", path, code)
    }

    static func fstat(_ fd: Int32, _ path: String) throws -> stat {
        var st = stat()
        try retrying("fstat", path) { Glibc.fstat(fd, &st) }
        return st
    }

    static func open(_ path: String, _ flags: Int32, _ mode: mode_t = 0o600) throws -> Int32 {
        try retrying("open", path) { path.withNameCString { Glibc.open($0, flags | O_CLOEXEC, mode) } }
    }

    static func close(_ fd: Int32) { _ = Glibc.close(fd) }

    static func link(_ from: String, _ to: String) throws {
        try retrying("link", from) { from.withNameCString { a in to.withNameCString { b in Glibc.link(a, b) } } }
    }

    static func rename(_ from: String, _ to: String) throws {
        try retrying("rename", from) { from.withNameCString { a in to.withNameCString { b in Glibc.rename(a, b) } } }
    }

    static func unlinkIfPresent(_ path: String) {
        _ = path.withNameCString { Glibc.unlink($0) }
    }

    static func mkdirs(_ path: String, mode: mode_t = 0o700) throws {
        var prefix = path.utf8.first == UInt8(ascii: "/") ? "" : "."
        for component in path.utf8.split(separator: UInt8(ascii: "/")) {
            prefix += "/" + Substring(component)
            if prefix.withNameCString({ mkdir($0, mode) }) != 0 && errno != EEXIST { throw error("mkdir", prefix) }
        }
    }

    /// Clones `source` into the new file `destination` with `FICLONE`: the two share extents until
    /// one is written. Throws when the filesystem cannot clone (ext4: `EOPNOTSUPP`).
    static func reflink(from source: String, to destination: String) throws {
        let src = try open(source, O_RDONLY)
        defer { close(src) }
        try reflink(fd: src, sourcePath: source, to: destination)
    }

    /// `reflink(from:to:)` from the open file `src`.
    static func reflink(fd src: Int32, sourcePath source: String, to destination: String) throws {
        guard let ioctlInt else { throw error("ioctl(FICLONE)", source, ENOSYS) }
        let dst = try open(destination, O_WRONLY | O_CREAT | O_EXCL, 0o600)
        do {
            try retrying("ioctl(FICLONE)", destination) { ioctlInt(dst, ficlone, src) }
            close(dst)
        } catch {
            close(dst)
            unlinkIfPresent(destination)
            throw error
        }
    }

    /// Copies `source` into the new file `destination`: `copy_file_range` (in-kernel, and
    /// server-side or shared where the filesystem offers it), then a plain read/write loop.
    /// Returns the number of bytes copied.
    @discardableResult
    static func copy(from source: String, to destination: String) throws -> Int64 {
        let src = try open(source, O_RDONLY)
        defer { close(src) }
        return try copy(fd: src, sourcePath: source, toNew: destination)
    }

    /// `copy(from:to:)` from the open file `src`. `leavingRootReserve`: the bytes are written
    /// without the blocks the file system keeps for root (`RootReserve`; the file is made as before).
    @discardableResult
    static func copy(fd src: Int32, sourcePath source: String, toNew destination: String, leavingRootReserve: Bool = false) throws -> Int64 {
        let dst = try open(destination, O_WRONLY | O_CREAT | O_EXCL, 0o600)
        do {
            let copied = try leaving(leavingRootReserve) { try copy(fd: src, sourcePath: source, to: dst, destinationPath: destination) }
            close(dst)
            return copied
        } catch {
            close(dst)
            unlinkIfPresent(destination)
            throw error
        }
    }

    /// Copies the first `length` bytes of the open file `src` (from its start) into the new file
    /// `destination`; fails (`EIO`, nothing left behind) when the file is shorter by now.
    static func copyPrefix(fd src: Int32, sourcePath source: String, length: Int64, toNew destination: String, leavingRootReserve: Bool = false) throws {
        let dst = try open(destination, O_WRONLY | O_CREAT | O_EXCL, 0o600)
        do {
            let copied = try leaving(leavingRootReserve) { try copy(fd: src, sourcePath: source, to: dst, destinationPath: destination, limit: length) }
            guard copied == length else { throw error("copy", source, EIO) }
            close(dst)
        } catch {
            close(dst)
            unlinkIfPresent(destination)
            throw error
        }
    }

    /// `body`, with the blocks kept for root withheld when `withheld` (`RootReserve`).
    private static func leaving<T>(_ withheld: Bool, _ body: () throws -> T) throws -> T {
        withheld ? try RootReserve.withheld(as: RootReserve.anyUser, body) : try body()
    }

    /// Sets the size of the file at `path` (a clone of a prefix cut to its length).
    static func truncate(_ path: String, to length: Int64) throws {
        let fd = try open(path, O_WRONLY)
        defer { close(fd) }
        _ = try retrying("ftruncate", path) { Glibc.ftruncate(fd, off_t(length)) }
    }

    /// Copies from the start of `src` to its end, or at most `limit` bytes.
    static func copy(fd src: Int32, sourcePath: String, to dst: Int32, destinationPath: String, limit: Int64? = nil) throws -> Int64 {
        var total: Int64 = 0
        func chunk(_ most: Int) -> Int { limit.map { Int(min(Int64(most), $0 - total)) } ?? most }
        if let copyFileRange {
            copying: while true {
                if chunk(1) == 0 { return total }
                switch sysValue({ copyFileRange(src, nil, dst, nil, chunk(1 << 30), 0) }) {
                case .success(0): return total
                case .success(let n): total += Int64(n)
                case .failure(let e):
                    // Not supported here (old kernel, cross-filesystem, special files): fall back.
                    if total == 0 && [EXDEV, EINVAL, ENOSYS, EOPNOTSUPP, EBADF].contains(e.rawValue) { break copying }
                    throw error("copy_file_range", destinationPath, e.rawValue)
                }
            }
        }
        let bufferSize = 1 << 20
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: bufferSize, alignment: 4096)
        defer { buffer.deallocate() }
        while true {
            if chunk(1) == 0 { return total }
            let n = try retrying("read", sourcePath) { read(src, buffer, chunk(bufferSize)) }
            if n == 0 { return total }
            try writeAll(dst, UnsafeRawBufferPointer(start: buffer, count: n), destinationPath)
            total += Int64(n)
        }
    }

    static func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, _ path: String) throws {
        var offset = 0
        while offset < bytes.count {
            let n = try retrying("write", path) { write(fd, bytes.baseAddress! + offset, bytes.count - offset) }
            offset += n
        }
    }

    /// Reads a whole file into memory.
    static func readAll(_ path: String) throws -> [UInt8] {
        let fd = try open(path, O_RDONLY)
        defer { close(fd) }
        return try readAll(fd: fd, path)
    }

    /// Reads the rest of the open file `fd` (named `path` in errors) into memory.
    static func readAll(fd: Int32, _ path: String) throws -> [UInt8] {
        let st = try fstat(fd, path)
        var result = [UInt8]()
        result.reserveCapacity(Int(st.st_size))
        var chunk = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let n = try chunk.withUnsafeMutableBytes { raw in
                try retrying("read", path) { read(fd, raw.baseAddress, raw.count) }
            }
            if n == 0 { return result }
            result.append(contentsOf: chunk[0..<n])
        }
    }

    /// The canonical absolute path (symbolic links resolved).
    static func realPath(_ path: String) throws -> String {
        guard let resolved = path.withNameCString({ realpath($0, nil) }) else { throw error("realpath", path) }
        defer { free(resolved) }
        return String(nameCString: resolved)
    }

    /// Lists the names in a directory (no `.` and `..`).
    static func list(_ path: String) throws -> [String] {
        guard let dir = path.withNameCString({ opendir($0) }) else { throw error("opendir", path) }
        defer { closedir(dir) }
        var names: [String] = []
        while let entry = readdir(dir) {
            let name = withUnsafePointer(to: &entry.pointee.d_name) {
                $0.withMemoryRebound(to: CChar.self, capacity: 256) { String(nameCString: $0) }
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names
    }

    static func fsync(_ fd: Int32, _ path: String) throws {
        try retrying("fsync", path) { Glibc.fsync(fd) }
    }
}
