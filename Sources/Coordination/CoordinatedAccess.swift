import Synchronization

/// Completion of ``Coordinator/coordinate(_:origin:purpose:policy:completion:)``.
public typealias CoordinationCompletion = @Sendable (Result<CoordinatedAccess, CoordinationError>) -> Void

/// A coordination request and, once granted, the grant handle of the access.
///
/// Hold it for as long as the access lasts (an open file handle can hold a read grant for hours:
/// that costs one entry in the arbitration tree). Announce what the access did with
/// ``announce(_:)`` so the right "did" messages go out, then call ``release()`` exactly when the
/// access is over; release is idempotent. A grant that is never released blocks conflicting
/// accesses until their wait deadline.
public final class CoordinatedAccess: @unchecked Sendable, CustomStringConvertible {
    /// Where a request is in its life.
    public enum Phase: Hashable, Sendable {
        /// Waiting for conflicting (or earlier conflicting) accesses to end.
        case waiting
        /// Holding its place; presenters are being asked.
        case askingPresenters
        /// Granted: the access may proceed.
        case granted
        /// Released after the access.
        case released
        /// Ended without access (cancelled, timed out, presenter error).
        case failed
    }

    /// The request id (also the grant id).
    public let id: RequestID
    /// The intents, with paths as actually coordinated.
    public let intents: [FileAccessIntent]
    /// Who asked.
    public let origin: AccessOrigin
    /// Accesses that share a non-nil purpose identifier never block each other.
    public let purposeIdentifier: String?
    /// Further purposes whose accesses never block this one (but this one blocks theirs as any):
    /// the mount's request of a process passes the accesses of the processes that started it.
    public let sharedPurposes: [String]

    let coordinator: Coordinator
    let policy: CoordinationPolicy
    /// The access inside whose accessor this request was made (nested coordination), if known.
    let parent: CoordinatedAccess?
    let requestedAt: UInt64
    /// Set by ``yieldAtWaitDeadlines(appending:)``; read under the coordinator's lock.
    let yields = Atomic<Bool>(false)
    /// Set by ``yieldAtWaitDeadlines(appending:)`` before `yields`: the program's open file only
    /// appends (`O_APPEND` without `O_TRUNC`).
    let appends = Atomic<Bool>(false)
    /// An unmodified program's open file that only appends (``yieldAtWaitDeadlines(appending:)``).
    public var onlyAppends: Bool { appends.load(ordering: .relaxed) && yields.load(ordering: .relaxed) }

    // Everything below is guarded by the coordinator's lock (so not checked for exclusive access
    // at run time as well).
    @exclusivity(unchecked) var phase: Phase = .waiting
    @exclusivity(unchecked) var grantedAt: UInt64 = 0
    @exclusivity(unchecked) var completion: CoordinationCompletion?
    @exclusivity(unchecked) var chains: [AskChain] = []
    @exclusivity(unchecked) var openChains = 0
    @exclusivity(unchecked) var reacquirers: [(record: PresenterRecord, reacquirer: Reacquirer)] = []
    @exclusivity(unchecked) var announcements: [PendingAnnouncement] = []
    @exclusivity(unchecked) var timedOut: [PresenterID] = []
    @exclusivity(unchecked) var waitTimer: DeadlineScheduler.Token?
    @exclusivity(unchecked) var blockedBy: RequestID?
    /// The access this request is waiting for, while it waits.
    @exclusivity(unchecked) var blocker: CoordinatedAccess?
    /// Nested requests made by this access's accessor that are waiting now.
    @exclusivity(unchecked) var waitingChildren: [CoordinatedAccess] = []
    /// Waiting requests that found this one in their way; re-examined when it ends.
    @exclusivity(unchecked) var dependents: [CoordinatedAccess] = []
    /// In the coordinator's `pending` table (waiting or asking presenters).
    @exclusivity(unchecked) var isPending = false
    /// False only when the fast path saw no presenter at, above or below the (single) path at
    /// grant time: announcements about that path then have nobody to tell.
    @exclusivity(unchecked) var presentersNearby = true
    /// The arbitration tree's node of the entry of a single-intent access, while it holds one:
    /// the release takes the entry back from there instead of walking the path from the root.
    @exclusivity(unchecked) var leaf: PathNode?
    /// The first presenter id not registered yet when the access was granted: a presenter registered
    /// after that (while the access is held) is not told that the item changed or a subitem
    /// changed by it (what it read when it registered may already hold the change); moves and
    /// deletions still reach it, since they change what its path names.
    /// (Atomic, so that a holder can see without the lock whether anyone registered since: see
    /// ``presenterRegisteredSinceGrant``.)
    let presentersRegisteredBefore = Atomic<UInt64>(.max)
    /// Presenters registered after the grant (ids from `presentersRegisteredBefore` up to this one)
    /// that are told the access's changes after all, but those in `lateNotTold`: set by
    /// ``tellPresentersRegisteredSinceGrant(except:)`` when the holder knows the item changed after
    /// they registered.
    @exclusivity(unchecked) var lateToldBefore: UInt64 = 0
    @exclusivity(unchecked) var lateNotTold: Set<PresenterID> = []
    /// Where this request stands in the queue of waiting requests (``Coordinator/queuedAhead(_:of:)``):
    /// 0 when no access of its own user was in its way when it arrived, else one more than the
    /// highest rank among those (a holder counting 0). Set once, when the request takes its holds
    /// outside the fast path (-1: the fast path, which never waits).
    @exclusivity(unchecked) var queueRank: Int = -1
    /// Holders of another user judged by ``Coordinator/mayHoldUp(_:_:)``: whether each may hold
    /// this request up.
    @exclusivity(unchecked) var holdersJudged: [RequestID: Bool] = [:]
    /// What the coordination gate (a cluster) gave this access, given back at release.
    @exclusivity(unchecked) var gatePass: (any GatePass)?
    /// What the access announced, for the gate.
    @exclusivity(unchecked) var gateChanges: [AccessChange] = []

