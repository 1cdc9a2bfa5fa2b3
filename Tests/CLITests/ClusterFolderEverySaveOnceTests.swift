import EtcdTestSupport
import Foundation
import Glibc
import XCTest

/// "Every save one change" for a presenter of a *folder* (docs/cluster.md): two nodes over one
/// backing folder of this host, a real etcd, the backing watcher ON on both, and a `coordfs present`
/// of the folder on each. A write inside the folder does not ask the folder's presenters, so no
/// proxy runs on the other node while it writes, and that node's watcher may read the writes before
/// the writer's change record comes. Every save inside the folder (`echo >`, `sed -i`, `cp`, a
/// delete; through b, through a, beside both mounts) reaches each folder presenter exactly once (one
/// subitem notification) and each node logs exactly one tell of it (didChange, subitemAppeared or
/// didDelete), as a save through that node itself does. Exact counts after a settle time, so an
/// extra tell arriving late fails the test. Before the fix, `cp` and `sed -i` through one node
/// reached the other node's folder presenter twice (its watcher, then the record), and `echo >`
/// through a reached a's own presenter twice (its watcher reading b's daemon let go of a descriptor
/// it kept, after a's write, for a change beside the mounts).
final class ClusterFolderEverySaveOnceTests: ClusterCLITestCase {
    override func clusterOptions(_ node: String, _ extra: [String] = []) -> [String] {
        super.clusterOptions(node, extra).map { $0 == "backing_watcher=off" ? "backing_watcher=on" : $0 }
    }

    /// The folder presenter's notifications.
    private func heard(_ presenter: Child) -> [String] { presenter.lines.filter { $0.hasPrefix("notification ") } }

    /// The node's records of changes told inside the folder (`coordfs log --json`): one per tell.
    private func tells(_ mountpoint: String) -> [String] {
        let r = coordfs("log", mountpoint, "--json")
        XCTAssertEqual(r.status, 0, "\(r)")
        let kinds = ["didChange", "subitemAppeared", "didDelete", "didMove"].map { "\"kind\":\"\($0)\"" }
        return r.lines.filter { line in line.contains("\"/dir/") && kinds.contains { line.contains($0) } }
    }

    func testEverySaveInsideAFolderReachesEachNodesFolderPresenterOnce() throws {
        mkdir(backing + "/dir", 0o755)
        FileManager.default.createFile(atPath: backing + "/dir/doc.txt", contents: Data("one\n".utf8))
        FileManager.default.createFile(atPath: root + "/src.txt", contents: Data("copied\n".utf8))
        try mountNodes()
        let onA = try present("dir", on: mnt)
        let onB = try present("dir", on: mntB)
        defer { _ = onA.stop(); _ = onB.stop() }
        XCTAssertTrue(waitUntilKnown(presenters: 1, of: "a", through: mntB) && waitUntilKnown(presenters: 1, of: "b", through: mnt), "both presenters in etcd and known to the other node")

        var created: [String: (a: Int, b: Int)] = [:]
        for (via, folder) in [("through b", mntB! + "/dir"), ("through a", mnt! + "/dir"), ("beside both mounts", backing! + "/dir")] {
            let saves: [(String, String)] = [
                ("echo >", "echo two > '\(folder)/doc.txt'"),
                ("sed -i", "sed -i 's/two/three/' '\(folder)/doc.txt'"),
                ("cp", "cp '\(root!)/src.txt' '\(folder)/doc.txt'"),
                ("echo > a new file", "echo new > '\(folder)/new.txt'"),
                ("rm", "rm '\(folder)/new.txt'"),
            ]
            for (save, command) in saves {
                let what = "\(save) \(via)"
                let before = (a: heard(onA).count, b: heard(onB).count), logged = (a: tells(mnt).count, b: tells(mntB).count)
                let r = sh(command)
                XCTAssertEqual(r.status, 0, "\(what): \(r)")
                XCTAssertTrue(waitUntil(10) { heard(onA).count > before.a && heard(onB).count > before.b },
                              "\(what): not told: \(onA.stdout) \(onB.stdout)")
                // Settle: the tells are asynchronous (records through etcd, the watchers' events); none may follow.
                usleep(2_000_000)
                let a = Array(heard(onA).dropFirst(before.a)), b = Array(heard(onB).dropFirst(before.b))
                if save == "echo > a new file" {
                    // Its appearance, once it outlived save_window, the writes part of it: the
                    // create's node tells it by its record, the other node's watcher sees it (the
                    // daemon's create, the writer's close): one of the two tells it.
                    created[via] = (a.count, b.count)
                    XCTAssertTrue(a.first?.hasPrefix("notification subitemDidAppear dir subitem=dir/new.txt") == true, "\(what): a's presenter: \(a)")
                    XCTAssertTrue(b.first?.hasPrefix("notification subitemDidAppear dir subitem=dir/new.txt") == true, "\(what): b's presenter: \(b)")
                }
                XCTAssertEqual(a.count, 1, "\(what): a's folder presenter: \(a)")
                XCTAssertEqual(b.count, 1, "\(what): b's folder presenter: \(b)")
                XCTAssertEqual(tells(mnt).count - logged.a, 1, "\(what): a's tells: \(tells(mnt).dropFirst(logged.a))")
                XCTAssertEqual(tells(mntB).count - logged.b, 1, "\(what): b's tells: \(tells(mntB).dropFirst(logged.b))")
            }
        }
        print("a new file, (a, b) heard: \(created)")
        XCTAssertEqual(FileOps.get(mnt + "/dir/doc.txt"), "copied\n")
        XCTAssertEqual(FileOps.get(mntB + "/dir/doc.txt"), "copied\n")
        XCTAssertEqual(onA.stop(), 0)
        XCTAssertEqual(onB.stop(), 0)
        XCTAssertEqual(coordfs("unmount", mntB).status, 0)
        unmount()
    }
}
