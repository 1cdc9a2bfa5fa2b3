import NameBytes
import Coordination
import Dispatch
import DocumentStore
import FuseKit
import Glibc
import Synchronization
import LinuxGNU

/// The mount's document store (docs/document-store.md, "The store in a mount").
///
/// Opens `BACKING/.coordfs/store` and implements the mount's ``DocumentHooks``: before an in-place
/// write, a rename over or a deletion of a presented document it keeps the version its presenters
/// loaded; after the change it produces the one "underlying file changed" event per presenter
/// (a ``DocumentChangeEvent``), records `snapshotTaken` / `conflictDetected` / `conflictResolved`
/// in the event log, and delivers the events to in-process ``DocumentPresenter``s and to observers
/// (the control socket forwards them to out-of-process presenters).
///
/// Presenters registered with the coordinator must also be registered here (``register(_:path:presenter:)``;
/// `Daemon.addDocumentPresenter(_:)` does both) so the store learns their base, and unregistered
/// when they let go (their bases are then released to retention). Only presented documents cost
/// anything: files nobody presents are never copied (`unpresentedFiles: .never`).
public final class StoreService: DocumentHooks, @unchecked Sendable {
    /// The coordinator presenters register with.
    public let coordinator: Coordinator
    /// The backing folder as this process reaches it: through the descriptor the daemon holds
    /// (`StateFolder.io`), so a backing folder renamed or moved while mounted is still the one the
    /// store reads and writes.
    let backing: String
    let stateDirectory: String
    let recorder: StoreEventRecorder?
    /// Counts the versions kept (`-o metrics=`); set once, before the mount serves.
    var metrics: DaemonMetrics?
    let writePolicy: CoordinationPolicy
    /// What one user may pin in the store (the mount's `max_user_pinned_versions`, `max_user_pinned_mb`).
    let userPins: UserPinBudget
    /// Other users may use the mount: versions are copied without the blocks kept for root.
    let shared: Bool
    /// Prefix of this daemon's presenter names in the store: interests left by a daemon that is
    /// gone are dropped at start (its presenters cannot come back under the same coordinator ids).
    let instance: String
    private weak var mount: CoordinatedFileSystem?
    /// Registers presenters with the store as they register with the coordinator.
    private var tap: StorePresenterTap?

    private struct State {
        var store: DocumentStore
        var options: StoreOptions
        var presenters: [PresenterID: Registered] = [:]
        /// The coordinator id behind each store name (one lookup per event, however many presenters).
        var byStoreID: [StorePresenterID: PresenterID] = [:]
        var observers: [UInt64: StoreObserver] = [:]
        var nextObserver: UInt64 = 1
        var stopped = false
        /// The daemon is ending cleanly (``keepPresentersAtEnd()``): presenters still registered
        /// keep their interests in the store.
        var ending = false
        /// The store remembers changes made while away (``tellChangesWhileAway(_:)``): looked up
        /// at registrations only while it does.
        var changesWhileAway = false
        /// Versions the store could not keep before a change (`keep`), by path, with the error's
        /// text: named in the change's `failed` event if that cannot be recorded either
        /// (`noteChange`), so that one failed save is one event, not two.
        var unkept: [ItemPath: String] = [:]

        mutating func add(_ entry: Registered, _ id: PresenterID) {
            presenters[id] = entry
            byStoreID[entry.storeID] = id
        }

        mutating func remove(_ id: PresenterID) {
            guard let entry = presenters.removeValue(forKey: id) else { return }
            byStoreID[entry.storeID] = nil
            presenters.shrinkIfSparse()
            byStoreID.shrinkIfSparse()
        }
    }
    private let state: Mutex<State>
    /// Observers are called one event at a time, in order.
    private let observerQueue = DispatchQueue(label: "coordfs.store.observers")

    /// One registered presenter.
    final class Registered: @unchecked Sendable {
        let storeID: StorePresenterID
        weak var delivery: (any DocumentPresenter)?
        let mailbox = DocumentMailbox()
        init(storeID: StorePresenterID, delivery: (any DocumentPresenter)?) {
            self.storeID = storeID
            self.delivery = delivery
        }
    }

    /// Opens `BACKING/.coordfs/store` for `daemon` and installs the hooks; nil when the mount runs
    /// without a store (`store=off`, or `coordination=off`: nothing would call it).
    static func start(daemon: Daemon) throws(MountError) -> StoreService? {
        // Integrator: `daemon.plan.options.store` once MountOptions carries StoreOptions.
        let options = daemon.plan.options.store
        guard options.enabled, let mount = daemon.coordinated else { return nil }
        let service = try StoreService(
            backing: daemon.plan.state.io.backing, stateDirectory: daemon.plan.state.io.store, coordinator: daemon.coordinator,
            coordination: daemon.plan.options.coordination, log: daemon.recorder.map(StoreEventRecorder.init(log:)),
            options: options, userPins: daemon.plan.options.limits.userPins, shared: daemon.plan.options.allowOther)
        service.mount = mount
        let tap = StorePresenterTap(service: service, next: daemon.coordinator.eventSink)
        service.tap = tap
        daemon.coordinator.eventSink = tap
        mount.setDocumentHooks(service)
        mount.lostUpdates.configure(options.lostUpdates, store: service)
        mount.lostUpdates.readers.limits = daemon.plan.options.limits.readers
        return service
    }