    /// The fencing token of the gate's grant (nil without a gate).
    public var fencingToken: Int64? { coordinator.lock.withLock { gatePass?.fencingToken } }

    init(id: RequestID, intents: [FileAccessIntent], origin: AccessOrigin, purpose: String?, sharing: [String] = [],
         policy: CoordinationPolicy, coordinator: Coordinator, now: UInt64, parent: CoordinatedAccess? = nil) {
        self.sharedPurposes = sharing
        self.parent = parent
        self.id = id
        self.intents = intents
        self.origin = origin
        self.purposeIdentifier = purpose
        self.policy = policy
        self.coordinator = coordinator
        self.requestedAt = now
    }

    /// Ends the access: "did" messages and reacquirers go out, waiting requests are re-examined.
    /// Calling it again, or on a request that was never granted, does nothing.
    public func release() {
        coordinator.release(self)
    }

    /// Records what the access did. Moves take effect in the presenter registry at once;
    /// messages go out at ``release()``. After release, the change is delivered immediately.
    public func announce(_ change: AccessChange) {
        coordinator.announce(change, during: self)
    }

    /// Announces that the item at `path` changed.
    public func didChange(_ path: ItemPath) { announce(.changed(path)) }
    /// Announces that the item at `from` (and everything inside it) is now at `to`.
    public func didMove(from: ItemPath, to: ItemPath) { announce(.moved(from: from, to: to)) }
    /// Records that the accessor is about to move `from` to `to` (`item(at:willMoveTo:)`; an event only).
    public func willMove(from: ItemPath, to: ItemPath) {
        coordinator.announceWillMove(from: from, to: to, during: self, origin: origin)
    }
    /// Announces that the item at `path` was deleted.
    public func didDelete(_ path: ItemPath) { announce(.deleted(path)) }
    /// Announces that a new item appeared at `path`.
    public func subitemDidAppear(_ path: ItemPath) { announce(.subitemAppeared(path)) }

    /// Lets requests whose policy is ``WaitDeadlineAction/goAheadPastYieldingHolds`` go ahead
    /// without exclusion past this access once their wait deadline passes (an unmodified program's
    /// open file, which it may keep for hours while other programs share it through their own locks).
    /// Before that deadline this access excludes as usual. In a cluster the gate hears of it too
    /// (``CoordinationGate/accessYields(_:appending:)``), so a write through another node goes ahead past it
    /// at its deadline as well.
    /// `appending`: the open file only appends (`O_APPEND` without `O_TRUNC`), so requests whose
    /// policy passes appenders (``CoordinationPolicy/passesYieldingAppenders``: a read by another
    /// program) do not wait for it at all.
    public func yieldAtWaitDeadlines(appending: Bool = false) {
        if appending { appends.store(true, ordering: .relaxed) }
        guard !yields.exchange(true, ordering: .relaxed), let gate = coordinator.gate,
              let pass = coordinator.lock.withLock({ gatePass }) else { return }
        gate.accessYields(pass, appending: appending)
    }

