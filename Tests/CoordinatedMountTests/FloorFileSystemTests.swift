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

    /// Mounts `fs` (a floor file system) on `transport` at a new folder, runs `body` with the
    /// mountpoint and the session, and always unmounts, checking that the mount is gone.
    private func withFloor(_ fs: FloorFileSystem, transport: FuseTransport, _ body: (String, FuseSession) throws -> Void) throws {
        let root = NSTemporaryDirectory() + "coordfs-floor-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        let mnt = root + "/mnt"
        try FileManager.default.createDirectory(atPath: mnt, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: root) }
        let ready = DispatchSemaphore(value: 0)
        let session = try FuseSession(fileSystem: fs, options: ["fsname=floor-test", "subtype=coordfs-test"], passthrough: true,
                                      spin: .microseconds(200), transport: transport, onInit: { ready.signal() })
        fs.setBackingFileRegistry(session)
        defer { fs.setBackingFileRegistry(nil) }
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
            let mounts = (try? String(contentsOfFile: "/proc/mounts", encoding: .utf8)) ?? ""
            XCTAssertFalse(mounts.contains(" \(mnt) "), "the floor mount is gone")
        }
        XCTAssertEqual(ready.wait(timeout: .now() + 10), .success, "INIT answered")
        XCTAssertEqual(session.transportInUse, transport == .dev ? .dev : .uring)
        try body(mnt, session)
    }

    /// Runs a tool; its standard output and exit status.
    private func tool(_ argv: [String], in dir: String? = nil) throws -> (out: String, status: Int32) {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        p.arguments = argv
        if let dir { p.currentDirectoryURL = URL(fileURLWithPath: dir) }
        let pipe = Pipe()
        p.standardOutput = pipe
        try p.run()
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        return (String(decoding: data, as: UTF8.self), p.terminationStatus)
    }

    private func scratchFolder() throws -> String {
        let dir = NSTemporaryDirectory() + "coordfs-floor-src-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        return dir
    }

    private func createStatUnlink(transport: FuseTransport) throws {
        guard geteuid() == 0, access("/dev/fuse", R_OK | W_OK) == 0 else { throw XCTSkip("needs root and /dev/fuse") }
        let src = try scratchFolder()
        defer { try? FileManager.default.removeItem(atPath: src) }
        let scratch = open(src + "/scratch", O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        XCTAssertGreaterThanOrEqual(scratch, 0)
        defer { close(scratch) }
        let fs = FloorFileSystem(scratchBacking: scratch)
        try withFloor(fs, transport: transport) { mnt, session in
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

    // MARK: the other workloads of issue 23's targets

    func testTarUnpacksAndDeletesThroughTheFloorThroughDevFuse() throws { try tarUnpackAndDelete(transport: .dev) }

    func testTarUnpacksAndDeletesThroughTheFloorThroughTheRing() throws {
        guard geteuid() == 0 else { throw XCTSkip("needs root") }
        let restore = try KernelRingSwitch.turnOn()
        defer { KernelRingSwitch.restore(restore) }
        try tarUnpackAndDelete(transport: .uring)
    }

    /// bench's tar workload in small: a tarball of folders, files with data and a symlink, unpacked
    /// into the floor (tar's mkdir, create, write, chown, chmod, utimens, symlink), listed through the
    /// mount as the tarball lists it, then `rm -rf` (listings, unlink, rmdir) leaves nothing.
    private func tarUnpackAndDelete(transport: FuseTransport) throws {
        guard geteuid() == 0, access("/dev/fuse", R_OK | W_OK) == 0 else { throw XCTSkip("needs root and /dev/fuse") }
        let src = try scratchFolder()
        defer { try? FileManager.default.removeItem(atPath: src) }
        for d in ["tree/a/b", "tree/c"] { try FileManager.default.createDirectory(atPath: src + "/" + d, withIntermediateDirectories: true) }
        for i in 0..<40 { try Data(repeating: UInt8(i), count: 100 + i).write(to: URL(fileURLWithPath: src + "/tree/\(i % 2 == 0 ? "a/b" : "c")/f\(i).h")) }
        XCTAssertEqual(symlink("b/f0.h", src + "/tree/a/link"), 0)
        XCTAssertEqual(try tool(["tar", "-C", src, "-cf", src + "/t.tar", "tree"]).status, 0)
        let scratch = open(src + "/scratch", O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        defer { close(scratch) }
        let fs = FloorFileSystem(scratchBacking: scratch)
        try withFloor(fs, transport: transport) { mnt, session in
            let counters = session.requestCounters
            let before = FuseOperation.allCases.map { counters.value($0) }
            XCTAssertEqual(try tool(["tar", "-C", mnt, "-xf", src + "/t.tar"]).status, 0, "tar unpacks into the floor")
            let held = Set(try tool(["tar", "-tf", src + "/t.tar"]).out.split(separator: "\n").map { String($0).trimmingCharacters(in: CharacterSet(charactersIn: "/")) })
            let listed = Set(try tool(["find", "tree"], in: mnt).out.split(separator: "\n").map(String.init))
            XCTAssertEqual(listed, held, "the mount lists what the tarball holds")
            XCTAssertEqual(held.count, 40 + 4 + 1)
            var st = stat()
            XCTAssertEqual(lstat(mnt + "/tree/a/link", &st), 0)
            XCTAssertEqual(st.st_mode & S_IFMT, S_IFLNK)
            XCTAssertEqual(try tool(["readlink", mnt + "/tree/a/link"]).out, "b/f0.h\n")
            XCTAssertEqual(stat(mnt + "/tree/c/f1.h", &st), 0)
            XCTAssertEqual(st.st_mode & 0o777, 0o644, "tar's chmod is kept")
            XCTAssertEqual(try tool(["rm", "-rf", mnt + "/tree"]).status, 0, "rm -rf through the floor")
            XCTAssertEqual(lstat(mnt + "/tree", &st), -1)
            XCTAssertEqual(errno, ENOENT)
            XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: mnt), [], "nothing is left")
            let sent = zip(FuseOperation.allCases.map { counters.value($0) }, before).map { Int($0 - $1) }
            XCTAssertEqual(sent[FuseOperation.create.rawValue], 40)
            XCTAssertEqual(sent[FuseOperation.unlink.rawValue], 41)
            XCTAssertEqual(sent[FuseOperation.rmdir.rawValue], 4)
            XCTAssertEqual(sent[FuseOperation.write.rawValue], fs.writesPassThrough ? 0 : 40, "data through passthrough exactly when the mount took it")
        }
    }

    func testLsAndGrepOfAMirroredFolderThroughDevFuse() throws { try lsAndGrep(transport: .dev) }

    func testLsAndGrepOfAMirroredFolderThroughTheRing() throws {
        guard geteuid() == 0 else { throw XCTSkip("needs root") }
        let restore = try KernelRingSwitch.turnOn()
        defer { KernelRingSwitch.restore(restore) }
        try lsAndGrep(transport: .uring)
    }

    /// bench's `ls -l` and `grep -r` in small: the floor mirrors a real folder (3,000 empty files and
    /// a small source tree); `ls -l` lists every file with its mode, and `grep -r` finds the one file
    /// holding a known string, its data read by the kernel from the real file (passthrough), and
    /// only the opens of the first walk register a backing file.
    private func lsAndGrep(transport: FuseTransport) throws {
        guard geteuid() == 0, access("/dev/fuse", R_OK | W_OK) == 0 else { throw XCTSkip("needs root and /dev/fuse") }
        let src = try scratchFolder()
        defer { try? FileManager.default.removeItem(atPath: src) }
        let files = 3_000
        try FileManager.default.createDirectory(atPath: src + "/lsl", withIntermediateDirectories: true)
        for i in 0..<files { close(open(src + "/lsl/file-\(i)", O_CREAT | O_WRONLY | O_CLOEXEC, 0o640)) }
        try FileManager.default.createDirectory(atPath: src + "/inc/sys", withIntermediateDirectories: true)
        for i in 0..<30 {
            let text = i == 17 ? "int a;\n/* coordfs floor needle */\n" : "int b\(i);\n"
            try text.write(toFile: src + "/inc/\(i % 3 == 0 ? "sys/" : "")h\(i).h", atomically: false, encoding: .utf8)
        }
        let fs = FloorFileSystem(mirroring: src)
        try withFloor(fs, transport: transport) { mnt, session in
            let counters = session.requestCounters
            let ls = try tool(["ls", "-l", mnt + "/lsl"])
            XCTAssertEqual(ls.status, 0)
            let lines = ls.out.split(separator: "\n").filter { $0.hasPrefix("-") }
            XCTAssertEqual(lines.count, files, "ls -l sees every file")
            XCTAssertTrue(lines.allSatisfy { $0.hasPrefix("-rw-r-----") }, "with its mode")
            let before = FuseOperation.allCases.map { counters.value($0) }
            XCTAssertEqual(try tool(["ls", "-l", mnt + "/lsl"]).out, ls.out, "a second listing the same")
            let sent = zip(FuseOperation.allCases.map { counters.value($0) }, before).map { Int($0 - $1) }
            XCTAssertGreaterThanOrEqual(sent[FuseOperation.getxattr.rawValue], files, "ls -l asks each file's attributes (ENODATA)")

            let first = try tool(["grep", "-r", "-l", "coordfs floor needle", mnt + "/inc"])
            XCTAssertEqual(first.status, 0)
            XCTAssertEqual(first.out, mnt + "/inc/h17.h\n", "grep -r finds the one file holding the string")
            let none = try tool(["grep", "-r", "-l", "coordfs floor: no such text", mnt + "/inc"])
            XCTAssertEqual(none.status, 1)
            XCTAssertEqual(none.out, "")
            if session.passthroughEnabled {
                // 30 opens in each walk; each file's backing file registered once, at its first.
                XCTAssertEqual(fs.mirroredPassthroughOpens, 60)
            }
            var fd = open(mnt + "/inc/h1.h", O_WRONLY)
            XCTAssertEqual(fd, -1, "a mirrored file opens read-only")
            XCTAssertEqual(errno, EROFS)
            fd = open(mnt + "/inc/h1.h", O_RDONLY)
            XCTAssertGreaterThanOrEqual(fd, 0)
            var buf = [UInt8](repeating: 0, count: 64)
            XCTAssertEqual(read(fd, &buf, 64), 8, "the real file's data")
            XCTAssertEqual(String(decoding: buf[0..<7], as: UTF8.self), "int b1;")
            close(fd)
        }
    }

    // MARK: floor+backing: the floor storing its files in a real folder

    func testTarThroughTheFloorStoresTheFilesInTheBackingFolderThroughDevFuse() throws { try storedTar(transport: .dev) }

    func testTarThroughTheFloorStoresTheFilesInTheBackingFolderThroughTheRing() throws {
        guard geteuid() == 0 else { throw XCTSkip("needs root") }
        let restore = try KernelRingSwitch.turnOn()
        defer { KernelRingSwitch.restore(restore) }
        try storedTar(transport: .uring)
    }

    /// `FloorFileSystem(storingIn:)` (bench's floor+backing): a tarball of folders (one empty), files
    /// with data and their own modes, and a symlink, unpacked through the mount, leaves exactly the
    /// tarball's items in the real backing folder, with their data, modes, times and the link's
    /// target; the mount shows each file's real size; a rename through the mount renames the real
    /// file; `rm -rf` through the mount leaves the backing folder empty.
    private func storedTar(transport: FuseTransport) throws {
        guard geteuid() == 0, access("/dev/fuse", R_OK | W_OK) == 0 else { throw XCTSkip("needs root and /dev/fuse") }
        let src = try scratchFolder()
        defer { try? FileManager.default.removeItem(atPath: src) }
        for d in ["tree/a/b", "tree/c", "tree/empty"] { try FileManager.default.createDirectory(atPath: src + "/" + d, withIntermediateDirectories: true) }
        for i in 0..<40 {
            let path = src + "/tree/\(i % 2 == 0 ? "a/b" : "c")/f\(i).h"
            try Data(repeating: UInt8(i), count: 100 + 37 * i).write(to: URL(fileURLWithPath: path))
            XCTAssertEqual(chmod(path, i % 5 == 0 ? 0o600 : i % 7 == 0 ? 0o755 : 0o644), 0)
        }
        XCTAssertEqual(symlink("b/f0.h", src + "/tree/a/link"), 0)
        XCTAssertEqual(try tool(["tar", "-C", src, "-cf", src + "/t.tar", "tree"]).status, 0)
        let backing = src + "/backing"
        try FileManager.default.createDirectory(atPath: backing, withIntermediateDirectories: true)
        let fs = try FloorFileSystem(storingIn: backing)
        defer { fs.closeFolders() }
        XCTAssertTrue(fs.stores)
        try withFloor(fs, transport: transport) { mnt, session in
            let counters = session.requestCounters
            let before = FuseOperation.allCases.map { counters.value($0) }
            XCTAssertEqual(try tool(["tar", "-C", mnt, "-xf", src + "/t.tar"]).status, 0, "tar unpacks into the floor")
            let held = Set(try tool(["tar", "-tf", src + "/t.tar"]).out.split(separator: "\n").map { String($0).trimmingCharacters(in: CharacterSet(charactersIn: "/")) })
            XCTAssertEqual(held.count, 40 + 5 + 1)
            let stored = Set(try tool(["find", "tree"], in: backing).out.split(separator: "\n").map(String.init))
            XCTAssertEqual(stored, held, "the backing folder holds exactly what the tarball holds")
            let diff = try tool(["diff", "-r", "--no-dereference", src + "/tree", backing + "/tree"])
            XCTAssertEqual(diff.status, 0, "the real files hold the tarball's data and the link its target: \(diff.out)")
            for i in 0..<40 {
                let rel = "/tree/\(i % 2 == 0 ? "a/b" : "c")/f\(i).h"
                var want = stat(), got = stat(), shown = stat()
                XCTAssertEqual(stat(src + rel, &want), 0)
                XCTAssertEqual(stat(backing + rel, &got), 0)
                XCTAssertEqual(got.st_mode & 0o7777, want.st_mode & 0o7777, "tar's chmod made on the real file \(rel)")
                XCTAssertEqual(got.st_mtim.tv_sec, want.st_mtim.tv_sec, "tar's utimens made on the real file \(rel)")
                XCTAssertEqual(stat(mnt + rel, &shown), 0)
                XCTAssertEqual(shown.st_size, want.st_size, "the mount shows the real size of \(rel)")
                XCTAssertEqual(shown.st_mode & 0o7777, want.st_mode & 0o7777)
            }
            var st = stat()
            XCTAssertEqual(lstat(backing + "/tree/a/link", &st), 0)
            XCTAssertEqual(st.st_mode & S_IFMT, S_IFLNK)
            XCTAssertEqual(rename(mnt + "/tree/c/f1.h", mnt + "/tree/empty/moved.h"), 0, String(cString: strerror(errno)))
            XCTAssertEqual(lstat(backing + "/tree/c/f1.h", &st), -1, "the real file left its old name")
            XCTAssertEqual(stat(backing + "/tree/empty/moved.h", &st), 0, "and has the new one")
            XCTAssertEqual(st.st_size, 137)
            XCTAssertEqual(try tool(["rm", "-rf", mnt + "/tree"]).status, 0, "rm -rf through the floor")
            XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: mnt), [], "nothing is left in the mount")
            XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: backing), [], "nor in the backing folder")
            let sent = zip(FuseOperation.allCases.map { counters.value($0) }, before).map { Int($0 - $1) }
            XCTAssertEqual(sent[FuseOperation.create.rawValue], 40)
            XCTAssertEqual(sent[FuseOperation.mkdir.rawValue], 5)
            XCTAssertEqual(sent[FuseOperation.unlink.rawValue], 41)
            XCTAssertEqual(sent[FuseOperation.rmdir.rawValue], 5)
            XCTAssertEqual(sent[FuseOperation.write.rawValue], fs.writesPassThrough ? 0 : 40, "data through passthrough exactly when the mount took it")
            XCTAssertEqual(session.passthroughEnabled, fs.writesPassThrough, "creates carry the real file exactly when the mount took passthrough")
        }
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: backing), [], "the backing folder stays empty after the unmount")
    }
}
