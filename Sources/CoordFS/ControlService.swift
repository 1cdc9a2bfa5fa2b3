import NameBytes
import ControlProtocol
import Coordination
import EventLog
import Glibc
import Linux
import Loopback
import Synchronization

/// The mount's control socket: out-of-process presenters and coordinated accesses (docs/protocol.md).
///
/// Serves `BACKING/.coordfs/control.sock` with a `ControlServer`. Presenters registered through it
/// are `RemotePresenter`s on the mount's coordinator; coordinated accesses are requests on the
/// same coordinator, made as the peer (pid, uid, gid and executable from SO_PEERCRED and /proc),
/// so unmodified tools through the mount, cooperating apps and presenters all meet in one place.
/// Everything a connection holds (presenters, accesses, waiting requests) ends the moment it
/// closes; the coordinator records asks that were pending on it as presenter gone.
public final class ControlService: Sendable {
    /// The socket server.
    package let server: ControlServer
    let handler: ControlRequestHandler

    /// Starts serving `BACKING/.coordfs/control.sock` for `daemon`; nil when the mount runs without it.
    static func start(daemon: Daemon) throws(MountError) -> ControlService? {
        let plan = daemon.plan
        // The descriptor limit was raised when the daemon was made (`Daemon.init`), before its
        // shares were cut from it.
        let allowOther = plan.options.allowOther
        if allowOther {
            // Other users must reach the socket inside the state folder, but never list or change it.
            plan.state.openForSearch()
        }
        let handler = ControlRequestHandler(daemon: daemon)
        let limits = plan.options.limits
        let configuration = ControlServer.Configuration(
            socketPath: plan.state.io.controlSocket, permissions: allowOther ? 0o666 : 0o600,
            serverName: "coordfs \(ControlService.version)", mountPoint: plan.mountpoint,
            maxConnections: limits.maxConnections, maxConnectionsPerUser: limits.maxUserConnections,
            exemptUsers: PeerLimits.exemptUsers, reservedConnections: PeerLimits.reservedConnections,
            idleTimeout: .milliseconds(Int64(limits.idleTimeout * 1000)), slowTimeout: .milliseconds(Int64(limits.slowTimeout * 1000)),
            notice: { sayOnStandardError("coordfs: \($0)") },
            share: ControlService.share(of: daemon.loopback.openFiles))
        let server = ControlServer(configuration: configuration, handler: handler)
        do {
            try server.start()
        } catch {
            throw .system("cannot serve the control socket '\(plan.state.controlSocket)': \(error)")
        }
        return ControlService(server: server, handler: handler)
    }

    private init(server: ControlServer, handler: ControlRequestHandler) {
        self.server = server
        self.handler = handler
    }

    /// Closes every connection (their presenters and accesses end) and removes the socket.
    func stop() {
        handler.shuttingDown()
        handler.stopForwarding()
        server.stop()
        handler.closeAll()
    }

    /// A connection of a user other than root and the owner draws two descriptors from the others'
    /// share (`OpenFileBounds`, which their opens through the mount draw from too): its socket,
    /// and the log segment its log reader keeps open between `readLog`s. So however many uids
    /// connect, their connections and opens together stay within the share.
    static func share(of bounds: OpenFileBounds) -> (take: @Sendable (UInt32) -> String?, give: @Sendable (UInt32) -> Void) {
        let units = ControlLimits.descriptorsPerConnection
        return (take: { uid in
            bounds.takeShare(uid, units: units) ? nil
                : "the daemon's descriptors for users other than root and the owner are all taken (\(bounds.bounds.others): "
                    + "their opens through the mount and connections): try again once some close"
        }, give: { uid in bounds.giveShare(uid, units: units) })
    }

    /// The daemon's version, sent in `welcome`.
    static let version = "0.1.0"
}

/// Limits per connection; beyond them a request gets `limitExceeded` (the connection stays open).
enum ControlLimits {
    static let presentersPerConnection = 10_000
    static let accessesPerConnection = 1_024
    /// Descriptors a connection of a user other than root and the owner counts in the others'
    /// share: its socket and its log reader's segment.
    static let descriptorsPerConnection = 2
    /// The longest a `coordinate` may ask to wait (`timeoutMs` is clamped to it).
    static let maxWait: Duration = .seconds(3600)
    /// The wait when the request gives no `timeoutMs`.
    static let defaultWait: Duration = .seconds(60)
}

