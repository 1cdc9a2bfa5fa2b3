#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// An etcd v3 in memory, for unit tests of the cluster logic and as the reference the etcd client's
/// conformance suite runs against: one revision counter increased by every change (a transaction's
/// writes share one revision), each key's create and mod revision and version, leases whose keys go
/// when they expire or are revoked, transactions with etcd's comparisons, and watches from any
/// revision still in the history (older ones fail with `compacted`).
///
/// Time: with `.system` leases expire on the monotonic clock (checked by a background task every
/// 50 ms and at every call); with `.manual` they expire only when a test calls ``advance(seconds:)``.
/// ``setReachable(_:)`` makes every call fail with `unavailable` and ends every watch, as an etcd
/// that cannot be reached.
public final class MemoryClusterStore: ClusterStore, @unchecked Sendable {
    public enum Clock: Sendable { case system, manual }

    private struct Lease {
        var ttl: Int64
        var expiresAt: Double
        var keys: Set<[UInt8]> = []
    }

    private final class Watcher {
        let key: [UInt8]
        let prefix: Bool
        let continuation: AsyncThrowingStream<WatchBatch, Error>.Continuation
        init(key: [UInt8], prefix: Bool, continuation: AsyncThrowingStream<WatchBatch, Error>.Continuation) {
            self.key = key
            self.prefix = prefix
            self.continuation = continuation
        }
        func matches(_ k: [UInt8]) -> Bool { prefix ? k.starts(with: key) : k == key }
    }

    private let mutex = StoreMutex()
    /// The watches whose streams ended, for the next change to drop. A leaf lock: nothing else is
    /// taken while it is held. A stream's termination handler runs under the stream's own lock,
    /// and handing a batch to a stream (under `mutex`) takes that lock, so the handler must never
    /// take `mutex` (that lock-order inversion deadlocked a test run on two cores).
    private let endedMutex = StoreMutex()
    private var ended: [Int] = []
    private let clockKind: Clock
    // Guarded by `mutex`:
    private var revision: Revision = 1
    private var compactedTo: Revision = 0
    private var data: [[UInt8]: KeyValue] = [:]
    /// The events of each revision, oldest first (the watch history).
    private var history: [(revision: Revision, events: [WatchEvent])] = []
    private var leases: [LeaseID: Lease] = [:]
    private var nextLease: LeaseID = 0x1000
    private var manualNow: Double = 0
    private var watchers: [Int: Watcher] = [:]
    private var nextWatcher = 0
    private var reachable = true
    private var answersToLose = 0
    private var maxRequestBytes = Int.max
    private var expiryTask: Task<Void, Never>?

    /// Counts of calls by kind ("range", "put", "delete", "txn", "grant", "keepalive", "revoke",
    /// "watch"), so tests can tell what an operation cost in round trips.
    public private(set) var calls: [String: Int] {
        get { mutex.withLock { callCounts } }
        set { mutex.withLock { callCounts = newValue } }
    }
    private var callCounts: [String: Int] = [:]

    public init(clock: Clock = .system) {
        clockKind = clock
        if clock == .system {
            expiryTask = Task.detached { [weak self] in
                while !Task.isCancelled {
                    try? await Task.sleep(nanoseconds: 50_000_000)
                    guard let self else { return }
                    self.mutex.withLock { self.expireLeases() }
                }
            }
        }
    }

    deinit {
        expiryTask?.cancel()
        for watcher in watchers.values { watcher.continuation.finish() }
    }

    // MARK: Test controls

    /// Moves the manual clock on (expiring leases whose time is up). With `.system`, does nothing.
    public func advance(seconds: Double) {
        mutex.withLock {
            manualNow += seconds
            expireLeases()
        }
    }

