/// What a request does when a presenter misses its deadline.
public enum AskTimeoutPolicy: Hashable, Sendable {
    /// Record the timeout (an event, and ``CoordinatedAccess/timedOutPresenters``) and go on
    /// without that presenter's remaining asks.
    case proceed
    /// Fail the request with ``CoordinationError/presenterTimedOut(_:presenter:ask:deadline:)``.
    case strict
}

/// What a request does when its wait deadline passes with conflicting accesses still in its way.
public enum WaitDeadlineAction: Hashable, Sendable {
    /// Fail with ``CoordinationError/waitTimedOut(_:path:blockedBy:deadline:)`` (ETIMEDOUT).
    case fail
    /// Go ahead without exclusion, whatever is in the way: the request takes its holds beside the
    /// ones it waited for, asks its presenters and is granted (recorded as such).
    case goAhead
    /// Go ahead without exclusion past readers, waiting requests and holds that yield at others'
    /// deadlines (``CoordinatedAccess/yieldAtWaitDeadlines(appending:)``: an unmodified program's open file);
    /// fail with ``CoordinationError/busy(_:path:heldBy:deadline:)`` (EBUSY) while a write that does
    /// not yield (a cooperating app's explicit coordinated write) holds the item.
    case goAheadPastYieldingHolds
}

/// The bounds on every wait of one request.
public struct CoordinationPolicy: Hashable, Sendable {
    /// How long each single ask to a presenter (relinquish, save, accommodate) may take.
    public var askDeadline: Duration
    /// What happens when an ask misses `askDeadline`.
    public var onAskTimeout: AskTimeoutPolicy
    /// How long the request may wait for conflicting accesses to end before it fails with
    /// ``CoordinationError/waitTimedOut(_:path:blockedBy:deadline:)``; nil waits as long as it takes
    /// (the caller can still cancel).
    public var waitDeadline: Duration?
    /// What happens when `waitDeadline` passes.
    public var atWaitDeadline: WaitDeadlineAction
    /// The request does not wait at all for granted reads that yield at others' wait deadlines
    /// (``CoordinatedAccess/yieldAtWaitDeadlines(appending:)``: an unmodified program's file open for
    /// reading): an append, which changes no byte such a reader could already read. It still
    /// waits for reads that do not yield (explicit coordinated reads), for writes and for the queue.
    public var passesYieldingReaders: Bool
    /// The request does not wait at all for granted writes that yield and only append
    /// (``CoordinatedAccess/yieldAtWaitDeadlines(appending:)``: an unmodified program's file open
    /// with `O_APPEND`, a log being written): a read by another program, which sees the file's
    /// old end or the new bytes, as natively. It still waits for other writes.
    public var passesYieldingAppenders: Bool

    public init(askDeadline: Duration = .seconds(5), onAskTimeout: AskTimeoutPolicy = .proceed,
                waitDeadline: Duration? = .seconds(60), atWaitDeadline: WaitDeadlineAction = .fail,
                passesYieldingReaders: Bool = false, passesYieldingAppenders: Bool = false) {
        self.askDeadline = askDeadline
        self.onAskTimeout = onAskTimeout
        self.waitDeadline = waitDeadline
        self.atWaitDeadline = atWaitDeadline
        self.passesYieldingReaders = passesYieldingReaders
        self.passesYieldingAppenders = passesYieldingAppenders
    }
}

/// Per-coordinator settings.
public struct CoordinatorConfiguration: Sendable {
    /// The policy of requests that do not bring their own.
    public var defaultPolicy: CoordinationPolicy
    /// Resolves a symbolic link for reads with ``FileCoordinator/ReadingOptions/resolvesSymbolicLink``:
    /// returns the target path, or nil when the item is not a link. Called outside any lock.
    public var symbolicLinkResolver: (@Sendable (ItemPath) -> ItemPath?)?

    public init(defaultPolicy: CoordinationPolicy = CoordinationPolicy(),
                symbolicLinkResolver: (@Sendable (ItemPath) -> ItemPath?)? = nil) {
        self.defaultPolicy = defaultPolicy
        self.symbolicLinkResolver = symbolicLinkResolver
    }
}
