import EtcdTestSupport
import Foundation
import Glibc
import XCTest

/// What etcd's operator and a copy-paste mistake do to running nodes, each node a daemon of its own
/// started as a user starts it, over one backing folder and a real one-member etcd, through the
/// real mounts and CLI (docs/cluster.md, "Failure table"): etcd restarted on its data, etcd's data
/// wiped (a new etcd at the same address), a node name mounted twice. Teardown unmounts every
/// mount and stops etcd, also when a test fails.
final class ClusterEtcdLifeTests: ClusterProcessTestCase {
    /// Puts `count` keys outside the cluster's prefix through etcd's JSON gateway (one process):
    /// etcd's revision grows past what a wiped etcd reaches again in the test.
    func raiseEtcdRevision(by count: Int) {
        let script = """
            import base64, json, sys, urllib.request
            url = sys.argv[1]
            for i in range(\(count)):
                body = json.dumps({"key": base64.b64encode(b"filler/%d" % i).decode(), "value": "eA=="}).encode()
                urllib.request.urlopen(urllib.request.Request(url + "/v3/kv/put", data=body), timeout=10).read()
            """
        let r = run("/usr/bin/python3", ["-c", script, etcd.endpoints[0]], timeout: 60)
        XCTAssertEqual(r.status, 0, "\(r)")
    }

