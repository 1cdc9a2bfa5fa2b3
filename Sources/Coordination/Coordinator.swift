import Synchronization

/// The arbiter of one mount: presenters, holds, waits, asks and "did" messages.
///
/// The core entry point, ``coordinate(_:origin:purpose:policy:completion:)``, never blocks: it
/// returns at once and calls its completion either synchronously (granted right away) or later
/// from another thread (after a wait or presenter asks). A FUSE worker thread can call it and park
/// the kernel request. ``tryCoordinateImmediately(_:origin:purpose:)`` is the fast path for the
/// common case (nothing conflicts, nobody to ask). The async/await API (``FileCoordinator``) is
/// built on these.
///
/// All state sits behind one lock. Lock order: coordinator lock, then a presenter mailbox's lock;
/// presenter methods and completions always run outside the coordinator lock.
public final class Coordinator: @unchecked Sendable {
    /// A default coordinator for in-process use. The daemon creates one coordinator per mount.
    public static let shared = Coordinator()

    /// Settings fixed at creation.
    public let configuration: CoordinatorConfiguration

    let lock = Lock()
    // Guarded by `lock`, so not checked for exclusive access at run time as well (each check cost
    // some 75 instructions, a dozen of them an access):
    @exclusivity(unchecked) var sink: (any CoordinationEventSink)? {
        didSet { sinkReference = forwardingReference(to: sink) }
    }
    /// `sink` held by reference, where events go: a copy of a reference is a retain, one of an
    /// existential value went through its witnesses (140 instructions, six times an access).
    @exclusivity(unchecked) private(set) var sinkReference: (any CoordinationEventSink & AnyObject)?
    @exclusivity(unchecked) var permissions: (any PresenterPermissions)?
    /// Holds and presenters share one path trie (see ``PathNode``).
    @exclusivity(unchecked) var locks: LockTable
    @exclusivity(unchecked) var presenters: PresenterRegistry
    /// Requests waiting for arbitration, in arrival order. Entries that stopped waiting are
    /// dropped lazily (`staleWaiters` counts them).
    @exclusivity(unchecked) var waiters: [CoordinatedAccess] = []
    @exclusivity(unchecked) var staleWaiters = 0
    /// Waiting requests made on behalf of a presenter (the only ones an ask can unblock).
    @exclusivity(unchecked) var presenterWaiters = 0
    /// Requests that can still be cancelled: waiting or asking presenters.
    @exclusivity(unchecked) var pending: [RequestID: CoordinatedAccess] = [:]
    /// Requests the gate is admitting (asking other nodes), not yet started here.
    @exclusivity(unchecked) var admitting: Set<RequestID> = []
    @exclusivity(unchecked) var nextRequest: UInt64 = 1
    /// Waiting requests that have a parent access (deadlock checks run only when non-zero).
    @exclusivity(unchecked) var nestedWaiting = 0
    @exclusivity(unchecked) var nextPresenter: UInt64 = 1
    /// `nextPresenter`, readable without the lock.
    let presentersIssued = Atomic<UInt64>(1)
    /// Told before and after each registration (the mount: which of its held writes change the
    /// item after the presenter registered). Set before the first registration; read without the lock.
    nonisolated(unsafe) var registrationWatcher: (any PresenterRegistrationWatcher)?
    /// The gate every access passes first (a cluster), or nil. Set before the first request.
    nonisolated(unsafe) var gate: (any CoordinationGate)?
    /// Whether another gate (a cluster's) admits this coordinator's accesses too.
    public var isGated: Bool { gate != nil }

    public init(configuration: CoordinatorConfiguration = CoordinatorConfiguration(),
                eventSink: (any CoordinationEventSink)? = nil) {
        self.configuration = configuration
        self.sink = eventSink
        self.sinkReference = forwardingReference(to: eventSink)
        let tree = PathNode()
        self.locks = LockTable(root: tree)
        self.presenters = PresenterRegistry(root: tree)
    }

    /// What presenters registered with credentials may hear of and be asked about (nil: everything).
    public var presenterPermissions: (any PresenterPermissions)? {
        get { lock.withLock { permissions } }
        set { lock.withLock { permissions = newValue } }
    }

    /// Told around each presenter registration (see ``PresenterRegistrationWatcher``). Install it
    /// before the first registration; it is read without the lock.
    public var presenterRegistrationWatcher: (any PresenterRegistrationWatcher)? {
        get { registrationWatcher }
        set { registrationWatcher = newValue }
    }

    /// What every access must pass before its holds are taken here (the cluster, issue 19), or nil.
    /// Install it before the first request; it is read without the lock.
    public var coordinationGate: (any CoordinationGate)? {
        get { gate }
        set { gate = newValue }
    }

    /// Where events go (see ``CoordinationEventSink`` for the rules a sink must keep).
    public var eventSink: (any CoordinationEventSink)? {
        get { lock.withLock { sink } }
        set { lock.withLock { sink = newValue } }
    }

    // MARK: Requests

