import XCTest
import Foundation
import Glibc
@testable import CoordFS
@testable import Cluster
import ClusterKV
import Coordination
import EtcdTestSupport

/// A moved folder's presenters follow it across nodes (issue 19, item 1: "a moved document's
/// presenters follow it"), with many of them: node b presents every document of a folder, node a
/// renames the folder through its mount, over a real etcd, the backing watcher off on both.
final class ClusterMoveTests: TwoNodeEtcdMountTestCase {
    static let presenters = 200

    override func configure(_ options: inout MountOptions) {
        super.configure(&options)
        options.backingWatcher = false
        options.cluster.prefix = "movetest"
    }

    /// Node b's presenters as `node` knows them.
    func presentersOfB(on node: Daemon) -> [ItemPath] {
        node.cluster?.status().nodes.first { $0.name == "b" }?.presenters ?? []
    }

    /// Right after the rename returns, node a already knows node b's presenters at their new
    /// paths, so a write through node a to a moved document asks its presenter on node b first
    /// (after that presenter heard of the move) and tells it after. Before, every node kept b's
    /// presenters at their old paths until node b had put their keys again, and the write went
    /// through without asking anyone. Then every presenter hears it moved, and node b's keys in
    /// etcd and every node's table have the new paths, each key put once.
    func testPresentersOfAMovedFolderAreAtTheirNewPathsOnEveryNodeAtOnce() async throws {
        let n = Self.presenters
        mkdir(backing + "/docs", 0o755)
        for i in 0..<n { try write("docs/d\(i).txt", "\(i)\n") }
        var presenters: [RecordingPresenter] = []
        for i in 0..<n {
            let p = RecordingPresenter(path: try ItemPath("docs/d\(i).txt"), behaviour: .init())
            _ = try daemonB.coordinator.addFilePresenter(p)
            presenters.append(p)
        }
        XCTAssertTrue(waitUntil(30) { presentersOfB(on: daemon).count == n }, "node a knows \(presentersOfB(on: daemon).count) of b's \(n) presenters")
        // etcd, through node a's own client.
        let store = try XCTUnwrap(daemon.cluster?.store)
        let keysOfB = Array("movetest/p/b/".utf8)
        let registered = try await store.range(keysOfB, prefix: true).values
        XCTAssertEqual(registered.map(\.version), Array(repeating: 1, count: n))

        let started = Date()
        XCTAssertEqual(rename(mnt + "/docs", mnt + "/moved"), 0, "rename through node a: errno \(errno)")
        let renamed = Date().timeIntervalSince(started)
        let onA = presentersOfB(on: daemon)
        XCTAssertEqual(onA.filter { $0.string.hasPrefix("moved/") }.count, n,
                       "node a still has b's presenters at \(Set(onA.map { $0.components.first ?? "" })) right after its rename")

        // A write through node a to a moved document, at once.
        let fd = open(mnt + "/moved/d7.txt", O_WRONLY | O_TRUNC)
        XCTAssertGreaterThanOrEqual(fd, 0, "open: errno \(errno)")
        if fd >= 0 {
            XCTAssertEqual(Glibc.write(fd, "new\n", 4), 4)
            close(fd)
        }
        let log = presenters[7].waitUntil(timeout: 10) { $0.contains("didMove moved/d7.txt") && $0.contains("didChange") }
        let moved = try XCTUnwrap(log.firstIndex(of: "didMove moved/d7.txt"), "\(log)")
        // After it heard it moved (and the move's reacquire), asked before the write, told after.
        let after = Array(log[(moved + 1)...])
        let asked = after.firstIndex(of: "relinquishToWriter")
        XCTAssertNotNil(asked, "node b's presenter was not asked before node a's write to its moved document: \(log)")
        XCTAssertTrue(asked.map { after[$0...].contains("didChange") } ?? false, "\(log)")
        XCTAssertEqual(try read("moved/d7.txt"), "new\n")

        // Every presenter told, b's keys in etcd and b's presenters on every node at the new paths.
        XCTAssertTrue(waitUntil(30) { presenters.enumerated().allSatisfy { $0.element.log.contains("didMove moved/d\($0.offset).txt") } },
                      "\(presenters.filter { p in !p.log.contains { $0.hasPrefix("didMove") } }.count) presenters never told they moved")
        var inEtcd: [KeyValue] = []
        let deadline = Date().addingTimeInterval(30)
        repeat {
            inEtcd = try await store.range(keysOfB, prefix: true).values
            if inEtcd.count == n && inEtcd.allSatisfy({ Wire.decode(PresenterValue.self, $0.value)?.path.path?.components.first == "moved" }) { break }
            try await Task.sleep(for: .milliseconds(20))
        } while Date() < deadline
        XCTAssertEqual(inEtcd.filter { Wire.decode(PresenterValue.self, $0.value)?.path.path?.components.first == "moved" }.count, n)
        for node in [daemon!, daemonB!] {
            XCTAssertEqual(presentersOfB(on: node).filter { $0.string.hasPrefix("moved/") }.count, n, "node \(node.cluster?.name ?? "?")")
        }
        // Each of b's keys was put once for the move (its second version), in a few transactions.
        XCTAssertEqual(Set(inEtcd.map(\.version)), [2], "b's keys put \(Set(inEtcd.map(\.version))) times in all")
        let revisions = Set(inEtcd.map(\.modRevision))
        XCTAssertLessThanOrEqual(revisions.count, 2 * (n / 127 + 1), "b's \(n) keys took \(revisions.count) transactions")
        print("\(n) presenters on node b, their folder renamed through node a: rename(2) took \(Int(renamed * 1000)) ms; b's keys put again in \(revisions.count) etcd transactions")
    }
}
