import Coordination
import Dispatch
import Synchronization

/// Sits in front of the coordinator's event sink and tells the store about every presenter that
/// registers or goes away, in-process or through the control socket, so each one's base is kept
/// without the registering code having to know about the store.
///
/// The coordinator calls sinks under its lock: this only queues the store work (SQLite
/// transactions). The work is fair and batched:
/// - each uid has its own queue, and a worker serves them round-robin, at most `batchSize`
///   operations of one uid per transaction: one user registering or dropping 100,000 presenters
///   delays another user's registrations by one batch, not by all of its work;
/// - a presenter that goes away before its registration reached the store costs nothing;
/// - the mount's hooks wait only for the registrations of the path they are about to snapshot
///   (``drain(path:)`` runs them on the caller), never for other paths' or other users' work.
final class StorePresenterTap: CoordinationEventSink, @unchecked Sendable {
    let next: (any CoordinationEventSink)?
    /// `next`, held by reference: every event of every access passes here.
    private let forward: (any CoordinationEventSink & AnyObject)?
    private weak var service: StoreService?
    let queue = DispatchQueue(label: "coordfs.store.presenters")
    /// Operations of one uid per transaction, at most.
    static let batchSize = 512

    /// One queued registration (`path` set) or unregistration.
    fileprivate final class Operation: @unchecked Sendable {
        let id: PresenterID
        let path: ItemPath?
        /// The registering user (the owner of the presenter's conflicts).
        let uid: UInt32?
        /// Taken by the worker or by `drain(path:)`, or cancelled (guarded by the state's lock).
        var taken = false
        init(id: PresenterID, path: ItemPath?, uid: UInt32? = nil) {
            self.id = id
            self.path = path
            self.uid = uid
        }
    }

    /// A first-in first-out queue whose front is dropped in O(1) (amortized).
    fileprivate struct FIFO {
        var items: [Operation] = []
        var head = 0
        var isEmpty: Bool { head == items.count }
        mutating func append(_ operation: Operation) { items.append(operation) }
        mutating func popFirst() -> Operation? {
            guard head < items.count else { return nil }
            let first = items[head]
            head += 1
            if head == items.count {
                items = []
                head = 0
            } else if head >= 1024 && head * 2 >= items.count {
                items.removeFirst(head)
                head = 0
            }
            return first
        }
    }

    /// The registrations queued for one path; `live` of them not taken yet.
    fileprivate struct PathQueue {
        var operations: [Operation] = []
        var live = 0
    }

    fileprivate struct State {
        var queues: [UInt32: FIFO] = [:]
        /// Uids with queued work, served in turn.
        var ring: [UInt32] = []
        var turn = 0
        /// Each registered presenter's uid (unregistrations go to its owner's queue).
        var owners: [PresenterID: UInt32] = [:]
        /// Registrations queued and not taken yet, by presenter and by path.
        var registrations: [PresenterID: Operation] = [:]
        var byPath: [ItemPath: PathQueue] = [:]
        /// The paths of the batch the worker runs now, and how to wait for it.
        var running: (paths: Set<ItemPath>, done: DispatchGroup)?
        var scheduled = false
    }
    private let state = Mutex(State())

    init(service: StoreService, next: (any CoordinationEventSink)?) {
        self.service = service
        self.next = next
        forward = forwardingReference(to: next)
    }

    func record(_ event: CoordinationEvent) {
        forward?.record(event)
        switch event.kind {
        case .presenterRegistered(let id, let path, let owner):
            enqueue(Operation(id: id, path: path, uid: owner.uid), uid: owner.uid)
        case .presenterUnregistered(let id, _):
            enqueue(Operation(id: id, path: nil), uid: nil)
        default:
            break
        }
    }