    /// Requests coordinated access for `intents`, all granted together.
    ///
    /// Returns at once. `completion` receives the grant (call ``CoordinatedAccess/release()`` when
    /// done) or the reason there is none. It runs synchronously on this thread when the access is
    /// granted without waiting, otherwise later on another thread. It must not block.
    ///
    /// - Parameters:
    ///   - intents: what to read and write; several intents are granted atomically, so two callers
    ///     asking for the same items in a different order cannot deadlock.
    ///   - origin: who asks; its `presenterID` is neither asked nor told.
    ///   - purpose: accesses with the same non-nil purpose never block each other.
    ///   - sharing: further purposes whose accesses never block this request (theirs still wait for
    ///     it): the mount passes those of the processes that started the caller, which act with it
    ///     as one program (docs/semantics.md, "Waits and deadlines").
    ///   - policy: deadlines and timeout behaviour; nil uses the configuration's default.
    ///   - parent: the access whose accessor makes this request (nested coordination), so a wait
    ///     that could never end fails at once with ``CoordinationError/deadlock(_:path:heldBy:)``.
    /// - Returns: the request id, for ``cancel(_:)``.
    @discardableResult
    public func coordinate(_ intents: [FileAccessIntent], origin: AccessOrigin, purpose: String? = nil,
                           sharing: [String] = [], policy: CoordinationPolicy? = nil, within parent: CoordinatedAccess? = nil,
                           completion: @escaping CoordinationCompletion) -> RequestID {
        let resolved = resolveLinks(intents)
        let policy = policy ?? configuration.defaultPolicy
        guard let gate, !resolved.isEmpty else {
            return start(resolved, origin: origin, purpose: purpose, sharing: sharing, policy: policy, within: parent, id: nil,
                         pass: nil, completion: completion)
        }
        if let pass = gate.admitNow(resolved, origin: origin, purpose: purpose) {
            return start(resolved, origin: origin, purpose: purpose, sharing: sharing, policy: policy, within: parent, id: nil,
                         pass: pass, completion: completion)
        }
        // The gate must ask elsewhere first: the request id is taken now, so it can be cancelled.
        let id = lock.withLock {
            defer { nextRequest += 1 }
            let id = RequestID(rawValue: nextRequest)
            emit(id, origin, .requested(intents: resolved, purpose: purpose))
            admitting.insert(id)
            return id
        }
        gate.admit(resolved, origin: origin, purpose: purpose, policy: policy, request: id) { [self] result in
            switch result {
            case .success(let pass):
                start(resolved, origin: origin, purpose: purpose, sharing: sharing, policy: policy, within: parent, id: id,
                      pass: pass, completion: completion)
            case .failure(let error):
                lock.withLock {
                    admitting.remove(id)
                    emit(id, origin, .failed(error))
                }
                completion(.failure(error))
            }
        }
        return id
    }

    /// The local part of ``coordinate(_:origin:purpose:policy:within:completion:)``: holds, waits,
    /// asks, grant. `id` is the request's when the gate already gave it one (and logged the request).
    @discardableResult
    private func start(_ resolved: [FileAccessIntent], origin: AccessOrigin, purpose: String?, sharing: [String], policy: CoordinationPolicy,
                       within parent: CoordinatedAccess?, id: RequestID?, pass: (any GatePass)?,
                       completion: @escaping CoordinationCompletion) -> RequestID {
        lock.lock()
        let request = CoordinatedAccess(id: id ?? RequestID(rawValue: nextRequest), intents: resolved, origin: origin,
                                        purpose: purpose, sharing: sharing, policy: policy,
                                        coordinator: self, now: MonotonicClock.now(),
                                        parent: parent?.coordinator === self ? parent : nil)
        request.gatePass = pass
        if let id { admitting.remove(id) } else { nextRequest += 1 }
        guard !resolved.isEmpty else {
            request.phase = .failed
            let error = CoordinationError.invalidRequest("no intents")
            emit(request, .failed(error))
            lock.unlock()
            completion(.failure(error))
            return request.id
        }
        if id == nil { emit(request, .requested(intents: resolved, purpose: purpose)) }
        request.completion = completion
        insertEntries(request)
        request.queueRank = queueRank(of: request)
        if let blocker = firstBlocker(request) {
            request.phase = .waiting
            if origin.presenterID != nil { presenterWaiters += 1 }
            waiters.append(request)
            request.isPending = true
            pending[request.id] = request
            emit(request, .waiting(blockedBy: blocker.id))
            var effects = Effects()
            if wait(request, for: blocker, &effects) { startWaitTimer(request) }
            lock.unlock()
            effects.run()
            return request.id
        }
        var effects = Effects()
        startAsksOrGrant(request, &effects)
        if request.phase == .askingPresenters {
            // A waiting request made on behalf of a presenter asked just now may go ahead.
            rescanPresenterWaiters(&effects)
        }
        lock.unlock()
        effects.run()
        return request.id
    }

    /// The fast path: grants `intent` at once when nothing conflicts (held or queued) and no
    /// presenter has to be asked; otherwise returns nil and changes nothing (use
    /// ``coordinate(_:origin:purpose:policy:completion:)``). Never waits.
    public func tryCoordinateImmediately(_ intent: FileAccessIntent, origin: AccessOrigin,
                                         purpose: String? = nil) -> CoordinatedAccess? {
        grantImmediately([intent], origin: origin, purpose: purpose)
    }

    /// The fast path for several intents at once; see ``tryCoordinateImmediately(_:origin:purpose:)``.
    public func tryCoordinateImmediately(_ intents: [FileAccessIntent], origin: AccessOrigin,
                                         purpose: String? = nil) -> CoordinatedAccess? {
        guard !intents.isEmpty else { return nil }
        return grantImmediately(intents, origin: origin, purpose: purpose)
    }

