import EtcdTestSupport
import Foundation
import Glibc
import XCTest

/// "Every save one change" across nodes (docs/cluster.md, "Every save one change"): two nodes over
/// one backing folder of this host, a real etcd, and the backing watcher ON on both, so each node
/// sees the other's writes in its watcher as well as in the other's change record. A presenter on
/// each node; every save (through either node, in place, by rename, by `cp`, by Python, and one
/// made in the backing folder beside both mounts) is told to each presenter exactly once (one
/// `didChange`, one store `documentChanged`), and each node logs exactly one `didChange` record. Exact counts after a settle time, so an extra
/// tell arriving late fails the test. Before the fix, a save through b was told to a's presenter
/// two or three times (b's record, then a's watcher seeing the same write).
final class ClusterEverySaveOnceTests: ClusterCLITestCase {
    override func clusterOptions(_ node: String, _ extra: [String] = []) -> [String] {
        super.clusterOptions(node, extra).map { $0 == "backing_watcher=off" ? "backing_watcher=on" : $0 }
    }

    /// The presenter's `didChange` notifications, and the store's `documentChanged` ones.
    private func told(_ presenter: Child) -> Int {
        presenter.lines.filter { $0.hasPrefix("notification didChange doc.txt") }.count
    }

    private func storeTold(_ presenter: Child) -> Int {
        presenter.lines.filter { $0.hasPrefix("notification documentChanged doc.txt") }.count
    }

    /// The node's `didChange` records of doc.txt (`coordfs log --kind didChange`).
    private func logged(_ mountpoint: String) -> Int {
        let r = coordfs("log", mountpoint, "--kind", "didChange", "--json")
        XCTAssertEqual(r.status, 0, "\(r)")
        return r.lines.filter { $0.contains("\"/doc.txt\"") }.count
    }

    func testEverySaveThroughEitherNodeOrBesideBothIsToldOnceToEachPresenter() throws {
        FileManager.default.createFile(atPath: backing + "/doc.txt", contents: Data("one\n".utf8))
        FileManager.default.createFile(atPath: root + "/src.txt", contents: Data("copied\n".utf8))
        try mountNodes()
        let onA = try present("doc.txt", on: mnt)
        let onB = try present("doc.txt", on: mntB)
        defer { _ = onA.stop(); _ = onB.stop() }
        XCTAssertTrue(waitUntilKnown(presenters: 1, of: "a", through: mntB) && waitUntilKnown(presenters: 1, of: "b", through: mnt), "both presenters in etcd and known to the other node")

        let a = mnt!, b = mntB!
        let saves: [(String, String)] = [
            ("echo > through b", "echo two > '\(b)/doc.txt'"),
            ("sed -i through b", "sed -i 's/two/three/' '\(b)/doc.txt'"),
            ("cp through b", "cp '\(root!)/src.txt' '\(b)/doc.txt'"),
            ("python open('w') through b", "python3 -c \"f = open('\(b)/doc.txt', 'w'); f.write('py\\n'); f.close()\""),
            ("echo > beside both mounts", "echo beside > '\(backing!)/doc.txt'"),
            ("echo > through a", "echo four > '\(a)/doc.txt'"),
            ("sed -i through a", "sed -i 's/four/five/' '\(a)/doc.txt'"),
            ("sed -i beside both mounts", "sed -i 's/five/six/' '\(backing!)/doc.txt'"),
        ]
        for (what, command) in saves {
            let before = (a: told(onA), b: told(onB)), store = (a: storeTold(onA), b: storeTold(onB))
            let records = (a: logged(a), b: logged(b))
            let r = sh(command)
            XCTAssertEqual(r.status, 0, "\(what): \(r)")
            XCTAssertTrue(waitUntil(10) { told(onA) > before.a && told(onB) > before.b }, "\(what): not told: \(onA.stdout) \(onB.stdout)")
            // Settle: the tells are asynchronous (records through etcd, the watchers' events); none may follow.
            usleep(2_000_000)
            XCTAssertEqual(told(onA) - before.a, 1, "\(what): a's presenter: \(onA.stdout)")
            XCTAssertEqual(told(onB) - before.b, 1, "\(what): b's presenter: \(onB.stdout)")
            XCTAssertEqual(storeTold(onA) - store.a, 1, "\(what): a's documentChanged: \(onA.stdout)")
            XCTAssertEqual(storeTold(onB) - store.b, 1, "\(what): b's documentChanged: \(onB.stdout)")
            // (A rename from a temporary name beside the mounts is logged as the name appearing.)
            guard what != "sed -i beside both mounts" else { continue }
            XCTAssertEqual(logged(a) - records.a, 1, "\(what): a's didChange records")
            XCTAssertEqual(logged(b) - records.b, 1, "\(what): b's didChange records")
        }
        XCTAssertEqual(FileOps.get(a + "/doc.txt"), "six\n")
        XCTAssertEqual(FileOps.get(b + "/doc.txt"), "six\n")
        XCTAssertEqual(onA.stop(), 0)
        XCTAssertEqual(onB.stop(), 0)
        XCTAssertEqual(coordfs("unmount", mntB).status, 0)
        unmount()
    }
}
