import XCTest
import Foundation
import Glibc
@testable import CoordFS
import FuseKit
import Loopback
import LinuxGNU
import TestSupport

/// The request kinds a benchmark does not count: extended attributes and opens. What the daemon
/// does for one (no walk through /proc/self/fd for an open or an xattr of a file or folder), and
/// what the kernel keeps (POSIX ACLs, once the mount takes FUSE_POSIX_ACL) without going stale.
final class RequestKindsTests: InProcessMountTestCase {
    override func configure(_ options: inout MountOptions) {
        super.configure(&options)
        options.allowOther = true   // the kernel checks permissions: the mount takes POSIX ACLs
    }

    private var getxattrRequests: UInt64 { daemon.requestCounters?.value(.getxattr) ?? 0 }

    private func setxattr(_ path: String, _ name: String, _ value: [UInt8]) -> Int32 {
        value.withUnsafeBytes { LinuxCalls.setxattr(path, name, $0.baseAddress, $0.count, 0) }
    }

    private func getxattr(_ path: String, _ name: String) -> (Int, Int32) {
        var buf = [UInt8](repeating: 0, count: 256)
        let n = buf.withUnsafeMutableBytes { LinuxCalls.getxattr(path, name, $0.baseAddress, 256) }
        return (n, n < 0 ? errno : 0)
    }

    func testOpensAndXattrsOfFilesAndFoldersDoNotWalkProc() throws {
        try write("f", "hello")
        mkdir(backing + "/d", 0o755)
        var st = stat()
        XCTAssertEqual(stat(mnt + "/f", &st), 0)
        XCTAssertEqual(stat(mnt + "/d", &st), 0)
        XCTAssertEqual(setxattr(mnt + "/f", "user.k", Array("v".utf8)), 0)
        let before = Loopback.procPathWalks
        for _ in 0..<5 {
            XCTAssertEqual(try read("f"), "hello")
            XCTAssertEqual(getxattr(mnt + "/f", "user.k").0, 1)
            XCTAssertEqual(getxattr(mnt + "/f", "security.selinux").1, ENODATA)
            XCTAssertEqual(getxattr(mnt + "/d", "user.none").1, ENODATA)
            XCTAssertEqual(LinuxCalls.listxattr(mnt + "/f", nil, 0), 7)
            XCTAssertEqual(access(mnt + "/f", R_OK), 0)
        }
        let fd = open(mnt + "/f", O_WRONLY | O_APPEND)
        XCTAssertGreaterThanOrEqual(fd, 0)
        XCTAssertEqual(Glibc.write(fd, "!", 1), 1)
        close(fd)
        XCTAssertEqual(Loopback.procPathWalks - before, 0, "every open and xattr call went by file handle or descriptor")
        XCTAssertEqual(try String(contentsOfFile: backing + "/f", encoding: .utf8), "hello!")
    }

    func testAFileRenamedOutsideTheMountIsCoordinatedUnderItsNewName() throws {
        try write("a", "one")
        XCTAssertEqual(try read("a"), "one")   // looked up as "a"
        XCTAssertEqual(rename(backing + "/a", backing + "/b"), 0)
        // Through a descriptor opened by the old name's node, the path is found anew (not "a").
        mkdir(backing + "/sub", 0o755)
        var st = stat()
        XCTAssertEqual(stat(mnt + "/sub", &st), 0)
        let node = try XCTUnwrap(daemon.loopback.knownChild(of: daemon.loopback.inode(.root), named: "b"))
        XCTAssertNil(daemon.loopback.lookedUpName(of: node), "the name it was looked up by is gone")
        XCTAssertEqual(daemon.coordinated?.path(node)?.description, "b")
    }