    private func grantImmediately(_ intents: [FileAccessIntent], origin: AccessOrigin, purpose: String?) -> CoordinatedAccess? {
        let resolved = resolveLinks(intents)
        var pass: (any GatePass)?
        if let gate {
            guard let admitted = gate.admitNow(resolved, origin: origin, purpose: purpose) else { return nil }
            pass = admitted
        }
        let granted = grantImmediately(resolved, origin: origin, purpose: purpose, pass: pass)
        if granted == nil, let pass { gate?.release(pass, changes: [], origin: origin) }
        return granted
    }

    private func grantImmediately(_ resolved: [FileAccessIntent], origin: AccessOrigin, purpose: String?,
                                  pass: (any GatePass)?) -> CoordinatedAccess? {
        let now = MonotonicClock.now()
        lock.lock()
        let request = CoordinatedAccess(id: RequestID(rawValue: nextRequest), intents: resolved, origin: origin,
                                        purpose: purpose, policy: configuration.defaultPolicy,
                                        coordinator: self, now: now)
        if resolved.count == 1 {
            // One walk checks holds and spots presenters; the full presenter rules run only when
            // one sits on or under the path, so presenters elsewhere cost nothing here.
            let intent = resolved[0]
            let priority = !presenters.isEmpty && isPriority(request)
            var presentersNearby = false
            var leaf: PathNode?
            if locks.insertIfFree(path: intent.path, mode: intent.lockMode, owner: request,
                                  presentersNearby: &presentersNearby, leaf: &leaf,
                                  blocks: { blocks($0, request, priority: priority) }) != nil {
                lock.unlock()
                return nil
            }
            if presentersNearby && needsAnyAsk(request), let leaf {
                locks.remove(at: leaf, mode: intent.lockMode, owner: request)
                lock.unlock()
                return nil
            }
            request.leaf = leaf
            request.presentersNearby = presentersNearby
        } else {
            if firstBlocker(request) != nil || needsAnyAsk(request) {
                lock.unlock()
                return nil
            }
            insertEntries(request)
        }
        nextRequest += 1
        request.phase = .granted
        request.grantedAt = now
        request.presentersRegisteredBefore.store(nextPresenter, ordering: .relaxed)
        request.gatePass = pass
        if sinkReference != nil {
            emit(request, at: now, .requested(intents: resolved, purpose: purpose))
            if let pass { emit(request, at: now, .fenced(token: pass.fencingToken)) }
            emit(request, at: now, .granted(intents: resolved, waitedNanos: 0))
        }
        lock.unlock()
        return request
    }

    /// Cancels a request that is still waiting or asking presenters: its completion receives
    /// ``CoordinationError/cancelled(_:)`` at once and no accessor runs. Granted or finished
    /// requests are not affected.
    public func cancel(_ id: RequestID) {
        lock.lock()
        var effects = Effects()
        let local = pending[id]
        if let request = local {
            fail(request, .cancelled(id), &effects)
        }
        lock.unlock()
        effects.run()
        if local == nil { gate?.cancel(id) }
    }

    /// Delivers a change made on this host outside any coordinated access: one the daemon makes on
    /// its own behalf (a new file's appearance, told once it outlived the save window after its
    /// accesses ended; anything written without an access), or one an accessor announces outside its
    /// access. Presenters here hear it as an access's change, and so does the gate (the other nodes
    /// of a cluster: ``CoordinationGate/changedOutsideAccess(_:origin:)``), as it hears an access's
    /// changes when the access ends: whatever this host changes reaches every node, however it was
    /// made. A change this host did not make goes through ``announceObserved(_:origin:)``. Moves
    /// re-key presenters at once.
    ///
    /// With `mark` (a ``presenterMark`` taken when the change was made), only the presenters
    /// registered before it are told: a change told late (a new file's appearance, told once it
    /// outlived the save window) is not news to a presenter that registered after it was made,
    /// which found the item as the change left it. The gate hears it as always.
    public func announce(_ change: AccessChange, origin: AccessOrigin, toPresentersRegisteredBefore mark: UInt64 = .max) {
        tellHere(change, origin: origin, registeredBefore: mark)
        gate?.changedOutsideAccess([change], origin: origin)
    }

    /// The first presenter id not issued yet (no lock): presenters registered from now on have this
    /// id or a later one (``announce(_:origin:toPresentersRegisteredBefore:)``).
    public var presenterMark: UInt64 { presentersIssued.load(ordering: .relaxed) }

    /// Delivers a change this host did not make: seen in the backing folder (made beside the mount),
    /// or told by another node of a cluster (its change record). Presenters here only: every node
    /// tells those itself (its own watcher, the other node's record). Moves re-key presenters at once.
    public func announceObserved(_ change: AccessChange, origin: AccessOrigin) {
        tellHere(change, origin: origin, registeredBefore: .max)
    }

    /// Records `change` (its `did*` record, as ``announceObserved(_:origin:)`` does) without
    /// delivering it: its presenter was told apart (a change made while no daemon watched, told
    /// once that presenter registered again).
    public func recordToldApart(_ change: AccessChange, origin: AccessOrigin?) {
        lock.withLock { emit(nil, origin, .announced(change)) }
    }

