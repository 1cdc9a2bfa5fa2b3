import Cluster
import ClusterKV
import Coordination
import CoordinationTestSupport
import Foundation
import Testing

/// The publisher paces change records: a stream of writes costs etcd one put of the node's
/// change-record key per `recordInterval`, every change still told to every node in order, and
/// what may not wait (an answer to another node's ask) is never held back by the pacing.
@Suite(.serialized, .timeLimit(.minutes(1))) struct ClusterPublisherTests {
    /// How many times node `name`'s change-record key was put so far.
    func recordPuts(_ cluster: TestCluster, _ name: String) async throws -> Int64 {
        try await cluster.store.range(Array("test/cluster/c/\(name)".utf8), prefix: false).values.first?.version ?? 0
    }

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
        let started = ContinuousClock.now
        let writes = 200
        for i in 1...writes {
            let grant = try #require(a.tryCoordinateImmediately(write("d/f\(i)"), origin: origin), "write \(i) was not local")
            grant.didChange(path("d/f\(i)"))
            grant.release()
        }
        let took = ContinuousClock.now - started
        let elapsed = Double(took.components.seconds) + Double(took.components.attoseconds) / 1e18
        // b hears every change, in order.
        let told = { cluster.journal.all.filter { $0.hasPrefix("b:dropCaches(changed d/f") } }
        #expect(await eventually(10) { told().count == writes + 1 }, "b heard \(told().count) of \(writes + 1)")
        #expect(told() == (0...writes).map { "b:dropCaches(changed d/f\($0))" })
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
