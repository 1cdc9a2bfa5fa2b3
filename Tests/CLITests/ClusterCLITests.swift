import EtcdTestSupport
import Foundation
import Glibc
import Linux
import TestSupport
import XCTest

/// Two cluster nodes as a user starts them (issue 19): two `coordfs mount ... -o cluster=...,node=`
/// daemons over one backing folder (what NFS or SMB shared by two hosts is), with a real one-member
/// etcd and the backing watcher off, so that whatever one node learns of the other's writes comes
/// from the cluster. Each node keeps its own state folder (`BACKING/.coordfs/nodes/NODE`), and the
/// CLI finds the right one from a mount point. Teardown always unmounts both and stops etcd.
class ClusterCLITestCase: CLITestCase {
    var etcd: EtcdCluster!
    var mntB: String!
    var prefix: String!

    override func setUpWithError() throws {
        try super.setUpWithError()
        do { etcd = try EtcdCluster(size: 1) } catch { throw XCTSkip("no etcd: \(error)") }
        mntB = root + "/mntB"
        mkdir(mntB, 0o755)
        prefix = "clitest\(getpid())"
    }

    override func tearDownWithError() throws {
        // The mounts first (their daemons leave etcd cleanly), then etcd, also when the test failed.
        defer { etcd?.stop() }
        try super.tearDownWithError()
    }

    /// The cluster options of node `node`.
    func clusterOptions(_ node: String, _ extra: [String] = []) -> [String] {
        ["cluster=\(etcd.endpoints.joined(separator: ","))", "node=\(node)", "cluster_prefix=\(prefix!)", "backing_watcher=off"] + extra
    }

    /// `coordfs mount BACKING MOUNTPOINT -o cluster=...,node=NODE` (a background daemon).
    func mountNode(_ node: String, at mountpoint: String, _ extra: [String] = []) throws {
        let args = ["mount", backing!, mountpoint, "-o", clusterOptions(node, extra).joined(separator: ",")]
        let r = coordfs(arguments: args)
        guard r.status == 0, Self.mounts(under: root).contains(mountpoint) else {
            throw CLIError("`coordfs \(args.joined(separator: " "))` failed: \(r)")
        }
    }

    /// Node a mounted on `mnt`, then node b on `mntB`, both with `extra`.
    func mountNodes(_ extra: [String] = []) throws {
        try mountNode("a", at: mnt, extra)
        try mountNode("b", at: mntB, extra)
    }

    func nodeState(_ node: String) -> String { backing + "/.coordfs/nodes/" + node }

    /// The pid in node `node`'s pid file.
    func daemonPID(_ node: String) throws -> pid_t {
        try XCTUnwrap(daemonPIDFile(in: nodeState(node))?.pid, "pid file of \(node)")
    }

    /// The keys etcd holds under `prefix/sub` (etcdctl, as an operator would look).
    func etcdKeys(_ sub: String) -> [String] {
        let r = run("/usr/bin/env", ["ETCDCTL_API=3", "etcdctl", "--endpoints", etcd.endpoints.joined(separator: ","),
                                     "get", "--prefix", "--keys-only", "\(prefix!)/\(sub)"], timeout: 20)
        return r.lines
    }

    /// How many presenters of node `node` the node mounted at `viewer` knows (`coordfs status
    /// --cluster --json` there): its table from its watch of etcd, which its accesses look among.
    func presentersKnown(of node: String, through viewer: String) -> Int? {
        let r = coordfs("status", viewer, "--cluster", "--json")
        guard r.status == 0, let o = try? JSONSerialization.jsonObject(with: Data(r.stdout.utf8)) as? [String: Any],
              let nodes = o["nodes"] as? [[String: Any]] else { return nil }
        return nodes.first { $0["name"] as? String == node }.map { ($0["presenters"] as? [Any])?.count ?? 0 } ?? 0
    }