    /// Records and delivers `change` to this host's presenters registered before `mark`.
    private func tellHere(_ change: AccessChange, origin: AccessOrigin, registeredBefore mark: UInt64) {
        lock.lock()
        emit(nil, origin, .announced(change))
        let pendingChange = record(change)
        deliver([pendingChange], origin: origin, requestID: nil, intents: [], registeredBefore: mark)
        lock.unlock()
    }

    /// Whether the folder `path` or one above it is presented here or, in a cluster, on another
    /// node (``isObserved(_:)`` and the gate's ``CoordinationGate/isObservedElsewhere(_:)``).
    public func isObservedAnywhere(_ path: ItemPath) -> Bool {
        isObserved(path) || gate?.isObservedElsewhere(path) == true
    }

    /// Whether `path` is presented here or, in a cluster, on another node.
    public func isPresentedAnywhere(_ path: ItemPath) -> Bool {
        isPresented(path) || gate?.isPresentedElsewhere(path) == true
    }

    /// Whether any presenter is registered here or, in a cluster, on another node.
    public var hasPresentersAnywhere: Bool { hasPresenters || gate?.hasPresentersElsewhere == true }

    /// The paths presented here or, in a cluster, on another node (each once).
    public func presentedPathsAnywhere() -> [ItemPath] {
        let elsewhere = gate?.presentedPathsElsewhere() ?? []
        if elsewhere.isEmpty { return presentedPaths() }
        return Array(Set(presentedPaths() + elsewhere))
    }

    /// Records `item(at:willMoveTo:)` as an event.
    func announceWillMove(from: ItemPath, to: ItemPath, during access: CoordinatedAccess?, origin: AccessOrigin) {
        lock.withLock { emit(access?.id, origin, .willMove(from: from, to: to)) }
    }

    // MARK: Request life (called with the lock held)

    /// Result callbacks gathered under the lock and run after it is released.
    struct Effects {
        var completions: [(CoordinationCompletion, Result<CoordinatedAccess, CoordinationError>)] = []
        /// Passes of requests that failed after the gate admitted them, given back after the lock.
        var passes: [(gate: any CoordinationGate, pass: any GatePass, origin: AccessOrigin)] = []
        func run() {
            for (gate, pass, origin) in passes { gate.release(pass, changes: [], origin: origin) }
            for (completion, result) in completions { completion(result) }
        }
    }

    func resolveLinks(_ intents: [FileAccessIntent]) -> [FileAccessIntent] {
        guard let resolver = configuration.symbolicLinkResolver else { return intents }
        return intents.map { intent in
            guard case .reading(let options) = intent.kind, options.contains(.resolvesSymbolicLink),
                  let target = resolver(intent.path) else { return intent }
            var copy = intent
            copy.path = target
            return copy
        }
    }

    func insertEntries(_ request: CoordinatedAccess) {
        if request.intents.count == 1 {
            let intent = request.intents[0]
            request.leaf = locks.insert(path: intent.path, mode: intent.lockMode, owner: request)
            return
        }
        for intent in request.intents {
            locks.insert(path: intent.path, mode: intent.lockMode, owner: request)
        }
    }

    func removeEntries(_ request: CoordinatedAccess) {
        if let leaf = request.leaf {
            request.leaf = nil
            locks.remove(at: leaf, mode: request.intents[0].lockMode, owner: request)
            return
        }
        for intent in request.intents {
            locks.remove(path: intent.path, mode: intent.lockMode, owner: request)
        }
    }

    /// The first access that `request` must wait for, or nil.
    func firstBlocker(_ request: CoordinatedAccess) -> CoordinatedAccess? {
        let priority = isPriority(request)
        for intent in request.intents {
            if let blocker = locks.firstBlocker(path: intent.path, mode: intent.lockMode,
                                                blocks: { blocks($0, request, priority: priority) }) {
                return blocker
            }
        }
        return nil
    }

    /// The rank `request` is queued with (``CoordinatedAccess/queueRank``): 0 when no access of its
    /// own user is in its way, else one more than the highest rank among those (a holder counting
    /// 0, so a user's second access in a queue has rank 1, its third 2, ...). Accesses of the same
    /// purpose (one process's) do not count: they never wait for each other.
    func queueRank(of request: CoordinatedAccess) -> Int {
        var rank = 0
        let uid = request.origin.uid
        for intent in request.intents {
            _ = locks.firstBlocker(path: intent.path, mode: intent.lockMode) { owner in
                guard owner !== request, owner.origin.uid == uid, owner.id < request.id,
                      !Self.sharePurpose(request.purposeIdentifier, owner.purposeIdentifier) else { return false }
                switch owner.phase {
                case .waiting: rank = max(rank, owner.queueRank + 1)
                case .askingPresenters, .granted: rank = max(rank, 1)
                case .released, .failed: break
                }
                return false
            }
        }
        return rank
    }

    /// Whether the waiting `holder` comes before `request` in the queue: waiting requests are
    /// served by rank (``queueRank(of:)``), then in arrival order. Each user's first access in a
    /// queue goes before any user's second, so one user's many accesses to one item queue behind
    /// each other, not ahead of another user's access: root's save
    /// waits for the access holding the item and at most the first waiting access of each other
    /// user, not for all of them (docs/coordination.md, "Fair queues"). Ranks never change once
    /// set, so the order is one total order (a request only waits for requests before it in it)
    /// and waiting requests cannot wait for each other in a loop. A request of the fast path
    /// (never queued, rank -1) is behind every waiting one.
    @inline(__always)
    func queuedAhead(_ holder: CoordinatedAccess, of request: CoordinatedAccess) -> Bool {
        let rank = request.queueRank
        if rank < 0 || holder.queueRank == rank { return holder.id < request.id }
        return holder.queueRank < rank
    }

