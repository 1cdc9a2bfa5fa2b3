import ClusterKV
import Coordination
import Foundation

/// One node of a cluster: the mount's coordinator's gate (``CoordinationGate``) and the tap of its
/// events. It keeps the node's session (a lease), mirrors its presenters into etcd, arbitrates its
/// accesses against every other node's through rights in etcd, asks presenters on other nodes
/// through ask keys (their node runs the access as a local one: its presenters are asked, its store
/// keeps versions), and tells every node what an access changed (change records), so each drops its
/// kernel caches and then tells its presenters. See docs/cluster.md.
public final class ClusterNode: CoordinationGate, CoordinationEventSink, @unchecked Sendable {
    public let configuration: ClusterConfiguration
    let store: any ClusterStore
    let keys: ClusterKeys
    public var name: String { configuration.node }
    weak var coordinator: Coordinator?
    public weak var host: (any ClusterHost)?
    /// The purpose of the accesses this node runs for other nodes' asks (they pass the gate freely).
    static let proxyPurpose = "cluster-proxy:"

    let lock = NSLock()
    // Guarded by `lock`:
    var state = State()

    struct State {
        var lease: LeaseID = 0
        var validUntil: Double = -1
        var since: Double = 0
        var establishing = false
        var sessionWaiters: [CheckedContinuation<Void, Never>] = []
        var reachable = true
        /// Wall-clock time etcd became unreachable, and why (for status and the log).
        var unreachableSince: Double?
        var lastError: String?
        /// etcd's refusal while it is full (``ClusterStoreError/full(_:)``): it answers, but takes
        /// no write until a write of this node goes through again.
        var full: String?
        /// Monotonic time of the first failed call since etcd last answered.
        var failingSince: Double?
        /// The mod revision of this node's change-record key as its last write left it (0: none):
        /// the guard that keeps a record whose answer was lost from being put twice.
        var changeKeyRevision: Revision = 0
        var localGrants = 0
        var stopped = false
        /// The node is leaving (``stop()``): no session is made again for an access still on its way.
        var leaving = false
        /// The last revision the watch applied to this state (`holds`, `presentersAt`, ...).
        var watchedRevision: Revision = 0
        /// The last revision whose effects are done too: another node's change records applied
        /// here (this node's kernel caches dropped, its store and presenters told). What
        /// `watchReaches` waits for.
        var doneRevision: Revision = 0
        /// Admissions waiting for the watch to reach their rights' revision (`watchReaches`).
        var revisionWaiters: [(revision: Revision, waiter: RevisionWaiter)] = []
        var serial: UInt64 = 0
        // This node's rights and presenters.
        var rights: [ItemPath: [Right]] = [:]
        var rightsByKey: [[UInt8]: Right] = [:]
        var idleRights = 0
        var presenters: [UInt64: PresenterValue] = [:]
        // The cluster as seen through the watch (every node, this one too).
        var nodes: [String: NodeValue] = [:]
        var presenterKeys: [[UInt8]: (node: String, path: ItemPath)] = [:]
        var presentersAt: [ItemPath: [String: Int]] = [:]
        var presenceBelow: [ItemPath: [String: Int]] = [:]
        var holds: [[UInt8]: Hold] = [:]
        var holdsBelow: [ItemPath: [String: Int]] = [:]
        /// Versions being kept for this node's readers before another node's change
        /// (`ClusterHost.clusterWillYield`): while one is, the rights this node gives back that
        /// hold up that change wait in `heldDeletes`, so it is let through only once they are
        /// kept; a right in the way of none of them goes back at once.
        var yielding: [Yield] = []
        var heldDeletes: [(key: [UInt8], path: ItemPath, mode: LockMode)] = []
        /// The passes of accesses whose open files may be held without writing (`accessMayIdle`),
        /// until released.
        var probedPasses: [ObjectIdentifier: Pass] = [:]
        /// This node's rights put again with `y` that another node's right still waits for (or
        /// went ahead past): looked at every `idleLookInterval` (`watchIdleOpens`) while so.
        var idleWatched: [ObjectIdentifier: Right] = [:]
        var idleWatching = false
        /// `watchIdleOpens` between looks (its wait numbered: the timer ends only its own), or
        /// told to look again at once (`idleLookNow`: a right newly watched).
        var idleSleeper: (number: UInt64, continuation: CheckedContinuation<Void, Never>)?
        var idleSleeps: UInt64 = 0
        var idleLookNow = false
        // Waits.
        var waiters: [ObjectIdentifier: KeyWaiter] = [:]
        var admitting: [RequestID: KeyWaiter] = [:]
        var cancelled: Set<RequestID> = []
        var askWaits: [UInt64: AskWait] = [:]
        var proxies: [String: Proxy] = [:]
        var unansweredProxies: [String: Int] = [:]
        // The publisher's queue: one op per key, the change records, and who to wake after.
        var ops: [[UInt8]: PendingOp] = [:]
        var opOrder: [[UInt8]] = []
        /// How many change records the node had queued when each op was queued: an op goes in the
        /// transaction that carries the last of those (a right given back after the records of the
        /// accesses that used it), not after records queued later.
        var opsAfter: [[UInt8]: UInt64] = [:]
        var changeRecords: [ChangeRecord] = []
        /// Change records queued since the node started, and how many of them etcd has: an ask
        /// waits for the records queued before it (`recordsInEtcd`).
        var recordsQueued: UInt64 = 0
        var recordsSent: UInt64 = 0
        var recordWaiters: [RecordWait] = []
        /// Monotonic time the publisher last sent change records (their pacing).
        var lastRecordBatch: Double = -.infinity
        /// A queued change record concerns a presenter of another node (or one registered there
        /// while records waited): the batch waits `recordInterval`, not `unpresentedRecordInterval`.
        var recordsUrgent = false
        /// The paced publisher, asleep until its interval is over or something that may not wait
        /// is queued (``wakePublisher()`` wakes it).
        var paceWaiter: CheckedContinuation<Void, Never>?
        var flushing = false
        var flushWaiters: [CheckedContinuation<Void, Never>] = []
        var stepSubscribers: [UUID: StepSubscriber] = [:]
        /// Subscribers that want every step (`coordfs watch --cluster`), not only the notable ones
        /// (the daemon's log): while there are none, no step of a single access is built.
        var everyStepSubscribers = 0
    }

    struct StepSubscriber {
        var continuation: AsyncStream<ClusterStep>.Continuation
        var notableOnly: Bool
    }

    enum PendingOp {
        case put([UInt8])
        case delete
    }

    struct Hold {
        var node: String
        var path: ItemPath
        var mode: LockMode
        var order: Revision
        /// The user whose accesses use it, as its node recorded it (nil: a right of an older node).
        var holder: PresenterCredentials? = nil
        /// Every access using it yields at wait deadlines (an open file), and none can take it any
        /// more (recalled): put again so by its node (`RightValue.y`).
        var yields = false
        /// Besides, every access using it is an open file held without writing (`RightValue.i`).
        var idle = false
        /// Besides, every access using it is an open file that only appends (`RightValue.a`).
        var appends = false
        /// Besides, each of those open files was made a second ago or more (`RightValue.l`).
        var appendingAWhile = false
    }

    /// A right this node holds in etcd (granted, or still waiting for older conflicting ones).
    final class Right: @unchecked Sendable {
        let key: [UInt8]
        let path: ItemPath
        let mode: LockMode
        /// The user whose accesses use it (recorded in etcd): only that user's accesses take it.
        let holder: PresenterCredentials
        var order: Revision
        var granted = false
        var inUse = 0
        /// The items and modes its current accesses use (a folder right is split along them).
        var uses: [ItemPath: [LockMode]] = [:]
        /// Of those uses, the ones whose access yields at wait deadlines (an unmodified program's
        /// open file: ``ClusterNode/accessYields(_:)``), by item.
        var yielding: [ItemPath: Int] = [:]
        /// Of those, the ones of open files that only append, by item.
        var appending: [ItemPath: Int] = [:]
        /// Put again with `y` (`publishYields`): every access using it yields, and it is recalled,
        /// so no other access takes it: true until it goes.
        var yieldsPublished = false
        /// Put so with `a` as well: every access using it only appends.
        var appendsPublished = false
        /// Put so with `l` as well (`watchIdleOpens`): each of those open files was made a second
        /// ago or more; true until it goes (its accesses only get older).
        var appendingAWhilePublished = false
        /// Put again with `i` too (`watchIdleOpens`): every access using it is an open file held
        /// without writing, as last looked.
        var idlePublished = false
        /// The rights of other nodes in its way while etcd had it with `i` (`apply`), until they go.
        var passedBy: Set<[UInt8]> = []
        var recalled = false
        /// Taken past another node's right (a presenter saving for that node's ask): never kept.
        var ephemeral = false
        var dead = false
        var replacement: [ItemPath: Right] = [:]
        var lastUsed: Double = 0
        /// The rights of other nodes that recalled it while in use: before it goes, the versions
        /// this node's readers read there are kept (`yieldsBefore`).
        var recalledBy: [Hold] = []
        /// Those versions were kept before it was put with `y` (`publishYields`), or are being kept.
        var readVersionsKept = false
        var keepingReadVersions = false

        init(key: [UInt8], path: ItemPath, mode: LockMode, order: Revision, holder: PresenterCredentials) {
            self.key = key
            self.path = path
            self.mode = mode
            self.order = order
            self.holder = holder
        }

        /// Whether an access of `user` may use it: root's accesses share root's rights (root is
        /// never judged), anyone else's take only rights recorded with their exact credentials.
        func serves(_ user: PresenterCredentials) -> Bool {
            user.uid == 0 ? holder.uid == 0 : holder == user
        }

        func covers(_ p: ItemPath, _ m: LockMode) -> Bool {
            (path == p && m.rank <= mode.rank) || (mode == .subtreeWrite && path.isAncestor(of: p))
        }

        /// The right that now carries a use of `p` (itself, or the part it was split into).
        func current(for p: ItemPath) -> Right {
            var r = self
            while let next = r.replacement[p] { r = next }
            return r
        }
    }

    /// What an access holds from the cluster.
    final class Pass: GatePass, @unchecked Sendable {
        let fencingToken: Int64
        let uses: [(right: Right, path: ItemPath, mode: LockMode)]
        let serial: UInt64
        let asked: [String]
        /// A proxy's pass: what its access announces is another node's change, never published again.
        let isProxy: Bool
        /// Its access yields at wait deadlines (``ClusterNode/accessYields(_:)``), and it was given
        /// back (`release`): both guarded by the node's lock. `appends`: besides, it only appends.
        var yields = false
        var appends = false
        var released = false
        /// Whether its open files are held without writing now (``ClusterNode/accessMayIdle(_:probe:appendingAWhile:changedPast:)``).
        var idleProbe: (@Sendable () -> Bool)?
        /// Whether its open files, which only append, were each made a second ago or more.
        var appendingAWhileProbe: (@Sendable () -> Bool)?
        /// Tells its open files that the file as another node's request left it is not their change.
        var changedPast: (@Sendable () -> Void)?
        init(token: Int64, uses: [(right: Right, path: ItemPath, mode: LockMode)], serial: UInt64, asked: [String], isProxy: Bool = false) {
            fencingToken = token
            self.uses = uses
            self.serial = serial
            self.asked = asked
            self.isProxy = isProxy
        }
        static func proxy() -> Pass { Pass(token: 0, uses: [], serial: 0, asked: [], isProxy: true) }
    }

    /// Another node's access, run here so this node's presenters are asked and told.
    final class Proxy: @unchecked Sendable {
        let from: String
        let serial: UInt64
        let intents: [FileAccessIntent]
        let origin: AccessOrigin
        var access: CoordinatedAccess?
        var answered = false
        /// Its answer was queued for the publisher (etcd did not take it at once), unguarded.
        var answerQueued = false
        var ended = false
        init(from: String, serial: UInt64, intents: [FileAccessIntent], origin: AccessOrigin) {
            self.from = from
            self.serial = serial
            self.intents = intents
            self.origin = origin
        }
    }

    /// An access of this node waiting for answers from other nodes.
    final class AskWait: @unchecked Sendable {
        var remaining: Set<String>
        var refusal: AnswerValue?
        var continuation: CheckedContinuation<Bool, Never>?
        init(remaining: Set<String>) { self.remaining = remaining }
    }

    /// An ask waiting until this node's change records queued before it are in etcd.
    final class RecordWait: @unchecked Sendable {
        let upTo: UInt64
        var continuation: CheckedContinuation<Void, Never>?
        init(upTo: UInt64) { self.upTo = upTo }
    }

    /// A wait for rights of other nodes to go (or a deadline, or a cancellation).
    final class KeyWaiter: @unchecked Sendable {
        enum Outcome { case changed, timedOut, cancelled }
        var keys: Set<[UInt8]>
        /// Its access's policy: whether programs' open files hold it up (``ClusterNode/passes(_:_:yields:appends:appendingAWhile:)``).
        let policy: CoordinationPolicy?
        var continuation: CheckedContinuation<Outcome, Never>?
        var outcome: Outcome?
        init(keys: Set<[UInt8]>, policy: CoordinationPolicy? = nil) { self.keys = keys; self.policy = policy }
        /// Called with the node's lock held.
        func finish(_ o: Outcome) -> CheckedContinuation<Outcome, Never>? {
            guard outcome == nil else { return nil }
            outcome = o
            defer { continuation = nil }
            return continuation
        }
    }

    /// One admission waiting for the watch (`watchReaches`): resumed once, by the watch or its bound.
    final class RevisionWaiter: @unchecked Sendable {
        var continuation: CheckedContinuation<Void, Never>?
        /// Its bound, cancelled when the watch resumes it first.
        var timeout: Task<Void, Never>?
    }

    private var tasks: [Task<Void, Never>] = []

    public init(store: any ClusterStore, configuration: ClusterConfiguration) {
        self.store = store
        self.configuration = configuration
        self.keys = ClusterKeys(prefix: configuration.prefix, node: configuration.node)
    }

    // MARK: Life

    /// Joins the cluster: a session (lease and node key), the watch of the cluster's keys, renewals.
    /// Installs itself as `coordinator`'s gate. Throws when etcd cannot be reached.
    public func start(coordinator: Coordinator) async throws {
        self.coordinator = coordinator
        var read = try await store.range(keys.base, prefix: true)
        if let held = read.values.first(where: { $0.key == keys.nodeKey(name) }) {
            try await waitUntilTheNameIsFree(held)
            read = try await store.range(keys.base, prefix: true)
        }
        let (values, revision) = read
        let effects = lock.withLock { () -> Effects in
            var effects = Effects()
            for kv in values { apply(.put(kv), revision: revision, &effects, initial: true) }
            state.watchedRevision = revision
            return effects
        }
        run(effects)
        lock.withLock { state.doneRevision = revision }
        try await establishSession()
        coordinator.coordinationGate = self
        tasks.append(Task.detached { [weak self] in await self?.watchLoop(from: revision + 1) })
        tasks.append(Task.detached { [weak self] in await self?.renewLoop() })
    }

