import Glibc
import Linux

/// A failure of the control socket's transport (not of the protocol).
public enum ControlTransportError: Error, Sendable, Equatable, CustomStringConvertible {
    /// A system call failed.
    case system(operation: String, errno: Int32)
    /// Another live daemon already serves this socket path.
    case addressInUse(String)
    /// The peer broke the protocol or refused the request.
    case protocolError(ProtocolError)
    /// The connection is closed (by either side, or the daemon went away).
    case disconnected
    /// No reply within the allowed time.
    case timedOut
    /// The reply did not have the expected type.
    case unexpectedReply(String)

    public var description: String {
        switch self {
        case .system(let operation, let code):
            return "\(operation): \(String(cString: strerror(code)))"
        case .addressInUse(let path): return "another daemon is serving \(path)"
        case .protocolError(let error): return error.description
        case .disconnected: return "the control connection is closed"
        case .timedOut: return "no reply from the daemon in time"
        case .unexpectedReply(let type): return "unexpected reply of type \(type)"
        }
    }
}

/// The credentials of the process at the other end of a Unix socket, from `SO_PEERCRED`
/// (as they were when it called `connect`).
package struct PeerCredentials: Sendable, Hashable, CustomStringConvertible {
    package var pid: Int32
    package var uid: UInt32
    package var gid: UInt32
    package init(pid: Int32, uid: UInt32, gid: UInt32) {
        self.pid = pid
        self.uid = uid
        self.gid = gid
    }
    package var description: String { "pid \(pid) uid \(uid) gid \(gid)" }

    /// Reads `SO_PEERCRED` of a connected Unix socket.
    package static func of(socket fd: Int32) throws(ControlTransportError) -> PeerCredentials {
        // Layout of `struct ucred` (pid_t, uid_t, gid_t); Glibc only exports it under _GNU_SOURCE.
        var raw: (Int32, UInt32, UInt32) = (0, 0, 0)
        var length = socklen_t(MemoryLayout<(Int32, UInt32, UInt32)>.size)
        let soPeerCred: Int32 = 17  // SO_PEERCRED on every Linux architecture Swift supports
        guard getsockopt(fd, SOL_SOCKET, soPeerCred, &raw, &length) == 0 else {
            throw .system(operation: "getsockopt(SO_PEERCRED)", errno: errno)
        }
        return PeerCredentials(pid: raw.0, uid: raw.1, gid: raw.2)
    }
}

/// Small wrappers over the socket calls the transport needs; EINTR is retried (`retryingEINTR`).
enum Sys {
    static func check(_ result: Int32, _ operation: String) throws(ControlTransportError) {
        if result < 0 { throw .system(operation: operation, errno: errno) }
    }

    static func setNonBlocking(_ fd: Int32) throws(ControlTransportError) {
        let flags = fcntl(fd, F_GETFL)
        try check(flags, "fcntl(F_GETFL)")
        try check(fcntl(fd, F_SETFL, flags | O_NONBLOCK), "fcntl(F_SETFL)")
    }

    /// `read`, retrying EINTR.
    static func read(_ fd: Int32, _ buffer: UnsafeMutableRawBufferPointer) -> Int {
        retryingEINTR { Glibc.read(fd, buffer.baseAddress, buffer.count) }
    }

    /// `send` with MSG_NOSIGNAL (a dead peer must not SIGPIPE the daemon), retrying EINTR.
    static func send(_ fd: Int32, _ buffer: UnsafeRawBufferPointer) -> Int {
        retryingEINTR { Glibc.send(fd, buffer.baseAddress, buffer.count, Int32(MSG_NOSIGNAL)) }
    }

    /// Writes all bytes to a blocking socket.
    static func sendAll(_ fd: Int32, _ bytes: [UInt8]) throws(ControlTransportError) {
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeBytes { raw in send(fd, UnsafeRawBufferPointer(rebasing: raw[offset...])) }
            if n < 0 { throw .system(operation: "send", errno: errno) }
            offset += n
        }
    }
}

/// A `sockaddr_un` for a path. Paths too long for `sun_path` (108 bytes) are reached through
/// `/proc/self/fd/N/name` of their directory, which works for both bind and connect on Linux;
/// `body` gets the address while that directory descriptor is open.
func withUnixAddress<R>(
    _ path: String, _ body: (UnsafePointer<sockaddr>, socklen_t) -> R
) throws(ControlTransportError) -> R {
    var effective = path
    var directoryFD: Int32 = -1
    defer { if directoryFD >= 0 { close(directoryFD) } }
    let capacity = MemoryLayout.size(ofValue: sockaddr_un().sun_path)
    if path.utf8.count >= capacity {
        guard let slash = path.lastIndex(of: "/") else { throw .system(operation: "socket path \(path)", errno: ENAMETOOLONG) }
        let directory = slash == path.startIndex ? "/" : String(path[..<slash])
        directoryFD = open(directory, 0o10000000 /* O_PATH, GNU-only in Glibc */ | O_DIRECTORY | O_CLOEXEC)
        if directoryFD < 0 { throw .system(operation: "open \(directory)", errno: errno) }
        effective = "/proc/self/fd/\(directoryFD)/" + path[path.index(after: slash)...]
        if effective.utf8.count >= capacity { throw .system(operation: "socket path \(path)", errno: ENAMETOOLONG) }
    }
    var address = sockaddr_un()
    address.sun_family = sa_family_t(AF_UNIX)
    withUnsafeMutableBytes(of: &address.sun_path) { raw in
        raw.copyBytes(from: effective.utf8)
        raw[effective.utf8.count] = 0
    }
    return withUnsafePointer(to: &address) { pointer in
        pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
    }
}

/// Opens a blocking stream socket connected to the Unix socket at `path`.
func connectUnixSocket(_ path: String) throws(ControlTransportError) -> Int32 {
    let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
    if fd < 0 { throw .system(operation: "socket", errno: errno) }
    let result: Int32
    do {
        result = try withUnixAddress(path) { address, length in
            retryingEINTR { connect(fd, address, length) } < 0 ? -errno : 0
        }
    } catch {
        close(fd)
        throw error
    }
    if result < 0 {
        close(fd)
        throw .system(operation: "connect \(path)", errno: -result)
    }
    return fd
}

/// Current monotonic time in nanoseconds.
@inline(__always)
func monotonicNanoseconds() -> UInt64 {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return UInt64(now.tv_sec) * 1_000_000_000 + UInt64(now.tv_nsec)
}
