import Cluster
import Dispatch
import ClusterKV
import Coordination
import Synchronization
import Testing
import CoordinationTestSupport

/// The mount side of a node in a test: logs what the cluster asks of it.
final class LoggingHost: ClusterHost, @unchecked Sendable {
    let node: String
    let journal: Journal
    init(node: String, journal: Journal) {
        self.node = node
        self.journal = journal
    }
    func clusterWillLetChangeThrough(_ intents: [FileAccessIntent], origin: AccessOrigin) {
        for i in intents { journal.log("\(node):keepVersion(\(i.path))") }
    }
    func clusterDropCaches(_ changes: [AccessChange]) {
        for c in changes { journal.log("\(node):dropCaches(\(c))") }
    }
    func clusterDidChange(_ changes: [AccessChange], origin: AccessOrigin, asked: Bool) -> [AccessChange] {
        for c in changes { journal.log("\(node):store(\(c))") }
        return []
    }
}

/// Closed until `open()`: `pass()` waits while it is closed; once open, every pass goes through.
final class TestGate: @unchecked Sendable {
    private let semaphore = DispatchSemaphore(value: 0)
    private let state = Mutex<(reached: Bool, open: Bool)>((false, false))
    /// Whether a pass has begun (and waits, while the gate is closed).
    var reached: Bool { state.withLock { $0.reached } }
    func open() {
        let wasOpen = state.withLock { s in defer { s.open = true }; return s.open }
        if !wasOpen { semaphore.signal() }
    }
    func pass() {
        let wait = state.withLock { s in s.reached = true; return !s.open }
        if wait {
            semaphore.wait()
            semaphore.signal()  // the next pass goes through too
        }
    }
}

/// A node's mount side whose dropping of the caches of `path` waits until `open()`, as a kernel's
/// invalidation can take a while (it runs on the node's watch, as the daemon's does).
final class GatedHost: ClusterHost, @unchecked Sendable {
    let path: ItemPath
    private let gate = TestGate()
    init(path: ItemPath) { self.path = path }
    /// Whether a drop of `path`'s caches has begun (and waits, while the gate is closed).
    var dropping: Bool { gate.reached }
    func open() { gate.open() }
    func clusterWillLetChangeThrough(_ intents: [FileAccessIntent], origin: AccessOrigin) {}
    func clusterDropCaches(_ changes: [AccessChange]) {
        guard changes.contains(where: { $0.paths.contains(path) }) else { return }
        gate.pass()
    }
    func clusterDidChange(_ changes: [AccessChange], origin: AccessOrigin, asked: Bool) -> [AccessChange] { [] }
}

/// A node's mount side where a process read `path`: before another node changes it, the node
/// keeps that version (`clusterWillYield`), which takes until `open()`, as copying a large file
/// does.
final class KeepingHost: ClusterHost, @unchecked Sendable {
    let path: ItemPath
    private let gate = TestGate()
    private let done = Mutex(false)
    init(path: ItemPath) { self.path = path }
    /// Whether a keep has begun (and waits, while the gate is closed), and whether one ended.
    var keeping: Bool { gate.reached }
    var kept: Bool { done.withLock { $0 } }
    func open() { gate.open() }
    func clusterWillLetChangeThrough(_ intents: [FileAccessIntent], origin: AccessOrigin) {}
    func clusterDropCaches(_ changes: [AccessChange]) {}
    func clusterDidChange(_ changes: [AccessChange], origin: AccessOrigin, asked: Bool) -> [AccessChange] { [] }
    func clusterKeepsReadVersions(at path: ItemPath, inside: Bool) -> Bool { path == self.path }
    func clusterWillYield(_ path: ItemPath, inside: Bool, to node: String) {
        gate.pass()
        done.withLock { $0 = true }
    }
}

