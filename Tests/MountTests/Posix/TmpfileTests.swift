// open(2) of a folder with O_TMPFILE through the mount (FUSE_TMPFILE), against the native folder:
// an unnamed file written, read and statted, linked in by either form of linkat, O_EXCL never
// linked, and nobody's unnamed files on an allow_other mount. The teardown compares the trees (an
// unnamed file never linked leaves nothing; a linked one has the caller's owner).
import Foundation
import Glibc
import XCTest

/// AT_EMPTY_PATH (Glibc's module leaves it out without _GNU_SOURCE).
private let atEmptyPath: Int32 = 0x1000

final class TmpfileTests: MountTestCase {
    /// The descriptor `fds` holds on `side`.
    private func fd(_ fds: Pair<Int32>, _ side: Side) -> Int32 { side.label == native.label ? fds.native : fds.mnt }

    func testAnUnnamedFileIsWrittenReadAndStatted() throws {
        try requireMount()
        guard let fds = openBoth("", Linux.O_TMPFILE | O_RDWR, 0o640) else { return }
        let data = pattern(100_000)
        same("write", on: fds, expect: Outcome.success(data.count)) { Sys.write($0, data) }
        same("pread", on: fds, expect: data) { Sys.read($0, count: data.count, at: 0).0 }
        same("fstat", on: fds, expect: "mode=100640 nlink=0 uid=0 gid=0 size=100000") { Sys.fstat($0).0?.shape ?? "none" }
        same("ftruncate", on: fds, expect: Outcome.success()) { fd in Sys.call { ftruncate(fd, 10) } }
        same("fstat after ftruncate", on: fds) { Sys.fstat($0).0?.size ?? -1 }
        same("the folder lists nothing", expect: [String]()) { s in Sys.readdir(s("")).0.map(\.name).filter { $0 != "." && $0 != ".." } }
        closeBoth(fds)
    }

    /// Both ways programs name an unnamed file: linkat of /proc/self/fd/N with AT_SYMLINK_FOLLOW,
    /// and of the descriptor itself with atEmptyPath; written before and after, then closed.
    func testLinkingItInByProcLinkAndByEmptyPath() throws {
        try requireMount()
        prepare("mkdir sub") { s in Sys.call { mkdir(s("sub"), 0o755) } }
        guard let a = openBoth("", Linux.O_TMPFILE | O_WRONLY, 0o644), let b = openBoth("sub", Linux.O_TMPFILE | O_RDWR, 0o600) else { return }
        same("write a", on: a, expect: Outcome.success(5)) { Sys.write($0, Array("first".utf8)) }
        same("write b", on: b, expect: Outcome.success(6)) { Sys.write($0, Array("second".utf8)) }
        same("linkat /proc/self/fd/N AT_SYMLINK_FOLLOW", expect: Outcome.success()) { s in
            Sys.call { linkat(AT_FDCWD, "/proc/self/fd/\(fd(a, s))", AT_FDCWD, s("a.txt"), AT_SYMLINK_FOLLOW) }
        }
        same("linkat fd atEmptyPath", expect: Outcome.success()) { s in
            Sys.call { linkat(fd(b, s), "", AT_FDCWD, s("sub/b.txt"), atEmptyPath) }
        }
        same("linkat over an existing name", expect: Outcome.failure(EEXIST)) { s in
            Sys.call { linkat(fd(b, s), "", AT_FDCWD, s("a.txt"), atEmptyPath) }
        }
        same("fstat once linked", on: a) { Sys.fstat($0).0?.nlink ?? 9 }
        same("write a after linking", on: a, expect: Outcome.success(6)) { Sys.write($0, Array(" more\n".utf8)) }
        closeBoth(a)
        closeBoth(b)
        same("read a.txt", expect: Array("first more\n".utf8)) { s in Sys.contents(s("a.txt")).0 }
        same("read sub/b.txt", expect: Array("second".utf8)) { s in Sys.contents(s("sub/b.txt")).0 }
        XCTAssertEqual(Sys.contents(backing("a.txt")).0, Array("first more\n".utf8), "in the backing folder")
        XCTAssertEqual(Sys.contents(backing("sub/b.txt")).0, Array("second".utf8), "in the backing folder")
        sameMeta("a.txt")
        sameMeta("sub/b.txt")
    }

    /// O_EXCL: the unnamed file can never be linked (ENOENT), whichever way.
    func testOExclMeansItIsNeverLinked() throws {
        try requireMount()
        guard let fds = openBoth("", Linux.O_TMPFILE | O_WRONLY | O_EXCL, 0o644) else { return }
        same("write", on: fds, expect: Outcome.success(3)) { Sys.write($0, Array("abc".utf8)) }
        same("linkat /proc/self/fd/N", expect: Outcome.failure(ENOENT)) { s in
            Sys.call { linkat(AT_FDCWD, "/proc/self/fd/\(fd(fds, s))", AT_FDCWD, s("x.txt"), AT_SYMLINK_FOLLOW) }
        }
        same("linkat atEmptyPath", expect: Outcome.failure(ENOENT)) { s in
            Sys.call { linkat(fd(fds, s), "", AT_FDCWD, s("x.txt"), atEmptyPath) }
        }
        closeBoth(fds)
    }