/// Serves requests for one mount; one instance serves every connection. Each connection's calls
/// arrive in order on its own serial queue, so a `ControlClientState` is only touched from its
/// connection's queue, except by coordinator completions (guarded by its lock).
final class ControlRequestHandler: ControlServerHandler, Sendable {
    let coordinator: Coordinator
    let resolver: ControlPathResolver
    /// The others' share of the daemon's descriptors (a file a waiting resolution keeps open draws one).
    let descriptors: OpenFileBounds
    let askDeadline: Duration
    let onAskTimeout: AskTimeoutPolicy
    /// The mount's document store (nil with `store=off`).
    let store: StoreService?
    /// The event log's folder and its writer's index (nil with `log=off`), for `readLog`.
    let logDirectory: String?
    let logIndex: EventLogIndex?
    /// The users over their share of the log now (`EventRecorder.shareState`; nil when off).
    let logShare: @Sendable () -> [StatusReport.LogShareUser]?
    let clients = Mutex<[UInt64: ControlClientState]>([:])
    /// The mount's node of a cluster, once it joined (nil on one host): `clusterStatus`, `clusterSteps`.
    let clusterView = Mutex<ClusterView?>(nil)
    /// The connection holding each remote presenter (by wire id): a notification or a status
    /// entry finds its connection in O(1), however many connections and presenters there are.
    let owners = Mutex<[UInt64: ControlClientState]>([:])
    private let stopping = Atomic<Bool>(false)
    /// The per-user limits, and the counts no single connection knows (pending asks).
    let limits: PeerLimits
    let quotas: PeerQuotas
    /// Each user's connections (connection id to state), to count what a user holds.
    let byUser = Mutex<[UInt32: [UInt64: ControlClientState]]>([:])
    /// The store observer forwarding `documentChanged` to remote presenters.
    private let observation = Mutex<StoreObservation?>(nil)

    init(daemon: Daemon) {
        coordinator = daemon.coordinator
        descriptors = daemon.loopback.openFiles
        let plan = daemon.plan
        resolver = ControlPathResolver(backing: plan.backing, mountpoint: plan.mountpoint)
        let options = plan.options.coordination
        askDeadline = .nanoseconds(Int64(max(0.001, options.askTimeout) * 1e9))
        onAskTimeout = options.strict ? .strict : .proceed
        store = daemon.store
        limits = plan.options.limits
        quotas = PeerQuotas(limits: limits)
        logDirectory = daemon.eventLog == nil ? nil : plan.state.io.eventLog
        logIndex = daemon.eventLog?.index
        logShare = { [weak recorder = daemon.recorder] in
            recorder?.shareState.map { state in
                state.users.map {
                    StatusReport.LogShareUser(uid: $0.uid, sinceMs: $0.since.millisecondsSinceEpoch, records: $0.records,
                                              bytes: $0.bytes, limitBytes: state.limitBytes)
                }
            }
        }
        // Remote presenters hear of and are asked about only what their users may see and make.
        coordinator.presenterPermissions = BackingPermissions(resolver: resolver)
        if let store {
            let added = store.addObserver { [weak self] event in self?.forward(event) }
            observation.withLock { $0 = added }
        }
    }

    func shuttingDown() { stopping.store(true, ordering: .relaxed) }

    /// Stops forwarding store events.
    func stopForwarding() {
        if let store, let added = observation.withLock({ o -> StoreObservation? in defer { o = nil }; return o }) {
            store.removeObserver(added)
        }
    }

    /// Ends what every connection still holds (the server calls `didClose` too; closing twice is harmless).
    func closeAll() {
        let all = clients.withLock { table -> [ControlClientState] in
            defer { table = [:] }
            return Array(table.values)
        }
        for client in all { forget(client.close(), of: client) }
    }

    /// Drops the presenters a closed connection held from the index of owners.
    private func forget(_ presenters: [UInt64], of client: ControlClientState) {
        guard !presenters.isEmpty else { return }
        owners.withLock { table in
            for id in presenters where table[id] === client { table[id] = nil }
            table.shrinkIfSparse()
        }
    }

    /// The connection holding the remote presenter `id`.
    func owner(of id: UInt64) -> ControlClientState? {
        owners.withLock { $0[id] }
    }

