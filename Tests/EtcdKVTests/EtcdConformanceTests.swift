import ClusterKV
import EtcdKV
import EtcdTestSupport
import Foundation
import XCTest

/// The conformance checks against a real one-member etcd (started per class, stopped at its end).
final class EtcdConformanceTests: XCTestCase {
    nonisolated(unsafe) static var etcd: EtcdCluster?
    var store: EtcdClusterStore!

    override class func setUp() {
        super.setUp()
        etcd = try? EtcdCluster(size: 1)
    }

    override class func tearDown() {
        etcd?.stop()
        etcd = nil
        super.tearDown()
    }

    override func setUp() async throws {
        guard let etcd = Self.etcd else {
            // Starting it once more gives the reason.
            _ = try EtcdCluster(size: 1)
            throw EtcdFixtureError("etcd did not start")
        }
        store = try EtcdClusterStore(EtcdConfiguration(endpoints: etcd.endpoints))
    }

    override func tearDown() async throws {
        try await store?.shutdown()
    }

    var suite: ClusterStoreConformance {
        let etcd = Self.etcd!
        return ClusterStoreConformance(
            backend: ConformanceBackend(
                store: store, compact: { try etcd.compact($0) },
                advance: { try await Task.sleep(for: .milliseconds(Int($0 * 1000))) }))
    }

    func testRevisions() async throws { try await suite.revisions() }
    func testBytes() async throws { try await suite.bytes() }
    func testPrefixes() async throws { try await suite.prefixes() }
    func testTransactionComparisons() async throws { try await suite.transactionComparisons() }
    func testTransactionOperations() async throws { try await suite.transactionOperations() }
    func testTransactionDuplicateKeys() async throws { try await suite.transactionDuplicateKeys() }
    func testLeases() async throws { try await suite.leases() }
    func testLeaseExpiry() async throws { try await suite.leaseExpiry() }
    func testWatchFromRevision() async throws { try await suite.watchFromRevision() }
    func testCompaction() async throws { try await suite.compaction() }
}
