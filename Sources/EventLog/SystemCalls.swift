import Glibc
import LinuxGNU

/// Thin errno-checked wrappers: every syscall retries EINTR (`Linux.sys`) and becomes a typed error.
enum Sys {
    static func openat(_ dir: Int32, _ name: String, _ flags: Int32, _ mode: mode_t = 0, path: String) throws -> Int32 {
        switch sysValue({ Glibc.openat(dir, name, flags | O_CLOEXEC, mode) }) {
        case .success(let fd): return fd
        case .failure(let e): throw EventLogError.failed(operation: "open", path: path, errno: e.rawValue)
        }
    }

    static func open(_ path: String, _ flags: Int32, _ mode: mode_t = 0) throws -> Int32 {
        switch sysValue({ Glibc.open(path, flags | O_CLOEXEC, mode) }) {
        case .success(let fd): return fd
        case .failure(let e): throw EventLogError.failed(operation: "open", path: path, errno: e.rawValue)
        }
    }

    /// Writes all of `bytes` (looping over short writes).
    static func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, path: String) throws {
        let (_, error) = write(fd, bytes, path: path)
        if let error { throw error }
    }

    /// Writes as much of `bytes` as the file takes (looping over short writes): how many bytes are
    /// in the file, and the error that stopped it before the end (a full disk takes what fits first).
    /// `path` names the file in an error and is made only then (the log writer calls this for every
    /// batch, and a segment's path cost some 11,000 instructions to make).
    static func write(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, path: @autoclosure () -> String) -> (written: Int, error: EventLogError?) {
        var done = 0
        while done < bytes.count {
            switch sysValue({ Glibc.write(fd, bytes.baseAddress! + done, bytes.count - done) }) {
            case .success(let n) where n > 0: done += n
            case .success: return (done, .failed(operation: "write", path: path(), errno: EIO))
            case .failure(let e): return (done, .failed(operation: "write", path: path(), errno: e.rawValue))
            }
        }
        return (done, nil)
    }

    /// Reads up to `count` bytes at `offset`, looping until EOF or `count` bytes.
    static func pread(_ fd: Int32, _ buf: UnsafeMutableRawPointer, _ count: Int, _ offset: Int, path: String) throws -> Int {
        var done = 0
        while done < count {
            switch sysValue({ Glibc.pread(fd, buf + done, count - done, off_t(offset + done)) }) {
            case .success(0): return done
            case .success(let n): done += n
            case .failure(let e): throw EventLogError.failed(operation: "read", path: path, errno: e.rawValue)
            }
        }
        return done
    }

    static func fileSize(_ fd: Int32, path: String) throws -> Int {
        var st = stat()
        guard fstat(fd, &st) == 0 else { throw EventLogError.failed(operation: "stat", path: path, errno: errno) }
        return Int(st.st_size)
    }

    static func close(_ fd: Int32) {
        // Linux closes the fd even when close() reports EINTR; never retry.
        _ = Glibc.close(fd)
    }
}
