// What every ClusterStore must do, as etcd 3.4 does it: run against real etcd (EtcdConformanceTests)
// and against the in-memory double (MemoryConformanceTests), so the cluster logic's unit tests on
// the double mean what they say. Each check works under its own random key prefix, so one store
// can serve several checks.
import ClusterKV
import Foundation
import XCTest

/// What a backend offers the checks beside the store itself.
struct ConformanceBackend {
    var store: any ClusterStore
    /// Compacts the store's history up to `revision`.
    var compact: (Revision) async throws -> Void
    /// Lets `seconds` of lease time pass (real time for etcd, the double's clock for the double).
    var advance: (Double) async throws -> Void
}

struct ClusterStoreConformance {
    let backend: ConformanceBackend
    var store: any ClusterStore { backend.store }
    let prefix: [UInt8] = Array("conf/\(UInt32.random(in: 0...UInt32.max))/".utf8)

    func key(_ name: String) -> [UInt8] { prefix + Array(name.utf8) }

    // MARK: Revisions

    /// Every change takes the next revision; create/mod revision and version follow etcd's rules;
    /// a change of nothing (deleting a missing key, a transaction that writes nothing) takes none.
    func revisions() async throws {
        let a = key("a")
        let r1 = try await store.put(a, [1], lease: 0)
        let r2 = try await store.put(a, [1], lease: 0)
        XCTAssertEqual(r2, r1 + 1, "a put of the same value is still a change")
        var (values, revision) = try await store.range(a, prefix: false)
        XCTAssertEqual(revision, r2)
        XCTAssertEqual(values.map(\.createRevision), [r1])
        XCTAssertEqual(values.map(\.modRevision), [r2])
        XCTAssertEqual(values.map(\.version), [2])
        XCTAssertEqual(values.map(\.lease), [0])

        let (r3, deleted) = try await store.delete(a, prefix: false)
        XCTAssertEqual(deleted, 1)
        XCTAssertEqual(r3, r2 + 1)
        let (r4, none) = try await store.delete(a, prefix: false)
        XCTAssertEqual(none, 0)
        XCTAssertEqual(r4, r3, "deleting nothing is no change")

        let r5 = try await store.put(a, [2], lease: 0)
        XCTAssertEqual(r5, r3 + 1)
        (values, revision) = try await store.range(a, prefix: false)
        XCTAssertEqual(values.map(\.createRevision), [r5], "created again after its deletion")
        XCTAssertEqual(values.map(\.version), [1])
        XCTAssertEqual(revision, r5)

        let readOnly = try await store.transaction([], success: [.range(key: a, prefix: false)], failure: [])
        XCTAssertEqual(readOnly.revision, r5, "a transaction that writes nothing takes no revision")
        let missing = try await store.range(key("missing"), prefix: false)
        XCTAssertEqual(missing.values, [])
        XCTAssertEqual(missing.revision, r5, "a read of a missing key still says the store's revision")
    }

    /// Keys and values are bytes: not UTF-8, NUL, empty.
    func bytes() async throws {
        let odd = prefix + [0xff, 0x00, 0xfe, 0x2f, 0x80]
        try await store.put(odd, [0x00, 0xff, 0x80], lease: 0)
        try await store.put(key("empty"), [], lease: 0)
        let odd2 = try await store.range(odd, prefix: false).values
        XCTAssertEqual(odd2.map(\.key), [odd])
        XCTAssertEqual(odd2.map(\.value), [[0x00, 0xff, 0x80]])
        let empty = try await store.range(key("empty"), prefix: false).values
        XCTAssertEqual(empty.map(\.value), [[]])
        XCTAssertEqual(empty.map(\.version), [1], "an empty value is a value")
    }

    // MARK: Prefixes

    /// A prefix covers exactly the keys starting with it, in byte order, also past a 0xff byte.
    func prefixes() async throws {
        for name in ["d/b", "d/a", "d", "d/\u{e9}", "e", "d0", "c/x"] {
            try await store.put(key(name), Array(name.utf8), lease: 0)
        }
        let ff = prefix + [0x64, 0x2f, 0xff]  // "d/\xff"
        try await store.put(ff, [1], lease: 0)
        try await store.put(ff + [0xff, 0x01], [2], lease: 0)
        let under = try await store.range(key("d/"), prefix: true).values.map(\.key)
        XCTAssertEqual(under, [key("d/a"), key("d/b"), ff, ff + [0xff, 0x01], key("d/\u{e9}")].sorted { $0.lexicographicallyPrecedes($1) })
        let underFF = try await store.range(ff, prefix: true).values.map(\.key)
        XCTAssertEqual(underFF, [ff, ff + [0xff, 0x01]])
        let all = try await store.range(prefix, prefix: true).values.map(\.key)
        XCTAssertEqual(all, all.sorted { $0.lexicographicallyPrecedes($1) }, "in byte order")
        XCTAssertEqual(all.count, 9)
        let (_, deleted) = try await store.delete(key("d/"), prefix: true)
        XCTAssertEqual(deleted, 5)
        let rest = try await store.range(prefix, prefix: true).values.map(\.key)
        XCTAssertEqual(rest, [key("c/x"), key("d"), key("d0"), key("e")])
    }

