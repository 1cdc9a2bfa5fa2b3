import XCTest
import Foundation
import Glibc
@testable import CoordFS
@testable import Loopback
import FuseKit
import LinuxGNU

/// close(2) through the mount asks the daemon (FLUSH) only for files whose own close can report an
/// error: not for a backing folder on a local file system, yes for one on another FUSE mount.
final class QuietClosesTests: InProcessMountTestCase {
    func testLocalAndMemoryFileSystemsAreQuietAndFuseIsNot() throws {
        let tmpfs = root + "/tmpfs"
        mkdir(tmpfs, 0o755)
        XCTAssertEqual(mount("tmpfs", tmpfs, "tmpfs", 0, "size=1m"), 0, String(cString: strerror(errno)))
        defer { umount2(tmpfs, Int32(MNT_DETACH)) }
        try write("local.txt", "x")
        FileManager.default.createFile(atPath: tmpfs + "/memory.txt", contents: Data("x".utf8))
        let quiet = QuietCloses()
        for (path, expected) in [(tmpfs + "/memory.txt", true), (mnt + "/local.txt", false)] {
            let fd = open(path, O_RDONLY)
            XCTAssertGreaterThanOrEqual(fd, 0, path)
            var st = stat()
            XCTAssertEqual(fstat(fd, &st), 0)
            XCTAssertEqual(quiet.neverReportErrors(fd, device: st.st_dev), expected, path)
            XCTAssertEqual(quiet.neverReportErrors(-1, device: st.st_dev), expected, "known by device from then on")
            close(fd)
        }
    }

    func testClosingAFileOfALocalBackingFolderDoesNotAskTheDaemon() throws {
        let dir = open(backing, O_RDONLY | O_DIRECTORY)
        let type = LinuxCalls.fileSystemType(dir)
        close(dir)
        try XCTSkipUnless(LocalFileSystems.types.contains(type),
                          "the test folder is on a file system whose close may report errors (f_type \(String(type, radix: 16)))")
        let before = daemon.loopback.flushRequests
        for i in 0..<20 {
            let fd = open(mnt + "/f\(i)", O_CREAT | O_WRONLY, 0o644)
            XCTAssertGreaterThanOrEqual(fd, 0)
            XCTAssertEqual(Glibc.write(fd, "data", 4), 4)
            XCTAssertEqual(close(fd), 0)
            XCTAssertEqual(try String(contentsOfFile: mnt + "/f\(i)", encoding: .utf8), "data")
        }
        XCTAssertEqual(daemon.loopback.flushRequests, before, "no FLUSH for a file on f_type \(String(type, radix: 16))")
    }

    /// A mount whose backing folder is itself on a FUSE mount (this test's): its closes are flushed,
    /// and the flush's own close of the backing file is quiet again one level down.
    func testAMountOverAFuseFolderFlushesAtClose() throws {
        let inner = mnt + "/inner", outer = root + "/outer"
        mkdir(inner, 0o755); mkdir(outer, 0o755)
        var options = MountOptions()
        options.store.enabled = false
        options.eventLog.enabled = false
        // Without passthrough: the backing files the kernel holds for this mount's connection would
        // keep the first mount busy (its tearDown waiting) until this connection is gone.
        options.passthrough = false
        let second = try Daemon(plan: MountPreflight.plan(backing: inner, mountpoint: outer, options: options))
        try second.startInProcess()
        defer {
            second.stopAndWait()
            if MountTable.coordfsMount(at: outer) != nil { umount2(outer, Int32(MNT_DETACH)) }
        }
        let firstBefore = daemon.loopback.flushRequests, secondBefore = second.loopback.flushRequests
        let fd = open(outer + "/doc.txt", O_CREAT | O_WRONLY, 0o644)
        XCTAssertGreaterThanOrEqual(fd, 0)
        XCTAssertEqual(Glibc.write(fd, "nested", 6), 6)
        XCTAssertEqual(close(fd), 0)
        XCTAssertEqual(second.loopback.flushRequests, secondBefore + 1, "the close was flushed to the mount over FUSE")
        XCTAssertEqual(daemon.loopback.flushRequests, firstBefore, "and not by the mount over the local folder")
        XCTAssertEqual(try String(contentsOfFile: backing + "/inner/doc.txt", encoding: .utf8), "nested")
    }
}