    // MARK: ControlServerHandler

    func controlServer(_ server: ControlServer, didOpen connection: ControlConnection) {
        let peer = connection.peer
        // Read now, not cached: once a peer exits its pid may name another process.
        let client = ControlClientState(
            connection: connection,
            origin: AccessOrigin(pid: peer.pid, uid: peer.uid, gid: peer.gid, executable: ProcessNames.read(peer.pid).name),
            peer: ControlPathResolver.Peer(credentials: peer, groups: peer.supplementaryGroups()),
            coordinator: coordinator)
        clients.withLock { $0[connection.id] = client }
        byUser.withLock { $0[peer.uid, default: [:]][connection.id] = client }
        if stopping.load(ordering: .relaxed) {
            connection.close(error: ProtocolError(.shuttingDown, "the daemon is stopping"))
        }
    }

    func controlServer(_ server: ControlServer, didReceive message: ControlMessage, on connection: ControlConnection) {
        guard let client = clients.withLock({ $0[connection.id] }) else { return }
        if stopping.load(ordering: .relaxed), let id = message.requestID {
            connection.reply(to: id, error: ProtocolError(.shuttingDown, "the daemon is stopping"))
            return
        }
        switch message {
        case .register(let request): register(request, client)
        case .unregister(let request): unregister(request, client)
        case .coordinate(let request): coordinate(request, client)
        case .release(let request): release(request, client)
        case .status(let request): status(request, client)
        case .setUnsavedChanges(let request): setUnsavedChanges(request, client)
        case .conflicts(let request): conflicts(request, client)
        case .resolve(let request): resolve(request, client)
        case .versions(let request): versions(request, client)
        case .readVersion(let request): readVersion(request, client)
        case .restore(let request): restore(request, client)
        case .readLog(let request): readLog(request, client)
        case .cancel(let request): cancel(request, client)
        case .removeVersions(let request): removeVersions(request, client)
        case .clusterStatus(let request): clusterStatus(request, client)
        case .clusterSteps(let request): clusterSteps(request, client)
        case .willMove(let request): announceMove(request.move, done: false, client)
        case .didMove(let request): announceMove(request.move, done: true, client)
        case .answer, .error:
            break  // a late answer (after its deadline) or a client's error report: nothing to do
        default:
            if let id = message.requestID {
                connection.reply(to: id, error: ProtocolError(.unexpectedMessage, "\(message.typeName) is not a request"))
            }
        }
    }

    func controlServer(_ server: ControlServer, didClose connection: ControlConnection, reason: ControlConnection.CloseReason) {
        if let client = clients.withLock({ $0.removeValue(forKey: connection.id) }) {
            byUser.withLock { table in
                let uid = connection.peer.uid
                table[uid]?[connection.id] = nil
                if table[uid]?.isEmpty == true { table[uid] = nil }
            }
            let dropped = client.close()
            forget(dropped, of: client)
            // A large teardown: give the memory back (the allocator keeps it otherwise).
            if dropped.count >= 1000 { MemoryTrim.soon() }
        }
    }

    func controlServer(_ server: ControlServer, holdsNothing connection: ControlConnection) -> Bool {
        guard let client = clients.withLock({ $0[connection.id] }) else { return true }
        return client.presenterCount == 0 && client.accessCount == 0
    }

    /// What the user's connections hold together, measured by `count`; nil for root and the
    /// owner, whom the per-user limits do not bind.
    func held(by uid: UInt32, _ count: (ControlClientState) -> Int) -> Int? {
        guard !quotas.exempt.contains(uid) else { return nil }
        let mine = byUser.withLock { Array(($0[uid] ?? [:]).values) }
        return mine.reduce(0) { $0 + count($1) }
    }

    // MARK: Requests