    /// An unreachable store fails every call with `unavailable` and ends every watch with it.
    public func setReachable(_ value: Bool) {
        let finished: [Watcher] = mutex.withLock {
            reachable = value
            guard !value else { return [] }
            defer { watchers = [:] }
            return Array(watchers.values)
        }
        // Outside the lock, so a stream's end never runs under it.
        for watcher in finished {
            watcher.continuation.finish(throwing: ClusterStoreError.unavailable("memory store unreachable"))
        }
    }

    /// The next `count` transactions that change something are applied, and then their answer is
    /// lost: they throw `unavailable`, as a call to etcd does when its member or the leader goes
    /// away after etcd took the change.
    public func loseAnswers(ofNextChanges count: Int) {
        mutex.withLock { answersToLose = count }
    }

    /// Refuses a put or transaction whose keys and values take more than `bytes`, as etcd refuses
    /// a request over its `--max-request-bytes` ("etcdserver: request is too large").
    public func setMaxRequestBytes(_ bytes: Int) {
        mutex.withLock { maxRequestBytes = bytes }
    }

    private func checkSize(_ ops: [ClusterOperation]) throws {
        var size = 0
        for op in ops {
            switch op {
            case .put(let key, let value, _): size += key.count + value.count
            case .delete(let key, _), .range(let key, _): size += key.count
            }
        }
        if size > maxRequestBytes { throw ClusterStoreError.failed("etcdserver: request is too large") }
    }

    /// Forgets the history before `revision` (etcd's compaction): watches from older revisions fail.
    public func compact(_ revision: Revision) {
        mutex.withLock {
            compactedTo = max(compactedTo, min(revision, self.revision))
            history.removeAll { $0.revision < compactedTo }
        }
    }

    /// The store's current revision.
    public var currentRevision: Revision { mutex.withLock { revision } }

    /// Every key and value, sorted by key.
    public var snapshot: [KeyValue] { mutex.withLock { data.values.sorted { $0.key.lexicographicallyPrecedes($1.key) } } }

    /// The leases alive now.
    public var liveLeases: [LeaseID] { mutex.withLock { expireLeases(); return Array(leases.keys).sorted() } }

    // MARK: ClusterStore

    public func range(_ key: [UInt8], prefix: Bool) async throws -> (values: [KeyValue], revision: Revision) {
        try mutex.withLock {
            try enter("range")
            return (read(key, prefix: prefix), revision)
        }
    }

    @discardableResult
    public func put(_ key: [UInt8], _ value: [UInt8], lease: LeaseID) async throws -> Revision {
        try mutex.withLock {
            try enter("put")
            try checkSize([.put(key: key, value: value, lease: lease)])
            var events: [WatchEvent] = []
            try write(key, value, lease: lease, at: revision + 1, &events)
            commit(events)
            return revision
        }
    }

    @discardableResult
    public func delete(_ key: [UInt8], prefix: Bool) async throws -> (revision: Revision, deleted: Int) {
        try mutex.withLock {
            try enter("delete")
            var events: [WatchEvent] = []
            let n = remove(key, prefix: prefix, at: revision + 1, &events)
            commit(events)
            return (revision, n)
        }
    }

    public func transaction(_ compare: [Compare], success: [ClusterOperation], failure: [ClusterOperation]) async throws -> TransactionResult {
        try mutex.withLock {
            try enter("txn")
            try checkSize(success + failure)
            // As etcd: both branches are checked for a key put twice or put and deleted, whichever runs.
            for branch in [success, failure] where Self.hasDuplicateKey(branch) {
                throw ClusterStoreError.failed("duplicate key given in txn request")
            }
            let ok = compare.allSatisfy(holds)
            let ops = ok ? success : failure
            for op in ops {
                if case .put(_, _, let lease) = op, lease != 0 && leases[lease] == nil {
                    throw ClusterStoreError.leaseNotFound(lease)
                }
            }
            var events: [WatchEvent] = []
            var ranges: [[KeyValue]] = []
            let at = revision + 1
            for op in ops {
                switch op {
                case .put(let key, let value, let lease): try write(key, value, lease: lease, at: at, &events)
                case .delete(let key, let prefix): _ = remove(key, prefix: prefix, at: at, &events)
                case .range(let key, let prefix): ranges.append(read(key, prefix: prefix))
                }
            }
            commit(events)
            if answersToLose > 0 && !events.isEmpty {
                answersToLose -= 1
                throw ClusterStoreError.unavailable("memory store: the answer was lost")
            }
            return TransactionResult(succeeded: ok, revision: revision, ranges: ranges)
        }
    }

