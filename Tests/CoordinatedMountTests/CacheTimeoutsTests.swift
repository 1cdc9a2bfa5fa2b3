import XCTest
import Foundation
import Glibc
@testable import CoordFS
@testable import Loopback
import FuseKit
import LinuxGNU

/// How long the kernel may keep names and attributes: 1 s by default, 10 s for items the backing
/// watcher keeps fresh (every directory watched, the backing root's own local file system); an
/// explicit `attr_timeout`, `entry_timeout` or `cache=none` always wins.
final class CacheTimeoutsTests: InProcessMountTestCase {
    func testOptionsGiveTheDefaultsOrWhatWasAskedFor() throws {
        let defaults = try MountOptions.parse([]).loopbackOptions(hiding: [])
        XCTAssertEqual(defaults.attributeTimeout, 1.0)
        XCTAssertEqual(defaults.entryTimeout, 1.0)
        XCTAssertEqual(defaults.watchedAttributeTimeout, MountOptions.watchedTimeout)
        XCTAssertEqual(defaults.watchedEntryTimeout, MountOptions.watchedTimeout)

        let asked = try MountOptions.parse(["attr_timeout=2.5"]).loopbackOptions(hiding: [])
        XCTAssertEqual(asked.attributeTimeout, 2.5)
        XCTAssertNil(asked.watchedAttributeTimeout, "an explicit attr_timeout is overridden while watched")
        XCTAssertEqual(asked.watchedEntryTimeout, MountOptions.watchedTimeout, "entry_timeout was not given")

        let none = try MountOptions.parse(["cache=none"]).loopbackOptions(hiding: [])
        XCTAssertEqual(none.attributeTimeout, 0)
        XCTAssertEqual(none.entryTimeout, 0)
        XCTAssertNil(none.watchedAttributeTimeout)
        XCTAssertNil(none.watchedEntryTimeout)
    }

    func testWatchedItemsOfTheBackingRootsLocalFileSystemGetTheLongTimeout() throws {
        let dir = open(backing, O_RDONLY | O_DIRECTORY)
        let type = LinuxCalls.fileSystemType(dir)
        close(dir)
        try XCTSkipUnless(LocalFileSystems.types.contains(type), "the test folder is not on a local file system (f_type \(String(type, radix: 16)))")
        try write("f", "x")
        var st = stat()
        XCTAssertEqual(lstat(backing + "/f", &st), 0)
        let loopback = daemon.loopback
        // The daemon's backing watcher marked every directory the kernel knows.
        XCTAssertEqual(loopback.attributeTimeout(for: st), MountOptions.watchedTimeout)

        // Another file system mounted inside the backing folder: not known to be watched whole.
        let tmpfs = backing + "/tmpfs"
        mkdir(tmpfs, 0o755)
        XCTAssertEqual(mount("tmpfs", tmpfs, "tmpfs", 0, "size=1m"), 0, String(cString: strerror(errno)))
        defer { umount2(tmpfs, Int32(MNT_DETACH)) }
        var other = stat()
        XCTAssertEqual(lstat(tmpfs, &other), 0)
        XCTAssertEqual(loopback.attributeTimeout(for: other), 1.0, "an item on another device got the watched timeout")

        // Without a complete watch (a directory that could not be marked), the plain timeout.
        loopback.setPathsAreWatched(false)
        XCTAssertEqual(loopback.attributeTimeout(for: st), 1.0)
        loopback.setPathsAreWatched(true)
    }

    /// The long timeout does not hide direct changes: the watcher drops what changed. The kernel has
    /// the name and attributes cached (looked up and stat'ed through the mount); a write, a removal
    /// and a rename by another process in the backing folder all show through the mount within a
    /// moment. (This process is the daemon: its own direct changes would be skipped.)
    func testDirectChangesShowDespiteTheLongTimeout() throws {
        try write("doc.txt", "one")
        mkdir(mnt + "/sub", 0o755)
        try write("sub/inner.txt", "inner")
        func size(_ p: String) -> Int? { var st = stat(); return lstat(mnt + "/" + p, &st) == 0 ? Int(st.st_size) : nil }
        XCTAssertEqual(size("doc.txt"), 3)
        XCTAssertEqual(size("sub/inner.txt"), 5)
        func soon(_ what: String, _ check: () -> Bool) {
            let deadline = Date().addingTimeInterval(0.5)
            while !check() && Date() < deadline { usleep(2_000) }
            XCTAssertTrue(check(), what)
        }
        try sh("printf 'one two' > doc.txt", in: backing)
        soon("a direct write is not seen through the mount") { size("doc.txt") == 7 }
        XCTAssertEqual(try read("doc.txt"), "one two")
        try sh("rm sub/inner.txt", in: backing)
        soon("a direct removal is not seen through the mount") { size("sub/inner.txt") == nil }
        try sh("mv doc.txt sub/moved.txt", in: backing)
        soon("a direct rename is not seen through the mount") { size("doc.txt") == nil && size("sub/moved.txt") == 7 }
    }
}