    private func register(_ request: Register, _ client: ControlClientState) {
        let connection = client.connection
        guard client.presenterCount < ControlLimits.presentersPerConnection else {
            connection.reply(to: request.id, error: ProtocolError(.limitExceeded, "a connection may register at most \(ControlLimits.presentersPerConnection) presenters"))
            return
        }
        if let held = held(by: client.origin.uid, \.presenterCount), held >= limits.maxUserPresenters {
            connection.reply(to: request.id, error: ProtocolError(.limitExceeded, "uid \(client.origin.uid) already has \(held) presenters (max_user_presenters)"))
            return
        }
        let item: ControlPathResolver.Item
        do {
            item = try resolver.authorize(request.path, for: client.peer, write: false)
        } catch {
            connection.reply(to: request.id, error: error)
            return
        }
        if let refusal = pinRefusal(of: client.origin.uid, at: item.path) {
            connection.reply(to: request.id, error: refusal)
            return
        }
        let presenter = RemotePresenter(connection: connection, path: item.path, itemPath: item.path.itemPath, kind: request.kind,
                                        asks: request.asks, askDeadline: askDeadline, coordinator: coordinator, quotas: quotas)
        let id: PresenterID
        do {
            id = try coordinator.addFilePresenter(presenter, at: item.path.itemPath, owner: client.origin,
                                                  credentials: client.peer.presenterCredentials)
        } catch {
            connection.reply(to: request.id, error: ProtocolError(.internalError, "cannot register: \(error)"))
            return
        }
        presenter.bind(id)
        var adopted: [ConflictID] = []
        if request.unsaved {
            do {
                adopted = try registerUnsaved(id, path: item.path)
            } catch {
                coordinator.removeFilePresenter(id: id)  // nothing stays registered after a refusal
                presenter.removed()
                connection.reply(to: request.id, error: error)
                return
            }
        }
        // Indexed before the connection lists it, so that its close always finds it.
        owners.withLock { $0[id.rawValue] = client }
        guard client.add(presenter, id: id) else {
            owners.withLock { table in if table[id.rawValue] === client { table[id.rawValue] = nil } }
            coordinator.removeFilePresenter(id: id)  // the connection closed meanwhile
            presenter.removed()
            return
        }
        connection.send(.registered(Registered(id: request.id, presenter: id)))
        tellAdopted(adopted, presenter: id, client)
        store?.tellChangesWhileAway([(id, item.path.itemPath, client.origin.uid)])
    }

    private func unregister(_ request: Unregister, _ client: ControlClientState) {
        guard let (id, presenter) = client.removePresenter(request.presenter.rawValue) else {
            client.connection.reply(to: request.id, error: ProtocolError(.unknownPresenter, "\(request.presenter) is not registered on this connection"))
            return
        }
        forget([id.rawValue], of: client)
        coordinator.removeFilePresenter(id: id)
        presenter.removed()
        client.connection.send(.ok(OK(id: request.id)))
    }

    private func coordinate(_ request: Coordinate, _ client: ControlClientState) {
        let connection = client.connection
        var origin = client.origin
        if let presenter = request.presenter {
            guard let id = client.presenterID(presenter.rawValue) else {
                connection.reply(to: request.id, error: ProtocolError(.unknownPresenter, "\(presenter) is not registered on this connection"))
                return
            }
            origin = origin.onBehalf(of: id)
        }
        // Check every item before asking for anything: a refused request changes nothing.
        var intents: [FileAccessIntent] = []
        do throws(ProtocolError) {
            guard !request.intents.isEmpty else { throw ProtocolError(.invalidValue, "intents: at least one intent is needed") }
            for intent in request.intents { intents.append(try authorize(intent, client)) }
        } catch {
            connection.reply(to: request.id, error: error)
            return
        }
        var wait = ControlLimits.defaultWait
        if let ms = request.timeoutMs { wait = min(.milliseconds(Int64(ms)), ControlLimits.maxWait) }
        let policy = CoordinationPolicy(askDeadline: askDeadline, onAskTimeout: onAskTimeout, waitDeadline: wait)
        if let held = held(by: origin.uid, \.accessCount), held >= limits.maxUserAccesses {
            connection.reply(to: request.id, error: ProtocolError(.limitExceeded, "uid \(origin.uid) already holds or waits for \(held) accesses (max_user_accesses)"))
            return
        }
        guard let pending = client.beginWaiting(request: request.id.rawValue) else {
            connection.reply(to: request.id, error: ProtocolError(.limitExceeded, "a connection may hold or wait for at most \(ControlLimits.accessesPerConnection) accesses"))
            return
        }
        let requestID = request.id
        // The process's purpose (as for its accesses through the mount), or a client coordinator's
        // sub-purpose of it: two coordinators of one process exclude each other, while the
        // process's reads and writes through the mount inside either access never wait for it.
        let process = "pid:\(origin.pid)"
        let purpose = request.purpose.map { process + "/" + $0 } ?? process
        let id = coordinator.coordinate(intents, origin: origin, purpose: purpose, policy: policy) { [client] result in
            switch result {
            case .success(let access):
                if client.granted(access, pending: pending) {
                    connection.send(.granted(Granted(id: requestID, access: AccessID(access.id.rawValue))))
                } else {
                    access.release()  // the client left while it waited
                }
            case .failure(let error):
                switch client.failed(pending) {
                case .gone: break
                case .cancelledByClient:
                    connection.reply(to: requestID, error: ProtocolError(.cancelled, "cancelled by the client"))
                case .failed:
                    connection.reply(to: requestID, error: Self.protocolError(error))
                }
            }
        }
        client.waiting(pending, id: id)
    }