    init(backing: String, stateDirectory: String, coordinator: Coordinator, coordination: CoordinationOptions,
         log: StoreEventRecorder?, options: StoreOptions, userPins: UserPinBudget = PeerLimits().userPins, shared: Bool = false) throws(MountError) {
        self.userPins = userPins
        self.shared = shared
        self.backing = backing
        self.stateDirectory = stateDirectory
        self.coordinator = coordinator
        self.recorder = log
        writePolicy = CoordinationPolicy(
            askDeadline: .nanoseconds(Int64(coordination.askTimeout * 1e9)), onAskTimeout: coordination.strict ? .strict : .proceed,
            waitDeadline: .nanoseconds(Int64(coordination.writeWait * 1e9)))
        instance = Self.instanceName(pid: getpid(), start: ProcessLife.startTime(getpid()) ?? 0)
        let store: DocumentStore
        do {
            store = try DocumentStore(backingRoot: backing, stateDirectory: stateDirectory,
                                      configuration: Self.configuration(options, userPins, shared: shared))
        } catch {
            throw .system("cannot open the document store in '\(stateDirectory)': \(error)")
        }
        state = Mutex(State(store: store, options: options))
        dropPresentersOfGoneDaemons(store)
    }

    /// The store's configuration for `options`, with the mount's per-user budget.
    private static func configuration(_ options: StoreOptions, _ userPins: UserPinBudget, shared: Bool) -> StoreConfiguration {
        var configuration = options.configuration
        configuration.userPins = userPins
        configuration.copiesLeaveRootReserve = shared
        return configuration
    }

    /// A version the store kept: recorded in the event log and counted.
    private func keptVersion(_ snapshot: Snapshot, actor: AccessOrigin? = nil) {
        recorder?.snapshotTaken(snapshot, actor: actor.map { ($0.pid, $0.uid, $0.executable) })
        metrics?.snapshotTaken(snapshot)
    }

    /// The daemon ends cleanly (unmount, SIGTERM): the presenters registered now have not let go of
    /// their documents, so their interests stay in the store as a crash would leave them, also as
    /// their connections are closed and at ``stop()``. The next start finds their daemon gone and
    /// treats them as it treats a crashed daemon's (`dropPresentersOfGoneDaemons`): a document
    /// changed meanwhile is a conflict for unsaved work, a reload to tell otherwise. A presenter
    /// that let go before this (unregistered, disconnected) was dropped at once.
    func keepPresentersAtEnd() {
        tap?.drain()
        state.withLock { $0.ending = true }
    }

    /// Removes the hooks and lets go of this daemon's presenters (their bases go to retention;
    /// open conflicts stay, resolvable with `coordfs resolve`), unless the daemon ends cleanly
    /// with them still registered (``keepPresentersAtEnd()``).
    func stop() {
        mount?.setDocumentHooks(nil)
        mount?.lostUpdates.configure(.off, store: nil)
        if let tap {
            if coordinator.eventSink as AnyObject? === tap { coordinator.eventSink = tap.next }
            tap.drain()
        }
        let (store, registered) = state.withLock { s -> (DocumentStore, [Registered]) in
            s.stopped = true
            defer { s.presenters = [:]; s.byStoreID = [:]; s.observers = [:] }
            return (s.store, s.ending ? [] : Array(s.presenters.values))
        }
        _ = try? store.unregisterAll(registered.map(\.storeID))
    }

    /// Waits until every presenter registration and unregistration queued so far reached the store.
    func tapDrain() { tap?.drain() }

    /// The store itself (versions, conflicts, documents), for queries.
    public var documentStore: DocumentStore { state.withLock { $0.store } }

    /// The options in effect.
    public var options: StoreOptions { state.withLock { $0.options } }

    /// Reopens the store with other options (default actions, retention). Registrations and
    /// observers stay.
    public func reconfigure(_ options: StoreOptions) throws {
        let store = try DocumentStore(backingRoot: backing, stateDirectory: stateDirectory, configuration: Self.configuration(options, userPins, shared: shared))
        state.withLock {
            // What live readers hold stays held in the reopened store.
            store.adoptHolds(of: $0.store)
            $0.store = store
            $0.options = options
        }
    }

    /// The prefix of a daemon's presenter names: `coordfs-PID-START-BOOT`, its pid, its start time
    /// (clock ticks after boot, `ProcessLife.startTime`) and the boot's id (without its dashes).
    static func instanceName(pid: pid_t, start: UInt64) -> String {
        "coordfs-\(pid)-\(start)-\(bootTag)"
    }