    /// An open's path is the folder's and the name the file was last looked up by, that name kept
    /// as a string between opens: a new name the file is looked up by replaces it, and a name that
    /// is no longer the file is not used.
    func testAFilesPathFollowsTheNameItWasLastLookedUpBy() throws {
        try write("a", "one")
        XCTAssertEqual(try read("a"), "one")
        let node = try XCTUnwrap(daemon.loopback.knownChild(of: daemon.loopback.inode(.root), named: "a"))
        for _ in 0..<2 { XCTAssertEqual(daemon.coordinated?.path(node)?.description, "a") }
        XCTAssertEqual(link(backing + "/a", backing + "/c"), 0)
        XCTAssertEqual(try read("c"), "one")   // looked up as "c"
        XCTAssertEqual(daemon.loopback.lookedUpName(of: node)?.name, "c")
        for _ in 0..<2 { XCTAssertEqual(daemon.coordinated?.path(node)?.description, "c") }
        XCTAssertEqual(unlink(backing + "/c"), 0)
        XCTAssertNil(daemon.loopback.lookedUpName(of: node), "c is no longer the file")
        XCTAssertEqual(daemon.coordinated?.path(node)?.description, "a")
    }

    /// `ls -l` lists a folder (READDIRPLUS), then reads each file's attributes and ACL. Entries the
    /// kernel holds fresh are listed by name alone, so the listing leaves their attributes and cached
    /// ACLs alone (before, every listing made the kernel drop each file's ACL and ask again); what
    /// changes beside the mount still shows, through the listing too.
    func testAListingLeavesTheKernelsFreshEntriesAndACLsAlone() throws {
        try write("a", "granted")
        try write("b", "plain")
        chmod(backing + "/a", 0o600)
        for dir in [root!, backing!, mnt!] { chmod(dir, 0o755) }
        XCTAssertEqual(setxattr(mnt + "/a", "system.posix_acl_access", PosixACL.user(65534, perm: 4)), 0)
        var st = stat()
        func lsl() -> [String: Int] {
            var sizes: [String: Int] = [:]
            for name in (try? FileManager.default.contentsOfDirectory(atPath: mnt)) ?? [] {
                var s = stat()
                XCTAssertEqual(lstat(mnt + "/" + name, &s), 0)
                _ = getxattr(mnt + "/" + name, "security.selinux")
                _ = getxattr(mnt + "/" + name, "system.posix_acl_access")
                sizes[name] = Int(s.st_size)
            }
            return sizes
        }
        _ = lsl()
        let counters = try XCTUnwrap(daemon.requestCounters)
        func asked() -> [UInt64] { [FuseOperation.getxattr, .lookup, .getattr].map { counters.value($0) } }
        let before = asked()
        let names = counters.value(.readdirplus)
        for _ in 0..<3 { XCTAssertEqual(lsl(), ["a": 7, "b": 5]) }
        XCTAssertGreaterThan(counters.value(.readdirplus), names, "the folder was listed")
        let after = asked()
        XCTAssertEqual(after[0] - before[0], 3 * 2, "only security.selinux asked, once per file and listing: the ACLs stayed in the kernel")
        XCTAssertEqual(after[1] - before[1], 0, "no lookup")
        XCTAssertLessThanOrEqual(after[2] - before[2], 3, "no getattr of a file (the folder's own, once a listing: the kernel drops its atime after each)")
        // The kernel's cached ACL decides for nobody, as the backing file's would.
        XCTAssertEqual(try sh("su nobody -s /bin/sh -c 'cat \(mnt!)/a'").output, "granted")
        // Changed beside the mount by another process: the listing shows it within the watcher's latency.
        try sh("setfattr -x system.posix_acl_access a && printf 0123456789 > b.new && mv b.new b && truncate -s 3 a", in: backing)
        let deadline = Date().addingTimeInterval(3)
        while lsl() != ["a": 3, "b": 10], Date() < deadline { usleep(20_000) }
        XCTAssertEqual(lsl(), ["a": 3, "b": 10])
        XCTAssertEqual(getxattr(mnt + "/a", "system.posix_acl_access").1, ENODATA, "the ACL's removal shows")
        XCTAssertNotEqual(try sh("su nobody -s /bin/sh -c 'cat \(mnt!)/a'", allowFailure: true).status, 0, "nobody is refused again")
        XCTAssertEqual(stat(mnt + "/b", &st), 0)
        var native = stat()
        XCTAssertEqual(stat(backing + "/b", &native), 0)
        XCTAssertEqual(st.st_ino, native.st_ino, "the replaced name is the new file")
    }