    /// Checks one intent against the peer's permissions and resolves its path inside the mount.
    private func authorize(_ intent: Intent, _ client: ControlClientState) throws(ProtocolError) -> FileAccessIntent {
        switch intent {
        case .reading(let path, let options):
            // A link in the last component is the item read, unless the reader asks to resolve it
            // (Foundation's resolvesSymbolicLink).
            let item = try resolver.authorize(path, for: client.peer, write: false, followFinal: options.contains(.resolvesSymbolicLink))
            return .readingIntent(with: item.path.itemPath, options: options)
        case .writing(let path, let options):
            // Deleting, moving and replacing act on a symbolic link itself and change its directory.
            let structural = !options.isDisjoint(with: [.forDeleting, .forMoving, .forReplacing])
            let item = try resolver.authorize(path, for: client.peer, write: true, structural: structural, followFinal: !structural)
            return .writingIntent(with: item.path.itemPath, options: options)
        }
    }

    private func release(_ request: Release, _ client: ControlClientState) {
        let connection = client.connection
        guard let access = client.access(request.access.rawValue) else {
            connection.reply(to: request.id, error: ProtocolError(.unknownAccess, "\(request.access) is not held by this connection"))
            return
        }
        // A writer may only announce changes to what it coordinated for writing.
        for change in request.changes {
            var ok = Self.covers(access, change.path)
            if case .moved(_, let to) = change { ok = ok && Self.coversDestination(access, to) }
            if !ok {
                connection.reply(to: request.id, error: ProtocolError(
                    .invalidValue, "changes: \(change.path) was not coordinated for writing in \(request.access)", requestID: request.id.rawValue))
                return
            }
        }
        _ = client.removeAccess(request.access.rawValue)
        for change in request.changes {
            switch change {
            case .changed(let path): access.didChange(path.itemPath)
            case .deleted(let path): access.didDelete(path.itemPath)
            case .moved(let from, let to): access.didMove(from: from.itemPath, to: to.itemPath)
            }
        }
        access.release()
        connection.send(.ok(OK(id: request.id)))
    }

    /// Whether `access` coordinated `path` for writing: the item itself, or an item inside one
    /// written `forDeleting`, `forMoving` or `forReplacing`.
    static func covers(_ access: CoordinatedAccess, _ path: MountPath) -> Bool {
        let item = path.itemPath
        return access.intents.contains {
            $0.isWriting && ($0.path == item || ($0.path.isAncestor(of: item) && !$0.writingOptions.isDisjoint(with: [.forDeleting, .forMoving, .forReplacing])))
        }
    }

    /// Whether a move announced by `access` may end at `path`: it, or its directory, is covered.
    static func coversDestination(_ access: CoordinatedAccess, _ path: MountPath) -> Bool {
        covers(access, path) || path.parent.map { covers(access, $0) } == true
    }

    /// `cancel`: a waiting `coordinate` of this connection ends with `cancelled`.
    private func cancel(_ request: CancelRequest, _ client: ControlClientState) {
        if let id = client.cancelWaiting(request: request.request.rawValue) { coordinator.cancel(id) }
        client.connection.send(.ok(OK(id: request.id)))
    }

