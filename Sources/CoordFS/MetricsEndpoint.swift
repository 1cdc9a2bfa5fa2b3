import FuseKit
import Glibc
import LinuxGNU

/// Where `-o metrics=HOST:PORT` serves: an IPv4 address (`127.0.0.1`), `localhost`, or an IPv6
/// address in brackets (`[::1]`), and a port (0: any free one; the daemon's log names it).
public struct MetricsAddress: Sendable, Equatable, CustomStringConvertible {
    public var host: String
    public var port: UInt16

    public init(host: String, port: UInt16) {
        self.host = host
        self.port = port
    }

    /// Parses `HOST:PORT`; nil when it is not one.
    public init?(_ text: String) {
        guard let colon = text.lastIndex(of: ":"), let port = UInt16(text[text.index(after: colon)...]) else { return nil }
        var host = String(text[..<colon])
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        if host == "localhost" { host = "127.0.0.1" }
        var v4 = in_addr(), v6 = in6_addr()
        guard inet_pton(AF_INET, host, &v4) == 1 || inet_pton(AF_INET6, host, &v6) == 1 else { return nil }
        self.host = host
        self.port = port
    }

    public var isIPv6: Bool { host.contains(":") }
    public var description: String { isIPv6 ? "[\(host)]:\(port)" : "\(host):\(port)" }
}

/// A minimal HTTP/1.1 server for Prometheus: `GET /metrics` answers the registry's text, anything
/// else 404 (405 for another method). One thread serves every connection at once (poll), each
/// answered as soon as its request head is in and closed after its answer; a connection has
/// `deadline` (2 s) from its accept to get its request in and its answer out, and each user other
/// than root and the daemon's own holds at most `perUser` (8) such connections at once (the owner
/// of the peer's socket, `LinuxCalls.tcpSocketOwner`: every local user can reach a loopback port), the rest closed
/// at their accept. Before, connections were served one at a time, each waiting up to 5 s for each
/// read: one of nobody's connections that sent nothing made every scrape wait 5 s, a few hundred
/// kept the endpoint from answering anyone for as long as nobody liked. It reads no file and takes
/// no input but the request line, so it shows nothing but the numbers (no names, no paths).
///
/// Who may read them: the numbers tell when the mount is busy and with what (opens, saves, asks),
/// which on a shared mount is another user's activity. A process of this machine is answered only
/// when its socket's owner is root, the daemon's user or one of `readers` (`metrics_users=`); any
/// other local user gets 403 and no number. A peer whose owner cannot be known is answered only
/// when it is not on a loopback address: another host's Prometheus, fenced by the network.
final class MetricsEndpoint: @unchecked Sendable {
    let address: MetricsAddress
    private let fd: Int32
    private let render: @Sendable () -> [UInt8]
    /// Local users besides root and the daemon's own who may read the numbers.
    let readers: Set<UInt32>
    private var thread: pthread_t?