    /// A listing (READDIRPLUS) of items the daemon knows gives each from its node with one stat by
    /// name, opening none of them again (`rm -rf` lists every folder it just made); the listing
    /// still shows each name as it is now: a folder replaced beside the mount is the new folder
    /// (its own inode number and mode), a folder changed beside the mount shows the change, and
    /// every lookup a listing counted is forgotten again (no node left once the tree is removed).
    func testAListingOfKnownItemsOpensNoneAndShowsEachAsItIsNow() throws {
        let base = daemon.loopback.inodeCount
        XCTAssertEqual(mkdir(mnt + "/top", 0o755), 0)
        for d in ["d1", "d2", "d3"] { XCTAssertEqual(mkdir(mnt + "/top/" + d, 0o755), 0) }
        try write("top/f", "x")
        func listing() throws -> [String: (ino: ino_t, mode: mode_t)] {
            var out: [String: (ino: ino_t, mode: mode_t)] = [:]
            for line in try sh("ls -lai --time-style=+ \(mnt!)/top").output.split(separator: "\n") {
                let words = line.split(separator: " ", omittingEmptySubsequences: true)
                guard words.count >= 7, let ino = ino_t(words[0]), let name = words.last, name != ".", name != ".." else { continue }
                let kind = words[1].first == "d" ? S_IFDIR : S_IFREG
                var mode: mode_t = 0
                for (i, c) in words[1].dropFirst().prefix(9).enumerated() where c != "-" { mode |= 1 << (8 - i) }
                out[String(name)] = (ino, kind | mode)
            }
            return out
        }
        func native(_ name: String) -> (ino: ino_t, mode: mode_t) {
            var st = stat()
            XCTAssertEqual(lstat(backing + "/top/" + name, &st), 0)
            return (st.st_ino, st.st_mode)
        }
        let known = daemon.loopback.listedKnownEntries
        for _ in 0..<3 {
            let l = try listing()
            XCTAssertEqual(Set(l.keys), ["d1", "d2", "d3", "f"])
            for (name, item) in l { XCTAssertTrue(item == native(name), "\(name) is listed as it is: \(item) against \(native(name))") }
        }
        XCTAssertGreaterThan(daemon.loopback.listedKnownEntries, known, "known folders were listed from their nodes")
        // Beside the mount: d2 replaced by a new folder (the old one's node still held), d1 changed.
        XCTAssertEqual(rmdir(backing + "/top/d2"), 0)
        XCTAssertEqual(mkdir(backing + "/top/d2", 0o700), 0)
        XCTAssertEqual(chmod(backing + "/top/d1", 0o711), 0)
        let deadline = Date().addingTimeInterval(5)
        func current() throws -> Bool {
            let l = try listing()
            return l["d1"].map { $0 == native("d1") } == true && l["d2"].map { $0 == native("d2") } == true
        }
        while try !current(), Date() < deadline { usleep(20_000) }
        let l = try listing()
        XCTAssertTrue(l["d2"]! == native("d2"), "the replaced folder is the new one: \(l["d2"]!) against \(native("d2"))")
        XCTAssertEqual(l["d2"]!.mode & 0o777, 0o700)
        XCTAssertEqual(l["d1"]!.mode & 0o777, 0o711)
        var st = stat()
        XCTAssertEqual(stat(mnt + "/top/d2", &st), 0)
        XCTAssertEqual(st.st_ino, native("d2").ino)
        // Every lookup counted is forgotten: the removed tree leaves no node behind.
        _ = try sh("rm -rf \(mnt!)/top")
        let until = Date().addingTimeInterval(10)
        while daemon.loopback.inodeCount > base, Date() < until { usleep(20_000) }
        XCTAssertEqual(daemon.loopback.inodeCount, base, "no node of the removed tree is left")
    }