    /// etcd's revision now.
    func etcdRevision() -> Int64 {
        let json = etcdctl(["get", "no-such-key", "-w", "json"])
        guard let object = try? JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any],
              let header = object["header"] as? [String: Any], let revision = header["revision"] as? NSNumber else { return 0 }
        return revision.int64Value
    }

    /// Node a mounted at `mnt` and node b at `mntB`, both with `extra` options, then `files` (name,
    /// text) put in the backing folder.
    func mountAAndB(_ extra: [String] = [], files: [(String, String)]) throws {
        try mount("a", at: mnt, extra)
        try mount("b", at: mntB, extra)
        for (name, text) in files { FileManager.default.createFile(atPath: backing + "/" + name, contents: Data(text.utf8)) }
    }

    /// `present` on `mountpoint` and the lines it printed that start with `prefix`.
    func count(_ child: Child, _ prefix: String) -> Int { child.lines.filter { $0.hasPrefix(prefix) }.count }

    /// A write through `writer` to `relative`, presented by `presenter` on the other node: asked
    /// (relinquishToWriter) before and told (didChange) after, within generous bounds.
    func assertAWriteAsksAndTells(_ writer: String, _ relative: String, _ presenter: Child, _ text: String,
                                  file: StaticString = #filePath, line: UInt = #line) {
        let asked = presenter.lines.filter { $0.contains("relinquishToWriter \(relative)") }.count
        let told = count(presenter, "notification didChange \(relative)")
        let r = sh("echo \(text) > '\(writer)/\(relative)'", timeout: 60)
        XCTAssertEqual(r.status, 0, "\(r)", file: file, line: line)
        XCTAssertTrue(waitUntil(10) { self.count(presenter, "notification didChange \(relative)") > told },
                      "the presenter was not told of the write through \(writer): \(presenter.stdout)", file: file, line: line)
        XCTAssertGreaterThan(presenter.lines.filter { $0.contains("relinquishToWriter \(relative)") }.count, asked,
                             "the presenter was not asked before the write through \(writer): \(presenter.stdout)", file: file, line: line)
    }

    // MARK: etcd restarted on its data

    /// etcd killed while both nodes hold rights and presenters, down for longer than the nodes'
    /// TTL, then started again on its data: the leases it kept are the nodes' sessions still (etcd
    /// renews every lease when it starts), so a right b held before is still held (a's write
    /// waits for it), presenters on both nodes are still asked and told, and neither node made a
    /// new session.
    func testEtcdRestartedOnItsDataKeepsSessionsRightsAndPresenters() throws {
        try mountAAndB(["write_wait=30"], files: [("doc.txt", "d\n"), ("b-doc.txt", "e\n")])
        let onA = try present("doc.txt", on: mnt)
        let onB = try present("b-doc.txt", on: mntB)
        XCTAssertTrue(waitUntilKnown(presenters: 1, of: "a", through: mntB) && waitUntilKnown(presenters: 1, of: "b", through: mnt), "presenters in etcd and known to the other node")
        let holder = try holdOpenForWriting(mntB + "/held.txt")
        let (leaseA, leaseB) = (leaseOfNodeKey("a"), leaseOfNodeKey("b"))

        etcd.kill(0)
        sleep(UInt32(ttl) + 2)
        try etcd.restart(0)

        let waiting = try background("echo a > '\(mnt!)/held.txt'")
        usleep(1_500_000)
        XCTAssertNil(waiting.wait(timeout: 0), "a wrote while b held the file open for writing across etcd's restart")
        holder.stop(SIGKILL)
        XCTAssertEqual(waiting.wait(timeout: 30), 0, "a's write once b let go: \(waiting.stderr)")
        assertAWriteAsksAndTells(mntB, "doc.txt", onA, "fromB")
        assertAWriteAsksAndTells(mnt, "b-doc.txt", onB, "fromA")
        XCTAssertEqual(leaseOfNodeKey("a"), leaseA, "a's session")
        XCTAssertEqual(leaseOfNodeKey("b"), leaseB, "b's session")
        for node in ["a", "b"] { XCTAssertFalse(daemonLog(node).contains("session lost"), "\(node): \(daemonLog(node))") }
        for child in [onA, onB] { XCTAssertEqual(child.stop(), 0) }
    }

    // MARK: etcd's data wiped

    /// etcd's data wiped under both nodes: a new etcd at the same address, whose revisions count
    /// from 1 again. Each node's watch asked to go on from the revision after the last it saw,
    /// far above the new etcd's, and etcd let it wait there in silence: neither node heard of the
    /// other's presenters, asks or change records (a write through b to a's presented document did
    /// not end within 60 s, with `ask_timeout=30`, and a's presenter was never asked). Now each node finds etcd below what it saw, says so in its
    /// daemon log, reads every key again, makes a new session, and goes on: presenters registered
    /// before the wipe and after it on either node are asked and told.
    func testEtcdWipedUnderRunningNodesIsReadAgainAndAsksGoOn() throws {
        try mountAAndB(["ask_timeout=30"], files: [("doc.txt", "d\n"), ("later.txt", "l\n")])
        let onA = try present("doc.txt", on: mnt)
        XCTAssertTrue(waitUntilKnown(presenters: 1, of: "a", through: mntB), "a's presenter in etcd and known to b")
        assertAWriteAsksAndTells(mntB, "doc.txt", onA, "one")
        raiseEtcdRevision(by: 300)
        let before = etcdRevision()
        XCTAssertGreaterThan(before, 300)

        try etcd.restartEmpty()
        XCTAssertLessThan(etcdRevision(), 100, "a new etcd")
        for node in ["a", "b"] {
            XCTAssertTrue(waitUntil(20) { daemonLog(node).contains("etcd lost its history") },
                          "\(node) did not notice etcd's history lost: \(daemonLog(node).suffix(1500))")
        }
        XCTAssertTrue(waitUntil(20) { keys(of: "a")["n"] == 1 && keys(of: "a")["p"] == 1 && keys(of: "b")["n"] == 1 },
                      "both nodes and a's presenter in the new etcd: \(etcdKeys(""))")
        XCTAssertLessThan(etcdRevision(), before, "the test needs the new etcd below the old one's revision")

        // a's presenter from before the wipe, b's registered after it.
        let started = Date()
        assertAWriteAsksAndTells(mntB, "doc.txt", onA, "two")
        XCTAssertLessThan(Date().timeIntervalSince(started), 20, "b's write waited out its ask")
        let onB = try present("later.txt", on: mntB)
        XCTAssertTrue(waitUntilKnown(presenters: 1, of: "b", through: mnt), "b's presenter in etcd and known to a")
        assertAWriteAsksAndTells(mnt, "later.txt", onB, "three")
        XCTAssertEqual(FileOps.get(mnt + "/doc.txt"), "two\n", "a shows b's bytes")
        XCTAssertLessThan(etcdRevision(), before, "still below: the nodes did not hear each other only once etcd passed it")
        for child in [onA, onB] { XCTAssertEqual(child.stop(), 0) }
    }

    // MARK: One node name mounted twice

    /// A copy-paste mistake: a third mount with `node=a` while node a runs. Over the same folder on
    /// this host it is refused at once, before anything is mounted or written, naming the mount
    /// that has the name; as another host would be (another backing folder, the same cluster) it is
    /// refused once the name's session outlived its TTL while the new node waited for it to go.
    /// Node a is not disturbed either way: its mount record, its session in etcd, its presenter
    /// asked and told. Before, the first mount wrote its record over a's (so the CLI no longer
    /// found a's state from a's mount point) and failed on a's event log's lock, and the second
    /// joined the cluster as a, putting its node key, with its own lease, over a's.
    func testASecondMountOfANodeNameIsRefusedAndTheFirstIsUndisturbed() throws {
        try mountAAndB(files: [("doc.txt", "d\n")])
        let onA = try present("doc.txt", on: mnt)
        XCTAssertTrue(waitUntilKnown(presenters: 1, of: "a", through: mntB), "a's presenter in etcd and known to b")
        let lease = try XCTUnwrap(leaseOfNodeKey("a"))
        let record = try String(contentsOfFile: nodeState("a") + "/mount", encoding: .utf8)
        let pidA = try daemonPID("a")
        let mntC = root + "/mntC"
        mkdir(mntC, 0o755)

        func assertAUndisturbed(_ context: String) {
            XCTAssertEqual(try? String(contentsOfFile: nodeState("a") + "/mount", encoding: .utf8), record, "a's mount record \(context)")
            XCTAssertEqual(try? daemonPID("a"), pidA, "a's pid file \(context)")
            XCTAssertEqual(leaseOfNodeKey("a"), lease, "a's session in etcd \(context)")
            XCTAssertEqual(keys(of: "a")["p"], 1, "a's presenter in etcd \(context): \(etcdKeys(""))")
            let status = coordfs("status", mnt, "--cluster", "--json")
            XCTAssertEqual(status.status, 0, "\(status)")
            XCTAssertTrue(status.stdout.contains("\"\(lease)\""), "a's status \(context): \(status.stdout)")
            XCTAssertFalse(Self.mounts(under: root).contains(mntC), "mounted at \(mntC) \(context)")
        }

        // The same folder, this host.
        let same = run(binary, ["mount", backing!, mntC, "-o", nodeOptions("a")])
        XCTAssertNotEqual(same.status, 0, "a second node=a mounted: \(same)")
        XCTAssertTrue(same.stderr.contains("node=a is mounted already") && same.stderr.contains(mnt!), "\(same)")
        assertAUndisturbed("after the mount over the same folder")
        assertAWriteAsksAndTells(mntB, "doc.txt", onA, "one")

        // Another folder (another host's view of the cluster): the name is found in etcd.
        let backing2 = root + "/backing2"
        mkdir(backing2, 0o755)
        let started = Date()
        let other = run(binary, ["mount", backing2, mntC, "-o", nodeOptions("a")])
        let took = Date().timeIntervalSince(started)
        XCTAssertNotEqual(other.status, 0, "another host's node=a joined: \(other)")
        XCTAssertTrue(other.stderr.contains("node name a is in use"), "\(other)")
        XCTAssertGreaterThanOrEqual(took, ttl, "it waited for the name's session to go")
        assertAUndisturbed("after another host's mount")
        assertAWriteAsksAndTells(mntB, "doc.txt", onA, "two")

        // Once a is gone, the name is free at once (its lease revoked at unmount).
        XCTAssertEqual(onA.stop(), 0)
        XCTAssertEqual(coordfs("unmount", mnt).status, 0)
        try mount("a", at: mntC)
        XCTAssertEqual(coordfs("unmount", mntC).status, 0)
    }
}