    /// This boot's id without its dashes, as presenter names carry it: read once (a boot's id
    /// does not change while it runs), not again for each name the start-up cleanup looks at.
    static let bootTag = ProcessLife.bootID().filter { $0 != "-" }

    /// Whether the daemon whose presenter name this is still runs: in this boot, its pid held by the
    /// process that started when it did (a pid handed out again after a crash is another process),
    /// and not this one (a daemon's presenters never outlive it). An older daemon named its
    /// presenters `coordfs-PID-BOOTSECONDS` (the seconds since boot when it named them, after it
    /// started): it runs while its pid is held by a process that started no later than that, and
    /// one that started later got the pid after it ended (a daemon of the previous version on the
    /// same backing keeps its presenters while this one starts, as before the start was recorded).
    static func daemonRuns(named name: StorePresenterID) -> Bool {
        let parts = name.rawValue.split(separator: "/").first?.split(separator: "-") ?? []
        guard parts.count == 3 || parts.count == 4, parts[0] == "coordfs", let pid = pid_t(parts[1]), pid != getpid(),
              let stamp = UInt64(parts[2]) else { return false }
        if parts.count == 3 {
            var boot = timespec()
            clock_gettime(CLOCK_BOOTTIME, &boot)
            guard stamp <= UInt64(boot.tv_sec), let start = ProcessLife.startTime(pid) else { return false }
            return start / UInt64(sysconf(Int32(_SC_CLK_TCK))) <= stamp && ProcessLife.isRunning(pid, startedAt: start)
        }
        guard parts[3] == bootTag else { return false }
        return ProcessLife.isRunning(pid, startedAt: stamp)
    }

    /// At start: the interests of presenters whose daemon is gone (crashed, killed, or ended
    /// cleanly while they were still registered: ``keepPresentersAtEnd()``) are dropped,
    /// their bases released to retention; their open conflicts stay. One that had unsaved changes in
    /// a document whose file changed since its base (while no daemon watched it) gets the conflict
    /// first, logged (`conflictDetected`), for its editor to take over when it registers again
    /// (`DocumentStore.dropGonePresenters`). Another live daemon on the same backing keeps its own.
    private func dropPresentersOfGoneDaemons(_ store: DocumentStore) {
        guard let names = try? store.presenters() else { return }
        // None is this service's yet: one named as this daemon's is an earlier daemon's of this
        // process (in-process, ended cleanly), gone too (`daemonRuns` is false for this pid).
        let gone = names.filter { !Self.daemonRuns(named: $0) }
        do {
            for conflict in try store.dropGonePresenters(gone) {
                recorder?.conflictDetected(conflict, presenter: conflict.presenter.rawValue)
            }
        } catch {
            report("drop the presenters of gone daemons", error)
            _ = try? store.unregisterAll(gone)
        }
        let away = (try? store.changesWhileAwayCount()) ?? 0
        state.withLock { $0.changesWhileAway = away > 0 }
    }

    /// Presenters that just registered (`uid`'s, at `path`, its registration answered) whose user's
    /// gone presenter had their document when it changed while no daemon watched it
    /// (`DocumentStore.dropGonePresenters`; also a file deleted meanwhile, no document now): each is
    /// told now what a running daemon would have told that one (reload, close for a deletion), once.
    /// Nothing to do, and no transaction, once the store remembers none.
    func tellChangesWhileAway(_ presenters: [(PresenterID, ItemPath, UInt32)]) {
        let (store, any) = state.withLock { ($0.store, $0.changesWhileAway) }
        let registered = presenters
        guard any, !registered.isEmpty else { return }
        for (_, path, _) in registered { tap?.drain(path: path) }
        let taken: [ChangeWhileAway?]
        do {
            taken = try store.takeChangesWhileAway(registered.map { ($1.string, $2) })
        } catch {
            return report("changes while away", error)
        }
        let left = (try? store.changesWhileAwayCount()) ?? 0
        var events: [DocumentChangeEvent] = []
        for ((id, path, uid), change) in zip(registered, taken) {
            guard let change else { continue }
            // In the event log as a running daemon's tell of a change beside the mount: its
            // `didChange` (`didDelete`) record. Who made it is not known (pid 0); the presenter's
            // user may read the record.
            coordinator.recordToldApart(change.kind == .deletion ? .deleted(path) : .changed(path),
                                        origin: AccessOrigin(pid: 0, uid: uid, gid: 0, executable: ""))
            // Closed: as a running daemon does, the store keeps nothing for it any more.
            if change.action == .close { _ = try? store.unregister(storeID(of: id), path: path.string) }
            var event = DocumentChangeEvent(
                presenter: id, storePresenter: storeID(of: id), document: change.document, path: path,
                kind: change.kind, before: change.before, after: change.after, action: change.action == .close ? .close : .reload)
            event.whileAway = true
            events.append(event)
        }
        let observers = state.withLock { s -> [StoreObserver] in
            s.changesWhileAway = left > 0
            for event in events {
                if let id = event.presenter, let entry = s.presenters[id], let delivery = entry.delivery { entry.mailbox.post(event, to: delivery) }
            }
            return Array(s.observers.sorted { $0.key < $1.key }.map(\.value))
        }
        guard !observers.isEmpty, !events.isEmpty else { return }
        let all = events
        observerQueue.async {
            for event in all { for observer in observers { observer(event) } }
        }
    }

