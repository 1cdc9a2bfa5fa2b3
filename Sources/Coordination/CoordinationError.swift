#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// One question the coordinator puts to a presenter before an access.
public enum PresenterAsk: Hashable, Sendable, CustomStringConvertible {
    case relinquishToReader
    case relinquishToWriter
    case saveChanges
    case accommodateDeletion
    case accommodateSubitemDeletion(ItemPath)

    public var description: String {
        switch self {
        case .relinquishToReader: return "relinquish to reader"
        case .relinquishToWriter: return "relinquish to writer"
        case .saveChanges: return "save changes"
        case .accommodateDeletion: return "accommodate deletion"
        case .accommodateSubitemDeletion(let p): return "accommodate deletion of subitem \(p)"
        }
    }
}

/// Why a coordination request or a registration failed.
public enum CoordinationError: Error, Sendable, CustomStringConvertible {
    /// The request was cancelled while waiting; no accessor ran.
    case cancelled(RequestID)
    /// A presenter missed its deadline and the request's policy is ``AskTimeoutPolicy/strict``.
    case presenterTimedOut(RequestID, presenter: PresenterID, ask: PresenterAsk, deadline: Duration)
    /// A presenter answered an ask with an error; the access does not happen.
    case presenterFailed(RequestID, presenter: PresenterID, ask: PresenterAsk, underlying: any Error)
    /// Conflicting accesses did not end within the policy's wait deadline.
    case waitTimedOut(RequestID, path: ItemPath, blockedBy: RequestID?, deadline: Duration)
    /// A write that does not yield still held the item at the wait deadline (policy
    /// ``WaitDeadlineAction/goAheadPastYieldingHolds``).
    case busy(RequestID, path: ItemPath, heldBy: RequestID, deadline: Duration)
    /// Waiting would never end: the request is nested inside an access that (through other
    /// waiting requests) it would be waiting for. `heldBy` is the access in the way.
    case deadlock(RequestID, path: ItemPath, heldBy: RequestID)
    /// The request itself is malformed (for example, no intents).
    case invalidRequest(String)
    /// The presenter object is already registered with this coordinator.
    case presenterAlreadyRegistered(PresenterID)
    /// The presenter has no `presentedItemPath` to register at.
    case presenterHasNoPath
    /// The cluster (issue 19) could not admit the request: etcd unreachable under the `fail`
    /// policy (EIO), this node's session lost (EIO), or a presenter on another node refused (EBUSY)
    /// or missed its deadline (ETIMEDOUT). `errno` is what the mount replies.
    case cluster(RequestID?, errno: Int32, reason: String)

    /// The request this error ended, when there is one.
    public var requestID: RequestID? {
        switch self {
        case .cancelled(let id), .presenterTimedOut(let id, _, _, _), .presenterFailed(let id, _, _, _),
             .waitTimedOut(let id, _, _, _), .busy(let id, _, _, _), .deadlock(let id, _, _):
            return id
        case .cluster(let id, _, _):
            return id
        case .invalidRequest, .presenterAlreadyRegistered, .presenterHasNoPath:
            return nil
        }
    }

    /// The errno a filesystem front end should reply with: EINTR for a cancellation, ETIMEDOUT for a
    /// missed deadline, EBUSY when a presenter refused or a write still holds the item, EDEADLK for a nested wait that could never
    /// end, EINVAL for malformed requests.
    public var posixErrorCode: Int32 {
        switch self {
        case .cancelled: return EINTR
        case .presenterTimedOut, .waitTimedOut: return ETIMEDOUT
        case .presenterFailed, .busy: return EBUSY
        case .deadlock: return EDEADLK
        case .invalidRequest, .presenterAlreadyRegistered, .presenterHasNoPath: return EINVAL
        case .cluster(_, let errno, _): return errno
        }
    }

    public var description: String {
        switch self {
        case .cancelled(let id):
            return "\(id) cancelled while waiting"
        case .presenterTimedOut(let id, let p, let ask, let d):
            return "\(id): \(p) did not answer '\(ask)' within \(d)"
        case .presenterFailed(let id, let p, let ask, let e):
            return "\(id): \(p) failed '\(ask)': \(e)"
        case .waitTimedOut(let id, let path, let blocker, let d):
            return "\(id): \(path) still held" + (blocker.map { " by \($0)" } ?? "") + " after \(d)"
        case .busy(let id, let path, let holder, let d):
            return "\(id): \(path) still held for writing by \(holder) after \(d)"
        case .deadlock(let id, let path, let holder):
            return "\(id): waiting for \(path) would deadlock: \(holder) cannot end before this request does"
        case .invalidRequest(let why):
            return "invalid coordination request: \(why)"
        case .presenterAlreadyRegistered(let p):
            return "presenter already registered as \(p)"
        case .presenterHasNoPath:
            return "presenter has no presentedItemPath"
        case .cluster(let id, _, let reason):
            return (id.map { "\($0): " } ?? "") + "cluster: " + reason
        }
    }
}
