import Glibc

/// Unix-domain stream sockets at a path, as the tests need them: a client connected to a control
/// socket, or a socket inode left in a folder. Each call returns the descriptor (close-on-exec,
/// the caller closes it) or -1 with `errno` set, as the system calls do; a path that does not fit
/// `sun_path` (108 bytes with its NUL) fails with ENAMETOOLONG rather than being cut.
public enum UnixSocket {
    /// A stream socket connected to `path`.
    public static func connect(_ path: String) -> Int32 {
        withSocket(at: path) { fd, address, length in Glibc.connect(fd, address, length) }
    }

    /// A stream socket bound at `path` (which makes the socket inode there).
    public static func bind(_ path: String) -> Int32 {
        withSocket(at: path) { fd, address, length in Glibc.bind(fd, address, length) }
    }

    /// Whether a client can connect to `path` now.
    public static func accepts(_ path: String) -> Bool {
        let fd = connect(path)
        guard fd >= 0 else { return false }
        close(fd)
        return true
    }

    private static func withSocket(at path: String, _ call: (Int32, UnsafePointer<sockaddr>, socklen_t) -> Int32) -> Int32 {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else {
            errno = ENAMETOOLONG
            return -1
        }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in raw.copyBytes(from: bytes) }
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return -1 }
        let rc = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { call(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard rc == 0 else {
            let code = errno
            close(fd)
            errno = code
            return -1
        }
        return fd
    }
}

/// Polls `condition` every `interval` seconds until it holds or `seconds` have passed; returns
/// whether it held. For "eventually" in tests: a generous bound, never a speed claim.
@discardableResult
public func pollUntil(within seconds: Double, every interval: Double = 0.05, _ condition: () -> Bool) -> Bool {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    let deadline = Double(now.tv_sec) + Double(now.tv_nsec) / 1e9 + seconds
    while true {
        if condition() { return true }
        clock_gettime(CLOCK_MONOTONIC, &now)
        if Double(now.tv_sec) + Double(now.tv_nsec) / 1e9 >= deadline { return false }
        usleep(useconds_t(interval * 1_000_000))
    }
}