    /// Binds and listens (errors here stop the mount: the operator asked for the endpoint).
    init(address: MetricsAddress, readers: [UInt32] = [], render: @escaping @Sendable () -> [UInt8]) throws(MountError) {
        let family = address.isIPv6 ? AF_INET6 : AF_INET
        let s = socket(family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard s >= 0 else { throw .system("metrics: socket: \(String(cString: strerror(errno)))") }
        var one: Int32 = 1
        setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var bound = address
        let rc: Int32
        if address.isIPv6 {
            var a = sockaddr_in6()
            a.sin6_family = sa_family_t(AF_INET6)
            a.sin6_port = address.port.bigEndian
            inet_pton(AF_INET6, address.host, &a.sin6_addr)
            rc = withUnsafePointer(to: &a) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(s, $0, socklen_t(MemoryLayout<sockaddr_in6>.size)) } }
        } else {
            var a = sockaddr_in()
            a.sin_family = sa_family_t(AF_INET)
            a.sin_port = address.port.bigEndian
            inet_pton(AF_INET, address.host, &a.sin_addr)
            rc = withUnsafePointer(to: &a) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(s, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        }
        guard rc == 0, listen(s, 16) == 0 else {
            let e = String(cString: strerror(errno))
            close(s)
            throw .system("metrics: cannot listen on \(address): \(e)")
        }
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        if withUnsafeMutablePointer(to: &storage, { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(s, $0, &length) } }) == 0 {
            bound.port = withUnsafePointer(to: &storage) { p in
                address.isIPv6 ? p.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { UInt16(bigEndian: $0.pointee.sin6_port) }
                               : p.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { UInt16(bigEndian: $0.pointee.sin_port) }
            }
        }
        self.address = bound
        self.fd = s
        self.render = render
        self.readers = Set(readers)
    }

    func start() {
        var t = pthread_t()
        let me = Unmanaged.passRetained(self).toOpaque()
        if pthread_create(&t, nil, { arg in
            let endpoint = Unmanaged<MetricsEndpoint>.fromOpaque(arg!).takeRetainedValue()
            blockAllSignalsInThisThread()
            endpoint.serve()
            return nil
        }, me) == 0 {
            thread = t
        } else {
            Unmanaged<MetricsEndpoint>.fromOpaque(me).release()
        }
    }

    /// Stops accepting and waits for the thread.
    func stop() {
        shutdown(fd, Int32(SHUT_RDWR))
        if let thread { pthread_join(thread, nil) }
        thread = nil
        close(fd)
    }

    /// How long a connection may take from its accept to the end of its answer.
    static let deadline: Duration = .seconds(2)
    /// Connections one user other than root and the daemon's own may hold at once.
    static let perUser = 8
    /// Connections held at once in all (beyond them, new ones wait in the listen backlog).
    static let maxConnections = 256

    /// One connection being served: its request as read so far, then its answer as sent so far.
    private struct Connection {
        let fd: Int32
        let user: UInt32?
        /// Whether it may read the numbers (else it is answered 403).
        let reads: Bool
        let until: ContinuousClock.Instant
        var request: [UInt8] = []
        var answer: [UInt8]? = nil
        var sent = 0
    }

    private func serve() {
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
        let exempt: Set<UInt32> = [0, getuid()]
        var connections: [Connection] = []
        var perUser: [UInt32?: Int] = [:]
        var acceptAgain = ContinuousClock.now
        defer { for c in connections { close(c.fd) } }
        func drop(_ i: Int) {
            let c = connections.remove(at: i)
            close(c.fd)
            if let user = c.user, exempt.contains(user) { return }
            perUser[c.user, default: 1] -= 1
        }
        while true {
            let now = ContinuousClock.now
            let accepting = now >= acceptAgain && connections.count < Self.maxConnections
            var fds = [pollfd(fd: fd, events: accepting ? Int16(POLLIN) : 0, revents: 0)]
            fds += connections.map { pollfd(fd: $0.fd, events: Int16($0.answer == nil ? POLLIN : POLLOUT), revents: 0) }
            var wake = connections.map(\.until).min()
            if !accepting, connections.count < Self.maxConnections { wake = min(wake ?? acceptAgain, acceptAgain) }
            let timeout = wake.map { w -> Int32 in
                let left = w - now
                return left <= .zero ? 0 : Int32(min(left.components.seconds * 1000 + left.components.attoseconds / 1_000_000_000_000_000 + 1, 60_000))
            } ?? -1
            let ready = poll(&fds, nfds_t(fds.count), timeout)
            if ready < 0 && errno != EINTR { return }
            // Shut down (`stop`): the listening socket hangs up.
            if fds[0].revents & Int16(POLLHUP | POLLERR | POLLNVAL) != 0 { return }
            // Served first, then dropped when past their time, last first so the indices hold.
            for i in stride(from: connections.count - 1, through: 0, by: -1) where fds[i + 1].revents != 0 {
                if !step(&connections[i]) { drop(i) }
            }
            let after = ContinuousClock.now
            for i in stride(from: connections.count - 1, through: 0, by: -1) where connections[i].until <= after { drop(i) }
            guard accepting, fds[0].revents & Int16(POLLIN) != 0 else { continue }
            while connections.count < Self.maxConnections {
                let c = accept(fd, nil, nil)
                if c < 0 {
                    if errno == EINTR || errno == ECONNABORTED { continue }
                    if errno == EMFILE || errno == ENFILE { acceptAgain = .now + .milliseconds(250) }
                    if errno == EAGAIN || errno == EWOULDBLOCK || errno == EMFILE || errno == ENFILE { break }
                    return  // shut down
                }
                _ = fcntl(c, F_SETFD, FD_CLOEXEC)
                _ = fcntl(c, F_SETFL, fcntl(c, F_GETFL) | O_NONBLOCK)
                let user = LinuxCalls.tcpPeerOwner(c)
                if !(user.map(exempt.contains) ?? false) {
                    guard perUser[user, default: 0] < Self.perUser else { close(c); continue }
                    perUser[user, default: 0] += 1
                }
                let reads = user.map { exempt.contains($0) || readers.contains($0) } ?? !LinuxCalls.tcpPeerIsLoopback(c)
                connections.append(Connection(fd: c, user: user, reads: reads, until: .now + Self.deadline))
            }
        }
    }

    /// Reads what `c` sent or sends what it is owed; false once it is done with (answered, or gone).
    private func step(_ c: inout Connection) -> Bool {
        if c.answer == nil {
            var buffer = [UInt8](repeating: 0, count: 4096)
            while c.request.count < 16_384 {
                let n = read(c.fd, &buffer, buffer.count)
                if n < 0 && errno == EINTR { continue }
                if n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) { return true }
                if n <= 0 { return false }
                c.request += buffer[..<n]
                if Self.hasHeaderEnd(c.request) { break }
            }
            c.answer = answer(to: c.request, reads: c.reads)
        }
        guard let out = c.answer else { return false }
        while c.sent < out.count {
            let n = out.withUnsafeBytes { write(c.fd, $0.baseAddress! + c.sent, $0.count - c.sent) }
            if n < 0 && errno == EINTR { continue }
            if n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) { return true }
            if n <= 0 { return false }
            c.sent += n
        }
        return false
    }

    /// The whole answer (head and body) to `request`, a request head (or its first 16 KiB), from a
    /// peer that `reads` the numbers or not.
    private func answer(to request: [UInt8], reads: Bool) -> [UInt8] {
        let line = request.split(separator: 13, maxSplits: 1).first.map { String(decoding: $0, as: UTF8.self) } ?? ""
        let parts = line.split(separator: " ")
        let status: String
        var body: [UInt8]
        var type = "text/plain; charset=utf-8"
        if parts.count >= 2, parts[0] != "GET" && parts[0] != "HEAD" {
            status = "405 Method Not Allowed"
            body = Array("only GET\n".utf8)
        } else if parts.count >= 2, parts[1] == "/metrics" || parts[1].hasPrefix("/metrics?") {
            if reads {
                status = "200 OK"
                body = render()
                type = "text/plain; version=0.0.4; charset=utf-8"
            } else {
                status = "403 Forbidden"
                body = Array("coordfs: this mount's metrics are for root, the mount's user and the users of its metrics_users= option\n".utf8)
            }
        } else {
            status = "404 Not Found"
            body = Array("coordfs serves its metrics at /metrics\n".utf8)
        }
        let head = "HTTP/1.1 \(status)\r\nContent-Type: \(type)\r\nContent-Length: \(body.count)\r\nConnection: close\r\n\r\n"
        var out = Array(head.utf8)
        if parts.first != "HEAD" { out += body }
        return out
    }

    /// Whether `bytes` holds the blank line that ends HTTP headers.
    static func hasHeaderEnd(_ bytes: [UInt8]) -> Bool {
        guard bytes.count >= 4 else { return false }
        for i in 0...(bytes.count - 4) where bytes[i] == 13 && bytes[i + 1] == 10 && bytes[i + 2] == 13 && bytes[i + 3] == 10 { return true }
        return false
    }
}
