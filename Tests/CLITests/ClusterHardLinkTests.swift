import EtcdTestSupport
import Foundation
import Glibc
import XCTest

/// A file with several names (hard links) across the nodes of a cluster: a write through node b
/// to another name of a document a presenter on node a presents is that document's access, as on
/// one host (docs/semantics.md, "Several names for one file"): a's presenter is asked before and
/// told after, and a's store keeps the version it loaded. Two `coordfs mount` nodes over one
/// backing folder, a real etcd, the backing watcher off (`ClusterCLITestCase`).
final class ClusterHardLinkTests: ClusterCLITestCase {
    /// A second name made for a document presented on a (through a's mount, with the presenter
    /// registered before the link; beside the mounts, with another registered after it), then
    /// writes through b's mount to the new names: each presenter asked
    /// (relinquishToWriter of its document's name) before and told (didChange) after, and a keeps
    /// the version each had. Before, b coordinated the write at the new name, which nobody
    /// presents: a's presenters were neither asked nor told, and a kept nothing.
    func testAWriteThroughAnotherNameOnAnotherNodeAsksAndTellsThePresenter() throws {
        FileManager.default.createFile(atPath: backing + "/doc.txt", contents: Data("one\n".utf8))
        FileManager.default.createFile(atPath: backing + "/late.txt", contents: Data("uno\n".utf8))
        try mountNodes()
        let early = try present("doc.txt", on: mnt)
        XCTAssertTrue(waitUntilKnown(presenters: 1, of: "a", through: mntB), "a's presenter in etcd and known to b: \(etcdKeys(""))")
        // The links made through a and beside the mounts: b's kernel never looked the documents'
        // own names up, so b's node of the file has the new name.
        XCTAssertEqual(sh("ln '\(mnt!)/doc.txt' '\(mnt!)/link.txt' && ln '\(backing!)/late.txt' '\(backing!)/late-link.txt'").status, 0)
        let late = try present("late.txt", on: mnt)
        XCTAssertTrue(waitUntilKnown(presenters: 2, of: "a", through: mntB), "a's second presenter in etcd and known to b: \(etcdKeys(""))")

        for (presenter, name, link, text) in [(early, "doc.txt", "link.txt", "two"), (late, "late.txt", "late-link.txt", "dos")] {
            XCTAssertEqual(sh("echo \(text) > '\(mntB!)/\(link)'").status, 0)
            XCTAssertTrue(waitUntil(10) { presenter.lines.contains { $0.hasPrefix("notification didChange \(name)") } },
                          "a's presenter of \(name) not told of b's write through \(link): \(presenter.stdout)")
            let asked = presenter.lines.firstIndex { $0.contains("relinquishToWriter \(name)") }
            let told = presenter.lines.firstIndex { $0.hasPrefix("notification didChange \(name)") }
            XCTAssertNotNil(asked, "a's presenter of \(name) not asked: \(presenter.stdout)")
            if let asked, let told { XCTAssertLessThan(asked, told, presenter.stdout) }
            XCTAssertEqual(FileOps.get(mnt + "/" + name), text + "\n")
            let versions = coordfs("versions", mnt + "/" + name, "--json")
            XCTAssertEqual(versions.status, 0, "\(versions)")
            XCTAssertFalse(versions.lines.isEmpty, "a's store kept no version of \(name): \(versions)")
        }
        for presenter in [early, late] { XCTAssertEqual(presenter.stop(), 0) }
    }
}
