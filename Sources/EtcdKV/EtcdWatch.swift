import AsyncHTTPClient
import ClusterKV
import Foundation
import NIOConcurrencyHelpers
import NIOCore

extension EtcdClusterStore {
    /// A watch through the gateway: one POST of a `create_request` whose answer streams one JSON
    /// line per watch response. When its endpoint goes away the watch goes on from the next
    /// revision on another endpoint (nothing lost, nothing twice); the stream throws
    /// `unavailable` once every endpoint failed in a row (while one of them says it has no leader,
    /// an election under way, it goes round them again after a pause, for up to
    /// `electionWait`), `compacted` when etcd no longer has
    /// `fromRevision`, `historyLost` when etcd is below a revision the watch (or the caller, by
    /// `fromRevision`) saw already (its data lost: started again empty at the same address), `unauthenticated` when it refuses the credentials. The watch asks etcd to
    /// end it when its member loses the leader (`hasleader`), so a member cut off from the others
    /// does not keep it silent.
    public func watch(_ key: [UInt8], prefix: Bool, fromRevision: Revision) -> AsyncThrowingStream<WatchBatch, Error> {
        let (stream, continuation) = AsyncThrowingStream.makeStream(of: WatchBatch.self)
        let task = Task {
            let cursor = WatchCursor(next: fromRevision)
            var endpoint = endpointOrder()[0]
            let clock = ContinuousClock()
            var round = 0
            while !Task.isCancelled {
                do {
                    try await watchWithProbe(key, prefix: prefix, endpoint: endpoint, cursor: cursor, continuation: continuation)
                    // The member ended the stream (stopping): go on elsewhere.
                    cursor.failed(at: clock.now)
                } catch let failure as EndpointFailure {
                    if cursor.failed(at: clock.now, noLeader: failure.noLeader) >= endpoints.count {
                        // Every endpoint failed in a row. When one said it has no leader (an
                        // election: the member that led was stopped, killed or cut off), another
                        // round may find the new leader: a pause, and round again, for a while.
                        round += 1
                        let pause = Duration.milliseconds(50 * min(round, 4))
                        guard cursor.electing, let since = cursor.failingSince, clock.now - since + pause < Self.electionWait(configuration) else {
                            continuation.finish(throwing: failure.error)
                            return
                        }
                        try? await Task.sleep(for: pause)
                        cursor.newRound()
                    }
                } catch is CancellationError {
                    break
                } catch {
                    if Task.isCancelled { break }
                    continuation.finish(throwing: error)
                    return
                }
                if cursor.failedInARow >= endpoints.count {
                    continuation.finish(throwing: ClusterStoreError.unavailable("every etcd endpoint ended the watch"))
                    return
                }
                endpoint = rotate(from: endpoint)
            }
            continuation.finish()
        }
        continuation.onTermination = { _ in task.cancel() }
        return stream
    }

    /// How long a watch whose endpoints all fail goes round them again while one says it has no
    /// leader (an election under way; a round may cost a stopped member's probe interval and
    /// request timeout): five request timeouts, at least 5 s. Without a leader etcd commits
    /// nothing, so the watch misses nothing meanwhile.
    static func electionWait(_ configuration: EtcdConfiguration) -> Duration {
        max(configuration.requestTimeout * 5, .seconds(5))
    }

    /// Where a watch is: the revision to resume from, how many endpoints failed in a row (in this
    /// round), since when the watch has had no member, and whether one said it has no leader.
    final class WatchCursor: Sendable {
        struct State {
            var next: Revision
            var failedInARow = 0
            var failingSince: ContinuousClock.Instant?
            var electing = false
        }
        private let state: NIOLockedValueBox<State>
        init(next: Revision) { state = NIOLockedValueBox(State(next: next)) }
        var next: Revision {
            get { state.withLockedValue { $0.next } }
            set { state.withLockedValue { $0.next = newValue } }
        }
        var failedInARow: Int { state.withLockedValue { $0.failedInARow } }
        var failingSince: ContinuousClock.Instant? { state.withLockedValue { $0.failingSince } }
        var electing: Bool { state.withLockedValue { $0.electing } }
        @discardableResult func failed(at now: ContinuousClock.Instant, noLeader: Bool = false) -> Int {
            state.withLockedValue {
                $0.failedInARow += 1
                if $0.failingSince == nil { $0.failingSince = now }
                $0.electing = $0.electing || noLeader
                return $0.failedInARow
            }
        }
        /// Every endpoint again, the failing streak going on.
        func newRound() { state.withLockedValue { $0.failedInARow = 0; $0.electing = false } }
        func succeeded() { state.withLockedValue { $0 = State(next: $0.next) } }
    }

