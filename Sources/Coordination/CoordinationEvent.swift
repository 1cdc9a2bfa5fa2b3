/// A message the coordinator delivers to a presenter after an access.
public enum PresenterNotification: Hashable, Sendable, CustomStringConvertible {
    /// `presentedItemDidChange()`.
    case itemDidChange(ItemPath)
    /// `presentedItemDidMove(to:)`; `from` is where the presenter was.
    case itemDidMove(from: ItemPath, to: ItemPath)
    /// `presentedSubitemDidAppear(at:)`.
    case subitemDidAppear(ItemPath)
    /// `presentedSubitemDidChange(at:)`.
    case subitemDidChange(ItemPath)
    /// `presentedSubitem(at:didMoveTo:)`.
    case subitemDidMove(from: ItemPath, to: ItemPath)
    /// A subitem was deleted; `presentedSubitemDidDelete(at:)` (by default `presentedSubitemDidChange(at:)`,
    /// as Apple has no separate message).
    case subitemDeleted(ItemPath)
    /// The presented item was deleted; `presentedItemDidDelete()`.
    case itemDidDelete(ItemPath)

    public var description: String {
        switch self {
        case .itemDidChange(let p): return "item did change \(p)"
        case .itemDidMove(let a, let b): return "item did move \(a) -> \(b)"
        case .subitemDidAppear(let p): return "subitem did appear \(p)"
        case .subitemDidChange(let p): return "subitem did change \(p)"
        case .subitemDidMove(let a, let b): return "subitem did move \(a) -> \(b)"
        case .subitemDeleted(let p): return "subitem deleted \(p)"
        case .itemDidDelete(let p): return "item did delete \(p)"
        }
    }
}

/// One observable step of coordination, for the event log.
public struct CoordinationEvent: Sendable, CustomStringConvertible {
    /// What happened.
    public enum Kind: Sendable {
        /// A request arrived.
        case requested(intents: [FileAccessIntent], purpose: String?)
        /// The request waits for an earlier or conflicting access to end.
        case waiting(blockedBy: RequestID)
        /// A presenter was asked something.
        case presenterAsked(PresenterID, ask: PresenterAsk, presenterPath: ItemPath)
        /// Reads of another user than root and the presenter's own went on without asking the
        /// presenter, because that user's turn there was taken (one of its ask chains or
        /// reacquires queued or being answered: ``Coordinator/otherUserTurn(_:_:)``). `reads` is 1
        /// for the first such read of a turn (the event's request), and then how many more there
        /// were, once the turn passed (no request).
        case presenterNotAsked(PresenterID, reads: Int, presenterPath: ItemPath)
        /// A presenter answered an ask; `latencyNanos` from ask to answer.
        case presenterAnswered(PresenterID, ask: PresenterAsk, latencyNanos: UInt64)
        /// A presenter missed its deadline.
        case presenterTimedOut(PresenterID, ask: PresenterAsk, deadline: Duration)
        /// The presenter was removed while an ask to it was pending.
        case presenterGone(PresenterID, ask: PresenterAsk)
        /// A presenter answered with an error.
        case presenterFailed(PresenterID, ask: PresenterAsk, error: String)
        /// The coordination gate (a cluster) admitted the request with this fencing token; its
        /// `granted` follows.
        case fenced(token: Int64)
        /// Access granted; `waitedNanos` since the request arrived.
        case granted(intents: [FileAccessIntent], waitedNanos: UInt64)
        /// The wait deadline passed and the request goes ahead without exclusion (policy
        /// ``WaitDeadlineAction/goAhead`` or ``WaitDeadlineAction/goAheadPastYieldingHolds``); its
        /// `granted` follows.
        case wentAheadWithoutExclusion(blockedBy: RequestID?, deadline: Duration)
        /// The request ended without access (cancelled, timed out, presenter error).
        case failed(CoordinationError)
        /// The access ended; `heldNanos` since it was granted.
        case released(heldNanos: UInt64)
        /// The accessor is about to move an item (`item(at:willMoveTo:)`).
        case willMove(from: ItemPath, to: ItemPath)
        /// Something happened during the access (did change / move / delete, subitem appeared).
        case announced(AccessChange)
        /// A "did" message was queued for a presenter.
        case notified(PresenterID, PresenterNotification)
        /// A presenter's reacquirer was queued after the access.
        case reacquireScheduled(PresenterID)
        /// A presenter was registered.
        case presenterRegistered(PresenterID, path: ItemPath, owner: AccessOrigin)
        /// A presenter was unregistered.
        case presenterUnregistered(PresenterID, path: ItemPath)
    }

