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
/// else 404 (405 for another method). One thread, one connection at a time, each closed after its
/// answer; a client that sends nothing for 5 s is dropped. It reads no file and takes no input but
/// the request line, so it shows nothing but the numbers (no names, no paths).
final class MetricsEndpoint: @unchecked Sendable {
    let address: MetricsAddress
    private let fd: Int32
    private let render: @Sendable () -> [UInt8]
    private var thread: pthread_t?

    /// Binds and listens (errors here stop the mount: the operator asked for the endpoint).
    init(address: MetricsAddress, render: @escaping @Sendable () -> [UInt8]) throws(MountError) {
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

    private func serve() {
        while true {
            let c = accept(fd, nil, nil)
            if c < 0 {
                if errno == EINTR || errno == ECONNABORTED || errno == EMFILE || errno == ENFILE { usleep(10_000); continue }
                return  // shut down
            }
            answer(c)
            close(c)
        }
    }

    private func answer(_ c: Int32) {
        var timeout = timeval(tv_sec: 5, tv_usec: 0)
        setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var request: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        // Up to the end of the headers (or 16 KiB).
        while request.count < 16_384 {
            let n = read(c, &buffer, buffer.count)
            if n <= 0 { return }
            request += buffer[..<n]
            if Self.hasHeaderEnd(request) { break }
        }
        let line = request.split(separator: 13, maxSplits: 1).first.map { String(decoding: $0, as: UTF8.self) } ?? ""
        let parts = line.split(separator: " ")
        let status: String
        var body: [UInt8]
        var type = "text/plain; charset=utf-8"
        if parts.count >= 2, parts[0] != "GET" && parts[0] != "HEAD" {
            status = "405 Method Not Allowed"
            body = Array("only GET\n".utf8)
        } else if parts.count >= 2, parts[1] == "/metrics" || parts[1].hasPrefix("/metrics?") {
            status = "200 OK"
            body = render()
            type = "text/plain; version=0.0.4; charset=utf-8"
        } else {
            status = "404 Not Found"
            body = Array("coordfs serves its metrics at /metrics\n".utf8)
        }
        let head = "HTTP/1.1 \(status)\r\nContent-Type: \(type)\r\nContent-Length: \(body.count)\r\nConnection: close\r\n\r\n"
        var out = Array(head.utf8)
        if parts.first != "HEAD" { out += body }
        var done = 0
        while done < out.count {
            let n = retryingEINTR { out.withUnsafeBytes { write(c, $0.baseAddress! + done, $0.count - done) } }
            if n <= 0 { return }
            done += n
        }
    }

    /// Whether `bytes` holds the blank line that ends HTTP headers.
    static func hasHeaderEnd(_ bytes: [UInt8]) -> Bool {
        guard bytes.count >= 4 else { return false }
        for i in 0...(bytes.count - 4) where bytes[i] == 13 && bytes[i + 1] == 10 && bytes[i + 2] == 13 && bytes[i + 3] == 10 { return true }
        return false
    }
}
