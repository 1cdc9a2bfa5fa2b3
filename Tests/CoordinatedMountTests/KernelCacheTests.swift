import XCTest
import Foundation
import Glibc
@testable import CoordFS
@testable import Loopback
import FuseKit
import LinuxGNU

/// Requests the kernel is spared (issue 23 item 2), each with the change made directly in the
/// backing folder, by another process, while the kernel holds the answer: it never shows stale.
final class KernelCacheTests: InProcessMountTestCase {
    private func requests(_ operation: FuseOperation) -> UInt64 { daemon.requestCounters?.value(operation) ?? 0 }

    private func exists(_ relative: String) -> Bool {
        var st = stat()
        return lstat(mnt + "/" + relative, &st) == 0
    }

    /// Lookups the daemon was sent while `body` ran.
    private func lookups(_ body: () throws -> Void) rethrows -> UInt64 {
        let before = requests(.lookup)
        try body()
        return requests(.lookup) - before
    }

    private func soon(_ what: String, file: StaticString = #filePath, line: UInt = #line, _ check: () -> Bool) {
        let deadline = Date().addingTimeInterval(1)
        while !check() && Date() < deadline { usleep(2_000) }
        XCTAssertTrue(check(), what, file: file, line: line)
    }

    // MARK: Negative entries

    func testOptionsGiveTheNegativeLifetimes() throws {
        let defaults = try MountOptions.parse([]).loopbackOptions(hiding: [])
        XCTAssertEqual(defaults.negativeTimeout, 0, "without the watcher a name created in BACKING must show at once")
        XCTAssertEqual(defaults.watchedNegativeTimeout, MountOptions.watchedTimeout)
        let asked = try MountOptions.parse(["negative_timeout=2"]).loopbackOptions(hiding: [])
        XCTAssertEqual(asked.negativeTimeout, 2)
        XCTAssertNil(asked.watchedNegativeTimeout, "an explicit negative_timeout applies everywhere")
        let none = try MountOptions.parse(["cache=none"]).loopbackOptions(hiding: [])
        XCTAssertEqual(none.negativeTimeout, 0)
        XCTAssertNil(none.watchedNegativeTimeout)
    }

    /// A missing name looked up again is answered by the kernel while the watcher watches its folder.
    func testAMissingNameIsAskedOnceWhileWatched() throws {
        mkdir(mnt + "/sub", 0o755)
        XCTAssertEqual(lookups {
            XCTAssertFalse(exists("missing"))
            XCTAssertFalse(exists("missing"))
            XCTAssertFalse(exists("sub/missing"))
            XCTAssertFalse(exists("sub/missing"))
        }, 2)
    }

    /// Every way a name can appear directly in the backing folder drops the kernel's cached "no such
    /// name" at once: created, made a folder, hard-linked, symlinked, renamed into place in the
    /// folder, moved in from outside the backing folder, and a folder renamed into place.
    func testANameThatAppearsInTheBackingFolderShowsAtOnce() throws {
        let outside = root + "/outside"
        mkdir(outside, 0o755)
        mkdir(mnt + "/sub", 0o755)
        try write("existing", "e")
        let ways: [(String, (String) -> String)] = [
            ("created", { "echo x > \($0)" }),
            ("made a folder", { "mkdir \($0)" }),
            ("hard-linked", { "ln existing \($0)" }),
            ("symlinked", { "ln -s existing \($0)" }),
            ("renamed into place", { "echo x > tmp.$$ && mv tmp.$$ \($0)" }),
            ("moved in from outside", { "echo x > \(outside)/o.$$ && mv \(outside)/o.$$ \($0)" }),
            ("a folder renamed into place", { "mkdir d.$$ && mv d.$$ \($0)" }),
        ]
        for (i, (way, command)) in ways.enumerated() {
            for folder in ["", "sub/"] {
                let name = folder + "appears\(i)"
                XCTAssertFalse(exists(name))
                XCTAssertEqual(lookups { XCTAssertFalse(exists(name)) }, 0, "\(way): the kernel did not cache the missing \(name)")
                try sh(command(name), in: backing)
                soon("\(name) \(way) in the backing folder does not show through the mount") { exists(name) }
            }
        }
    }

