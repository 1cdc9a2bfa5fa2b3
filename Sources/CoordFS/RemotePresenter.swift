import ControlProtocol
import Coordination
import Synchronization

/// A presenter that lives in another process, registered through the control socket: the
/// coordinator calls it like any in-process presenter, and it forwards each ask over the client's
/// connection (`ask`, waiting for the `answer` up to the mount's ask deadline) and each "did"
/// message as a `notification`.
///
/// Asks the client did not subscribe to (`register`'s `asks`) are answered at once without a
/// round trip. When the connection drops, pending asks end at once (`.disconnected`); the control
/// service then removes the presenter from the coordinator, which records them as presenter gone.
final class RemotePresenter: Coordination.FilePresenter, Sendable {
    let connection: ControlConnection
    let kind: ItemKind
    let asks: Set<AskKind>
    /// How long the client has to answer one ask (the mount's `ask_timeout`).
    let askDeadline: Duration
    /// The path at registration; the coordinator tracks moves from then on.
    let presentedItemPath: ItemPath?

    private struct State {
        var id: PresenterID?
        var path: MountPath
        /// Set once the control service removed this presenter from the coordinator.
        var removed = false
        /// Asks whose connection dropped, waiting for that removal.
        var waitingForRemoval: [CheckedContinuation<Void, Never>] = []
    }
    private let state: Mutex<State>
    private let coordinator: Coordinator
    /// The per-user count of pending asks (`max_user_asks`).
    private let quotas: PeerQuotas?

    init(connection: ControlConnection, path: MountPath, itemPath: ItemPath, kind: ItemKind, asks: Set<AskKind>,
         askDeadline: Duration, coordinator: Coordinator, quotas: PeerQuotas? = nil) {
        self.quotas = quotas
        self.connection = connection
        self.kind = kind
        self.asks = asks
        self.askDeadline = askDeadline
        self.presentedItemPath = itemPath
        self.coordinator = coordinator
        self.state = Mutex(State(id: nil, path: path))
    }

    /// Records the id the coordinator gave this presenter.
    func bind(_ id: PresenterID) { state.withLock { $0.id = id } }

    /// The id on the wire (the coordinator's id, so that the event log and `status` agree).
    var wireID: PresenterID {
        // An ask can reach a presenter between `addFilePresenter` and `bind`: ask the coordinator then.
        let id = state.withLock { $0.id } ?? coordinator.presenterID(of: self)
        return id ?? PresenterID(0)
    }

    /// The presented item's current path.
    var path: MountPath { state.withLock { $0.path } }

    /// Called once the coordinator no longer knows this presenter: asks that lost their
    /// connection may return now (the coordinator already ended them as presenter gone).
    func removed() {
        let waiters = state.withLock { s -> [CheckedContinuation<Void, Never>] in
            s.removed = true
            defer { s.waitingForRemoval = [] }
            return s.waitingForRemoval
        }
        for waiter in waiters { waiter.resume() }
    }

