// The reserved state folder BACKING/.coordfs is invisible and unreachable through the mount: not
// listed, not found, and it cannot be created, renamed onto, renamed away or removed.
import Glibc
import XCTest

final class StateFolderTests: MountTestCase {
    private let state = ".coordfs"

    override func setUpWithError() throws {
        // Checked before mounting, so a skipped test leaves no mount behind.
        guard try MountTarget.fromEnvironment().isCoordFS else { throw XCTSkip("coordfs-specific: COORDFS_MOUNT_TARGET is not coordfs") }
        try super.setUpWithError()
        // The daemon creates it; make sure it exists with something inside for the removal checks.
        var st = stat()
        if lstat(backing(state), &st) != 0 { mkdir(backing(state), 0o700) }
    }

    private func assertStateFolderIntact(_ op: String, file: StaticString = #filePath, line: UInt = #line) {
        let (meta, o) = Sys.lstat(backing(state))
        XCTAssertEqual(meta?.type, S_IFDIR, "\(op): BACKING/.coordfs is gone or replaced (\(o))", file: file, line: line)
    }

    func testNotListedAndNotFound() {
        let names = Sys.readdir(mnt.root).0.map(\.name)
        XCTAssertFalse(names.contains(state), "the mount root lists .coordfs: \(names)")
        XCTAssertEqual(Sys.lstat(mnt(state)).1, .failure(ENOENT), "lstat MNT/.coordfs")
        XCTAssertEqual(Sys.open(mnt(state), O_RDONLY), .failure(ENOENT), "open MNT/.coordfs")
        XCTAssertEqual(Sys.lstat(mnt(state + "/anything")).1, .failure(ENOENT), "lstat MNT/.coordfs/anything")
        XCTAssertEqual(Sys.readdir(mnt(state)).1, .failure(ENOENT), "opendir MNT/.coordfs")
        XCTAssertEqual(Sys.getxattr(mnt(state), "user.x").1, .failure(ENOENT), "getxattr MNT/.coordfs")
        XCTAssertEqual(Sys.call { access(mnt(state), F_OK) }, .failure(ENOENT), "access MNT/.coordfs")
        // Names that only look alike are ordinary.
        for name in [".coordfs2", ".COORDFS", "coordfs"] {
            XCTAssertEqual(Sys.call { mkdir(mnt(name), 0o755) }, .success(), "mkdir MNT/\(name)")
        }
        XCTAssertEqual(Sys.call { mkdir(native(".coordfs2"), 0o755) }, .success())
        XCTAssertEqual(Sys.call { mkdir(native(".COORDFS"), 0o755) }, .success())
        XCTAssertEqual(Sys.call { mkdir(native("coordfs"), 0o755) }, .success())
        // Only the top-level folder is reserved: a subfolder may hold its own .coordfs.
        prepare("mkdir sub") { s in Sys.call { mkdir(s("sub"), 0o755) } }
        same("mkdir sub/.coordfs", expect: Outcome.success()) { s in Sys.call { mkdir(s("sub/.coordfs"), 0o755) } }
        same("list sub") { s in Sys.readdir(s("sub")).0 }
        assertStateFolderIntact("lookups")
    }

    func testCannotBeCreatedRenamedOntoOrRemoved() {
        prepare("put f") { s in Sys.put(s("f"), [1]) }
        prepare("mkdir d") { s in Sys.call { mkdir(s("d"), 0o755) } }
        let attempts: [(String, () -> Outcome)] = [
            ("mkdir MNT/.coordfs", { Sys.call { mkdir(self.mnt(self.state), 0o755) } }),
            ("create MNT/.coordfs", { Sys.open(self.mnt(self.state), O_CREAT | O_WRONLY) }),
            ("create MNT/.coordfs/x", { Sys.open(self.mnt(self.state + "/x"), O_CREAT | O_WRONLY) }),
            ("mkfifo MNT/.coordfs", { Sys.call { mkfifo(self.mnt(self.state), 0o644) } }),
            ("symlink MNT/.coordfs", { Sys.call { symlink("f", self.mnt(self.state)) } }),
            ("link f MNT/.coordfs", { Sys.call { link(self.mnt("f"), self.mnt(self.state)) } }),
            ("rename f onto MNT/.coordfs", { Sys.call { rename(self.mnt("f"), self.mnt(self.state)) } }),
            ("rename d onto MNT/.coordfs", { Sys.call { rename(self.mnt("d"), self.mnt(self.state)) } }),
            ("RENAME_NOREPLACE f to MNT/.coordfs", { Sys.rename2(self.mnt("f"), self.mnt(self.state), Linux.RENAME_NOREPLACE) }),
            ("RENAME_EXCHANGE d with MNT/.coordfs", { Sys.rename2(self.mnt("d"), self.mnt(self.state), Linux.RENAME_EXCHANGE) }),
            ("rename MNT/.coordfs away", { Sys.call { rename(self.mnt(self.state), self.mnt("stolen")) } }),
            ("rmdir MNT/.coordfs", { Sys.call { rmdir(self.mnt(self.state)) } }),
            ("unlink MNT/.coordfs", { Sys.call { unlink(self.mnt(self.state)) } }),
            ("chmod MNT/.coordfs", { Sys.call { chmod(self.mnt(self.state), 0o777) } }),
            ("setxattr MNT/.coordfs", { Sys.setxattr(self.mnt(self.state), "user.x", [1]) }),
        ]
        for (op, attempt) in attempts {
            let o = attempt()
            XCTAssertFalse(o.ok, "\(op) succeeded through the mount; it must be refused")
            assertStateFolderIntact(op)
        }
        // Nothing the attempts named appeared or vanished.
        XCTAssertEqual(Sys.lstat(mnt("f")).1, .success(), "f must survive the refused renames")
        XCTAssertEqual(Sys.lstat(mnt("d")).1, .success(), "d must survive the refused renames")
        XCTAssertEqual(Sys.lstat(backing("stolen")).1, .failure(ENOENT), "the state folder was renamed away")
        XCTAssertFalse(Sys.readdir(mnt.root).0.map(\.name).contains(state))
        // The root's link count is that of the visible tree.
        sameMeta("")
    }
}
