import EtcdTestSupport
import Foundation
import Glibc
import XCTest

/// What the document store writes on its own behalf on one node reaches the other nodes as a
/// change through a mount does (docs/cluster.md, "Tells"): two nodes over one backing folder, a
/// real etcd, conflicts on node a resolved there with the CLI as a user would (`coordfs resolve
/// --save`, `--keep-both`, a lost update's `--reload`, `coordfs restore`), and on node b a
/// presenter of each document and one of their folder, b's kernel caching names and attributes
/// for 60 s. Each resolution is told to each of b's presenters exactly once (one `didChange` and
/// one store `documentChanged` for the document, one notification for the folder), and b's mount
/// shows what a wrote at once (its bytes, and the size `stat` gives). Exact counts after a settle
/// time, so a late second tell fails the test. The backing watcher is off (nodes on hosts that do
/// not see each other's writes: NFS, SMB) in `ClusterResolutionTests`, so b learns only from the
/// cluster; on in `ClusterResolutionWithWatcherTests` (nodes over one folder of one host: b's
/// watcher sees a's writes too, and still each is told once). Before the fix the lost update's
/// reload, which writes the version the late save went over back over the file, was made in no
/// coordinated access: no change record carried it, so with the watcher off b's presenters were
/// neither asked nor told and b's mount showed the old size (with it on, b's watcher told it).
class ClusterResolutionTestCase: ClusterCLITestCase {
    static let cacheSeconds = 60

    override func clusterOptions(_ node: String, _ extra: [String] = []) -> [String] {
        super.clusterOptions(node, extra + ["attr_timeout=\(Self.cacheSeconds)", "entry_timeout=\(Self.cacheSeconds)",
                                            "negative_timeout=\(Self.cacheSeconds)"])
    }

    private func notifications(_ presenter: Child) -> [String] { presenter.lines.filter { $0.hasPrefix("notification ") } }

    private func conflicts() -> [[String: Any]] {
        let r = coordfs("conflicts", mnt, "--json")
        XCTAssertEqual(r.status, 0, "\(r)")
        return r.lines.compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
    }

    private func size(_ path: String) -> Int? {
        var st = stat()
        return stat(path, &st) == 0 ? Int(st.st_size) : nil
    }

