// The daemon on a nearly full disk whose blocks are smaller than a memory page (ext4 with 1 KiB
// blocks, as mke2fs makes every file system under 512 MiB): the document store's SQLite maps its WAL
// index (`metadata.sqlite-shm`) into memory and grew it with holes there, and the first store into a
// hole on a full disk killed the daemon with SIGBUS while it started (docs/semantics.md, "Disk space").
import Foundation
import Glibc
import TestSupport
import XCTest

final class FullDiskCLITests: LoopImageCLITestCase {
    override var imageSize: String { "16M" }
    override var mkfsOptions: [String] { ["-b", "1024", "-m", "0"] }

    private func freeKiB() -> Int {
        var s = statvfs()
        guard statvfs(imageRoot, &s) == 0 else { return -1 }
        return Int(s.f_bavail) * Int(s.f_frsize) / 1024
    }

    /// The image filled to its last block (a large file, then 1 KiB files), then freed 8 KiB at a
    /// time: at every level `coordfs mount` either mounts (and a write through it works, or fails with
    /// ENOSPC where the state took the last blocks) or refuses
    /// with status 1 and a message that says the disk is full; its daemon never dies starting (before:
    /// at 20, 32 and 48 KiB free it died of SIGBUS in SQLite's first write of the WAL index, and the
    /// CLI said only that the daemon did not come up).
    func testAMountOnANearlyFullDiskStartsOrIsRefusedNeverDies() throws {
        let filler = imageRoot + "/filler"
        let room = freeKiB() - 320
        XCTAssertGreaterThan(room, 0)
        try tool("/usr/bin/fallocate", ["-l", "\(room * 1024)", filler])
        var small: [String] = []
        let block = [UInt8](repeating: 0, count: 1024)
        while true {
            let name = imageRoot + "/f\(small.count)"
            let fd = open(name, O_WRONLY | O_CREAT | O_CLOEXEC, 0o644)
            guard fd >= 0 else { break }
            let n = write(fd, block, block.count)
            close(fd)
            small.append(name)
            if n != block.count { break }
        }
        XCTAssertLessThanOrEqual(freeKiB(), 1, "the image is full")
        var mounted = 0, refused = 0
        while !small.isEmpty {
            try? FileManager.default.removeItem(atPath: backing + "/.coordfs")
            let level = freeKiB()
            let r = coordfs("mount", backing, mnt)
            let said = r.stdout + r.stderr
            XCTAssertFalse(said.contains("did not come up"), "\(level) KiB free: the daemon died starting: \(said.suffix(400))")
            if r.status == 0 {
                mounted += 1
                // A write through it: done, or refused as natively when the state took the last blocks.
                let wrote = run("/usr/bin/python3", ["-c", "open('\(mnt!)/doc-\(level).txt', 'w').write('kept\\n')"])
                XCTAssertTrue(wrote.status == 0 || wrote.stderr.contains("No space left on device"), "\(level) KiB free, \(freeKiB()) KiB after the mount: \(wrote)")
                XCTAssertEqual(coordfs("unmount", mnt).status, 0)
                XCTAssertTrue(pollUntil(within: 10) { Self.mounts(under: self.root).isEmpty })
                if mounted >= 3 { break }
            } else {
                refused += 1
                XCTAssertEqual(r.status, 1, "\(level) KiB free: \(said)")
                XCTAssertTrue(said.contains("No space left on device") || said.contains("disk is full"), "\(level) KiB free: \(said)")
                XCTAssertTrue(Self.mounts(under: root).isEmpty, "\(level) KiB free: nothing mounted")
            }
            for _ in 0..<8 { if let f = small.popLast() { unlink(f) } }
        }
        XCTAssertGreaterThan(refused, 10, "levels too full to mount were tried")
        XCTAssertGreaterThan(mounted, 0, "a level with room for the state mounted")
    }
}
