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
}
