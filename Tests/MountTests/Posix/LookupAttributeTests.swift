// lookup, getattr and setattr (chmod, chown, truncate, utimensat), access(), and the name errors
// (ENOENT, ENOTDIR, ENAMETOOLONG, ELOOP), each compared between the native folder and the mount.
import Glibc
import XCTest

final class LookupAttributeTests: MountTestCase {
    private func makeSampleTree() {
        prepare("mkdir d") { s in Sys.call { mkdir(s("d"), 0o750) } }
        prepare("create d/f") { s in Sys.put(s("d/f"), Array("hello".utf8), mode: 0o640) }
        prepare("symlink l -> d/f") { s in Sys.call { symlink("d/f", s("l")) } }
        prepare("symlink dangling -> nowhere") { s in Sys.call { symlink("nowhere", s("dangling")) } }
    }

    func testLookupAndGetattrOfEveryKind() {
        makeSampleTree()
        for rel in ["", "d", "d/f", "l", "dangling"] { sameMeta(rel) }
        sameMeta("l", follow: true)
        same("stat dangling (follows)", expect: Outcome.failure(ENOENT)) { s in Sys.stat(s("dangling")).1 }
        same("lstat missing", expect: Outcome.failure(ENOENT)) { s in Sys.lstat(s("missing")).1 }
        same("lstat d/missing/x", expect: Outcome.failure(ENOENT)) { s in Sys.lstat(s("d/missing/x")).1 }
        same("lstat d/f/x (file as dir)", expect: Outcome.failure(ENOTDIR)) { s in Sys.lstat(s("d/f/x")).1 }
        same("stat d/f/ (trailing slash)", expect: Outcome.failure(ENOTDIR)) { s in Sys.stat(s("d/f/")).1 }
        same("lstat d/./f/../f", expect: Outcome.failure(ENOTDIR)) { s in Sys.lstat(s("d/./f/../f")).1 }
        same("lstat d/../d/./f", expect: Outcome.success()) { s in Sys.lstat(s("d/../d/./f")).1 }
        // fstat through an open fd and stat by path agree.
        guard let fds = openBoth("d/f", O_RDONLY) else { return }
        same("fstat d/f", on: fds) { fd in Sys.fstat(fd).0.map(\.shape) ?? "error" }
        closeBoth(fds)
    }

    func testGetattrReportsSizeAndTimesOfWrites() {
        let before = Sys.coarseNow().ns - 20_000_000
        prepare("create f") { s in Sys.put(s("f"), pattern(10_000)) }
        let m = sameMeta("f")
        XCTAssertEqual(m?.size, 10_000)
        XCTAssertGreaterThanOrEqual(m?.mtime.ns ?? 0, before, "mtime of a new file through the mount is older than the test")
        XCTAssertEqual(m?.blocks ?? 0 > 0, true, "st_blocks of a 10,000-byte file through the mount is 0")
        // A write after a pause moves mtime forward as seen through the mount.
        let t0 = Sys.lstat(mnt("f")).0?.mtime.ns ?? 0
        usleep(20_000)
        guard let fds = openBoth("f", O_WRONLY) else { return }
        same("pwrite 3 bytes at 20000", on: fds, expect: Outcome.success(3)) { fd in Sys.write(fd, [1, 2, 3], at: 20_000) }
        same("fstat after write: size", on: fds, expect: 20_003) { fd in Sys.fstat(fd).0?.size ?? -1 }
        let t1 = Sys.fstat(fds.mnt).0?.mtime.ns ?? 0
        XCTAssertGreaterThan(t1, t0, "mtime through the mount did not move after a write")
        closeBoth(fds)
        sameMeta("f")
    }

