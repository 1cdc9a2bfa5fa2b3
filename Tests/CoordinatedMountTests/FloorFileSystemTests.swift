import Foundation
import FuseKit
import Glibc
import XCTest

/// FuseKit's `FloorFileSystem` (the file system of `coordfs-bench floor`, the daemon that does no
/// work) mounted for real on both transports: the kernel's create, write, stat and unlink through
/// it behave as on a file system, with the requests the bench counts, and the mount always goes.
final class FloorFileSystemTests: XCTestCase {
    func testTheFloorServesCreateStatUnlinkThroughDevFuse() throws {
        try createStatUnlink(transport: .dev)
    }

    func testTheFloorServesCreateStatUnlinkThroughTheRing() throws {
        guard geteuid() == 0 else { throw XCTSkip("needs root") }
        let restore = try KernelRingSwitch.turnOn()
        defer { KernelRingSwitch.restore(restore) }
        try createStatUnlink(transport: .uring)
    }

    private func createStatUnlink(transport: FuseTransport) throws {
        guard geteuid() == 0, access("/dev/fuse", R_OK | W_OK) == 0 else { throw XCTSkip("needs root and /dev/fuse") }
        let root = NSTemporaryDirectory() + "coordfs-floor-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        let mnt = root + "/mnt"
        try FileManager.default.createDirectory(atPath: mnt, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: root) }
        let scratch = open(root + "/scratch", O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        XCTAssertGreaterThanOrEqual(scratch, 0)
        defer { close(scratch) }

        let fs = FloorFileSystem(scratchBacking: scratch)
        let ready = DispatchSemaphore(value: 0)
        let session = try FuseSession(fileSystem: fs, options: ["fsname=floor-test", "subtype=coordfs-test"], passthrough: true,
                                      spin: .microseconds(200), transport: transport, onInit: { ready.signal() })
        fs.setBackingFileRegistry(session)
        try session.mount(at: mnt)
        let served = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            _ = session.run(maxThreads: 8, handleSignals: false)
            served.signal()
        }
        defer {
            session.exit()
            if umount2(mnt, Int32(MNT_DETACH)) != 0 { session.unmount() }
            XCTAssertEqual(served.wait(timeout: .now() + 10), .success, "the session's loop ended at unmount")
            fs.setBackingFileRegistry(nil)
            let mounts = (try? String(contentsOfFile: "/proc/mounts", encoding: .utf8)) ?? ""
            XCTAssertFalse(mounts.contains(" \(mnt) "), "the floor mount is gone")
        }
        XCTAssertEqual(ready.wait(timeout: .now() + 10), .success, "INIT answered")
        XCTAssertEqual(session.transportInUse, transport == .dev ? .dev : .uring)

        let counters = session.requestCounters
        let before = FuseOperation.allCases.map { counters.value($0) }
        let folder = mnt + "/small"
        XCTAssertEqual(mkdir(folder, 0o755), 0, String(cString: strerror(errno)))
        let files = 5
        let data = [UInt8](repeating: 0x78, count: 100)
        for i in 0..<files {
            let fd = open(folder + "/f\(i)", O_CREAT | O_WRONLY | O_EXCL, 0o644)
            XCTAssertGreaterThanOrEqual(fd, 0, "create f\(i): \(String(cString: strerror(errno)))")
            XCTAssertEqual(write(fd, data, data.count), 100)
            XCTAssertEqual(close(fd), 0)
        }
        // A name that exists is refused to O_EXCL; a stat of each file sees a regular file.
        XCTAssertEqual(open(folder + "/f0", O_CREAT | O_WRONLY | O_EXCL, 0o644), -1)
        XCTAssertEqual(errno, EEXIST)
        for i in 0..<files {
            var st = stat()
            XCTAssertEqual(stat(folder + "/f\(i)", &st), 0)
            XCTAssertEqual(st.st_mode & S_IFMT, S_IFREG)
            XCTAssertEqual(st.st_mode & 0o777, 0o644)
        }
        for i in 0..<files { XCTAssertEqual(unlink(folder + "/f\(i)"), 0, String(cString: strerror(errno))) }
        var gone = stat()
        XCTAssertEqual(stat(folder + "/f0", &gone), -1)
        XCTAssertEqual(errno, ENOENT)
        XCTAssertEqual(unlink(folder + "/f0"), -1, "an unlinked name is gone")
        XCTAssertEqual(errno, ENOENT)
        XCTAssertEqual(rmdir(folder), 0)
        usleep(100_000)

        // The requests the bench counts: a lookup of each new name, its create, and its unlink;
        // writes pass through to the scratch file when the kernel took passthrough (no WRITE).
        let sent = zip(FuseOperation.allCases.map { counters.value($0) }, before).map { Int($0 - $1) }
        XCTAssertEqual(sent[FuseOperation.create.rawValue], files)
        XCTAssertEqual(sent[FuseOperation.unlink.rawValue], files)
        XCTAssertGreaterThanOrEqual(sent[FuseOperation.lookup.rawValue], files)
        XCTAssertEqual(sent[FuseOperation.write.rawValue], fs.writesPassThrough ? 0 : files)
        XCTAssertTrue(session.passthroughEnabled == fs.writesPassThrough, "creates carry the scratch file exactly when the mount took passthrough")
    }
}