    // MARK: Transactions

    /// Comparisons as etcd makes them: a missing key has version, create and mod revision 0 and
    /// lease 0, but a comparison of its VALUE is false whatever the operator (etcd cannot tell
    /// a missing value from an empty one, so it fails them all).
    func transactionComparisons() async throws {
        let a = key("a"), missing = key("missing")
        let created = try await store.transaction(
            [Compare(key: a, .equal, .version(0))], success: [.put(key: a, value: Array("v1".utf8), lease: 0)], failure: [])
        XCTAssertTrue(created.succeeded, "create if absent")
        let again = try await store.transaction(
            [Compare(key: a, .equal, .createRevision(0))], success: [.put(key: a, value: [9], lease: 0)],
            failure: [.range(key: a, prefix: false)])
        XCTAssertFalse(again.succeeded)
        XCTAssertEqual(again.ranges.map { $0.map(\.value) }, [[Array("v1".utf8)]], "the failure branch ran and read")
        XCTAssertEqual(again.revision, created.revision, "the failure branch wrote nothing")

        let checks: [(Compare, Bool, String)] = [
            (Compare(key: a, .equal, .modRevision(created.revision)), true, "mod equal"),
            (Compare(key: a, .less, .modRevision(created.revision + 1)), true, "mod less"),
            (Compare(key: a, .greater, .modRevision(created.revision)), false, "mod greater"),
            (Compare(key: a, .notEqual, .version(1)), false, "version not equal"),
            (Compare(key: a, .greater, .version(0)), true, "version greater"),
            (Compare(key: a, .equal, .value(Array("v1".utf8))), true, "value equal"),
            (Compare(key: a, .greater, .value(Array("v0".utf8))), true, "value greater, bytewise"),
            (Compare(key: a, .less, .value(Array("v1\u{0}".utf8))), true, "value less: a prefix is less"),
            (Compare(key: a, .notEqual, .value([])), true, "value not equal to empty"),
            (Compare(key: a, .equal, .lease(0)), true, "no lease is lease 0"),
            (Compare(key: missing, .equal, .version(0)), true, "missing: version 0"),
            (Compare(key: missing, .equal, .createRevision(0)), true, "missing: create 0"),
            (Compare(key: missing, .equal, .modRevision(0)), true, "missing: mod 0"),
            (Compare(key: missing, .less, .modRevision(1)), true, "missing: mod less than 1"),
            (Compare(key: missing, .equal, .lease(0)), true, "missing: lease 0"),
            (Compare(key: missing, .equal, .value([])), false, "missing: value equal empty fails"),
            (Compare(key: missing, .notEqual, .value([1])), false, "missing: value not equal fails too"),
            (Compare(key: missing, .less, .value([1])), false, "missing: value less fails too"),
        ]
        for (compare, expected, what) in checks {
            let result = try await store.transaction([compare], success: [], failure: [])
            XCTAssertEqual(result.succeeded, expected, what)
        }
        // Several comparisons: all must hold.
        let mixed = try await store.transaction(
            [Compare(key: a, .equal, .version(1)), Compare(key: missing, .equal, .version(1))], success: [], failure: [])
        XCTAssertFalse(mixed.succeeded)
    }

    /// A transaction's writes take one revision; its reads see its earlier writes; the ranges
    /// come in the order of its range operations.
    func transactionOperations() async throws {
        let a = key("t/a"), b = key("t/b"), c = key("t/c")
        try await store.put(c, [3], lease: 0)
        let result = try await store.transaction(
            [],
            success: [
                .range(key: key("t/"), prefix: true),
                .put(key: a, value: [1], lease: 0),
                .put(key: b, value: [2], lease: 0),
                .delete(key: c, prefix: false),
                .range(key: key("t/"), prefix: true),
            ], failure: [])
        XCTAssertTrue(result.succeeded)
        XCTAssertEqual(result.ranges.count, 2)
        XCTAssertEqual(result.ranges.first?.map(\.key), [c])
        XCTAssertEqual(result.ranges.last?.map(\.key), [a, b], "a read sees the transaction's earlier writes")
        let values = try await store.range(key("t/"), prefix: true)
        XCTAssertEqual(values.revision, result.revision)
        XCTAssertEqual(Set(values.values.map(\.modRevision)), [result.revision], "one revision for every write of it")
        XCTAssertEqual(values.values.map(\.createRevision), [result.revision, result.revision])
    }