    /// The watcher's report of a name that appeared may come before the kernel has the lookup's
    /// answer to drop: a lookup that overlapped one caches nothing.
    func testALookupOverlappingAnAppearanceCachesNothing() throws {
        let loopback = daemon.loopback
        let root = loopback.inode(.root)
        let seen = loopback.appearanceCount
        XCTAssertEqual(loopback.negativeTimeout(in: root, since: seen), MountOptions.watchedTimeout)
        loopback.namesMayHaveAppeared()
        XCTAssertEqual(loopback.negativeTimeout(in: root, since: seen), 0)
        XCTAssertEqual(loopback.negativeTimeout(in: root, since: loopback.appearanceCount), MountOptions.watchedTimeout)
    }

    /// Without a watcher that sees every folder (not root, no fanotify, a folder it could not mark,
    /// `backing_watcher=off`), "no such name" is not cached: the next lookup asks again, and a name
    /// created directly in the backing folder shows at once.
    func testWithoutAWatcherAMissingNameIsNotCached() throws {
        daemon.loopback.setPathsAreWatched(false)
        defer { daemon.loopback.setPathsAreWatched(true) }
        XCTAssertEqual(lookups {
            XCTAssertFalse(exists("unwatched"))
            XCTAssertFalse(exists("unwatched"))
        }, 2)
        try sh("echo x > unwatched", in: backing)
        XCTAssertTrue(exists("unwatched"))
    }

    // MARK: A folder's attributes

    /// A folder's times and link count follow names made, removed and renamed directly in the
    /// backing folder, also names the kernel never looked up (it drops a folder's attributes by
    /// itself only for a name it held).
    func testAFoldersAttributesFollowNamesThatAppearOrGoInTheBackingFolder() throws {
        mkdir(mnt + "/d", 0o755)
        func attributes(_ path: String) -> (Int, Int, UInt) {
            var st = stat()
            XCTAssertEqual(lstat(path, &st), 0)
            return (st.st_mtim.tv_sec, st.st_mtim.tv_nsec, UInt(st.st_nlink))
        }
        func same() -> Bool { attributes(mnt + "/d") == attributes(backing + "/d") }
        XCTAssertTrue(same())
        for (what, command) in [("a folder made", "mkdir d/sub"), ("a file made", "echo x > d/f"), ("a file renamed", "mv d/f d/g"),
                                ("a file removed", "rm d/g"), ("a folder removed", "rmdir d/sub")] {
            _ = attributes(mnt + "/d")   // cached
            usleep(10_000)
            try sh(command, in: backing)
            soon("\(what) in the backing folder: the folder's times or link count through the mount are stale") { same() }
        }
    }

    // MARK: Symlinks