    /// Waits until etcd holds `count` presenters of node `node` and the node mounted at each of
    /// `viewers` knows them from its watch. A presenter counts for another node's accesses from
    /// then on (docs/cluster.md, "Presenters"): a write through that node right after the key is
    /// in etcd may be admitted before its watch brings the key, asking nobody.
    func waitUntilKnown(presenters count: Int, of node: String, through viewers: String..., seconds: Double = 10) -> Bool {
        waitUntil(seconds) { etcdKeys("p/\(node)/").count == count && viewers.allSatisfy { presentersKnown(of: node, through: $0) == count } }
    }

    func waitUntil(_ seconds: Double, _ condition: () -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while !condition() && Date() < deadline { usleep(50_000) }
        return condition()
    }

    /// `coordfs present MOUNTPOINT/relative` on node at `mountpoint`, once registered.
    func present(_ relative: String, on mountpoint: String) throws -> Child {
        let child = try startCoordfs(["present", mountpoint + "/" + relative])
        guard waitUntil(10, { child.lines.contains { $0.hasPrefix("registered") } }) else {
            throw CLIError("coordfs present \(relative) did not register: \(child.stdout) \(child.stderr)")
        }
        return child
    }
}

final class ClusterCLITests: ClusterCLITestCase {
    func testTwoNodesOverOneFolderKeepTheirOwnStateAndAPresenterOnAIsAskedWhenBWrites() throws {
        FileManager.default.createFile(atPath: backing + "/doc.txt", contents: Data("one\n".utf8))
        try mountNodes()

        // Each node its own log, store, socket, pid file and daemon log; nothing at the top.
        for node in ["a", "b"] {
            for item in ["daemon.pid", "daemon.log", "control.sock", "log", "mount"] {
                XCTAssertEqual(access(nodeState(node) + "/" + item, F_OK), 0, "node \(node) has its own \(item)")
            }
        }
        for item in ["daemon.pid", "control.sock", "log"] {
            XCTAssertNotEqual(access(backing + "/.coordfs/" + item, F_OK), 0, "no shared \(item) in .coordfs")
        }
        XCTAssertNotEqual(try daemonPID("a"), try daemonPID("b"), "two daemons")
        // The reserved name stays hidden through both mounts.
        for m in [mnt!, mntB!] {
            XCTAssertFalse(try FileManager.default.contentsOfDirectory(atPath: m).contains(".coordfs"), "listed in \(m)")
            XCTAssertNotEqual(access(m + "/.coordfs/nodes", F_OK), 0, "reachable through \(m)")
        }

        // A presenter on A; B learns of it through etcd.
        let presenter = try present("doc.txt", on: mnt)
        XCTAssertTrue(waitUntilKnown(presenters: 1, of: "a", through: mntB), "A's presenter in etcd and known to B: \(etcdKeys(""))")
        XCTAssertEqual(sh("echo two > '\(mntB!)/doc.txt'").status, 0)
        XCTAssertTrue(waitUntil(10) { presenter.lines.contains { $0.hasPrefix("notification didChange doc.txt") } }, presenter.stdout)
        let asked = try XCTUnwrap(presenter.lines.firstIndex { $0.contains("relinquishToWriter doc.txt") }, "asked: \(presenter.stdout)")
        let told = try XCTUnwrap(presenter.lines.firstIndex { $0.hasPrefix("notification didChange doc.txt") })
        XCTAssertLessThan(asked, told, "asked before, told after: \(presenter.stdout)")
        XCTAssertEqual(FileOps.get(mnt + "/doc.txt"), "two\n", "A's mount shows B's bytes")

        // The CLI finds each node's own log and store from its mount point.
        let logA = log(), logB = coordfsLog(mntB)
        XCTAssertTrue(logA.contains { $0.kind == "mount" && ($0.details["message"] as? String)?.hasSuffix(" on \(mnt!)") == true }, "A's log")
        XCTAssertTrue(logB.contains { $0.kind == "mount" && ($0.details["message"] as? String)?.hasSuffix(" on \(mntB!)") == true }, "B's log")
        XCTAssertFalse(logB.contains { $0.kind == "mount" && ($0.details["message"] as? String)?.hasSuffix(" on \(mnt!)") == true }, "not A's")
        XCTAssertTrue(logA.contains { $0.kind == "presenterAsked" }, "A's presenter was asked, in A's log")
        let versions = coordfs("versions", mnt + "/doc.txt", "--json")
        XCTAssertEqual(versions.status, 0, "\(versions)")
        XCTAssertFalse(versions.lines.isEmpty, "A's store kept the version A's presenter had: \(versions)")
        // --backing of a folder holding several nodes' state needs --node.
        let ambiguous = coordfs("log", "--backing", backing)
        XCTAssertNotEqual(ambiguous.status, 0)
        XCTAssertTrue(ambiguous.stderr.contains("several cluster nodes (a, b)") && ambiguous.stderr.contains("--node"), "\(ambiguous)")
        let byNode = coordfs("log", "--backing", backing, "--node", "b", "--json")
        XCTAssertEqual(byNode.status, 0, "\(byNode)")
        XCTAssertTrue(byNode.stdout.contains(" on \(mntB!)") && !byNode.stdout.contains(" on \(mnt!)\""), "B's log by --node")

        // The backing watcher is off: a change made beside the mounts, in the backing folder itself,
        // reaches no presenter (only the cluster tells nodes of each other's writes).
        let toldBefore = presenter.lines.filter { $0.hasPrefix("notification didChange") }.count
        FileManager.default.createFile(atPath: backing + "/doc.txt", contents: Data("beside\n".utf8))
        usleep(1_500_000)
        XCTAssertEqual(presenter.lines.filter { $0.hasPrefix("notification didChange") }.count, toldBefore, presenter.stdout)

        XCTAssertEqual(presenter.stop(), 0)
        XCTAssertEqual(coordfs("unmount", mntB).status, 0)
        XCTAssertNotEqual(access(nodeState("b") + "/mount", F_OK), 0, "B's mount record is gone with its mount")
        XCTAssertEqual(access(nodeState("a") + "/mount", F_OK), 0, "A's stays")
        XCTAssertTrue(waitUntil(10) { etcdKeys("n/b").isEmpty }, "B left the cluster")
        unmount()
    }