    func testPOSIXACLsAreCachedByTheKernelAndDroppedWhenTheyChange() throws {
        try write("f", "secret")
        chmod(backing + "/f", 0o600)
        var st = stat()
        XCTAssertEqual(stat(mnt + "/f", &st), 0)
        XCTAssertEqual(setxattr(mnt + "/f", "system.posix_acl_access", PosixACL.user(65534, perm: 4)), 0)
        XCTAssertEqual(getxattr(mnt + "/f", "system.posix_acl_access").0, 44)
        let asked = getxattrRequests
        for _ in 0..<5 { XCTAssertEqual(getxattr(mnt + "/f", "system.posix_acl_access").0, 44) }
        XCTAssertEqual(getxattrRequests, asked, "the kernel answered from its cached ACL")
        // Changed directly in the backing folder by another process (the watcher skips this one's,
        // the daemon's own): the watcher drops the kernel's copy.
        try sh("setfattr -x system.posix_acl_access f", in: backing)
        let deadline = Date().addingTimeInterval(3)
        while getxattr(mnt + "/f", "system.posix_acl_access").1 != ENODATA, Date() < deadline { usleep(20_000) }
        XCTAssertEqual(getxattr(mnt + "/f", "system.posix_acl_access").1, ENODATA, "the removal shows through the mount")
        // user.* attributes are never kept: one set in the backing folder shows at once.
        try sh("setfattr -n user.a -v 1 f", in: backing)
        XCTAssertEqual(getxattr(mnt + "/f", "user.a").0, 1)
        try sh("setfattr -n user.a -v 22 f", in: backing)
        XCTAssertEqual(getxattr(mnt + "/f", "user.a").0, 2)
        XCTAssertEqual(setxattr(mnt + "/f", "user.b", Array("333".utf8)), 0)
        XCTAssertEqual(try sh("getfattr --only-values -n user.b f", in: backing).output, "333")
    }