    /// The watch stream on `endpoint` beside a probe: a quiet stream cannot tell a member that is
    /// idle from one that is stopped or cut off (the TCP connection stays open), so every
    /// `watchProbeInterval` a linearizable read goes to the same member, and when it fails as
    /// unavailable the stream is dropped and the watch goes on elsewhere.
    private func watchWithProbe(
        _ key: [UInt8], prefix: Bool, endpoint: Int, cursor: WatchCursor,
        continuation: AsyncThrowingStream<WatchBatch, Error>.Continuation
    ) async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                var next = cursor.next
                defer { cursor.next = next }
                try await self.watchOnce(key, prefix: prefix, endpoint: endpoint, next: &next) { batch, resume in
                    cursor.succeeded()
                    cursor.next = resume
                    continuation.yield(batch)
                } created: { resume in
                    cursor.succeeded()
                    cursor.next = resume
                    self.markPreferred(endpoint)
                }
            }
            if let interval = configuration.watchProbeInterval {
                group.addTask {
                    var probe = JSONObject()
                    probe.string("key", Base64.encode(key))
                    probe.string("limit", "1")
                    probe.raw("keys_only", "true")
                    let payload = probe.data
                    while true {
                        try await Task.sleep(for: interval)
                        do {
                            _ = try await self.authorizedPost(endpoint: endpoint, path: "/v3/kv/range", payload: payload)
                        } catch let failure as EndpointFailure {
                            throw failure
                        } catch is CancellationError {
                            throw CancellationError()
                        } catch {
                            // Refusals (auth) are the stream's to report.
                        }
                    }
                }
            }
            defer { group.cancelAll() }
            try await group.next()
        }
    }

    /// One watch stream on one endpoint, until it ends. `next` follows the revision to resume from.
    private func watchOnce(
        _ key: [UInt8], prefix: Bool, endpoint: Int, next: inout Revision,
        deliver: (WatchBatch, Revision) -> Void, created: (Revision) -> Void
    ) async throws {
        var token = try await currentToken(endpoint: endpoint)
        for attempt in 0..<2 {
            var create = KeyRange.fields(key, prefix: prefix)
            if next > 0 { create.string("start_revision", String(next)) }
            var body = JSONObject()
            body.object("create_request", create)
            let payload = body.data
            var request = makeRequest(endpoint: endpoint, path: "/v3/watch", payload: payload, token: token)
            request.headers.add(name: "Grpc-Metadata-hasleader", value: "true")
            let response: HTTPClientResponse
            do {
                response = try await http.execute(request, deadline: .distantFuture)
            } catch is CancellationError {
                throw CancellationError()
            } catch {
                throw EndpointFailure(
                    error: .unavailable("etcd at \(endpoints[endpoint]): \(Self.describe(error))"), mayHaveApplied: false)
            }
            if response.status != .ok {
                let body = (try? await response.body.collect(upTo: 1 << 20)).map { Data($0.readableBytesView) } ?? Data()
                let error = Self.error(Self.decodeError(body), status: response.status)
                if case .unavailable(let message) = error {
                    throw EndpointFailure(error: error, mayHaveApplied: false, noLeader: message.contains("no leader"))
                }
                if case .unauthenticated = error, attempt == 0, configuration.credentials != nil {
                    state.withLockedValue { $0.token = nil }
                    token = try await currentToken(endpoint: endpoint)
                    continue
                }
                throw error
            }
            var pending: [UInt8] = []
            var renewToken = false
            do {
                stream: for try await chunk in response.body {
                    pending.append(contentsOf: chunk.readableBytesView)
                    while let newline = pending.firstIndex(of: UInt8(ascii: "\n")) {
                        let line = Data(pending[..<newline])
                        pending.removeSubrange(...newline)
                        if line.isEmpty { continue }
                        do {
                            if let behind = try handle(line: line, next: &next, deliver: deliver, created: created) {
                                try await checkHistory(endpoint: endpoint, behind: behind, next: next)
                            }
                        } catch ClusterStoreError.unauthenticated(let message) {
                            guard attempt == 0, configuration.credentials != nil else {
                                throw ClusterStoreError.unauthenticated(message)
                            }
                            renewToken = true
                            break stream
                        }
                    }
                }
            } catch let error as ClusterStoreError {
                throw error
            } catch let failure as EndpointFailure {
                throw failure
            } catch is CancellationError {
                throw CancellationError()
            } catch {
                if Task.isCancelled { throw CancellationError() }
                throw EndpointFailure(
                    error: .unavailable("etcd at \(endpoints[endpoint]) ended the watch: \(Self.describe(error))"),
                    mayHaveApplied: false)
            }
            guard renewToken else { return }
            state.withLockedValue { $0.token = nil }
            token = try await currentToken(endpoint: endpoint)
        }
    }

    /// A watch created from `next` on a member whose revision was `behind` (below `next - 1`,
    /// which an earlier answer showed): a follower that has not applied everything yet, or etcd
    /// started again without its history (an empty or older data folder at the same address).
    /// A linearizable read on the member tells them apart: it answers once the member applied
    /// what the cluster committed. Still behind: `historyLost`, for the caller to read everything
    /// again (a watch from `next` would stay silent until etcd's revisions passed it).
    private func checkHistory(endpoint: Int, behind: Revision, next: Revision) async throws {
        var probe = JSONObject()
        probe.string("key", Base64.encode([0]))
        probe.string("limit", "1")
        probe.raw("keys_only", "true")
        let data = try await authorizedPost(endpoint: endpoint, path: "/v3/kv/range", payload: probe.data)
        let current = (try? JSONDecoder().decode(WireRangeResponse.self, from: data))?.header?.revision?.value ?? behind
        if current + 1 < next { throw ClusterStoreError.historyLost(current: current) }
    }

    /// Takes one line of the watch's answer; returns etcd's revision when the watch was created
    /// on a member whose revision is below one the watch delivered already (`checkHistory`).
    private func handle(
        line: Data, next: inout Revision, deliver: (WatchBatch, Revision) -> Void, created: (Revision) -> Void
    ) throws -> Revision? {
        let decoded: WireStreamLine<WireWatchResponse>
        do {
            decoded = try JSONDecoder().decode(WireStreamLine<WireWatchResponse>.self, from: line)
        } catch {
            throw ClusterStoreError.failed("etcd sent a watch line that does not decode")
        }
        if let error = decoded.error {
            let mapped = Self.error(error, status: .ok)
            if case .unavailable(let message) = mapped {
                throw EndpointFailure(error: mapped, mayHaveApplied: false, noLeader: message.contains("no leader"))
            }
            throw mapped
        }
        guard let result = decoded.result else { return nil }
        let headerRevision = result.header?.revision?.value ?? 0
        if result.canceled == true {
            if let compacted = result.compact_revision?.value, compacted > 0 {
                throw ClusterStoreError.compacted(oldestAvailable: compacted)
            }
            let reason = result.cancel_reason ?? "etcd canceled the watch"
            if reason.contains("no leader") || reason.contains("leader") {
                throw EndpointFailure(error: .unavailable(reason), mayHaveApplied: false, noLeader: true)
            }
            throw Self.error(WireError(error: reason, message: reason, code: 3), status: .ok)
        }
        var behind: Revision?
        if result.created == true {
            if next <= 0 { next = headerRevision + 1 }
            if headerRevision > 0 && headerRevision + 1 < next { behind = headerRevision }
            created(next)
        }
        let events = try (result.events ?? []).compactMap { event -> WatchEvent? in
            guard let kv = try event.kv?.keyValue() else { return nil }
            return event.type == "DELETE" ? .delete(key: kv.key, modRevision: kv.modRevision) : .put(kv)
        }
        guard let last = events.last else { return behind }
        let lastRevision: Revision =
            switch last {
            case .put(let kv): kv.modRevision
            case .delete(_, let revision): revision
            }
        next = lastRevision + 1
        deliver(WatchBatch(revision: max(headerRevision, lastRevision), events: events), next)
        return behind
    }
}