    /// Whether an entry of `holder`, already known to conflict by mode and place, holds up `request`.
    @inline(__always)
    func blocks(_ holder: CoordinatedAccess, _ request: CoordinatedAccess, priority: Bool) -> Bool {
        if holder === request { return false }
        if Self.sharePurpose(request.purposeIdentifier, holder.purposeIdentifier) { return false }
        if request.sharedPurposes.contains(where: { Self.sharePurpose($0, holder.purposeIdentifier) }) { return false }
        if request.policy.passesYieldingReaders, holder.phase == .granted, holder.yields.load(ordering: .relaxed),
           !holder.intents.contains(where: \.isWriting) {
            return false // an append past an open file's read (docs/semantics.md, "Waits and deadlines")
        }
        if request.policy.passesYieldingAppenders, holder.phase == .granted, holder.appends.load(ordering: .relaxed),
           holder.yields.load(ordering: .relaxed) {
            return false // a read past an open file that only appends (a log being written)
        }
        if holder.phase == .waiting {
            // Queue order keeps writers from starving behind a stream of readers; a presenter saving
            // for someone else's request is not held up by the queue.
            if priority || !queuedAhead(holder, of: request) { return false }
        } else if let presenter = request.origin.presenterID, holder.phase == .askingPresenters,
                  holder.hasLiveAsk(to: presenter) {
            // The holder is waiting for this presenter: let the presenter act (save) for it.
            return false
        }
        if permissions != nil, HoldUpRule.judges(holderUID: holder.origin.uid, requesterUID: request.origin.uid) {
            return mayHoldUp(holder, request)
        }
        return true
    }

    /// Whether a `holder` of another user (neither root nor the requester's) may hold up `request`,
    /// by ``HoldUpRule``: a reading holder only when its user could make one of the request's writes
    /// itself; writing holders, and a reading request, keep the usual rules. Judged once per pair,
    /// under the lock, with the holder's credentials as the permissions screen learns them.
    func mayHoldUp(_ holder: CoordinatedAccess, _ request: CoordinatedAccess) -> Bool {
        guard let permissions else { return true }
        if let known = request.holdersJudged[holder.id] { return known }
        let answer = HoldUpRule.mayHoldUp(holderWrites: holder.intents.contains(where: \.isWriting), intents: request.intents,
                                          permissions: permissions) { permissions.credentials(of: holder.origin) }
        request.holdersJudged[holder.id] = answer
        return answer
    }

    /// Whether accesses of purposes `a` and `b` never block each other: the same purpose, or a
    /// purpose `P` and one of its sub-purposes `P/x`. The mount gives every process one purpose
    /// (`pid:N`) and each client coordinator of that process a sub-purpose (`pid:N/x`): two client
    /// coordinators of one process exclude each other, while the process's own reads and writes
    /// through the mount never wait for either.
    @inline(__always)
    static func sharePurpose(_ a: String?, _ b: String?) -> Bool {
        guard let a, let b else { return false }
        if a == b { return true }
        let (short, long) = a.utf8.count < b.utf8.count ? (a.utf8, b.utf8) : (b.utf8, a.utf8)
        guard long.starts(with: short) else { return false }
        return long[long.index(long.startIndex, offsetBy: short.count)] == UInt8(ascii: "/")
    }

    /// True when `request` acts for a presenter that some request is waiting on.
    func isPriority(_ request: CoordinatedAccess) -> Bool {
        guard let id = request.origin.presenterID, !presenters.isEmpty,
              let record = presenters.byID[id] else { return false }
        return !record.pendingAsks.isEmpty
    }

    /// Holds are taken: ask presenters, or grant at once when nobody has to be asked.
    func startAsksOrGrant(_ request: CoordinatedAccess, _ effects: inout Effects) {
        let plan = askPlan(for: request)
        if plan.isEmpty {
            grant(request, &effects)
            return
        }
        request.phase = .askingPresenters
        request.isPending = true
        pending[request.id] = request
        request.chains = plan.map { AskChain(record: $0.record, steps: $0.steps) }
        request.openChains = request.chains.count
        for chain in request.chains {
            begin(chain, of: request, &effects)
        }
    }

    func grant(_ request: CoordinatedAccess, _ effects: inout Effects) {
        request.phase = .granted
        request.grantedAt = MonotonicClock.now()
        request.presentersRegisteredBefore.store(nextPresenter, ordering: .relaxed)
        cancelWaitTimer(request)
        if request.isPending {
            request.isPending = false
            pending[request.id] = nil
        }
        if let pass = request.gatePass { emit(request, .fenced(token: pass.fencingToken)) }
        emit(request, .granted(intents: request.intents, waitedNanos: request.grantedAt &- request.requestedAt))
        if let completion = request.completion {
            request.completion = nil
            effects.completions.append((completion, .success(request)))
        }
    }

