import XCTest
import Foundation
import Glibc
@testable import CoordFS
import Cluster
import ClusterKV
import Coordination

/// Coherence across nodes (issue 19, item 4) where the node that cached an item never held a right
/// on it: names, attributes and "no such name" come from lookups and getattrs, which take no right
/// (only opens, creates, writes, renames and deletions are coordinated), so a writer cannot tell from
/// the rights in etcd which nodes have something cached. Two daemons of one cluster in this process
/// over one backing folder and one in-memory etcd, the backing watcher off on both (as on network
/// storage) and every kernel cache 60 s long: each check first shows that node B's kernel keeps what
/// it cached (a change made beside the mounts stays unseen through B), then that a change through
/// node A's mount is seen through B, which only A's change record can have done. A writer that sent
/// records only for items another node holds or held a right on fails every check. No presenter of
/// B is concerned, so A's records wait for `cluster_unpresented_interval` (3 s here, to make it
/// plain): what B's kernel cached without a right (a stat, a lookup) shows the change within that
/// bound, while anything coordinated on B (an open, which takes a right and so recalls A's) sees it
/// at once, its caches dropped before its access goes on.
final class ClusterCoherenceTests: TwoNodeClusterMountTestCase {
    /// Far longer than any check waits: a cache that is not dropped outlives the test.
    static let cacheSeconds = 60.0
    /// `cluster_unpresented_interval` on both nodes.
    static let unpresented = 3.0
    /// How long a change through A may take to show through B's caches held without a right: the
    /// bound, and the record's way through etcd on a loaded machine.
    static let shownWithin = unpresented + 5.0

    override func configure(_ options: inout MountOptions) {
        super.configure(&options)
        options.backingWatcher = false
        options.attributeTimeout = Self.cacheSeconds
        options.entryTimeout = Self.cacheSeconds
        options.negativeTimeout = Self.cacheSeconds
        options.cluster.unpresentedRecordInterval = Self.unpresented
    }

    override func setUpWithError() throws {
        try super.setUpWithError()
        // Each node knows the other.
        let deadline = Date().addingTimeInterval(5)
        while Date() < deadline, daemon.cluster?.status().nodes.map(\.name) != ["a", "b"]
                || daemonB.cluster?.status().nodes.map(\.name) != ["a", "b"] {
            usleep(10_000)
        }
    }

    /// The size `path` has through `mount` (nil: no such name).
    func size(_ path: String, on mount: String) -> Int? {
        var st = stat()
        return stat(mount + "/" + path, &st) == 0 ? Int(st.st_size) : nil
    }

    func throughA(_ path: String, _ text: String) throws {
        try text.write(toFile: mnt + "/" + path, atomically: false, encoding: .utf8)
    }

