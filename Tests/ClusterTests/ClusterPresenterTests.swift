import Cluster
import ClusterKV
import Coordination
import Foundation
import Testing
import CoordinationTestSupport

/// Presenters on one node are asked before and told after another node's accesses, as on one host;
/// the presenter's node keeps the version first and drops its caches before its presenters hear.
@Suite(.serialized, .timeLimit(.minutes(1))) struct ClusterPresenterTests {
    @Test func aPresenterOnAnotherNodeIsAskedBeforeAndToldAfterAWrite() async throws {
        let cluster = TestCluster()
        try await cluster.add("a")
        try await cluster.add("b")
        defer { Task { await cluster.stop() } }
        let j = cluster.journal
        try await cluster.present("P", at: "docs/report.txt", on: "a", seenBy: "b")

        let grant = try await access(cluster.coordinator("b"), [write("docs/report.txt", .forMerging)]).get()
        j.log("B:ACCESS")
        grant.didChange(path("docs/report.txt"))
        grant.release()
        #expect(await eventually { j.contains("P:reacquire") })
        let order = ["P:relinquishToWriter", "P:save", "a:keepVersion(docs/report.txt)", "B:ACCESS",
                     "a:dropCaches(changed docs/report.txt)", "a:store(changed docs/report.txt)", "P:didChange", "P:reacquire"]
        let indices = order.map { j.index($0) }
        #expect(indices.allSatisfy { $0 != nil }, "missing steps: \(j.all)")
        #expect(indices.compactMap { $0 } == indices.compactMap { $0 }.sorted(), "out of order: \(j.all)")
    }

    /// The answer to an ask goes to etcd at once, not behind the publisher's batch in flight (a
    /// presenter registered, a change record, a right given back): node a's publisher is kept
    /// sending a presenter of its own while node b writes a document a's presenter presents.
    @Test func anAnswerDoesNotWaitForTheBatchThePublisherIsSending() async throws {
        let cluster = TestCluster()
        let slow = HoldingStore(cluster.store)
        try await cluster.add("a", through: slow)
        try await cluster.add("b")
        defer {
            slow.release()
            Task { await cluster.stop() }
        }
        let j = cluster.journal
        _ = try cluster.coordinator("a").addFilePresenter(RecordingPresenter("P", at: path("docs/report.txt"), journal: j), owner: origin)
        await cluster.node("a").flush()
        #expect(await eventually { cluster.node("b").status().nodes.first { $0.name == "a" }?.presenters.count == 1 })
        // a's publisher is now sending a batch that does not come back.
        slow.hold("test/cluster/p/a/")
        _ = try cluster.coordinator("a").addFilePresenter(RecordingPresenter("Q", at: path("other/q.txt"), journal: j), owner: origin)
        #expect(await eventually { slow.held == 1 })

        let asked = Pending(cluster.coordinator("b"), [write("docs/report.txt")])
        #expect(await eventually(3) { asked.access != nil }, "b's write still waits for a's answer: \(j.all)")
        #expect(j.contains("P:relinquishToWriter"))
        #expect(slow.held == 1, "the publisher's batch went meanwhile: the test proves nothing")
        asked.access?.release()
        slow.release()
        #expect(await eventually { cluster.node("b").status().nodes.first { $0.name == "a" }?.presenters.count == 2 })
    }

    /// A presenter another node put in etcd before this node's write took its rights is asked,
    /// although this node's watch had not shown it yet when etcd answered: the write waits for its
    /// watch to reach the revision of its rights before it looks for presenters elsewhere (a write
    /// right after a `coordfs present` on another host went unasked, its presenter only told).
    @Test func aPresenterPutBeforeTheWritesRightsIsAskedThoughTheWatchLags() async throws {
        let cluster = TestCluster()
        let lagging = LaggingWatchStore(cluster.store)
        try await cluster.add("a")
        try await cluster.add("b", through: lagging)
        defer {
            lagging.lag = false
            Task { await cluster.stop() }
        }
        let j = cluster.journal
        lagging.lag = true
        _ = try cluster.coordinator("a").addFilePresenter(RecordingPresenter("P", at: path("docs/report.txt"), journal: j), owner: origin)
        await cluster.node("a").flush()
        var inEtcd = 0
        for _ in 0..<500 where inEtcd == 0 {
            inEtcd = try await cluster.store.range(Array("test/cluster/p/a/".utf8), prefix: true).values.count
            if inEtcd == 0 { try await Task.sleep(for: .milliseconds(10)) }
        }
        #expect(inEtcd == 1, "a's presenter in etcd")
        #expect(cluster.node("b").status().nodes.first { $0.name == "a" }?.presenters.isEmpty ?? true, "b's watch lags: the test proves nothing")

        let writing = Pending(cluster.coordinator("b"), [write("docs/report.txt")])
        try await Task.sleep(for: .milliseconds(300))
        lagging.lag = false
        #expect(await eventually(5) { writing.access != nil })
        writing.access?.didChange(path("docs/report.txt"))
        writing.access?.release()
        #expect(await eventually { j.contains("P:didChange") }, "\(j.all)")
        #expect(j.contains("P:relinquishToWriter"), "a's presenter was not asked: \(j.all)")
    }

    @Test func aFolderPresenterHearsOfSubitemsChangedOnAnotherNode() async throws {
        let cluster = TestCluster()
        try await cluster.add("a")
        try await cluster.add("b")
        defer { Task { await cluster.stop() } }
        let j = cluster.journal
        let folder = RecordingPresenter("F", at: path("docs"), journal: j)
        _ = try cluster.coordinator("a").addFilePresenter(folder, owner: origin)
        await cluster.node("a").flush()
        try await Task.sleep(for: .milliseconds(100))
        let grant = try await access(cluster.coordinator("b"), [write("docs/new.txt")]).get()
        grant.subitemDidAppear(path("docs/new.txt"))
        grant.release()
        #expect(await eventually { j.contains("F:subitemDidAppear(docs/new.txt)") }, "\(j.all)")
        // The drop of the caches came first.
        #expect((j.index("a:dropCaches(appeared docs/new.txt)") ?? .max) < (j.index("F:subitemDidAppear(docs/new.txt)") ?? .min))
    }

    /// A new file whose appearance b tells once it outlived its save window (after its accesses
    /// ended, `Coordinator.announce`) reaches a's folder presenter once, through b's
    /// record; b knows that a folder above it is presented on a (and a does not of itself).
    @Test func aNewFileToldAfterItsAccessReachesAFolderPresenterOnAnotherNodeOnce() async throws {
        let cluster = TestCluster()
        try await cluster.add("a")
        try await cluster.add("b")
        defer { Task { await cluster.stop() } }
        let j = cluster.journal
        #expect(cluster.coordinator("b").isObservedAnywhere(path("docs/new.txt")) == false)
        try await cluster.present("F", at: "docs", on: "a", seenBy: "b")
        #expect(cluster.coordinator("b").isObservedAnywhere(path("docs/new.txt")))
        #expect(cluster.coordinator("b").isObservedAnywhere(path("docs/sub/new.txt")))
        #expect(!cluster.coordinator("b").isObservedAnywhere(path("other/new.txt")))
        #expect(cluster.coordinator("b").isPresentedAnywhere(path("docs")))
        #expect(!cluster.coordinator("a").coordinationGate!.isObservedElsewhere(path("docs/new.txt")), "its own presenter")
        cluster.coordinator("b").announce(.subitemAppeared(path("docs/new.txt")), origin: origin)
        #expect(await eventually { j.contains("F:subitemDidAppear(docs/new.txt)") }, "\(j.all)")
        #expect((j.index("a:dropCaches(appeared docs/new.txt)") ?? .max) < (j.index("F:subitemDidAppear(docs/new.txt)") ?? .min))
        try await Task.sleep(for: .milliseconds(200))
        #expect(j.all.filter { $0 == "F:subitemDidAppear(docs/new.txt)" }.count == 1, "\(j.all)")
    }

    /// One rule for what a node tells the others: every change it makes, in an access or outside
    /// any (`Coordinator.announce`; announced by an access that has ended already), goes in a
    /// change record; one it only saw (`Coordinator.announceObserved`: made beside its mount, or
    /// told by another node) does not, since every node tells those itself.
    @Test func aChangeMadeOutsideAnAccessReachesOtherNodesAndOneOnlySeenDoesNot() async throws {
        let cluster = TestCluster()
        try await cluster.add("a")
        try await cluster.add("b")
        defer { Task { await cluster.stop() } }
        let j = cluster.journal
        try await cluster.present("D", at: "docs/x.txt", on: "a", seenBy: "b")
        cluster.coordinator("b").announceObserved(.changed(path("docs/x.txt")), origin: origin)
        await cluster.node("b").flush()
        try await Task.sleep(for: .milliseconds(200))
        #expect(!j.contains("D:didChange"), "a change b only saw reached a: \(j.all)")

        // Announced once b's access had ended (the access asked D, and its record told nothing).
        let grant = try await access(cluster.coordinator("b"), [write("docs/x.txt")]).get()
        grant.release()
        #expect(await eventually { j.contains("D:reacquire") }, "\(j.all)")
        grant.didChange(path("docs/x.txt"))
        #expect(await eventually { j.contains("D:didChange") }, "\(j.all)")
        #expect((j.index("a:dropCaches(changed docs/x.txt)") ?? .max) < (j.index("D:didChange") ?? .min), "\(j.all)")
        try await Task.sleep(for: .milliseconds(200))
        #expect(j.all.filter { $0 == "D:didChange" }.count == 1, "\(j.all)")
    }

    @Test func aDeletionOnAnotherNodeAsksTheDocumentAndItsFolderToAccommodateIt() async throws {
        let cluster = TestCluster()
        try await cluster.add("a")
        try await cluster.add("b")
        defer { Task { await cluster.stop() } }
        let j = cluster.journal
        _ = try cluster.coordinator("a").addFilePresenter(RecordingPresenter("D", at: path("docs/x.txt"), journal: j), owner: origin)
        _ = try cluster.coordinator("a").addFilePresenter(RecordingPresenter("F", at: path("docs"), journal: j), owner: origin)
        await cluster.node("a").flush()
        try await Task.sleep(for: .milliseconds(100))
        let grant = try await access(cluster.coordinator("b"), [write("docs/x.txt", .forDeleting)]).get()
        #expect(j.contains("D:accommodateDeletion") && j.contains("F:accommodateSubitemDeletion(docs/x.txt)"), "\(j.all)")
        grant.didDelete(path("docs/x.txt"))
        grant.release()
        #expect(await eventually { j.contains("F:subitemDidChange(docs/x.txt)") }, "\(j.all)")
    }

    @Test func aPresentersRefusalFailsTheOtherNodesAccessWithEBUSY() async throws {
        let cluster = TestCluster()
        try await cluster.add("a")
        try await cluster.add("b")
        defer { Task { await cluster.stop() } }
        _ = try cluster.coordinator("a").addFilePresenter(RecordingPresenter("D", at: path("docs/x.txt"), journal: cluster.journal, behavior: .refuseDeletion), owner: origin)
        await cluster.node("a").flush()
        try await Task.sleep(for: .milliseconds(100))
        let result = await access(cluster.coordinator("b"), [write("docs/x.txt", .forDeleting)])
        guard case .failure(let error) = result else { Issue.record("the deletion went through a refusal"); return }
        #expect(error.posixErrorCode == EBUSY)
        // And nothing is left held: the item is free again on both nodes.
        let again = try await access(cluster.coordinator("a"), [write("docs/x.txt")], policy: CoordinationPolicy(waitDeadline: .seconds(3))).get()
        again.release()
    }

    @Test func aMovedDocumentsPresentersFollowItAcrossNodes() async throws {
        let cluster = TestCluster()
        try await cluster.add("a")
        try await cluster.add("b")
        defer { Task { await cluster.stop() } }
        let j = cluster.journal
        let p = RecordingPresenter("P", at: path("docs/a.txt"), journal: j)
        _ = try cluster.coordinator("a").addFilePresenter(p, owner: origin)
        await cluster.node("a").flush()
        try await Task.sleep(for: .milliseconds(100))
        let move = try await access(cluster.coordinator("b"), [write("docs/a.txt", .forMoving), write("docs/b.txt", .forReplacing)]).get()
        #expect(j.contains("P:relinquishToWriter"))
        move.didMove(from: path("docs/a.txt"), to: path("docs/b.txt"))
        move.release()
        #expect(await eventually { j.contains("P:didMove(docs/b.txt)") }, "\(j.all)")
        #expect(p.path == path("docs/b.txt"))
        // Every node now knows it at its new name, and a write there asks it.
        #expect(await eventually { cluster.node("b").status().nodes.first { $0.name == "a" }?.presenters == [path("docs/b.txt")] })
        let write2 = try await access(cluster.coordinator("b"), [write("docs/b.txt")]).get()
        write2.release()
        #expect(j.all.filter { $0 == "P:relinquishToWriter" }.count == 2, "\(j.all)")
    }

    /// The moving node knows the moved presenters at their new paths as soon as its access ends,
    /// not once their node has put their keys again: its next write to the moved document asks
    /// the presenter, which has heard it moved by then. Before, the moving node kept the presenter
    /// at its old path until that put came back through its watch.
    @Test func theMovingNodeKnowsTheMovedPresentersAtOnce() async throws {
        let cluster = TestCluster()
        try await cluster.add("a")
        try await cluster.add("b")
        defer { Task { await cluster.stop() } }
        let j = cluster.journal
        try await cluster.present("P", at: "docs/a.txt", on: "a", seenBy: "b")
        let move = try await access(cluster.coordinator("b"), [write("docs/a.txt", .forMoving), write("docs/b.txt", .forReplacing)]).get()
        move.didMove(from: path("docs/a.txt"), to: path("docs/b.txt"))
        move.release()
        #expect(cluster.node("b").status().nodes.first { $0.name == "a" }?.presenters == [path("docs/b.txt")],
                "b still has a's presenter at its old path right after the move")
        let again = try await access(cluster.coordinator("b"), [write("docs/b.txt")]).get()
        again.release()
        let asked = j.all.enumerated().filter { $0.element == "P:relinquishToWriter" }.map(\.offset)
        let moved = j.all.firstIndex(of: "P:didMove(docs/b.txt)")
        #expect(asked.count == 2 && moved != nil && moved! < asked[1], "\(j.all)")
    }

    @Test func aPresenterSavingForAnotherNodesAskIsNotHeldUpByIt() async throws {
        let cluster = TestCluster()
        try await cluster.add("a")
        try await cluster.add("b")
        defer { Task { await cluster.stop() } }
        let j = cluster.journal
        let a = cluster.coordinator("a")
        let box = PresenterBox()
        let p = RecordingPresenter("P", at: path("docs/x.txt"), journal: j) {
            // The presenter saves its document through a coordinated write on its own behalf.
            let own = AccessOrigin(pid: 7, uid: 0, gid: 0, executable: "editor", presenterID: box.id)
            let save = try await access(a, [write("docs/x.txt")], origin: own).get()
            save.didChange(path("docs/x.txt"))
            save.release()
            j.log("P:saved")
        }
        box.id = try a.addFilePresenter(p, owner: origin)
        await cluster.node("a").flush()
        try await Task.sleep(for: .milliseconds(100))
        let start = ContinuousClock.now
        let grant = try await access(cluster.coordinator("b"), [write("docs/x.txt", .forMerging)]).get()
        #expect(ContinuousClock.now - start < .seconds(2), "the save waited for the ask's own right")
        #expect(j.contains("P:saved"))
        grant.release()
    }

    @Test func aReadOnAnotherNodeAsksForSaveAndLeavesNoChange() async throws {
        let cluster = TestCluster()
        try await cluster.add("a")
        try await cluster.add("b")
        defer { Task { await cluster.stop() } }
        let j = cluster.journal
        _ = try cluster.coordinator("a").addFilePresenter(RecordingPresenter("P", at: path("docs/x.txt"), journal: j), owner: origin)
        await cluster.node("a").flush()
        try await Task.sleep(for: .milliseconds(100))
        let grant = try await access(cluster.coordinator("b"), [read("docs/x.txt")]).get()
        #expect(j.contains("P:relinquishToReader") && j.contains("P:save"))
        grant.release()
        #expect(await eventually { j.contains("P:reacquire") })
        #expect(!j.all.contains { $0.hasPrefix("P:didChange") || $0.hasPrefix("a:dropCaches") }, "\(j.all)")
    }
}

final class PresenterBox: @unchecked Sendable {
    var id: PresenterID?
}
