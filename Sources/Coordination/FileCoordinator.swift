/// Coordinated reads and writes with the names Apple users know (`NSFileCoordinator`), using
/// async/await instead of blocks and ``ItemPath`` instead of URLs.
///
/// Like Apple's, a `FileCoordinator` is meant for one operation or a few; creating one is cheap.
/// Initialised with a presenter, its accesses are made on that presenter's behalf: the presenter
/// is neither asked nor told about them.
///
/// ```swift
/// let coordinator = FileCoordinator(filePresenter: document)
/// try await coordinator.coordinate(writingItemAt: path, options: .forMerging) { path in
///     try save(to: path)
/// }
/// ```
public final class FileCoordinator: @unchecked Sendable {
    /// The arbiter this coordinator goes through.
    public let coordinator: Coordinator
    /// The presenter on whose behalf accesses are made, if any.
    public let filePresenter: (any FilePresenter)?

    private let lock = Lock()
    private var purpose: String
    private var baseOrigin: AccessOrigin
    private var inFlight: Set<RequestID> = []

    /// The access currently running in this task, so `item(at:didMoveTo:)` reaches the right grant.
    @TaskLocal static var currentAccess: CoordinatedAccess?

    /// - Parameters:
    ///   - filePresenter: accesses are made on this presenter's behalf.
    ///   - coordinator: the arbiter; ``Coordinator/shared`` unless the caller has its own.
    ///   - origin: who is asking (defaults to this process).
    public init(filePresenter: (any FilePresenter)? = nil, coordinator: Coordinator = .shared,
                origin: AccessOrigin = .currentProcess) {
        self.filePresenter = filePresenter
        self.coordinator = coordinator
        self.baseOrigin = origin
        self.purpose = Self.makePurpose()
    }

    /// Identifies this coordinator's accesses: accesses with the same purpose never block each
    /// other (so an accessor can nest coordinated calls). Unique by default; set it to share.
    public var purposeIdentifier: String {
        get { lock.withLock { purpose } }
        set { lock.withLock { purpose = newValue } }
    }

    /// Who the accesses are made by (the presenter id is added when a presenter is set).
    public var origin: AccessOrigin {
        get { lock.withLock { baseOrigin } }
        set { lock.withLock { baseOrigin = newValue } }
    }

    private static let purposeCounter = PurposeCounter()

    private static func makePurpose() -> String {
        "fc-\(AccessOrigin.currentProcess.pid)-\(purposeCounter.next())"
    }

    // MARK: Presenters (Apple's class methods, on the shared coordinator)

    /// Registers `presenter` with ``Coordinator/shared``.
    @discardableResult
    public static func addFilePresenter(_ presenter: any FilePresenter) throws(CoordinationError) -> PresenterID {
        try Coordinator.shared.addFilePresenter(presenter)
    }

    /// Unregisters `presenter` from ``Coordinator/shared``.
    public static func removeFilePresenter(_ presenter: any FilePresenter) {
        Coordinator.shared.removeFilePresenter(presenter)
    }

    /// The presenters registered with ``Coordinator/shared``.
    public static var filePresenters: [any FilePresenter] { Coordinator.shared.filePresenters }

    // MARK: Coordinated access

    /// A coordinated read of `path`. The accessor gets the path actually coordinated.
    ///
    /// - Throws: ``CoordinationError`` (cancelled, timed out), a presenter's own error, or the accessor's.
    public func coordinate<T>(readingItemAt path: ItemPath, options: ReadingOptions = [],
                              isolation: isolated (any Actor)? = #isolation,
                              byAccessor accessor: (ItemPath) async throws -> T) async throws -> T {
        let access = try await acquire([.readingIntent(with: path, options: options)])
        return try await run(access) { try await accessor(access.intents[0].path) }
    }

    /// A coordinated write of `path`. Presenters are told the item changed afterwards (deleted for
    /// `forDeleting`), unless the accessor announced a move with ``item(at:didMoveTo:)``.
    public func coordinate<T>(writingItemAt path: ItemPath, options: WritingOptions = [],
                              isolation: isolated (any Actor)? = #isolation,
                              byAccessor accessor: (ItemPath) async throws -> T) async throws -> T {
        let access = try await acquire([.writingIntent(with: path, options: options)])
        return try await run(access) { try await accessor(access.intents[0].path) }
    }

    /// A coordinated read of one item and write of another, granted together.
    public func coordinate<T>(readingItemAt readingPath: ItemPath, options readingOptions: ReadingOptions = [],
                              writingItemAt writingPath: ItemPath, options writingOptions: WritingOptions = [],
                              isolation: isolated (any Actor)? = #isolation,
                              byAccessor accessor: (ItemPath, ItemPath) async throws -> T) async throws -> T {
        let access = try await acquire([.readingIntent(with: readingPath, options: readingOptions),
                                        .writingIntent(with: writingPath, options: writingOptions)])
        return try await run(access) { try await accessor(access.intents[0].path, access.intents[1].path) }
    }

    /// Coordinated writes of two items, granted together (a move: source `forMoving`,
    /// destination `forReplacing`, then ``item(at:didMoveTo:)`` inside the accessor).
    public func coordinate<T>(writingItemAt path1: ItemPath, options options1: WritingOptions = [],
                              writingItemAt path2: ItemPath, options options2: WritingOptions = [],
                              isolation: isolated (any Actor)? = #isolation,
                              byAccessor accessor: (ItemPath, ItemPath) async throws -> T) async throws -> T {
        let access = try await acquire([.writingIntent(with: path1, options: options1),
                                        .writingIntent(with: path2, options: options2)])
        return try await run(access) { try await accessor(access.intents[0].path, access.intents[1].path) }
    }

