import AsyncHTTPClient
import ClusterKV
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL

/// `ClusterStore` against a real etcd (3.4 or later) through its v3 JSON gateway, the HTTP/JSON
/// face every etcd member serves on its client port beside gRPC (why: docs/cluster.md, "Why the
/// JSON gateway"). Calls go to one endpoint at a time: the one that answered last, then the others
/// in turn when it cannot be reached or says it cannot serve (no leader, stopping), each attempt
/// bounded by `requestTimeout`. Nothing here logs, and no error carries a password or a token.
/// Call `shutdown()` before letting go of it.
public final class EtcdClusterStore: ClusterStore {
    public let configuration: EtcdConfiguration
    let endpoints: [String]
    let http: HTTPClient
    let state = NIOLockedValueBox(State())

    struct State {
        /// The endpoint tried first: the last one that answered.
        var preferred = 0
        /// The auth token, when credentials are configured and etcd gave one.
        var token: String?
        /// etcd said auth is not enabled: calls go without a token.
        var authDisabled = false
        var shutDown = false
    }

    public init(_ configuration: EtcdConfiguration) throws {
        guard !configuration.endpoints.isEmpty else { throw EtcdConfigurationError.noEndpoints }
        endpoints = try configuration.endpoints.map(Self.normalized)
        self.configuration = configuration
        var httpConfiguration = HTTPClient.Configuration(
            tlsConfiguration: try configuration.tls.map(Self.tlsConfiguration),
            timeout: .init(connect: .nanoseconds(Self.nanoseconds(configuration.connectTimeout)), read: nil),
            connectionPool: .init(idleTimeout: .seconds(60), concurrentHTTP1ConnectionsPerHostSoftLimit: 64))
        httpConfiguration.httpVersion = .http1Only
        http = HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: httpConfiguration)
    }

    /// Ends every call and watch and closes the connections.
    public func shutdown() async throws {
        guard state.withLockedValue({ state in
            defer { state.shutDown = true }
            return !state.shutDown
        }) else { return }
        try await http.shutdown()
    }

    deinit {
        // Let go of without `shutdown()` (an error path): close the connections in the background.
        if !state.withLockedValue({ $0.shutDown }) { http.shutdown { _ in } }
    }

    // MARK: ClusterStore

    public func range(_ key: [UInt8], prefix: Bool) async throws -> (values: [KeyValue], revision: Revision) {
        let response: WireRangeResponse = try await call("/v3/kv/range", KeyRange.fields(key, prefix: prefix), mutates: false)
        return (try (response.kvs ?? []).map { try $0.keyValue() }, response.header?.revision?.value ?? 0)
    }

    @discardableResult
    public func put(_ key: [UInt8], _ value: [UInt8], lease: LeaseID) async throws -> Revision {
        let response: WirePutResponse
        do {
            response = try await call("/v3/kv/put", WireRequest.put(key, value, lease: lease), mutates: true)
        } catch ClusterStoreError.leaseNotFound {
            throw ClusterStoreError.leaseNotFound(lease)
        }
        return response.header?.revision?.value ?? 0
    }

    @discardableResult
    public func delete(_ key: [UInt8], prefix: Bool) async throws -> (revision: Revision, deleted: Int) {
        let response: WireDeleteResponse = try await call(
            "/v3/kv/deleterange", KeyRange.fields(key, prefix: prefix), mutates: true)
        return (response.header?.revision?.value ?? 0, Int(response.deleted?.value ?? 0))
    }

    public func transaction(
        _ compare: [Compare], success: [ClusterOperation], failure: [ClusterOperation]
    ) async throws -> TransactionResult {
        let body = WireRequest.transaction(compare, success: success, failure: failure)
        let response: WireTxnResponse
        do {
            response = try await call("/v3/kv/txn", body, mutates: true)
        } catch ClusterStoreError.leaseNotFound {
            let lease = (success + failure).lazy.compactMap { op -> LeaseID? in
                if case .put(_, _, let lease) = op, lease != 0 { return lease }
                return nil
            }.first
            throw ClusterStoreError.leaseNotFound(lease ?? 0)
        }
        let ranges = try (response.responses ?? []).compactMap { op in
            try op.response_range.map { try ($0.kvs ?? []).map { try $0.keyValue() } }
        }
        return TransactionResult(
            succeeded: response.succeeded ?? false, revision: response.header?.revision?.value ?? 0, ranges: ranges)
    }

    public func grantLease(ttl: Int64) async throws -> (id: LeaseID, ttl: Int64) {
        let response: WireLeaseGrantResponse = try await call("/v3/lease/grant", WireRequest.single("TTL", String(ttl)), mutates: true)
        if let error = response.error, !error.isEmpty { throw ClusterStoreError.failed(error) }
        guard let id = response.ID?.value, id != 0 else { throw ClusterStoreError.failed("etcd granted no lease") }
        return (id, response.TTL?.value ?? ttl)
    }

    public func keepAlive(_ lease: LeaseID) async throws -> Int64 {
        // A stream in gRPC; through the gateway one request line gets one answer line.
        let line: WireStreamLine<WireLeaseKeepAliveResponse> = try await call(
            "/v3/lease/keepalive", WireRequest.single("ID", String(lease)), mutates: false)
        if let error = line.error { throw Self.error(error, status: .ok) }
        guard let ttl = line.result?.TTL?.value, ttl > 0 else { throw ClusterStoreError.leaseNotFound(lease) }
        return ttl
    }

    public func revokeLease(_ lease: LeaseID) async throws {
        do {
            let _: WirePutResponse = try await call("/v3/lease/revoke", WireRequest.single("ID", String(lease)), mutates: true)
        } catch ClusterStoreError.leaseNotFound {
            throw ClusterStoreError.leaseNotFound(lease)
        }
    }

    // MARK: Calls, failover and auth

    /// Posts `body` to `path` on the preferred endpoint, then on the others in turn while an
    /// endpoint cannot be reached or cannot serve; decodes the answer.
    /// When every endpoint failed and at least one of them is up but has no leader (an election
    /// after the leader was lost), the call goes round again after a pause, for as long as
    /// `requestTimeout`: nothing was proposed, so a change is sent again safely.
    func call<Response: Decodable>(_ path: String, _ body: JSONObject, mutates: Bool) async throws -> Response {
        let payload = body.data
        var lastFailure = ClusterStoreError.unavailable("no etcd endpoint answered")
        let clock = ContinuousClock()
        let started = clock.now
        var round = 0
        while true {
            var electing = false
            for endpoint in endpointOrder() {
                do {
                    let data = try await authorizedPost(endpoint: endpoint, path: path, payload: payload)
                    markPreferred(endpoint)
                    do {
                        return try JSONDecoder().decode(Response.self, from: data)
                    } catch {
                        throw ClusterStoreError.failed("etcd sent an answer to \(path) that does not decode")
                    }
                } catch let failure as EndpointFailure {
                    lastFailure = failure.error
                    // A change sent whose answer was lost may have been applied: not sent again.
                    if mutates && failure.mayHaveApplied { throw failure.error }
                    electing = electing || failure.noLeader
                }
            }
            round += 1
            let pause = Duration.milliseconds(50 * min(round, 4))
            guard electing, clock.now - started + pause < configuration.requestTimeout else { throw lastFailure }
            try await Task.sleep(for: pause)
        }
    }

    /// A failure of one endpoint, after which the next is tried.
    struct EndpointFailure: Error {
        var error: ClusterStoreError
        var mayHaveApplied: Bool
        /// The member is up but has no leader (it answered so): another round may find one.
        var noLeader = false
    }

    /// One call on one endpoint with the token (asking for one first, and again once when etcd
    /// says it is no longer valid). Throws `EndpointFailure` for what another endpoint may serve.
    func authorizedPost(endpoint: Int, path: String, payload: Data) async throws -> Data {
        var token = try await currentToken(endpoint: endpoint)
        for attempt in 0..<2 {
            let (status, data) = try await post(endpoint: endpoint, path: path, payload: payload, token: token)
            if status == .ok { return data }
            let error = Self.error(Self.decodeError(data), status: status)
            if case .unauthenticated = error, attempt == 0, configuration.credentials != nil {
                state.withLockedValue { $0.token = nil }
                token = try await currentToken(endpoint: endpoint)
                continue
            }
            if case .unavailable(let message) = error {
                throw EndpointFailure(error: error, mayHaveApplied: Self.mayHaveApplied(data),
                                      noLeader: message.contains("no leader"))
            }
            throw error
        }
        throw ClusterStoreError.unauthenticated("etcd refused the token it had just given")
    }

    /// The token to send, asking etcd for one when credentials are configured and none is held.
    func currentToken(endpoint: Int) async throws -> String? {
        guard let credentials = configuration.credentials else { return nil }
        let held = state.withLockedValue { ($0.token, $0.authDisabled) }
        if held.1 { return nil }
        if let token = held.0 { return token }
        let payload = try JSONSerialization.data(withJSONObject: ["name": credentials.user, "password": credentials.password])
        let (status, data) = try await post(endpoint: endpoint, path: "/v3/auth/authenticate", payload: payload, token: nil)
        if status == .ok, let token = try? JSONDecoder().decode(WireAuthenticateResponse.self, from: data).token {
            state.withLockedValue { $0.token = token }
            return token
        }
        let wire = Self.decodeError(data)
        if wire?.message?.contains("authentication is not enabled") == true {
            state.withLockedValue { $0.authDisabled = true }
            return nil
        }
        let error = Self.error(wire, status: status)
        if case .unavailable = error { throw EndpointFailure(error: error, mayHaveApplied: false) }
        if case .failed(let message) = error { throw ClusterStoreError.unauthenticated(message) }
        throw error
    }

    /// One HTTP POST; a transport failure becomes `EndpointFailure`.
    func post(endpoint: Int, path: String, payload: Data, token: String?) async throws -> (HTTPResponseStatus, Data) {
        let request = makeRequest(endpoint: endpoint, path: path, payload: payload, token: token)
        var sent = false
        do {
            let response = try await http.execute(request, timeout: .nanoseconds(Self.nanoseconds(configuration.requestTimeout)))
            sent = true
            let body = try await response.body.collect(upTo: 256 << 20)
            return (response.status, Data(body.readableBytesView))
        } catch let error as ClusterStoreError {
            throw error
        } catch is CancellationError {
            throw CancellationError()
        } catch {
            throw EndpointFailure(
                error: .unavailable("etcd at \(endpoints[endpoint]): \(Self.describe(error))"),
                mayHaveApplied: sent || !Self.neverSent(error))
        }
    }

    func makeRequest(endpoint: Int, path: String, payload: Data, token: String?) -> HTTPClientRequest {
        var request = HTTPClientRequest(url: endpoints[endpoint] + path)
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/json")
        if let token { request.headers.add(name: "Authorization", value: token) }
        // etcd's "require leader": a member that has no leader says so at once ("no leader",
        // never proposed) rather than holding a change until it times out.
        request.headers.add(name: "Grpc-Metadata-hasleader", value: "true")
        request.body = .bytes(ByteBuffer(bytes: payload))
        return request
    }

    /// Endpoint indexes, the preferred one first.
    func endpointOrder() -> [Int] {
        let first = state.withLockedValue { $0.preferred }
        return (0..<endpoints.count).map { (first + $0) % endpoints.count }
    }

    func markPreferred(_ endpoint: Int) {
        state.withLockedValue { $0.preferred = endpoint }
    }

    /// The next endpoint after `endpoint`, made the preferred one.
    func rotate(from endpoint: Int) -> Int {
        let next = (endpoint + 1) % endpoints.count
        state.withLockedValue { if $0.preferred == endpoint { $0.preferred = next } }
        return next
    }

    // MARK: Errors

    static func decodeError(_ data: Data) -> WireError? {
        if let error = try? JSONDecoder().decode(WireError.self, from: data), error.code != nil || error.message != nil {
            return error
        }
        // A streamed call's failure comes as a line {"error": {...}}.
        if let line = try? JSONDecoder().decode(WireStreamLine<WireKeyValue>.self, from: data) { return line.error }
        return nil
    }

    /// etcd's answer as a `ClusterStoreError`, by its gRPC code and message.
    static func error(_ wire: WireError?, status: HTTPResponseStatus) -> ClusterStoreError {
        let message = wire?.message ?? wire?.error ?? "HTTP \(status.code)"
        switch wire?.code {
        case 8 where message.contains("space exceeded"): return .full(message)  // NOSPACE: a quota, not a lost member
        case 14, 4, 8, 1: return .unavailable(message)  // unavailable, deadline exceeded, exhausted, canceled
        case 16, 7: return .unauthenticated(message)  // unauthenticated, permission denied
        case 5 where message.contains("lease not found"): return .leaseNotFound(0)
        case 11 where message.contains("compacted"): return .compacted(oldestAvailable: 0)
        case 3, 9:
            if message.contains("user name is empty") || message.contains("authentication failed")
                || message.contains("invalid auth token") || message.contains("permission denied")
            {
                return .unauthenticated(message)
            }
            return .failed(message)
        case nil where status.code >= 500: return .unavailable(message)
        default: return .failed(message)
        }
    }

    /// Whether a refusal that says "unavailable" may still have been applied ("request timed out"
    /// after the proposal; "no leader" and the like were never proposed).
    static func mayHaveApplied(_ data: Data) -> Bool {
        guard let message = decodeError(data)?.message else { return true }
        return message.contains("timed out") || message.contains("timeout") || message.contains("stopped")
    }

    /// Whether a transport error happened before the request could be sent (connecting).
    static func neverSent(_ error: Error) -> Bool {
        if let error = error as? HTTPClientError { return error == .connectTimeout }
        if error is NIOConnectionError { return true }
        if let error = error as? IOError { return error.errnoCode == ECONNREFUSED || error.errnoCode == ENETUNREACH }
        return false
    }

    static func describe(_ error: Error) -> String {
        if let error = error as? HTTPClientError { return error.description }
        return String(describing: error)
    }

    static func nanoseconds(_ duration: Duration) -> Int64 {
        let (seconds, attoseconds) = duration.components
        return seconds * 1_000_000_000 + attoseconds / 1_000_000_000
    }

    static func normalized(_ endpoint: String) throws -> String {
        var text = endpoint.trimmingCharacters(in: .whitespaces)
        while text.hasSuffix("/") { text.removeLast() }
        guard let url = URL(string: text), let scheme = url.scheme, scheme == "http" || scheme == "https",
            let host = url.host, !host.isEmpty, url.path.isEmpty, url.user == nil
        else {
            throw EtcdConfigurationError.badEndpoint(endpoint)
        }
        return text
    }

    static func tlsConfiguration(_ tls: EtcdConfiguration.TLS) throws -> TLSConfiguration {
        var configuration = TLSConfiguration.makeClientConfiguration()
        if let ca = tls.caFile {
            guard FileManager.default.isReadableFile(atPath: ca) else {
                throw EtcdConfigurationError.tls("cannot read the CA file \(ca)")
            }
            configuration.trustRoots = .file(ca)
        }
        switch (tls.certificateFile, tls.keyFile) {
        case (nil, nil):
            break
        case (let cert?, let key?):
            do {
                configuration.certificateChain = try NIOSSLCertificate.fromPEMFile(cert).map { .certificate($0) }
            } catch {
                throw EtcdConfigurationError.tls("cannot read the client certificate \(cert)")
            }
            do {
                configuration.privateKey = .privateKey(try NIOSSLPrivateKey(file: key, format: .pem))
            } catch {
                throw EtcdConfigurationError.tls("cannot read the client key \(key)")
            }
        default:
            throw EtcdConfigurationError.tls("a client certificate needs its key, and a key its certificate")
        }
        return configuration
    }
}