    /// As nobody on an allow_other mount: an unnamed file is nobody's (and so is its name once
    /// linked), none can be made in a folder nobody may not write, and none linked into one.
    func testNobodysUnnamedFilesAreNobodysAndStayOutOfFoldersNobodyMayNotWrite() throws {
        try requireMount()
        prepare("mkdir pub") { s in Sys.call { mkdir(s("pub"), 0o755) } }
        prepare("chmod pub 777") { s in Sys.call { chmod(s("pub"), 0o777) } }
        prepare("mkdir priv") { s in Sys.call { mkdir(s("priv"), 0o755) } }
        sameAsNobody("O_TMPFILE in a folder nobody may not write", expect: .failure(EACCES)) { s in
            Sys.open(s("priv"), Linux.O_TMPFILE | O_RDWR, 0o600)
        }
        // Made, owned by nobody, refused a name in priv, linked into pub: each failed check its own errno.
        sameAsNobody("made, statted, linked", expect: .success()) { s in
            let fd = Int32(truncatingIfNeeded: Sys.open(s("pub"), Linux.O_TMPFILE | O_RDWR, 0o640).ret)
            guard fd >= 0 else { return .failure(errno) }
            guard Sys.write(fd, Array("nobody's".utf8)).ok else { return .failure(EIO) }
            guard let meta = Sys.fstat(fd).0, meta.uid == nobodyUID, meta.gid == nobodyGID else { return .failure(EPERM) }
            let intoPriv = Sys.call { linkat(fd, "", AT_FDCWD, s("priv/x.txt"), atEmptyPath) }
            let viaProc = Sys.call { linkat(AT_FDCWD, "/proc/self/fd/\(fd)", AT_FDCWD, s("priv/y.txt"), AT_SYMLINK_FOLLOW) }
            guard intoPriv == .failure(EACCES), viaProc == .failure(EACCES) else { return .failure(EBADE) }
            let named = Sys.call { linkat(AT_FDCWD, "/proc/self/fd/\(fd)", AT_FDCWD, s("pub/n.txt"), AT_SYMLINK_FOLLOW) }
            close(fd)
            return named
        }
        // Set-user-ID and set-group-ID asked for by nobody: kept or dropped as natively.
        sameAsNobody("set-ID bits", expect: .success()) { s in
            let fd = Int32(truncatingIfNeeded: Sys.open(s("pub"), Linux.O_TMPFILE | O_RDWR, 0o6755).ret)
            guard fd >= 0 else { return .failure(errno) }
            defer { close(fd) }
            return Sys.call { linkat(fd, "", AT_FDCWD, s("pub/setid"), atEmptyPath) }
        }
        sameMeta("pub/setid")
        let meta = Sys.lstat(backing("pub/n.txt")).0
        XCTAssertEqual(meta?.uid, nobodyUID, "the linked file is nobody's in the backing folder")
        XCTAssertEqual(meta?.gid, nobodyGID)
        XCTAssertEqual(Sys.contents(backing("pub/n.txt")).0, Array("nobody's".utf8))
        sameMeta("pub/n.txt")
    }
}

/// 10,000 unnamed files opened, written and closed at a descriptor limit of 1,024: the daemon keeps
/// none of their descriptors (each node goes when the kernel forgets the file) (`make test` runs it on both transports).
final class TmpfileDescriptorTests: MountTestCase {
    override var descriptorLimit: Int? { 1024 }

    func testTenThousandUnnamedFilesLeaveNoDescriptorsBehind() throws {
        try requireMount()
        XCTAssertEqual(fixture.daemonDescriptorLimit(), 1024, "the daemon must run with the lowered descriptor limit")
        let before = try XCTUnwrap(fixture.daemonOpenDescriptors())
        for i in 0..<10_000 {
            let o = Sys.open(mnt(""), Linux.O_TMPFILE | O_RDWR, 0o600)
            guard o.ok else { return XCTFail("unnamed file \(i): \(o)") }
            let fd = Int32(o.ret)
            let w = Sys.write(fd, [UInt8(i & 0xff)])
            close(fd)
            guard w.ok else { return XCTFail("writing unnamed file \(i): \(w)") }
        }
        // The kernel forgets each file once closed; a FORGET may come just after the close returned.
        var after = fixture.daemonOpenDescriptors() ?? -1
        let deadline = Date().addingTimeInterval(5)
        while after > before + 4 && Date() < deadline { usleep(50_000); after = fixture.daemonOpenDescriptors() ?? -1 }
        XCTAssertLessThanOrEqual(after, before + 4, "the daemon held \(before) descriptors before and \(after) after")
        XCTAssertEqual(Sys.readdir(backing("")).0.map(\.name).filter { $0 != "." && $0 != ".." && $0 != ".coordfs" }, [],
                       "nothing left in the backing folder")
    }
}