    /// `mv draft.txt doc.txt` through b (a file another process made, older than `save_window`:
    /// a plain move over the document, whose presenter b does not know) while a's `present
    /// --unsaved` presents doc.txt: b's record says only that draft.txt moved to doc.txt, and a
    /// takes it as its own mount would, a change of the document: a conflict whose base is what a's
    /// presenter loaded, and a second presenter without unsaved changes reloads. Before, both
    /// heard `didChange` from the coordinator and nothing from a's store: no conflict, no reload,
    /// and the unsaved presenter's next save went over the moved file unseen.
    func testAFileMovedOverADocumentOnOneNodeIsAChangeForItsPresentersOnTheOther() throws {
        FileManager.default.createFile(atPath: backing + "/doc.txt", contents: Data("one\n".utf8))
        FileManager.default.createFile(atPath: backing + "/draft.txt", contents: Data("draft\n".utf8))
        try mountNodes()
        let unsaved = try startCoordfs(["present", mnt + "/doc.txt", "--unsaved"])
        XCTAssertTrue(waitUntil(10) { unsaved.lines.contains { $0.hasPrefix("registered") } }, unsaved.stdout + unsaved.stderr)
        let clean = try present("doc.txt", on: mnt)
        XCTAssertTrue(waitUntilKnown(presenters: 2, of: "a", through: mntB), "a's presenters in etcd and known to b: \(etcdKeys(""))")

        XCTAssertEqual(sh("mv '\(mntB!)/draft.txt' '\(mntB!)/doc.txt'").status, 0)
        XCTAssertEqual(FileOps.get(backing + "/doc.txt"), "draft\n")
        XCTAssertTrue(waitUntil(10) { unsaved.lines.contains { $0.hasPrefix("notification didGainConflict doc.txt") } },
                      "a's unsaved presenter: \(unsaved.stdout)")
        XCTAssertTrue(unsaved.lines.contains { $0.hasPrefix("notification documentChanged doc.txt kind=change action=conflict") }, unsaved.stdout)
        XCTAssertTrue(waitUntil(10) { clean.lines.contains { $0.hasPrefix("notification documentChanged doc.txt kind=change action=reload") } },
                      "a's presenter without unsaved changes: \(clean.stdout)")
        let r = coordfs("conflicts", mnt, "--json")
        let listed = r.lines.compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
            .filter { ($0["path"] as? String) == mnt + "/doc.txt" }
        XCTAssertEqual(listed.count, 1, "\(r)")
        let base = try XCTUnwrap(listed.first?["baseVersion"] as? Int, "\(listed)")
        XCTAssertEqual(coordfs("show", mnt + "/doc.txt", "--version", String(base)).stdout, "one\n")
        XCTAssertEqual(FileOps.get(mnt + "/doc.txt"), "draft\n")
        for child in [unsaved, clean] { child.stop(SIGKILL) }
    }