    private func enqueue(_ operation: Operation, uid: UInt32?) {
        let start = state.withLock { s -> Bool in
            let owner: UInt32
            if let path = operation.path {
                owner = uid ?? 0
                s.owners[operation.id] = owner
                s.registrations[operation.id] = operation
                var entry = s.byPath.removeValue(forKey: path) ?? PathQueue()
                entry.operations.append(operation)
                entry.live += 1
                s.byPath[path] = entry
            } else {
                owner = s.owners.removeValue(forKey: operation.id) ?? 0
                s.owners.shrinkIfSparse()
                // Gone before its registration reached the store: neither needs doing.
                if let registration = s.registrations[operation.id], let path = registration.path {
                    registration.taken = true
                    s.forget(registration, at: path)
                    return false
                }
            }
            if s.queues[owner] == nil { s.ring.append(owner) }
            s.queues[owner, default: FIFO()].append(operation)
            if s.scheduled { return false }
            s.scheduled = true
            return true
        }
        if start { queue.async { [self] in runBatches() } }
    }

    /// The worker: one uid's batch at a time, uids in turn.
    private func runBatches() {
        while let (batch, done) = takeBatch() {
            run(batch)
            done.leave()
        }
    }

    private func takeBatch() -> ([Operation], DispatchGroup)? {
        state.withLock { s -> ([Operation], DispatchGroup)? in
            s.running = nil
            while !s.ring.isEmpty {
                if s.turn >= s.ring.count { s.turn = 0 }
                let uid = s.ring[s.turn]
                var fifo = s.queues.removeValue(forKey: uid) ?? FIFO()
                var batch: [Operation] = []
                while batch.count < Self.batchSize, let next = fifo.popFirst() {
                    if next.taken { continue }
                    next.taken = true
                    batch.append(next)
                }
                if fifo.isEmpty {
                    s.ring.remove(at: s.turn)
                } else {
                    s.queues[uid] = fifo
                    s.turn += 1
                }
                guard !batch.isEmpty else { continue }
                var paths = Set<ItemPath>()
                for operation in batch {
                    guard let path = operation.path else { continue }
                    paths.insert(path)
                    s.forget(operation, at: path)
                }
                let done = DispatchGroup()
                done.enter()
                s.running = (paths, done)
                return (batch, done)
            }
            s.queues = [:]
            s.scheduled = false
            return nil
        }
    }

    private func run(_ batch: [Operation]) {
        guard let service else { return }
        let registrations = batch.compactMap { operation in operation.path.map { (operation.id, $0, operation.uid) } }
        if !registrations.isEmpty { service.registerIfNew(registrations) }
        let gone = batch.filter { $0.path == nil }.map(\.id)
        if !gone.isEmpty { service.unregister(gone) }
    }

    /// Waits until every registration queued so far for `path` reached the store: the ones still
    /// queued run here, on the caller; one the worker is running is waited for. Work for other
    /// paths is not waited for.
    func drain(path: ItemPath) {
        let (mine, running) = state.withLock { s -> ([Operation], DispatchGroup?) in
            let mine = (s.byPath.removeValue(forKey: path)?.operations ?? []).filter { !$0.taken }
            for operation in mine {
                operation.taken = true
                s.registrations[operation.id] = nil
            }
            let running = s.running.flatMap { $0.paths.contains(path) ? $0.done : nil }
            return (mine, running)
        }
        if !mine.isEmpty { run(mine) }
        running?.wait()
    }

    /// Waits until everything queued so far reached the store.
    func drain() {
        while state.withLock({ $0.scheduled }) { queue.sync {} }
    }
}

extension StorePresenterTap.State {
    /// A registration left the queue (taken by the worker): no longer waited for by path.
    fileprivate mutating func forget(_ operation: StorePresenterTap.Operation, at path: ItemPath) {
        registrations[operation.id] = nil
        registrations.shrinkIfSparse()
        guard var entry = byPath.removeValue(forKey: path) else { return }
        entry.live -= 1
        guard entry.live > 0 else { return }
        // Taken operations are dropped once they are half the list: O(1) amortized per operation.
        if entry.operations.count >= 64 && entry.live * 2 < entry.operations.count {
            entry.operations.removeAll { $0.taken }
        }
        byPath[path] = entry
    }
}
