import Cluster
import ClusterKV
import Coordination
import CoordinationTestSupport
import Foundation
import Synchronization
import Testing

/// How many times node `name`'s change-record key was put so far.
func recordPuts(_ cluster: TestCluster, _ name: String) async throws -> Int64 {
    try await cluster.store.range(Array("test/cluster/c/\(name)".utf8), prefix: false).values.first?.version ?? 0
}

/// Writes `d/f1` … `d/f<writes>` (or `named(i)`) on `a`, each admitted locally (its right held)
/// and its change told, pausing `pause` after every tenth (a tool's own work between its writes);
/// returns the seconds the stream took.
@discardableResult
func streamOfLocalWrites(_ a: Coordinator, _ writes: Int, pause: Duration? = nil,
                         named: (Int) -> String = { "d/f\($0)" }) async throws -> Double {
    let started = ContinuousClock.now
    for i in 1...writes {
        let grant = try #require(a.tryCoordinateImmediately(write(named(i)), origin: origin), "write \(i) was not local")
        grant.didChange(path(named(i)))
        grant.release()
        if let pause, i % 10 == 0 { try await Task.sleep(for: pause) }
    }
    let took = ContinuousClock.now - started
    return Double(took.components.seconds) + Double(took.components.attoseconds) / 1e18
}

/// Node b hears every change of `d/f0` … `d/f<writes>`, in order.
func expectBHeardInOrder(_ cluster: TestCluster, _ writes: Int) async {
    let told = { cluster.journal.all.filter { $0.hasPrefix("b:dropCaches(changed d/f") } }
    #expect(await eventually(10) { told().count == writes + 1 }, "b heard \(told().count) of \(writes + 1)")
    #expect(told() == (0...writes).map { "b:dropCaches(changed d/f\($0))" })
}

