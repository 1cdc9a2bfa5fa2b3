import Glibc

/// Errors from opening, writing or reading an event log directory.
public enum EventLogError: Error, Sendable, Equatable, CustomStringConvertible {
    /// A system call failed: `operation` on `path` with `errno`.
    case system(operation: String, path: String, errno: Int32)
    /// Stored data is damaged or not understood.
    case corrupt(String)
    /// A file in the log directory is not an event log segment (wrong magic or header).
    case notASegment(path: String, reason: String)
    /// Another writer (another coordfs daemon for the same backing folder) holds the log.
    case locked(path: String)
    /// A bad argument: an empty directory path, an unparsable glob or kind, ...
    case invalidArgument(String)
    /// The writer was closed.
    case closed

    /// `error` itself when it is an `EventLogError`, otherwise wrapped as `.corrupt`.
    init(_ error: any Error) {
        self = (error as? EventLogError) ?? .corrupt(String(describing: error))
    }

    public var description: String {
        switch self {
        case .system(let op, let path, let e):
            return "\(op) \(path): \(String(cString: strerror(e))) (errno \(e))"
        case .corrupt(let what): return "event log damaged: \(what)"
        case .notASegment(let path, let reason): return "\(path) is not an event log segment: \(reason)"
        case .locked(let path):
            return "event log \(path) is in use by another writer (is another coordfs mounted on this folder?)"
        case .invalidArgument(let what): return what
        case .closed: return "event log writer is closed"
        }
    }
}

/// Thin errno-checked wrappers: every syscall retries EINTR and becomes a typed error.
enum Sys {
    static func openat(_ dir: Int32, _ name: String, _ flags: Int32, _ mode: mode_t = 0, path: String) throws -> Int32 {
        while true {
            let fd = Glibc.openat(dir, name, flags | O_CLOEXEC, mode)
            if fd >= 0 { return fd }
            if errno == EINTR { continue }
            throw EventLogError.system(operation: "open", path: path, errno: errno)
        }
    }

    static func open(_ path: String, _ flags: Int32, _ mode: mode_t = 0) throws -> Int32 {
        while true {
            let fd = Glibc.open(path, flags | O_CLOEXEC, mode)
            if fd >= 0 { return fd }
            if errno == EINTR { continue }
            throw EventLogError.system(operation: "open", path: path, errno: errno)
        }
    }

    /// Writes all of `bytes` (looping over short writes).
    static func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, path: String) throws {
        var done = 0
        while done < bytes.count {
            let n = Glibc.write(fd, bytes.baseAddress! + done, bytes.count - done)
            if n > 0 {
                done += n
            } else if n < 0 && errno == EINTR {
                continue
            } else {
                throw EventLogError.system(operation: "write", path: path, errno: n < 0 ? errno : EIO)
            }
        }
    }

    /// Reads up to `count` bytes at `offset`, looping until EOF or `count` bytes.
    static func pread(_ fd: Int32, _ buf: UnsafeMutableRawPointer, _ count: Int, _ offset: Int, path: String) throws -> Int {
        var done = 0
        while done < count {
            let n = Glibc.pread(fd, buf + done, count - done, off_t(offset + done))
            if n > 0 {
                done += n
            } else if n == 0 {
                break
            } else if errno != EINTR {
                throw EventLogError.system(operation: "read", path: path, errno: errno)
            }
        }
        return done
    }

    static func fileSize(_ fd: Int32, path: String) throws -> Int {
        var st = stat()
        guard fstat(fd, &st) == 0 else { throw EventLogError.system(operation: "stat", path: path, errno: errno) }
        return Int(st.st_size)
    }

    static func close(_ fd: Int32) {
        // Linux closes the fd even when close() reports EINTR; never retry.
        _ = Glibc.close(fd)
    }
}