    /// etcd refuses a transaction that puts a key twice, or puts and deletes it, in either
    /// branch, whichever runs, and writes nothing.
    func transactionDuplicateKeys() async throws {
        let a = key("dup/a")
        let before = try await store.put(key("dup/x"), [0], lease: 0)
        let cases: [(String, [ClusterOperation], [ClusterOperation])] = [
            ("two puts", [.put(key: a, value: [1], lease: 0), .put(key: a, value: [2], lease: 0)], []),
            ("a put and a delete", [.put(key: a, value: [1], lease: 0), .delete(key: a, prefix: false)], []),
            ("a put under a deleted prefix", [.delete(key: key("dup/"), prefix: true), .put(key: a, value: [1], lease: 0)], []),
            ("two puts in the branch that does not run", [], [.put(key: a, value: [1], lease: 0), .put(key: a, value: [2], lease: 0)]),
        ]
        for (what, success, failure) in cases {
            do {
                _ = try await store.transaction([], success: success, failure: failure)
                XCTFail("\(what): accepted")
            } catch ClusterStoreError.failed {
            } catch {
                XCTFail("\(what): \(error), expected failed")
            }
        }
        let after = try await store.range(key("dup/"), prefix: true)
        XCTAssertEqual(after.revision, before, "nothing written")
        XCTAssertEqual(after.values.map(\.key), [key("dup/x")])
        // A delete and a read of one key, or two deletes, are fine.
        let fine = try await store.transaction(
            [], success: [.delete(key: a, prefix: false), .delete(key: a, prefix: false), .range(key: a, prefix: false)], failure: [])
        XCTAssertTrue(fine.succeeded)
    }

    // MARK: Leases

    /// A key put with a lease carries it; revoking deletes the keys; a revoked or unknown lease
    /// is `leaseNotFound` for keepAlive, revoke, put and a transaction's put.
    func leases() async throws {
        let (lease, ttl) = try await store.grantLease(ttl: 30)
        XCTAssertNotEqual(lease, 0)
        XCTAssertEqual(ttl, 30)
        let a = key("l/a"), b = key("l/b")
        try await store.put(a, [1], lease: lease)
        _ = try await store.transaction([], success: [.put(key: b, value: [2], lease: lease)], failure: [])
        let leased = try await store.range(a, prefix: false).values.map(\.lease)
        XCTAssertEqual(leased, [lease])
        let held = try await store.transaction([Compare(key: a, .equal, .lease(lease))], success: [], failure: [])
        XCTAssertTrue(held.succeeded, "compare by lease")
        let left = try await store.keepAlive(lease)
        XCTAssertTrue((29...30).contains(left), "keepAlive renews to the TTL, got \(left)")
        let before = try await store.range(a, prefix: false).revision
        try await store.revokeLease(lease)
        let after = try await store.range(key("l/"), prefix: true)
        XCTAssertEqual(after.values, [], "revoking deletes the lease's keys")
        XCTAssertEqual(after.revision, before + 1, "one revision for the revocation")
        await assertLeaseNotFound(lease, "keepAlive") { _ = try await store.keepAlive(lease) }
        await assertLeaseNotFound(lease, "revoke") { try await store.revokeLease(lease) }
        await assertLeaseNotFound(lease, "put") { try await store.put(a, [1], lease: lease) }
        await assertLeaseNotFound(lease, "txn put") {
            _ = try await store.transaction([], success: [.put(key: a, value: [1], lease: lease)], failure: [])
        }
        let unwritten = try await store.range(a, prefix: false).values
        XCTAssertEqual(unwritten, [], "a put on a missing lease writes nothing")
    }

