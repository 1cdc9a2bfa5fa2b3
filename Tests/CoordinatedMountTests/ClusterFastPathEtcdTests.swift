import XCTest
import Foundation
import Glibc
@testable import CoordFS
@testable import Cluster
import ClusterKV
import Coordination
import EtcdTestSupport

/// What a node's local accesses cost etcd (docs/cluster.md, "The fast path"), through a real mount
/// of a node alone in its cluster over a real one-member etcd, every call of the daemon's etcd
/// client counted: a stream of creates, stats and unlinks, which no presenter of another node must
/// hear of, costs one transaction per `unpresentedRecordInterval` (one put of the node's change
/// records, nothing else once its right is held; not one per `recordInterval`, 2 ms), a few bytes
/// a change in that put, and every change is still told, in order.
final class ClusterFastPathEtcdTests: InProcessMountTestCase {
    var etcd: EtcdCluster!
    var counting: CountingClusterStore!
    /// `cluster_unpresented_interval` (the mount's `recordInterval` stays its default, 2 ms).
    static let interval = 0.1

    override func configure(_ options: inout MountOptions) {
        super.configure(&options)
        options.cluster.node = "a"
        options.cluster.prefix = "fastpathtest"
        options.cluster.endpoints = etcd.endpoints
        options.cluster.unpresentedRecordInterval = Self.interval
        // No renewal during the test (one every TTL/3): only the accesses' calls are counted.
        options.cluster.leaseTTL = 600
    }

    override func willStart(_ daemon: Daemon) {
        // The daemon's own etcd client (EtcdKV), counted.
        counting = CountingClusterStore(try! daemon.plan.options.cluster.makeStore())
        daemon.clusterStoreForTesting = counting
    }

    override func setUpWithError() throws {
        etcd = try EtcdCluster(size: 1)
        do { try super.setUpWithError() } catch {
            etcd.stop()
            throw error
        }
    }

    override func tearDownWithError() throws {
        defer { etcd?.stop() }
        try super.tearDownWithError()
    }

    func testAStreamOfLocalCreatesCostsOnePutAnIntervalAndAFewBytesAChange() async throws {
        let node = try XCTUnwrap(daemon.cluster)
        // The first create takes the node's right on the root (a transaction of its own).
        _ = try sh("touch first && rm first")
        await node.flush()
        counting.reset()
        let files = 300
        let started = Date()
        _ = try sh("python3 -c \"import os\nfor i in range(\(files)):\n  p='f%d' % i\n  open(p, 'w').close(); os.stat(p); os.unlink(p)\"")
        let elapsed = Date().timeIntervalSince(started)
        await node.flush()
        let calls = counting.calls
        // Nothing but the change records' puts, one per interval the stream took (and one for the rest).
        XCTAssertEqual(calls.filter { $0.kind != "txn" }.map(\.kind), [], "no call but transactions")
        let puts = calls.filter { $0.recordBytes != nil }
        XCTAssertEqual(puts.count, calls.count, "every transaction put change records")
        XCTAssertLessThanOrEqual(Double(puts.count), elapsed / Self.interval + 2,
                                 "\(puts.count) transactions for \(files) files in \(elapsed) s")
        // Every change told, in order: each file appeared, changed (its close) and deleted.
        let sent = try puts.flatMap { try XCTUnwrap(ChangeRecords.decode($0.recordBytes!), "a value that does not decode") }
        let changes = sent.flatMap(\.changes).map(\.description)
        let expected = (0..<files).flatMap { i in
            [AccessChange.subitemAppeared(try! ItemPath("f\(i)")), .changed(try! ItemPath("f\(i)")), .deleted(try! ItemPath("f\(i)"))]
        }.map(\.description)
        XCTAssertEqual(changes, expected)
        // A few bytes a change (the JSON records of before took some 130), one record a batch
        // (one process, one right: nothing tells the accesses apart on another node).
        let bytes = puts.reduce(0) { $0 + $1.recordBytes!.count }
        XCTAssertLessThan(bytes, changes.count * 16, "\(bytes) bytes for \(changes.count) changes")
        XCTAssertEqual(sent.count, puts.count, "one record a batch")
    }
}

/// A `ClusterStore` that passes every call on and keeps what it was (transactions with the bytes
/// of the change records they put).
final class CountingClusterStore: ClusterStore, @unchecked Sendable {
    struct Call {
        var kind: String
        var recordBytes: [UInt8]?
    }
    let inner: any ClusterStore
    private let lock = NSLock()
    private var made: [Call] = []
    init(_ inner: any ClusterStore) { self.inner = inner }

    var calls: [Call] { lock.withLock { made } }
    func reset() { lock.withLock { made = [] } }
    private func note(_ kind: String, _ records: [UInt8]? = nil) { lock.withLock { made.append(Call(kind: kind, recordBytes: records)) } }

    func range(_ key: [UInt8], prefix: Bool) async throws -> (values: [KeyValue], revision: Revision) {
        note("range")
        return try await inner.range(key, prefix: prefix)
    }
    func put(_ key: [UInt8], _ value: [UInt8], lease: LeaseID) async throws -> Revision {
        note("put")
        return try await inner.put(key, value, lease: lease)
    }
    func delete(_ key: [UInt8], prefix: Bool) async throws -> (revision: Revision, deleted: Int) {
        note("delete")
        return try await inner.delete(key, prefix: prefix)
    }
    func transaction(_ compare: [Compare], success: [ClusterOperation], failure: [ClusterOperation]) async throws -> TransactionResult {
        let records = success.lazy.compactMap { op -> [UInt8]? in
            if case .put(let key, let value, _) = op, String(decoding: key, as: UTF8.self).hasSuffix("/c/a") { return value }
            return nil
        }.first
        note("txn", records)
        return try await inner.transaction(compare, success: success, failure: failure)
    }
    func grantLease(ttl: Int64) async throws -> (id: LeaseID, ttl: Int64) {
        note("grant")
        return try await inner.grantLease(ttl: ttl)
    }
    func keepAlive(_ lease: LeaseID) async throws -> Int64 {
        note("keepalive")
        return try await inner.keepAlive(lease)
    }
    func revokeLease(_ lease: LeaseID) async throws {
        note("revoke")
        try await inner.revokeLease(lease)
    }
    func watch(_ key: [UInt8], prefix: Bool, fromRevision: Revision) -> AsyncThrowingStream<WatchBatch, any Error> {
        inner.watch(key, prefix: prefix, fromRevision: fromRevision)
    }
}
