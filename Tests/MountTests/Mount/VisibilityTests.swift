// Data written through the mount is in the backing folder when the call returns, and changes
// made directly in the backing folder are seen through the mount.
import Glibc
import XCTest

final class VisibilityTests: MountTestCase {
    override var comparesTreesAtEnd: Bool { false }   // the tests write one side only

    func testWritesThroughTheMountAreInBackingAtOnce() throws {
        try requireMount()
        let fd = Int32(Sys.open(mnt("f"), O_CREAT | O_RDWR).ret)
        XCTAssertGreaterThanOrEqual(fd, 0)
        defer { close(fd) }
        XCTAssertEqual(Sys.lstat(backing("f")).1, .success(), "a file created through the mount is not in backing")
        for i in 0..<20 {
            let chunk = pattern(10_000, seed: UInt8(i))
            XCTAssertEqual(Sys.write(fd, chunk, at: i * 10_000), .success(10_000))
            // Before close, before fsync: the backing file already holds it.
            XCTAssertEqual(Sys.contents(backing("f")).0.map { Array($0[(i * 10_000)...]) }, chunk, "write \(i) is not in backing when write() returned")
        }
        XCTAssertEqual(Sys.call { ftruncate(fd, 5) }, .success())
        XCTAssertEqual(Sys.lstat(backing("f")).0?.size, 5, "ftruncate through the mount is not in backing")
        XCTAssertEqual(Sys.call { mkdir(mnt("d"), 0o700) }, .success())
        XCTAssertEqual(Sys.lstat(backing("d")).0?.perm, 0o700)
        XCTAssertEqual(Sys.call { rename(mnt("f"), mnt("d/g")) }, .success())
        XCTAssertEqual(Sys.lstat(backing("d/g")).0?.size, 5, "rename through the mount is not in backing")
        XCTAssertEqual(Sys.setxattr(mnt("d/g"), "user.k", [7]), .success())
        XCTAssertEqual(Sys.getxattr(backing("d/g"), "user.k").0, [7])
        XCTAssertEqual(Sys.call { unlink(mnt("d/g")) }, .success())
        XCTAssertEqual(Sys.lstat(backing("d/g")).1, .failure(ENOENT), "unlink through the mount is not in backing")
    }

    func testChangesInBackingAreSeenThroughTheMount() throws {
        try requireMount()
        // A file created in backing appears through the mount.
        XCTAssertEqual(Sys.put(backing("b"), Array("first".utf8)), .success())
        XCTAssertEqual(Sys.contents(mnt("b")).0, Array("first".utf8), "a file created in backing is not readable through the mount")
        XCTAssertTrue(Sys.readdir(mnt.root).0.map(\.name).contains("b"))
        // Rewritten in place with a different size: a fresh open through the mount sees it all.
        XCTAssertEqual(Sys.put(backing("b"), Array("second, longer".utf8)), .success())
        XCTAssertEqual(String(decoding: Sys.contents(mnt("b")).0 ?? [], as: UTF8.self), "second, longer",
                       "a file rewritten in backing reads stale or short through the mount")
        XCTAssertEqual(Sys.lstat(mnt("b")).0?.size, 14, "stat through the mount reports a stale size after a change in backing")
        // Removed in backing: gone through the mount.
        XCTAssertEqual(Sys.call { unlink(backing("b")) }, .success())
        XCTAssertEqual(Sys.lstat(mnt("b")).1, .failure(ENOENT), "a file removed in backing is still found through the mount")
        // Replaced in backing by rename (how editors save): the new content shows.
        XCTAssertEqual(Sys.put(backing("c"), Array("old".utf8)), .success())
        XCTAssertEqual(Sys.contents(mnt("c")).0, Array("old".utf8))
        XCTAssertEqual(Sys.put(backing("c.tmp"), Array("new!".utf8)), .success())
        XCTAssertEqual(Sys.call { rename(backing("c.tmp"), backing("c")) }, .success())
        XCTAssertEqual(Sys.contents(mnt("c")).0, Array("new!".utf8), "a file replaced by rename in backing reads the old version through the mount")
    }
}