    // MARK: Presenters

    /// The store's name for a coordinator presenter of this daemon.
    public func storeID(of presenter: PresenterID) -> StorePresenterID {
        StorePresenterID("\(instance)/\(presenter)")
    }

    /// The coordinator id behind a store presenter name, when it is one of this daemon's.
    public func coordinatorID(of storeID: StorePresenterID) -> PresenterID? {
        state.withLock { $0.byStoreID[storeID] }
    }

    /// A presenter registered with the coordinator loaded the document at `path` (mount-relative):
    /// the store keeps that version (its base) until the presenter lets go. `presenter`, when
    /// given, receives the change events in process; others get them through observers.
    ///
    /// Every presenter the coordinator registers reaches the store by itself (the service watches
    /// the coordinator's registrations), so this is only needed to attach an in-process
    /// `presenter` for delivery, or to make sure the base is taken before returning. Returns nil
    /// when the presenter was registered already (its base is left as it is; ``rebase(_:)`` moves it).
    ///
    /// - Throws: `DocumentStoreError` (no file there, not a regular file, an invalid path).
    @discardableResult
    public func register(_ id: PresenterID, path: ItemPath, presenter: (any DocumentPresenter)? = nil) throws -> Registration? {
        tap?.drain(path: path)
        let (store, known) = state.withLock { s -> (DocumentStore, Registered?) in
            let known = s.presenters[id]
            if let known, let presenter { known.delivery = presenter }
            return (s.store, known)
        }
        // Registered already (by the coordinator's registration event): keep the base it has.
        if known != nil { return nil }
        let entry = Registered(storeID: storeID(of: id), delivery: presenter)
        // Its user owns its conflicts (may list and resolve them, also once it is gone).
        let registration = try store.register(entry.storeID, path: path.string, owner: coordinator.presenterOwner(of: id)?.uid)
        state.withLock { $0.add(entry, id) }
        if let snapshot = registration.snapshot { keptVersion(snapshot) }
        return registration
    }

    /// From the coordinator's registration events: documents only (folders and missing files are
    /// no documents), and never twice; all of them in one transaction. A presenter the coordinator
    /// let go of meanwhile is dropped again (its unregistration may have run first).
    func registerIfNew(_ presenters: [(PresenterID, ItemPath, UInt32?)]) {
        let fresh = state.withLock { s in s.stopped ? [] : presenters.filter { s.presenters[$0.0] == nil && !$0.1.isRoot } }
        let documents = fresh.filter { _, path, _ in
            var st = stat()
            return (backing + "/" + path.string).withNameCString({ lstat($0, &st) }) == 0 && (st.st_mode & S_IFMT) == S_IFREG
        }
        guard !documents.isEmpty else { return }
        let entries = documents.map { id, _, _ in Registered(storeID: storeID(of: id), delivery: nil) }
        let results = documentStore.registerAll(zip(entries, documents).map { ($0.storeID, $1.1.string, $1.2) })
        var added: [PresenterID] = []
        for ((entry, (id, path, _)), result) in zip(zip(entries, documents), results) {
            switch result {
            case .success(let registration):
                state.withLock { $0.add(entry, id) }
                added.append(id)
                if let snapshot = registration.snapshot { keptVersion(snapshot) }
            case .failure(let error):
                report("register \(id) at \(path)", error)
            }
        }
        let gone = added.filter { coordinator.presentedPath(of: $0) == nil }
        if !gone.isEmpty { unregister(gone) }
    }

    /// The presenter let go (removed from the coordinator, or its client disconnected): its bases
    /// are released to retention. Its open conflicts stay until resolved.
    public func unregister(_ id: PresenterID) {
        unregister([id])
    }

    /// ``unregister(_:)`` for many presenters, in one transaction.
    func unregister(_ ids: [PresenterID]) {
        let (store, ending) = state.withLock { s -> (DocumentStore, Bool) in
            for id in ids { s.remove(id) }
            return (s.store, s.ending)
        }
        // Closed by the daemon's clean end: not let go (``keepPresentersAtEnd()``).
        if ending { return }
        _ = try? store.unregisterAll(ids.map(storeID(of:)))
    }

    /// Whether the presenter has unsaved changes in its document: decides between a conflict and
    /// the default action (reload, close) when the document changes underneath it.
    ///
    /// Returns the open conflict it took over, if any: its user's gone presenter's on the document
    /// (`DocumentStore.setUnsavedChanges`), now resolved as its own.
    @discardableResult
    public func setUnsavedChanges(_ id: PresenterID, _ hasUnsavedChanges: Bool) throws -> [ConflictID] {
        try documentStore.setUnsavedChanges(storeID(of: id), path: try currentPath(of: id).string, hasUnsavedChanges)
    }

