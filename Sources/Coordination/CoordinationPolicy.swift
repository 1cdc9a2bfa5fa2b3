/// What a request does when a presenter misses its deadline.
public enum AskTimeoutPolicy: Hashable, Sendable {
    /// Record the timeout (an event, and ``CoordinatedAccess/timedOutPresenters``) and go on
    /// without that presenter's remaining asks.
    case proceed
    /// Fail the request with ``CoordinationError/presenterTimedOut(_:presenter:ask:deadline:)``.
    case strict
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

    public init(askDeadline: Duration = .seconds(5), onAskTimeout: AskTimeoutPolicy = .proceed,
                waitDeadline: Duration? = .seconds(60)) {
        self.askDeadline = askDeadline
        self.onAskTimeout = onAskTimeout
        self.waitDeadline = waitDeadline
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