    /// Another session holds this node's name (its node key is in etcd): a node of that name that
    /// died less than its TTL ago (its lease still runs out), or a live one (another host mounted
    /// with the same `node=`). Waits, reading the key, until it is gone, at most the holder's TTL
    /// and a second (bounded by 15 s): a key still there then was renewed meanwhile, so that node
    /// lives, and joining would take its name's keys over (its presenters, rights, asks and change
    /// records): refused, with nothing written.
    private func waitUntilTheNameIsFree(_ held: KeyValue) async throws {
        let value = Wire.decode(NodeValue.self, held.value)
        let waited = min(Double(value?.ttl ?? configuration.leaseTTL) + 1, 15)
        let deadline = ClusterConfiguration.monotonicSeconds() + waited
        while ClusterConfiguration.monotonicSeconds() < deadline {
            try await Task.sleep(nanoseconds: 250_000_000)
            let (now, _) = try await store.range(keys.nodeKey(name), prefix: false)
            if now.isEmpty { return }
        }
        throw ClusterNodeNameInUse(node: name, since: value?.since, lease: value?.lease ?? held.lease, ttl: value?.ttl, waited: waited)
    }

    /// Leaves the cluster: sends what it queued (change records of its last accesses, rights given
    /// back, answers), for at most `failoverWait`, then revokes the lease (its keys go at once) and
    /// stops. Without the first, the last changes of a node unmounted under load never reached the
    /// other nodes: their kernels kept names and sizes it had changed, their presenters never heard.
    public func stop() async {
        let (lease, pacing) = lock.withLock { () -> (LeaseID, CheckedContinuation<Void, Never>?) in
            state.stopped = true
            state.leaving = true
            defer { state.paceWaiter = nil }
            return (state.lease, state.paceWaiter)
        }
        pacing?.resume()
        if lease != 0 { await flush(within: configuration.failoverWait) }
        resumeRevisionWaiters()
        coordinator?.coordinationGate = nil
        for t in tasks { t.cancel() }
        if lease != 0 { try? await store.revokeLease(lease) }
        let subscribers = lock.withLock { () -> [AsyncStream<ClusterStep>.Continuation] in
            defer {
                state.stepSubscribers = [:]
                state.everyStepSubscribers = 0
            }
            return state.stepSubscribers.values.map(\.continuation)
        }
        for s in subscribers { s.finish() }
    }

    /// For tests: stop renewing the lease, as a paused or cut-off node does (nothing else changes).
    public func stopRenewingForTesting() {
        lock.withLock { state.stopped = true }
    }

    /// For tests: renew again (a paused node woken up).
    public func resumeForTesting() {
        lock.withLock { state.stopped = false }
        tasks.append(Task.detached { [weak self] in await self?.renewLoop() })
    }

    var now: Double { configuration.clock() }

    func sessionValid() -> Bool { state.lease != 0 && now < state.validUntil }

    private func establishSession() async throws {
        let wait = try lock.withLock { () throws -> Bool in
            if state.leaving { throw ClusterStoreError.unavailable("node \(name) is leaving the cluster") }
            if state.establishing { return true }
            state.establishing = true
            return false
        }
        if wait {
            await withCheckedContinuation { c in
                lock.withLock {
                    if state.establishing { state.sessionWaiters.append(c) } else { c.resume() }
                }
            }
            guard lock.withLock({ sessionValid() }) else { throw ClusterStoreError.unavailable("no session") }
            return
        }
        defer {
            let waiters = lock.withLock { () -> [CheckedContinuation<Void, Never>] in
                state.establishing = false
                defer { state.sessionWaiters = [] }
                return state.sessionWaiters
            }
            for w in waiters { w.resume() }
        }
        do {
            let start = now
            let (lease, ttl) = try await store.grantLease(ttl: configuration.leaseTTL)
            let since = Date().timeIntervalSince1970
            let presenters = lock.withLock { state.presenters }
            var puts: [ClusterOperation] = [.put(key: keys.nodeKey(name), value: Wire.encode(NodeValue(since: since, lease: lease, ttl: ttl)), lease: lease)]
            for (id, value) in presenters { puts.append(.put(key: keys.presenterKey(id), value: Wire.encode(value), lease: lease)) }
            // etcd takes at most 128 operations per transaction by default. The puts are the same
            // when sent again (a lost answer), and the first chunk reads where the change-record
            // key stands (a record of an earlier session may still be there).
            var at = 0
            var changeKeyRevision: Revision = 0
            while at < puts.count {
                let chunk = Array(puts[at..<min(at + 128, puts.count)])
                let read: [ClusterOperation] = at == 0 ? [.range(key: keys.changeKey, prefix: false)] : []
                let result = try await store.transaction([], success: chunk + read, failure: [])
                if at == 0 { changeKeyRevision = result.ranges.first?.first?.modRevision ?? 0 }
                at += 128
            }
            lock.withLock {
                state.lease = lease
                state.since = since
                state.validUntil = start + Double(ttl)
                state.changeKeyRevision = changeKeyRevision
            }
            reachability(true)
            wrote()
            step(node: name, "session \(lease) began (ttl \(ttl) s, \(presenters.count) presenters registered)", path: nil)
            startFlush()
        } catch {
            reachability(false, error)
            throw error
        }
    }

    /// The session ended (the lease expired while this node was paused or cut off): no right of
    /// it may be used again; a new session is made when the next access needs one.
    private func sessionLost(_ lease: LeaseID) {
        lock.withLock {
            // Another path may have made a new session already: only the lost one ends.
            guard state.lease == lease else { return }
            state.lease = 0
            state.validUntil = -1
            for r in state.rightsByKey.values { r.dead = true }
            state.rights = [:]
            state.rightsByKey = [:]
            state.idleRights = 0
            state.ops = [:]
            state.opOrder = []
            state.opsAfter = [:]
        }
    }

    private func renewLoop() async {
        let interval = max(0.2, Double(configuration.leaseTTL) / 3)
        while !Task.isCancelled {
            try? await Task.sleep(nanoseconds: UInt64(interval * 1e9))
            let (stopped, lease) = lock.withLock { (state.stopped, state.lease) }
            if stopped || Task.isCancelled { return }
            do {
                if lease == 0 {
                    try await establishSession()
                    continue
                }
                let start = now
                let ttl = try await store.keepAlive(lease)
                lock.withLock {
                    if state.lease == lease { state.validUntil = start + Double(ttl) }
                }
                reachability(true)
            } catch ClusterStoreError.leaseNotFound {
                step(node: name, "session lost: lease \(lease) expired", path: nil)
                sessionLost(lease)
                try? await establishSession()
            } catch {
                reachability(false, error)
            }
        }
    }

    /// A live session for an access, or an error (etcd unreachable, or no new session).
    private func ensureSession() async throws {
        let (valid, lease) = lock.withLock { (sessionValid(), state.lease) }
        if valid { return }
        if lease != 0 {
            // Past its validity (paused?): the lease may still be alive; ask etcd before using it.
            do {
                let start = now
                let ttl = try await store.keepAlive(lease)
                lock.withLock {
                    if state.lease == lease { state.validUntil = start + Double(ttl) }
                }
                reachability(true)
                return
            } catch ClusterStoreError.leaseNotFound {
                step(node: name, "session lost: lease \(lease) expired", path: nil)
                sessionLost(lease)
            }
        }
        try await establishSession()
    }

    // MARK: CoordinationGate

    public func admitNow(_ intents: [FileAccessIntent], origin: AccessOrigin, purpose: String?) -> (any GatePass)? {
        if let purpose, purpose.hasPrefix(Self.proxyPurpose) { return Pass.proxy() }
        let user = credentials(of: origin)
        lock.lock()
        if !state.reachable && configuration.unreachable == .local {
            state.localGrants += 1
            lock.unlock()
            step(node: name, "etcd unreachable: granted locally", path: intents.first?.path)
            return Pass(token: 0, uses: [], serial: 0, asked: [])
        }
        defer { lock.unlock() }
        guard sessionValid(), askTargets(intents).isEmpty else { return nil }
        var uses: [(right: Right, path: ItemPath, mode: LockMode)] = []
        for intent in intents {
            guard let right = usableRight(intent.path, intent.lockMode, for: user) else { return nil }
            uses.append((right, intent.path, intent.lockMode))
        }
        var token: Revision = 0
        for use in uses {
            take(use.right, use.path, use.mode)
            token = max(token, use.right.order)
        }
        return Pass(token: token, uses: uses, serial: 0, asked: [])
    }

    public func admit(_ intents: [FileAccessIntent], origin: AccessOrigin, purpose: String?, policy: CoordinationPolicy,
                      request: RequestID, completion: @escaping @Sendable (Result<any GatePass, CoordinationError>) -> Void) {
        Task.detached { [self] in
            let result = await admitAsync(intents, origin: origin, purpose: purpose, policy: policy, request: request)
            lock.withLock { _ = state.cancelled.remove(request) }
            completion(result)
        }
    }

    public func cancel(_ request: RequestID) {
        let c = lock.withLock { () -> CheckedContinuation<KeyWaiter.Outcome, Never>? in
            state.cancelled.insert(request)
            return state.admitting[request]?.finish(.cancelled)
        }
        c?.resume(returning: .cancelled)
    }

    public func release(_ pass: any GatePass, changes: [AccessChange], origin: AccessOrigin) {
        guard let pass = pass as? Pass, !pass.isProxy else { return }
        lock.lock()
        // Presenters follow the move here at once (before any right goes): the next access of
        // this node finds them at their new paths.
        for case .moved(let from, let to) in changes { followMove(from: from, to: to) }
        pass.released = true
        if pass.idleProbe != nil { state.probedPasses[ObjectIdentifier(pass)] = nil }
        for use in pass.uses { give(use.right.current(for: use.path), use.path, use.mode, yielded: pass.yields, appended: pass.appends) }
        if !changes.isEmpty || !pass.asked.isEmpty {
            var serial = pass.serial
            if serial == 0 {
                state.serial += 1
                serial = state.serial
            }
            // Only appended: the publisher merges and encodes the records, off the request thread.
            state.changeRecords.append(ChangeRecord(serial: serial, token: pass.fencingToken, origin: WireOrigin(origin),
                                                    changes: changes, asked: pass.asked))
            state.recordsQueued += 1
            // A presenter of another node must hear it within `recordInterval`: the publisher,
            // perhaps asleep for the longer interval, looks again.
            if !state.recordsUrgent && presentedElsewhere(changes) {
                state.recordsUrgent = true
                wakePublisher()
            }
            // The asks go with the record, and their answers too (the answering node, which
            // learns of the end from this record, leaves them to this transaction).
            for target in pass.asked {
                queue(keys.askKey(to: target, serial: serial), .delete)
                queue(keys.key("r", name, String(serial), target), .delete)
            }
        }
        // The publisher is started here only when it is not running (it is, most of the time,
        // while accesses stream: paced, it takes what they append when its interval is over).
        let start = (!state.changeRecords.isEmpty || !state.ops.isEmpty) && claimFlush()
        let marked = presentedElsewhereAt(changes)
        lock.unlock()
        if start { Task.detached { [self] in await flushLoop() } }
        if !marked.isEmpty { host?.clusterPresentedItemsMayHaveChanged(marked) }
        if !changes.isEmpty { host?.clusterChangedHere(changes) }
    }

    /// The access that has `pass` yields at wait deadlines (an unmodified program's open file,
    /// marked by the mount once granted). A write right every access of which yields, once another
    /// node's right recalled it, is put again saying so (`publishYields`): that node's write, waiting
    /// for it, goes ahead past it at its deadline instead of failing with EBUSY, as it goes ahead
    /// past an open file on one host (a program on this host keeping a document open for writing, as
    /// an office suite keeps the one it has loaded, no longer makes another host's `cp` over it fail).
    public func accessYields(_ pass: any GatePass, appending: Bool) {
        guard let pass = pass as? Pass, !pass.isProxy else { return }
        let published = lock.withLock { () -> Bool in
            guard !pass.released, !pass.yields else { return false }
            pass.yields = true
            pass.appends = appending
            var any = false
            for use in pass.uses {
                let r = use.right.current(for: use.path)
                guard !r.dead else { continue }
                r.yielding[use.path, default: 0] += 1
                if appending { r.appending[use.path, default: 0] += 1 }
                if publishYields(r) { any = true }
            }
            return any
        }
        if published { startFlush() }
    }

    /// The access that has `pass` is held by open files that may hold nobody up (held without
    /// writing, or their names no longer lead to their files), and `probe` says whether they do now. While another node's right waits for a right of this
    /// node put again with `y` (`publishYields`), that right is looked at every `idleLookInterval`
    /// (`watchIdleOpens`): put again with `i` once every access using it is held so (a program
    /// here keeping a document open, as an office suite keeps the one it has loaded), so that the
    /// waiting node's request goes ahead past it at once, as a request of this host goes ahead past
    /// such open files; put again without it when one is no longer so (it wrote) or nobody waits.
    /// `changedPast` is called once a request of another node that may have gone ahead past it so
    /// is over: the file as that request left it is not those open files' change.
    public func accessMayIdle(_ pass: any GatePass, probe: @escaping @Sendable () -> Bool, appendingAWhile: (@Sendable () -> Bool)?,
                              changedPast: @escaping @Sendable () -> Void) {
        guard let pass = pass as? Pass, !pass.isProxy else { return }
        lock.withLock {
            guard !pass.released, pass.idleProbe == nil else { return }
            pass.idleProbe = probe
            pass.appendingAWhileProbe = appendingAWhile
            pass.changedPast = changedPast
            state.probedPasses[ObjectIdentifier(pass)] = pass
            // Recalled while the open was being made: looked at from now.
            for use in pass.uses { watchIdleness(of: use.right.current(for: use.path)) }
        }
    }

    /// How often a right another node waits for is looked at while its accesses may be held
    /// without writing (`watchIdleOpens`).
    static let idleLookInterval: UInt64 = 100_000_000

    /// Looks at `r` every `idleLookInterval` while another node waits for it (with the lock held).
    func watchIdleness(of r: Right) {
        guard r.yieldsPublished, !r.dead, r.inUse > 0 else { return }
        guard state.idleWatched.updateValue(r, forKey: ObjectIdentifier(r)) == nil else { return }
        guard !state.idleWatching else {
            // A request of another node waits for it now: looked at at once, not at the next look.
            if let sleeper = state.idleSleeper {
                state.idleSleeper = nil
                sleeper.continuation.resume()
            } else {
                state.idleLookNow = true
            }
            return
        }
        state.idleWatching = true
        Task.detached { [weak self] in await self?.watchIdleOpens() }
    }