/// Forwards coordinator events to the node (presenter mirror) and keeps them.
final class Tap: CoordinationEventSink, @unchecked Sendable {
    let node: ClusterNode
    private let events = Mutex<[CoordinationEvent]>([])
    init(node: ClusterNode) { self.node = node }
    func record(_ event: CoordinationEvent) {
        node.record(event)
        events.withLock { $0.append(event) }
    }
    var all: [CoordinationEvent] { events.withLock { $0 } }
}

/// A clock tests move by hand.
final class ManualClock: Sendable {
    private let t = Mutex<Double>(1000)
    var now: Double { t.withLock { $0 } }
    func advance(_ s: Double) { t.withLock { $0 += s } }
}

/// Several nodes of one cluster in one process, over one in-memory etcd.
final class TestCluster: @unchecked Sendable {
    let store: MemoryClusterStore
    let clock = ManualClock()
    let journal = Journal()
    var nodes: [String: (node: ClusterNode, coordinator: Coordinator, tap: Tap, host: LoggingHost)] = [:]

    init(manualClock: Bool = false) {
        store = MemoryClusterStore(clock: manualClock ? .manual : .system)
    }

    /// `through`: the node's own view of the store (a wrapper of `store`), else `store`.
    @discardableResult
    func add(_ name: String, ttl: Int64 = 3, unreachable: UnreachablePolicy = .fail, folderRights: Bool = true,
             failoverWait: Double = 5, recordInterval: Double = ClusterConfiguration.defaultRecordInterval,
             unpresentedRecordInterval: Double = ClusterConfiguration.defaultUnpresentedRecordInterval,
             maxRecordBatchBytes: Int = ClusterConfiguration.defaultMaxRecordBatchBytes,
             policy: CoordinationPolicy = CoordinationPolicy(askDeadline: .seconds(2), waitDeadline: .seconds(20)),
             through: (any ClusterStore)? = nil) async throws -> ClusterNode {
        let clock = self.clock
        var config = ClusterConfiguration(node: name, prefix: "test/cluster", leaseTTL: ttl, unreachable: unreachable,
                                          folderRights: folderRights, failoverWait: failoverWait, recordInterval: recordInterval,
                                          unpresentedRecordInterval: unpresentedRecordInterval,
                                          clock: { clock.now })
        config.maxRecordBatchBytes = maxRecordBatchBytes
        let node = ClusterNode(store: through ?? store, configuration: config)
        let coordinator = Coordinator(configuration: CoordinatorConfiguration(defaultPolicy: policy))
        let tap = Tap(node: node)
        coordinator.eventSink = tap
        let host = LoggingHost(node: name, journal: journal)
        node.host = host
        try await node.start(coordinator: coordinator)
        nodes[name] = (node, coordinator, tap, host)
        return node
    }

    func coordinator(_ name: String) -> Coordinator { nodes[name]!.coordinator }
    func node(_ name: String) -> ClusterNode { nodes[name]!.node }

    /// The paths node `other` lists for node `name`'s presenters (its view through its watch).
    func presenters(of name: String, seenBy other: String) -> [ItemPath]? {
        node(other).status().nodes.first { $0.name == name }?.presenters
    }

    /// A recording presenter `label` of `item` on node `name`, registered and flushed, once node
    /// `other` lists it: how most cross-node tests begin.
    @discardableResult
    func present(_ label: String, at item: String, on name: String, seenBy other: String) async throws -> RecordingPresenter {
        let presenter = RecordingPresenter(label, at: path(item), journal: journal)
        _ = try coordinator(name).addFilePresenter(presenter, owner: origin)
        await node(name).flush()
        #expect(await eventually { self.presenters(of: name, seenBy: other) == [path(item)] })
        return presenter
    }

    func stop() async {
        for n in nodes.values { await n.node.stop() }
    }

    /// Advances etcd's and the nodes' clocks together.
    func advance(_ seconds: Double) {
        clock.advance(seconds)
        store.advance(seconds: seconds)
    }
}

let origin = AccessOrigin(pid: 4242, uid: 0, gid: 0, executable: "tool")

func path(_ s: String) -> ItemPath { try! ItemPath(s) }