    /// The presenter saved or reloaded: the current file becomes its base and its unsaved flag clears.
    @discardableResult
    public func rebase(_ id: PresenterID) throws -> Registration {
        try documentStore.rebase(storeID(of: id), path: try currentPath(of: id).string)
    }

    /// The presenter's document path: the coordinator's (it follows moves).
    private func currentPath(of id: PresenterID) throws -> ItemPath {
        guard let path = coordinator.presentedPath(of: id) else {
            throw DocumentStoreError.unknownPresenter(presenter: "\(id)", path: "?")
        }
        return path
    }

    // MARK: Observers (the control socket)

    /// Adds a callback for every ``DocumentChangeEvent`` (all presenters, in order, on one serial
    /// queue). The control socket uses it to forward events to out-of-process presenters.
    @discardableResult
    public func addObserver(_ observer: @escaping StoreObserver) -> StoreObservation {
        state.withLock { s in
            let id = s.nextObserver
            s.nextObserver += 1
            s.observers[id] = observer
            return StoreObservation(id: id)
        }
    }

    public func removeObserver(_ observation: StoreObservation) {
        _ = state.withLock { $0.observers.removeValue(forKey: observation.id) }
    }

    // MARK: Conflicts, resolution, restore

    /// Open conflicts (all of them, or one presenter's), oldest first.
    public func conflicts(of presenter: PresenterID? = nil) throws -> [Conflict] {
        let all = try documentStore.conflicts(state: .open)
        guard let presenter else { return all }
        let name = storeID(of: presenter)
        return all.filter { $0.presenter == name }
    }

    /// Resolves a conflict (close, save, reload, keep both, merge; see `DocumentStore.resolve`).
    /// Resolutions that write (save, merge, keep both, a lost update's reload: `Conflict.writes`)
    /// run inside a coordinated write on the document (keep both: on its folder) made on behalf of
    /// the conflict's presenter, so the document's other presenters, on every node of a cluster,
    /// are asked first and told after (did change, plus their ``DocumentChangeEvent``), as for a
    /// write through the mount. A refused resolution (reload or merge of a deletion, merge of
    /// binary contents, missing "mine") throws and changes nothing.
    ///
    /// The new file is written in the backing folder and shows through the mount at once (the
    /// kernel's cached name and attributes are dropped once the access is released).
    @discardableResult
    /// `owner`: whom a file the resolution creates belongs to (the peer that resolves; nil: the daemon's user).
    /// `requester`: the process that asked (a control socket peer): the write is its access, made on
    /// behalf of the conflict's presenter, and the log's `conflictResolved` names it (nil: the daemon).
    public func resolve(_ id: ConflictID, with resolution: Resolution, mine: Contents? = nil, by actor: String? = nil,
                        owner: FileOwner? = nil, requestedBy requester: AccessOrigin? = nil) throws -> ResolutionOutcome {
        try Self.waitFor { self.resolve(id, with: resolution, mine: mine, by: actor, owner: owner, requestedBy: requester, then: $0) }
    }

    /// ``resolve(_:with:mine:by:owner:requestedBy:)`` holding no thread while its write waits for
    /// the grant (presenters' answers, accesses held elsewhere): `completion` gets the outcome. A
    /// peer's waiting resolutions and restores so never hold up another's. `waiting` gets the
    /// coordinator's id of the write's request once it is asked for (`Coordinator.cancel(_:)` ends
    /// the wait: the control socket's, when its connection closes); not called when nothing waits.
    public func resolve(_ id: ConflictID, with resolution: Resolution, mine: Contents? = nil, by actor: String? = nil,
                        owner: FileOwner? = nil, requestedBy requester: AccessOrigin? = nil,
                        waiting: (@Sendable (Coordination.RequestID) -> Void)? = nil,
                        then completion: @escaping @Sendable (Result<ResolutionOutcome, any Error>) -> Void) {
        let store = documentStore
        let conflict: Conflict
        let path: ItemPath
        do {
            conflict = try store.conflict(id)
            path = try ItemPath(conflict.path)
        } catch {
            return completion(.failure(error))
        }
        // A resolution the store would refuse is refused before its write asks anyone.
        do {
            try store.checkResolution(id, with: resolution, mine: mine)
        } catch {
            return completion(.failure(error))
        }
        let presenter = coordinatorID(of: conflict.presenter)
        let who = actor ?? conflict.presenter.rawValue
        // The write, as a change through the mount is made: its item's presenters (on every node)
        // asked before and told after, the other nodes by the access's change record.
        let writes = conflict.writes(resolution, mine: mine != nil)
        let origin = (requester ?? AccessOrigin.currentProcess).onBehalf(of: presenter)
        let intents: [FileAccessIntent] = switch writes {
        case .nothing: []
        case .document: [.writingIntent(with: path)]
        case .besideDocument: [.writingIntent(with: path.parent ?? .root)]
        }
        withAccess(intents, origin: origin, waiting: waiting) { access -> (ResolutionOutcome, ItemPath?) in
            let outcome = try store.resolve(id, with: resolution, mine: mine, by: who, owner: owner)
            let written = outcome.writtenPath.flatMap { try? ItemPath($0) }
            if let written {
                // A copy beside the document, or the document written anew after its deletion, is
                // a new item (its folder's presenters hear it appeared); else the document changed.
                let change: AccessChange = writes == .besideDocument || outcome.recreated ? .subitemAppeared(written) : .changed(written)
                // (Without an access, a write the store made anyway: told here and to the other nodes all the same.)
                if let access { access.announce(change) } else { self.coordinator.announce(change, origin: origin) }
            }
            return (outcome, written)
        } then: { result in
            completion(result.map { outcome, written in
                if let written { self.mount?.forgetCached(written) }
                if let preserved = outcome.preserved { self.keptVersion(preserved, actor: requester) }
                self.recorder?.conflictResolved(outcome, actor: who, origin: requester.map { ($0.pid, $0.uid, $0.executable) } ?? (getpid(), getuid(), "coordfs"))
                if let others = outcome.othersNotified { self.deliver(others, by: requester) }
                return outcome
            })
        }
    }