    /// `willMove` / `didMove` from inside a held access's accessor.
    private func announceMove(_ move: MoveAnnouncement, done: Bool, _ client: ControlClientState) {
        let connection = client.connection
        guard let access = client.access(move.access.rawValue) else {
            connection.reply(to: move.id, error: ProtocolError(.unknownAccess, "\(move.access) is not held by this connection"))
            return
        }
        guard Self.covers(access, move.path), Self.coversDestination(access, move.newPath) else {
            connection.reply(to: move.id, error: ProtocolError(
                .invalidValue, "\(move.path) -> \(move.newPath) was not coordinated for writing in \(move.access)", requestID: move.id.rawValue))
            return
        }
        if done {
            access.didMove(from: move.path.itemPath, to: move.newPath.itemPath)
        } else {
            access.willMove(from: move.path.itemPath, to: move.newPath.itemPath)
        }
        connection.send(.ok(OK(id: move.id)))
    }

    private func status(_ request: StatusQuery, _ client: ControlClientState) {
        // A report is sent in parts as the client reads it; one at a time per connection.
        guard !client.connection.isSendingInOrder else {
            client.connection.reply(to: request.id, error: ProtocolError(.limitExceeded, "the previous status report is still being sent"))
            return
        }
        let snapshot = coordinator.status()
        // Other users see only what they could find in the folder themselves (Visibility.swift),
        // judged once per folder: a report of many presenters walks each folder's path once.
        var memo = VisibilityMemo(resolver: resolver, peer: client.peer)
        func visible(_ path: ItemPath) -> Bool { memo.maySee(path) }
        let presenters = snapshot.presenters.filter { visible($0.path) }.compactMap { p -> StatusReport.Presenter? in
            guard let path = MountPath.of(p.path) else { return nil }
            let kind = kindOf(p.id, path)
            return StatusReport.Presenter(presenter: p.id, path: path, kind: kind,
                                          pid: p.owner.pid, uid: p.owner.uid)
        }
        // An access is listed when one of its items is visible, and then with those items only.
        func intents(_ list: [FileAccessIntent]) -> [Intent] { list.filter { visible($0.path) }.compactMap(Self.convert) }
        // What an access not granted yet waits for: the asks of presenters the peer may see.
        let presenterPaths = Dictionary(snapshot.presenters.map { ($0.id, $0.path) }, uniquingKeysWith: { a, _ in a })
        func asking(_ list: [CoordinationStatus.PendingAsk]) -> [StatusReport.Asking] {
            list.filter { presenterPaths[$0.presenter].map(visible) ?? false }.map {
                StatusReport.Asking(presenter: $0.presenter, ask: AskKind($0.ask), askingMs: $0.ageNanos / 1_000_000)
            }
        }
        let accesses = snapshot.held.filter { $0.intents.contains { visible($0.path) } }.map { a in
            StatusReport.Access(access: AccessID(a.id.rawValue), intents: intents(a.intents), pid: a.origin.pid, uid: a.origin.uid,
                                heldMs: a.ageNanos / 1_000_000, asking: a.phase == .granted ? [] : asking(a.pendingAsks))
        }
        let waiting = snapshot.waiting.filter { $0.intents.contains { visible($0.path) } }.map { a in
            StatusReport.Waiting(intents: intents(a.intents), pid: a.origin.pid, uid: a.origin.uid, waitingMs: a.ageNanos / 1_000_000)
        }
        // Any size: in frames of at most 1 MiB, each but the last marked `more`, each made only
        // once the client read what came before.
        var report = StatusReport(id: request.id, presenters: presenters, accesses: accesses, waiting: waiting)
        // The users over their share of the log: all for root and the mount's owner (who read the
        // whole log), another user only itself; at most `maxLogShareUsers`, in one frame.
        let uid = client.peer.credentials.uid
        let exempt = PeerLimits.exemptUsers.contains(uid)
        report.logShare = Array((logShare() ?? []).filter { exempt || $0.uid == uid }.prefix(Self.maxLogShareUsers))
        client.connection.sendInOrder(stream: StatusFrameStream(report))
    }

    /// The users over their share of the log one status report lists, at most (a short list in
    /// its first frame).
    static let maxLogShareUsers = 1000

    /// A presenter's kind: as registered for remote presenters, from the backing item otherwise.
    private func kindOf(_ id: PresenterID, _ path: MountPath) -> ItemKind {
        let remote = owner(of: id.rawValue)?.presenter(id.rawValue)
        if let remote { return remote.kind }
        var st = stat()
        let full = path.isRoot ? resolver.root + "/." : resolver.root + "/" + path.rawValue
        return full.withNameCString({ lstat($0, &st) }) == 0 && (st.st_mode & S_IFMT) == S_IFDIR ? .directory : .file
    }

