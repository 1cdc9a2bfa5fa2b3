import ClusterKV
import Testing

private func b(_ s: String) -> [UInt8] { Array(s.utf8) }

@Suite struct MemoryClusterStoreTests {
    @Test func revisionsVersionsAndRanges() async throws {
        let store = MemoryClusterStore(clock: .manual)
        #expect(store.currentRevision == 1)
        let r1 = try await store.put(b("a/1"), b("x"), lease: 0)
        let r2 = try await store.put(b("a/1"), b("y"), lease: 0)
        let r3 = try await store.put(b("a/2"), b("z"), lease: 0)
        #expect((r1, r2, r3) == (2, 3, 4))
        let (one, rev) = try await store.range(b("a/1"), prefix: false)
        #expect(rev == 4)
        #expect(one == [KeyValue(key: b("a/1"), value: b("y"), createRevision: 2, modRevision: 3, version: 2, lease: 0)])
        let all = try await store.range(b("a/"), prefix: true).values
        #expect(all.map(\.key) == [b("a/1"), b("a/2")])
        let deleted = try await store.delete(b("a/"), prefix: true)
        #expect(deleted.deleted == 2 && deleted.revision == 5)
        // Deleting nothing makes no revision.
        #expect(try await store.delete(b("a/"), prefix: true) == (5, 0))
        // A key created again starts over.
        try await store.put(b("a/1"), b("w"), lease: 0)
        let again = try await store.range(b("a/1"), prefix: false).values[0]
        #expect(again.createRevision == 6 && again.version == 1)
    }

    @Test func transactionsCompareAndRunOneBranchAtOneRevision() async throws {
        let store = MemoryClusterStore(clock: .manual)
        // Create-if-absent: version == 0.
        let first = try await store.transaction([Compare(key: b("k"), .equal, .version(0))],
                                                success: [.put(key: b("k"), value: b("1"), lease: 0), .put(key: b("j"), value: b("2"), lease: 0), .range(key: b("k"), prefix: false)],
                                                failure: [.range(key: b("k"), prefix: false)])
        #expect(first.succeeded && first.revision == 2)
        #expect(first.ranges.count == 1 && first.ranges[0][0].value == b("1"))
        let both = try await store.range(b(""), prefix: true).values
        #expect(both.allSatisfy { $0.createRevision == 2 })
        let second = try await store.transaction([Compare(key: b("k"), .equal, .version(0))],
                                                 success: [.put(key: b("k"), value: b("3"), lease: 0)],
                                                 failure: [.range(key: b("k"), prefix: false)])
        #expect(!second.succeeded && second.revision == 2 && second.ranges[0][0].value == b("1"))
        // Comparisons: mod revision, create revision, value, greater/less, a missing key's zeros.
        let checks: [(Compare, Bool)] = [
            (Compare(key: b("k"), .equal, .modRevision(2)), true),
            (Compare(key: b("k"), .less, .createRevision(3)), true),
            (Compare(key: b("k"), .greater, .createRevision(2)), false),
            (Compare(key: b("k"), .equal, .value(b("1"))), true),
            (Compare(key: b("k"), .notEqual, .value(b("1"))), false),
            (Compare(key: b("nope"), .equal, .createRevision(0)), true),
            (Compare(key: b("nope"), .equal, .lease(0)), true),
        ]
        for (compare, expected) in checks {
            let r = try await store.transaction([compare], success: [], failure: [])
            #expect(r.succeeded == expected, "\(compare)")
        }
        await #expect(throws: ClusterStoreError.failed("duplicate key given in txn request")) {
            _ = try await store.transaction([], success: [.put(key: b("d"), value: [], lease: 0), .put(key: b("d"), value: [], lease: 0)], failure: [])
        }
    }

    @Test func leasesExpireOnTheDrivenClockAndTakeTheirKeys() async throws {
        let store = MemoryClusterStore(clock: .manual)
        let (lease, ttl) = try await store.grantLease(ttl: 3)
        #expect(ttl == 3)
        try await store.put(b("n/a"), b("1"), lease: lease)
        try await store.put(b("n/b"), b("1"), lease: lease)
        store.advance(seconds: 2)
        #expect(try await store.keepAlive(lease) == 3)
        store.advance(seconds: 2.5)
        #expect(try await store.range(b("n/"), prefix: true).values.count == 2)
        store.advance(seconds: 1)
        #expect(try await store.range(b("n/"), prefix: true).values.isEmpty)
        await #expect(throws: ClusterStoreError.leaseNotFound(lease)) { _ = try await store.keepAlive(lease) }
        await #expect(throws: ClusterStoreError.leaseNotFound(lease)) { try await store.put(b("x"), [], lease: lease) }
        let (other, _) = try await store.grantLease(ttl: 10)
        try await store.put(b("m"), b("1"), lease: other)
        try await store.revokeLease(other)
        #expect(try await store.range(b("m"), prefix: false).values.isEmpty)
    }

    @Test func watchesReplayFromARevisionAndFailWhenCompacted() async throws {
        let store = MemoryClusterStore(clock: .manual)
        try await store.put(b("w/1"), b("a"), lease: 0)          // 2
        try await store.put(b("other"), b("a"), lease: 0)        // 3
        _ = try await store.transaction([], success: [.put(key: b("w/2"), value: b("b"), lease: 0), .delete(key: b("w/1"), prefix: false)], failure: []) // 4
        var iterator = store.watch(b("w/"), prefix: true, fromRevision: 2).makeAsyncIterator()
        let first = try await iterator.next()
        #expect(first?.revision == 2 && first?.events.count == 1)
        let second = try await iterator.next()
        #expect(second?.revision == 4)
        #expect(second?.events == [.put(KeyValue(key: b("w/2"), value: b("b"), createRevision: 4, modRevision: 4, version: 1, lease: 0)),
                                   .delete(key: b("w/1"), modRevision: 4)])
        try await store.put(b("w/3"), b("c"), lease: 0)          // 5, live
        #expect(try await iterator.next()?.revision == 5)
        store.compact(5)
        var old = store.watch(b("w/"), prefix: true, fromRevision: 3).makeAsyncIterator()
        await #expect(throws: ClusterStoreError.compacted(oldestAvailable: 5)) { _ = try await old.next() }
    }

    @Test func anUnreachableStoreFailsCallsAndEndsWatches() async throws {
        let store = MemoryClusterStore(clock: .manual)
        var iterator = store.watch(b(""), prefix: true, fromRevision: 0).makeAsyncIterator()
        store.setReachable(false)
        await #expect(throws: ClusterStoreError.self) { _ = try await iterator.next() }
        await #expect(throws: ClusterStoreError.unavailable("memory store unreachable")) { try await store.put(b("a"), [], lease: 0) }
        store.setReachable(true)
        #expect(try await store.put(b("a"), [], lease: 0) == 2)
    }
}