    /// A create's node is the file the create opened, taken from the create's own descriptor (an
    /// O_PATH one opened from it, no path walked, no stat beyond the create's): the kernel is told
    /// the file as it is (inode number, mode with its set-user-ID, owner, size, times, while still
    /// open and after the close), the node holds an O_PATH descriptor of its own (not the create's
    /// writable one, which would keep the file open for writing as long as the kernel knows it),
    /// a script made so runs, a create of a name the kernel knows gets that name's node, and every
    /// node a create made is forgotten again once the files are removed.
    func testACreatedFileIsTheNodeOfItsOwnDescriptorAndShownAsItIs() throws {
        let base = daemon.loopback.inodeCount
        func same(_ name: String, _ through: stat, _ what: String) {
            var native = stat()
            XCTAssertEqual(lstat(backing + "/" + name, &native), 0)
            XCTAssertEqual(through.st_ino, native.st_ino, "\(what): inode number")
            XCTAssertEqual(through.st_mode, native.st_mode, "\(what): mode")
            XCTAssertEqual(through.st_uid, native.st_uid, "\(what): owner")
            XCTAssertEqual(through.st_gid, native.st_gid, "\(what): group")
            XCTAssertEqual(through.st_size, native.st_size, "\(what): size")
            XCTAssertEqual(through.st_nlink, native.st_nlink, "\(what): links")
            XCTAssertEqual(through.st_mtim.tv_sec, native.st_mtim.tv_sec, "\(what): mtime")
            XCTAssertEqual(through.st_mtim.tv_nsec, native.st_mtim.tv_nsec, "\(what): mtime")
            XCTAssertEqual(through.st_ctim.tv_sec, native.st_ctim.tv_sec, "\(what): ctime")
            XCTAssertEqual(through.st_ctim.tv_nsec, native.st_ctim.tv_nsec, "\(what): ctime")
        }
        for (name, mode) in [("plain", 0o640), ("suid", 0o4755), ("run.sh", 0o755)] as [(String, mode_t)] {
            let fd = open(mnt + "/" + name, O_CREAT | O_EXCL | O_WRONLY, mode)
            XCTAssertGreaterThanOrEqual(fd, 0, name)
            var st = stat()
            XCTAssertEqual(lstat(mnt + "/" + name, &st), 0)
            same(name, st, "\(name) as created")
            let text = name == "run.sh" ? "#!/bin/sh\necho ran\n" : "data"
            XCTAssertEqual(Glibc.write(fd, text, text.utf8.count), text.utf8.count)
            XCTAssertEqual(fstat(fd, &st), 0)
            same(name, st, "\(name) written, still open")
            close(fd)
            let node = try XCTUnwrap(daemon.loopback.knownChild(of: daemon.loopback.inode(.root), named: name))
            XCTAssertTrue(node.holdsDescriptor, "\(name): its node holds a descriptor of its own")
            XCTAssertEqual(node.withDescriptor { fcntl($0, F_GETFL) & LinuxCalls.O_PATH }, .success(LinuxCalls.O_PATH), "\(name): an O_PATH one, which writes nothing")
            XCTAssertEqual(lstat(mnt + "/" + name, &st), 0)
            same(name, st, "\(name) after its close")
        }
        XCTAssertEqual(try sh("\(mnt!)/run.sh").output.trimmingCharacters(in: .newlines), "ran", "a script made through the mount runs")
        // O_CREAT of a name the kernel knows (an open, or a create of the same file): the same node.
        let node = try XCTUnwrap(daemon.loopback.knownChild(of: daemon.loopback.inode(.root), named: "plain"))
        let fd = open(mnt + "/plain", O_CREAT | O_WRONLY | O_TRUNC, 0o600)
        XCTAssertGreaterThanOrEqual(fd, 0)
        close(fd)
        XCTAssertTrue(daemon.loopback.knownChild(of: daemon.loopback.inode(.root), named: "plain") === node)
        var st = stat()
        XCTAssertEqual(lstat(mnt + "/plain", &st), 0)
        same("plain", st, "plain truncated by O_CREAT|O_TRUNC")
        for name in ["plain", "suid", "run.sh"] { XCTAssertEqual(unlink(mnt + "/" + name), 0) }
        let until = Date().addingTimeInterval(10)
        while daemon.loopback.inodeCount > base, Date() < until { usleep(20_000) }
        XCTAssertEqual(daemon.loopback.inodeCount, base, "no node of the removed files is left")
    }

