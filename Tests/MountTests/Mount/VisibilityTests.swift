import Foundation
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

    /// The daemon watches the backing folder (fanotify) and drops the kernel's caches for what changed
    /// there: a change shows through the mount within milliseconds, far below the cache timeouts
    /// that would otherwise hide it (10 s for what the watcher keeps fresh).
    func testChangesInBackingAreSeenThroughTheMount() throws {
        try requireMount()
        /// Polls for up to 250 ms (the watcher works asynchronously; the cache timeouts are 1 s or more).
        func soon<T: Equatable>(_ expected: T, _ message: String, _ read: () -> T) {
            let deadline = Date().addingTimeInterval(0.25)
            var value = read()
            while value != expected && Date() < deadline { usleep(2_000); value = read() }
            XCTAssertEqual(value, expected, message)
        }
        // A file created in backing appears through the mount.
        XCTAssertEqual(Sys.put(backing("b"), Array("first".utf8)), .success())
        soon(Array("first".utf8), "a file created in backing is not readable through the mount") { Sys.contents(mnt("b")).0 ?? [] }
        XCTAssertTrue(Sys.readdir(mnt.root).0.map(\.name).contains("b"))
        // Rewritten in place with a different size: a fresh open through the mount sees it all.
        XCTAssertEqual(Sys.put(backing("b"), Array("second, longer".utf8)), .success())
        soon("second, longer", "a file rewritten in backing reads stale or short through the mount") {
            String(decoding: Sys.contents(mnt("b")).0 ?? [], as: UTF8.self)
        }
        soon(14, "stat through the mount reports a stale size after a change in backing") { Sys.lstat(mnt("b")).0?.size ?? -1 }
        // Removed in backing: gone through the mount.
        XCTAssertEqual(Sys.call { unlink(backing("b")) }, .success())
        soon(true, "a file removed in backing is still found through the mount") { Sys.lstat(mnt("b")).1 == .failure(ENOENT) }
        // Replaced in backing by rename (how editors save): the new content shows.
        XCTAssertEqual(Sys.put(backing("c"), Array("old".utf8)), .success())
        soon(Array("old".utf8), "c through the mount") { Sys.contents(mnt("c")).0 ?? [] }
        XCTAssertEqual(Sys.put(backing("c.tmp"), Array("new!".utf8)), .success())
        XCTAssertEqual(Sys.call { rename(backing("c.tmp"), backing("c")) }, .success())
        soon(Array("new!".utf8), "a file replaced by rename in backing reads the old version through the mount") { Sys.contents(mnt("c")).0 ?? [] }
    }
}
