// A plain HTTP/1.1 client over a TCP socket to 127.0.0.1, for the metrics endpoint and the web
// page's server (CLITests, MountTests): each request on a new connection (Connection: close), the answer read to its end.
import Foundation
import Glibc

public struct HTTPResponse: CustomStringConvertible {
    public var status: Int
    public var headers: [String: String]  // lower-cased names
    public var body: [UInt8]
    public var text: String { String(decoding: body, as: UTF8.self) }
    public var description: String { "HTTP \(status) \(headers) \(text.prefix(500))" }
}

public enum HTTP {
    /// Sends `method path` with `headers` (and `body`) to 127.0.0.1:`port`; nil when the connection fails.
    public static func request(port: UInt16, _ method: String = "GET", _ path: String, headers: [String: String] = [:],
                        body: [UInt8] = [], timeout: Int = 10) -> HTTPResponse? {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var tv = timeval(tv_sec: timeout, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        var a = sockaddr_in()
        a.sin_family = sa_family_t(AF_INET)
        a.sin_port = port.bigEndian
        inet_pton(AF_INET, "127.0.0.1", &a.sin_addr)
        let rc = withUnsafePointer(to: &a) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        guard rc == 0 else { return nil }
        var head = "\(method) \(path) HTTP/1.1\r\n"
        if !headers.keys.contains(where: { $0.lowercased() == "host" }) { head += "Host: 127.0.0.1:\(port)\r\n" }
        if !headers.keys.contains(where: { $0.lowercased() == "connection" }) { head += "Connection: close\r\n" }
        for (k, v) in headers { head += "\(k): \(v)\r\n" }
        if !body.isEmpty || method == "POST" { head += "Content-Length: \(body.count)\r\n" }
        head += "\r\n"
        let out = Array(head.utf8) + body
        var sent = 0
        while sent < out.count {
            let n = out.withUnsafeBytes { send(fd, $0.baseAddress! + sent, $0.count - sent, Int32(MSG_NOSIGNAL)) }
            if n <= 0 { return nil }
            sent += n
        }
        var answer: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = read(fd, &buffer, buffer.count)
            if n <= 0 { break }
            answer += buffer[..<n]
            // A server that keeps the connection open (chromedriver does) has said all once the
            // body reaches its Content-Length.
            if let r = parse(answer) {
                if let length = r.headers["content-length"].flatMap({ Int($0) }), r.body.count >= length { return r }
                if r.status == 101 { return r }  // a WebSocket: the connection stays open
            }
        }
        return parse(answer)
    }

    public static func parse(_ bytes: [UInt8]) -> HTTPResponse? {
        guard let end = (0..<max(0, bytes.count - 3)).first(where: { bytes[$0] == 13 && bytes[$0 + 1] == 10 && bytes[$0 + 2] == 13 && bytes[$0 + 3] == 10 }) else { return nil }
        let lines = String(decoding: bytes[..<end], as: UTF8.self).components(separatedBy: "\r\n")
        guard let first = lines.first, first.split(separator: " ").count >= 2, let status = Int(first.split(separator: " ")[1]) else { return nil }
        var headers: [String: String] = [:]
        for l in lines.dropFirst() {
            guard let colon = l.firstIndex(of: ":") else { continue }
            headers[l[..<colon].lowercased()] = l[l.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        var body = Array(bytes[(end + 4)...])
        if headers["transfer-encoding"]?.lowercased() == "chunked" { body = unchunk(body) }
        return HTTPResponse(status: status, headers: headers, body: body)
    }

    private static func unchunk(_ b: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        var i = 0
        while i < b.count {
            guard let lineEnd = (i..<max(i, b.count - 1)).first(where: { b[$0] == 13 && b[$0 + 1] == 10 }),
                  let size = Int(String(decoding: b[i..<lineEnd], as: UTF8.self).split(separator: ";").first ?? "", radix: 16) else { break }
            if size == 0 { break }
            let start = lineEnd + 2
            out += b[start..<min(b.count, start + size)]
            i = start + size + 2
        }
        return out
    }
}