    /// Ends a waiting or asking request without access.
    func fail(_ request: CoordinatedAccess, _ error: CoordinationError, _ effects: inout Effects) {
        guard request.phase == .waiting || request.phase == .askingPresenters else { return }
        if request.phase == .waiting {
            noteWaiterLeft(request)
            leaveWait(request)
        }
        request.phase = .failed
        request.isPending = false
        pending[request.id] = nil
        cancelWaitTimer(request)
        for chain in request.chains {
            if let ask = chain.current, !ask.resolved { resolve(ask) }
            chain.finished = true
        }
        // (Once none of its chains is to be issued any more: a turn passed on goes to another's.)
        for chain in request.chains { endTurn(chain, &effects) }
        removeEntries(request)
        scheduleReacquirers(request)
        if let pass = request.gatePass, let gate {
            request.gatePass = nil
            effects.passes.append((gate, pass, request.origin))
        }
        emit(request, .failed(error))
        if let completion = request.completion {
            request.completion = nil
            effects.completions.append((completion, .failure(error)))
        }
        wakeDependents(of: request, &effects)
    }

    /// Re-examines the requests that were waiting for `request`, which just ended (released or
    /// failed). Each either goes ahead or starts waiting for whatever is in its way now, so a
    /// release costs the number of its dependents, not the length of the whole queue.
    func wakeDependents(of request: CoordinatedAccess, _ effects: inout Effects) {
        guard !request.dependents.isEmpty else { return }
        var woken = request.dependents
        request.dependents = []
        if woken.count > 1 { woken.sort { $0.id < $1.id } } // arrival order
        var asked = false
        for waiter in woken where waiter.phase == .waiting {
            if let blocker = firstBlocker(waiter) {
                _ = wait(waiter, for: blocker, &effects)
            } else {
                proceed(waiter, &effects)
                asked = asked || waiter.phase == .askingPresenters
            }
        }
        if asked { rescanPresenterWaiters(&effects) }
    }

    /// Parks `waiter` behind `blocker`, unless that closes a cycle through nested accesses: then
    /// it fails at once with a deadlock error. Returns whether the request is waiting.
    func wait(_ waiter: CoordinatedAccess, for blocker: CoordinatedAccess, _ effects: inout Effects) -> Bool {
        if waiter.blocker == nil, let parent = waiter.parent {
            parent.waitingChildren.append(waiter)
            nestedWaiting += 1
        }
        waiter.blockedBy = blocker.id
        waiter.blocker = blocker
        if blocker.phase == .askingPresenters, blocker.origin.uid != waiter.origin.uid { hurryTurns(of: blocker) }
        if nestedWaiting > 0, let holder = cycle(from: waiter) {
            let path = waiter.intents.first { intent in
                locks.firstBlocker(path: intent.path, mode: intent.lockMode, blocks: { $0 === blocker }) != nil
            }?.path ?? waiter.intents[0].path
            fail(waiter, .deadlock(waiter.id, path: path, heldBy: holder.id), &effects)
            return false
        }
        if blocker.dependents.count >= 64 {
            blocker.dependents.removeAll { $0.phase != .waiting }
        }
        blocker.dependents.append(waiter)
        return true
    }

    /// The access through which `waiter` would end up waiting for itself or for an access it is
    /// nested in, or nil. Every cycle passes through a nested waiting request (queue order alone
    /// cannot loop: a request only waits for requests before it in the queue, ``queuedAhead(_:of:)``),
    /// so this runs only when one exists.
    func cycle(from waiter: CoordinatedAccess) -> CoordinatedAccess? {
        var enclosing: [CoordinatedAccess] = [waiter]
        var next = waiter.parent
        while let p = next {
            enclosing.append(p)
            next = p.parent
        }
        var stack: [CoordinatedAccess] = waiter.blocker.map { [$0] } ?? []
        var seen = Set<ObjectIdentifier>()
        while let x = stack.popLast() {
            if enclosing.contains(where: { $0 === x }) { return waiter.blocker }
            guard seen.insert(ObjectIdentifier(x)).inserted else { continue }
            if x.phase == .waiting {
                if let b = x.blocker { stack.append(b) }
            } else {
                // A holder ends only when its accessor does; that accessor may be waiting itself.
                stack.append(contentsOf: x.waitingChildren)
            }
        }
        return nil
    }

    /// `request` stops waiting (granted, failed): forget its wait edges.
    func leaveWait(_ request: CoordinatedAccess) {
        if request.blocker != nil, let parent = request.parent,
           let at = parent.waitingChildren.firstIndex(where: { $0 === request }) {
            parent.waitingChildren.remove(at: at)
            nestedWaiting -= 1
        }
        request.blocker = nil
        request.blockedBy = nil
    }

    /// A waiting request whose way is clear takes its holds and moves on.
    func proceed(_ waiter: CoordinatedAccess, _ effects: inout Effects) {
        noteWaiterLeft(waiter)
        leaveWait(waiter)
        cancelWaitTimer(waiter)
        startAsksOrGrant(waiter, &effects)
    }

    /// Waiting requests made on behalf of a presenter may go ahead once that presenter is asked
    /// something (it is acting for the request that asks). Only they are re-examined here.
    func rescanPresenterWaiters(_ effects: inout Effects) {
        guard presenterWaiters > 0 else { return }
        var again = true
        while again {
            again = false
            for waiter in waiters where waiter.phase == .waiting && waiter.origin.presenterID != nil && isPriority(waiter) {
                if firstBlocker(waiter) == nil {
                    proceed(waiter, &effects)
                    if waiter.phase == .askingPresenters { again = true }
                }
            }
        }
    }