    /// Tells the gate, in a cluster, how to see whether the open files holding this access are held
    /// without writing now (``CoordinationGate/accessMayIdle(_:probe:appendingAWhile:changedPast:)``): another node's request
    /// waiting for this host's right then goes ahead past it at once, as a request here goes ahead
    /// past such open files (the mount's probe of the holders in its way); `changedPast` is called
    /// once such a request is over (what the file is then is not their change).
    /// `appendingAWhile`, for open files that only append: whether each was made a second ago or more.
    public func mayBeHeldIdle(_ probe: @escaping @Sendable () -> Bool, appendingAWhile: (@Sendable () -> Bool)? = nil,
                              changedPast: @escaping @Sendable () -> Void) {
        guard let gate = coordinator.gate, let pass = coordinator.lock.withLock({ gatePass }) else { return }
        gate.accessMayIdle(pass, probe: probe, appendingAWhile: appendingAWhile, changedPast: changedPast)
    }

    /// True when a presenter (anywhere) was registered after this access was granted (no lock).
    public var presenterRegisteredSinceGrant: Bool {
        presentersRegisteredBefore.load(ordering: .relaxed) < coordinator.presentersIssued.load(ordering: .relaxed)
    }

    /// True when the presenter `id` was registered after this access was granted (no lock).
    public func wasGranted(before id: PresenterID) -> Bool {
        presentersRegisteredBefore.load(ordering: .relaxed) <= id.rawValue
    }

    /// The holder saw the item change after the presenters registered since the grant (up to now)
    /// did, but for those in `except` (they registered after its last change, so what they read
    /// holds it): the access's changes are told to them too, as to the presenters registered
    /// before the grant. Call it before announcing the changes.
    public func tellPresentersRegisteredSinceGrant(except: Set<PresenterID>) {
        coordinator.lock.withLock {
            lateToldBefore = coordinator.nextPresenter
            lateNotTold = except
        }
    }

    /// Whether a presenter is told that this access changed an item (under the lock).
    func tellsChange(to id: PresenterID) -> Bool {
        id.rawValue < presentersRegisteredBefore.load(ordering: .relaxed)
            || (id.rawValue < lateToldBefore && !lateNotTold.contains(id))
    }

    /// Where the request is now.
    public var currentPhase: Phase { coordinator.lock.withLock { phase } }

    /// Presenters that missed a deadline while this access was being prepared (policy `proceed`).
    public var timedOutPresenters: [PresenterID] { coordinator.lock.withLock { timedOut } }

    /// True while a presenter ask from this request to `presenter` is outstanding.
    func hasLiveAsk(to presenter: PresenterID) -> Bool {
        for chain in chains where chain.record.id == presenter {
            if let ask = chain.current, !ask.resolved { return true }
        }
        return false
    }

    public var description: String { "\(id) \(intents) by \(origin)" }
}

/// A change recorded during an access, with what the registry looked like when it was announced.
enum PendingAnnouncement {
    case changed(ItemPath)
    case deleted(ItemPath)
    case appeared(ItemPath)
    case moved(from: ItemPath, to: ItemPath, moved: [(record: PresenterRecord, oldPath: ItemPath)], replaced: [PresenterRecord])
}

/// The asks for one presenter within one request, sent one after the other.
final class AskChain {
    let record: PresenterRecord
    let steps: [PresenterAsk]
    var index = 0
    var current: AskState?
    var finished = false
    /// The accessor's uid whose turn at its presenter the chain takes (``PresenterRecord/turns``;
    /// nil: root's, the presenter's own user's, or a presenter without credentials).
    var turn: UInt32?
    /// The chain has that turn (false while it waits for it).
    var holdsTurn = false

    init(record: PresenterRecord, steps: [PresenterAsk]) {
        self.record = record
        self.steps = steps
    }
}

/// One outstanding ask. Guarded by the coordinator's lock.
final class AskState: @unchecked Sendable {
    let request: CoordinatedAccess
    let chain: AskChain
    let kind: PresenterAsk
    let issuedAt: UInt64
    var resolved = false
    var timer: DeadlineScheduler.Token?

    init(request: CoordinatedAccess, chain: AskChain, kind: PresenterAsk, issuedAt: UInt64) {
        self.request = request
        self.chain = chain
        self.kind = kind
        self.issuedAt = issuedAt
    }
}

/// How a presenter answered.
enum AskOutcome: Sendable {
    case answered(Reacquirer?)
    case failed(any Error)
}
