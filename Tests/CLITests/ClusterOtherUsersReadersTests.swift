import EtcdTestSupport
import Foundation
import Glibc
import XCTest

/// The rule of `OtherUsersReadersTests` across nodes (docs/cluster.md, "Other users' readers"): two
/// `coordfs mount` nodes over one backing folder, `allow_other`, a real etcd, `write_wait=60`. A user
/// who may read a document but not write it and keeps it open through node b (`nobody`'s reader of
/// root's 0644 document) does not hold up root's saves through node a; a reader who could make the
/// save (the document group-writable for its group, or the saver's own user) still does. Before,
/// the right node b holds for the reader in etcd carried no user, so every save of root's on node a
/// waited `write_wait` for as long as nobody kept the document open.
final class ClusterOtherUsersReadersTests: ClusterCLITestCase {
    static let asNobody = ["/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"]

    /// Both nodes, as a shared mount is: other users may use it; a held save would wait 60 s.
    private func mountBoth() throws {
        chmod(root, 0o755)  // nobody reaches the mounts
        try mountNodes(["allow_other", "write_wait=60"])
    }

    /// nobody's reader of `relative` through node b, once it holds it open (and its right is in etcd).
    private func nobodyKeepsOpenOnB(_ relative: String) throws -> Child {
        let marks = root + "/marks"
        mkdir(marks, 0o777)
        chmod(marks, 0o777)
        unlink(marks + "/ready")
        let script = "import time; f = open('\(mntB!)/\(relative)'); open('\(marks)/ready', 'w'); time.sleep(3600)"
        let reader = try start(Self.asNobody[0], Array(Self.asNobody.dropFirst()) + ["/usr/bin/python3", "-c", script])
        guard waitUntil(30, { access(marks + "/ready", F_OK) == 0 || reader.wait(timeout: 0) != nil }),
              access(marks + "/ready", F_OK) == 0 else {
            throw CLIError("nobody's reader did not open \(relative) through b: \(reader.stderr)")
        }
        XCTAssertTrue(waitUntil(10) { etcdKeys("h").contains { $0.contains("\0b\0") } }, "b holds a right for the reader: \(etcdKeys("h"))")
        return reader
    }

    /// The lines of node a's daemon log that say an access went ahead past another node's right.
    private func wentAheadOnA() -> [String] {
        ((try? String(contentsOfFile: nodeState("a") + "/daemon.log", encoding: .utf8)) ?? "")
            .split(separator: "\n").map(String.init).filter { $0.contains("went ahead") }
    }

    func testAReaderOnAnotherNodeWhoCouldNotWriteDoesNotHoldUpRootsSaves() throws {
        FileManager.default.createFile(atPath: backing + "/doc.txt", contents: Data("old\n".utf8), attributes: [.posixPermissions: 0o644])
        try mountBoth()
        let reader = try nobodyKeepsOpenOnB("doc.txt")

        // Root's saves through a, in place and by rename over, each done long before a held one
        // could be (write_wait=60: the shell is killed after 40 s).
        let saves = [
            ("echo >", "echo new > '\(mnt!)/doc.txt'"),
            ("sed -i", "sed -i s/new/newer/ '\(mnt!)/doc.txt'"),
            ("a rename over", "printf 'renamed\\n' > '\(mnt!)/.doc.tmp' && mv '\(mnt!)/.doc.tmp' '\(mnt!)/doc.txt'"),
            ("echo > again", "echo last > '\(mnt!)/doc.txt'"),
        ]
        for (what, command) in saves {
            let r = sh(command, timeout: 40)
            XCTAssertEqual(r.status, 0, "\(what) through a was held up by nobody's reader on b (or failed): \(r)")
        }
        XCTAssertEqual(FileOps.get(backing + "/doc.txt"), "last\n")
        XCTAssertTrue(waitUntil(10) { FileOps.get(mntB + "/doc.txt") == "last\n" }, "b shows root's last save")
        XCTAssertNil(reader.wait(timeout: 0), "nobody still holds the document open through b")
        XCTAssertEqual(wentAheadOnA(), [], "no save went ahead past b's right at its deadline")

        reader.stop(SIGKILL)
        XCTAssertEqual(coordfs("unmount", mntB).status, 0)
        unmount()
    }

    /// A reader who could make the save holds it up as before, until it closes: the document
    /// group-writable for nobody's group (root's save), and the saver's own user (nobody's save).
    func testAReaderOnAnotherNodeWhoCouldWriteStillHoldsUpTheSave() throws {
        let doc = backing + "/doc.txt", own = backing + "/own.txt"
        FileManager.default.createFile(atPath: doc, contents: Data("old\n".utf8), attributes: [.posixPermissions: 0o664])
        chown(doc, 0, 65534)
        FileManager.default.createFile(atPath: own, contents: Data("old\n".utf8), attributes: [.posixPermissions: 0o644])
        chown(own, 65534, 65534)
        try mountBoth()
        for (name, saver) in [("doc.txt", ["/bin/sh"]), ("own.txt", Self.asNobody + ["/bin/sh"])] {
            let reader = try nobodyKeepsOpenOnB(name)
            let save = try start(saver[0], Array(saver.dropFirst()) + ["-c", "echo new > '\(mnt!)/\(name)'"])
            XCTAssertNil(save.wait(timeout: 3), "\(name): the save through a went ahead beside a reader on b who could make it")
            reader.stop(SIGKILL)
            XCTAssertEqual(save.wait(timeout: 40), 0, "\(name): the save went on once the reader closed: \(save.stderr)")
            XCTAssertEqual(FileOps.get(backing + "/" + name), "new\n")
        }
        XCTAssertEqual(wentAheadOnA(), [], "no save went ahead past b's right at its deadline")
        XCTAssertEqual(coordfs("unmount", mntB).status, 0)
        unmount()
    }
}
