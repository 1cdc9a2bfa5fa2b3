// The blocks a file system keeps for root (ext4 keeps 5% by default) stay root's through the mount.
// The daemon runs as root and writes for every user; with CAP_SYS_RESOURCE it may write into those
// blocks, and it lent that to everyone: on an `allow_other` mount, nobody filling a shared folder
// took the last blocks too, and then root's own saves (through the mount and beside it) failed with
// ENOSPC and the mount's event log was stuck, where natively nobody stops at ENOSPC with the reserve
// left for root. Now another user's writes and fallocates through the mount, and every passthrough
// write on a shared mount (the kernel writes with the credentials of the file's registration), stop
// where that user's native writes stop.
import Foundation
import Glibc
import XCTest
import LinuxGNU

final class RootReserveTests: MountTestCase {
    override var comparesTreesAtEnd: Bool { false }
    override var mountsInSetUp: Bool { false }

    /// The backing folder is a fresh 64 MiB ext4 file system with ext4's default reserve for root
    /// (5%, about 3 MiB), on a loop device the fixture's teardown unmounts; a shared `1777` folder
    /// in it for nobody.
    override func setUpWithError() throws {
        try super.setUpWithError()
        guard target.isMount, getuid() == 0 else { throw XCTSkip("mounts a loop device: needs root and the coordfs target") }
        let image = fixture.root + "/backing.ext4"
        guard let mkfs = Spawn.which("mkfs.ext4"), let mountTool = Spawn.which("mount"),
              FileManager.default.createFile(atPath: image, contents: nil), truncate(image, 64 << 20) == 0,
              Spawn.run(mkfs, ["-q", "-F", "-b", "4096", "-m", "5", image]).status == 0,
              Spawn.run(mountTool, ["-o", "loop", image, fixture.backing]).status == 0 else {
            throw XCTSkip("no ext4 image on a loop device here (mkfs.ext4, mount -o loop)")
        }
        chmod(fixture.backing, 0o755)
        XCTAssertEqual(mkdir(fixture.backing + "/shared", 0o777), 0)
        XCTAssertEqual(chmod(fixture.backing + "/shared", 0o1777), 0)
    }

    /// nobody writes through the mount (by kernel passthrough, the default) until ENOSPC. The
    /// kernel writes every passthrough open of a file with the credentials the daemon registered
    /// the file with, whoever opened it, so on a shared mount root's own passthrough writes stop
    /// where nobody's stop: root's save through the mount gets a clear ENOSPC, as a user's would.
    func testAnotherUserFillingTheDiskLeavesRootsReservedBlocks() throws {
        try fillAsNobody(options: ["allow_other"])
        XCTAssertEqual(Sys.put(mnt("report.txt"), pattern(512 << 10, seed: 7)), .failure(ENOSPC),
                       "root's passthrough save through the mount stops where other users' stop")
    }

    /// The same with every write served by the daemon (`passthrough=off`), and nobody's fallocate;
    /// root's writes through the mount then take the reserve as root's native writes do.
    func testAnotherUsersWritesTheDaemonServesLeaveRootsReservedBlocks() throws {
        try fillAsNobody(options: ["allow_other", "passthrough=off"], fallocate: true)
        let save = pattern(512 << 10, seed: 7)
        XCTAssertEqual(Sys.put(mnt("report.txt"), save), .success(), "root's save through the mount")
        XCTAssertTrue(Sys.contents(mnt("report.txt")).0 == save, "root's save reads back as written")
    }

    /// Mounts with `options`; nobody fills the shared folder through the mount until ENOSPC
    /// (then asks fallocate for 8 MiB more): it must stop with the reserve left, and root's native
    /// save and the mount's event log go on.
    private func fillAsNobody(options: [String], fallocate: Bool = false) throws {
        try fixture.mount(options: options)
        let before = space()
        XCTAssertGreaterThan(before.reserved, 2 << 20, "the image keeps about 3 MiB for root: \(before)")
        let filled = nobodyFills(mnt("shared/fill"), fallocate: fallocate)
        XCTAssertEqual(filled.outcome.err, ENOSPC, "nobody's writes (and fallocate) end with ENOSPC: \(filled)")
        let after = space()
        // ext4 says ENOSPC to nobody once its free blocks are down to the reserve; a few blocks of
        // the mount's log and store may go meanwhile.
        XCTAssertGreaterThanOrEqual(after.free, before.reserved * 3 / 4,
                                    "nobody wrote \(filled.outcome.ret) bytes into the blocks kept for root: \(before) then \(after)")
        XCTAssertLessThanOrEqual(filled.outcome.ret, before.available,
                                 "nobody wrote more than the \(before.available) bytes a user other than root may: \(filled.outcome.ret)")
        // Root's save beside the mount, as natively on a disk a user filled, and the mount's event
        // log records root's next change.
        XCTAssertEqual(Sys.put(backing("beside.txt"), pattern(256 << 10, seed: 8)), .success(), "root's save beside the mount")
        let logged = logBytes()
        XCTAssertEqual(Sys.call { mkdir(mnt("after"), 0o755) }, .success())
        eventually("the event log writes the records of root's mkdir after nobody filled the disk", within: 10) { logBytes() > logged }
    }