    func testChmod() {
        makeSampleTree()
        for mode: mode_t in [0o600, 0o644, 0o755, 0o4755, 0o2750, 0o1777, 0o000] {
            same("chmod d/f \(String(mode, radix: 8))", expect: Outcome.success()) { s in Sys.call { chmod(s("d/f"), mode) } }
            same("mode of d/f after chmod \(String(mode, radix: 8))", expect: S_IFREG | mode) { s in Sys.lstat(s("d/f")).0?.mode ?? 0 }
        }
        same("chmod d 0700", expect: Outcome.success()) { s in Sys.call { chmod(s("d"), 0o700) } }
        sameMeta("d")
        same("chmod via symlink changes the target", expect: Outcome.success()) { s in Sys.call { chmod(s("l"), 0o604) } }
        sameMeta("d/f")
        sameMeta("l")
        same("chmod missing", expect: Outcome.failure(ENOENT)) { s in Sys.call { chmod(s("missing"), 0o644) } }
        guard let fds = openBoth("d/f", O_RDONLY) else { return }
        same("fchmod 0640", on: fds, expect: Outcome.success()) { fd in Sys.call { fchmod(fd, 0o640) } }
        closeBoth(fds)
        sameMeta("d/f")
        // ctime moves on chmod.
        let before = Sys.coarseNow().ns - 20_000_000
        same("chmod d/f 0600") { s in Sys.call { chmod(s("d/f"), 0o600) } }
        XCTAssertGreaterThanOrEqual(Sys.lstat(mnt("d/f")).0?.ctime.ns ?? 0, before, "ctime did not move on chmod through the mount")
    }

    func testChown() {
        makeSampleTree()
        same("chown d/f 65534:65534", expect: Outcome.success()) { s in Sys.call { chown(s("d/f"), nobodyUID, nobodyGID) } }
        sameMeta("d/f")
        same("chown d/f -1:0 keeps the owner", expect: Outcome.success()) { s in Sys.call { chown(s("d/f"), uid_t.max, 0) } }
        same("owner after chown -1:0", expect: "65534:0") { s in Sys.lstat(s("d/f")).0.map { "\($0.uid):\($0.gid)" } ?? "error" }
        same("lchown l (the link itself)", expect: Outcome.success()) { s in Sys.call { lchown(s("l"), 1, 1) } }
        sameMeta("l")
        sameMeta("d/f")
        // chown by root clears set-user-id on a regular file.
        same("chmod d/f 06755") { s in Sys.call { chmod(s("d/f"), 0o6755) } }
        same("chown d/f 0:0 clears setuid", expect: Outcome.success()) { s in Sys.call { chown(s("d/f"), 0, 0) } }
        sameMeta("d/f")
        guard let fds = openBoth("d/f", O_RDONLY) else { return }
        same("fchown 2:3", on: fds, expect: Outcome.success()) { fd in Sys.call { fchown(fd, 2, 3) } }
        closeBoth(fds)
        sameMeta("d/f")
        same("chown missing", expect: Outcome.failure(ENOENT)) { s in Sys.call { chown(s("missing"), 0, 0) } }
    }

    func testTruncate() {
        prepare("create f") { s in Sys.put(s("f"), pattern(50_000)) }
        for size in [100_000, 49_999, 4096, 0, 1, 1 << 20] {
            same("truncate f \(size)", expect: Outcome.success()) { s in Sys.call { truncate(s("f"), off_t(size)) } }
            same("size after truncate \(size)", expect: size) { s in Sys.lstat(s("f")).0?.size ?? -1 }
            same("content after truncate \(size)") { s in Sys.contents(s("f")).0.map(Tree.fnv) ?? 0 }
        }
        guard let fds = openBoth("f", O_RDWR) else { return }
        same("ftruncate 12345", on: fds, expect: Outcome.success()) { fd in Sys.call { ftruncate(fd, 12345) } }
        same("read past the new end", on: fds, expect: Outcome.success(0)) { fd in Sys.read(fd, count: 10, at: 12345).1 }
        same("ftruncate -1", on: fds, expect: Outcome.failure(EINVAL)) { fd in Sys.call { ftruncate(fd, -1) } }
        closeBoth(fds)
        same("truncate a directory", expect: Outcome.failure(EISDIR)) { s in Sys.call { truncate(s(""), 0) } }
        same("truncate missing", expect: Outcome.failure(ENOENT)) { s in Sys.call { truncate(s("missing"), 0) } }
        guard let ro = openBoth("f", O_RDONLY) else { return }
        same("ftruncate on a read-only fd", on: ro) { fd in Sys.call { ftruncate(fd, 0) } }
        closeBoth(ro)
    }

