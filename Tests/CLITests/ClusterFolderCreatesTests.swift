import EtcdTestSupport
import Foundation
import Glibc
import XCTest

/// New items inside a folder presented on another node (docs/cluster.md, "Every save one change"):
/// two nodes over one backing folder of this host, a real etcd, `coordfs present` of the folder on
/// node a (and on node b), the backing watcher off (as for nodes on hosts that do not see each
/// other's writes: NFS, SMB) and on. A file made through b (`touch`, `echo >`, `cp`), a folder
/// (`mkdir`), a symbolic and a hard link (`ln -s`, `ln`) and an item moved into the folder (`mv`)
/// reach a's folder presenter exactly once each, as the same thing made through a's own mount
/// does (`subitemDidAppear`, the creator's writes part of it); the same made through a reaches it
/// once too (no echo back from b). The seven are made one after the other through one node; exact
/// counts, item by item, once each was told and after a settle longer than `save_window` and the
/// record intervals, so a tell arriving late fails the test. Before the fix:
/// with the watcher off, a file made through b never reached a's presenter when b presented the
/// folder too (b's record carried no create), and reached it twice when only a did (the create,
/// then the creator's close); with the watcher on, once or twice.
final class ClusterFolderCreatesTests: ClusterCLITestCase {
    private var watcher = false

    override func clusterOptions(_ node: String, _ extra: [String] = []) -> [String] {
        super.clusterOptions(node, extra).map { $0 == "backing_watcher=off" && watcher ? "backing_watcher=on" : $0 }
    }

    private func heard(_ presenter: Child) -> [String] { presenter.lines.filter { $0.hasPrefix("notification ") } }

    func testNewItemsThroughEitherNodeReachAFolderPresenterOnceWithTheWatcherOff() throws {
        try newItemsReachEachFolderPresenterOnce(presentOnB: true)
    }

    func testNewItemsThroughEitherNodeReachAFolderPresenterOnceWithTheWatcherOn() throws {
        watcher = true
        try newItemsReachEachFolderPresenterOnce(presentOnB: true)
    }

    /// Node b presents nothing: its own mount tells nobody, and its record is all a hears.
    func testNewItemsThroughANodeThatPresentsNothingReachTheOtherNodesFolderPresenterOnce() throws {
        try newItemsReachEachFolderPresenterOnce(presentOnB: false)
    }

    func testNewItemsThroughANodeThatPresentsNothingReachTheOtherNodesFolderPresenterOnceWithTheWatcherOn() throws {
        watcher = true
        try newItemsReachEachFolderPresenterOnce(presentOnB: false)
    }

    private func newItemsReachEachFolderPresenterOnce(presentOnB: Bool) throws {
        mkdir(backing + "/dir", 0o755)
        FileManager.default.createFile(atPath: backing + "/src.txt", contents: Data("copied\n".utf8))
        for via in ["a", "b"] {
            FileManager.default.createFile(atPath: backing + "/\(via)-moved", contents: Data("moved\n".utf8))
        }
        FileManager.default.createFile(atPath: root + "/src.txt", contents: Data("copied\n".utf8))
        try mountNodes()
        let onA = try present("dir", on: mnt)
        let onB = presentOnB ? try present("dir", on: mntB) : nil
        defer { _ = onA.stop(); _ = onB?.stop() }
        XCTAssertTrue(waitUntilKnown(presenters: 1, of: "a", through: mntB) && waitUntilKnown(presenters: presentOnB ? 1 : 0, of: "b", through: mnt),
                      "presenters in etcd and known to the other node")

        var seen: [String] = []
        let whats = ["touched", "echoed", "copied", "folder", "symlink", "hardlink", "moved"]
        for (via, m) in [("b", mntB!), ("a", mnt!)] {
            let d = m + "/dir"
            let commands = [
                "touch '\(d)/\(via)-touched'",
                "echo new > '\(d)/\(via)-echoed'",
                "cp '\(root!)/src.txt' '\(d)/\(via)-copied'",
                "mkdir '\(d)/\(via)-folder'",
                "ln -s src.txt '\(d)/\(via)-symlink'",
                "ln '\(m)/src.txt' '\(d)/\(via)-hardlink'",
                "mv '\(m)/\(via)-moved' '\(d)/\(via)-moved'",
            ]
            let names = whats.map { "dir/\(via)-\($0)" }
            let label = "through \(via) (watcher \(watcher ? "on" : "off"))"
            let before = (a: heard(onA).count, b: onB.map { heard($0).count } ?? 0)
            // The seven one after the other, as a person or a script would make them.
            for command in commands {
                let r = sh(command)
                XCTAssertEqual(r.status, 0, "\(label): \(r)")
            }
            let told = { (p: Child?, from: Int) in
                p.map { p in names.allSatisfy { name in self.heard(p).dropFirst(from).contains { $0.contains(name) } } } ?? true
            }
            XCTAssertTrue(waitUntil(20) { told(onA, before.a) && told(onB, before.b) },
                          "\(label): not all told: a: \(heard(onA).dropFirst(before.a)) b: \(onB.map { heard($0).dropFirst(before.b) } ?? [])")
            // Settle past save_window (1 s) and the records' way through etcd: nothing more may come.
            usleep(2_500_000)
            let a = Array(heard(onA).dropFirst(before.a))
            seen.append("\(label): \(a)")
            XCTAssertEqual(a.count, names.count, "\(label): a's folder presenter, one notification per item: \(a)")
            let b = onB.map { Array(heard($0).dropFirst(before.b)) }
            if let b { XCTAssertEqual(b.count, names.count, "\(label): b's folder presenter, one notification per item: \(b)") }
            for name in names {
                XCTAssertEqual(a.filter { $0.contains(name) }.count, 1, "\(name) \(label): a's folder presenter: \(a)")
                if let b { XCTAssertEqual(b.filter { $0.contains(name) }.count, 1, "\(name) \(label): b's folder presenter: \(b)") }
            }
        }
        print(seen.joined(separator: "\n"))
        // The presenter on a hears through b what it hears through its own mount, item by item.
        let kind = { (line: String) in line.split(separator: " ").prefix(2).joined(separator: " ") }
        for what in whats {
            let throughA = heard(onA).filter { $0.contains("dir/a-\(what)") }.map(kind)
            let throughB = heard(onA).filter { $0.contains("dir/b-\(what)") }.map(kind)
            XCTAssertEqual(throughB, throughA, "\(what): a's presenter: \(onA.stdout)")
        }
        XCTAssertEqual(onA.stop(), 0)
        if let onB { XCTAssertEqual(onB.stop(), 0) }
        XCTAssertEqual(coordfs("unmount", mntB).status, 0)
        unmount()
    }
}
