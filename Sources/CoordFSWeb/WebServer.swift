import ControlProtocol
import CoordFSClient
import DocumentStore
import EventLog
import Foundation
import Glibc
import HTTPTypes
import Hummingbird
import HummingbirdCore
import HummingbirdWebSocket
import Linux
import Logging
import NameBytes
import NIOCore
import Synchronization

/// `coordfs web`'s HTTP server (Hummingbird 2): the page, its JSON API and the live event stream
/// (a WebSocket), every request checked by `WebAccessPolicy` first. docs/web.md describes it.
public struct WebServer: Sendable {
    public let backend: WebBackend
    public let token: WebToken
    public let host: String
    public let port: Int
    let assets: WebAssets

    public init(backend: WebBackend, token: WebToken, host: String, port: Int, assets: WebAssets) {
        self.backend = backend
        self.token = token
        self.host = host
        self.port = port
        self.assets = assets
    }

    /// Serves until SIGINT or SIGTERM (then nil), or until `backend.watch` says the mount is gone:
    /// then every live page is told why, and this returns the reason. `ready` gets the port bound
    /// (for port 0) once it listens.
    public func run(ready: @escaping @Sendable (Int) -> Void) async throws -> String? {
        let bound = Mutex<WebAccessPolicy?>(nil)
        let policy: @Sendable () -> WebAccessPolicy? = { bound.withLock { $0 } }
        let router = Router()
        router.add(middleware: Guard(policy: policy, assets: assets, watch: backend.watch))
        let api = WebAPI(backend: backend)
        router.get("/") { _, _ in try assets.page(token: token) }
        router.get("/app.js") { _, _ in assets.file("app.js", type: "text/javascript; charset=utf-8") }
        router.get("/app.css") { _, _ in assets.file("app.css", type: "text/css; charset=utf-8") }
        router.get("/api/status") { _, _ in try await Self.json { try await backend.status() } }
        router.get("/api/conflicts") { _, _ in try await Self.json { try await api.conflicts() } }
        router.get("/api/events") { _, _ in Self.text(400, "the event stream is a WebSocket") }
        for (path, handler) in api.posts {
            router.post(RouterPath(stringLiteral: path)) { request, _ in
                var request = request
                let body = try await request.collectBody(upTo: WebLimits.maxBody)
                let value: JSONValue
                do { value = try JSONParser.parse(Array(buffer: body)) } catch { return Self.text(400, "the body is not JSON: \(error)") }
                guard case .object(let object) = value else { return Self.text(400, "the body is not a JSON object") }
                return try await Self.json { try await handler(object) }
            }
        }
        let host = self.host
        // Each other local user (or remote address) holds at most a bounded number of connections.
        let peers = PeerConnections()
        let app = Application(
            router: router,
            server: HTTPServerBuilder { responder in PeerBoundChannel(peers: peers, inner: HTTP1WebSocketUpgradeChannel(responder: responder, configuration: .init(http1: .init(httpDecoderConfiguration: RequestBounds.decoder))) { request, _, _ in
                guard let policy = policy() else { return .dontUpgrade }
                let (path, query) = Self.split(request.path ?? "/")
                guard path == "/api/events" else { return .dontUpgrade }
                let refusal = policy.check(.liveConnection, host: request.authority, queryToken: query["token"],
                                           cookie: request.headerFields[.cookie], headerToken: nil,
                                           origin: request.headerFields[.origin], fetchSite: nil)
                // A refused handshake falls through to the router, whose guard answers why.
                guard refusal == nil else { return .dontUpgrade }
                let after = query["after"].flatMap { UInt64($0) }
                return .upgrade([:]) { inbound, outbound, _ in
                    try await EventStream(backend: backend).run(after: after, inbound: inbound, outbound: outbound)
                }
            }) },
            configuration: .init(address: .hostname(host, port: port), serverName: nil),
            onServerRunning: { channel in
                let actual = channel.localAddress?.port ?? port
                bound.withLock { $0 = WebAccessPolicy(token: token, host: host, port: actual) }
                ready(actual)
            },
            logger: Self.quietLogger()
        )
        let watch = backend.watch
        return try await withThrowingTaskGroup(of: String?.self) { group in
            group.addTask {
                try await app.runService()
                return nil
            }
            group.addTask {
                guard let reason = await watch.gone() else { return nil }
                // The live streams send their last records and the reason, then close.
                try await Task.sleep(for: .milliseconds(Self.goneGrace))
                return reason
            }
            let first = try await group.next() ?? nil
            group.cancelAll()
            // Cancelling the server may end it with an error; the mount being gone is the news.
            while let next = try? await group.next() { _ = next }
            return first ?? watch.goneReason
        }
    }

    /// Milliseconds the live streams get to tell their pages that the mount is gone.
    static let goneGrace = 500

    static func quietLogger() -> Logger {
        var logger = Logger(label: "coordfs-web")
        logger.logLevel = .error
        return logger
    }

    /// Path and query parameters of a request target (values percent-decoded as bytes, then UTF-8).
    static func split(_ target: String) -> (String, [String: String]) {
        guard let q = target.firstIndex(of: "?") else { return (target, [:]) }
        var query: [String: String] = [:]
        for pair in target[target.index(after: q)...].split(separator: "&") {
            let kv = pair.split(separator: "=", maxSplits: 1)
            guard let key = kv.first else { continue }
            query[String(key)] = kv.count > 1 ? percentDecoded(kv[1]) : ""
        }
        return (String(target[..<q]), query)
    }