    func testUtimensWithNanosecondsNowAndOmit() {
        makeSampleTree()
        let a = ts(1_000_000_000, 123_456_789), m = ts(1_200_000_000, 987_654_321)
        same("utimensat d/f explicit ns", expect: Outcome.success()) { s in Sys.utimens(s("d/f"), atime: a, mtime: m) }
        same("times after explicit utimensat", expect: "\(a.ns) \(m.ns)") { s in
            Sys.lstat(s("d/f")).0.map { "\($0.atime.ns) \($0.mtime.ns)" } ?? "error"
        }
        // UTIME_OMIT keeps atime, sets mtime.
        let m2 = ts(1_300_000_000, 1)
        same("utimensat atime=OMIT", expect: Outcome.success()) { s in Sys.utimens(s("d/f"), atime: ts(0, Linux.UTIME_OMIT), mtime: m2) }
        same("times after OMIT", expect: "\(a.ns) \(m2.ns)") { s in
            Sys.lstat(s("d/f")).0.map { "\($0.atime.ns) \($0.mtime.ns)" } ?? "error"
        }
        // UTIME_NOW sets mtime to the current time, OMIT keeps atime.
        let before = Sys.coarseNow().ns - 20_000_000
        same("utimensat mtime=NOW atime=OMIT", expect: Outcome.success()) { s in
            Sys.utimens(s("d/f"), atime: ts(0, Linux.UTIME_OMIT), mtime: ts(0, Linux.UTIME_NOW))
        }
        var st = Sys.lstat(mnt("d/f")).0
        let after = Sys.coarseNow().ns + 20_000_000
        XCTAssertEqual(st?.atime.ns, a.ns, "atime through the mount changed under UTIME_OMIT")
        XCTAssertTrue((before...after).contains(st?.mtime.ns ?? 0), "mtime \(st?.mtime.ns ?? 0) after UTIME_NOW is not in [\(before), \(after)]")
        // Both NOW.
        same("utimensat both NOW", expect: Outcome.success()) { s in
            Sys.utimens(s("d/f"), atime: ts(0, Linux.UTIME_NOW), mtime: ts(0, Linux.UTIME_NOW))
        }
        st = Sys.lstat(mnt("d/f")).0
        XCTAssertTrue((before...(Sys.coarseNow().ns + 20_000_000)).contains(st?.atime.ns ?? 0), "atime after UTIME_NOW is not now")
        // On a symlink itself, and through an fd, and on a directory.
        same("utimensat l NOFOLLOW", expect: Outcome.success()) { s in Sys.utimens(s("l"), atime: a, mtime: m, flags: AT_SYMLINK_NOFOLLOW) }
        same("symlink times", expect: "\(m.ns)") { s in Sys.lstat(s("l")).0.map { "\($0.mtime.ns)" } ?? "error" }
        same("utimensat d", expect: Outcome.success()) { s in Sys.utimens(s("d"), atime: a, mtime: m) }
        same("directory times", expect: "\(a.ns) \(m.ns)") { s in Sys.lstat(s("d")).0.map { "\($0.atime.ns) \($0.mtime.ns)" } ?? "error" }
        guard let fds = openBoth("d/f", O_WRONLY) else { return }
        same("futimens", on: fds, expect: Outcome.success()) { fd in Sys.call { futimens(fd, [m, a]) } }
        same("times after futimens", on: fds, expect: "\(m.ns) \(a.ns)") { fd in Sys.fstat(fd).0.map { "\($0.atime.ns) \($0.mtime.ns)" } ?? "error" }
        closeBoth(fds)
        same("utimensat invalid nsec", expect: Outcome.failure(EINVAL)) { s in Sys.utimens(s("d/f"), atime: ts(0, 2_000_000_000), mtime: m) }
        same("utimensat missing", expect: Outcome.failure(ENOENT)) { s in Sys.utimens(s("missing"), atime: a, mtime: m) }
    }