    /// `request` stops waiting; drops finished entries from `waiters` once they dominate it.
    func noteWaiterLeft(_ request: CoordinatedAccess) {
        if request.origin.presenterID != nil { presenterWaiters -= 1 }
        staleWaiters += 1
        if staleWaiters > 64 && staleWaiters * 2 > waiters.count {
            waiters.removeAll { $0.phase != .waiting }
            staleWaiters = 0
        }
    }

    func cancelWaitTimer(_ request: CoordinatedAccess) {
        if let timer = request.waitTimer {
            DeadlineScheduler.shared.cancel(timer)
            request.waitTimer = nil
        }
    }

    func startWaitTimer(_ request: CoordinatedAccess) {
        guard let deadline = request.policy.waitDeadline else { return }
        request.waitTimer = DeadlineScheduler.shared.schedule(after: deadline) { [weak self] in
            self?.waitDeadlinePassed(request, deadline: deadline)
        }
    }

    func waitDeadlinePassed(_ request: CoordinatedAccess, deadline: Duration) {
        lock.lock()
        var effects = Effects()
        if request.phase == .waiting {
            let blocker = firstBlocker(request)
            switch request.policy.atWaitDeadline {
            case .fail:
                let path = request.intents.first { intent in
                    locks.firstBlocker(path: intent.path, mode: intent.lockMode,
                                       blocks: { blocks($0, request, priority: false) }) != nil
                }?.path ?? request.intents[0].path
                fail(request, .waitTimedOut(request.id, path: path, blockedBy: blocker?.id ?? request.blockedBy,
                                            deadline: deadline), &effects)
            case .goAheadPastYieldingHolds:
                if let (holder, path) = exclusiveWriter(in: request, atDeadline: true) {
                    fail(request, .busy(request.id, path: path, heldBy: holder.id, deadline: deadline), &effects)
                } else {
                    goAhead(request, past: blocker, deadline: deadline, &effects)
                }
            case .goAhead:
                goAhead(request, past: blocker, deadline: deadline, &effects)
            }
        }
        lock.unlock()
        effects.run()
    }

    /// The open files (granted holds that yield at wait deadlines: an unmodified program's open
    /// file) in the way of waiting request `id`, when its policy goes ahead past such holds at its
    /// deadline (empty otherwise, when none is, or while the gate still admits it: it may wait here
    /// once admitted); nil when it waits no more. The caller tells by each one's
    /// ``CoordinatedAccess/id`` which of its open files it is, and by its origin whose.
    public func yieldingHolds(blocking id: RequestID) -> [CoordinatedAccess]? {
        lock.lock()
        defer { lock.unlock() }
        guard let request = pending[id], request.phase == .waiting else { return admitting.contains(id) ? [] : nil }
        guard request.policy.atWaitDeadline != .fail else { return [] }
        let priority = isPriority(request)
        var holders: [CoordinatedAccess] = []
        for intent in request.intents {
            _ = locks.firstBlocker(path: intent.path, mode: intent.lockMode) { holder in
                if holder.phase == .granted, holder.yields.load(ordering: .relaxed), blocks(holder, request, priority: priority) {
                    holders.append(holder)
                }
                return false
            }
        }
        return holders
    }

    /// Waiting request `id` goes ahead now, as it would at its wait deadline, when no write that
    /// does not yield is in its way (a write's ``WaitDeadlineAction/goAheadPastYieldingHolds``; a
    /// read's ``WaitDeadlineAction/goAhead`` is taken only so far; a request whose deadline fails it
    /// waits on): its caller found that an open file in its way cannot be closed before this
    /// request ends, so the wait would last until the deadline. Returns whether it went ahead.
    @discardableResult
    public func goAheadPastYieldingHolds(_ id: RequestID) -> Bool {
        lock.lock()
        var effects = Effects()
        var went = false
        if let request = pending[id], request.phase == .waiting, request.policy.atWaitDeadline != .fail,
           exclusiveWriter(in: request) == nil {
            cancelWaitTimer(request)
            let waitedMs = (MonotonicClock.now() &- request.requestedAt) / 1_000_000
            goAhead(request, past: firstBlocker(request), deadline: .milliseconds(Int64(min(waitedMs, UInt64(Int32.max)))), &effects)
            went = true
        }
        lock.unlock()
        effects.run()
        return went
    }

    /// A held write in `request`'s way that does not yield at its deadline, and where it holds.
    /// At the deadline (`atDeadline`) a request that itself goes ahead past yielding holds at its
    /// deadline is passed too, also while it asks its presenters or its open is still being made
    /// (before it yields): it is an unmodified program's (through the mount), never an explicit
    /// coordinated write, and fails nobody with EBUSY. Before the deadline (a caller's early
    /// go-ahead) such a request in progress is still waited for.
    func exclusiveWriter(in request: CoordinatedAccess, atDeadline: Bool = false) -> (CoordinatedAccess, ItemPath)? {
        for intent in request.intents {
            let holder = locks.firstBlocker(path: intent.path, mode: intent.lockMode) { holder in
                blocks(holder, request, priority: false)
                    && (holder.phase == .granted || holder.phase == .askingPresenters)
                    && !holder.yields.load(ordering: .relaxed)
                    && !(atDeadline && holder.policy.atWaitDeadline == .goAheadPastYieldingHolds)
                    && holder.intents.contains(where: \.isWriting)
            }
            if let holder { return (holder, intent.path) }
        }
        return nil
    }

