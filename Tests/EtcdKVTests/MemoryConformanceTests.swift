import ClusterKV
import Foundation
import XCTest

/// The same conformance checks against `MemoryClusterStore` (on a clock the checks drive), so the
/// cluster logic's unit tests on the double hold on etcd.
final class MemoryConformanceTests: XCTestCase {
    var suite: ClusterStoreConformance {
        let store = MemoryClusterStore(clock: .manual)
        return ClusterStoreConformance(
            backend: ConformanceBackend(
                store: store, compact: { store.compact($0) }, advance: { store.advance(seconds: $0) }))
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