    func everyResolutionOnOneNodeIsToldOnceToTheOtherNodesPresentersAndShowsThroughItsMount() throws {
        mkdir(backing + "/dir", 0o755)
        for name in ["save", "both", "lost", "restore"] {
            FileManager.default.createFile(atPath: backing + "/dir/\(name).txt", contents: Data("base\n".utf8))
        }
        try mountNodes()
        let a = mnt!, b = mntB!
        // a: presenters with unsaved changes (their conflicts are a's), and one whose store keeps
        // restore.txt's versions.
        let unsavedSave = try startCoordfs(["present", a + "/dir/save.txt", "--unsaved"])
        let unsavedBoth = try startCoordfs(["present", a + "/dir/both.txt", "--unsaved"])
        let keeper = try present("dir/restore.txt", on: a)
        // b: a presenter of each document and one of the folder.
        let onB = try ["save", "both", "lost", "restore"].map { ($0, try present("dir/\($0).txt", on: b)) }
        let folderOnB = try present("dir", on: b)
        let all = [unsavedSave, unsavedBoth, keeper, folderOnB] + onB.map(\.1)
        defer { for p in all { _ = p.stop() } }
        XCTAssertTrue(waitUntil(10) { [unsavedSave, unsavedBoth].allSatisfy { $0.lines.contains { $0.hasPrefix("registered") } } })
        XCTAssertTrue(waitUntilKnown(presenters: 3, of: "a", through: mntB) && waitUntilKnown(presenters: 5, of: "b", through: mnt),
                      "presenters in etcd and known to the other node: \(etcdKeys("p/"))")

        // The conflicts on a: b writes save.txt and both.txt under a's unsaved presenters; a
        // Python process on a reads lost.txt, sed changes it, and the Python process writes back
        // what it had read (a lost update, a's: its node holds the reader).
        XCTAssertEqual(sh("printf 'theirs\\n' > '\(b)/dir/save.txt' && printf 'theirs\\n' > '\(b)/dir/both.txt'").status, 0)
        let script = """
        import subprocess
        data = open("lost.txt").read()
        subprocess.run(["sed", "-i", "s/base/theirs, the change the late save went over/", "lost.txt"], check=True)
        with open("lost.txt", "w") as f: f.write(data.replace("base", "late"))
        """
        let late = sh("cd '\(a)/dir' && python3 -c '\(script)'")
        XCTAssertEqual(late.status, 0, "\(late)")
        // a's store keeps restore.txt's base before a's write over it.
        XCTAssertEqual(sh("printf 'written over, longer\\n' > '\(a)/dir/restore.txt'").status, 0)
        XCTAssertTrue(waitUntil(10) { conflicts().count == 3 }, "a's conflicts: \(conflicts())")
        let versions = coordfs("versions", a + "/dir/restore.txt", "--json").lines
            .compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        let base = try XCTUnwrap(versions.last.flatMap { ($0["version"] as? NSNumber)?.int64Value }, "restore.txt's versions: \(versions)")

        let mine = root + "/mine.txt"
        try "mine, written by the resolution\n".write(toFile: mine, atomically: false, encoding: .utf8)
        // Settle what the writes above told; then b's kernel caches every name and size in the folder.
        usleep(2_000_000)
        XCTAssertEqual(sh("ls -l '\(b)/dir' > /dev/null && cat '\(b)'/dir/*.txt > /dev/null").status, 0)

        let resolutions: [(what: String, file: String, command: [String])] = [
            ("save over", "save", ["resolve", a + "/dir/save.txt", "--save", "--from", mine]),
            ("keep both", "both", ["resolve", a + "/dir/both.txt", "--keep-both", "--from", mine]),
            ("a lost update's reload", "lost", ["resolve", a + "/dir/lost.txt", "--reload"]),
            ("a version restored", "restore", ["restore", a + "/dir/restore.txt", "--version", String(base)]),
        ]
        for (what, file, command) in resolutions {
            let presenter = try XCTUnwrap(onB.first { $0.0 == file }?.1)
            let before = (document: notifications(presenter).count, folder: notifications(folderOnB).count)
            let r = coordfs(arguments: command)
            XCTAssertEqual(r.status, 0, "\(what): \(r)")
            let written: String
            if file == "both" {
                let copies = try FileManager.default.contentsOfDirectory(atPath: backing + "/dir").filter { $0.hasPrefix("both (conflict ") }
                XCTAssertEqual(copies.count, 1, "\(what): \(copies)")
                written = "dir/" + (copies.first ?? "?")
            } else {
                written = "dir/\(file).txt"
            }
            XCTAssertTrue(waitUntil(10) { notifications(folderOnB).count > before.folder }, "\(what): b's folder presenter not told: \(folderOnB.stdout)")
            // Settle: the tells are asynchronous (a's record through etcd, b's watcher); none may follow.
            usleep(2_000_000)
            let document = Array(notifications(presenter).dropFirst(before.document))
            let folder = Array(notifications(folderOnB).dropFirst(before.folder))
            if file == "both" {
                // The conflict copy appeared beside the document, which stays as it was.
                XCTAssertEqual(document, [], "\(what): b's presenter of both.txt")
                XCTAssertEqual(folder.count, 1, "\(what): b's folder presenter: \(folder)")
                XCTAssertTrue(folder.first?.hasPrefix("notification subitemDidAppear dir subitem=\(written)") == true, "\(what): \(folder)")
            } else {
                XCTAssertEqual(document.filter { $0.hasPrefix("notification didChange \(written)") }.count, 1, "\(what): b's presenter: \(document)")
                XCTAssertEqual(document.filter { $0.hasPrefix("notification documentChanged \(written) kind=change action=reload") }.count, 1,
                               "\(what): b's presenter: \(document)")
                XCTAssertEqual(document.count, 2, "\(what): b's presenter: \(document)")
                XCTAssertEqual(folder.count, 1, "\(what): b's folder presenter: \(folder)")
                XCTAssertTrue(folder.first?.contains(written) == true, "\(what): b's folder presenter: \(folder)")
            }
            // b's mount shows it, although b's kernel cached the folder's names and the old size for 60 s.
            // (The size first: an open looks a name up again when its cached file was replaced.)
            let expected = try String(contentsOfFile: backing + "/" + written, encoding: .utf8)
            XCTAssertEqual(size(b + "/" + written), expected.utf8.count, "\(what): the size through b")
            XCTAssertEqual(FileOps.get(b + "/" + written), expected, "\(what): through b")
            XCTAssertTrue(((try? FileManager.default.contentsOfDirectory(atPath: b + "/dir")) ?? []).contains(String(written.dropFirst(4))),
                          "\(what): listed through b")
        }
        XCTAssertEqual(try String(contentsOfFile: backing + "/dir/save.txt", encoding: .utf8), "mine, written by the resolution\n")
        XCTAssertEqual(try String(contentsOfFile: backing + "/dir/lost.txt", encoding: .utf8), "theirs, the change the late save went over\n")
        XCTAssertEqual(try String(contentsOfFile: backing + "/dir/restore.txt", encoding: .utf8), "base\n")
        XCTAssertEqual(conflicts().count, 0)
        for p in all { XCTAssertEqual(p.stop(), 0) }
        XCTAssertEqual(coordfs("unmount", mntB).status, 0)
        unmount()
    }
}

final class ClusterResolutionTests: ClusterResolutionTestCase {
    func testEveryResolutionOnOneNodeIsToldOnceToTheOtherNodesPresentersAndShowsThroughItsMount() throws {
        try everyResolutionOnOneNodeIsToldOnceToTheOtherNodesPresentersAndShowsThroughItsMount()
    }
}

/// The same with the backing watcher on on both nodes: b's watcher sees a's daemon write the
/// folder, and b's presenters still hear each resolution once.
final class ClusterResolutionWithWatcherTests: ClusterResolutionTestCase {
    override func clusterOptions(_ node: String, _ extra: [String] = []) -> [String] {
        super.clusterOptions(node, extra).map { $0 == "backing_watcher=off" ? "backing_watcher=on" : $0 }
    }

    func testEveryResolutionOnOneNodeIsToldOnceToTheOtherNodesPresentersAndShowsThroughItsMount() throws {
        try everyResolutionOnOneNodeIsToldOnceToTheOtherNodesPresentersAndShowsThroughItsMount()
    }
}