    /// Returns once `removed()` was called.
    private func untilRemoved() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let now = state.withLock { s -> Bool in
                if s.removed { return true }
                s.waitingForRemoval.append(continuation)
                return false
            }
            if now { continuation.resume() }
        }
    }

    // MARK: Asks

    /// Only the asks the client listed in `register` are sent; the others cost nothing.
    func wantsAsk(_ ask: PresenterAsk) -> Bool {
        asks.contains(AskKind(ask))
    }

    func relinquishPresentedItem(toReader reader: AccessOrigin) async -> Reacquirer? {
        await relinquish(.relinquishToReader)
    }

    func relinquishPresentedItem(toWriter writer: AccessOrigin) async -> Reacquirer? {
        await relinquish(.relinquishToWriter)
    }

    func savePresentedItemChanges() async throws {
        try await send(.save)
    }

    func accommodatePresentedItemDeletion() async throws {
        try await send(.accommodateDeletion)
    }

    func accommodatePresentedSubitemDeletion(at path: ItemPath) async throws {
        try await send(.accommodateSubitemDeletion, subitem: MountPath.of(path))
    }

    private func relinquish(_ kind: AskKind) async -> Reacquirer? {
        // A relinquish cannot be refused; an error answer is taken as done.
        try? await send(kind)
        guard asks.contains(kind), asks.contains(.reacquire) else { return nil }
        return { [self] in try? await send(.reacquire) }
    }

    /// Sends one ask and waits for its answer. Throws when the client answered with an error;
    /// returns at a timeout (the coordinator keeps its own deadline). When the connection drops,
    /// it does not pretend the presenter answered: it waits until the control service has
    /// removed the presenter, which ends the ask as presenter gone.
    private func send(_ kind: AskKind, subitem: MountPath? = nil) async throws {
        guard asks.contains(kind) else { return }
        // A user with `max_user_asks` asks unanswered is not asked more: the daemon answers for it.
        let uid = connection.peer.uid
        guard quotas?.beginAsk(uid) ?? true else { return }
        defer { quotas?.endAsk(uid) }
        switch await connection.ask(kind, presenter: wireID, path: path, subitem: subitem, deadline: askDeadline) {
        case .answered, .timedOut: return
        case .failed(let body, _): throw RemotePresenterRefusal(body: body)
        case .disconnected: await untilRemoved()
        }
    }

    // MARK: Notifications

    func presentedItemDidChange() async {
        connection.notify(wireID, .didChange)
    }

    func presentedItemDidMove(to newPath: ItemPath) async {
        guard let moved = MountPath.of(newPath) else { return }
        state.withLock { $0.path = moved }
        connection.notify(wireID, .didMove(to: moved))
    }

    func presentedSubitemDidAppear(at path: ItemPath) async {
        if let p = MountPath.of(path) { connection.notify(wireID, .subitemDidAppear(p)) }
    }

    func presentedSubitemDidChange(at path: ItemPath) async {
        if let p = MountPath.of(path) { connection.notify(wireID, .subitemDidChange(p)) }
    }

    func presentedSubitemDidDelete(at path: ItemPath) async {
        if let p = MountPath.of(path) { connection.notify(wireID, .subitemDidDelete(p)) }
    }

    func presentedItemDidDelete() async {
        connection.notify(wireID, .didDelete)
    }

    func presentedSubitem(at oldPath: ItemPath, didMoveTo newPath: ItemPath) async {
        if let from = MountPath.of(oldPath), let to = MountPath.of(newPath) {
            connection.notify(wireID, .subitemDidMove(from, to: to))
        }
    }
}

/// A remote presenter answered an ask with an error: the access fails (EBUSY through the mount).
struct RemotePresenterRefusal: Error, CustomStringConvertible {
    let body: ErrorBody
    var description: String { "the presenter refused: \(body.message) (\(body.code))" }
}

extension MountPath {
    /// The protocol form of a coordinator path (nil only for names that are not valid on the wire,
    /// such as components longer than 255 bytes).
    static func of(_ path: ItemPath) -> MountPath? {
        path.isRoot ? .root : try? MountPath(validating: path.string)
    }

    /// The coordinator form of a protocol path.
    var itemPath: ItemPath {
        // A MountPath is normalised (no empty, `.` or `..` components, no NUL): always a valid ItemPath.
        (try? ItemPath(rawValue)) ?? .root
    }
}

extension AskKind {
    /// The protocol's name of a coordinator's ask.
    init(_ ask: PresenterAsk) {
        switch ask {
        case .relinquishToReader: self = .relinquishToReader
        case .relinquishToWriter: self = .relinquishToWriter
        case .saveChanges: self = .save
        case .accommodateDeletion: self = .accommodateDeletion
        case .accommodateSubitemDeletion: self = .accommodateSubitemDeletion
        }
    }
}
