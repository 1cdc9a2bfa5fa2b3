import EtcdTestSupport
import Foundation
import Glibc
import XCTest

/// `coordfs status --cluster` and `coordfs watch --cluster` (issue 19, "What a user does") on two
/// nodes started as a user would, over a real etcd: every node's presenters, holds and steps, the
/// visibility rule applied to other nodes' items for `nobody`, a mount without a cluster saying
/// so, and etcd's password in no output and no log.
final class ClusterViewsCLITests: ClusterCLITestCase {
    private func asNobody(_ arguments: [String]) -> CommandResult {
        run("/usr/bin/setpriv", ["--reuid=65534", "--regid=65534", "--clear-groups", "--", binary] + arguments)
    }

    private func startAsNobody(_ arguments: [String]) throws -> Child {
        try start("/usr/bin/setpriv", ["--reuid=65534", "--regid=65534", "--clear-groups", "--", binary] + arguments)
    }

    /// A shared folder everyone may use, and a private one only root may list.
    private func makeFolders() {
        chmod(root, 0o755)  // nobody reaches the mounts
        mkdir(backing + "/shared", 0o777)
        chmod(backing + "/shared", 0o777)
        FileManager.default.createFile(atPath: backing + "/shared/doc.txt", contents: Data("one\n".utf8), attributes: [.posixPermissions: 0o666])
        mkdir(backing + "/private", 0o700)
        FileManager.default.createFile(atPath: backing + "/private/secret.txt", contents: Data("s\n".utf8), attributes: [.posixPermissions: 0o600])
    }

    /// Writes through B until `watcher` shows a step (its cursor is set by its first request).
    private func waitUntilFollowing(_ watchers: [Child]) -> Bool {
        var n = 0
        return waitUntil(20) {
            n += 1
            _ = sh("echo \(n) > '\(mntB!)/shared/warm.txt'")
            return watchers.allSatisfy { $0.lines.contains { $0.contains("shared/warm.txt") } }
        }
    }