    /// Saves that take the document's name away for a moment, through b, while a's `present
    /// --unsaved` presents the document: vim's (the document renamed to a backup name, the new
    /// version written at its name, the backup removed) and `rm doc; echo > doc` (git checkout's).
    /// b treats a presenter of a as it treats its own, so each is a change of the document there,
    /// as through one host's mount: the presenter stays at its name and hears didChange (no
    /// didMove, no didDelete), its store opens a conflict whose base is what it loaded. Before, b's
    /// record said the document moved to the backup (a's presenter followed it there and presented
    /// a removed file, with no conflict) or was deleted and a new file appeared.
    func testSavesByRenameOrUnlinkOnOneNodeAreChangesOfTheDocumentOnTheOther() throws {
        FileManager.default.createFile(atPath: backing + "/vim.txt", contents: Data("one\n".utf8))
        FileManager.default.createFile(atPath: backing + "/git.txt", contents: Data("one\n".utf8))
        try mountNodes()
        var presenters: [String: Child] = [:]
        for name in ["vim.txt", "git.txt"] {
            let p = try startCoordfs(["present", mnt + "/" + name, "--unsaved"])
            XCTAssertTrue(waitUntil(10) { p.lines.contains { $0.hasPrefix("registered") } }, p.stdout + p.stderr)
            presenters[name] = p
        }
        XCTAssertTrue(waitUntilKnown(presenters: 2, of: "a", through: mntB), "a's presenters in etcd and known to b: \(etcdKeys(""))")

        XCTAssertEqual(sh("cd '\(mntB!)' && mv vim.txt vim.txt~ && echo new > vim.txt && rm vim.txt~").status, 0)
        XCTAssertEqual(sh("cd '\(mntB!)' && rm git.txt && echo new > git.txt").status, 0)
        let listed = { () -> [String: [String: Any]] in
            let r = self.coordfs("conflicts", self.mnt, "--json")
            var out: [String: [String: Any]] = [:]
            for case let o? in r.lines.map({ try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }) {
                if let path = o["path"] as? String { out[path] = o }
            }
            return out
        }
        for (name, presenter) in presenters {
            XCTAssertTrue(waitUntil(10) { presenter.lines.contains { $0.hasPrefix("notification didGainConflict \(name)") } },
                          "\(name)'s presenter on a: \(presenter.stdout)")
            XCTAssertTrue(presenter.lines.contains("notification didChange \(name)"), presenter.stdout)
            XCTAssertFalse(presenter.lines.contains { $0.contains("didMove") || $0.contains("didDelete") || $0.contains("kind=deletion") },
                           "\(name) was saved, not moved or deleted: \(presenter.stdout)")
            let conflict = try XCTUnwrap(listed()[mnt + "/" + name], "\(listed())")
            XCTAssertEqual(conflict["kind"] as? String, "change")
            let base = try XCTUnwrap(conflict["baseVersion"] as? Int, "\(conflict)")
            XCTAssertEqual(coordfs("show", mnt + "/" + name, "--version", String(base)).stdout, "one\n")
            XCTAssertEqual(FileOps.get(mnt + "/" + name), "new\n")
        }
        let status = coordfs("status", mnt, "--json").stdout
        XCTAssertFalse(status.contains("vim.txt~"), "a's presenter followed the backup: \(status)")
        for child in presenters.values { child.stop(SIGKILL) }
    }

