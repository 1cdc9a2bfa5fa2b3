import ClusterKV
import Coordination
import Foundation
import Testing
@testable import Cluster

/// A fake screen: a user may make writes only of paths starting with `mine` (or with `group` when
/// it is in group 500), root anything; everything is visible.
private final class WritableMine: PresenterPermissions {
    func maySee(_ path: ItemPath, as credentials: PresenterCredentials) -> Bool { true }
    func mayMake(_ intent: FileAccessIntent, as credentials: PresenterCredentials) -> Bool {
        if credentials.uid == 0 || intent.path.string.hasPrefix("mine") { return true }
        return intent.path.string.hasPrefix("group") && (credentials.gid == 500 || credentials.groups.contains(500))
    }
}

private let nobody = AccessOrigin(pid: 0, uid: 65534, gid: 65534, executable: "sleep")

/// A right records the user whose accesses use it (docs/cluster.md, the key table), and a node
/// judges another node's read right of another user in the way of its write as one host judges its
/// own readers (`HoldUpRule`): nobody's reader on node b does not hold up root's write on node a of
/// a document nobody could not write; one who could, an older node's right (no user) and a writer do.
@Suite(.serialized, .timeLimit(.minutes(1))) struct ClusterRightHolderTests {
    // MARK: The encoding

    @Test func aRightRecordsItsUserAndDecodesToIt() throws {
        let holder = PresenterCredentials(uid: 1000, gid: 100, groups: [4, 24, 500])
        let bytes = Wire.encode(RightValue(mode: LockMode.read.rawValue, order: 7, holder: holder))
        let json = try #require(try JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any])
        #expect(json["mode"] as? Int == Int(LockMode.read.rawValue))
        #expect(json["order"] as? Int == 7)
        #expect(json["uid"] as? Int == 1000)
        #expect(json["gid"] as? Int == 100)
        #expect(json["groups"] as? [Int] == [4, 24, 500])
        let back = try #require(Wire.decode(RightValue.self, bytes))
        #expect(back.holder == holder)
        #expect(back.order == 7)

        // Through the key, as a watch or a range gives it.
        let keys = ClusterKeys(prefix: "p", node: "b")
        let key = keys.rightKey(path("d/doc.txt"), serial: 3)
        let kv = KeyValue(key: key, value: bytes, createRevision: 11, modRevision: 11, version: 1, lease: 0)
        let node = ClusterNode(store: MemoryClusterStore(), configuration: ClusterConfiguration(node: "a", prefix: "p"))
        let hold = try #require(node.decodeHold(kv))
        #expect(hold.node == "b" && hold.path == path("d/doc.txt") && hold.mode == .read && hold.order == 7)
        #expect(hold.holder == holder)
        // Root's right, and one of a user without supplementary groups.
        #expect(Wire.decode(RightValue.self, Wire.encode(RightValue(mode: 1, order: nil, holder: PresenterCredentials(uid: 0, gid: 0))))?.holder
            == PresenterCredentials(uid: 0, gid: 0))
        let none = Wire.decode(RightValue.self, Wire.encode(RightValue(mode: 1, order: nil, holder: PresenterCredentials(uid: 5, gid: 6))))
        #expect(none?.holder == PresenterCredentials(uid: 5, gid: 6, groups: []))
        // Put again for open files that only append (`y` and `a`), and decoded so; `a` only with `y`.
        let appends = Wire.encode(RightValue(mode: LockMode.write.rawValue, order: 7, holder: holder, yields: true, appends: true))
        let appendsJSON = try #require(try JSONSerialization.jsonObject(with: Data(appends)) as? [String: Any])
        #expect(appendsJSON["y"] as? Bool == true && appendsJSON["a"] as? Bool == true && appendsJSON["i"] == nil)
        let appending = try #require(node.decodeHold(KeyValue(key: key, value: appends, createRevision: 11, modRevision: 12, version: 2, lease: 0)))
        #expect(appending.yields && appending.appends && !appending.idle)
        #expect(RightValue(mode: LockMode.write.rawValue, order: 7, appends: true).a == nil)
    }

    @Test func aRightOfAnOlderNodeHasNoUserAndAnOlderNodeReadsANewRight() throws {
        // What nodes before the user was recorded wrote: mode, and order for a split right.
        for old in [#"{"mode":1}"#, #"{"mode":2,"order":9}"#, #"{"mode":1,"uid":7}"#, #"{"mode":1,"gid":7,"groups":[1]}"#] {
            let v = try #require(Wire.decode(RightValue.self, Array(old.utf8)), "\(old)")
            #expect(v.holder == nil, "\(old): no user, so it holds up as before")
        }
        // An older node's decoder (the value as it was) takes a new right, the user ignored.
        struct OlderRightValue: Decodable { var mode: UInt8; var order: Revision? }
        let new = Wire.encode(RightValue(mode: 1, order: 3, holder: PresenterCredentials(uid: 9, gid: 9, groups: [1, 2])))
        let older = try #require(Wire.decode(OlderRightValue.self, new))
        #expect(older.mode == 1 && older.order == 3)
    }

    @Test func theRuleForAnotherNodesRight() {
        let screen = WritableMine()
        let root = AccessOrigin(pid: 1, uid: 0, gid: 0, executable: "sed")
        let owner = AccessOrigin(pid: 1, uid: 65534, gid: 65534, executable: "sed")
        let reader = PresenterCredentials(uid: 65534, gid: 65534)
        let someone = PresenterCredentials(uid: 1000, gid: 1000)
        let saves = [write("doc.txt")]
        // nobody's read of root's document, which nobody could not write: not held up.
        #expect(!ClusterNode.holdsUp(.read, of: reader, saves, of: root, screen))
        #expect(!ClusterNode.holdsUp(.read, of: someone, [read("doc.txt"), write("doc.txt")], of: root, screen))
        // ... unless it could make one of the writes (its own, or its group's).
        #expect(ClusterNode.holdsUp(.read, of: reader, [write("mine/doc.txt")], of: root, screen))
        #expect(ClusterNode.holdsUp(.read, of: reader, [write("doc.txt"), write("mine/x")], of: root, screen))
        #expect(!ClusterNode.holdsUp(.read, of: reader, [write("group/doc.txt")], of: root, screen))
        #expect(ClusterNode.holdsUp(.read, of: PresenterCredentials(uid: 65534, gid: 65534, groups: [500]), [write("group/doc.txt")], of: root, screen))
        // A writing right holds up what its user could write or replace, and nothing else (a write
        // right of a sticky folder nobody does not own holds up no one's creates there).
        #expect(ClusterNode.holdsUp(.write, of: reader, [write("mine/doc.txt")], of: root, screen))
        #expect(ClusterNode.holdsUp(.subtreeWrite, of: reader, [read("mine/doc.txt")], of: root, screen))
        #expect(!ClusterNode.holdsUp(.write, of: reader, saves, of: root, screen))
        #expect(!ClusterNode.holdsUp(.subtreeWrite, of: reader, saves, of: root, screen))
        // Root's reads, the writer's own user's, reading requests, an older node's right and a node
        // without a screen: as before.
        #expect(ClusterNode.holdsUp(.read, of: PresenterCredentials(uid: 0, gid: 0), saves, of: owner, screen))
        #expect(ClusterNode.holdsUp(.read, of: reader, saves, of: owner, screen))
        #expect(ClusterNode.holdsUp(.read, of: reader, [read("doc.txt")], of: root, screen))
        #expect(ClusterNode.holdsUp(.read, of: nil, saves, of: root, screen))
        #expect(ClusterNode.holdsUp(.read, of: reader, saves, of: root, nil))
    }

    // MARK: Two nodes

    private func twoNodes() async throws -> TestCluster {
        let cluster = TestCluster()
        try await cluster.add("a")
        try await cluster.add("b")
        for n in ["a", "b"] { cluster.coordinator(n).presenterPermissions = WritableMine() }
        return cluster
    }

    @Test func aReaderOnAnotherNodeWhoCouldNotWriteDoesNotHoldUpRootsSave() async throws {
        let cluster = try await twoNodes()
        defer { Task { await cluster.stop() } }
        let steps = StepLog(cluster.node("a"))
        let reader = try await access(cluster.coordinator("b"), [read("doc.txt")], origin: nobody).get()
        // The policy waits 20 s for a holder: granted well before means not held up.
        let started = ContinuousClock.now
        let save = try await access(cluster.coordinator("a"), [write("doc.txt")]).get()
        #expect(ContinuousClock.now - started < .seconds(10), "root's save waited for nobody's reader")
        #expect(await eventually { steps.all.contains { $0.what.hasPrefix("not held up by node b's read of uid 65534") } },
                "\(steps.all.map(\.what))")
        // The right it took past the reader is not kept for the next access.
        save.release()
        let again = Pending(cluster.coordinator("a"), [write("doc.txt")])
        #expect(await eventually { again.access != nil })
        again.access?.release()
        reader.release()
        // Once the reader is gone, root's next save takes its right as ever.
        let later = try await access(cluster.coordinator("a"), [write("doc.txt")]).get()
        later.release()
    }

    @Test func aReaderOnAnotherNodeWhoCouldWriteStillHoldsUpTheSave() async throws {
        let cluster = try await twoNodes()
        defer { Task { await cluster.stop() } }
        let reader = try await access(cluster.coordinator("b"), [read("mine/doc.txt")], origin: nobody).get()
        let save = Pending(cluster.coordinator("a"), [write("mine/doc.txt")])
        try await Task.sleep(for: .milliseconds(500))
        #expect(save.result == nil, "root's save went ahead beside a reader who could write the document")
        reader.release()
        #expect(await eventually { save.access != nil })
        save.access?.release()
    }

    @Test func aRightOfAnOlderNodeStillHoldsUpTheSave() async throws {
        let cluster = try await twoNodes()
        defer { Task { await cluster.stop() } }
        // Node "old" holds a read right as nodes wrote them before: no user.
        let keys = ClusterKeys(prefix: "test/cluster", node: "old")
        let key = keys.rightKey(path("doc.txt"), serial: 1)
        _ = try await cluster.store.put(key, Array(#"{"mode":\#(LockMode.read.rawValue)}"#.utf8), lease: 0)
        let save = Pending(cluster.coordinator("a"), [write("doc.txt")])
        try await Task.sleep(for: .milliseconds(500))
        #expect(save.result == nil, "root's save went ahead beside an older node's right")
        _ = try await cluster.store.delete(key, prefix: false)
        #expect(await eventually { save.access != nil })
        save.access?.release()
    }

    @Test func aNodeTakesRightsForOneUserAtATime() async throws {
        let cluster = try await twoNodes()
        defer { Task { await cluster.stop() } }
        // nobody's read on b, then root's read on b: root's does not ride on nobody's right
        // (else a's write, judging nobody, would go past root's reader).
        let nobodysRead = try await access(cluster.coordinator("b"), [read("doc.txt")], origin: nobody).get()
        let rootsRead = try await access(cluster.coordinator("b"), [read("doc.txt")]).get()
        nobodysRead.release()
        let save = Pending(cluster.coordinator("a"), [write("doc.txt")])
        try await Task.sleep(for: .milliseconds(500))
        #expect(save.result == nil, "root's save went ahead beside root's reader on b")
        rootsRead.release()
        #expect(await eventually { save.access != nil })
        save.access?.release()
    }
}