    func testStatusAndWatchShowEveryNodeAndNobodySeesOnlyWhatItCouldFind() throws {
        makeFolders()
        try mountNodes(["allow_other"])
        let rootWatch = try startCoordfs(["watch", mntB, "--cluster", "--json"])
        let nobodyWatch = try startAsNobody(["watch", mntB, "--cluster"])
        XCTAssertTrue(waitUntilFollowing([rootWatch, nobodyWatch]), "watchers follow: \(rootWatch.stdout) \(rootWatch.stderr) \(nobodyWatch.stderr)")

        let shared = try present("shared/doc.txt", on: mnt)
        let secret = try present("private/secret.txt", on: mnt)
        XCTAssertTrue(waitUntilKnown(presenters: 2, of: "a", through: mntB), "\(etcdKeys(""))")

        // status --cluster on B: both nodes, A's presenters, etcd's line.
        let text = coordfs("status", mntB, "--cluster")
        XCTAssertEqual(text.status, 0, "\(text)")
        XCTAssertTrue(text.stdout.contains("node b on \(mntB!)"), text.stdout)
        XCTAssertTrue(text.stdout.contains("etcd: reachable, session valid; when unreachable: fail; granted locally: 0"), text.stdout)
        XCTAssertTrue(text.stdout.contains("nodes (2)"), text.stdout)
        XCTAssertTrue(text.lines.contains { $0.hasPrefix("  a ") && $0.hasSuffix("shared/doc.txt") }, text.stdout)
        XCTAssertTrue(text.lines.contains { $0.hasPrefix("  a ") && $0.hasSuffix("private/secret.txt") }, text.stdout)
        let json = coordfs("status", mntB, "--cluster", "--json")
        XCTAssertEqual(json.status, 0, "\(json)")
        let object = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])
        XCTAssertEqual(object["node"] as? String, "b")
        XCTAssertEqual((object["etcd"] as? [String: Any])?["reachable"] as? Bool, true)
        let nodes = try XCTUnwrap(object["nodes"] as? [[String: Any]])
        XCTAssertEqual(nodes.compactMap { $0["name"] as? String }, ["a", "b"])
        let a = try XCTUnwrap(nodes.first { $0["name"] as? String == "a" })
        XCTAssertGreaterThan(Int(a["lease"] as? String ?? "0") ?? 0, 0, "\(a)")
        XCTAssertEqual(a["ttl"] as? Int, 10)
        XCTAssertEqual(Set((a["presenters"] as? [[String: Any]] ?? []).compactMap { $0["path"] as? String }), ["shared/doc.txt", "private/secret.txt"])

        // nobody: the shared presenter, never the private one, on either node's mount.
        for m in [mnt!, mntB!] {
            let seen = asNobody(["status", m, "--cluster"])
            XCTAssertEqual(seen.status, 0, "\(seen)")
            XCTAssertTrue(seen.stdout.contains("shared/doc.txt"), seen.stdout)
            XCTAssertFalse(seen.stdout.contains("secret"), "nobody sees a presenter it could not find: \(seen.stdout)")
            let seenJSON = asNobody(["status", m, "--cluster", "--json"])
            XCTAssertFalse(seenJSON.stdout.contains("secret"), seenJSON.stdout)
        }

        // Writes through B to both documents: A's presenters asked, every node's steps in the watch.
        XCTAssertEqual(sh("echo two > '\(mntB!)/shared/doc.txt'").status, 0)
        XCTAssertEqual(sh("echo s2 > '\(mntB!)/private/secret.txt'").status, 0)
        XCTAssertTrue(waitUntil(10) { secret.lines.contains { $0.hasPrefix("notification didChange") } }, secret.stdout)
        XCTAssertTrue(waitUntil(10) { shared.lines.contains { $0.hasPrefix("notification didChange") } }, shared.stdout)
        XCTAssertTrue(waitUntil(10) { rootWatch.lines.contains { $0.contains("private/secret.txt") && $0.contains("\"node\":\"b\"") && $0.contains("did changed") } },
                      rootWatch.stdout)
        let steps = rootWatch.lines.compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        XCTAssertEqual(steps.count, rootWatch.lines.count, "one JSON object a line")
        XCTAssertEqual(Set(steps.compactMap { $0["node"] as? String }), ["a", "b"], "every node's steps")
        XCTAssertTrue(steps.contains { $0["node"] as? String == "a" && ($0["what"] as? String)?.hasPrefix("answered b") == true }, rootWatch.stdout)
        let revisions = steps.compactMap { ($0["revision"] as? NSNumber)?.int64Value }
        XCTAssertEqual(revisions, revisions.sorted(), "one order: etcd's revisions: \(rootWatch.lines.prefix(12))")
        XCTAssertTrue(waitUntil(10) { nobodyWatch.lines.contains { $0.contains("shared/doc.txt") && $0.contains("did changed") } }, nobodyWatch.stdout)
        XCTAssertFalse(nobodyWatch.stdout.contains("secret"), "nobody's watch names no item it could not find: \(nobodyWatch.stdout)")
        XCTAssertFalse(nobodyWatch.stdout.contains("private"), nobodyWatch.stdout)

        for c in [rootWatch, nobodyWatch, shared, secret] { c.stop() }
        XCTAssertEqual(coordfs("unmount", mntB).status, 0)
        unmount()
    }

    func testAMountThatIsNoNodeOfAClusterSaysSo() throws {
        try mount()
        for command in [["status", mnt!, "--cluster"], ["watch", mnt!, "--cluster"], ["status", mnt!, "--cluster", "--json"]] {
            let r = coordfs(arguments: command)
            XCTAssertEqual(r.status, 66, "\(command): \(r)")
            XCTAssertTrue(r.stderr.contains("is not a node of a cluster") && r.stderr.contains("-o cluster="), "\(r)")
            XCTAssertTrue(r.stdout.isEmpty, "\(r)")
        }
        unmount()
    }

    func testEtcdsPasswordIsInNoOutputAndNoLog() throws {
        let password = "pw-\(UInt64.random(in: 1...UInt64.max))"
        try etcd.enableAuth(rootPassword: password)
        let file = root + "/etcd-password"
        FileManager.default.createFile(atPath: file, contents: Data((password + "\n").utf8), attributes: [.posixPermissions: 0o600])
        FileManager.default.createFile(atPath: backing + "/doc.txt", contents: Data("one\n".utf8))
        let auth = ["cluster_user=root", "cluster_password_file=\(file)"]
        try mountNodes(auth)
        let watch = try startCoordfs(["watch", mnt, "--cluster", "--json"])
        let presenter = try present("doc.txt", on: mnt)
        XCTAssertEqual(sh("echo two > '\(mntB!)/doc.txt'").status, 0)
        XCTAssertTrue(waitUntil(10) { presenter.lines.contains { $0.hasPrefix("notification didChange") } }, presenter.stdout)
        var outputs: [String] = [watch.stdout, watch.stderr]
        for m in [mnt!, mntB!] {
            for args in [["status", m, "--cluster"], ["status", m, "--cluster", "--json"], ["status", m], ["log", m, "--json"], ["log", m]] {
                let r = coordfs(arguments: args)
                XCTAssertEqual(r.status, 0, "\(args): \(r)")
                outputs += [r.stdout, r.stderr]
            }
        }
        XCTAssertTrue(outputs.joined().contains("\"node\":\"a\""), "the status was shown")
        presenter.stop()
        watch.stop()
        XCTAssertEqual(coordfs("unmount", mntB).status, 0)
        unmount()
        for node in ["a", "b"] {
            let log = try String(contentsOfFile: nodeState(node) + "/daemon.log", encoding: .utf8)
            XCTAssertTrue(log.contains("node \(node) of cluster"), log)
            outputs.append(log)
            // The event log's files too, as bytes.
            let logFolder = nodeState(node) + "/log"
            for f in (try? FileManager.default.contentsOfDirectory(atPath: logFolder)) ?? [] {
                if let d = FileManager.default.contents(atPath: logFolder + "/" + f) { outputs.append(String(decoding: d, as: UTF8.self)) }
            }
        }
        for (i, text) in outputs.enumerated() {
            XCTAssertFalse(text.contains(password), "the password appears in output \(i): \(text.prefix(500))")
        }
    }
}