    /// A node's daemon killed (SIGKILL): its mount is stale, its record stays, and the CLI still finds
    /// that node's log from the mount point (not the other node's, not the one-host folder); the
    /// next `coordfs mount` of the node cleans the stale mount and writes a new record.
    func testAKilledNodesStaleMountStillFindsItsOwnLog() throws {
        try mountNodes()
        // Its mount record written first: a record still in memory (the writer gathers for about
        // 5 ms) is lost with a SIGKILL, as docs/event-log.md says; what is in the file must be found.
        XCTAssertTrue(waitUntil(20) { self.coordfs("log", self.mntB, "--json").stdout.contains(" on \(self.mntB!)\"") },
                      "B's mount record is in its log")
        let pid = try daemonPID("b")
        XCTAssertEqual(kill(pid, SIGKILL), 0)
        XCTAssertTrue(ProcessEnd.wait(pid, timeout: 10), "daemon \(pid) gone")
        XCTAssertEqual(access(nodeState("b") + "/mount", F_OK), 0, "a killed daemon leaves its record")
        let logB = coordfs("log", mntB, "--json")
        XCTAssertEqual(logB.status, 0, "\(logB)")
        XCTAssertTrue(logB.stdout.contains(" on \(mntB!)\""), "B's own log through its stale mount: \(logB.stdout.prefix(500))")
        XCTAssertFalse(logB.stdout.contains(" on \(mnt!)\""), "not A's")
        // A's mount is unaffected and still found.
        XCTAssertTrue(coordfs("log", mnt!, "--json").stdout.contains(" on \(mnt!)\""))
        // A one-host daemon killed over this folder before left its pid file at the top, its pid
        // handed out again since (a live `sleep`, another start): no one-host daemon runs, so the
        // client library takes B's stale mount for B's, as the log does (before, it went to the
        // one-host socket, `.coordfs/control.sock`, whenever that pid file was there).
        let sleeper = try start("/bin/sleep", ["60"])
        defer { sleeper.stop(SIGKILL) }
        let topPIDFile = backing + "/.coordfs/daemon.pid"
        try "\(sleeper.pid)\nstart=1 boot=\(ProcessLife.bootID())\n".write(toFile: topPIDFile, atomically: false, encoding: .utf8)
        let status = coordfs("status", mntB)
        XCTAssertNotEqual(status.status, 0, "\(status)")
        XCTAssertTrue(status.stderr.contains(nodeState("b") + "/control.sock"), "B's socket asked for: \(status)")
        unlink(topPIDFile)
        try mountNode("b", at: mntB)
        XCTAssertNotEqual(try daemonPID("b"), pid, "a new daemon")
        XCTAssertEqual(sh("echo back > '\(mntB!)/back.txt'").status, 0, "the new mount works")
        XCTAssertEqual(FileOps.get(mnt + "/back.txt"), "back\n")
        XCTAssertEqual(coordfs("unmount", mntB).status, 0)
        unmount()
    }

    func testNodeNamesThatCouldLeaveTheStateFolderAreRefused() throws {
        for bad in ["..", ".", "a/b", String(repeating: "n", count: 65)] {
            let r = coordfs(arguments: ["mount", backing!, mnt!, "-o", clusterOptions(bad).joined(separator: ",")])
            XCTAssertNotEqual(r.status, 0, "node=\(bad) mounted")
            XCTAssertTrue(r.stderr.contains("node="), "\(r)")
        }
        XCTAssertTrue(Self.mounts(under: root).isEmpty)
        XCTAssertNotEqual(access(backing + "/.coordfs/nodes", F_OK), 0, "no state folder made for a refused name")
    }

    private func coordfsLog(_ mountpoint: String) -> [Record] {
        let r = coordfs(arguments: ["log", mountpoint, "--json"])
        XCTAssertEqual(r.status, 0, "coordfs log \(mountpoint): \(r)")
        return records(r.lines)
    }
}