/// The publisher paces change records: a stream of writes costs etcd one put of the node's
/// change-record key per `recordInterval`, every change still told to every node in order, and
/// what may not wait (an answer to another node's ask) is never held back by the pacing.
@Suite(.serialized, .timeLimit(.minutes(1))) struct ClusterPublisherTests {

    @Test func theRecordsOfAStreamOfWritesGoInOnePutPerInterval() async throws {
        let cluster = TestCluster()
        let interval = 0.25
        try await cluster.add("a", recordInterval: interval)
        try await cluster.add("b")
        defer { Task { await cluster.stop() } }
        let a = cluster.coordinator("a")
        // The first write takes a's right on the folder (and sends its record).
        let first = try await access(a, [write("d/f0")]).get()
        first.didChange(path("d/f0"))
        first.release()
        await cluster.node("a").flush()
        let before = try await recordPuts(cluster, "a")
        let writes = 200
        let elapsed = try await streamOfLocalWrites(a, writes)
        await expectBHeardInOrder(cluster, writes)
        // At most one put per interval the writes took, and one for what was left.
        let puts = try await recordPuts(cluster, "a") - before
        #expect(puts >= 1 && Double(puts) <= elapsed / interval + 2, "\(puts) puts for \(writes) writes in \(elapsed) s")
    }

    /// The paced publisher sleeps until its interval is over, and is woken when something that
    /// may not wait is queued: a presenter registered while a record waits goes at once, with it.
    @Test func aPresenterQueuedWhileRecordsWaitGoesAtOnceWithThem() async throws {
        let cluster = TestCluster()
        try await cluster.add("a", recordInterval: 5)
        try await cluster.add("b")
        defer { Task { await cluster.stop() } }
        let a = cluster.coordinator("a")
        // The first record goes at once; the second waits for the interval.
        for name in ["d/f1", "d/f2"] {
            let grant = try await access(a, [write(name)]).get()
            grant.didChange(path(name))
            grant.release()
            if name == "d/f1" { #expect(await eventually(3) { cluster.journal.contains("b:dropCaches(changed d/f1)") }) }
        }
        try await Task.sleep(for: .milliseconds(300))
        #expect(!cluster.journal.contains("b:dropCaches(changed d/f2)"), "the second record did not wait")
        let started = ContinuousClock.now
        let p = RecordingPresenter("P", at: path("e/doc.txt"), journal: cluster.journal)
        _ = try a.addFilePresenter(p, owner: origin)
        #expect(await eventually(3) {
            cluster.node("b").status().nodes.first { $0.name == "a" }?.presenters == [path("e/doc.txt")]
                && cluster.journal.contains("b:dropCaches(changed d/f2)")
        })
        let waited = ContinuousClock.now - started
        #expect(waited < .seconds(2), "the presenter and the waiting record took \(waited)")
        // A node stopped while its publisher sleeps is not held up by the interval.
        let grant = try await access(a, [write("d/f3")]).get()
        grant.didChange(path("d/f3"))
        grant.release()
        let stopping = ContinuousClock.now
        await cluster.node("a").stop()
        #expect(ContinuousClock.now - stopping < .seconds(3))
    }

    /// An ask comes after the change records its node queued before it, in etcd's order: the
    /// asked node has dropped its caches for those changes (and followed a move) before it runs
    /// the ask, and the records are sent at once for it, not after their pacing. Before, the ask
    /// went ahead of a record the pacing held back, and the other node heard of the change seconds
    /// after its presenter was asked for the next one.
    @Test func anAskComesAfterTheRecordsItsNodeQueuedBeforeIt() async throws {
        let cluster = TestCluster()
        try await cluster.add("a")
        try await cluster.add("b", recordInterval: 3)
        defer { Task { await cluster.stop() } }
        let j = cluster.journal
        try await cluster.present("P", at: "docs/report.txt", on: "a", seenBy: "b")
        // b writes twice: the first record goes at once, the second waits for the interval.
        for name in ["other/x", "other/y"] {
            let grant = try await access(cluster.coordinator("b"), [write(name)]).get()
            grant.didChange(path(name))
            grant.release()
            if name == "other/x" { await cluster.node("b").flush() }
        }
        let started = ContinuousClock.now
        let grant = try await access(cluster.coordinator("b"), [write("docs/report.txt")]).get()
        let waited = ContinuousClock.now - started
        grant.release()
        #expect(waited < .seconds(2), "b's ask waited \(waited) (the records' pacing?)")
        let told = j.all.firstIndex(of: "a:dropCaches(changed other/y)")
        let asked = j.all.firstIndex(of: "P:relinquishToWriter")
        #expect(told != nil && asked != nil && told! < asked!, "a asked P before it heard of b's earlier write: \(j.all)")
    }

    @Test func anAnswerToAnAskIsNotHeldBackByRecordsWaitingToBeSent() async throws {
        let cluster = TestCluster()
        // b's records wait 3 s between puts: an answer that waited with them would take that long.
        try await cluster.add("a")
        try await cluster.add("b", recordInterval: 3)
        defer { Task { await cluster.stop() } }
        let j = cluster.journal
        try await cluster.present("P", at: "docs/report.txt", on: "b", seenBy: "a")
        // b writes twice: the first record goes at once, the second waits for the interval.
        for name in ["other/x", "other/y"] {
            let grant = try await access(cluster.coordinator("b"), [write(name)]).get()
            grant.didChange(path(name))
            grant.release()
        }
        let started = ContinuousClock.now
        let grant = try await access(cluster.coordinator("a"), [write("docs/report.txt")]).get()
        let waited = ContinuousClock.now - started
        #expect(waited < .seconds(2), "a's write waited \(waited) for b's answer")
        #expect(j.contains("P:relinquishToWriter"))
        grant.didChange(path("docs/report.txt"))
        grant.release()
        #expect(await eventually { j.contains("P:didChange") })
        // b's waiting record is still told.
        #expect(await eventually(10) { j.contains("a:dropCaches(changed other/y)") })
    }
}