    /// Writes a kept version back over its document (or `path`), inside a coordinated write: the
    /// current file is kept first (so the restore is undoable) and the document's presenters other
    /// than `presenter` are asked before and told after. `owner`: whom a re-created file belongs to
    /// (the peer that restores; nil: the daemon's user).
    @discardableResult
    public func restore(_ version: VersionID, to path: ItemPath? = nil, by presenter: PresenterID? = nil,
                        owner: FileOwner? = nil, requestedBy requester: AccessOrigin? = nil) throws -> RestoreOutcome {
        try Self.waitFor { self.restore(version, to: path, by: presenter, owner: owner, requestedBy: requester, then: $0) }
    }

    /// ``restore(_:to:by:owner:requestedBy:)`` holding no thread while its write waits for the grant
    /// (`waiting`: as for ``resolve(_:with:mine:by:owner:requestedBy:waiting:then:)``).
    public func restore(_ version: VersionID, to path: ItemPath? = nil, by presenter: PresenterID? = nil,
                        owner: FileOwner? = nil, requestedBy requester: AccessOrigin? = nil,
                        waiting: (@Sendable (Coordination.RequestID) -> Void)? = nil,
                        then completion: @escaping @Sendable (Result<RestoreOutcome, any Error>) -> Void) {
        let store = documentStore
        let target: ItemPath
        do {
            let kept = try store.version(version)
            target = try path ?? ItemPath(store.document(kept.document)?.path ?? kept.path)
        } catch {
            return completion(.failure(error))
        }
        // The write is the requester's (`coordfs restore`'s process over the socket): the log shows
        // it, not the daemon, as for any other access it makes.
        let origin = requester ?? AccessOrigin.currentProcess.onBehalf(of: presenter)
        withAccess([.writingIntent(with: target)], origin: origin, waiting: waiting) { access -> RestoreOutcome in
            let outcome = try store.restore(version, to: target.string, by: presenter.map(self.storeID(of:)), owner: owner)
            // A restore that re-creates a deleted document makes a new item, as any create does.
            let change: AccessChange = outcome.recreated ? .subitemAppeared(target) : .changed(target)
            if let access { access.announce(change) } else { self.coordinator.announce(change, origin: origin) }
            return outcome
        } then: { result in
            completion(result.map { outcome in
                self.mount?.forgetCached(target)
                if let preserved = outcome.preserved { self.keptVersion(preserved, actor: requester) }
                if let event = outcome.presentersNotified { self.deliver(event, by: requester) }
                return outcome
            })
        }
    }

    /// Runs `body` inside a coordinated access for `intents` (none: at once), waiting as the mount's
    /// writes do (`write_wait`, `ask_timeout`) without holding a thread meanwhile: once granted,
    /// `body` runs on ``storeWrites`` and the access is released; then `completion` gets its result.
    private func withAccess<T: Sendable>(_ intents: [FileAccessIntent], origin: AccessOrigin,
                                         waiting: (@Sendable (Coordination.RequestID) -> Void)? = nil,
                                         _ body: @escaping @Sendable (CoordinatedAccess?) throws -> T,
                                         then completion: @escaping @Sendable (Result<T, any Error>) -> Void) {
        let run: @Sendable (CoordinatedAccess?) -> Void = { access in
            let result = Result { try body(access) }
            access?.release()
            completion(result)
        }
        guard !intents.isEmpty else { return Self.storeWrites.async { run(nil) } }
        let request = coordinator.coordinate(intents, origin: origin, policy: writePolicy) { granted in
            switch granted {
            case .success(let access): Self.storeWrites.async { run(access) }
            case .failure(let error): completion(.failure(error))
            }
        }
        waiting?(request)
    }

    /// Where granted resolutions and restores write (never a FUSE worker, nor the thread that
    /// granted them). Nothing on it waits for a presenter or an access.
    private static let storeWrites = DispatchQueue(label: "coordfs.store.writes", attributes: .concurrent)