    /// Coordinated access for any number of intents, granted together (Apple's
    /// `coordinate(with:queue:byAccessor:)`). Returns the intents as coordinated.
    public func coordinate<T>(with intents: [FileAccessIntent],
                              isolation: isolated (any Actor)? = #isolation,
                              byAccessor accessor: ([FileAccessIntent]) async throws -> T) async throws -> T {
        let access = try await acquire(intents)
        return try await run(access) { try await accessor(access.intents) }
    }

    /// Announces that the accessor is about to move `from` to `to` (recorded as an event).
    public func item(at from: ItemPath, willMoveTo to: ItemPath) {
        let access = Self.currentAccess
        coordinator.announceWillMove(from: from, to: to, during: access, origin: effectiveOrigin())
    }

    /// Announces that `from` moved to `to`: every presenter at or below `from` follows the move at
    /// once and is told after the access; presenters of the old and new parents hear of the subitem move.
    public func item(at from: ItemPath, didMoveTo to: ItemPath) {
        if let access = Self.currentAccess, access.coordinator === coordinator {
            access.didMove(from: from, to: to)
        } else {
            coordinator.announce(.moved(from: from, to: to), origin: effectiveOrigin())
        }
    }

    /// Cancels this coordinator's pending requests: each ends at once with
    /// ``CoordinationError/cancelled(_:)`` and runs no accessor.
    public func cancel() {
        let ids = lock.withLock { inFlight }
        for id in ids { coordinator.cancel(id) }
    }

    // MARK: Internals

    func effectiveOrigin() -> AccessOrigin {
        var origin = self.origin
        if let filePresenter, let id = coordinator.presenterID(of: filePresenter) {
            origin.presenterID = id
        }
        return origin
    }

    /// Waits for the grant; task cancellation and ``cancel()`` end the wait at once.
    func acquire(_ intents: [FileAccessIntent]) async throws -> CoordinatedAccess {
        let origin = effectiveOrigin()
        let purpose = purposeIdentifier
        let parent = Self.currentAccess
        let ticket = Ticket()
        let access: CoordinatedAccess = try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<CoordinatedAccess, any Error>) in
                let id = coordinator.coordinate(intents, origin: origin, purpose: purpose, within: parent) { [weak self] result in
                    switch result {
                    case .success(let access):
                        if let self { self.lock.withLock { _ = self.inFlight.remove(access.id) } }
                        continuation.resume(returning: access)
                    case .failure(let error):
                        if let self, let id = error.requestID { self.lock.withLock { _ = self.inFlight.remove(id) } }
                        if case .presenterFailed(_, _, _, let underlying) = error {
                            continuation.resume(throwing: underlying)
                        } else {
                            continuation.resume(throwing: error)
                        }
                    }
                }
                // Checked under the coordinator lock: a pending request's completion cannot run
                // before the lock is released, so the removal above always follows this insertion.
                coordinator.lock.withLock {
                    if coordinator.pending[id] != nil { lock.withLock { _ = inFlight.insert(id) } }
                }
                if ticket.set(id) { coordinator.cancel(id) }
            }
        } onCancel: {
            if let id = ticket.cancel() { coordinator.cancel(id) }
        }
        if ticket.isCancelled {
            // Granted in the same instant the task was cancelled: give it back, run no accessor.
            access.release()
            throw CoordinationError.cancelled(access.id)
        }
        return access
    }

    private func run<T>(_ access: CoordinatedAccess, isolation: isolated (any Actor)? = #isolation,
                        _ body: () async throws -> T) async throws -> T {
        defer {
            announceWrites(of: access)
            access.release()
        }
        return try await Self.$currentAccess.withValue(access) {
            try await body()
        }
    }

    /// Apple tells presenters about every coordinated write; so do we, unless a move covers it.
    private func announceWrites(of access: CoordinatedAccess) {
        let moves = access.coordinator.lock.withLock {
            access.announcements.compactMap { announcement -> (ItemPath, ItemPath)? in
                if case .moved(let from, let to, _, _) = announcement { return (from, to) }
                return nil
            }
        }
        for intent in access.intents {
            guard case .writing(let options) = intent.kind else { continue }
            if moves.contains(where: { $0.0 == intent.path || $0.1 == intent.path }) { continue }
            if options.contains(.forDeleting) {
                access.didDelete(intent.path)
            } else if !options.contains(.forMoving) {
                access.didChange(intent.path)
            }
        }
    }
}

/// Links a request id to a cancellation that may come before the id exists.
private final class Ticket: @unchecked Sendable {
    private let lock = Lock()
    private var id: RequestID?
    private var cancelled = false

    /// Stores the id; returns true when the task was already cancelled (cancel it now).
    func set(_ id: RequestID) -> Bool {
        lock.withLock {
            self.id = id
            return cancelled
        }
    }

    /// Marks cancelled; returns the id to cancel if it is known.
    func cancel() -> RequestID? {
        lock.withLock {
            cancelled = true
            return id
        }
    }

    var isCancelled: Bool { lock.withLock { cancelled } }
}

private final class PurposeCounter: @unchecked Sendable {
    private let lock = Lock()
    private var value: UInt64 = 0
    func next() -> UInt64 { lock.withLock { value += 1; return value } }
}
