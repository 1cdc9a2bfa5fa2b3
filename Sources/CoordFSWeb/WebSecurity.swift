import Glibc

/// The secret in the URL `coordfs web` prints (as Jupyter's): 32 random bytes, hex. Whoever has it
/// acts as the user who started `coordfs web`, so it is compared in constant time and never logged.
public struct WebToken: Sendable {
    public let value: String

    public init(value: String) { self.value = value }

    /// 256 random bits from the kernel (/dev/urandom).
    public static func generate() -> WebToken {
        var bytes = [UInt8](repeating: 0, count: 32)
        let fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC)
        precondition(fd >= 0, "cannot open /dev/urandom")
        defer { close(fd) }
        var filled = 0
        while filled < bytes.count {
            let n = bytes.withUnsafeMutableBytes { read(fd, $0.baseAddress! + filled, $0.count - filled) }
            if n > 0 { filled += n } else { precondition(errno == EINTR, "cannot read /dev/urandom") }
        }
        let hex: [UInt8] = Array("0123456789abcdef".utf8)
        var out: [UInt8] = []
        for b in bytes { out.append(hex[Int(b >> 4)]); out.append(hex[Int(b & 15)]) }
        return WebToken(value: String(decoding: out, as: UTF8.self))
    }

    /// Whether `given` is the token; the time taken does not depend on where they differ.
    public func matches(_ given: String?) -> Bool {
        guard let given else { return false }
        let a = Array(value.utf8), b = Array(given.utf8)
        var difference = UInt8(a.count == b.count ? 0 : 1)
        for i in 0..<a.count { difference |= a[i] ^ (i < b.count ? b[i] : 0) }
        return difference == 0
    }
}

/// Who may reach the page and what each request must carry (docs/web.md, "Security"). Pure rules,
/// unit-tested; `WebServer` applies them to every request before anything else runs.
public struct WebAccessPolicy: Sendable {
    public let token: WebToken
    /// The `Host` values the server answers to (its own address; DNS rebinding gets 421).
    public let hosts: Set<String>
    /// The origins a page of this server has (`http://HOST`).
    public var origins: Set<String> { Set(hosts.map { "http://" + $0 }) }

    /// The cookie's name: `coordfs_web_PORT`. A browser keeps one cookie jar for every port of a
    /// host, so with one name the page of a second `coordfs web` (another mount, another port)
    /// would replace the first page's cookie, and every later request of the first page would
    /// carry the other's token and be refused.
    public let cookieName: String
    public static let headerName = "x-coordfs-token"

    public init(token: WebToken, host: String, port: Int) {
        self.token = token
        var hosts: Set<String> = []
        let h = host.contains(":") ? "[\(host)]" : host
        hosts.insert("\(h):\(port)")
        if host == "127.0.0.1" || host == "::1" || host == "localhost" {
            hosts.formUnion(["127.0.0.1:\(port)", "localhost:\(port)", "[::1]:\(port)"])
        }
        self.hosts = hosts
        self.cookieName = "coordfs_web_\(port)"
    }

    /// What a request is.
    public enum Kind: Sendable { case read, change, liveConnection }

    /// Why a request is refused (nil: it may proceed).
    public enum Refusal: Error, Equatable, Sendable {
        case wrongHost, noToken, wrongToken, crossSite, noOrigin
        public var status: Int {
            switch self {
            case .wrongHost: 421
            case .noToken, .wrongToken: 401
            case .crossSite, .noOrigin: 403
            }
        }
        public var message: String {
            switch self {
            case .wrongHost: "this server answers only to its own address"
            case .noToken: "a token is needed: open the URL `coordfs web` printed"
            case .wrongToken: "wrong token: open the URL `coordfs web` printed"
            case .crossSite: "refused: the request comes from another site"
            case .noOrigin: "refused: a live connection must say where it comes from (Origin)"
            }
        }
    }

    /// The rules, from the request's parts. `queryToken`: `?token=`; `cookie`: the whole Cookie
    /// header; `headerToken`: `X-CoordFS-Token`; `origin`: `Origin`; `fetchSite`: `Sec-Fetch-Site`.
    public func check(_ kind: Kind, host: String?, queryToken: String?, cookie: String?, headerToken: String?,
                      origin: String?, fetchSite: String?) -> Refusal? {
        guard let host, hosts.contains(host.lowercased()) else { return .wrongHost }
        let cookieToken = cookie.flatMap(cookieValue)
        let presented = [queryToken, cookieToken, headerToken].compactMap { $0 }
        if presented.isEmpty { return .noToken }
        // Every token presented must be right (one wrong one is not saved by another).
        var allRight = true
        for t in presented { allRight = token.matches(t) && allRight }
        if !allRight { return .wrongToken }
        if let origin, !origins.contains(origin.lowercased()) { return .crossSite }
        if let fetchSite, fetchSite != "same-origin" && fetchSite != "none" && kind != .read { return .crossSite }
        switch kind {
        case .read:
            return nil
        case .change:
            // A form or a link from another site cannot set this header, and a script there
            // cannot send it without a CORS preflight, which this server never grants.
            guard let headerToken, token.matches(headerToken) else { return .crossSite }
            return nil
        case .liveConnection:
            // Browsers always send Origin on a WebSocket handshake: without it, it is not one of ours.
            guard origin != nil else { return .noOrigin }
            return nil
        }
    }

    /// This server's cookie's value in a Cookie header.
    func cookieValue(_ header: String) -> String? {
        for part in header.split(separator: ";") {
            let p = part.trimmingCharacters(in: " ")
            if p.hasPrefix(cookieName + "=") { return String(p.dropFirst(cookieName.count + 1)) }
        }
        return nil
    }
}

extension StringProtocol {
    func trimmingCharacters(in set: Character) -> String {
        var s = Substring(self)
        while s.first == set { s.removeFirst() }
        while s.last == set { s.removeLast() }
        return String(s)
    }
}