    static func percentDecoded(_ s: Substring) -> String {
        var out: [UInt8] = []
        var bytes = Array(s.utf8)[...]
        while let b = bytes.popFirst() {
            if b == UInt8(ascii: "%"), bytes.count >= 2, let v = UInt8(String(decoding: bytes.prefix(2), as: UTF8.self), radix: 16) {
                out.append(v)
                bytes = bytes.dropFirst(2)
            } else {
                out.append(b == UInt8(ascii: "+") ? 0x20 : b)
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    static func json(_ body: () async throws -> [UInt8]) async throws -> Response {
        do {
            let bytes = try await body()
            return Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(bytes: bytes)))
        } catch let e as WebError {
            return text(e.status, e.description)
        } catch let e as CoordFSClientError {
            return text(e.code == .permissionDenied ? 403 : 409, e.description)
        } catch {
            return text(500, "\(error)")
        }
    }

    static func json(_ body: () async throws -> JSONValue) async throws -> Response {
        try await json { () async throws -> [UInt8] in JSONWriter.write(try await body()) }
    }

    static func text(_ status: Int, _ message: String) -> Response {
        Response(status: .init(code: status), headers: [.contentType: "text/plain; charset=utf-8"],
                 body: .init(byteBuffer: ByteBuffer(string: message + "\n")))
    }
}

/// Every request passes here first: the access rules, then headers that keep the page to itself.
struct Guard: RouterMiddleware {
    typealias Context = BasicRequestContext
    let policy: @Sendable () -> WebAccessPolicy?
    let assets: WebAssets
    let watch: MountWatch

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard let policy = policy() else { return WebServer.text(503, "starting") }
        let (_, query) = WebServer.split(request.uri.description)
        let kind: WebAccessPolicy.Kind = request.method == .get || request.method == .head ? .read : .change
        let tokenHeader = HTTPField.Name(WebAccessPolicy.headerName)!
        if let refusal = policy.check(kind, host: request.head.authority, queryToken: query["token"],
                                      cookie: request.headers[.cookie], headerToken: request.headers[tokenHeader],
                                      origin: request.headers[.origin], fetchSite: request.headers[HTTPField.Name("Sec-Fetch-Site")!]) {
            return secured(WebServer.text(refusal.status, refusal.message), policy: policy)
        }
        if let gone = watch.goneReason {
            return secured(WebServer.text(503, "the mount is gone: \(gone)"), policy: policy)
        }
        var response = try await next(request, context)
        // The token in the URL becomes a cookie (HttpOnly, this site only), so the page's own
        // requests and its WebSocket carry it without the URL.
        if query["token"] != nil {
            response.headers[.setCookie] = "\(policy.cookieName)=\(policy.token.value); Path=/; HttpOnly; SameSite=Strict"
        }
        return secured(response, policy: policy)
    }

    /// No framing, no sniffing, no referrer, nothing cached, and only this server's own scripts.
    func secured(_ response: Response, policy: WebAccessPolicy) -> Response {
        var r = response
        // CSP's host sources have no IPv6 literal: a browser refuses `ws://[::1]:PORT` with an
        // error on the page's console and ignores it ('self' covers the page's own WebSocket).
        let sockets = policy.hosts.filter { !$0.hasPrefix("[") }.sorted().map { "ws://\($0)" }.joined(separator: " ")
        r.headers[.contentSecurityPolicy] = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
            + "connect-src 'self' \(sockets); frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
        r.headers[HTTPField.Name("X-Content-Type-Options")!] = "nosniff"
        r.headers[HTTPField.Name("Referrer-Policy")!] = "no-referrer"
        r.headers[HTTPField.Name("X-Frame-Options")!] = "DENY"
        r.headers[.cacheControl] = "no-store"
        return r
    }
}

/// The page's files: plain files in the repository (Sources/CoordFSWeb/Assets), read at start.
public struct WebAssets: Sendable {
    let files: [String: [UInt8]]
    public let directory: String

    /// Finds the assets: `$COORDFS_WEB_ASSETS`, SwiftPM's resource bundle beside the executable,
    /// `PREFIX/share/coordfs/web` (make install), or the source tree this binary was built from.
    public static func load(executable: String) throws -> WebAssets {
        let dir = executable.split(separator: "/", omittingEmptySubsequences: false).dropLast().joined(separator: "/")
        let source = #filePath.split(separator: "/", omittingEmptySubsequences: false).dropLast().joined(separator: "/") + "/Assets"
        var candidates: [String] = []
        if let env = getenv("COORDFS_WEB_ASSETS") { candidates.append(String(nameCString: env)) }
        candidates += [dir + "/coordfs_CoordFSWeb.resources/Assets", dir + "/../share/coordfs/web", source]
        for c in candidates where (c + "/index.html").withNameCString({ access($0, R_OK) }) == 0 {
            var files: [String: [UInt8]] = [:]
            for name in ["index.html", "app.js", "app.css"] {
                guard let bytes = readWholeFileBytes(c + "/" + name) else { throw WebError(status: 500, "cannot read \(c)/\(name)") }
                files[name] = bytes
            }
            return WebAssets(files: files, directory: c)
        }
        throw WebError(status: 500, "the page's files are missing (looked in \(candidates.joined(separator: ", ")))")
    }

    func file(_ name: String, type: String) -> Response {
        Response(status: .ok, headers: [.contentType: type], body: .init(byteBuffer: ByteBuffer(bytes: files[name] ?? [])))
    }

    /// index.html with the token in a meta tag (hex only: nothing to escape), for the page's
    /// requests that change something (`X-CoordFS-Token`).
    func page(token: WebToken) throws -> Response {
        let html = String(decoding: files["index.html"] ?? [], as: UTF8.self).replacingOccurrences(of: "{{TOKEN}}", with: token.value)
        return Response(status: .ok, headers: [.contentType: "text/html; charset=utf-8"], body: .init(byteBuffer: ByteBuffer(string: html)))
    }
}