    /// tar's chmod, chown and utimens of each item it unpacks, and chmod(2) and utimensat(2) by a
    /// path through the mount, reach the backing item through its node's O_PATH descriptor
    /// (`fchmodat2` and `utimensat` with AT_EMPTY_PATH), never through a walk of `/proc/self/fd/N`
    /// (20-40 µs each, two per file tar unpacks before); each mode (set-user-ID and set-group-ID
    /// too), owner and time lands on the backing item and shows through the mount as there.
    func testModesAndTimesAreSetThroughTheNodesDescriptorWithoutWalkingProc() throws {
        let src = root + "/tar-src"
        try sh("""
            set -e
            mkdir -p \(src)/tree/sub/deeper \(src)/tree/empty
            for i in 1 2 3 4 5 6; do echo "file $i" > \(src)/tree/sub/f$i; done
            echo '#!/bin/sh' > \(src)/tree/run.sh
            chmod 0640 \(src)/tree/sub/f1; chmod 04755 \(src)/tree/sub/f2; chmod 02750 \(src)/tree/sub/f3
            chmod 0600 \(src)/tree/sub/f4; chmod 0755 \(src)/tree/run.sh; chmod 0750 \(src)/tree/sub/deeper
            chown 65534:65534 \(src)/tree/sub/f5; chmod 0700 \(src)/tree/empty
            ln -s sub/f1 \(src)/tree/link
            find \(src)/tree -exec touch -h -d @1234567890 {} +
            tar -C \(src) -cf \(src)/t.tar tree
            """, in: root)
        let items = ["tree", "tree/sub", "tree/sub/deeper", "tree/empty", "tree/run.sh", "tree/link"]
            + (1...6).map { "tree/sub/f\($0)" }
        // The first unpack reads each new folder's path once (`Loopback.path(of:)`, kept after);
        // the second makes every file anew over the tree and sets every mode and time again. The
        // link is left out of the count: its lchown makes the kernel ask the symlink's
        // `security.capability`, an xattr of a symlink, which has no descriptor call.
        try sh("tar -xpf \(src)/t.tar")
        let before = Loopback.procPathWalks
        try sh("tar -xpf \(src)/t.tar --exclude=tree/link")
        XCTAssertEqual(chmod(mnt + "/tree/sub/f6", 0o2711), 0, "chmod(2) by path through the mount")
        XCTAssertEqual(chmod(mnt + "/tree/empty", 0o1777), 0, "chmod(2) of a folder through the mount")
        var times = [timespec(tv_sec: 1_500_000_000, tv_nsec: 123_456_789), timespec(tv_sec: 1_600_000_000, tv_nsec: 987_654_321)]
        XCTAssertEqual(utimensat(AT_FDCWD, mnt + "/tree/sub/f6", &times, 0), 0, "utimensat(2) by path through the mount")
        XCTAssertEqual(utimensat(AT_FDCWD, mnt + "/tree/sub/deeper", &times, 0), 0, "utimensat(2) of a folder")
        XCTAssertEqual(Loopback.procPathWalks - before, 0, "every chmod and utimens went through the node's descriptor")

        func attributes(_ path: String) -> stat? {
            var st = stat()
            return lstat(path, &st) == 0 ? st : nil
        }
        for item in items {
            let s = try XCTUnwrap(attributes(src + "/" + item), item)
            let b = try XCTUnwrap(attributes(backing + "/" + item), "\(item) in the backing folder")
            let m = try XCTUnwrap(attributes(mnt + "/" + item), "\(item) through the mount")
            switch item {
            case "tree/sub/f6":
                XCTAssertEqual(b.st_mode & 0o7777, 0o2711, item)
                XCTAssertEqual(b.st_atim.tv_sec, 1_500_000_000, item); XCTAssertEqual(b.st_atim.tv_nsec, 123_456_789, item)
                XCTAssertEqual(b.st_mtim.tv_sec, 1_600_000_000, item); XCTAssertEqual(b.st_mtim.tv_nsec, 987_654_321, item)
            case "tree/empty":
                XCTAssertEqual(b.st_mode & 0o7777, 0o1777, item)
                XCTAssertEqual(b.st_mtim.tv_sec, 1_234_567_890, item)
            case "tree/sub/deeper":
                XCTAssertEqual(b.st_mode & 0o7777, 0o750, item)
                XCTAssertEqual(b.st_mtim.tv_sec, 1_600_000_000, item); XCTAssertEqual(b.st_mtim.tv_nsec, 987_654_321, item)
            default:
                XCTAssertEqual(b.st_mode, s.st_mode, "\(item): tar's mode in the backing folder")
                XCTAssertEqual(b.st_mtim.tv_sec, 1_234_567_890, "\(item): tar's mtime in the backing folder")
            }
            XCTAssertEqual(b.st_uid, s.st_uid, "\(item): owner"); XCTAssertEqual(b.st_gid, s.st_gid, "\(item): group")
            XCTAssertEqual(m.st_ino, b.st_ino, "\(item) through the mount")
            XCTAssertEqual(m.st_mode, b.st_mode, "\(item): mode through the mount")
            XCTAssertEqual(m.st_uid, b.st_uid, "\(item): owner through the mount")
            XCTAssertEqual(m.st_mtim.tv_sec, b.st_mtim.tv_sec, "\(item): mtime through the mount")
            XCTAssertEqual(m.st_mtim.tv_nsec, b.st_mtim.tv_nsec, "\(item): mtime through the mount")
            XCTAssertEqual(m.st_ctim.tv_sec, b.st_ctim.tv_sec, "\(item): ctime through the mount")
            XCTAssertEqual(m.st_ctim.tv_nsec, b.st_ctim.tv_nsec, "\(item): ctime through the mount")
        }
        XCTAssertEqual(try sh("./tree/run.sh; echo ran").output.trimmingCharacters(in: .newlines), "ran", "the script unpacked runs")
        try sh("rm -rf tree")
        XCTAssertFalse(FileManager.default.fileExists(atPath: backing + "/tree"))
    }
}

