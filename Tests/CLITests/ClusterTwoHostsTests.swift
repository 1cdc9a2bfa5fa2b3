import EtcdTestSupport
import Foundation
import Glibc
import XCTest

/// What users of two hosts sharing one folder through etcd meet (docs/cluster.md), each node a
/// daemon process of its own started as a user starts it, node a's in a network namespace of its
/// own where a test cuts its link (`Tests/EtcdTestSupport/NetworkNamespace.swift`), through the real
/// mounts and the real CLI. Teardown restores the link, unmounts both, deletes the namespace and
/// stops etcd, also when a test fails.
final class ClusterTwoHostsTests: ClusterProcessTestCase {
    /// Node a's daemon in a network namespace reaching etcd over a veth pair (`namespace`), node b's
    /// on this side; etcd listens on both.
    func mountAInANamespaceAndB(_ extraA: [String] = [], _ extraB: [String] = []) throws -> NetworkNamespace {
        let ns: NetworkNamespace
        do { ns = try NetworkNamespace() } catch { throw XCTSkip("no network namespace: \(error)") }
        namespace = ns
        etcd.stop()
        etcd = try EtcdCluster(size: 1, alsoListenOn: [ns.hostAddress])
        try mount("a", at: mnt, launcher: ns.enter, endpoints: etcd.endpoints(on: ns.hostAddress), extraA)
        try mount("b", at: mntB, extraB)
        return ns
    }

    /// etcd's current revision.
    func etcdRevision() throws -> Int64 {
        let json = etcdctl(["endpoint", "status", "-w", "json"])
        guard let list = try? JSONSerialization.jsonObject(with: Data(json.utf8)) as? [[String: Any]],
              let header = (list.first?["Status"] as? [String: Any])?["header"] as? [String: Any],
              let revision = header["revision"] as? NSNumber else { throw CLIError("etcdctl endpoint status: \(json)") }
        return revision.int64Value
    }

    /// A presenter on host a with unsaved changes while host b writes its document, a cut off from
    /// etcd at that moment, and etcd compacting its history meanwhile (as `--auto-compaction-*`
    /// does): b's writer waits for an answer no one can give until a's lease ends, then goes on;
    /// when the link returns, a's presenter hears of b's change as a conflict (its unsaved changes
    /// against b's bytes), so no change is lost, and a presenter of a file b wrote last is told
    /// too. Before, a's watch, finding the revisions it had not read compacted, read etcd's keys
    /// again and told nothing of the change records among them: a's presenter, never told, would
    /// have saved over b's bytes.
    func testAPresenterCutOffWhileTheOtherHostWritesAndEtcdCompactsHearsOfItWhenTheLinkReturns() throws {
        let ns = try mountAInANamespaceAndB()
        FileManager.default.createFile(atPath: backing + "/doc.txt", contents: Data("v0\n".utf8))
        FileManager.default.createFile(atPath: backing + "/notes.txt", contents: Data("n0\n".utf8))
        let presenter = try startCoordfs(["present", mnt + "/doc.txt", "--unsaved"])
        let notes = try present("notes.txt", on: mnt)
        XCTAssertTrue(waitUntil(10) { presenter.lines.contains { $0.hasPrefix("registered") } }, presenter.stdout)
        XCTAssertTrue(waitUntil(10) { etcdKeys("p/a/").count == 2 }, "a's presenters in etcd")

        try ns.cut()
        let started = Date()
        let r = sh("echo b1 > '\(mntB!)/doc.txt'", timeout: 60)
        let took = Date().timeIntervalSince(started)
        XCTAssertEqual(r.status, 0, "b's write while a is cut off: \(r)")
        print("b's write while a was cut off took \(String(format: "%.2f", took)) s (a's TTL \(ttl) s)")
        // Later records of b's overwrite the one of doc.txt in etcd (one key per node).
        XCTAssertEqual(sh("echo x > '\(mntB!)/x.txt' && sleep 0.2 && echo n1 > '\(mntB!)/notes.txt'").status, 0)
        usleep(300_000)
        let revision = try etcdRevision()
        XCTAssertTrue(etcdctl(["compact", String(revision)]).contains("compacted revision"))
        try ns.restore()
        XCTAssertTrue(waitUntil(20) { daemonLog("a").contains("etcd compacted its history") }, "a's log: \(daemonLog("a"))")

        // a's presenter hears of b's change: a conflict, since it had unsaved changes.
        XCTAssertTrue(waitUntil(15) { presenter.lines.contains { $0.hasPrefix("notification documentChanged doc.txt") } },
                      "a's presenter never heard of b's write: \(presenter.stdout)")
        let changed = presenter.lines.first { $0.hasPrefix("notification documentChanged doc.txt") } ?? ""
        XCTAssertTrue(changed.contains("action=conflict"), changed)
        XCTAssertTrue(waitUntil(10) { notes.lines.contains { $0.hasPrefix("notification didChange notes.txt") } }, notes.stdout)
        let conflicts = coordfs("conflicts", mnt, "--json")
        XCTAssertEqual(conflicts.status, 0, "\(conflicts)")
        XCTAssertEqual(conflicts.lines.count, 1, "one conflict on a: \(conflicts)")
        XCTAssertEqual(FileOps.get(mnt + "/doc.txt"), "b1\n", "a's mount shows b's bytes")
        presenter.stop(SIGKILL)
        notes.stop(SIGKILL)
    }
}