    public func grantLease(ttl: Int64) async throws -> (id: LeaseID, ttl: Int64) {
        try mutex.withLock {
            try enter("grant")
            let ttl = max(ttl, 1)
            nextLease += 1
            leases[nextLease] = Lease(ttl: ttl, expiresAt: now() + Double(ttl))
            return (nextLease, ttl)
        }
    }

    public func keepAlive(_ lease: LeaseID) async throws -> Int64 {
        try mutex.withLock {
            try enter("keepalive")
            guard var entry = leases[lease] else { throw ClusterStoreError.leaseNotFound(lease) }
            entry.expiresAt = now() + Double(entry.ttl)
            leases[lease] = entry
            return entry.ttl
        }
    }

    public func revokeLease(_ lease: LeaseID) async throws {
        try mutex.withLock {
            try enter("revoke")
            guard leases[lease] != nil else { throw ClusterStoreError.leaseNotFound(lease) }
            drop(lease)
        }
    }

    public func watch(_ key: [UInt8], prefix: Bool, fromRevision: Revision) -> AsyncThrowingStream<WatchBatch, Error> {
        let (stream, continuation) = AsyncThrowingStream<WatchBatch, Error>.makeStream()
        mutex.withLock {
            callCounts["watch", default: 0] += 1
            guard reachable else {
                continuation.finish(throwing: ClusterStoreError.unavailable("memory store unreachable"))
                return
            }
            let start = fromRevision <= 0 ? revision + 1 : fromRevision
            if start < compactedTo {
                continuation.finish(throwing: ClusterStoreError.compacted(oldestAvailable: compactedTo))
                return
            }
            let watcher = Watcher(key: key, prefix: prefix, continuation: continuation)
            for entry in history where entry.revision >= start {
                let events = entry.events.filter { watcher.matches($0.key) }
                if !events.isEmpty { continuation.yield(WatchBatch(revision: entry.revision, events: events)) }
            }
            let id = nextWatcher
            nextWatcher += 1
            watchers[id] = watcher
            continuation.onTermination = { [weak self] _ in
                guard let self else { return }
                self.endedMutex.withLock { self.ended.append(id) }
            }
        }
        return stream
    }

    // MARK: Inside the lock

    private func now() -> Double {
        if clockKind == .manual { return manualNow }
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
    }

    private func enter(_ kind: String) throws {
        callCounts[kind, default: 0] += 1
        guard reachable else { throw ClusterStoreError.unavailable("memory store unreachable") }
        expireLeases()
    }

    private func expireLeases() {
        let t = now()
        for (id, lease) in leases where lease.expiresAt <= t { drop(id) }
    }

    private func drop(_ lease: LeaseID) {
        guard let entry = leases.removeValue(forKey: lease) else { return }
        var events: [WatchEvent] = []
        for key in entry.keys.sorted(by: { $0.lexicographicallyPrecedes($1) }) {
            _ = remove(key, prefix: false, at: revision + 1, &events)
        }
        commit(events)
    }

    private func read(_ key: [UInt8], prefix: Bool) -> [KeyValue] {
        if !prefix { return data[key].map { [$0] } ?? [] }
        return data.values.filter { $0.key.starts(with: key) }.sorted { $0.key.lexicographicallyPrecedes($1.key) }
    }