    // MARK: Conversions

    static func protocolError(_ error: CoordinationError) -> ProtocolError {
        switch error {
        case .waitTimedOut, .presenterTimedOut: return ProtocolError(.timedOut, error.description)
        case .busy: return ProtocolError(.failed, error.description)
        case .presenterFailed(_, let presenter, let ask, let underlying):
            let why = (underlying as? RemotePresenterRefusal)?.body.message ?? String(describing: underlying)
            return ProtocolError(.failed, "\(presenter) refused '\(ask)': \(why)")
        case .cancelled: return ProtocolError(.shuttingDown, error.description)
        case .deadlock, .cluster: return ProtocolError(.failed, error.description)
        case .invalidRequest, .presenterAlreadyRegistered, .presenterHasNoPath: return ProtocolError(.invalidValue, error.description)
        }
    }

    static func convert(_ intent: FileAccessIntent) -> Intent? {
        guard let path = MountPath.of(intent.path) else { return nil }
        switch intent.kind {
        case .reading(let o):
            return .reading(path, options: o)
        case .writing(let o):
            return .writing(path, options: o)
        }
    }
}

/// What one connection holds: its presenters, its granted accesses and its waiting requests.
/// Closing it (the connection ended) cancels the waits, releases the accesses and removes the
/// presenters, all at once.
final class ControlClientState: Sendable {
    let connection: ControlConnection
    /// The peer as an access origin (its accesses and presenters are recorded under it).
    let origin: AccessOrigin
    let peer: ControlPathResolver.Peer
    private let coordinator: Coordinator

    /// One `coordinate` request between its arrival and its grant or failure.
    final class Pending: Sendable {
        let token: UInt64
        /// The `coordinate`'s id on the wire.
        let request: UInt64
        init(token: UInt64, request: UInt64) {
            self.token = token
            self.request = request
        }
    }

    /// How a waiting request ended without a grant.
    enum Failure { case failed, cancelledByClient, gone }

    private struct State {
        var presenters: [UInt64: (PresenterID, RemotePresenter)] = [:]
        var accesses: [UInt64: CoordinatedAccess] = [:]
        /// Waiting requests by token; the coordinator's id arrives once `coordinate` returns.
        var waiting: [UInt64: Coordination.RequestID?] = [:]
        /// The token of each waiting request by its `coordinate`'s wire id (for `cancel`).
        var byRequest: [UInt64: UInt64] = [:]
        /// Tokens the client cancelled.
        var cancelled: Set<UInt64> = []
        var nextToken: UInt64 = 1
        var closed = false
    }
    private let state = Mutex(State())
    /// The reader of the last `readLog` (ControlService+Log.swift).
    let logReaderBox = Mutex<ConnectionLogReader?>(nil)

    init(connection: ControlConnection, origin: AccessOrigin, peer: ControlPathResolver.Peer, coordinator: Coordinator) {
        self.connection = connection
        self.origin = origin
        self.peer = peer
        self.coordinator = coordinator
    }

    var presenterCount: Int { state.withLock { $0.presenters.count } }

    /// Accesses held and requests waiting (`coordinate`s, and restores and resolutions until done).
    var accessCount: Int { state.withLock { $0.accesses.count + $0.waiting.count } }

    /// False when the connection already closed (the caller removes the presenter again).
    func add(_ presenter: RemotePresenter, id: PresenterID) -> Bool {
        state.withLock { s in
            guard !s.closed else { return false }
            s.presenters[id.rawValue] = (id, presenter)
            return true
        }
    }

    func removePresenter(_ wireID: UInt64) -> (PresenterID, RemotePresenter)? {
        state.withLock { s in
            defer { s.presenters.shrinkIfSparse() }
            return s.presenters.removeValue(forKey: wireID)
        }
    }

    func presenterID(_ wireID: UInt64) -> PresenterID? {
        state.withLock { $0.presenters[wireID]?.0 }
    }

    func presenter(_ wireID: UInt64) -> RemotePresenter? {
        state.withLock { $0.presenters[wireID]?.1 }
    }