    /// `request` stops waiting at its deadline and goes on beside the accesses in its way: it keeps
    /// its holds (later requests wait for it as for any holder), asks its presenters, is granted.
    func goAhead(_ request: CoordinatedAccess, past blocker: CoordinatedAccess?, deadline: Duration, _ effects: inout Effects) {
        request.waitTimer = nil // this timer has fired
        emit(request, .wentAheadWithoutExclusion(blockedBy: blocker?.id ?? request.blockedBy, deadline: deadline))
        proceed(request, &effects)
        if request.phase == .askingPresenters { rescanPresenterWaiters(&effects) }
    }

    func release(_ request: CoordinatedAccess) {
        lock.lock()
        guard request.phase == .granted else {
            lock.unlock()
            return
        }
        request.phase = .released
        removeEntries(request)
        let pass = request.gatePass
        request.gatePass = nil
        let changes = request.gateChanges
        request.gateChanges = []
        defer { if let pass { gate?.release(pass, changes: changes, origin: request.origin) } }
        if !request.announcements.isEmpty {
            deliver(request.announcements, origin: request.origin, requestID: request.id, intents: request.intents,
                    audience: request)
            request.announcements = []
        }
        scheduleReacquirers(request)
        if sinkReference != nil {
            let now = MonotonicClock.now()
            emit(request, at: now, .released(heldNanos: now &- request.grantedAt))
        }
        if request.dependents.isEmpty {
            lock.unlock()
            return
        }
        var effects = Effects()
        wakeDependents(of: request, &effects)
        lock.unlock()
        effects.run()
    }

    func scheduleReacquirers(_ request: CoordinatedAccess) {
        if request.reacquirers.isEmpty { return }
        for (record, reacquirer) in request.reacquirers {
            emit(request, .reacquireScheduled(record.id))
            scheduleReacquire(reacquirer, to: record, for: request.origin)
        }
        request.reacquirers = []
    }

    // MARK: Events

    @inline(__always)
    func emit(_ request: CoordinatedAccess, _ kind: @autoclosure () -> CoordinationEvent.Kind) {
        if let sink = sinkReference {
            sink.record(CoordinationEvent(time: MonotonicClock.now(), requestID: request.id, origin: request.origin, kind: kind()))
        }
    }

    /// `emit` with a time the caller has already read (a clock read costs some 30 ns, a tenth of
    /// what logging adds to an access).
    @inline(__always)
    func emit(_ request: CoordinatedAccess, at time: UInt64, _ kind: @autoclosure () -> CoordinationEvent.Kind) {
        if let sink = sinkReference {
            sink.record(CoordinationEvent(time: time, requestID: request.id, origin: request.origin, kind: kind()))
        }
    }

    @inline(__always)
    func emit(_ id: RequestID?, _ origin: AccessOrigin?, _ kind: @autoclosure () -> CoordinationEvent.Kind) {
        if let sink = sinkReference {
            sink.record(CoordinationEvent(time: MonotonicClock.now(), requestID: id, origin: origin, kind: kind()))
        }
    }

    // MARK: Status

    /// A consistent snapshot of presenters, holds and waits, for the control socket and `coordfs status`.
    /// How many presenters, held accesses and waiting requests there are (what `status()` lists,
    /// counted without building it: the metrics endpoint reads this at each scrape).
    public func statusCounts() -> (presenters: Int, held: Int, waiting: Int) {
        lock.lock()
        defer { lock.unlock() }
        let held = locks.owners().count { $0.phase == .granted || $0.phase == .askingPresenters }
        return (presenters.count, held, waiters.count { $0.phase == .waiting })
    }

    public func status() -> CoordinationStatus {
        lock.lock()
        defer { lock.unlock() }
        let now = MonotonicClock.now()
        let presenterList = presenters.all.map { record in
            CoordinationStatus.Presenter(id: record.id, path: record.path, owner: record.owner,
                                         pendingAsks: record.pendingAsks.map { ask in
                                             CoordinationStatus.PendingAsk(presenter: record.id, ask: ask.kind,
                                                                           requestID: ask.request.id,
                                                                           ageNanos: now &- ask.issuedAt)
                                         })
        }
        func describe(_ request: CoordinatedAccess) -> CoordinationStatus.Access {
            let asks = request.chains.compactMap { chain -> CoordinationStatus.PendingAsk? in
                guard let ask = chain.current, !ask.resolved else { return nil }
                return CoordinationStatus.PendingAsk(presenter: chain.record.id, ask: ask.kind, requestID: request.id,
                                                     ageNanos: now &- ask.issuedAt)
            }
            let since = request.phase == .granted ? request.grantedAt : request.requestedAt
            return CoordinationStatus.Access(id: request.id, intents: request.intents, origin: request.origin,
                                             purposeIdentifier: request.purposeIdentifier, phase: request.phase,
                                             ageNanos: now &- since, pendingAsks: asks, blockedBy: request.blockedBy)
        }
        let holders = locks.owners().filter { $0.phase == .granted || $0.phase == .askingPresenters }
        return CoordinationStatus(presenters: presenterList, held: holders.map(describe),
                                  waiting: waiters.filter { $0.phase == .waiting }.map(describe))
    }
}