/// A tree read a second time (`grep -r` again, a build's second pass): each file's `fstat` after
/// its open is answered by the kernel from what the listing gave, not by a GETATTR. A read that
/// bypasses the page cache (kernel passthrough) makes the kernel drop the inode's atime, so once a
/// file was opened the next listing gives it with its attributes again rather than by name alone
/// (on a mount whose kernel keeps no POSIX ACLs, as a single-user mount's). What the kernel then
/// holds is what the file is: a change beside the mount in between shows.
final class ReadAgainRequestsTests: InProcessMountTestCase {
    private static let files = 40

    /// Lists `dir` through the mount, then opens, `fstat`s, reads and closes each file, as `grep -r`
    /// does; the sizes `fstat` gave, by name.
    private func pass(_ dir: String) -> [String: Int] {
        var sizes: [String: Int] = [:]
        guard let d = opendir(dir) else { XCTFail("opendir \(dir): \(errno)"); return [:] }
        var names: [String] = []
        while let e = readdir(d) {
            let name = withUnsafeBytes(of: e.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            if name != "." && name != ".." { names.append(name) }
        }
        closedir(d)
        var buffer = [UInt8](repeating: 0, count: 4096)
        for name in names {
            let fd = open(dir + "/" + name, O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else { XCTFail("open \(name): \(errno)"); continue }
            var st = stat()
            XCTAssertEqual(fstat(fd, &st), 0)
            sizes[name] = Int(st.st_size)
            while Glibc.read(fd, &buffer, buffer.count) > 0 {}
            close(fd)
        }
        return sizes
    }

    func testASecondReadOfATreeAsksNoAttributesPerFile() throws {
        XCTAssertFalse(daemon.plan.options.allowOther, "a single-user mount: the kernel keeps no ACLs")
        mkdir(backing + "/tree", 0o755)
        var expected: [String: Int] = [:]
        for i in 0..<Self.files {
            try write("tree/f\(i)", String(repeating: "x", count: i + 1))
            expected["f\(i)"] = i + 1
        }
        let counters = try XCTUnwrap(daemon.requestCounters)
        XCTAssertEqual(pass(mnt + "/tree"), expected)
        let getattrs = counters.value(.getattr)
        let opens = counters.value(.open)
        XCTAssertEqual(pass(mnt + "/tree"), expected)
        XCTAssertEqual(counters.value(.open) - opens, UInt64(Self.files), "each file opened through the daemon")
        XCTAssertLessThanOrEqual(counters.value(.getattr) - getattrs, 2,
                                 "the second pass asked the attributes of each file again (the folder's own: at most 2)")
        // Not kept past a change: a file grown beside the mount between two passes shows its new size.
        let grown = backing + "/tree/f0"
        try String(repeating: "y", count: 100).write(toFile: grown, atomically: false, encoding: .utf8)
        expected["f0"] = 100
        let deadline = Date().addingTimeInterval(5)
        while pass(mnt + "/tree") != expected, Date() < deadline { usleep(20_000) }
        XCTAssertEqual(pass(mnt + "/tree"), expected)
    }
}