    /// The document store keeps the versions of another user's presented document as root: their
    /// bytes are copied without the reserve too. nobody presents its own 2 MiB document, fills what
    /// it may write, then saves the document in place three times (truncate, write 2 MiB), which
    /// natively reuses its own blocks (with 256 KiB of its fill given back: the daemon's own log and
    /// database writes meanwhile take free blocks as any root process's would): each save
    /// succeeds and the reserve stays free (the store
    /// keeps no version it has no room for). Before, the store's copy of the document took 2 MiB of
    /// the reserve and nobody's next write found none of its own blocks free: ENOSPC.
    func testVersionsOfAnotherUsersDocumentLeaveRootsReservedBlocks() throws {
        try fixture.mount(options: ["allow_other"])
        guard case .coordfs(let binary) = target, let setpriv = Spawn.which("setpriv") else { throw XCTSkip("needs coordfs and setpriv") }
        let before = space()
        let doc = mnt("shared/doc.bin")
        XCTAssertEqual(asUser { ChildOutcome(outcome: Sys.put(doc, self.pattern(2 << 20, seed: 3))) }.outcome, .success())
        let said = fixture.root + "/present.out"
        let presenter = try Spawn.start(setpriv, ["--reuid=65534", "--regid=65534", "--clear-groups", binary, "present", doc], stdout: said)
        defer { kill(presenter, SIGTERM); _ = Spawn.wait(presenter, timeout: 10) }
        eventually("nobody's presenter is registered", within: 10) { ((try? String(contentsOfFile: said, encoding: .utf8)) ?? "").contains("registered") }
        let filled = nobodyFills(mnt("shared/fill"), fallocate: false)
        XCTAssertEqual(filled.outcome.err, ENOSPC)
        // nobody gives back 256 KiB of its fill: room for what root's daemon writes meanwhile (its
        // event log, the store's database), which natively too takes the blocks others free. A
        // version of the 2 MiB document taken from the reserve still leaves nobody's writes short.
        let slack = asUser { ChildOutcome(outcome: Sys.call { truncate(self.mnt("shared/fill"), off_t(filled.outcome.ret) - (256 << 10)) }) }
        XCTAssertEqual(slack.outcome, .success())
        let saves = asUser {
            let bytes = [UInt8](repeating: 0x33, count: 2 << 20)
            for _ in 0..<3 {
                let fd = open(doc, O_RDWR)
                guard fd >= 0 else { return ChildOutcome(outcome: .failure(errno)) }
                defer { close(fd) }
                guard ftruncate(fd, 0) == 0 else { return ChildOutcome(outcome: .failure(errno)) }
                let o = Sys.write(fd, bytes, at: 0)
                guard o == .success(bytes.count) else { return ChildOutcome(outcome: o) }
            }
            return ChildOutcome(outcome: .success())
        }
        XCTAssertEqual(saves.outcome, .success(), "nobody's in-place saves of its own document, which natively reuse its own blocks")
        let after = space()
        XCTAssertGreaterThanOrEqual(after.free, before.reserved * 3 / 4, "the store's versions of nobody's document took the blocks kept for root: \(before) then \(after)")
        XCTAssertEqual(Sys.call { unlink(mnt("shared/fill")) }, .success())
    }

    /// nobody writes `path` through the mount until its writes fail (then, with `fallocate`, asks
    /// for 8 MiB more): the bytes written and the error.
    private func nobodyFills(_ path: String, fallocate: Bool) -> ChildOutcome {
        asUser {
            let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
            guard fd >= 0 else { return ChildOutcome(outcome: .failure(errno)) }
            defer { close(fd) }
            let block = [UInt8](repeating: 0x5a, count: 64 << 10)
            var total = 0
            while true {
                let n = write(fd, block, block.count)
                if n <= 0 { break }
                total += n
            }
            var err = errno
            if fallocate, err == ENOSPC, LinuxCalls.fallocate(fd, 0, total, 8 << 20) != 0 { err = errno }
            return ChildOutcome(outcome: Outcome(ret: total, err: err))
        }
    }

    /// The bytes of the event log's segments in the state folder.
    private func logBytes() -> Int {
        let folder = backing(".coordfs/log")
        let names = (try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []
        return names.filter { $0.hasPrefix("segment-") }.reduce(0) { $0 + (Sys.stat(folder + "/" + $1).0?.size ?? 0) }
    }

    /// The backing file system's free bytes, those a user other than root may take, and the
    /// difference: the blocks kept for root.
    private func space() -> (free: Int, available: Int, reserved: Int) {
        var s = statvfs()
        XCTAssertEqual(statvfs(fixture.backing, &s), 0)
        let free = Int(s.f_bfree) * Int(s.f_frsize), available = Int(s.f_bavail) * Int(s.f_frsize)
        return (free, available, free - available)
    }
}