/// Requests `intents` on `coordinator` and waits for the grant (or the error).
func access(_ coordinator: Coordinator, _ intents: [FileAccessIntent], origin: AccessOrigin = origin,
            purpose: String? = nil, policy: CoordinationPolicy? = nil) async -> Result<CoordinatedAccess, CoordinationError> {
    await withCheckedContinuation { c in
        coordinator.coordinate(intents, origin: origin, purpose: purpose, policy: policy) { c.resume(returning: $0) }
    }
}

/// A write of `name` on node `node`, its change told and its record in etcd: the node holds the
/// right for it (how many tests begin).
func writeAndFlush(_ cluster: TestCluster, _ node: String, _ name: String) async throws {
    let grant = try await access(cluster.coordinator(node), [write(name)]).get()
    grant.didChange(path(name))
    grant.release()
    await cluster.node(node).flush()
}

func write(_ p: String, _ options: FileCoordinator.WritingOptions = []) -> FileAccessIntent { .writingIntent(with: path(p), options: options) }
func read(_ p: String) -> FileAccessIntent { .readingIntent(with: path(p)) }

/// Polls `condition` until it holds or `seconds` pass.
func eventually(_ seconds: Double = 5, _ condition: () -> Bool) async -> Bool {
    let deadline = ContinuousClock.now + .milliseconds(Int(seconds * 1000))
    while ContinuousClock.now < deadline {
        if condition() { return true }
        try? await Task.sleep(for: .milliseconds(10))
    }
    return condition()
}

/// A task that requests `intents` and records when it is granted.
final class Pending: @unchecked Sendable {
    private let box = Mutex<Result<CoordinatedAccess, CoordinationError>?>(nil)
    private(set) var id = RequestID(rawValue: 0)
    init(_ coordinator: Coordinator, _ intents: [FileAccessIntent], origin: AccessOrigin = origin, policy: CoordinationPolicy? = nil,
         purpose: String? = nil) {
        id = coordinator.coordinate(intents, origin: origin, purpose: purpose, policy: policy) { r in self.box.withLock { $0 = r } }
    }
    var result: Result<CoordinatedAccess, CoordinationError>? { box.withLock { $0 } }
    var access: CoordinatedAccess? { if case .success(let a)? = result { return a }; return nil }
    var error: CoordinationError? { if case .failure(let e)? = result { return e }; return nil }
}

/// Every step a node sees from now on, collected in the background (so a test never waits on a
/// stream that has nothing more to say).
final class StepLog: @unchecked Sendable {
    private let steps = Mutex<[ClusterStep]>([])
    private var task: Task<Void, Never>?
    init(_ node: ClusterNode) {
        let stream = node.steps()
        task = Task { [weak self] in
            for await s in stream { self?.steps.withLock { $0.append(s) } }
        }
    }
    deinit { task?.cancel() }
    var all: [ClusterStep] { steps.withLock { $0 } }
}

/// A node's view of a store whose transactions that put a key starting with `heldPrefix` wait
/// until `release()` (a call to etcd that takes long: a slow disk, a loaded member), as the
/// publisher's batch carrying them does; every other call goes through at once. With
/// `answerOnly`, such a transaction is done in etcd at once and only its answer waits (an answer
/// slow on its way back, which the node's watch overtakes).
final class HoldingStore: ClusterStore, @unchecked Sendable {
    let inner: any ClusterStore
    private let state = Mutex<(prefix: [UInt8]?, held: Int, answerOnly: Bool)>((nil, 0, false))
    init(_ inner: any ClusterStore) { self.inner = inner }

    func hold(_ prefix: String, answerOnly: Bool = false) { state.withLock { $0 = (Array(prefix.utf8), $0.held, answerOnly) } }
    func release() { state.withLock { $0.prefix = nil } }
    /// Transactions waiting now.
    var held: Int { state.withLock { $0.held } }