/// Change records that concern no presenter of another node wait for `unpresentedRecordInterval`
/// (issue 19's throughput: one etcd transaction per that interval while a node alone streams
/// writes), while a record another node's presenter must hear goes within `recordInterval`, and a
/// right another node recalls goes only after the records of the accesses that used it, so that
/// node's access comes after its caches were dropped (docs/cluster.md, "Coherence").
@Suite(.serialized, .timeLimit(.minutes(1))) struct ClusterUnpresentedRecordsTests {
    /// `name` written on node `node`'s coordinator, its change told.
    func written(_ cluster: TestCluster, _ node: String, _ name: String) async throws {
        let grant = try await access(cluster.coordinator(node), [write(name)]).get()
        grant.didChange(path(name))
        grant.release()
    }

    /// Node `node` has heard of `name`'s change (its caches dropped).
    func heard(_ j: Journal, _ node: String, _ name: String) -> Bool { j.contains("\(node):dropCaches(changed \(name))") }

    @Test func aStreamOfWritesNobodyElsePresentsCostsOnePutPerUnpresentedInterval() async throws {
        let cluster = TestCluster()
        let unpresented = 0.2
        try await cluster.add("a", unpresentedRecordInterval: unpresented)
        try await cluster.add("b")
        defer { Task { await cluster.stop() } }
        let a = cluster.coordinator("a")
        try await written(cluster, "a", "d/f0")
        await cluster.node("a").flush()
        let before = try await recordPuts(cluster, "a")
        let writes = 200
        // Pauses longer than `recordInterval`, after which the records of before would have gone.
        let elapsed = try await streamOfLocalWrites(a, writes, pause: .milliseconds(20))
        await expectBHeardInOrder(cluster, writes)
        let puts = try await recordPuts(cluster, "a") - before
        #expect(puts >= 1 && Double(puts) <= elapsed / unpresented + 2, "\(puts) puts for \(writes) writes in \(elapsed) s")
    }

    @Test func aChangeAnotherNodesPresenterMustHearGoesWithinTheRecordInterval() async throws {
        let cluster = TestCluster()
        // a's records that concern nobody elsewhere wait 5 s; those b's presenters must hear, 2 ms.
        try await cluster.add("a", unpresentedRecordInterval: 5)
        try await cluster.add("b")
        defer { Task { await cluster.stop() } }
        let j = cluster.journal
        try await cluster.present("P", at: "docs/report.txt", on: "b", seenBy: "a")
        _ = try cluster.coordinator("b").addFilePresenter(RecordingPresenter("F", at: path("shared"), journal: j), owner: origin)
        await cluster.node("b").flush()
        #expect(await eventually { cluster.presenters(of: "b", seenBy: "a") == [path("docs/report.txt"), path("shared")] })
        // The first record goes at once (no batch before it); the next waits.
        try await written(cluster, "a", "other/x")
        #expect(await eventually(3) { heard(j, "b", "other/x") })
        try await written(cluster, "a", "other/y")
        try await Task.sleep(for: .milliseconds(300))
        #expect(!heard(j, "b", "other/y"), "a record nobody elsewhere presents did not wait: the test proves nothing")
        // Under a folder b presents: told at once, with the record queued before it.
        let started = ContinuousClock.now
        try await written(cluster, "a", "shared/z")
        #expect(await eventually(3) { j.contains("F:subitemDidChange(shared/z)") }, "\(j.all)")
        #expect(ContinuousClock.now - started < .seconds(2), "b's folder presenter heard of shared/z after \(ContinuousClock.now - started)")
        let y = j.index("b:dropCaches(changed other/y)"), z = j.index("b:dropCaches(changed shared/z)")
        #expect(y != nil && z != nil && y! < z!, "b heard of other/y after shared/z, or not at all: \(j.all)")
        // The item b presents (a's write asks P): told at once too, after what waited before it.
        try await written(cluster, "a", "other/w")
        try await Task.sleep(for: .milliseconds(300))
        #expect(!heard(j, "b", "other/w"))
        let again = ContinuousClock.now
        try await written(cluster, "a", "docs/report.txt")
        #expect(await eventually(3) { j.contains("P:didChange") }, "\(j.all)")
        #expect(ContinuousClock.now - again < .seconds(2))
        let w = j.index("b:dropCaches(changed other/w)"), doc = j.index("b:dropCaches(changed docs/report.txt)")
        #expect(w != nil && doc != nil && w! < doc!, "b heard of other/w after docs/report.txt, or not at all: \(j.all)")
    }

    /// An answer to another node's ask goes after the change records its node queued before it
    /// (sent at once for it, though they would have waited): the asking node has dropped its
    /// caches of them (a presenter's save for the ask above all) before its access goes on.
    @Test func anAnswerComesAfterTheRecordsItsNodeQueuedBeforeIt() async throws {
        let cluster = TestCluster()
        try await cluster.add("a")
        try await cluster.add("b", unpresentedRecordInterval: 5)
        defer { Task { await cluster.stop() } }
        let j = cluster.journal
        try await cluster.present("P", at: "docs/report.txt", on: "b", seenBy: "a")
        // b's first record goes at once; the second would wait 5 s.
        try await written(cluster, "b", "other/x")
        #expect(await eventually(3) { heard(j, "a", "other/x") })
        try await written(cluster, "b", "other/y")
        try await Task.sleep(for: .milliseconds(300))
        #expect(!heard(j, "a", "other/y"), "b's record did not wait: the test proves nothing")
        let started = ContinuousClock.now
        let grant = LoggedGrant(cluster.coordinator("a"), "docs/report.txt", j, node: "a")
        #expect(await eventually(3) { grant.access != nil }, "a's write was not granted")
        #expect(ContinuousClock.now - started < .seconds(2), "a's write waited \(ContinuousClock.now - started)")
        #expect(j.contains("P:relinquishToWriter"))
        let told = j.index("a:dropCaches(changed other/y)")
        #expect(told != nil && told! < (j.index("a:granted docs/report.txt") ?? -1), "a's access went on before it heard of b's earlier write: \(j.all)")
        grant.access?.release()
    }

    /// A right recalled by another node goes in the transaction of (or after) the change records
    /// of the accesses that used it, though they would have waited longer: the other node drops
    /// its caches of them before its access goes on. Both ways a right goes: idle (deleted at
    /// once) and in use (split, the part going when its access ends).
    @Test func aRecalledRightGoesAfterTheRecordsOfTheAccessesThatUsedIt() async throws {
        let cluster = TestCluster()
        try await cluster.add("a", unpresentedRecordInterval: 5)
        try await cluster.add("b")
        defer { Task { await cluster.stop() } }
        let j = cluster.journal
        // a's right on d (a tree right on the folder), its first record sent.
        try await written(cluster, "a", "d/f0")
        await cluster.node("a").flush()
        try await written(cluster, "a", "d/f1")
        try await written(cluster, "a", "d/f2")
        // An access of a on d/f3, still going on.
        let held = try await access(cluster.coordinator("a"), [write("d/f3")]).get()
        try await Task.sleep(for: .milliseconds(300))
        #expect(!heard(j, "b", "d/f1") && !heard(j, "b", "d/f2"), "a's records did not wait: the test proves nothing")
        // b's write of d/f1 recalls a's folder right (split: a keeps d/f3's part).
        let started = ContinuousClock.now
        let first = LoggedGrant(cluster.coordinator("b"), "d/f1", j)
        #expect(await eventually(3) { first.access != nil }, "b's write of d/f1 was not granted")
        #expect(ContinuousClock.now - started < .seconds(2), "b's access waited \(ContinuousClock.now - started)")
        for name in ["d/f1", "d/f2"] {
            let told = j.index("b:dropCaches(changed \(name))")
            #expect(told != nil && told! < (j.index("b:granted d/f1") ?? -1), "b's access went on before it heard of a's \(name): \(j.all)")
        }
        first.access?.release()
        // b's write of d/f3 waits for a's access, whose record comes before the part of the right.
        let pending = LoggedGrant(cluster.coordinator("b"), "d/f3", j)
        try await Task.sleep(for: .milliseconds(200))
        #expect(pending.access == nil, "b's write of d/f3 went on beside a's")
        held.didChange(path("d/f3"))
        held.release()
        #expect(await eventually(3) { pending.access != nil }, "b's write of d/f3 was not granted")
        let told = j.index("b:dropCaches(changed d/f3)")
        #expect(told != nil && told! < (j.index("b:granted d/f3") ?? -1), "b's access went on before it heard of a's d/f3: \(j.all)")
        pending.access?.release()
    }

    /// A right another node recalls goes back with the change records its node queued before the
    /// recall, not after every record queued since: a node whose accesses go on queueing records
    /// elsewhere (long paths, faster than etcd takes them) gives it back all the same. Before, it
    /// went with the last part of the queue, so the other node's access waited until the queue
    /// drained, which under such a stream it did not (a save through another node failed with
    /// EBUSY after its write wait).
    @Test func aRecalledRightDoesNotWaitForRecordsQueuedAfterTheRecall() async throws {
        let cluster = TestCluster()
        let holding = HoldingStore(cluster.store)
        try await cluster.add("a", maxRecordBatchBytes: 16 * 1024, through: holding)
        try await cluster.add("b")
        defer { Task { await cluster.stop() } }
        let a = cluster.coordinator("a")
        let long = String(repeating: "x", count: 250)
        // a's rights on d and on e, its records in etcd.
        for folder in ["d", "e"] { try await writeAndFlush(cluster, "a", "\(folder)/\(long)0") }
        // a's record puts wait (a slow etcd) while it writes 100 files of d: some 35 KiB of records.
        holding.hold("test/cluster/c/a")
        try await streamOfLocalWrites(a, 100) { "d/\(long)\($0)" }
        #expect(await eventually { holding.held == 1 }, "a's first batch is on its way")
        // b's write in d recalls a's idle right on d, then a goes on writing in e: 3,000 records
        // (some 1 MiB) queued after the recall.
        let granted = LoggedGrant(cluster.coordinator("b"), "d/\(long)1", cluster.journal)
        #expect(await eventually { cluster.node("a").status().nodes.first { $0.name == "b" }?.holds.isEmpty == false })
        try await streamOfLocalWrites(a, 3000) { "e/\(long)\($0)" }
        holding.release()
        #expect(await eventually(20) { granted.access != nil }, "b's write was not granted")
        let j = cluster.journal
        let grantedAt = try #require(j.index("b:granted d/\(long)1"))
        #expect((j.index("b:dropCaches(changed d/\(long)100)") ?? Int.max) < grantedAt, "b went on before it heard a's records in d")
        #expect(grantedAt < (j.index("b:dropCaches(changed e/\(long)3000)") ?? Int.max),
                "b's write waited for the records a queued after the recall")
        #expect(await eventually(20) { j.contains("b:dropCaches(changed e/\(long)3000)") }, "b heard every record of e")
        granted.access?.release()
    }

    /// etcd refuses a request over its `--max-request-bytes` (1.5 MiB by default): a node's
    /// change records queued while a batch waited (any user's creates and unlinks of long names,
    /// 4 KiB paths, are some 8 KiB each) may take more than that. They go in several
    /// transactions of at most `maxRecordBatchBytes`, every change told to the other node in
    /// order, and a right another node recalls goes after them all. Before, the one batch was
    /// refused and sent again for ever: nothing of the node reached etcd any more (no record, no
    /// right given back), and the other node's write waited out its deadline.
    @Test func recordsBeyondWhatEtcdTakesInOneRequestGoInSeveral() async throws {
        let cluster = TestCluster()
        cluster.store.setMaxRequestBytes(64 * 1024)
        try await cluster.add("a", unpresentedRecordInterval: 0.5, maxRecordBatchBytes: 16 * 1024)
        try await cluster.add("b")
        defer { Task { await cluster.stop() } }
        let a = cluster.coordinator("a")
        let long = String(repeating: "x", count: 250)
        let first = try await access(a, [write("d/\(long)0")]).get()
        first.didChange(path("d/\(long)0"))
        first.release()
        await cluster.node("a").flush()
        let before = try await recordPuts(cluster, "a")
        let writes = 400  // some 120 KiB of records, queued within the interval
        for i in 1...writes {
            let grant = try #require(a.tryCoordinateImmediately(write("d/\(long)\(i)"), origin: origin), "write \(i) was not local")
            grant.didChange(path("d/\(long)\(i)"))
            grant.release()
        }
        // b's write recalls a's right on d: granted once a's records are in etcd, all told first.
        let granted = LoggedGrant(cluster.coordinator("b"), "d/\(long)1", cluster.journal)
        #expect(await eventually(10) { granted.access != nil }, "b's write was not granted")
        let told = cluster.journal.all.filter { $0.hasPrefix("b:dropCaches(changed d/") }
        #expect(told == (0...writes).map { "b:dropCaches(changed d/\(long)\($0))" }, "b heard \(told.count) of \(writes + 1)")
        let grantedAt = cluster.journal.index("b:granted d/\(long)1") ?? -1
        #expect((cluster.journal.index("b:dropCaches(changed d/\(long)\(writes))") ?? Int.max) < grantedAt, "b went on before it heard a's last record")
        granted.access?.release()
        let puts = try await recordPuts(cluster, "a") - before
        #expect(puts >= 8, "\(puts) puts: each at most 16 KiB")
    }
}

/// A write of `name` requested on node `node`'s coordinator; its grant is logged in the journal
/// as "NODE:granted NAME" the moment it comes (before anything the test does after it).
final class LoggedGrant: @unchecked Sendable {
    private let granted = Mutex<CoordinatedAccess?>(nil)
    init(_ coordinator: Coordinator, _ name: String, _ journal: Journal, node: String = "b") {
        coordinator.coordinate([write(name)], origin: origin, purpose: nil, policy: nil) { [self] result in
            journal.log("\(node):granted \(name)")
            if case .success(let a) = result { granted.withLock { $0 = a } }
        }
    }
    var access: CoordinatedAccess? { granted.withLock { $0 } }
}