    /// Blocks until `start` reports its result (the synchronous forms, for callers that may wait).
    private static func waitFor<T: Sendable>(_ start: (@escaping @Sendable (Result<T, any Error>) -> Void) -> Void) throws -> T {
        let result = Mutex<Result<T, any Error>?>(nil)
        let done = DispatchSemaphore(value: 0)
        start { r in
            result.withLock { $0 = r }
            done.signal()
        }
        done.wait()
        return try result.withLock { $0! }.get()
    }

    // MARK: DocumentHooks (called by the mount, for presented documents, inside their access)

    public func beforeInPlaceWrite(_ path: ItemPath) {
        keep(path) { try $0.preserveBeforeInPlaceWrite($1) }
    }

    public func beforeAppend(_ path: ItemPath) -> Int64? {
        var end: Int64?
        keep(path) { store, p in
            let kept = try store.preserveBeforeAppend(p)
            end = kept.prefixEnd
            return kept.snapshot
        }
        return end
    }

    public func beforeReplace(_ path: ItemPath) {
        keep(path) { try $0.preserveBeforeReplace($1) }
    }

    public func beforeDelete(_ path: ItemPath) {
        keep(path) { try $0.preserveBeforeDelete($1) }
    }

    public func didChange(_ path: ItemPath, by origin: AccessOrigin) {
        noteChange(path, .changed(before: nil, after: nil), by: origin)
    }

    public func didChangeBeside(_ path: ItemPath, by origin: AccessOrigin) {
        noteChange(path, .changed(before: nil, after: nil), by: origin, beside: true)
    }

    /// A change that may have happened unseen (another node's record lost to etcd's compaction):
    /// noted as `didChange` (or a deletion) only when the file is not the one the store knew.
    /// Whether it was.
    func didChangeIfNotAsKnown(_ path: ItemPath, by origin: AccessOrigin) -> Bool {
        guard !path.isRoot else { return false }
        do {
            guard let event = try documentStore.noteExternalChange(path.string, .changed(before: nil, after: nil), onlyIfNotAsKnown: true) else { return false }
            deliver(event, by: origin)
            return true
        } catch {
            return false
        }
    }

    public func didDelete(_ path: ItemPath, by origin: AccessOrigin) {
        noteChange(path, .deleted(before: nil), by: origin)
    }

    public func didMove(from: ItemPath, to: ItemPath, by origin: AccessOrigin) {
        guard !from.isRoot, !to.isRoot else { return }
        // The file moved as it was: nothing it held was lost by a version not kept before.
        state.withLock { _ = $0.unkept.removeValue(forKey: from) }
        do { try documentStore.noteMoved(from: from.string, to: to.string) } catch { failed(to, "noteMove", error) }
    }

    /// A version that cannot be kept is logged at once (`storeFailed`, daemon.log); its presenters
    /// hear of the change that follows it (`noteChange`) once: the store's decision when it records
    /// the change (a conflict without a base, as for a change made beside the mount), or one
    /// `failed` event naming both errors when it cannot. A change that never comes (an open for
    /// writing that wrote nothing, a move) lost nothing they loaded.
    private func keep(_ path: ItemPath, _ call: (DocumentStore, String) throws -> Snapshot?) {
        guard !path.isRoot else { return }
        tap?.drain(path: path) // presenters of this path registered just before this write: their bases first
        do {
            if let snapshot = try call(documentStore, path.string) { keptVersion(snapshot) }
            state.withLock { _ = $0.unkept.removeValue(forKey: path) }
        } catch DocumentStoreError.notARegularFile {
            // A presented directory: documents are regular files.
        } catch {
            report("keepVersion \(path)", error)
            recorder?.storeFailed(path: path.string, reason: "keepVersion", error: error)
            state.withLock { s in
                if s.unkept.count >= 1024 { s.unkept.removeAll() } // bounded: paths whose change never came
                s.unkept[path] = "\(error)"
            }
        }
    }

    private func noteChange(_ path: ItemPath, _ change: ExternalChange, by origin: AccessOrigin, beside: Bool = false) {
        guard !path.isRoot else { return }
        let store = documentStore
        // A presenter writing its own document (a coordinated write on its behalf) is not told,
        // and what it wrote becomes its base.
        let writer = origin.presenterID.map(storeID(of:))
        var deletion = false
        if case .deleted = change { deletion = true }
        // The version before this change, if the store could not keep it: told with it, once.
        let unkept = state.withLock { $0.unkept.removeValue(forKey: path) }
        do {
            let event = try store.noteExternalChange(path.string, change, by: writer, beside: beside)
            if let writer, case .changed = change { _ = try? store.rebase(writer, path: path.string) }
            // Recorded: the store's decision is the one event (a conflict then has no base; the
            // version not kept is in the log), as for any change the store could not keep before.
            if let event { deliver(event, by: origin) }
        } catch DocumentStoreError.notARegularFile {
        } catch {
            failed(path, deletion ? "noteDeletion" : "noteChange", error, deletion: deletion, unkept: unkept)
        }
    }