    func range(_ key: [UInt8], prefix: Bool) async throws -> (values: [KeyValue], revision: Revision) { try await inner.range(key, prefix: prefix) }
    func put(_ key: [UInt8], _ value: [UInt8], lease: LeaseID) async throws -> Revision { try await inner.put(key, value, lease: lease) }
    func delete(_ key: [UInt8], prefix: Bool) async throws -> (revision: Revision, deleted: Int) { try await inner.delete(key, prefix: prefix) }
    func transaction(_ compare: [Compare], success: [ClusterOperation], failure: [ClusterOperation]) async throws -> TransactionResult {
        func holds() -> Bool {
            state.withLock { s in
                guard let p = s.prefix else { return false }
                return success.contains { if case .put(let key, _, _) = $0 { return key.starts(with: p) }; return false }
            }
        }
        guard holds() else { return try await inner.transaction(compare, success: success, failure: failure) }
        let answerOnly = state.withLock { $0.answerOnly }
        let result = answerOnly ? try await inner.transaction(compare, success: success, failure: failure) : nil
        state.withLock { $0.held += 1 }
        while holds() { try await Task.sleep(for: .milliseconds(5)) }
        state.withLock { $0.held -= 1 }
        if let result { return result }
        return try await inner.transaction(compare, success: success, failure: failure)
    }
    func grantLease(ttl: Int64) async throws -> (id: LeaseID, ttl: Int64) { try await inner.grantLease(ttl: ttl) }
    func keepAlive(_ lease: LeaseID) async throws -> Int64 { try await inner.keepAlive(lease) }
    func revokeLease(_ lease: LeaseID) async throws { try await inner.revokeLease(lease) }
    func watch(_ key: [UInt8], prefix: Bool, fromRevision: Revision) -> AsyncThrowingStream<WatchBatch, Error> {
        inner.watch(key, prefix: prefix, fromRevision: fromRevision)
    }
}

/// A store whose watch falls behind while `lag` is on: every batch waits to be delivered until it is
/// off again (as a node's watch behind etcd's answers under load), everything else goes through.
final class LaggingWatchStore: ClusterStore, @unchecked Sendable {
    let inner: any ClusterStore
    private let lagging = Mutex(false)
    init(_ inner: any ClusterStore) { self.inner = inner }
    var lag: Bool {
        get { lagging.withLock { $0 } }
        set { lagging.withLock { $0 = newValue } }
    }

    func range(_ key: [UInt8], prefix: Bool) async throws -> (values: [KeyValue], revision: Revision) { try await inner.range(key, prefix: prefix) }
    func put(_ key: [UInt8], _ value: [UInt8], lease: LeaseID) async throws -> Revision { try await inner.put(key, value, lease: lease) }
    func delete(_ key: [UInt8], prefix: Bool) async throws -> (revision: Revision, deleted: Int) { try await inner.delete(key, prefix: prefix) }
    func transaction(_ compare: [Compare], success: [ClusterOperation], failure: [ClusterOperation]) async throws -> TransactionResult {
        try await inner.transaction(compare, success: success, failure: failure)
    }
    func grantLease(ttl: Int64) async throws -> (id: LeaseID, ttl: Int64) { try await inner.grantLease(ttl: ttl) }
    func keepAlive(_ lease: LeaseID) async throws -> Int64 { try await inner.keepAlive(lease) }
    func revokeLease(_ lease: LeaseID) async throws { try await inner.revokeLease(lease) }
    func watch(_ key: [UInt8], prefix: Bool, fromRevision: Revision) -> AsyncThrowingStream<WatchBatch, Error> {
        let upstream = inner.watch(key, prefix: prefix, fromRevision: fromRevision)
        return AsyncThrowingStream { continuation in
            let task = Task {
                do {
                    for try await batch in upstream {
                        while self.lag && !Task.isCancelled { try await Task.sleep(for: .milliseconds(5)) }
                        continuation.yield(batch)
                    }
                    continuation.finish()
                } catch {
                    continuation.finish(throwing: error)
                }
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }
}