    /// Waits `idleLookInterval`, or less when a right is newly watched (`watchIdleness`).
    func idlePause() async {
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            let number = lock.withLock { () -> UInt64? in
                if state.idleLookNow {
                    state.idleLookNow = false
                    return nil
                }
                state.idleSleeps += 1
                state.idleSleeper = (state.idleSleeps, c)
                return state.idleSleeps
            }
            guard let number else { return c.resume() }
            Task.detached { [weak self] in
                try? await Task.sleep(nanoseconds: Self.idleLookInterval)
                guard let self else { return c.resume() }
                let mine = lock.withLock { () -> CheckedContinuation<Void, Never>? in
                    guard let sleeper = state.idleSleeper, sleeper.number == number else { return nil }
                    state.idleSleeper = nil
                    return sleeper.continuation
                }
                mine?.resume()
            }
        }
    }

    /// The rights of other nodes younger than `r` and in its way, as the watch shows them: each
    /// one's access waits for `r`, or went ahead past it and is not over.
    func waitingFor(_ r: Right) -> [[UInt8]] {
        state.holds.compactMap { key, hold in
            hold.node != name && hold.order > r.order && Self.conflict(r.path, r.mode, hold.path, hold.mode) ? key : nil
        }
    }

    /// The probed passes whose accesses use `r`.
    func passes(using r: Right) -> [Pass] {
        state.probedPasses.values.filter { $0.uses.contains { $0.right.current(for: $0.path) === r } }
    }

    /// Puts `r` again with `y`, with `i` when `idle`, and with `a` and `l` as published (with the
    /// lock held).
    func publishIdle(_ r: Right, _ idle: Bool) {
        r.idlePublished = idle
        queue(r.key, .put(Wire.encode(RightValue(mode: r.mode.rawValue, order: r.order, holder: r.holder, yields: true, idle: idle,
                                                 appends: r.appendsPublished, appendingAWhile: r.appendingAWhilePublished))))
    }

    /// The looks of `watchIdleness`: each asks the probes of the accesses using the rights watched
    /// (off the lock: they read the mount's open files), then puts each right again with `i` when
    /// every access using it is held without writing, or without it when it was put so and one is
    /// no longer; a right nobody elsewhere waits for any more is put again without `i` and no
    /// longer looked at (a stale `i` would let a later request past a program that wrote since).
    /// The rights of other nodes in its way while etcd had a right with `i` (`passedBy`, kept by
    /// the watch, which shows this node's puts in etcd's order with the others': their requests
    /// may have gone ahead past it) are followed until they go (the watch's delete, `apply`; or
    /// found gone here): then that request is over, and the open files using the right are told
    /// (`changedPast`) that the file as it left it is not their change, as on one host when such a
    /// request's open closes. Ends when no right is watched.
    func watchIdleOpens() async {
        while true {
            var flush = false
            var over: [@Sendable () -> Void] = []
            let probes = lock.withLock { () -> [(pass: Pass, probe: @Sendable () -> Bool, appendingAWhile: (@Sendable () -> Bool)?)]? in
                for (id, r) in state.idleWatched {
                    guard !r.dead, r.inUse > 0, !state.stopped else {
                        state.idleWatched[id] = nil
                        continue
                    }
                    if !r.passedBy.isEmpty {
                        let gone = r.passedBy.filter { state.holds[$0] == nil }
                        if !gone.isEmpty {
                            r.passedBy.subtract(gone)
                            over += passes(using: r).compactMap(\.changedPast)
                        }
                    }
                    if waitingFor(r).isEmpty {
                        if r.idlePublished {
                            publishIdle(r, false)
                            flush = true
                        }
                        state.idleWatched[id] = nil
                    }
                }
                guard !state.idleWatched.isEmpty else {
                    state.idleWatching = false
                    return nil
                }
                return state.probedPasses.values.compactMap { pass in
                    guard let probe = pass.idleProbe,
                          pass.uses.contains(where: { state.idleWatched[ObjectIdentifier($0.right.current(for: $0.path))] != nil })
                    else { return nil }
                    return (pass, probe, pass.appendingAWhileProbe)
                }
            }
            for tell in over { tell() }
            guard let probes else {
                if flush { startFlush() }
                return
            }
            let idle = Set(probes.filter { $0.probe() }.map { ObjectIdentifier($0.pass) })
            let appendingAWhile = Set(probes.filter { $0.appendingAWhile?() == true }.map { ObjectIdentifier($0.pass) })
            lock.withLock {
                func uses(of passes: Set<ObjectIdentifier>) -> [ObjectIdentifier: Int] {
                    var out: [ObjectIdentifier: Int] = [:]
                    for (id, pass) in state.probedPasses where passes.contains(id) {
                        for use in pass.uses { out[ObjectIdentifier(use.right.current(for: use.path)), default: 0] += 1 }
                    }
                    return out
                }
                let idleUses = uses(of: idle), appendingUses = uses(of: appendingAWhile)
                for (id, r) in state.idleWatched where !r.dead {
                    let now = idleUses[id] == r.inUse
                    // Once so, so until it goes: its accesses only end, and the others get older.
                    let long = r.appendingAWhilePublished || r.appendsPublished && appendingUses[id] == r.inUse
                    if now != r.idlePublished || long != r.appendingAWhilePublished {
                        r.appendingAWhilePublished = long
                        publishIdle(r, now)
                        flush = true
                    }
                }
            }
            if flush { startFlush() }
            await idlePause()
        }
    }

    public func isObservedElsewhere(_ path: ItemPath) -> Bool {
        lock.withLock {
            guard othersCount(state.presenceBelow[.root]) else { return false }
            var at: ItemPath? = path
            while let p = at {
                if othersCount(state.presentersAt[p]) { return true }
                at = p.parent
            }
            return false
        }
    }

    public func isPresentedElsewhere(_ path: ItemPath) -> Bool {
        lock.withLock { othersCount(state.presentersAt[path]) }
    }

    public var hasPresentersElsewhere: Bool {
        lock.withLock { othersCount(state.presenceBelow[.root]) }
    }

    public func presentedPathsElsewhere() -> [ItemPath] {
        lock.withLock { state.presentersAt.compactMap { path, counts in othersCount(counts) ? path : nil } }
    }

    /// Whether nodes other than this one count in `counts` (presenters, holds, by node).
    private func othersCount(_ counts: [String: Int]?) -> Bool {
        (counts ?? [:]).contains { $0.key != name && $0.value > 0 }
    }

    /// The items of `changes` another node presents (with the lock held): the file their name
    /// gives may be another one now (a file with several names finds its presented names by it).
    func presentedElsewhereAt(_ changes: [AccessChange]) -> [ItemPath] {
        guard othersCount(state.presenceBelow[.root]) else { return [] }
        return changes.flatMap(\.paths).filter { othersCount(state.presentersAt[$0]) }
    }

    /// A change this node made outside any coordinated access, told now (a new file once it
    /// outlived the save window, after its accesses ended; anything the daemon changed on its own
    /// behalf without one): a change record of its own, as an access's, with no fencing token (no
    /// right is used) and no node asked. The other nodes take it as any record: their kernels drop
    /// what they cached of the items, their stores and presenters hear of it, once.
    public func changedOutsideAccess(_ changes: [AccessChange], origin: AccessOrigin) {
        guard !changes.isEmpty else { return }
        lock.lock()
        state.serial += 1
        state.changeRecords.append(ChangeRecord(serial: state.serial, token: 0, origin: WireOrigin(origin), changes: changes, asked: []))
        state.recordsQueued += 1
        if !state.recordsUrgent && presentedElsewhere(changes) {
            state.recordsUrgent = true
            wakePublisher()
        }
        let start = claimFlush()
        let marked = presentedElsewhereAt(changes)
        lock.unlock()
        if start { Task.detached { [self] in await flushLoop() } }
        if !marked.isEmpty { host?.clusterPresentedItemsMayHaveChanged(marked) }
        host?.clusterChangedHere(changes)
    }

    // MARK: Rights (called with the lock held)

    func usableRight(_ path: ItemPath, _ mode: LockMode, for user: PresenterCredentials) -> Right? {
        var p: ItemPath? = path
        while let at = p {
            if let list = state.rights[at] {
                for r in list where r.granted && !r.recalled && !r.dead && !r.ephemeral && r.serves(user) && r.covers(path, mode) { return r }
            }
            p = at.parent
        }
        return nil
    }

    func take(_ r: Right, _ path: ItemPath, _ mode: LockMode) {
        if r.inUse == 0 && r.granted { state.idleRights -= 1 }
        r.inUse += 1
        r.uses[path, default: []].append(mode)
        r.lastUsed = now
    }

    func give(_ r: Right, _ path: ItemPath, _ mode: LockMode, yielded: Bool = false, appended: Bool = false) {
        guard !r.dead else { return }
        r.inUse -= 1
        if var modes = r.uses[path], let i = modes.firstIndex(of: mode) {
            modes.remove(at: i)
            r.uses[path] = modes.isEmpty ? nil : modes
        }
        if yielded, let n = r.yielding[path] { r.yielding[path] = n > 1 ? n - 1 : nil }
        if appended, let n = r.appending[path] { r.appending[path] = n > 1 ? n - 1 : nil }
        // The accesses left may all yield now (an explicit one ended beside an open file).
        guard r.inUse == 0 else {
            publishYields(r)
            return
        }
        if r.recalled || r.ephemeral || !r.granted {
            // Its accesses are over: what this node's processes read there now is what they read.
            startYields(yieldsBefore(r.recalledBy))
            drop(r)
        } else {
            state.idleRights += 1
            if state.idleRights > configuration.maxIdleRights { trimIdleRights() }
        }
    }

    /// Gives a right back (queued for the publisher).
    func drop(_ r: Right) {
        guard !r.dead else { return }
        r.dead = true
        if r.inUse == 0 && r.granted && !r.recalled && !r.ephemeral { state.idleRights -= 1 }
        state.rights[r.path]?.removeAll { $0 === r }
        if state.rights[r.path]?.isEmpty == true { state.rights[r.path] = nil }
        state.rightsByKey[r.key] = nil
        queueRightDelete(r)
    }

    func trimIdleRights() {
        let idle = state.rightsByKey.values.filter { $0.inUse == 0 && $0.granted && !$0.dead }.sorted { $0.lastUsed < $1.lastUsed }
        for r in idle.prefix(max(1, idle.count / 4)) { drop(r) }
    }

    /// Another node's right `hold` was put: this node's older rights in its way are recalled. An idle
    /// one goes at once; a folder right in use is split into rights on the items its accesses use
    /// (they keep its place in the order), so only accesses that really conflict are waited for.
    func recall(for hold: Hold, key: [UInt8]) -> [Yield] {
        var hit: [Right] = []
        var p: ItemPath? = hold.path
        while let at = p {
            for r in state.rights[at] ?? [] where r.order < hold.order && Self.conflict(r.path, r.mode, hold.path, hold.mode) { hit.append(r) }
            p = at.parent
        }
        if hold.mode == .subtreeWrite {
            for (path, list) in state.rights where hold.path.isAncestor(of: path) {
                for r in list where r.order < hold.order { hit.append(r) }
            }
        }
        // Recalled already, put again with `y`: its accesses are looked at again for this one,
        // which goes ahead past it at once if etcd has it with `i` now (the watch shows this
        // node's own puts in etcd's order too).
        if !state.probedPasses.isEmpty {
            for r in hit where !r.dead && r.recalled && r.yieldsPublished {
                watchIdleness(of: r)
                if state.holds[r.key]?.idle == true { r.passedBy.insert(key) }
            }
        }
        let live = hit.filter { !$0.dead && !$0.recalled }
        guard !live.isEmpty else { return [] }
        let yields = live.contains { $0.inUse == 0 } ? yieldsBefore([hold]) : []
        for r in live { recallRight(r, by: hold) }
        return yields
    }

    /// A version this node's readers need kept before another node changes `path` (its right of
    /// `mode` there recalled this node's).
    struct Yield {
        var path: ItemPath
        var mode: LockMode
        var node: String
        var inside: Bool { mode == .subtreeWrite }
    }

    /// The versions to keep before `holds` of other nodes, which recall rights of this node, let
    /// their changes through (with the lock held): each counted in `yielding` until kept
    /// (`startYields`), so the rights recalled meanwhile are given back only after. A read hold
    /// counts too: the right it takes away is the one a later write of that node would have
    /// recalled (and so found this node's readers).
    func yieldsBefore(_ holds: [Hold]) -> [Yield] {
        guard let host else { return [] }
        var out: [Yield] = []
        // A read too: once this node's right is gone for it, a later write there recalls nothing here.
        for hold in holds {
            guard !out.contains(where: { $0.path == hold.path && $0.mode == hold.mode }),
                  host.clusterKeepsReadVersions(at: hold.path, inside: hold.mode == .subtreeWrite) else { continue }
            out.append(Yield(path: hold.path, mode: hold.mode, node: hold.node))
        }
        state.yielding += out
        return out
    }

    /// Keeps the versions of `yields` (off the lock), then gives back the rights held back meanwhile.
    func startYields(_ yields: [Yield]) {
        guard !yields.isEmpty else { return }
        Task.detached { [self] in
            for y in yields { host?.clusterWillYield(y.path, inside: y.inside, to: y.node) }
            lock.withLock { kept(yields) }
            startFlush()
        }
    }

    /// The versions of `yields` are kept (with the lock held): the rights held back for them and
    /// for no other version still being kept are given back.
    func kept(_ yields: [Yield]) {
        for y in yields {
            if let i = state.yielding.firstIndex(where: { $0.path == y.path && $0.mode == y.mode && $0.node == y.node }) {
                state.yielding.remove(at: i)
            }
        }
        guard !state.heldDeletes.isEmpty else { return }
        var still: [(key: [UInt8], path: ItemPath, mode: LockMode)] = []
        for held in state.heldDeletes {
            if holdsUpAYield(held.path, held.mode) { still.append(held) } else { queue(held.key, .delete) }
        }
        state.heldDeletes = still
    }

    /// Whether a right of this node at `path` of `mode` is in the way of another node's change
    /// for which versions are being kept here (`yielding`).
    func holdsUpAYield(_ path: ItemPath, _ mode: LockMode) -> Bool {
        state.yielding.contains { Self.conflict(path, mode, $0.path, $0.mode) }
    }

    /// Gives this node's right `r` back to etcd (queued), unless it is in the way of another
    /// node's change for which versions are being kept for this node's readers (`yielding`): then
    /// once they are.
    func queueRightDelete(_ r: Right) {
        if holdsUpAYield(r.path, r.mode) { state.heldDeletes.append((r.key, r.path, r.mode)) } else { queue(r.key, .delete) }
    }

    /// Recalls this node's right `r`: gone at once when idle, else as soon as its accesses end (a
    /// folder right in use split along them first).
    func recallRight(_ r: Right, by hold: Hold) {
        guard !r.dead && !r.recalled else { return }
        r.recalled = true
        r.recalledBy.append(hold)
        if r.inUse == 0 {
            if r.granted { state.idleRights -= 1 }
            r.dead = true
            state.rights[r.path]?.removeAll { $0 === r }
            state.rightsByKey[r.key] = nil
            queueRightDelete(r)
        } else if r.mode == .subtreeWrite && r.granted && !r.uses.keys.allSatisfy({ $0 == r.path }) {
            split(r)
            for part in r.replacement.values { publishYields(part) }
        } else {
            publishYields(r)
        }
    }

    /// Puts `r` again saying that its accesses yield at wait deadlines (`RightValue.y`), when it is a
    /// granted right in use, recalled (no access takes it any more, so its accesses can only end),
    /// and every access using it yields: once so, it stays so until it goes, so another node that
    /// reads it so, however late, may go ahead past it: a write right at its deadline, a read right
    /// (programs' files open for reading) at once for an append or a change of names
    /// (`CoordinationPolicy.passesYieldingReaders`). Returns whether it was queued (with the lock
    /// held; the caller makes the publisher run).
    ///
    /// Passing it, the other node's change may land while this node's accesses still have the file
    /// open: so first the versions this node's readers read there are kept (`yieldsBefore`, as
    /// when the right goes), and only then is it put so (the rights given back meanwhile held, as
    /// there). Else a reader here (`sed -i` reading the document) passed by the other node's save
    /// would find, at its own late save, theirs but no base.
    @discardableResult
    func publishYields(_ r: Right) -> Bool {
        guard r.recalled, r.granted, !r.dead, !r.yieldsPublished, !r.keepingReadVersions, r.inUse > 0,
              r.yielding.values.reduce(0, +) == r.inUse else { return false }
        if !r.readVersionsKept {
            r.readVersionsKept = true
            let keeps = yieldsBefore(r.recalledBy)
            if !keeps.isEmpty {
                r.keepingReadVersions = true
                Task.detached { [self] in
                    for y in keeps { host?.clusterWillYield(y.path, inside: y.inside, to: y.node) }
                    lock.withLock {
                        r.keepingReadVersions = false
                        publishYields(r)
                        kept(keeps)
                    }
                    startFlush()
                }
                return false
            }
        }
        r.yieldsPublished = true
        // Every access using it only appends (a log being written): reads elsewhere pass it at once.
        r.appendsPublished = r.mode != .read && r.appending.values.reduce(0, +) == r.inUse
        queue(r.key, .put(Wire.encode(RightValue(mode: r.mode.rawValue, order: r.order, holder: r.holder, yields: true,
                                                 appends: r.appendsPublished))))
        if !state.probedPasses.isEmpty { watchIdleness(of: r) }
        return true
    }

    /// This node's rights `fresh`, just taken in etcd, are recalled by any younger conflicting right
    /// of another node the watch has shown already. The watch may deliver such a right before the
    /// transaction that took `fresh` has answered here: `recall(for:)` then found nothing to
    /// recall, and the right, kept idle after its access, held the other node's access up until its
    /// wait deadline (EBUSY for a rename of a document both nodes save at once).
    func recallByYoungerHolds(_ fresh: [Right]) {
        guard !fresh.isEmpty, state.holdsBelow[.root]?.contains(where: { $0.key != name }) == true else { return }
        for hold in state.holds.values where hold.node != name {
            for r in fresh where !r.dead && !r.recalled && r.order < hold.order && Self.conflict(r.path, r.mode, hold.path, hold.mode) {
                recallRight(r, by: hold) // in use: what its readers need is kept when its access ends
            }
        }
    }

    func split(_ r: Right) {
        r.dead = true
        state.rights[r.path]?.removeAll { $0 === r }
        state.rightsByKey[r.key] = nil
        queueRightDelete(r)
        for (path, modes) in r.uses {
            let mode = modes.max { $0.rank < $1.rank } ?? .read
            state.serial += 1
            let key = keys.rightKey(path, serial: state.serial)
            let part = Right(key: key, path: path, mode: mode, order: r.order, holder: r.holder)
            part.granted = true
            part.recalled = true
            part.inUse = modes.count
            part.uses = [path: modes]
            if let n = r.yielding[path] { part.yielding = [path: n] }
            if let n = r.appending[path] { part.appending = [path: n] }
            part.recalledBy = r.recalledBy
            r.replacement[path] = part
            state.rights[path, default: []].append(part)
            state.rightsByKey[key] = part
            queue(key, .put(Wire.encode(RightValue(mode: mode.rawValue, order: r.order, holder: r.holder))))
        }
    }

    static func conflict(_ a: ItemPath, _ ma: LockMode, _ b: ItemPath, _ mb: LockMode) -> Bool {
        if a == b { return !(ma == .read && mb == .read) }
        if a.isAncestor(of: b) { return ma == .subtreeWrite }
        if b.isAncestor(of: a) { return mb == .subtreeWrite }
        return false
    }

    /// Nodes (not this one) with presenters that `intents` must ask first.
    func askTargets(_ intents: [FileAccessIntent]) -> Set<String> {
        var out = Set<String>()
        if state.presenceBelow.isEmpty { return out }
        func addAtOrBelow(_ p: ItemPath) { for (n, c) in state.presenceBelow[p] ?? [:] where c > 0 && n != name { out.insert(n) } }
        func addAt(_ p: ItemPath) { for (n, c) in state.presentersAt[p] ?? [:] where c > 0 && n != name { out.insert(n) } }
        for intent in intents {
            switch intent.kind {
            case .reading(let o):
                if !o.contains(.immediatelyAvailableMetadataOnly) { addAtOrBelow(intent.path) }
            case .writing(let o):
                if o.contains(.contentIndependentMetadataOnly) { continue }
                if intent.lockMode == .subtreeWrite { addAtOrBelow(intent.path) } else { addAt(intent.path) }
                if intent.isDeleting {
                    var p = intent.path.parent
                    while let at = p {
                        addAt(at)
                        p = at.parent
                    }
                }
            }
        }
        return out
    }

    // MARK: Admission (the slow path)

    /// `folderRights: false`: the items' rights only (an admission that gave back a folder right,
    /// `startedAt` its start).
    private func admitAsync(_ intents: [FileAccessIntent], origin: AccessOrigin, purpose: String?, policy: CoordinationPolicy,
                            request: RequestID, sessionsLeft: Int = 2, folderRights: Bool = true,
                            startedAt: Double? = nil) async -> Result<any GatePass, CoordinationError> {
        if let purpose, purpose.hasPrefix(Self.proxyPurpose) { return .success(Pass.proxy()) }
        // Deadlines run on the monotonic clock (the session's clock may be a test's).
        let started = startedAt ?? ClusterConfiguration.monotonicSeconds()
        let retryUntil = started + max(policy.waitDeadline.map(Self.seconds) ?? 0, configuration.failoverWait)
        let user = credentials(of: origin)
        let permissions = coordinator?.presenterPermissions
        do {
            try await retrying(until: retryUntil, request) { try await self.ensureSession() }
        } catch {
            return unreachable(request, error)
        }
        // The rights it holds already, and the ones to get.
        var uses: [(right: Right, path: ItemPath, mode: LockMode)] = []
        var wanted: [(path: ItemPath, mode: LockMode, use: ItemPath, useMode: LockMode)] = []
        let (lease, exempt, serial) = lock.withLock { () -> (LeaseID, Set<String>, UInt64) in
            for intent in intents {
                if let r = usableRight(intent.path, intent.lockMode, for: user) {
                    take(r, intent.path, intent.lockMode)
                    uses.append((r, intent.path, intent.lockMode))
                } else {
                    let (p, m) = folderRights ? rightToTake(intent.path, intent.lockMode) : (intent.path, intent.lockMode)
                    wanted.append((p, m, intent.path, intent.lockMode))
                }
            }
            // A presenter saving for another node's ask is not held up by that node's right.
            let exempt = origin.presenterID != nil ? Set(state.unansweredProxies.filter { $0.value > 0 }.keys) : []
            state.serial += 1
            return (state.lease, exempt, state.serial)
        }
        var fresh: [Right] = []
        var grantRevision: Revision = 0
        func giveBack() {
            lock.withLock {
                for use in uses { give(use.right.current(for: use.path), use.path, use.mode) }
                for r in fresh where r.inUse == 0 { drop(r) }
            }
            startFlush()
        }
        if !wanted.isEmpty {
            var ops: [ClusterOperation] = []
            var keysFor: [[UInt8]] = []
            lock.withLock {
                for w in wanted {
                    state.serial += 1
                    let key = keys.rightKey(w.path, serial: state.serial)
                    keysFor.append(key)
                    ops.append(.put(key: key, value: Wire.encode(RightValue(mode: w.mode.rawValue, order: nil, holder: user)), lease: lease))
                }
            }
            let ranges = wanted.flatMap { conflictRanges($0.path, $0.mode) }
            // Guarded, so it can be sent again when an answer was lost (a member or the leader
            // gone mid-call): the keys are new, so a first put finds none of them; finding them,
            // an earlier attempt put them, and their create revision is the right's order.
            let fresh0 = keysFor.map { Compare(key: $0, .equal, .createRevision(0)) }
            let readBack = keysFor.map { ClusterOperation.range(key: $0, prefix: false) }
            var order: Revision = 0
            var found: [[KeyValue]] = []
            do {
                let success = ops + ranges
                let result = try await retrying(until: retryUntil, request) {
                    try await self.store.transaction(fresh0, success: success, failure: readBack + ranges)
                }
                wrote()
                if result.succeeded {
                    order = result.revision
                    grantRevision = order
                    found = result.ranges
                } else {
                    let mine = result.ranges.prefix(keysFor.count).compactMap(\.first)
                    guard mine.count == keysFor.count, let created = mine.first?.createRevision else {
                        throw ClusterStoreError.unavailable("this node's right went while it was being taken")
                    }
                    order = created
                    grantRevision = result.revision
                    found = Array(result.ranges.dropFirst(keysFor.count))
                }
            } catch {
                // An attempt whose answer was lost may have put them: they go again.
                lock.withLock { for k in keysFor { queue(k, .delete) } }
                giveBack()
                if case ClusterStoreError.leaseNotFound = error {
                    // The session ended (etcd was away longer than the lease): a new one, again.
                    sessionLost(lease)
                    if sessionsLeft > 0 {
                        return await admitAsync(intents, origin: origin, purpose: purpose, policy: policy, request: request,
                                                sessionsLeft: sessionsLeft - 1)
                    }
                }
                return unreachable(request, error)
            }
            lock.withLock {
                for (i, w) in wanted.enumerated() {
                    let r = Right(key: keysFor[i], path: w.path, mode: w.mode, order: order, holder: user)
                    r.ephemeral = !exempt.isEmpty
                    state.rights[w.path, default: []].append(r)
                    state.rightsByKey[r.key] = r
                    fresh.append(r)
                    take(r, w.use, w.useMode)
                    uses.append((r, w.use, w.useMode))
                }
                recallByYoungerHolds(fresh)
            }
            // Read rights of other users in the way that could not hold this access up on one host.
            var passed: [RightInTheWay] = []
            // Rights of programs' open files that hold this access up not at all: files open for
            // reading an append or a change of names, files that only append a read.
            var openFilesPassed: [RightInTheWay] = []
            // Gone ahead past another node's right at the wait deadline.
            var wentPast = false
            while true {
                let inTheWay = conflicts(found, wanted: wanted, order: order, exempt: exempt)
                if inTheWay.isEmpty {
                    passed = []
                    openFilesPassed = []
                    break
                }
                let holding = inTheWay.filter { Self.holdsUp($0.mode, of: $0.holder, intents, of: origin, permissions) }
                // Another node's files open for reading (a read right put again with `y`: every
                // access using it a program's open file) hold up no append and no change of names,
                // and its files that only append (a write right with `a`) no read, as on one host
                // (docs/semantics.md, "Waits and deadlines").
                openFilesPassed = holding.filter { Self.passes(policy, $0.mode, yields: $0.yields, appends: $0.appends, appendingAWhile: $0.appendingAWhile) }
                let blockers = holding.filter { h in !openFilesPassed.contains { $0.key == h.key } }
                // A folder right taken while this node's watch had not yet shown another node's
                // right there (the folder looked free) waits for whatever that node uses in the
                // folder, which its access does not touch (that node's folder right, recalled, is
                // split along its accesses): it is given back and the items' rights taken instead.
                if folderRights, wanted.contains(where: { w in
                    (w.path != w.use || w.mode != w.useMode) && inTheWay.contains { b in
                        Self.conflict(w.path, w.mode, b.path, b.mode) && !Self.conflict(w.use, w.useMode, b.path, b.mode)
                    }
                }) {
                    giveBack()
                    return await admitAsync(intents, origin: origin, purpose: purpose, policy: policy, request: request,
                                            sessionsLeft: sessionsLeft, folderRights: false, startedAt: started)
                }
                passed = inTheWay.filter { b in !holding.contains { $0.key == b.key } }
                if blockers.isEmpty { break }
                // Rights whose accesses are all open files held without writing (`RightValue.i`:
                // an office suite's loaded document on that node) are gone ahead past at once by a
                // request that would go ahead past them at its deadline, as on one host.
                if policy.atWaitDeadline != .fail, blockers.allSatisfy(\.idle) {
                    wentPast = true
                    step(node: name, "went ahead without exclusion past node \(blockers[0].node)'s open files held without writing or no longer at this name",
                         path: blockers[0].path)
                    break
                }
                let outcome = await waitFor(Set(blockers.map(\.key)), seenAt: order, idleSeenAt: grantRevision, request: request,
                                            policy: policy,
                                            until: policy.waitDeadline.map { started + Self.seconds($0) })
                switch outcome {
                case .changed:
                    do {
                        let recheckUntil = max(retryUntil, ClusterConfiguration.monotonicSeconds() + configuration.failoverWait)
                        let recheck = try await retrying(until: recheckUntil, request) {
                            try await self.store.transaction([], success: ranges, failure: [])
                        }
                        found = recheck.ranges
                        // What it found gone, the watch shows too before the access goes on: the
                        // change records that went with a right (the same transaction) drop this
                        // node's caches first. The wait may have ended on another change of the
                        // blockers (a folder right split along its accesses), and the right may have
                        // gone, with its records, after that and before this read.
                        grantRevision = max(grantRevision, recheck.revision)
                    } catch {
                        giveBack()
                        return unreachable(request, error)
                    }
                    continue
                case .cancelled:
                    giveBack()
                    return .failure(.cancelled(request))
                case .timedOut:
                    // A write right whose accesses all yield (open files on that node: `RightValue.y`,
                    // as the last read shows it, or the watch since) is gone ahead past, as an open
                    // file is on one host; any other holds this access up to the end (EBUSY).
                    let writer = lock.withLock {
                        blockers.first { $0.mode != .read && !$0.yields && state.holds[$0.key]?.yields != true }
                    }
                    let deadline = policy.waitDeadline ?? .seconds(0)
                    switch policy.atWaitDeadline {
                    case .fail:
                        giveBack()
                        return .failure(.waitTimedOut(request, path: wanted[0].use, blockedBy: nil, deadline: deadline))
                    case .goAheadPastYieldingHolds where writer != nil:
                        giveBack()
                        return .failure(.cluster(request, errno: EBUSY, reason: "\(writer!.path) still held for writing by node \(writer!.node) after \(deadline)"))
                    default:
                        wentPast = true
                        step(node: name, "went ahead without exclusion past node \(blockers[0].node) after \(deadline)", path: blockers[0].path)
                    }
                }
                break
            }
            lock.withLock {
                for r in fresh where !r.dead {
                    // Taken past another node's right: this access's own, never kept for the next
                    // (which waits for that right as this one did).
                    if !passed.isEmpty || !openFilesPassed.isEmpty || wentPast { r.ephemeral = true }
                    r.granted = true
                    // A right recalled while it waited goes as soon as its access ends.
                }
            }
            for b in passed {
                step(node: name, "not held up by node \(b.node)'s read of uid \(b.holder?.uid ?? 0), who could not make this access's writes",
                     path: b.path)
            }
            for b in openFilesPassed {
                step(node: name, "not held up by node \(b.node)'s files open for \(b.mode == .read ? "reading" : "appending")", path: b.path)
            }
        }
        let token = uses.map(\.right.order).max() ?? 0
        // Presenters on other nodes, as of the revision of the rights just taken (or of the last
        // look at the rights in their way): a presenter another node put before them is asked,
        // although the watch may not have shown it yet when etcd answered (a write right after a
        // `present` elsewhere went unasked); and the change records of the rights found gone are
        // applied here (this node's caches dropped) before the access goes on.
        if grantRevision > 0 { await watchReaches(grantRevision, within: max(1, configuration.failoverWait)) }
        let targets = lock.withLock { askTargets(intents) }
        if targets.isEmpty { return .success(Pass(token: token, uses: uses, serial: serial, asked: [])) }
        let ask = AskValue(intents: intents.map(WireIntent.init), origin: WireOrigin(origin), token: token)
        let wait = AskWait(remaining: targets)
        lock.withLock { state.askWaits[serial] = wait }
        let askKeys = targets.sorted().map { keys.askKey(to: $0, serial: serial) }
        let askUntil = max(retryUntil, ClusterConfiguration.monotonicSeconds() + configuration.failoverWait)
        // The ask comes after this node's change records in etcd's order, so the asked node has
        // followed them (a move above all: its presenters at their new paths) when it runs it.
        await recordsInEtcd(until: askUntil)
        do {
            let ops = askKeys.map { ClusterOperation.put(key: $0, value: Wire.encode(ask), lease: lease) }
            // Guarded as the rights are: sent again, it finds its keys and puts nothing twice.
            let guardNew = [Compare(key: askKeys[0], .equal, .createRevision(0))]
            _ = try await retrying(until: askUntil, request) { try await self.store.transaction(guardNew, success: ops, failure: []) }
        } catch {
            lock.withLock {
                _ = state.askWaits.removeValue(forKey: serial)
                for k in askKeys { queue(k, .delete) }
            }
            giveBack()
            if case ClusterStoreError.leaseNotFound = error {
                sessionLost(lease)
                if sessionsLeft > 0 {
                    return await admitAsync(intents, origin: origin, purpose: purpose, policy: policy, request: request,
                                            sessionsLeft: sessionsLeft - 1)
                }
            }
            return unreachable(request, error)
        }
        let askBudget = policy.askDeadline * 4 + .seconds(2)
        let answered = await withCheckedContinuation { (c: CheckedContinuation<Bool, Never>) in
            let ready = lock.withLock { () -> Bool in
                if wait.remaining.isEmpty { return true }
                wait.continuation = c
                return false
            }
            if ready { c.resume(returning: true) }
            let seconds = Double(askBudget.components.seconds) + Double(askBudget.components.attoseconds) / 1e18
            Task.detached { [self] in
                try? await Task.sleep(nanoseconds: UInt64(seconds * 1e9))
                let c = lock.withLock { () -> CheckedContinuation<Bool, Never>? in
                    defer { wait.continuation = nil }
                    return wait.continuation
                }
                c?.resume(returning: false)
            }
        }
        let refusal = lock.withLock { () -> AnswerValue? in
            state.askWaits[serial] = nil
            return wait.refusal
        }
        let pass = Pass(token: token, uses: uses, serial: serial, asked: targets.sorted())
        if let refusal {
            release(pass, changes: [], origin: origin)
            return .failure(.cluster(request, errno: refusal.errno, reason: refusal.message))
        }
        if !answered {
            step(node: name, "no answer from \(wait.remaining.sorted().joined(separator: ", ")) within \(askBudget)", path: intents.first?.path)
            if policy.onAskTimeout == .strict {
                release(pass, changes: [], origin: origin)
                return .failure(.cluster(request, errno: ETIMEDOUT, reason: "no answer from node \(wait.remaining.sorted().joined(separator: ", ")) within \(askBudget)"))
            }
        }
        return .success(pass)
    }

    /// The right to take for an access to `path` in `mode`: a tree right on its folder when nobody
    /// else holds or presents anything in it (a delegation: the next accesses there, deletions and
    /// moves too, cost no round trip); for the mount's root, which has no folder, a tree right on
    /// it when nobody else holds or presents anything at all; else the item's.
    func rightToTake(_ path: ItemPath, _ mode: LockMode) -> (ItemPath, LockMode) {
        guard configuration.folderRights else { return (path, mode) }
        func free(_ folder: ItemPath) -> Bool {
            if othersCount(state.holdsBelow[folder]) || othersCount(state.presenceBelow[folder]) { return false }
            // A folder right of another node above it would conflict anyway: take the item's then.
            var p = folder.parent
            while let at = p {
                for h in state.holds.values where h.path == at && h.node != name && h.mode == .subtreeWrite { return false }
                p = at.parent
            }
            return true
        }
        guard let folder = path.parent else { return free(path) ? (path, .subtreeWrite) : (path, mode) }
        return free(folder) ? (folder, .subtreeWrite) : (path, mode)
    }

    func conflictRanges(_ path: ItemPath, _ mode: LockMode) -> [ClusterOperation] {
        var ops: [ClusterOperation] = [.range(key: keys.rightsOn(path), prefix: true)]
        var p = path.parent
        while let at = p {
            ops.append(.range(key: keys.rightsOn(at), prefix: true))
            p = at.parent
        }
        if mode == .subtreeWrite { ops.append(.range(key: keys.rightsInside(path), prefix: true)) }
        return ops
    }

    /// Another node's right in the way of an access: its key and what it says (`Hold`).
    typealias RightInTheWay = (key: [UInt8], node: String, path: ItemPath, mode: LockMode, holder: PresenterCredentials?, yields: Bool,
                               idle: Bool, appends: Bool, appendingAWhile: Bool)

    /// The rights of other nodes, older than `order`, in the way of `wanted`.
    func conflicts(_ ranges: [[KeyValue]], wanted: [(path: ItemPath, mode: LockMode, use: ItemPath, useMode: LockMode)],
                   order: Revision, exempt: Set<String>) -> [RightInTheWay] {
        var out: [RightInTheWay] = []
        var seen = Set<[UInt8]>()
        for kv in ranges.joined() {
            guard seen.insert(kv.key).inserted, let hold = decodeHold(kv), hold.node != name, !exempt.contains(hold.node),
                  hold.order < order else { continue }
            if wanted.contains(where: { Self.conflict($0.path, $0.mode, hold.path, hold.mode) }) {
                out.append((kv.key, hold.node, hold.path, hold.mode, hold.holder, hold.yields, hold.idle, hold.appends, hold.appendingAWhile))
            }
        }
        return out
    }

    func decodeHold(_ kv: KeyValue) -> Hold? {
        guard case .right(let path, let node)? = keys.parse(kv.key), let v = Wire.decode(RightValue.self, kv.value),
              let mode = LockMode(rawValue: v.mode) else { return nil }
        return Hold(node: node, path: path, mode: mode, order: v.order ?? kv.createRevision, holder: v.holder, yields: v.y == true,
                    idle: v.y == true && v.i == true, appends: v.y == true && v.a == true,
                    appendingAWhile: v.y == true && v.a == true && v.l == true)
    }

    /// Whether an access of `policy` goes ahead at once past another node's right of `mode` whose
    /// accesses all are programs' open files (`yields`), only appending ones (`appends`), each made
    /// a second ago or more (`appendingAWhile`): a read right past an append or a change of names, a
    /// right of appends past a read, and of appends made a while ago past an append or a change of
    /// names too, as on one host.
    static func passes(_ policy: CoordinationPolicy, _ mode: LockMode, yields: Bool, appends: Bool, appendingAWhile: Bool) -> Bool {
        if mode == .read { return yields && policy.passesYieldingReaders }
        return appends && policy.passesYieldingAppenders || appendingAWhile && policy.passesYieldingReaders
    }

    /// Whether another node's right, of `mode` and recorded with `holder`, in the way of an access
    /// of `intents` by `origin` holds it up: by the rule a host applies to its own readers
    /// (``HoldUpRule``, with this node's permissions screen). A read right of another user (not
    /// root, not the access's) holds up a write only when that user could make it, a writing or
    /// `tree` right of one an access only when that user could write or replace one of its items;
    /// root's and the access's own user's rights, a right of an older node (no user recorded) and
    /// any right where there is no screen hold up.
    static func holdsUp(_ mode: LockMode, of holder: PresenterCredentials?, _ intents: [FileAccessIntent], of origin: AccessOrigin,
                        _ permissions: (any PresenterPermissions)?) -> Bool {
        guard let permissions, let holder, HoldUpRule.judges(holderUID: holder.uid, requesterUID: origin.uid) else { return true }
        return HoldUpRule.mayHoldUp(holderWrites: mode != .read, intents: intents, permissions: permissions) { holder }
    }

    /// The user an access of `origin` takes rights for: root as one (never judged), anyone else with
    /// the supplementary groups the permissions screen reads for it (`/proc/PID/status`).
    func credentials(of origin: AccessOrigin) -> PresenterCredentials {
        if origin.uid == 0 { return PresenterCredentials(uid: 0, gid: origin.gid) }
        return coordinator?.presenterPermissions?.credentials(of: origin) ?? PresenterCredentials(uid: origin.uid, gid: origin.gid)
    }

    /// `idleSeenAt`: the revision of the read that found `blockers` not all held without writing
    /// (`RightValue.i`, for an access that would go ahead past them at its deadline: not an explicit
    /// one, which fails there), or not all rights of open files the access of `policy` passes
    /// (``passes(_:_:yields:appends:appendingAWhile:)``): when the watch, past it, shows them all so, the wait
    /// ends at once.
    private func waitFor(_ blockers: Set<[UInt8]>, seenAt: Revision, idleSeenAt: Revision, request: RequestID,
                         policy: CoordinationPolicy, until deadline: Double?) async -> KeyWaiter.Outcome {
        let waiter = KeyWaiter(keys: blockers, policy: policy)
        let id = ObjectIdentifier(waiter)
        let outcome = await withCheckedContinuation { (c: CheckedContinuation<KeyWaiter.Outcome, Never>) in
            let immediate = lock.withLock { () -> KeyWaiter.Outcome? in
                if state.cancelled.contains(request) { return .cancelled }
                // Gone already (the watch is past the revision that showed them)?
                if state.watchedRevision >= seenAt && blockers.contains(where: { state.holds[$0] == nil }) { return .changed }
                if state.watchedRevision >= idleSeenAt && blockers.allSatisfy({ key in
                    state.holds[key].map {
                        $0.idle && policy.atWaitDeadline != .fail
                            || Self.passes(policy, $0.mode, yields: $0.yields, appends: $0.appends, appendingAWhile: $0.appendingAWhile)
                    } == true
                }) { return .changed }
                if !sessionValid() { return .changed }
                waiter.continuation = c
                state.waiters[id] = waiter
                state.admitting[request] = waiter
                return nil
            }
            if let immediate {
                c.resume(returning: immediate)
                return
            }
            // A slow re-check bounds what a missed wake-up could cost.
            Task.detached { [self] in
                var slept = 0.0
                while true {
                    let step = 0.5
                    try? await Task.sleep(nanoseconds: UInt64(step * 1e9))
                    slept += step
                    let timedOut = deadline.map { ClusterConfiguration.monotonicSeconds() >= $0 } ?? false
                    let c = lock.withLock { () -> CheckedContinuation<KeyWaiter.Outcome, Never>? in
                        if waiter.outcome != nil { return nil }
                        if timedOut { return waiter.finish(.timedOut) }
                        if slept >= 2 { return waiter.finish(.changed) }
                        return nil
                    }
                    if let c {
                        c.resume(returning: timedOut ? .timedOut : .changed)
                        return
                    }
                    if lock.withLock({ waiter.outcome != nil }) { return }
                }
            }
        }
        lock.withLock {
            state.waiters[id] = nil
            if state.admitting[request] === waiter { state.admitting[request] = nil }
        }
        return outcome
    }

    /// Runs `call` again while etcd cannot serve (a member lost, a leader being elected: the
    /// client's `unavailable`), until `deadline` (monotonic seconds) or the request's cancellation.
    /// Each call is bounded by the client's own timeouts. Whatever `call` changes in etcd must be
    /// safe to send twice: its answer may have been lost after etcd applied it.
    func retrying<T: Sendable>(until deadline: Double, _ request: RequestID,
                               _ call: @Sendable () async throws -> T) async throws -> T {
        var pause = 0.05
        while true {
            do {
                return try await call()
            } catch ClusterStoreError.unavailable(let message) {
                if lock.withLock({ state.cancelled.contains(request) }) { throw CoordinationError.cancelled(request) }
                let remaining = deadline - ClusterConfiguration.monotonicSeconds()
                guard remaining > 0 else { throw ClusterStoreError.unavailable(message) }
                try? await Task.sleep(nanoseconds: UInt64(min(pause, remaining) * 1e9))
                pause = min(pause * 2, 0.4)
            }
        }
    }

    static func seconds(_ d: Duration) -> Double {
        Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18
    }

    /// Records whether etcd answered; a change either way is a step (and a line in the daemon's
    /// log). A failure makes etcd unreachable `atOnce` (an access that retried for its whole wait),
    /// or once calls have failed for `failoverWait` (a renewal, the publisher, the watch: one
    /// failed call during a failover is not an outage, and under `cluster_unreachable=local` it
    /// would let accesses through unarbitrated).
    func reachability(_ ok: Bool, _ error: Error? = nil, atOnce: Bool = false) {
        if !ok, case ClusterStoreError.full(let message)? = error as? ClusterStoreError { return full(message) }
        let changed = lock.withLock { () -> Bool in
            if let error { state.lastError = String(describing: error) }
            let t = ClusterConfiguration.monotonicSeconds()
            if ok { state.failingSince = nil } else if state.failingSince == nil { state.failingSince = t }
            guard state.reachable != ok else { return false }
            if !ok && !atOnce && t - (state.failingSince ?? t) < configuration.failoverWait { return false }
            state.reachable = ok
            state.unreachableSince = ok ? nil : Date().timeIntervalSince1970
            return true
        }
        guard changed else { return }
        let policy = configuration.unreachable == .fail ? "accesses that need the cluster fail with EIO" : "accesses go on locally"
        step(node: name, ok ? "etcd reachable again" : "etcd unreachable (\(error.map { String(describing: $0) } ?? "no answer")): \(policy)", path: nil)
    }

    /// What an operator reads when etcd is full (its daemon log, `coordfs status --cluster`, the
    /// reason of an access that failed).
    public static let fullAdvice = "etcd's space quota (--quota-backend-bytes) is used up and it refuses every write until its operator frees space: compact its history (etcdctl compact REVISION; run etcd with --auto-compaction-retention), defragment (etcdctl defrag), then disarm the alarm (etcdctl alarm disarm), or raise the quota"

    /// etcd refused a write because it is full: said once (a step, so a line in the daemon's log)
    /// until a write goes through again (``wrote()``). etcd answers meanwhile: not unreachable.
    private func full(_ message: String) {
        let first = lock.withLock { () -> Bool in
            state.lastError = "etcd full: \(message)"
            defer { state.full = message }
            return state.full == nil
        }
        guard first else { return }
        let policy = configuration.unreachable == .fail ? "accesses that need the cluster fail with EIO" : "accesses go on locally"
        step(node: name, "etcd full (\(message)): \(Self.fullAdvice); \(policy)", path: nil)
    }

    /// A write of this node went through: etcd takes writes (again, after it was full).
    func wrote() {
        let wasFull = lock.withLock { () -> Bool in
            defer { state.full = nil }
            return state.full != nil
        }
        if wasFull { step(node: name, "etcd takes writes again (no longer full)", path: nil) }
    }

    private func unreachable(_ request: RequestID, _ error: Error) -> Result<any GatePass, CoordinationError> {
        let policy = configuration.unreachable
        if case CoordinationError.cancelled? = error as? CoordinationError { return .failure(.cancelled(request)) }
        reachability(false, error, atOnce: true)
        lock.withLock {
            if policy == .local { state.localGrants += 1 }
        }
        if policy == .local {
            var full = false
            if case ClusterStoreError.full? = error as? ClusterStoreError { full = true }
            step(node: name, "etcd \(full ? "full" : "unreachable") (\(error)): granted locally", path: nil)
            return .success(Pass(token: 0, uses: [], serial: 0, asked: []))
        }
        if case ClusterStoreError.full(let message)? = error as? ClusterStoreError {
            return .failure(.cluster(request, errno: EIO, reason: "etcd full (\(message)): \(Self.fullAdvice)"))
        }
        return .failure(.cluster(request, errno: EIO, reason: "etcd unreachable (\(error)); unreachable policy is fail"))
    }

    // MARK: Presenters (the event tap)

    /// Mirrors this node's presenters into etcd (registered, moved, unregistered). Called under the
    /// coordinator's lock: it only queues.
    public func record(_ event: CoordinationEvent) {
        // Every step of every access comes here: only these few take the node's lock.
        switch event.kind {
        case .presenterRegistered, .presenterUnregistered, .notified(_, .itemDidMove): break
        default: return
        }
        var changed = false
        lock.lock()
        switch event.kind {
        case .presenterRegistered(let id, let path, let owner):
            let value = PresenterValue(path: WirePath(path), uid: owner.uid)
            state.presenters[id.rawValue] = value
            queue(keys.presenterKey(id.rawValue), .put(Wire.encode(value)))
            changed = true
        case .presenterUnregistered(let id, _):
            state.presenters[id.rawValue] = nil
            queue(keys.presenterKey(id.rawValue), .delete)
            changed = true
        case .notified(let id, .itemDidMove(_, let to)):
            // Put already when the node followed the move (`followMove`): not twice.
            if var value = state.presenters[id.rawValue], value.path != WirePath(to) {
                value.path = WirePath(to)
                state.presenters[id.rawValue] = value
                queue(keys.presenterKey(id.rawValue), .put(Wire.encode(value)))
                changed = true
            }
        default:
            break
        }
        lock.unlock()
        if changed { startFlush() }
    }

    /// A move re-keys the presenters at or inside `from`, every node's, in this node's table at
    /// once (with the lock held): the node that moved the item when its access ends, every other
    /// node when it takes the move's change record from its watch, so no access of any node
    /// looks for them at their old paths meanwhile (an access to the moved document would go on
    /// without asking them). Their own node's puts, which follow, carry the same paths. This
    /// node's own presenters are put again here too (their coordinator has moved them), also those
    /// its coordinator told of the move as something else (a presenter that may not see the new
    /// path hears that the item changed, and no `itemDidMove` event comes for it).
    func followMove(from: ItemPath, to: ItemPath) {
        guard from != to, let below = state.presenceBelow[from] else { return }
        for (key, entry) in state.presenterKeys {
            guard let path = entry.path.replacingPrefix(from, with: to) else { continue }
            countPresenter(entry.node, entry.path, -1)
            state.presenterKeys[key] = (entry.node, path)
            countPresenter(entry.node, path, 1)
            if entry.node != name { host?.clusterPresentedItemsMayHaveChanged([entry.path, path]) }
        }
        guard below[name] != nil else { return }
        for (id, value) in state.presenters {
            guard let path = value.path.path?.replacingPrefix(from, with: to) else { continue }
            let moved = PresenterValue(path: WirePath(path), uid: value.uid)
            state.presenters[id] = moved
            queue(keys.presenterKey(id), .put(Wire.encode(moved)))
        }
    }

    // MARK: The publisher

    /// Queues one write of this node (with the lock held); the last op on a key wins.
    func queue(_ key: [UInt8], _ op: PendingOp) {
        if state.ops[key] == nil { state.opOrder.append(key) }
        state.ops[key] = op
        state.opsAfter[key] = state.recordsQueued
        // It may not wait for the records' interval.
        wakePublisher()
    }

    /// Wakes the paced publisher if it sleeps (with the lock held; resuming only schedules it):
    /// it looks again at what is queued and how long that may wait.
    func wakePublisher() {
        if let c = state.paceWaiter {
            state.paceWaiter = nil
            c.resume()
        }
    }

    /// Whether `changes` concern a presenter of another node, which must hear of them within
    /// `recordInterval` (with the lock held): one at or inside a changed, deleted or moved item
    /// (or at a move's destination), or at a folder above it (subitem events). Other nodes'
    /// presenters are in this node's table from its watch. Records that concern none may wait for
    /// `unpresentedRecordInterval`: what they tell other nodes is only to drop names and
    /// attributes their kernels cached without a right (docs/cluster.md, "Coherence").
    func presentedElsewhere(_ changes: [AccessChange]) -> Bool {
        guard othersCount(state.presenceBelow[.root]) else { return false }
        func concerns(_ p: ItemPath) -> Bool {
            if othersCount(state.presenceBelow[p]) { return true }
            var above = p.parent
            while let at = above {
                if othersCount(state.presentersAt[at]) { return true }
                above = at.parent
            }
            return false
        }
        return changes.contains { $0.paths.contains(where: concerns) }
    }

    /// Sends what is queued, in one transaction at a time, in order (change records before the
    /// rights that go with them, so another node sees the change before it can get the item).
    func startFlush() {
        guard lock.withLock({ claimFlush() }) else { return }
        Task.detached { [self] in await flushLoop() }
    }

    /// Whether the caller is to start the publisher (with the lock held): it was not running.
    func claimFlush() -> Bool {
        if state.flushing { return false }
        state.flushing = true
        return true
    }

    /// ``flush()``, for at most `seconds` (etcd may not answer).
    func flush(within seconds: Double) async {
        final class Once: @unchecked Sendable {
            let lock = NSLock()
            var done = false
            func claim() -> Bool { lock.withLock { defer { done = true }; return !done } }
        }
        let once = Once()
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            Task.detached { [self] in
                await flush()
                if once.claim() { c.resume() }
            }
            Task.detached {
                try? await Task.sleep(nanoseconds: UInt64(seconds * 1e9))
                if once.claim() { c.resume() }
            }
        }
    }

    /// Waits until what was queued before the call is in etcd (tests, status).
    public func flush() async {
        startFlush()
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            let done = lock.withLock { () -> Bool in
                if !state.flushing && (state.ops.isEmpty && state.changeRecords.isEmpty || state.lease == 0) { return true }
                state.flushWaiters.append(c)
                return false
            }
            if done { c.resume() }
        }
    }

    /// One batch of the publisher, kept as it was sent until etcd has it: a batch whose answer was
    /// lost is sent again as it was, guarded by where the change-record key stood before it, so its
    /// change records are never put twice (other nodes would tell their presenters twice).
    struct FlushBatch {
        var ops: [ClusterOperation]
        var records: [ChangeRecord]
        var taken: [([UInt8], PendingOp)]
        var lease: LeaseID
        /// With records: how many change records the node had queued when it took them (every
        /// one of those is in this batch or an earlier one).
        var recordsUpTo: UInt64 = 0
    }

    private func flushLoop() async {
        var inFlight: FlushBatch?
        while true {
            if inFlight == nil { await pace() }
            let next = lock.withLock { () -> (batch: FlushBatch, guardRevision: Revision, fresh: Bool)? in
                if let batch = inFlight {
                    if batch.lease == state.lease { return (batch, state.changeKeyRevision, false) }
                    // Its session ended: its keys went with it, its change records still tell
                    // other nodes what changed (sent with the next session; told twice at worst).
                    state.changeRecords = batch.records + state.changeRecords
                    state.recordsUrgent = true
                    inFlight = nil
                }
                if state.ops.isEmpty && state.changeRecords.isEmpty || state.lease == 0 {
                    state.flushing = false
                    return nil
                }
                var ops: [ClusterOperation] = []
                // At most `maxRecordBatchBytes` of records a transaction (etcd refuses a request
                // over its --max-request-bytes, 1.5 MiB by default, and a batch it refuses would be
                // sent again for ever): the rest go in the next ones, at once, and what else is
                // queued (rights given back above all, which must come after the records queued
                // before them) goes with the last part.
                let (records, rest) = ChangeRecords.split(state.changeRecords, maxBytes: configuration.maxRecordBatchBytes)
                state.changeRecords = rest
                state.recordsUrgent = !rest.isEmpty
                // Encoded after the lock is released (the request threads take it).
                if !records.isEmpty { state.lastRecordBatch = ClusterConfiguration.monotonicSeconds() }
                // The ops queued once every record before them is in this batch or an earlier one,
                // in the order they were queued: a right given back goes with the records of the
                // accesses that used it, however many records the node's accesses queue meanwhile
                // (before, it waited for the whole queue to drain, which a node streaming long
                // records faster than etcd took them never did: another node's access waited out
                // its deadline).
                let covered = state.recordsQueued - UInt64(rest.count)
                var taken: [([UInt8], PendingOp)] = []
                var n = 0
                for key in state.opOrder {
                    guard n < 127, (state.opsAfter[key] ?? 0) <= covered else { break }
                    n += 1
                    state.opsAfter[key] = nil
                    guard let op = state.ops.removeValue(forKey: key) else { continue }
                    taken.append((key, op))
                    switch op {
                    case .put(let value): ops.append(.put(key: key, value: value, lease: state.lease))
                    case .delete: ops.append(.delete(key: key, prefix: false))
                    }
                }
                state.opOrder.removeFirst(n)
                return (FlushBatch(ops: ops, records: records, taken: taken, lease: state.lease,
                                   recordsUpTo: records.isEmpty ? 0 : state.recordsQueued - UInt64(rest.count)), state.changeKeyRevision, true)
            }
            guard let next else {
                let waiters = lock.withLock { () -> [CheckedContinuation<Void, Never>] in
                    defer { state.flushWaiters = [] }
                    return state.flushWaiters
                }
                for w in waiters { w.resume() }
                return
            }
            var batch = next.batch
            let guardRevision = next.guardRevision
            if next.fresh && !batch.records.isEmpty {
                // One put of the node's change-record key, first (before the rights that go with it).
                batch.records = ChangeRecords.merged(batch.records)
                batch.ops.insert(.put(key: keys.changeKey, value: ChangeRecords.encode(batch.records), lease: batch.lease), at: 0)
            }
            do {
                // Only this node writes its change-record key: found moved, the batch is in etcd.
                let guardRecords = batch.records.isEmpty ? [] : [Compare(key: keys.changeKey, .equal, .modRevision(guardRevision))]
                let result = try await store.transaction(guardRecords, success: batch.ops,
                                                         failure: [.range(key: keys.changeKey, prefix: false)])
                inFlight = nil
                let sent = lock.withLock { () -> [CheckedContinuation<Void, Never>] in
                    if result.succeeded {
                        if !batch.records.isEmpty { state.changeKeyRevision = result.revision }
                        return recordsSent(upTo: batch.recordsUpTo)
                    } else if let kv = result.ranges.first?.first {
                        state.changeKeyRevision = kv.modRevision
                        return recordsSent(upTo: batch.recordsUpTo)
                    } else {
                        // The key is gone (its lease ended with an earlier session): not sent.
                        state.changeKeyRevision = 0
                        inFlight = batch
                        return []
                    }
                }
                for c in sent { c.resume() }
                reachability(true)
                // A full etcd still takes deletions: only a put says it takes writes again.
                if batch.ops.contains(where: { if case .put = $0 { return true } else { return false } }) { wrote() }
            } catch ClusterStoreError.leaseNotFound(let lease) {
                // The session is gone, and every key of it with it; its records wait for the next.
                inFlight = nil
                lock.withLock {
                    state.changeRecords = batch.records + state.changeRecords
                    state.recordsUrgent = true
                }
                sessionLost(lease)
            } catch {
                // Sent again as it was (newer ops on the same keys follow it), soon.
                inFlight = batch
                reachability(false, error)
                try? await Task.sleep(nanoseconds: 200_000_000)
                if lock.withLock({ state.stopped }) {
                    // Stopped while etcd did not take it: whoever waits for the flush goes on.
                    let waiters = lock.withLock { () -> [CheckedContinuation<Void, Never>] in
                        state.flushing = false
                        defer { state.flushWaiters = [] }
                        return state.flushWaiters
                    }
                    for w in waiters { w.resume() }
                    return
                }
            }
        }
    }

    /// The first `upTo` change records the node queued are in etcd: the asks that waited for them
    /// go on (with the lock held; their continuations are returned, to resume after it).
    func recordsSent(upTo: UInt64) -> [CheckedContinuation<Void, Never>] {
        guard upTo > state.recordsSent else { return [] }
        state.recordsSent = upTo
        let sent = upTo
        var ready: [CheckedContinuation<Void, Never>] = []
        state.recordWaiters.removeAll { w in
            guard w.upTo <= sent else { return false }
            if let c = w.continuation { ready.append(c) }
            w.continuation = nil
            return true
        }
        return ready
    }

    /// Waits until every change record this node queued so far is in etcd, at most until
    /// `deadline` (monotonic seconds; then the caller goes on: etcd is not answering anyway). The
    /// publisher sends them at once meanwhile, without its pacing.
    func recordsInEtcd(until deadline: Double) async {
        let waiter = lock.withLock { () -> RecordWait? in
            state.recordsSent < state.recordsQueued ? RecordWait(upTo: state.recordsQueued) : nil
        }
        guard let waiter else { return }
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            let sent = lock.withLock { () -> Bool in
                if state.recordsSent >= waiter.upTo { return true }
                waiter.continuation = c
                state.recordWaiters.append(waiter)
                // A publisher waiting for the records' interval sends them now.
                wakePublisher()
                return false
            }
            if sent {
                c.resume()
                return
            }
            startFlush()
            Task.detached { [self] in
                try? await Task.sleep(nanoseconds: UInt64(max(0, deadline - ClusterConfiguration.monotonicSeconds()) * 1e9))
                let c = lock.withLock { () -> CheckedContinuation<Void, Never>? in
                    state.recordWaiters.removeAll { $0 === waiter }
                    defer { waiter.continuation = nil }
                    return waiter.continuation
                }
                c?.resume()
            }
        }
    }

    /// Holds back a batch of change records alone until `recordInterval` after the last one was
    /// sent, so that a stream of writes costs etcd (and every node's watch) one transaction per
    /// interval rather than one per round trip; a batch whose records concern no presenter of
    /// another node (``presentedElsewhere(_:)``) waits `unpresentedRecordInterval` instead (one
    /// transaction per that interval while a node alone streams writes). Anything else queued (a
    /// right given back for another node's recall, a presenter, an answer etcd could not take at
    /// once), an ask waiting for the records, ends the wait; a record another node's presenter must
    /// hear shortens it to `recordInterval`. It sleeps once, until the interval is over or
    /// ``wakePublisher()`` wakes it: no polling (a wake-up every half millisecond cost the
    /// publisher's thread a switch each, on cores the accesses share).
    private func pace() async {
        let interval = configuration.recordInterval
        let unpresented = max(interval, configuration.unpresentedRecordInterval)
        guard unpresented > 0 else { return }
        /// Until when (monotonic seconds) the queued records may wait (with the lock held; -inf:
        /// they may not).
        func until() -> Double {
            guard state.ops.isEmpty, !state.changeRecords.isEmpty, !state.stopped, state.recordWaiters.isEmpty else { return -.infinity }
            return state.lastRecordBatch + (state.recordsUrgent ? interval : unpresented)
        }
        while true {
            let deadline = lock.withLock { until() }
            let seconds = deadline - ClusterConfiguration.monotonicSeconds()
            if seconds <= 0 { return }
            await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
                // Looked at again with the waiter set in the same hold of the lock: what was
                // queued since (an urgent record above all) is not missed.
                let now = lock.withLock { () -> Bool in
                    if until() < deadline { return true }
                    state.paceWaiter = c
                    return false
                }
                if now {
                    c.resume()
                    return
                }
                DispatchQueue.global().asyncAfter(deadline: .now() + seconds) { [self] in
                    // Whichever waiter is there now (an earlier timer's early wake-up is harmless:
                    // the loop looks again).
                    let c = lock.withLock { () -> CheckedContinuation<Void, Never>? in
                        defer { state.paceWaiter = nil }
                        return state.paceWaiter
                    }
                    c?.resume()
                }
            }
        }
    }

    // MARK: The watch

    /// Waits until the watch has shown every revision up to `revision` and their effects are done
    /// here (`doneRevision`; or `seconds` passed, or the node stopped): what this node knows of the
    /// cluster is then at least what etcd held then, and other nodes' changes up to it have dropped
    /// this node's caches.
    func watchReaches(_ revision: Revision, within seconds: Double) async {
        let waiter = RevisionWaiter()
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            let done = lock.withLock { () -> Bool in
                if state.doneRevision >= revision || state.stopped { return true }
                waiter.continuation = c
                state.revisionWaiters.append((revision, waiter))
                return false
            }
            if done { c.resume(); return }
            let timeout = Task.detached { [self] in
                try? await Task.sleep(nanoseconds: UInt64(seconds * 1e9))
                let c = lock.withLock { () -> CheckedContinuation<Void, Never>? in
                    defer { waiter.continuation = nil }
                    state.revisionWaiters.removeAll { $0.waiter === waiter }
                    return waiter.continuation
                }
                c?.resume()
            }
            let resumed = lock.withLock { () -> Bool in
                if waiter.continuation == nil { return true }
                waiter.timeout = timeout
                return false
            }
            if resumed { timeout.cancel() }
        }
    }

    /// Resumes the admissions whose revision the watch has reached.
    private func resumeRevisionWaiters() {
        let ready = lock.withLock { () -> [(CheckedContinuation<Void, Never>, Task<Void, Never>?)] in
            guard !state.revisionWaiters.isEmpty else { return [] }
            let reached = state.doneRevision, stopped = state.stopped
            var ready: [(CheckedContinuation<Void, Never>, Task<Void, Never>?)] = []
            state.revisionWaiters.removeAll { w in
                guard w.revision <= reached || stopped else { return false }
                if let c = w.waiter.continuation { ready.append((c, w.waiter.timeout)); w.waiter.continuation = nil }
                w.waiter.timeout = nil
                return true
            }
            return ready
        }
        for (c, timeout) in ready {
            timeout?.cancel()
            c.resume()
        }
    }

    private func watchLoop(from start: Revision) async {
        var from = start
        while !Task.isCancelled && !lock.withLock({ state.stopped && state.lease == 0 }) {
            do {
                for try await batch in store.watch(keys.base, prefix: true, fromRevision: from) {
                    let effects = lock.withLock { () -> Effects in
                        var effects = Effects()
                        // Change records first: a node drops its caches before anything else of
                        // the revision (an ask's end, a right's release) lets it go on.
                        let ordered = batch.events.filter { Self.isChange($0, keys) } + batch.events.filter { !Self.isChange($0, keys) }
                        for e in ordered { apply(e, revision: e.revision, &effects, initial: false) }
                        state.watchedRevision = max(state.watchedRevision, batch.revision)
                        return effects
                    }
                    reachability(true)
                    run(effects)
                    // Reached once what it changed is done here: an access waiting for the watch
                    // (`watchReaches`) goes on with the caches its change records drop dropped.
                    // Resumed before `run`, an admission that found the other node's right gone
                    // went on while this node's kernel still held the size the record dropped.
                    lock.withLock { state.doneRevision = max(state.doneRevision, batch.revision) }
                    resumeRevisionWaiters()
                    from = batch.revision + 1
                }
            } catch ClusterStoreError.compacted {
                await resync(&from)
                resumeRevisionWaiters()
            } catch ClusterStoreError.historyLost(let current) {
                await resync(&from, historyLostAt: current)
                resumeRevisionWaiters()
            } catch {
                reachability(false, error)
            }
            if Task.isCancelled { return }
            // Then the watch again from the revision after the last one seen (not from what etcd
            // has now): every change record put meanwhile, which a later put of the same key
            // overwrote (a node keeps one), is read and told.
            try? await Task.sleep(nanoseconds: 200_000_000)
        }
    }

    /// Reads the whole cluster again after etcd compacted the revisions the watch needed, and
    /// starts over from there. The change records put since the last revision seen that are still
    /// in etcd (each node's latest batch) are told as new; earlier batches are gone with the
    /// history, which a notable step says.
    ///
    /// `historyLostAt`: etcd lost its history instead (started again empty, or on an older data
    /// folder, at the same address: its revision, then, is below the last one the watch saw, so
    /// a watch from there would stay silent until etcd passed it). Every key is read as new, every
    /// change record in etcd is one this node missed, and this node's session is gone unless it
    /// was made again in this etcd already (its node key there with its lease): its rights were
    /// lost with the data, so none of them is used again (a new session, new rights).
    private func resync(_ from: inout Revision, historyLostAt current: Revision? = nil) async {
        guard let (values, revision) = try? await store.range(keys.base, prefix: true) else { return }
        let lost = current != nil
        let missedFrom = lost ? 0 : from
        if lost {
            let lease = lock.withLock { state.lease }
            let mine = values.first { $0.key == keys.nodeKey(name) }.flatMap { Wire.decode(NodeValue.self, $0.value) }
            if lease != 0 && mine?.lease != lease {
                step(node: name, "session lost: etcd lost its history (lease \(lease) with it)", path: nil)
                sessionLost(lease)
            }
        }
        let effects = lock.withLock { () -> Effects in
            var effects = Effects()
            let present = Set(values.map(\.key))
            // Keys that went while the watch was down.
            for key in state.presenterKeys.keys where !present.contains(key) { apply(.delete(key: key, modRevision: revision), revision: revision, &effects, initial: false) }
            for key in state.holds.keys where !present.contains(key) { apply(.delete(key: key, modRevision: revision), revision: revision, &effects, initial: false) }
            for n in state.nodes.keys where !present.contains(keys.nodeKey(n)) { apply(.delete(key: keys.nodeKey(n), modRevision: revision), revision: revision, &effects, initial: false) }
            for p in state.proxies.values where !present.contains(keys.key("a", name, p.from, String(p.serial))) {
                apply(.delete(key: keys.key("a", name, p.from, String(p.serial)), modRevision: revision), revision: revision, &effects, initial: false)
            }
            for kv in values where lost || state.holds[kv.key] == nil && state.presenterKeys[kv.key] == nil {
                let missed = kv.modRevision >= missedFrom && Self.isChange(.put(kv), keys)
                apply(.put(kv), revision: missed ? kv.modRevision : revision, &effects, initial: !missed)
            }
            state.watchedRevision = revision
            // Not done up to it until `run` below: after etcd lost its history, its revisions
            // start again below the ones this node reached, which must not count as done.
            state.doneRevision = min(state.doneRevision, revision - 1)
            for w in state.waiters.values { if let c = w.finish(.changed) { effects.wakes.append(c) } }
            return effects
        }
        run(effects)
        lock.withLock { state.doneRevision = revision }
        // Earlier records are gone with the history: the documents presented here are looked at.
        // This node's own presenters (its session may be new, their keys not put again yet).
        let presented = lock.withLock { state.presenters.values.compactMap(\.path.path) }
        let origin = AccessOrigin(pid: 0, uid: 0, gid: 0, executable: (lost ? "etcd history lost@" : "etcd compaction@") + name)
        for path in host?.clusterChangesMissed(at: Array(Set(presented)), origin: origin) ?? [] {
            coordinator?.announceObserved(.changed(path), origin: origin)
        }
        if lost {
            step(node: name, "etcd lost its history: its revision \(current ?? revision) is below \(from - 1), which this node's watch had reached (started again without its data?): every node's keys read again at revision \(revision); change records put before other than each node's latest were not seen", path: nil)
        } else {
            step(node: name, "etcd compacted its history past revision \(missedFrom - 1), which this node's watch had reached: changes of revisions \(missedFrom) to \(revision) other than each node's latest change records were not seen", path: nil)
        }
        from = revision + 1
    }

    static func isChange(_ e: WatchEvent, _ keys: ClusterKeys) -> Bool {
        if case .put(let kv) = e, case .change? = keys.parse(kv.key) { return true }
        return false
    }

    /// What an event makes the node do once its lock is released.
    struct Effects {
        var steps: [ClusterStep] = []
        /// Other nodes' change records, with the serials whose presenters here hear through a proxy.
        var remoteChanges: [(records: [ChangeRecord], node: String, viaProxy: Set<UInt64>)] = []
        var proxiesToStart: [Proxy] = []
        /// Proxies to end, with the changes their access announces, and whether the asking node's
        /// transaction that ended them (its change record) deleted the answer too.
        var proxiesToEnd: [(proxy: Proxy, changes: [AccessChange], answerGone: Bool)] = []
        var answers: [CheckedContinuation<Bool, Never>] = []
        var wakes: [CheckedContinuation<KeyWaiter.Outcome, Never>] = []
        var flush = false
        /// Versions to keep for this node's readers before rights recalled go back.
        var yields: [Yield] = []
        /// Open files a request of another node went ahead past, that request now over (`passedBy`).
        var changedPast: [@Sendable () -> Void] = []
    }

    /// The admissions waiting for right `key` look again (it went, or its node says they may go
    /// past it now; `passing`: only those whose access passes it now): woken with the effects
    /// (with the lock held).
    func wakeWaiters(for key: [UInt8], passing hold: Hold? = nil, _ effects: inout Effects) {
        for w in state.waiters.values where w.keys.contains(key) {
            if let hold, !(w.policy.map { Self.passes($0, hold.mode, yields: hold.yields, appends: hold.appends, appendingAWhile: hold.appendingAWhile) } ?? false) {
                continue
            }
            if let c = w.finish(.changed) { effects.wakes.append(c) }
        }
    }

    /// Takes one event into the cache (with the lock held).
    func apply(_ event: WatchEvent, revision: Revision, _ effects: inout Effects, initial: Bool) {
        let key = event.key
        guard let parsed = keys.parse(key) else { return }
        func step(_ node: String, _ what: @autoclosure () -> String, _ path: ItemPath? = nil, paths: [ItemPath]? = nil,
                  detail: String? = nil, notable: Bool = false) {
            if !initial && (state.everyStepSubscribers > 0 || notable && !state.stepSubscribers.isEmpty) {
                effects.steps.append(ClusterStep(revision: revision, node: node, what: what(), path: path, paths: paths, detail: detail))
            }
        }
        switch (parsed, event) {
        case (.node(let n), .put(let kv)):
            guard let v = Wire.decode(NodeValue.self, kv.value) else { return }
            let joined = state.nodes[n]?.lease != v.lease
            state.nodes[n] = v
            if joined { step(n, "joined (lease \(v.lease), ttl \(v.ttl) s)", notable: true) }
        case (.node(let n), .delete):
            state.nodes[n] = nil
            step(n, "left (its lease ended: its presenters, rights and asks are gone)", notable: true)
            // Asks waiting for it need no answer any more.
            for wait in state.askWaits.values where wait.remaining.remove(n) != nil && wait.remaining.isEmpty {
                if let c = wait.continuation {
                    wait.continuation = nil
                    effects.answers.append(c)
                }
            }
        case (.presenter(let n, _), .put(let kv)):
            guard let v = Wire.decode(PresenterValue.self, kv.value), let path = v.path.path else { return }
            if let old = state.presenterKeys[key] { countPresenter(old.node, old.path, -1) }
            state.presenterKeys[key] = (n, path)
            countPresenter(n, path, 1)
            if n != name { host?.clusterPresentedItemsMayHaveChanged([path]) }
            step(n, "presents", path)
            // Records waiting for the longer interval may concern it: they go within `recordInterval`.
            if n != name && !state.changeRecords.isEmpty && !state.recordsUrgent {
                state.recordsUrgent = true
                wakePublisher()
            }
        case (.presenter, .delete):
            if let old = state.presenterKeys.removeValue(forKey: key) {
                countPresenter(old.node, old.path, -1)
                if old.node != name { host?.clusterPresentedItemsMayHaveChanged([old.path]) }
                step(old.node, "no longer presents", old.path)
            }
        case (.right(let path, let n), .put(let kv)):
            guard let hold = decodeHold(kv) else { return }
            let before = state.holds[key]
            if before == nil { countHold(n, path, 1) }
            state.holds[key] = hold
            // The same right put again to say its accesses yield (`publishYields`), or are held
            // without writing (`watchIdleOpens`): nothing else changed. Requests of this node
            // waiting for it look again in the second case (they may go ahead past it now).
            if let before, before.mode == hold.mode, before.order == hold.order {
                // This node's own, now in etcd with `i`: the requests waiting for it may go past it.
                if n == name, hold.idle, !before.idle, let r = state.rightsByKey[key], state.idleWatched[ObjectIdentifier(r)] != nil {
                    r.passedBy.formUnion(waitingFor(r))
                }
                if hold.idle && !before.idle { wakeWaiters(for: key, &effects) }
                // Another node's files open for reading or appending: the requests they hold up
                // no longer (an append or a change of names; a read) go ahead now.
                if n != name, hold.yields && !before.yields || hold.appendingAWhile && !before.appendingAWhile {
                    wakeWaiters(for: key, passing: hold, &effects)
                }
                return
            }
            step(n, "holds \(Self.modeName(hold.mode)) (token \(hold.order))", path)
            if n != name {
                let before = state.ops.count
                effects.yields += recall(for: hold, key: key)
                if state.ops.count != before { effects.flush = true }
            }
        case (.right, .delete):
            // A request that may have gone ahead past open files here held without writing is over.
            for r in state.idleWatched.values where r.passedBy.remove(key) != nil {
                effects.changedPast += passes(using: r).compactMap(\.changedPast)
            }
            if let old = state.holds.removeValue(forKey: key) {
                countHold(old.node, old.path, -1)
                step(old.node, "released \(Self.modeName(old.mode)) (token \(old.order))", old.path)
            }
            wakeWaiters(for: key, &effects)
        case (.ask(let to, let from, let serial), .put(let kv)):
            let v = Wire.decode(AskValue.self, kv.value)
            let asked = v?.intents.compactMap(\.intent).map(\.path) ?? []
            step(from, "asks \(to)", asked.first, paths: asked)
            guard to == name, let v else { return }
            let intents = v.intents.compactMap(\.intent)
            guard intents.count == v.intents.count, !intents.isEmpty else { return }
            let id = "\(from)/\(serial)"
            guard state.proxies[id] == nil else { return }
            let proxy = Proxy(from: from, serial: serial, intents: intents, origin: v.origin.origin(node: from))
            state.proxies[id] = proxy
            state.unansweredProxies[from, default: 0] += 1
            effects.proxiesToStart.append(proxy)
        case (.ask(let to, let from, let serial), .delete):
            guard to == name, let proxy = state.proxies.removeValue(forKey: "\(from)/\(serial)") else { return }
            if let i = effects.proxiesToStart.firstIndex(where: { $0 === proxy }) {
                // Put and deleted in one batch (the watch reading what it missed during an
                // outage): its access is over, nothing here is asked.
                effects.proxiesToStart.remove(at: i)
                proxy.ended = true
                if !proxy.answered { state.unansweredProxies[from, default: 1] -= 1 }
                return
            }
            if !proxy.ended {
                proxy.ended = true
                effects.proxiesToEnd.append((proxy, [], false))
            }
            if !proxy.answered { state.unansweredProxies[from, default: 1] -= 1 }
        case (.answer(let from, let serial, let to), .put(let kv)):
            let v = Wire.decode(AnswerValue.self, kv.value)
            step(to, v.map { $0.errno == 0 ? "answered \(from)" : "refused \(from)" } ?? "answered \(from)",
                 detail: v.flatMap { $0.errno == 0 ? nil : $0.message })
            guard from == name, let wait = state.askWaits[serial], let v else { return }
            if v.errno != 0 && wait.refusal == nil { wait.refusal = v }
            wait.remaining.remove(to)
            if wait.remaining.isEmpty || wait.refusal != nil, let c = wait.continuation {
                wait.continuation = nil
                effects.answers.append(c)
            }
        case (.change(let n), .put(let kv)):
            // This node's own records come back only for `watch --cluster`: nothing to decode else.
            let shown = !initial && state.everyStepSubscribers > 0
            guard shown || n != name && !initial, let records = ChangeRecords.decode(kv.value) else { return }
            for r in records where shown {
                let changes = r.changes
                let what = changes.map(\.description).joined(separator: ", ")
                step(n, "did " + (what.isEmpty ? "nothing" : what) + " (token \(r.token))", nil, paths: changes.flatMap(\.paths))
            }
            guard n != name, !initial else { return }
            let queued = state.ops.count
            for r in records {
                for case .moved(let from, let to) in r.changes { followMove(from: from, to: to) }
            }
            if state.ops.count != queued { effects.flush = true }
            var viaProxy = Set<UInt64>()
            for r in records where r.asked.contains(name) {
                if let proxy = state.proxies["\(n)/\(r.serial)"], !proxy.ended {
                    proxy.ended = true
                    if proxy.access != nil { viaProxy.insert(r.serial) }
                    effects.proxiesToEnd.append((proxy, proxy.access != nil ? r.changes : [], true))
                }
            }
            effects.remoteChanges.append((records, n, viaProxy))
        default:
            break
        }
    }

    func countPresenter(_ node: String, _ path: ItemPath, _ delta: Int) {
        state.presentersAt[path, default: [:]][node, default: 0] += delta
        if state.presentersAt[path]?[node] == 0 { state.presentersAt[path]?[node] = nil }
        if state.presentersAt[path]?.isEmpty == true { state.presentersAt[path] = nil }
        Self.countBelow(&state.presenceBelow, node, path, delta)
    }

    func countHold(_ node: String, _ path: ItemPath, _ delta: Int) {
        Self.countBelow(&state.holdsBelow, node, path, delta)
    }

    static func countBelow(_ table: inout [ItemPath: [String: Int]], _ node: String, _ path: ItemPath, _ delta: Int) {
        var p: ItemPath? = path
        while let at = p {
            table[at, default: [:]][node, default: 0] += delta
            if table[at]?[node] == 0 { table[at]?[node] = nil }
            if table[at]?.isEmpty == true { table[at] = nil }
            p = at.parent
        }
    }

    static func modeName(_ m: LockMode) -> String {
        switch m {
        case .read: return "read"
        case .write: return "write"
        case .subtreeWrite: return "tree"
        }
    }

    /// Runs what events asked for, outside the lock, in order: drop caches and tell presenters of
    /// other nodes' changes, end and start proxies, wake waits.
    func run(_ effects: Effects) {
        for (records, node, viaProxy) in effects.remoteChanges {
            for r in records {
                let changes = r.changes
                guard !changes.isEmpty else { continue }
                let origin = r.origin.origin(node: node)
                let asked = viaProxy.contains(r.serial)
                let marked = lock.withLock { presentedElsewhereAt(changes) }
                if !marked.isEmpty { host?.clusterPresentedItemsMayHaveChanged(marked) }
                host?.clusterDropCaches(changes)
                let heard = host?.clusterDidChange(changes, origin: origin, asked: asked) ?? []
                // Presenters asked through a proxy hear it from the proxy's release, after their
                // own asks; the others now (but what they heard already, from the mount's watcher).
                if !asked { for c in changes where !heard.contains(c) { coordinator?.announceObserved(c, origin: origin) } }
            }
        }
        for end in effects.proxiesToEnd { endProxy(end.proxy, end.changes, answerGone: end.answerGone) }
        for proxy in effects.proxiesToStart { startProxy(proxy) }
        for c in effects.answers { c.resume(returning: true) }
        for c in effects.wakes { c.resume(returning: .changed) }
        for tell in effects.changedPast { tell() }
        startYields(effects.yields)
        if effects.flush { startFlush() }
        if !effects.steps.isEmpty {
            let subscribers = lock.withLock { Array(state.stepSubscribers.values) }
            // In etcd's order: a batch spans revisions, and its change records were applied first.
            let ordered = effects.steps.enumerated().sorted { ($0.element.revision, $0.offset) < ($1.element.revision, $1.offset) }.map(\.element)
            for s in ordered { for sub in subscribers where !sub.notableOnly || s.isNotable { sub.continuation.yield(s) } }
        }
    }

    private func startProxy(_ proxy: Proxy) {
        guard let coordinator else { return }
        coordinator.coordinate(proxy.intents, origin: proxy.origin, purpose: Self.proxyPurpose + proxy.from) { [self] result in
            var answer = AnswerValue(errno: 0, message: "")
            switch result {
            case .success(let access):
                // Before `proxy.access` is set: `endProxy` ends only what began.
                host?.clusterChangeBegins(proxy.intents)
                let releaseNow = lock.withLock { () -> Bool in
                    if proxy.ended { return true }
                    proxy.access = access
                    return false
                }
                if releaseNow {
                    access.release()
                    host?.clusterChangeEnded(proxy.intents, told: false)
                    return
                }
                host?.clusterWillLetChangeThrough(proxy.intents, origin: proxy.origin)
            case .failure(let error):
                answer = AnswerValue(errno: error.posixErrorCode, message: error.description)
            }
            let lease = lock.withLock { () -> LeaseID? in
                if !proxy.answered {
                    proxy.answered = true
                    state.unansweredProxies[proxy.from, default: 1] -= 1
                }
                // An ask that ended meanwhile (its access gave up) waits for no answer.
                return proxy.ended ? nil : state.lease
            }
            if let lease { send(answer, to: proxy, lease: lease) }
        }
    }

    /// Sends the answer to another node's ask at once, beside the publisher: the asking access
    /// waits for it, and the publisher may be sending a batch (a change record, rights or answers
    /// given back), one at a time, which cost the ask a whole round trip more. It is guarded by the
    /// ask: an ask deleted meanwhile (its access ended or gave up) gets no answer, so no answer key
    /// outlives its ask. When etcd cannot take it now (or there is no session), the publisher
    /// sends it, as long as the ask is still there.
    private func send(_ answer: AnswerValue, to proxy: Proxy, lease: LeaseID) {
        let key = keys.answerKey(from: proxy.from, serial: proxy.serial)
        let value = Wire.encode(answer)
        let ask = keys.key("a", name, proxy.from, String(proxy.serial))
        Task.detached { [self] in
            // After the change records this node queued before it (a presenter's save for the
            // ask among them), sent at once for it: the asking node drops its caches first.
            await recordsInEtcd(until: ClusterConfiguration.monotonicSeconds() + configuration.failoverWait)
            if lease != 0 {
                do {
                    _ = try await store.transaction([Compare(key: ask, .greater, .createRevision(0))],
                                                    success: [.put(key: key, value: value, lease: lease)], failure: [])
                    return
                } catch {}
            }
            lock.withLock {
                if state.proxies["\(proxy.from)/\(proxy.serial)"] === proxy {
                    proxy.answerQueued = true
                    queue(key, .put(value))
                }
            }
            startFlush()
        }
    }

    /// Ends the local access run for another node's ask. `answerGone`: the asking node deleted
    /// the answer with its ask, in the transaction of its change record (one transaction per ask
    /// fewer); else (the ask deleted alone: its access gave up, its node left) the answer goes here.
    private func endProxy(_ proxy: Proxy, _ changes: [AccessChange], answerGone: Bool) {
        let (access, flush) = lock.withLock { () -> (CoordinatedAccess?, Bool) in
            if !proxy.answered {
                proxy.answered = true
                state.unansweredProxies[proxy.from, default: 1] -= 1
            }
            state.proxies["\(proxy.from)/\(proxy.serial)"] = nil
            // The answer key goes with the ask. One the publisher sent may have come after the
            // asking node's deletion: deleted here then.
            guard !answerGone || proxy.answerQueued else { return (proxy.access, false) }
            queue(keys.answerKey(from: proxy.from, serial: proxy.serial), .delete)
            return (proxy.access, true)
        }
        if flush { startFlush() }
        guard let access else { return }
        for c in changes { access.announce(c) }
        let missed = answerGone ? [] : untoldChanges(of: proxy)
        for p in missed { access.announce(.changed(p)) }
        access.release()
        host?.clusterChangeEnded(proxy.intents, told: !changes.isEmpty || !missed.isEmpty)
    }

    /// The documents presented here that another node's writing access, run here as `proxy`, may
    /// have changed with no change record to tell it: its ask went alone (its node left, its lease
    /// ended, or it was killed before its record was sent; an access that changed something deletes
    /// its asks in its record's transaction). Its writes are in the shared folder all the same, so
    /// each such document is looked at, as after a compaction: one whose file is not the one the
    /// store knew is noted as changed (a conflict for unsaved changes, else a reload) and returned,
    /// for its presenters to hear didChange. Before, they were asked to relinquish and given the
    /// document back, and never heard of the change.
    private func untoldChanges(of proxy: Proxy) -> [ItemPath] {
        let written = proxy.intents.filter(\.isWriting).map(\.path)
        guard !written.isEmpty, let host else { return [] }
        let presented = lock.withLock { state.presenters.values.compactMap(\.path.path) }
        let concerned = Set(presented.filter { p in written.contains { $0.isSameOrAncestor(of: p) } })
        guard !concerned.isEmpty else { return [] }
        let missed = host.clusterChangesMissed(at: concerned.sorted(), origin: proxy.origin)
        for p in missed {
            step(node: proxy.from, "untold change: its access ended without its change record (its node gone?); the file here had changed", path: p)
        }
        return missed
    }

    // MARK: Steps and status

    /// Every step of the cluster from now on, in etcd's order (one stream for all nodes); with
    /// `notableOnly`, only the steps that say how the cluster stands (``ClusterStep/isNotable``).
    /// While every subscriber is `notableOnly`, the steps of single accesses are not even built.
    public func steps(notableOnly: Bool = false) -> AsyncStream<ClusterStep> {
        let (stream, continuation) = AsyncStream<ClusterStep>.makeStream()
        let id = UUID()
        lock.withLock {
            state.stepSubscribers[id] = StepSubscriber(continuation: continuation, notableOnly: notableOnly)
            if !notableOnly { state.everyStepSubscribers += 1 }
        }
        continuation.onTermination = { [weak self] _ in
            guard let self else { return }
            self.lock.withLock {
                if let gone = self.state.stepSubscribers.removeValue(forKey: id), !gone.notableOnly {
                    self.state.everyStepSubscribers -= 1
                }
            }
        }
        return stream
    }

    /// A step of this node that etcd has no key for (a lost session, an unreachable etcd).
    func step(node: String, _ what: String, path: ItemPath?) {
        let (subscribers, revision) = lock.withLock { (Array(state.stepSubscribers.values), state.watchedRevision) }
        let s = ClusterStep(revision: revision, node: node, what: what, path: path)
        for sub in subscribers where !sub.notableOnly || s.isNotable { sub.continuation.yield(s) }
    }

    public func status() -> ClusterStatus {
        lock.withLock {
            var presenters: [String: [ItemPath]] = [:]
            for (_, v) in state.presenterKeys { presenters[v.node, default: []].append(v.path) }
            var holds: [String: [ClusterStatus.Hold]] = [:]
            for h in state.holds.values { holds[h.node, default: []].append(.init(path: h.path, mode: Self.modeName(h.mode), token: h.order)) }
            let names = Set(state.nodes.keys).union(presenters.keys).union(holds.keys)
            let nodes = names.sorted().map { n in
                ClusterStatus.Node(name: n, since: state.nodes[n]?.since ?? 0, lease: state.nodes[n]?.lease ?? 0,
                                   ttl: state.nodes[n]?.ttl ?? 0, presenters: (presenters[n] ?? []).sorted(),
                                   holds: (holds[n] ?? []).sorted { ($0.path, $0.token) < ($1.path, $1.token) })
            }
            return ClusterStatus(node: name, prefix: configuration.prefix, reachable: state.reachable, sessionValid: sessionValid(),
                                 unreachablePolicy: configuration.unreachable, localGrants: state.localGrants,
                                 revision: state.watchedRevision, nodes: nodes, unreachableSince: state.unreachableSince,
                                 lastError: state.lastError, full: state.full)
        }
    }
}

extension LockMode {
    var rank: Int {
        switch self {
        case .read: return 0
        case .write: return 1
        case .subtreeWrite: return 2
        }
    }
}