    /// Whether `predicate` holds within `seconds`.
    func soon(_ seconds: Double = ClusterCoherenceTests.shownWithin, _ predicate: () -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if predicate() { return true }
            usleep(20_000)
        }
        return predicate()
    }

    /// A sends a record now (its first goes at once, no batch before it), so that the next one
    /// waits for the unpresented interval.
    func aRecordWasJustSent() throws {
        try throughA("first.txt", "1")
        XCTAssertTrue(soon { self.size("first.txt", on: self.mntB) == 1 })
    }

    /// B holds no right (lookups and getattrs take none): what it caches, no right tells of.
    func assertBHoldsNoRight(file: StaticString = #filePath, line: UInt = #line) {
        let holds = daemonB.cluster?.status().nodes.first { $0.name == "b" }?.holds ?? []
        XCTAssertEqual(holds.count, 0, "node b holds \(holds)", file: file, line: line)
    }

    func testAttributesCachedByALookupAreDroppedWhenAnotherNodeWrites() throws {
        try write("f.txt", "abc")
        XCTAssertEqual(size("f.txt", on: mntB), 3)
        assertBHoldsNoRight()
        // Changed beside the mounts: B's kernel keeps the size it cached.
        try write("f.txt", "abcd")
        usleep(300_000)
        XCTAssertEqual(size("f.txt", on: mntB), 3, "node b's kernel did not cache attributes: the test proves nothing")
        try throughA("f.txt", "abcdef")
        XCTAssertTrue(soon { size("f.txt", on: mntB) == 6 }, "node b still shows \(size("f.txt", on: mntB) ?? -1) bytes after node a wrote 6")
    }

    func testANameCachedAsMissingShowsWhenAnotherNodeCreatesIt() throws {
        XCTAssertNil(size("new.txt", on: mntB))
        assertBHoldsNoRight()
        try write("new.txt", "beside")
        usleep(300_000)
        XCTAssertNil(size("new.txt", on: mntB), "node b's kernel did not cache the missing name: the test proves nothing")
        try FileManager.default.removeItem(atPath: backing + "/new.txt")
        try throughA("new.txt", "made on a")
        XCTAssertTrue(soon { size("new.txt", on: mntB) == 9 }, "node b does not see the file node a created")
    }

    func testANameCachedByALookupGoesWhenAnotherNodeDeletesOrMovesIt() throws {
        try write("gone.txt", "g")
        try write("moved.txt", "mm")
        XCTAssertEqual(size("gone.txt", on: mntB), 1)
        XCTAssertEqual(size("moved.txt", on: mntB), 2)
        assertBHoldsNoRight()
        try FileManager.default.removeItem(atPath: mnt + "/gone.txt")
        try FileManager.default.moveItem(atPath: mnt + "/moved.txt", toPath: mnt + "/there.txt")
        XCTAssertTrue(soon { size("gone.txt", on: mntB) == nil }, "node b still shows the file node a deleted")
        XCTAssertTrue(soon { size("moved.txt", on: mntB) == nil && size("there.txt", on: mntB) == 2 },
                      "node b does not show node a's move")
    }

    /// Pages come only through an open, which is coordinated: B's read right after A's write
    /// recalls A's right, which A gives back only with the record of its write, so B reads the new
    /// bytes at once (no waiting for the unpresented interval).
    func testPagesReadOnOneNodeAreNotServedAfterAnotherNodeWritesTheSameSize() throws {
        try write("page.txt", "aaaa")
        XCTAssertEqual(try String(contentsOfFile: mntB + "/page.txt", encoding: .utf8), "aaaa")
        try aRecordWasJustSent()
        try throughA("page.txt", "bbbb")
        XCTAssertEqual(try String(contentsOfFile: mntB + "/page.txt", encoding: .utf8), "bbbb",
                       "node b served its cached pages after node a's write")
    }

    /// B cached a size with no right; A writes. B's open of the file (coordinated: it recalls A's
    /// right, which goes with A's record) sees the new size through the open at once, though A's
    /// record would have waited up to the unpresented interval, and B's plain stat shows it within it.
    func testACoordinatedOpenOnAnotherNodeSeesAChangeAtOnce() throws {
        try write("g.txt", "abc")
        XCTAssertEqual(size("g.txt", on: mntB), 3)
        assertBHoldsNoRight()
        try aRecordWasJustSent()
        let written = Date()
        try throughA("g.txt", "abcdef")
        if Date().timeIntervalSince(written) < Self.unpresented / 2 {
            XCTAssertEqual(size("g.txt", on: mntB), 3, "node a's record did not wait: the test proves nothing")
        }
        let fd = open(mntB + "/g.txt", O_RDONLY)
        XCTAssertGreaterThanOrEqual(fd, 0, "open through node b: errno \(errno)")
        var st = stat()
        XCTAssertEqual(fstat(fd, &st), 0)
        XCTAssertEqual(st.st_size, 6, "node b's open went on before it dropped the size it cached")
        var bytes = [UInt8](repeating: 0, count: 16)
        XCTAssertEqual(Glibc.read(fd, &bytes, bytes.count), 6)
        close(fd)
        XCTAssertTrue(soon { size("g.txt", on: mntB) == 6 })
    }
}
