import Cluster
import ClusterKV
import Coordination
import Foundation
import Testing
import CoordinationTestSupport

/// A node gone (its lease expired), a node paused past its lease, etcd unreachable under each
/// policy, and the steps of every node in one order.
@Suite(.serialized, .timeLimit(.minutes(1))) struct ClusterFaultTests {
    @Test func aNodeWhoseLeaseEndsLeavesNoPresentersHoldsOrAsksBehind() async throws {
        let cluster = TestCluster(manualClock: true)
        try await cluster.add("a", ttl: 3)
        try await cluster.add("b", ttl: 3)
        defer { Task { await cluster.stop() } }
        _ = try cluster.coordinator("a").addFilePresenter(RecordingPresenter("P", at: path("docs/p.txt"), journal: cluster.journal), owner: origin)
        let held = try await access(cluster.coordinator("a"), [write("docs/x.txt")]).get()
        await cluster.node("a").flush()
        let steps = StepLog(cluster.node("b"))
        let waiting = Pending(cluster.coordinator("b"), [write("docs/x.txt")])
        try await Task.sleep(for: .milliseconds(300))
        #expect(waiting.result == nil)
        // a stops renewing (killed): once its TTL passes, everything of it is gone.
        cluster.node("a").stopRenewingForTesting()
        cluster.advance(3.5)
        #expect(await eventually { waiting.access != nil }, "b still waits for a dead node")
        let status = cluster.node("b").status()
        #expect(status.nodes.first { $0.name == "a" } == nil, "a is still listed: \(status.nodes.map(\.name))")
        // b recorded it.
        #expect(await eventually { steps.all.contains { $0.node == "a" && $0.what.hasPrefix("left") } })
        waiting.access?.release()
        held.release()
    }

    /// A node that leaves (its mount unmounted) first sends what it queued: the change records of
    /// its last accesses reach the other nodes although its publisher was still sending an earlier
    /// batch, and only then are its keys gone. Before, it revoked its lease at once: the batch on
    /// its way failed with the lease, and the records after it were never sent (the other nodes'
    /// kernels kept what they cached of those changes, their presenters never heard).
    @Test func aNodeThatLeavesSendsWhatItQueuedFirst() async throws {
        let cluster = TestCluster()
        let holding = HoldingStore(cluster.store)
        try await cluster.add("a")
        try await cluster.add("b", through: holding)
        defer { Task { await cluster.stop() } }
        let b = cluster.coordinator("b")
        try await writeAndFlush(cluster, "b", "d/f0")
        // b's record puts are slow (a loaded etcd): its batch of d/f1 is on its way, d/f2 queued.
        holding.hold("test/cluster/c/b")
        try await streamOfLocalWrites(b, 1) { _ in "d/f1" }
        #expect(await eventually { holding.held == 1 }, "b's batch is on its way")
        try await streamOfLocalWrites(b, 1) { _ in "d/f2" }
        let left = Task { await cluster.node("b").stop() }
        try await Task.sleep(for: .milliseconds(300))
        holding.release()
        await left.value
        #expect(await eventually { cluster.journal.contains("a:dropCaches(changed d/f2)") }, "b's last record never reached a")
        #expect(cluster.journal.contains("a:dropCaches(changed d/f1)"))
        #expect(!cluster.store.snapshot.contains { k in let s = String(decoding: k.key, as: UTF8.self); return s.hasSuffix("/b") || s.contains("/b/") || s.contains("\0b\0") }, "b left keys behind")
    }

    @Test func aPausedNodeGrantsNothingOnAStaleRightAndReregistersItsPresenters() async throws {
        let cluster = TestCluster(manualClock: true)
        try await cluster.add("a", ttl: 3)
        try await cluster.add("b", ttl: 3)
        defer { Task { await cluster.stop() } }
        let a = cluster.coordinator("a")
        _ = try a.addFilePresenter(RecordingPresenter("P", at: path("docs/p.txt"), journal: cluster.journal), owner: origin)
        try await access(a, [write("docs/x.txt")]).get().release()
        await cluster.node("a").flush()
        #expect(a.tryCoordinateImmediately(write("docs/x.txt"), origin: origin).map { $0.release(); return true } == true)
        // a is paused past its TTL: b takes the item.
        cluster.node("a").stopRenewingForTesting()
        cluster.advance(4)
        let b = try await access(cluster.coordinator("b"), [write("docs/x.txt")], policy: CoordinationPolicy(waitDeadline: .seconds(3))).get()
        // a wakes up: its right is stale, nothing is granted on it while b writes.
        cluster.node("a").resumeForTesting()
        #expect(a.tryCoordinateImmediately(write("docs/x.txt"), origin: origin) == nil)
        let late = Pending(a, [write("docs/x.txt")])
        try await Task.sleep(for: .milliseconds(500))
        #expect(late.result == nil, "a let a write through on a stale right")
        b.release()
        #expect(await eventually { late.access != nil })
        late.access?.release()
        // Its presenter is registered again under its new session.
        #expect(await eventually { cluster.node("b").status().nodes.first { $0.name == "a" }?.presenters == [path("docs/p.txt")] })
    }

    @Test func etcdUnreachableUnderTheFailPolicyFailsAccessesThatNeedTheCluster() async throws {
        let cluster = TestCluster()
        try await cluster.add("a", unreachable: .fail, failoverWait: 1)
        defer { Task { await cluster.stop() } }
        let steps = StepLog(cluster.node("a"))
        cluster.store.setReachable(false)
        let started = ContinuousClock.now
        let result = await access(cluster.coordinator("a"), [write("elsewhere/y")], policy: CoordinationPolicy(waitDeadline: .milliseconds(500)))
        let took = ContinuousClock.now - started
        guard case .failure(let error) = result else { Issue.record("granted without etcd"); return }
        #expect(error.posixErrorCode == EIO)
        // It retried for the failover wait (longer than its own wait deadline), and no longer.
        #expect(took >= .milliseconds(900) && took < .seconds(3), "\(took)")
        #expect(cluster.node("a").status().reachable == false)
        #expect(cluster.node("a").status().unreachableSince != nil)
        #expect(await eventually { steps.all.contains { $0.what.hasPrefix("etcd unreachable") && $0.what.contains("fail with EIO") } })
        // etcd back: it works again without a restart.
        cluster.store.setReachable(true)
        let again = try await access(cluster.coordinator("a"), [write("elsewhere/y")]).get()
        again.release()
        #expect(await eventually { steps.all.contains { $0.what == "etcd reachable again" } })
        #expect(cluster.node("a").status().unreachableSince == nil)
    }

    /// etcd unable to serve for less than the failover wait (a member lost, a leader elected): the
    /// access waits for it and is granted; nothing fails.
    @Test func etcdAwayForLessThanTheFailoverWaitDelaysAccessesAndFailsNone() async throws {
        let cluster = TestCluster()
        try await cluster.add("a", failoverWait: 5)
        try await cluster.add("b", failoverWait: 5)
        defer { Task { await cluster.stop() } }
        try await cluster.present("P", at: "docs/p.txt", on: "a", seenBy: "b")
        cluster.store.setReachable(false)
        let write1 = Pending(cluster.coordinator("b"), [write("docs/p.txt")], policy: CoordinationPolicy(waitDeadline: .milliseconds(500)))
        let write2 = Pending(cluster.coordinator("b"), [write("docs/new.txt")], policy: CoordinationPolicy(waitDeadline: .milliseconds(500)))
        try await Task.sleep(for: .milliseconds(800))
        #expect(write1.result == nil && write2.result == nil, "an access failed while etcd was away for less than the failover wait")
        cluster.store.setReachable(true)
        #expect(await eventually { write1.access != nil && write2.access != nil }, "\(String(describing: write1.error)) \(String(describing: write2.error))")
        #expect(cluster.journal.contains("P:relinquishToWriter"))
        write1.access?.release()
        write2.access?.release()
    }

    /// etcd applied a change and its answer was lost (the member or the leader gone mid-call): the
    /// node sends it again guarded, so nothing is applied twice. Its right keeps the order etcd gave
    /// it the first time, the presenter on the other node is asked once and told once.
    @Test func aChangeWhoseAnswerWasLostIsNeverAppliedTwice() async throws {
        let cluster = TestCluster()
        try await cluster.add("a")
        try await cluster.add("b")
        defer { Task { await cluster.stop() } }
        let j = cluster.journal
        try await cluster.present("P", at: "docs/p.txt", on: "a", seenBy: "b")
        let steps = StepLog(cluster.node("a"))
        // The right's transaction, the ask's, and a's answer: each applied, each answer lost.
        cluster.store.loseAnswers(ofNextChanges: 3)
        let grant = try await access(cluster.coordinator("b"), [write("docs/p.txt")]).get()
        let token = try #require(grant.fencingToken)
        let rights = cluster.store.snapshot.filter { String(decoding: $0.key, as: UTF8.self).hasPrefix("test/cluster/h/docs/p.txt\0b\0") }
        #expect(rights.count == 1, "\(rights.map { String(decoding: $0.key, as: UTF8.self) })")
        #expect(rights.first?.createRevision == token, "the right's order is the revision etcd first put it at")
        #expect(cluster.node("b").status().nodes.first { $0.name == "b" }?.holds.map(\.token) == [token])
        // The change record's transaction: applied, its answer lost.
        cluster.store.loseAnswers(ofNextChanges: 1)
        grant.didChange(path("docs/p.txt"))
        grant.release()
        #expect(await eventually { j.contains("P:reacquire") })
        try await Task.sleep(for: .milliseconds(600))
        #expect(j.all.filter { $0 == "P:relinquishToWriter" }.count == 1, "\(j.all)")
        #expect(j.all.filter { $0 == "P:didChange" }.count == 1, "\(j.all)")
        #expect(j.all.filter { $0 == "a:dropCaches(changed docs/p.txt)" }.count == 1, "\(j.all)")
        #expect(steps.all.filter { $0.node == "b" && $0.what.hasPrefix("asks a") }.count == 1, "\(steps.all)")
        #expect(steps.all.filter { $0.node == "b" && $0.what.hasPrefix("did changed") }.count == 1, "\(steps.all)")
        // a's next write comes after b's in the order.
        let next = try await access(cluster.coordinator("a"), [write("docs/p.txt")]).get()
        #expect(try #require(next.fencingToken) > token)
        next.release()
    }

    @Test func etcdUnreachableUnderTheLocalPolicyGoesOnAndCountsIt() async throws {
        let cluster = TestCluster()
        try await cluster.add("a", unreachable: .local, failoverWait: 1)
        defer { Task { await cluster.stop() } }
        let steps = StepLog(cluster.node("a"))
        cluster.store.setReachable(false)
        let grant = try await access(cluster.coordinator("a"), [write("elsewhere/y")], policy: CoordinationPolicy(waitDeadline: .milliseconds(500))).get()
        grant.release()
        #expect(cluster.node("a").status().localGrants >= 1)
        #expect(await eventually { steps.all.contains { $0.what.contains("granted locally") } })
        cluster.store.setReachable(true)
    }

    @Test func everyNodesStepsComeInOneOrder() async throws {
        let cluster = TestCluster()
        try await cluster.add("a")
        try await cluster.add("b")
        defer { Task { await cluster.stop() } }
        let steps = StepLog(cluster.node("a"))
        _ = try cluster.coordinator("a").addFilePresenter(RecordingPresenter("P", at: path("docs/p.txt"), journal: cluster.journal), owner: origin)
        await cluster.node("a").flush()
        try await Task.sleep(for: .milliseconds(100))
        let grant = try await access(cluster.coordinator("b"), [write("docs/p.txt")]).get()
        grant.didChange(path("docs/p.txt"))
        grant.release()
        #expect(await eventually { steps.all.contains { $0.node == "b" && $0.what.hasPrefix("did") } })
        let seen = steps.all
        #expect(seen.contains { $0.node == "a" && $0.what == "presents" })
        #expect(seen.contains { $0.node == "b" && $0.what.hasPrefix("asks a") })
        #expect(seen.contains { $0.node == "a" && $0.what.hasPrefix("answered b") })
        #expect(seen.map(\.revision) == seen.map(\.revision).sorted(), "\(seen)")
    }

    @Test func clustersUnderOtherPrefixesNeverSeeEachOther() async throws {
        let store = MemoryClusterStore()
        let one = ClusterNode(store: store, configuration: ClusterConfiguration(node: "a", prefix: "one"))
        let two = ClusterNode(store: store, configuration: ClusterConfiguration(node: "a", prefix: "two"))
        let c1 = Coordinator(), c2 = Coordinator()
        try await one.start(coordinator: c1)
        try await two.start(coordinator: c2)
        let g1 = try await access(c1, [write("d/x")]).get()
        // The same item in another cluster is not held.
        let g2 = try await access(c2, [write("d/x")], policy: CoordinationPolicy(waitDeadline: .seconds(2))).get()
        #expect(await eventually { one.status().nodes.map(\.name) == ["a"] && one.status().nodes[0].holds.count == 1 })
        #expect(store.snapshot.allSatisfy { $0.key.starts(with: Array("one/".utf8)) || $0.key.starts(with: Array("two/".utf8)) })
        g1.release()
        g2.release()
        await one.stop()
        await two.stop()
    }
}