    /// Monotonic time (CLOCK_MONOTONIC nanoseconds) of the step.
    public let time: UInt64
    /// The request concerned, if any (registrations have none).
    public let requestID: RequestID?
    /// Who made the request (or who owns the presenter, for registrations).
    public let origin: AccessOrigin?
    /// What happened.
    public let kind: Kind

    /// The clock of `time`: CLOCK_MONOTONIC in nanoseconds.
    public static func now() -> UInt64 { MonotonicClock.now() }

    public init(time: UInt64, requestID: RequestID?, origin: AccessOrigin?, kind: Kind) {
        self.time = time
        self.requestID = requestID
        self.origin = origin
        self.kind = kind
    }

    public var description: String {
        let head = requestID.map { "\($0) " } ?? ""
        switch kind {
        case .requested(let i, let p): return head + "requested \(i)" + (p.map { " purpose=\($0)" } ?? "")
        case .waiting(let b): return head + "waiting for \(b)"
        case .presenterAsked(let p, let a, let path): return head + "asked \(p) (\(path)): \(a)"
        case .presenterNotAsked(let p, let n, let path):
            return head + "\(p) (\(path)) not asked: \(n == 1 ? "a read" : "\(n) more reads") of a user whose turn there is taken"
        case .presenterAnswered(let p, let a, let l): return head + "\(p) answered \(a) in \(l) ns"
        case .presenterTimedOut(let p, let a, let d): return head + "\(p) timed out on \(a) after \(d)"
        case .presenterGone(let p, let a): return head + "\(p) gone during \(a)"
        case .presenterFailed(let p, let a, let e): return head + "\(p) failed \(a): \(e)"
        case .fenced(let t): return head + "fencing token \(t)"
        case .granted(let i, let w): return head + "granted \(i) after \(w) ns"
        case .wentAheadWithoutExclusion(let b, let d):
            return head + "went ahead without exclusion after \(d)" + (b.map { " past \($0)" } ?? "")
        case .failed(let e): return head + "failed: \(e)"
        case .released(let h): return head + "released after \(h) ns"
        case .willMove(let a, let b): return head + "will move \(a) -> \(b)"
        case .announced(let c): return head + "did: \(c)"
        case .notified(let p, let n): return head + "told \(p): \(n)"
        case .reacquireScheduled(let p): return head + "reacquire \(p)"
        case .presenterRegistered(let p, let path, let o): return "registered \(p) at \(path) for \(o)"
        case .presenterUnregistered(let p, let path): return "unregistered \(p) at \(path)"
        }
    }
}

/// Where the coordinator sends its events. Installed by the daemon (the event log).
///
/// `record` is called synchronously while the coordinator holds its lock, so that events of one
/// request arrive in order: it must be cheap, must not block, and must not call back into the
/// coordinator.
public protocol CoordinationEventSink: Sendable {
    func record(_ event: CoordinationEvent)
}

/// `sink` held by reference, for a sink that hands every event on to the next one. Calling
/// `record` through an `any CoordinationEventSink` stored in a class copies the existential first
/// (through its type's value witnesses: some 300 instructions an event, twelve events a created,
/// written and removed file); through a class-bound one it is a load and a call. A class sink is
/// itself, a value sink is boxed.
public func forwardingReference(to sink: (any CoordinationEventSink)?) -> (any CoordinationEventSink & AnyObject)? {
    guard let sink else { return nil }
    if let object = sink as? any CoordinationEventSink & AnyObject { return object }
    func box<S: CoordinationEventSink>(_ s: S) -> any CoordinationEventSink & AnyObject { BoxedEventSink(s) }
    return box(sink)
}

/// A value sink held by reference (`forwardingReference(to:)`).
final class BoxedEventSink<S: CoordinationEventSink>: CoordinationEventSink {
    let sink: S
    init(_ sink: S) { self.sink = sink }
    func record(_ event: CoordinationEvent) { sink.record(event) }
}

/// A sink that forwards every event to a closure.
public struct ClosureEventSink: CoordinationEventSink {
    private let body: @Sendable (CoordinationEvent) -> Void
    public init(_ body: @escaping @Sendable (CoordinationEvent) -> Void) { self.body = body }
    public func record(_ event: CoordinationEvent) { body(event) }
}