    private static let couldNotKeep = "the document store could not keep the version you loaded: "

    /// A failure to record a change (a full disk, an I/O error) is never silent: it goes to
    /// daemon.log, to the event log (`storeFailed`), and to each presenter of the document as a
    /// `failed` action instead of the reload or conflict the store could not decide; one event,
    /// which also names the version the store could not keep before it (`unkept`), if so.
    private func failed(_ path: ItemPath, _ reason: String, _ error: any Error, deletion: Bool = false, unkept: String? = nil) {
        report("\(reason) \(path)", error)
        recorder?.storeFailed(path: path.string, reason: reason, error: error)
        let message = unkept.map { Self.couldNotKeep + $0 + "; nor record this change: \(error)" }
            ?? "the document store could not record this change: \(error)"
        tell(path, message, deletion: deletion)
    }

    /// A `failed` event with `message` to each presenter of the document at `path` (and the observers).
    private func tell(_ path: ItemPath, _ message: String, deletion: Bool) {
        let entries = state.withLock { $0.presenters }
        let ofPath = entries.filter { coordinator.presentedPath(of: $0.key) == path }
        guard !ofPath.isEmpty else { return }
        let document = (try? documentStore.document(atPath: path.string))?.map(\.id) ?? DocumentID(rawValue: 0)
        var events: [DocumentChangeEvent] = []
        for (id, entry) in ofPath.sorted(by: { $0.key.rawValue < $1.key.rawValue }) {
            let event = DocumentChangeEvent(
                presenter: id, storePresenter: entry.storeID, document: document, path: path,
                kind: deletion ? .deletion : .change, before: nil, after: nil, action: .failed(message))
            events.append(event)
            if let presenter = entry.delivery { entry.mailbox.post(event, to: presenter) }
        }
        let observers = state.withLock { Array($0.observers.sorted { $0.key < $1.key }.map(\.value)) }
        guard !observers.isEmpty else { return }
        let all = events
        observerQueue.async {
            for event in all { for observer in observers { observer(event) } }
        }
    }

    /// One event per presenter: conflicts to the log (with `origin`, who made the change, when
    /// known), then to the presenter and the observers.
    func deliver(_ change: UnderlyingFileChanged, by origin: AccessOrigin? = nil) {
        guard let path = try? ItemPath(change.path) else { return }
        // Each outcome's presenter, found by name in O(1), all under one lock.
        let (found, observers) = state.withLock { s in
            (change.outcomes.map { outcome -> (PresenterID, Registered)? in
                guard let id = s.byStoreID[outcome.presenter], let entry = s.presenters[id] else { return nil }
                return (id, entry)
            }, Array(s.observers.sorted { $0.key < $1.key }.map(\.value)))
        }
        var events: [DocumentChangeEvent] = []
        for (outcome, presenter) in zip(change.outcomes, found) {
            let action: DocumentAction
            switch outcome.action {
            case .conflict(let conflict):
                recorder?.conflictDetected(conflict, presenter: outcome.presenter.rawValue,
                                           actor: origin.map { ($0.pid, $0.uid, $0.executable) })
                action = .conflict(conflict.id)
            case .applied(.close): action = .close
            case .applied: action = .reload
            }
            let event = DocumentChangeEvent(
                presenter: presenter?.0, storePresenter: outcome.presenter, document: change.document, path: path,
                kind: change.kind, before: change.before, after: change.after, action: action)
            events.append(event)
            if let entry = presenter?.1, let delivery = entry.delivery { entry.mailbox.post(event, to: delivery) }
        }
        guard !observers.isEmpty, !events.isEmpty else { return }
        let all = events
        observerQueue.async {
            for event in all { for observer in observers { observer(event) } }
        }
    }

    func report(_ what: String, _ error: any Error) {
        sayOnStandardError("coordfs: document store: \(what): \(error)")
    }
}

/// A callback for every ``DocumentChangeEvent`` (see ``StoreService/addObserver(_:)``).
public typealias StoreObserver = @Sendable (DocumentChangeEvent) -> Void

/// Names one observer, for ``StoreService/removeObserver(_:)``.
public struct StoreObservation: Sendable, Hashable {
    let id: UInt64
}

/// Delivers one presenter's events one at a time, in order, without blocking the caller.
final class DocumentMailbox: Sendable {
    private let state = Mutex<(queue: [DocumentChangeEvent], running: Bool)>(([], false))

    func post(_ event: DocumentChangeEvent, to presenter: any DocumentPresenter) {
        let start = state.withLock { s -> Bool in
            s.queue.append(event)
            if s.running { return false }
            s.running = true
            return true
        }
        guard start else { return }
        Task.detached { [self] in
            while let next = state.withLock({ s -> DocumentChangeEvent? in
                if s.queue.isEmpty { s.running = false; return nil }
                return s.queue.removeFirst()
            }) {
                await presenter.presentedDocumentDidChangeUnderneath(next)
            }
        }
    }
}