    private func target(_ relative: String) -> String? {
        var buf = [CChar](repeating: 0, count: 4096)
        let n = readlink(mnt + "/" + relative, &buf, buf.count - 1)
        return n < 0 ? nil : String(decoding: buf[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// A symlink's target is read once (the kernel keeps it: FUSE_CACHE_SYMLINKS); a link replaced
    /// directly in the backing folder, in place or by a rename over it, shows its new target at once.
    func testASymlinksTargetIsReadOnceAndAReplacedLinkShowsAtOnce() throws {
        try sh("ln -s one link && ln -s three other", in: backing)
        // The watcher's reports of these two links drop what the kernel holds of them: counted
        // only once it handled them (on a loaded machine they came after the first readlink).
        try waitForTheWatcher()
        XCTAssertEqual(target("link"), "one")
        let before = requests(.readlink)
        XCTAssertEqual(target("link"), "one")
        XCTAssertEqual(target("link"), "one")
        XCTAssertEqual(requests(.readlink) - before, 0, "the kernel asked for a cached symlink's target again")
        try sh("rm link && ln -s two link", in: backing)
        soon("a symlink replaced in the backing folder shows its old target") { target("link") == "two" }
        XCTAssertEqual(target("other"), "three")
        try sh("ln -s four tmp && mv tmp other", in: backing)
        soon("a symlink renamed over in the backing folder shows its old target") { target("other") == "four" }
    }
}

/// Extended attributes a file does not have (`security.selinux` and `system.posix_acl_access` at
/// every `ls -l`, `security.capability` before writes) are answered from the daemon's node while
/// the watcher keeps the file fresh, and never stale: set through the mount, set, removed and set
/// again directly in the backing folder by another process, after lost events, through a hard
/// link; `user.*` is always read.
final class AbsentXattrTests: InProcessMountTestCase {
    private var fromNode: Int { daemon.loopback.absentXattrAnswers }

    private func value(_ relative: String, _ name: String) -> (Int, Int32) {
        var buf = [UInt8](repeating: 0, count: 256)
        let n = buf.withUnsafeMutableBytes { LinuxCalls.getxattr(mnt + "/" + relative, name, $0.baseAddress, 256) }
        return (n, n < 0 ? errno : 0)
    }

    private func absent(_ relative: String, _ name: String) -> Bool { value(relative, name).1 == ENODATA }

    private func soon(_ what: String, file: StaticString = #filePath, line: UInt = #line, _ check: () -> Bool) {
        let deadline = Date().addingTimeInterval(2)
        while !check() && Date() < deadline { usleep(2_000) }
        XCTAssertTrue(check(), what, file: file, line: line)
    }

    func testAnAbsentAttributeIsAnsweredFromTheNodeAndShowsOnceSetThroughTheMount() throws {
        try write("f", "x")
        XCTAssertTrue(absent("f", "security.selinux"))
        let before = fromNode
        for _ in 0..<5 {
            XCTAssertTrue(absent("f", "security.selinux"))
            XCTAssertTrue(absent("f", "system.posix_acl_access"))
        }
        XCTAssertGreaterThanOrEqual(fromNode - before, 9, "asked again, the absence was answered without reading the file")
        let label = Array("u:r:t:s0".utf8)
        XCTAssertEqual(label.withUnsafeBytes { LinuxCalls.setxattr(mnt + "/f", "security.selinux", $0.baseAddress, $0.count, 0) }, 0)
        XCTAssertEqual(value("f", "security.selinux").0, label.count, "set through the mount, it shows at once")
        // A name never kept: read each time.
        let kept = fromNode
        XCTAssertTrue(absent("f", "user.none"))
        XCTAssertTrue(absent("f", "user.none"))
        XCTAssertEqual(fromNode, kept)
    }

    func testAnAttributeSetRemovedAndSetAgainInTheBackingFolderShowsThroughTheMount() throws {
        try write("f", "x")
        XCTAssertTrue(absent("f", "security.selinux"))
        XCTAssertTrue(absent("f", "security.selinux"))
        try sh("setfattr -n security.selinux -v one f", in: backing)
        soon("set in the backing folder, it shows through the mount") { value("f", "security.selinux").0 == 3 }
        try sh("setfattr -x security.selinux f", in: backing)
        soon("removed in the backing folder, it is gone through the mount") { absent("f", "security.selinux") }
        XCTAssertTrue(absent("f", "security.selinux"))   // kept as absent again
        try sh("setfattr -n security.selinux -v second f", in: backing)
        soon("set again, it shows through the mount") { value("f", "security.selinux").0 == 6 }
        // Through another name of the same file, in a folder the kernel knows.
        mkdir(mnt + "/d", 0o755)
        XCTAssertEqual(link(backing + "/f", backing + "/d/g"), 0)
        var st = stat()
        XCTAssertEqual(stat(mnt + "/d/g", &st), 0)
        XCTAssertTrue(absent("f", "system.posix_acl_access"))
        XCTAssertTrue(absent("f", "system.posix_acl_access"))
        try sh("setfacl -m u:nobody:r d/g", in: backing)
        soon("an ACL set through a hard link shows through the first name") { value("f", "system.posix_acl_access").0 > 0 }
    }

    /// While a file is open through the mount, its extended attributes are read and set through
    /// that open's descriptor (the kernel asks `security.capability` at each write), not by
    /// reopening the file: and they stay the file's, whoever changes them; after the close, by a
    /// reopen again.
    func testAnOpenFilesAttributesGoThroughItsOpenAndStayTrue() throws {
        try write("f", "x")
        let fd = open(mnt + "/f", O_WRONLY)
        XCTAssertGreaterThanOrEqual(fd, 0)
        let onOpens = { self.daemon.loopback.xattrCallsOnOpens }
        let before = onOpens()
        XCTAssertTrue(absent("f", "user.a"))
        XCTAssertEqual(onOpens() - before, 1, "read through the open's descriptor")
        try sh("setfattr -n user.a -v hello f", in: backing)
        XCTAssertEqual(value("f", "user.a").0, 5, "set in the backing folder, it shows through the open")
        let b = Array("two".utf8)
        XCTAssertEqual(b.withUnsafeBytes { LinuxCalls.setxattr(mnt + "/f", "user.b", $0.baseAddress, $0.count, 0) }, 0)
        XCTAssertEqual(try sh("getfattr --only-values -n user.b f", in: backing).output, "two", "set through the open, it is the file's")
        // The kernel's ask before a write goes through the open too.
        let beforeWrite = onOpens()
        XCTAssertEqual(Glibc.write(fd, "y", 1), 1)
        XCTAssertGreaterThan(onOpens(), beforeWrite)
        XCTAssertEqual(close(fd), 0)
        XCTAssertEqual(try String(contentsOfFile: backing + "/f", encoding: .utf8), "y")
        // Closed (the release may come after close(2) returns): read by a reopen, the same values.
        soon("the open is gone once released") {
            let n = onOpens()
            return value("f", "user.a").0 == 5 && onOpens() == n
        }
        XCTAssertEqual(value("f", "user.b").0, 3)
    }

    func testLostEventsForgetEveryAbsence() throws {
        try write("f", "x")
        XCTAssertTrue(absent("f", "security.selinux"))
        XCTAssertTrue(absent("f", "security.selinux"))
        // Set by this process (the watcher skips the daemon's own pid, as it would skip a change it
        // never heard of), then the watcher's answer to an overflowed queue.
        XCTAssertEqual(Array("v".utf8).withUnsafeBytes { LinuxCalls.setxattr(backing + "/f", "security.selinux", $0.baseAddress, $0.count, 0) }, 0)
        usleep(50_000)
        XCTAssertTrue(absent("f", "security.selinux"), "a change the watcher did not hear of stays unseen until events are lost")
        daemon.loopback.forgetAbsentXattrs()
        XCTAssertEqual(value("f", "security.selinux").0, 1, "after lost events nothing kept counts")
    }
}

/// `backing_watcher=off` (cluster nodes on shared storage): nothing the watcher would drop is kept
/// long; "no such name" is not cached at all.
final class KernelCacheWithoutWatcherTests: InProcessMountTestCase {
    override func configure(_ options: inout MountOptions) {
        super.configure(&options)
        options.backingWatcher = false
    }

    func testAMissingNameIsAskedEachTimeAndANameCreatedBesideShowsAtOnce() throws {
        let before = daemon.requestCounters?.value(.lookup) ?? 0
        var st = stat()
        XCTAssertNotEqual(lstat(mnt + "/beside", &st), 0)
        XCTAssertNotEqual(lstat(mnt + "/beside", &st), 0)
        XCTAssertEqual((daemon.requestCounters?.value(.lookup) ?? 0) - before, 2)
        try sh("echo x > beside", in: backing)
        XCTAssertEqual(lstat(mnt + "/beside", &st), 0, "a name created beside the mount is hidden by a cached negative entry")
    }
}
