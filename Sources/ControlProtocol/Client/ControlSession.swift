import Glibc

/// The app side of one presenter: what to do for asks, what to make of notifications.
package protocol PresenterEndpoint: AnyObject, Sendable {
    /// Does what the ask requires; returns nil when done, or why it could not be done.
    func perform(_ ask: Ask) async -> ErrorBody?
    /// Takes a notification.
    func receive(_ event: PresenterEvent) async
    /// The presenter could not be registered again after a reconnect (its item may be gone).
    func registrationLost(_ error: ControlTransportError) async
    /// The connection to the daemon ended (the mount was unmounted, or its daemon stopped or
    /// restarted); the session keeps trying to reconnect and register the presenter again.
    func connectionLost(_ error: ControlTransportError?) async
    /// The presenter was registered again after a reconnect, as `presenter`.
    func registeredAgain(as presenter: PresenterID) async
}

extension PresenterEndpoint {
    package func registrationLost(_ error: ControlTransportError) async {}
    package func connectionLost(_ error: ControlTransportError?) async {}
    package func registeredAgain(as presenter: PresenterID) async {}
}

/// A local handle for a presenter registered through a `ControlSession`; it survives
/// reconnections (the daemon's `PresenterID` does not).
package struct SessionPresenter: Hashable, Sendable {
    package let token: UInt64
}

/// A granted access, tied to the connection that holds it.
package struct SessionAccess: Sendable {
    package let access: AccessID
    let client: ControlClient
}

