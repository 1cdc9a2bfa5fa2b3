/// What a grant holds from the ``CoordinationGate``: at least its fencing token.
public protocol GatePass: AnyObject, Sendable {
    /// The token that orders this grant among all writers the gate knows of (in a cluster, the etcd
    /// revision that granted the right it uses), recorded in the event log.
    var fencingToken: Int64 { get }
}

/// Something outside the mount that must agree before an access is granted: in a cluster (issue
/// 19), the other nodes. The coordinator stays FUSE-free and etcd-free: it calls the gate before it
/// takes its own holds, and tells it when the access ends. Without a gate nothing changes.
///
/// Calls come without the coordinator's lock held, except none: the gate must never call back into
/// the coordinator synchronously from these methods (it may later, from its own tasks).
public protocol CoordinationGate: AnyObject, Sendable {
    /// The fast path: a pass at once when rights this host holds already cover `intents` and nobody
    /// elsewhere must be asked, otherwise nil (then ``admit(_:origin:purpose:policy:request:completion:)``).
    /// Never waits.
    func admitNow(_ intents: [FileAccessIntent], origin: AccessOrigin, purpose: String?) -> (any GatePass)?

    /// Gets the rights `intents` need and has whoever presents them elsewhere asked; calls
    /// `completion` once, from any thread, with a pass or the reason there is none. Bounded by
    /// `policy`'s deadlines.
    func admit(_ intents: [FileAccessIntent], origin: AccessOrigin, purpose: String?, policy: CoordinationPolicy,
               request: RequestID, completion: @escaping @Sendable (Result<any GatePass, CoordinationError>) -> Void)

    /// Ends a pending ``admit(_:origin:purpose:policy:request:completion:)`` of `request`: its
    /// completion gets ``CoordinationError/cancelled(_:)``. Does nothing for other requests.
    func cancel(_ request: RequestID)

    /// The access that had `pass` ended (or failed after the gate admitted it); `changes` is what
    /// it announced. Must not block.
    func release(_ pass: any GatePass, changes: [AccessChange], origin: AccessOrigin)

    /// The access that has `pass` lets other requests go ahead past it at their wait deadlines
    /// (``CoordinatedAccess/yieldAtWaitDeadlines(appending:)``: an unmodified program's open file): in a
    /// cluster, a write elsewhere that waited its deadline for this host's right goes ahead past it
    /// then, as it would past the open file on this host, once every access using that right does.
    /// `appending`: the open file only appends (`O_APPEND` without `O_TRUNC`), so a read elsewhere
    /// goes ahead past it at once, as here, once every access using that right does. Must not block.
    func accessYields(_ pass: any GatePass, appending: Bool)

    /// The access that has `pass` is held by open files that may be held without writing (opens
    /// for writing, neither creates nor O_TRUNC opens): `probe` says whether each is held so now
    /// (held a second, nothing written through it, its file unchanged for as long). In a cluster,
    /// a right another node waits for whose accesses all are so is put again saying so, and that
    /// node's request goes ahead past it at once, as past such open files on this host. Once that
    /// request is over, `changedPast` tells the open files that the file as it is then is not their
    /// change. Both may take the mount's locks and make system calls: never called with the gate's
    /// lock held. Must not block.
    /// `appendingAWhile`, for an access of open files that only append: whether each was made a
    /// second ago or more (a service's log): a right another node waits for whose accesses all are
    /// so is put again saying so, and an append or a change of names there goes ahead past it at
    /// once, as here.
    func accessMayIdle(_ pass: any GatePass, probe: @escaping @Sendable () -> Bool, appendingAWhile: (@Sendable () -> Bool)?,
                       changedPast: @escaping @Sendable () -> Void)

    /// Whether a presenter elsewhere (another node) presents the folder `path` or a folder above
    /// it: a new file made here inside it is told as where a presenter here presents it (once it
    /// outlives the save window, its creator's writes part of it). Never waits.
    func isObservedElsewhere(_ path: ItemPath) -> Bool

    /// Whether a presenter elsewhere presents `path` itself. Never waits.
    func isPresentedElsewhere(_ path: ItemPath) -> Bool

    /// Whether any presenter elsewhere presents anything. Never waits.
    var hasPresentersElsewhere: Bool { get }

    /// The paths presenters elsewhere present (each once). Never waits.
    func presentedPathsElsewhere() -> [ItemPath]

    /// A change made here outside any coordinated access is told now (a new file's appearance, told
    /// once it outlived the save window after its accesses ended; a change the daemon made on its
    /// own behalf; one announced after its access ended): the other nodes hear of it as of an
    /// access's changes. Never a change this host did not make (seen beside the mount, or told by
    /// another node). Must not block.
    func changedOutsideAccess(_ changes: [AccessChange], origin: AccessOrigin)
}

extension CoordinationGate {
    public func accessYields(_ pass: any GatePass, appending: Bool) {}
    public func accessMayIdle(_ pass: any GatePass, probe: @escaping @Sendable () -> Bool, appendingAWhile: (@Sendable () -> Bool)?,
                              changedPast: @escaping @Sendable () -> Void) {}
    public func isObservedElsewhere(_ path: ItemPath) -> Bool { false }
    public func isPresentedElsewhere(_ path: ItemPath) -> Bool { false }
    public var hasPresentersElsewhere: Bool { false }
    public func presentedPathsElsewhere() -> [ItemPath] { [] }
    public func changedOutsideAccess(_ changes: [AccessChange], origin: AccessOrigin) {}
}