    private func write(_ key: [UInt8], _ value: [UInt8], lease: LeaseID, at: Revision, _ events: inout [WatchEvent]) throws {
        if lease != 0 && leases[lease] == nil { throw ClusterStoreError.leaseNotFound(lease) }
        var kv: KeyValue
        if let old = data[key] {
            if old.lease != 0 && old.lease != lease { leases[old.lease]?.keys.remove(key) }
            kv = old
            kv.value = value
            kv.modRevision = at
            kv.version += 1
            kv.lease = lease
        } else {
            kv = KeyValue(key: key, value: value, createRevision: at, modRevision: at, version: 1, lease: lease)
        }
        if lease != 0 { leases[lease]?.keys.insert(key) }
        data[key] = kv
        events.append(.put(kv))
    }

    private func remove(_ key: [UInt8], prefix: Bool, at: Revision, _ events: inout [WatchEvent]) -> Int {
        let keys = prefix ? data.keys.filter { $0.starts(with: key) }.sorted { $0.lexicographicallyPrecedes($1) }
                          : (data[key] != nil ? [key] : [])
        for k in keys {
            if let old = data.removeValue(forKey: k), old.lease != 0 { leases[old.lease]?.keys.remove(k) }
            events.append(.delete(key: k, modRevision: at))
        }
        return keys.count
    }

    /// Whether `ops` put one key twice, or put a key they also delete (etcd's `checkIntervals`).
    private static func hasDuplicateKey(_ ops: [ClusterOperation]) -> Bool {
        var puts = Set<[UInt8]>()
        var deletes: [(key: [UInt8], prefix: Bool)] = []
        for op in ops {
            switch op {
            case .put(let key, _, _): if !puts.insert(key).inserted { return true }
            case .delete(let key, let prefix): deletes.append((key, prefix))
            case .range: break
            }
        }
        return puts.contains { put in deletes.contains { $0.prefix ? put.starts(with: $0.key) : put == $0.key } }
    }

    private func holds(_ c: Compare) -> Bool {
        let kv = data[c.key]
        func order<T: Comparable>(_ a: T, _ b: T) -> Bool {
            switch c.result {
            case .equal: return a == b
            case .notEqual: return a != b
            case .greater: return a > b
            case .less: return a < b
            }
        }
        switch c.target {
        case .version(let v): return order(kv?.version ?? 0, v)
        case .createRevision(let r): return order(kv?.createRevision ?? 0, r)
        case .modRevision(let r): return order(kv?.modRevision ?? 0, r)
        case .lease(let l): return order(kv?.lease ?? 0, l)
        case .value(let v):
            // etcd fails every comparison of a missing key's value, whatever the operator.
            guard let a = kv?.value else { return false }
            switch c.result {
            case .equal: return a == v
            case .notEqual: return a != v
            case .greater: return v.lexicographicallyPrecedes(a)
            case .less: return a.lexicographicallyPrecedes(v)
            }
        }
    }

    /// Makes `events` one new revision and hands them to the watches (nothing when empty).
    private func commit(_ events: [WatchEvent]) {
        guard !events.isEmpty else { return }
        revision += 1
        history.append((revision, events))
        for id in endedMutex.withLock({ defer { ended = [] }; return ended }) { watchers.removeValue(forKey: id) }
        for watcher in watchers.values {
            let mine = events.filter { watcher.matches($0.key) }
            if !mine.isEmpty { watcher.continuation.yield(WatchBatch(revision: revision, events: mine)) }
        }
    }
}

extension WatchEvent {
    /// The key the event is about.
    public var key: [UInt8] {
        switch self {
        case .put(let kv): return kv.key
        case .delete(let key, _): return key
        }
    }

    /// The revision of the change.
    public var revision: Revision {
        switch self {
        case .put(let kv): return kv.modRevision
        case .delete(_, let r): return r
        }
    }
}

/// A pthread mutex (ClusterKV depends on nothing).
final class StoreMutex: @unchecked Sendable {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    init() {
        mutex = .allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        pthread_mutex_init(mutex, nil)
    }
    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }
    func withLock<T>(_ body: () throws -> T) rethrows -> T {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body()
    }
}