/// A long-lived, self-healing connection to one mount's daemon: connects lazily, and after the
/// daemon restarts reconnects (with backoff) and registers every presenter again, at its latest
/// path. Asks and notifications reach each presenter's endpoint in order, one presenter at a
/// time each (presenters do not wait for one another).
package final class ControlSession: @unchecked Sendable {
    package struct Options: Sendable {
        package var clientName: String?
        /// First and longest wait between reconnection attempts.
        package var reconnectDelay: (initial: Duration, maximum: Duration)
        /// Handshake timeout per attempt.
        package var connectTimeout: Duration
        /// Presenters' tasks prefer `ReaderThreadExecutor` (true), or run on the global pool
        /// (false: a thread wake-up per ask; `coordfs-bench protocol` compares the two).
        package var presentersOnReaderThread: Bool
        package init(clientName: String? = nil, reconnectDelay: (initial: Duration, maximum: Duration) = (.milliseconds(50), .seconds(2)), connectTimeout: Duration = .seconds(5),
                     presentersOnReaderThread: Bool = true) {
            self.clientName = clientName
            self.reconnectDelay = reconnectDelay
            self.connectTimeout = connectTimeout
            self.presentersOnReaderThread = presentersOnReaderThread
        }
    }

    private enum Delivery: Sendable {
        case ask(Ask, ControlClient)
        case event(PresenterEvent)
        case lost(ControlTransportError)
        case disconnected(ControlTransportError?)
        case registeredAgain(PresenterID)
    }

    private struct Registration {
        var path: MountPath
        let kind: ItemKind
        let asks: Set<AskKind>
        /// The latest unsaved-changes flag, sent again with a re-registration.
        var unsaved: Bool
        let endpoint: any PresenterEndpoint
        let inbox: AsyncStream<Delivery>.Continuation
        var remote: PresenterID?
    }

    private struct State {
        var client: ControlClient?
        var connecting: Task<ControlClient, any Error>?
        var reconnecting = false
        var registrations: [UInt64: Registration] = [:]
        var byRemote: [PresenterID: UInt64] = [:]
        var nextToken: UInt64 = 1
        var connections = 0
        var closed = false
    }

    private let socketPath: @Sendable () throws -> String
    private let options: Options
    private let state = Locked(State())
    private let relay: Relay

    /// - Parameter socketPath: computes the socket path at each (re)connection, so a mount that
    ///   moved is found again.
    package init(socketPath: @escaping @Sendable () throws -> String, options: Options = Options()) {
        self.socketPath = socketPath
        self.options = options
        self.relay = Relay()
        relay.session = self
    }

    /// How many times a connection was established (1 after the first, 2 after a reconnect...).
    package var connectionCount: Int { state.withLock { $0.connections } }

    /// Whether a connection is up right now.
    package var isConnected: Bool { state.withLock { $0.client?.isConnected ?? false } }

    /// The daemon's current id for a presenter (nil while disconnected).
    package func remoteID(of presenter: SessionPresenter) -> PresenterID? {
        state.withLock { $0.registrations[presenter.token]?.remote }
    }

    /// Registers a presenter; it stays registered across reconnections until `unregister`.
    /// `unsaved`: it has unsaved changes from the start (see `setUnsavedChanges(_:_:)`).
    package func register(_ path: MountPath, kind: ItemKind, asks: Set<AskKind> = Set(AskKind.allCases), unsaved: Bool = false,
                         endpoint: any PresenterEndpoint) async throws(ControlTransportError) -> SessionPresenter {
        let client = try await connectedClient()
        let (stream, inbox) = AsyncStream<Delivery>.makeStream()
        let token = state.withLock { s -> UInt64 in
            defer { s.nextToken += 1 }
            s.registrations[s.nextToken] = Registration(path: path, kind: kind, asks: asks, unsaved: unsaved, endpoint: endpoint, inbox: inbox)
            return s.nextToken
        }
        // A presenter that answers without suspending answers on the reader thread (no wake-up).
        Task(executorPreference: options.presentersOnReaderThread ? ReaderThreadExecutor.shared : nil) { await Self.drain(stream, endpoint: endpoint) }
        do {
            _ = try await client.register(path, kind: kind, asks: asks, unsaved: unsaved) { [weak self] remote in self?.bind(token, to: remote) }
        } catch {
            state.withLock { _ = $0.registrations.removeValue(forKey: token) }
            inbox.finish()
            throw error
        }
        return SessionPresenter(token: token)
    }

    /// Unregisters a presenter (locally at once; on the daemon if connected).
    package func unregister(_ presenter: SessionPresenter) async {
        let (registration, client) = state.withLock { s -> (Registration?, ControlClient?) in
            let registration = s.registrations.removeValue(forKey: presenter.token)
            if let remote = registration?.remote { s.byRemote[remote] = nil }
            return (registration, s.client)
        }
        registration?.inbox.finish()
        if let remote = registration?.remote, let client { try? await client.unregister(remote) }
    }

    /// Waits for a coordinated access (on behalf of `presenter`, which is then not asked).
    package func coordinate(_ intents: [Intent], presenter: SessionPresenter? = nil, timeoutMs: UInt32? = nil,
                           purpose: String? = nil) async throws(ControlTransportError) -> SessionAccess {
        let client = try await connectedClient()
        let remote = presenter.flatMap { p in state.withLock { $0.registrations[p.token]?.remote } }
        return SessionAccess(access: try await client.coordinate(intents, presenter: remote, timeoutMs: timeoutMs, purpose: purpose), client: client)
    }

    /// Says the accessor of `access` is about to move, or moved, `path` to `newPath` (see
    /// `ControlClient.announceMove`).
    package func announceMove(_ access: SessionAccess, from path: MountPath, to newPath: MountPath, done: Bool) {
        access.client.announceMove(access.access, from: path, to: newPath, done: done)
    }

    /// Releases an access. If the connection that granted it is gone, the daemon already
    /// dropped it and this throws `.disconnected`.
    package func release(_ access: SessionAccess, changes: [ItemChange] = []) async throws(ControlTransportError) {
        try await access.client.release(access.access, changes: changes)
    }

    /// The daemon's status.
    package func status() async throws(ControlTransportError) -> StatusReport {
        try await connectedClient().status()
    }

    // MARK: The document store

    /// Tells the daemon's document store whether the presenter has unsaved changes; remembered
    /// and said again when the presenter is registered again after a reconnect.
    package func setUnsavedChanges(_ presenter: SessionPresenter, _ unsaved: Bool) async throws(ControlTransportError) {
        let known = state.withLock { s -> Bool in
            guard s.registrations[presenter.token] != nil else { return false }
            s.registrations[presenter.token]?.unsaved = unsaved
            return true
        }
        guard known else { throw .protocolError(ProtocolError(.unknownPresenter, "the presenter is not registered in this session")) }
        let client = try await connectedClient()
        try await client.setUnsavedChanges(try remote(presenter), unsaved)
    }

    /// Open conflicts of one presenter of this session, or of all of this connection's presenters.
    package func conflicts(of presenter: SessionPresenter? = nil) async throws(ControlTransportError) -> [ConflictInfo] {
        let client = try await connectedClient()
        return try await client.conflicts(presenter: try presenter.map { (p) throws(ControlTransportError) in try remote(p) })
    }

    /// Resolves a conflict (see `ControlClient.resolve`).
    package func resolve(_ conflict: ConflictID, with resolution: Resolution, mine: ResolutionContents? = nil) async throws(ControlTransportError) -> Resolved {
        try await connectedClient().resolve(conflict, with: resolution, mine: mine)
    }

    /// The kept versions of the document at `path`, newest first.
    package func versions(_ path: MountPath) async throws(ControlTransportError) -> [VersionInfo] {
        try await connectedClient().versions(path)
    }

    /// Forgets the kept versions of the document at `path` that nothing holds on to.
    package func removeVersions(_ path: MountPath) async throws(ControlTransportError) {
        try await connectedClient().removeVersions(path)
    }

    /// Writes a kept version back over the document at `path` (see `ControlClient.restore`).
    package func restore(_ version: VersionID, to path: MountPath) async throws(ControlTransportError) -> Restored {
        try await connectedClient().restore(version, to: path)
    }

    /// All of a kept version's bytes.
    package func contents(ofVersion version: VersionID) async throws(ControlTransportError) -> [UInt8] {
        try await connectedClient().contents(ofVersion: version)
    }

    /// A kept version's size, and its bytes when it is at most `limit` bytes long.
    package func contents(ofVersion version: VersionID, atMost limit: Int) async throws(ControlTransportError) -> (bytes: [UInt8]?, size: UInt64) {
        try await connectedClient().contents(ofVersion: version, atMost: limit)
    }

    /// The largest frame the daemon accepts (what one `resolve` with bytes may carry).
    package func maxFrameSize() async throws(ControlTransportError) -> Int {
        try await connectedClient().welcome.maxFrameSize
    }

    /// The daemon's id of a registered presenter, or `.disconnected` while it has none.
    private func remote(_ presenter: SessionPresenter) throws(ControlTransportError) -> PresenterID {
        guard let remote = state.withLock({ $0.registrations[presenter.token]?.remote }) else { throw .disconnected }
        return remote
    }

    /// Closes the connection and stops reconnecting; presenters are dropped.
    package func close() {
        let (client, registrations) = state.withLock { s -> (ControlClient?, [Registration]) in
            s.closed = true
            defer { s.registrations = [:]; s.byRemote = [:] }
            return (s.client, Array(s.registrations.values))
        }
        for registration in registrations { registration.inbox.finish() }
        client?.close()
    }

    // MARK: Connection management

    /// The live client, connecting (and registering every presenter again) if needed.
    func connectedClient() async throws(ControlTransportError) -> ControlClient {
        let task = state.withLock { s -> Task<ControlClient, any Error>? in
            if s.closed { return nil }
            if let client = s.client, client.isConnected {
                return Task { client }
            }
            if let connecting = s.connecting { return connecting }
            let connecting = Task { try await self.establish() }
            s.connecting = connecting
            return connecting
        }
        guard let task else { throw .disconnected }
        do {
            return try await task.value
        } catch let error as ControlTransportError {
            throw error
        } catch {
            throw .system(operation: "locate control socket: \(error)", errno: ENOENT)
        }
    }

    private func establish() async throws -> ControlClient {
        defer { state.withLock { $0.connecting = nil } }
        let path = try socketPath()
        let client = try ControlClient.connect(socketPath: path, clientName: options.clientName, delegate: relay, timeout: options.connectTimeout)
        let pending = state.withLock { s -> [(UInt64, Registration)] in
            s.client = client
            s.connections += 1
            s.byRemote = [:]
            for token in s.registrations.keys { s.registrations[token]?.remote = nil }
            return s.registrations.map { ($0.key, $0.value) }
        }
        for (token, registration) in pending.sorted(by: { $0.0 < $1.0 }) {
            let inbox = registration.inbox
            do {
                _ = try await client.register(registration.path, kind: registration.kind, asks: registration.asks,
                                              unsaved: registration.unsaved) { [weak self] remote in
                    self?.bind(token, to: remote)
                    inbox.yield(.registeredAgain(remote))
                }
            } catch ControlTransportError.disconnected {
                throw ControlTransportError.disconnected
            } catch {
                registration.inbox.yield(.lost(error))
            }
        }
        return client
    }

    private func bind(_ token: UInt64, to remote: PresenterID) {
        state.withLock { s in
            guard s.registrations[token] != nil else { return }
            s.registrations[token]?.remote = remote
            s.byRemote[remote] = token
        }
    }

    private func connectionEnded(_ client: ControlClient, error: ControlTransportError?) {
        let (shouldReconnect, told) = state.withLock { s -> (Bool, [AsyncStream<Delivery>.Continuation]) in
            guard s.client === client else { return (false, []) }
            s.client = nil
            s.byRemote = [:]
            for token in s.registrations.keys { s.registrations[token]?.remote = nil }
            guard !s.closed else { return (false, []) }
            let told = s.registrations.values.map(\.inbox)
            guard !s.registrations.isEmpty, !s.reconnecting else { return (false, told) }
            s.reconnecting = true
            return (true, told)
        }
        // Every presenter hears at once that it is not registered any more (until the reconnect).
        for inbox in told { inbox.yield(.disconnected(error)) }
        guard shouldReconnect else { return }
        Task {
            var delay = options.reconnectDelay.initial
            while true {
                try? await Task.sleep(for: delay)
                if state.withLock({ $0.closed || $0.registrations.isEmpty }) { break }
                if (try? await connectedClient()) != nil { break }
                delay = min(delay * 2, options.reconnectDelay.maximum)
            }
            state.withLock { $0.reconnecting = false }
        }
    }

    private func route(_ delivery: Delivery, presenter remote: PresenterID, client: ControlClient) {
        let inbox = state.withLock { s -> AsyncStream<Delivery>.Continuation? in
            guard let token = s.byRemote[remote], let registration = s.registrations[token] else { return nil }
            // Keep the path current so a re-registration after a reconnect uses it.
            if case .event(.didMove(let newPath)) = delivery { s.registrations[token]?.path = newPath }
            return registration.inbox
        }
        if let inbox {
            inbox.yield(delivery)
        } else if case .ask(let ask, _) = delivery {
            client.answer(ask.id, error: ErrorBody(code: .unknownPresenter, message: "\(remote) is not registered here"))
        }
    }

    private static func drain(_ stream: AsyncStream<Delivery>, endpoint: any PresenterEndpoint) async {
        for await delivery in stream {
            switch delivery {
            case .ask(let ask, let client):
                let error = await endpoint.perform(ask)
                client.answer(ask.id, error: error)
            case .event(let event):
                await endpoint.receive(event)
            case .lost(let error):
                await endpoint.registrationLost(error)
            case .disconnected(let error):
                await endpoint.connectionLost(error)
            case .registeredAgain(let remote):
                await endpoint.registeredAgain(as: remote)
            }
        }
    }

    /// The client delegate, kept apart so the session's public surface stays small.
    private final class Relay: ControlClientDelegate, @unchecked Sendable {
        weak var session: ControlSession?
        /// Routing only takes a lock and hands the delivery to the presenter's inbox.
        var receivesOnReaderThread: Bool { true }

        func controlClient(_ client: ControlClient, didReceive ask: Ask) {
            guard let session else {
                client.answer(ask.id, error: ErrorBody(code: .failed, message: "the session is gone"))
                return
            }
            session.route(.ask(ask, client), presenter: ask.presenter, client: client)
        }

        func controlClient(_ client: ControlClient, didReceive notification: PresenterNotification) {
            session?.route(.event(notification.event), presenter: notification.presenter, client: client)
        }

        func controlClient(_ client: ControlClient, didCloseWith error: ControlTransportError?) {
            session?.connectionEnded(client, error: error)
        }
    }
}
