import Foundation
import XCTest

/// A file kept open through one node and a write through the other (docs/cluster.md, "Open files
/// elsewhere"): two real `coordfs mount` nodes over one backing folder and a real etcd, as two
/// hosts over one shared folder.
final class ClusterOpenFileCLITests: ClusterCLITestCase {
    /// A shell keeping `relative` open for reading and writing through node a (as an office suite
    /// keeps the document it has loaded), once a holds a right for it in etcd.
    private func keepOpenOnA(_ relative: String) throws -> Child {
        let ready = root + "/ready"
        unlink(ready)
        let holder = try start("/bin/sh", ["-c", "exec 3<>'\(mnt!)/\(relative)' && : > '\(ready)' && exec sleep 600"])
        guard waitUntil(30, { access(ready, F_OK) == 0 || holder.wait(timeout: 0) != nil }), access(ready, F_OK) == 0 else {
            throw CLIError("the shell did not open \(relative) through a: \(holder.stderr)")
        }
        XCTAssertTrue(waitUntil(10) { etcdKeys("h").contains { $0.contains("\0a\0") } }, "a holds a right for the open file: \(etcdKeys("h"))")
        return holder
    }

    /// The lines of node `node`'s daemon log that say an access went ahead past another node's right.
    private func wentAhead(on node: String) -> [String] {
        ((try? String(contentsOfFile: nodeState(node) + "/daemon.log", encoding: .utf8)) ?? "")
            .split(separator: "\n").map(String.init).filter { $0.contains("went ahead without exclusion past node") }
    }

    /// `cp` through b over a document a program keeps open through a waits `write_wait`, then goes
    /// ahead as it would on one host (before: EBUSY, "cp: cannot create regular file ...: Device or
    /// resource busy", as if an explicit coordinated write held it). The next `cp` waits again.
    func testACopyOverAFileAnotherNodeKeepsOpenGoesAheadAtItsDeadline() throws {
        FileOps.put(backing + "/doc.txt", "old\n")
        FileOps.put(root + "/new.txt", "new\n")
        FileOps.put(root + "/newer.txt", "newer\n")
        try mountNodes(["write_wait=2"])
        let holder = try keepOpenOnA("doc.txt")
        defer { _ = holder.stop(SIGKILL) }

        for (round, source) in ["new.txt", "newer.txt"].enumerated() {
            let started = Date()
            let r = sh("cp '\(root!)/\(source)' '\(mntB!)/doc.txt'", timeout: 30)
            let waited = Date().timeIntervalSince(started)
            XCTAssertEqual(r.status, 0, "round \(round): cp through b past the file a keeps open: \(r)")
            XCTAssertGreaterThan(waited, 1.5, "round \(round): waited for write_wait (2 s) as on one host")
            XCTAssertEqual(FileOps.get(backing + "/doc.txt"), FileOps.get(root + "/" + source), "round \(round): the copy is in the backing folder")
        }
        XCTAssertTrue(waitUntil(10) { FileOps.get(mnt + "/doc.txt") == "newer\n" }, "a shows b's last copy")
        XCTAssertEqual(wentAhead(on: "b").count, 2, "each copy went ahead past a's right, and said so")
        XCTAssertNil(holder.wait(timeout: 0), "the program on a still holds the document open")

        _ = holder.stop(SIGKILL)
        XCTAssertEqual(coordfs("unmount", mntB).status, 0)
        unmount()
    }

    /// An explicit coordinated write through a (`coordfs coordinate --write`) still makes the same
    /// `cp` through b fail with EBUSY at its deadline, and leaves the document as it was.
    func testACopyUnderAnExplicitWriteOnAnotherNodeStillFails() throws {
        FileOps.put(backing + "/doc.txt", "old\n")
        FileOps.put(root + "/new.txt", "new\n")
        try mountNodes(["write_wait=2"])
        let hold = try startCoordfs(["coordinate", "--write", mnt + "/doc.txt", "--", "sleep", "600"])
        defer { _ = hold.stop(SIGKILL) }
        XCTAssertTrue(waitUntil(30) { etcdKeys("h").contains { $0.contains("\0a\0") } }, "a holds a right for the explicit write: \(etcdKeys("h"))")

        let r = sh("cp '\(root!)/new.txt' '\(mntB!)/doc.txt'", timeout: 30)
        XCTAssertNotEqual(r.status, 0, "cp through b went ahead past an explicit write on a: \(r)")
        XCTAssertTrue(r.stderr.contains("Device or resource busy"), r.stderr)
        XCTAssertEqual(FileOps.get(backing + "/doc.txt"), "old\n")
        XCTAssertEqual(wentAhead(on: "b"), [])

        _ = hold.stop(SIGKILL)
        XCTAssertEqual(coordfs("unmount", mntB).status, 0)
        unmount()
    }
}