    func testAccess() {
        makeSampleTree()
        prepare("create x 0755") { s in Sys.put(s("x"), [0x23, 0x21], mode: 0o755) }
        prepare("create none 0000") { s in Sys.put(s("none"), [], mode: 0o000) }
        for rel in ["d", "d/f", "x", "none", "l", "dangling", "missing"] {
            for (name, mode) in [("F_OK", F_OK), ("R_OK", R_OK), ("W_OK", W_OK), ("X_OK", X_OK), ("R|W|X", R_OK | W_OK | X_OK)] {
                same("access \(rel) \(name)") { s in Sys.call { access(s(rel), mode) } }
                sameAsNobody("access \(rel) \(name)") { s in Sys.call { access(s(rel), mode) } }
            }
        }
        same("faccessat AT_EACCESS", expect: Outcome.success()) { s in Sys.call { faccessat(AT_FDCWD, s("d/f"), R_OK, AT_EACCESS) } }
    }

    func testNameTooLongAndLoops() {
        let long = String(repeating: "n", count: 256)
        let max = String(repeating: "m", count: 255)
        same("create 255-byte name", expect: Outcome.success()) { s in Sys.put(s(max), [1]) }
        same("lstat 255-byte name", expect: Outcome.success()) { s in Sys.lstat(s(max)).1 }
        same("create 256-byte name", expect: Outcome.failure(ENAMETOOLONG)) { s in Sys.open(s(long), O_CREAT | O_WRONLY) }
        same("lstat 256-byte name", expect: Outcome.failure(ENAMETOOLONG)) { s in Sys.lstat(s(long)).1 }
        same("mkdir 256-byte name", expect: Outcome.failure(ENAMETOOLONG)) { s in Sys.call { mkdir(s(long), 0o755) } }
        same("symlink to a 256-byte name", expect: Outcome.failure(ENAMETOOLONG)) { s in Sys.call { symlink("x", s(long)) } }
        same("rename onto a 256-byte name", expect: Outcome.failure(ENAMETOOLONG)) { s in Sys.call { rename(s(max), s(long)) } }
        let deep = Array(repeating: "abcdefgh", count: 600).joined(separator: "/")   // > PATH_MAX
        same("lstat a path over PATH_MAX", expect: Outcome.failure(ENAMETOOLONG)) { s in Sys.lstat(s(deep)).1 }
        // Symlink loops.
        prepare("symlink self -> self") { s in Sys.call { symlink("self", s("self")) } }
        prepare("symlink a -> b") { s in Sys.call { symlink("b", s("a")) } }
        prepare("symlink b -> a") { s in Sys.call { symlink("a", s("b")) } }
        same("open self", expect: Outcome.failure(ELOOP)) { s in Sys.open(s("self"), O_RDONLY) }
        same("stat a (a->b->a)", expect: Outcome.failure(ELOOP)) { s in Sys.stat(s("a")).1 }
        same("open a/x", expect: Outcome.failure(ELOOP)) { s in Sys.open(s("a/x"), O_RDONLY) }
        same("O_CREAT through a loop", expect: Outcome.failure(ELOOP)) { s in Sys.open(s("self"), O_CREAT | O_WRONLY) }
        prepare("create target") { s in Sys.put(s("target"), [1]) }
        prepare("symlink t -> target") { s in Sys.call { symlink("target", s("t")) } }
        same("open t O_NOFOLLOW", expect: Outcome.failure(ELOOP)) { s in Sys.open(s("t"), O_RDONLY | O_NOFOLLOW) }
        // A chain of 41 links exceeds the kernel's 40-link limit.
        for i in 0..<41 { prepare("symlink c\(i)") { s in Sys.call { symlink(i == 40 ? "target" : "c\(i + 1)", s("c\(i)")) } } }
        same("stat a 41-link chain", expect: Outcome.failure(ELOOP)) { s in Sys.stat(s("c0")).1 }
        same("stat a 40-link chain", expect: Outcome.success()) { s in Sys.stat(s("c1")).1 }
    }
}