    /// A lease not kept alive expires: its keys are deleted (a watch sees the deletions) and it
    /// is gone; one kept alive is not.
    func leaseExpiry() async throws {
        let (short, _) = try await store.grantLease(ttl: 1)
        let (kept, _) = try await store.grantLease(ttl: 2)
        let a = key("x/a"), b = key("x/b")
        let start = try await store.put(a, [1], lease: short)
        try await store.put(b, [2], lease: kept)
        for _ in 0..<6 {
            try await backend.advance(0.5)
            _ = try await store.keepAlive(kept)
        }
        let left = try await store.range(key("x/"), prefix: true).values.map(\.key)
        XCTAssertEqual(left, [b], "the lease not kept alive expired within 3 s and took its key")
        await assertLeaseNotFound(short, "keepAlive of an expired lease") { _ = try await store.keepAlive(short) }
        var deletions: [[UInt8]] = []
        for try await batch in store.watch(key("x/"), prefix: true, fromRevision: start + 1) {
            for case .delete(let k, let rev) in batch.events {
                deletions.append(k)
                XCTAssertGreaterThan(rev, start)
            }
            if !deletions.isEmpty { break }
        }
        XCTAssertEqual(deletions, [a], "the expiry is a deletion a watch sees")
        try await store.revokeLease(kept)
    }

    // MARK: Watches

    /// A watch from a past revision replays what followed it in order, then goes on live; a
    /// deletion carries its own revision; a watch of one key sees only that key.
    func watchFromRevision() async throws {
        let a = key("w/a"), b = key("w/b"), other = key("wx")
        let r1 = try await store.put(a, [1], lease: 0)
        let r2 = try await store.put(b, [2], lease: 0)
        try await store.put(other, [0], lease: 0)
        let (r3, _) = try await store.delete(a, prefix: false)
        var seen: [WatchEvent] = []
        var live: Revision = 0
        for try await batch in store.watch(key("w/"), prefix: true, fromRevision: r1 + 1) {
            XCTAssertGreaterThanOrEqual(batch.revision, Self.revision(of: batch.events.last!))
            seen += batch.events
            if live == 0 && seen.count == 2 { live = try await store.put(a, [3], lease: 0) }
            if seen.count >= 3 { break }
        }
        XCTAssertEqual(seen.count, 3)
        guard seen.count == 3 else { return }
        XCTAssertEqual(Self.describe(seen[0]), "put \(b) \(r2)")
        XCTAssertEqual(Self.describe(seen[1]), "delete \(a) \(r3)")
        XCTAssertEqual(Self.describe(seen[2]), "put \(a) \(live)")
        if case .put(let kv) = seen[2] {
            XCTAssertEqual(kv.value, [3])
            XCTAssertEqual(kv.version, 1)
            XCTAssertEqual(kv.createRevision, live)
        }

        // One key: only it, and a transaction's writes to it come in one batch in order.
        var single: [WatchBatch] = []
        let stream = store.watch(b, prefix: false, fromRevision: live + 1)
        let txn = try await store.transaction(
            [], success: [.put(key: a, value: [4], lease: 0), .put(key: b, value: [5], lease: 0)], failure: [])
        for try await batch in stream {
            single.append(batch)
            break
        }
        XCTAssertEqual(single.flatMap(\.events).map(Self.describe), ["put \(b) \(txn.revision)"])
    }

    /// A watch from a compacted revision fails with `compacted` and the oldest revision kept;
    /// from that revision on it works.
    func compaction() async throws {
        let a = key("c/a")
        let r1 = try await store.put(a, [1], lease: 0)
        let r2 = try await store.put(a, [2], lease: 0)
        let r3 = try await store.put(a, [3], lease: 0)
        try await backend.compact(r2)
        do {
            for try await _ in store.watch(a, prefix: false, fromRevision: r1) {
                XCTFail("a watch from a compacted revision delivered events")
                break
            }
            XCTFail("a watch from a compacted revision ended without an error")
        } catch ClusterStoreError.compacted(let oldest) {
            XCTAssertEqual(oldest, r2, "the oldest revision still available")
        }
        var revisions: [Revision] = []
        for try await batch in store.watch(a, prefix: false, fromRevision: r2) {
            revisions += batch.events.map(Self.revision)
            if revisions.count >= 2 { break }
        }
        XCTAssertEqual(revisions, [r2, r3])
    }

    // MARK: Helpers

    func assertLeaseNotFound(_ lease: LeaseID, _ what: String, _ body: () async throws -> Void) async {
        do {
            try await body()
            XCTFail("\(what): no error on a missing lease")
        } catch ClusterStoreError.leaseNotFound(let id) {
            XCTAssertEqual(id, lease, what)
        } catch {
            XCTFail("\(what): \(error), expected leaseNotFound")
        }
    }

    static func revision(of event: WatchEvent) -> Revision {
        switch event {
        case .put(let kv): kv.modRevision
        case .delete(_, let revision): revision
        }
    }

    static func describe(_ event: WatchEvent) -> String {
        switch event {
        case .put(let kv): "put \(kv.key) \(kv.modRevision)"
        case .delete(let key, let revision): "delete \(key) \(revision)"
        }
    }
}