    func access(_ wireID: UInt64) -> CoordinatedAccess? {
        state.withLock { $0.accesses[wireID] }
    }

    func removeAccess(_ wireID: UInt64) -> CoordinatedAccess? {
        state.withLock { $0.accesses.removeValue(forKey: wireID) }
    }

    /// Reserves a place for a new request; nil at the limit or once closed.
    func beginWaiting(request: UInt64) -> Pending? {
        state.withLock { s in
            guard !s.closed, s.accesses.count + s.waiting.count < ControlLimits.accessesPerConnection else { return nil }
            let token = s.nextToken
            s.nextToken += 1
            s.waiting[token] = .some(nil)
            s.byRequest[request] = token
            return Pending(token: token, request: request)
        }
    }

    /// Marks the waiting request whose `coordinate` had wire id `request` as cancelled by the
    /// client; returns the coordinator's id to cancel (nil when it is not known yet: `waiting`
    /// cancels it then, or when the request no longer waits).
    func cancelWaiting(request: UInt64) -> Coordination.RequestID? {
        state.withLock { s in
            guard let token = s.byRequest[request], let entry = s.waiting[token] else { return nil }
            s.cancelled.insert(token)
            return entry
        }
    }

    /// Forgets a request that no longer waits (called with the lock held).
    private static func settle(_ pending: Pending, in s: inout State) -> Bool {
        s.waiting.removeValue(forKey: pending.token)
        if s.byRequest[pending.request] == pending.token { s.byRequest.removeValue(forKey: pending.request) }
        return s.cancelled.remove(pending.token) != nil
    }

    /// The coordinator accepted the request as `id` (its completion may already have run).
    func waiting(_ pending: Pending, id: Coordination.RequestID) {
        let abandoned = state.withLock { s -> Bool in
            guard s.waiting[pending.token] != nil else { return false }  // already granted or failed
            if s.closed {
                s.waiting.removeValue(forKey: pending.token)
                return true
            }
            s.waiting[pending.token] = .some(id)
            return s.cancelled.contains(pending.token)  // cancelled before its id was known
        }
        // The connection closed (or the client cancelled) before the id was known: a queued
        // request must not hold others up.
        if abandoned { coordinator.cancel(id) }
    }

    /// Records a grant; false when the connection is gone (the caller releases it).
    func granted(_ access: CoordinatedAccess, pending: Pending) -> Bool {
        state.withLock { s in
            _ = Self.settle(pending, in: &s)
            guard !s.closed else { return false }
            s.accesses[access.id.rawValue] = access
            return true
        }
    }

    /// Records a failure: whether a reply is due, and whether the client cancelled it.
    func failed(_ pending: Pending) -> Failure { ended(pending) }

    /// A request that waited ended (a restore or resolution done or refused: the store released
    /// its access itself): whether a reply is due, and whether the client cancelled it.
    func ended(_ pending: Pending) -> Failure {
        state.withLock { s in
            let cancelled = Self.settle(pending, in: &s)
            if s.closed { return .gone }
            return cancelled ? .cancelledByClient : .failed
        }
    }

    /// The connection ended: cancel what waits, release what is held, drop the presenters (their
    /// pending asks end now, recorded as presenter gone). Idempotent. Returns the wire ids of the
    /// presenters it dropped.
    @discardableResult
    func close() -> [UInt64] {
        let (waiting, accesses, presenters) = state.withLock { s -> ([Coordination.RequestID], [CoordinatedAccess], [(PresenterID, RemotePresenter)]) in
            guard !s.closed else { return ([], [], []) }
            s.closed = true
            // Requests whose id is not known yet stay listed: `waiting(_:id:)` cancels them.
            let known = s.waiting.compactMap { entry in entry.value.map { (entry.key, $0) } }
            for (token, _) in known { s.waiting.removeValue(forKey: token) }
            defer { s.accesses = [:]; s.presenters = [:] }
            return (known.map(\.1), Array(s.accesses.values), Array(s.presenters.values))
        }
        for (id, presenter) in presenters {
            coordinator.removeFilePresenter(id: id)
            presenter.removed()
        }
        for id in waiting { coordinator.cancel(id) }
        for access in accesses { access.release() }
        return presenters.map(\.0.rawValue)
    }
}
