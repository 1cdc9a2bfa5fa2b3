import XCTest
import Foundation
import Glibc
import FuseKit

/// `coordfs unmount M && umount FS`: once a session's loop has ended, the kernel holds none of the
/// backing folder's files for it. Each file opened with kernel passthrough is registered with the
/// kernel as a backing file, and the kernel keeps a registered file until the daemon closes it or
/// the connection is freed; with FUSE over io_uring the connection is freed after the ring's
/// asynchronous teardown, which may come after the daemon's process has ended (the backing file
/// system was then busy now and then in `MountCommandTests.testAfterUnmountReturnsTheBackingFileSystemIsFree`).
/// So the session closes what it registered when its loop ends. Here the test's process keeps the
/// connection's /dev/fuse descriptor after the loop ended (the session is not let go yet), and the
/// file system (FuseKit's `FloorFileSystem` mirroring a folder) keeps no descriptor of its own: a
/// registered file left open would keep the backing file system busy every time, on both transports.
final class BackingFilesAtSessionEndTests: XCTestCase {
    func testNoBackingFileIsHeldOnceTheLoopEndedThroughDevFuse() throws { try backingFilesLetGo(transport: .dev) }

    func testNoBackingFileIsHeldOnceTheLoopEndedThroughTheRing() throws {
        guard geteuid() == 0 else { throw XCTSkip("needs root") }
        let restore = try KernelRingSwitch.turnOn()
        defer { KernelRingSwitch.restore(restore) }
        try backingFilesLetGo(transport: .uring)
    }

    private func backingFilesLetGo(transport: FuseTransport) throws {
        guard geteuid() == 0, access("/dev/fuse", R_OK | W_OK) == 0 else { throw XCTSkip("needs root and /dev/fuse") }
        let root = NSTemporaryDirectory() + "coordfs-backing-end-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        let fs = root + "/fs", mnt = root + "/mnt"
        try FileManager.default.createDirectory(atPath: fs, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: mnt, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: root) }
        guard mount("tmpfs", fs, "tmpfs", 0, nil) == 0 else { throw XCTSkip("cannot mount a tmpfs: \(String(cString: strerror(errno)))") }
        var fsMounted = true
        defer { if fsMounted { umount2(fs, Int32(MNT_DETACH)) } }
        for i in 0..<20 { try "file \(i)\n".write(toFile: fs + "/f\(i)", atomically: false, encoding: .utf8) }

        let floor = FloorFileSystem(mirroring: fs)
        let ready = DispatchSemaphore(value: 0)
        var session: FuseSession? = try FuseSession(fileSystem: floor, options: ["fsname=backing-end-test", "subtype=coordfs-test"],
                                                    passthrough: true, spin: .microseconds(200), transport: transport,
                                                    onInit: { ready.signal() })
        floor.setBackingFileRegistry(session)
        try session!.mount(at: mnt)
        let served = DispatchSemaphore(value: 0)
        Thread.detachNewThread { [session] in
            _ = session!.run(maxThreads: 8, handleSignals: false)
            served.signal()
        }
        var loopEnded = false
        defer {
            if !loopEnded {
                session?.exit()
                if umount2(mnt, Int32(MNT_DETACH)) != 0 { session?.unmount() }
                _ = served.wait(timeout: .now() + 10)
            }
            floor.setBackingFileRegistry(nil)
            session = nil
        }
        XCTAssertEqual(ready.wait(timeout: .now() + 10), .success, "INIT answered")
        guard session!.passthroughEnabled else { throw XCTSkip("the kernel took no passthrough: no backing files to hold") }
        for i in 0..<20 { XCTAssertEqual(try String(contentsOfFile: mnt + "/f\(i)", encoding: .utf8), "file \(i)\n") }
        XCTAssertEqual(floor.mirroredPassthroughOpens, 20, "each file opened with its real file as the backing file")

        session!.exit()
        XCTAssertEqual(umount2(mnt, Int32(MNT_DETACH)), 0)
        loopEnded = served.wait(timeout: .now() + 10) == .success
        XCTAssertTrue(loopEnded, "the session's loop ended at unmount")
        // The session (and its /dev/fuse descriptor) is still here.
        guard umount2(fs, 0) == 0 else {
            return XCTFail("the backing files' file system is busy after the session's loop ended: \(String(cString: strerror(errno)))")
        }
        fsMounted = false
    }
}
