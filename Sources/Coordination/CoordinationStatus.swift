/// A snapshot of one coordinator: who presents what, who holds what, who waits.
public struct CoordinationStatus: Sendable {
    /// An ask that has not been answered yet.
    public struct PendingAsk: Hashable, Sendable {
        public let presenter: PresenterID
        public let ask: PresenterAsk
        public let requestID: RequestID
        /// Nanoseconds since the ask was sent.
        public let ageNanos: UInt64
    }

    /// A registered presenter.
    public struct Presenter: Sendable {
        public let id: PresenterID
        /// Where it is now (after any moves).
        public let path: ItemPath
        /// Who registered it.
        public let owner: AccessOrigin
        public let pendingAsks: [PendingAsk]
    }

    /// A held or waiting request.
    public struct Access: Sendable {
        public let id: RequestID
        public let intents: [FileAccessIntent]
        public let origin: AccessOrigin
        public let purposeIdentifier: String?
        /// `.granted`, `.askingPresenters` (holding its place) or `.waiting`.
        public let phase: CoordinatedAccess.Phase
        /// Nanoseconds since granted (held) or since requested (waiting, asking).
        public let ageNanos: UInt64
        public let pendingAsks: [PendingAsk]
        /// For a waiting request, the request it was last found waiting for.
        public let blockedBy: RequestID?
    }

    /// Registered presenters, in registration order.
    public let presenters: [Presenter]
    /// Requests holding their paths (granted, or asking presenters before the grant), in request order.
    public let held: [Access]
    /// Requests waiting for arbitration, in the order they will be considered.
    public let waiting: [Access]
}
