import Foundation
import Glibc
import XCTest

/// A create that fails leaves the backing folder as it found it, as a failed open(2) does natively:
/// the daemon makes the file (openat O_CREAT|O_EXCL) and then needs more (the node's own O_PATH
/// descriptor, a chown for another user); when that fails the file it made goes again, and a file
/// that was there before is never removed.
final class FailedCreateTests: InProcessMountTestCase {
    /// The daemon runs in this process here, so it shares the test's descriptor table: with only a
    /// few descriptors left, a create through the mount fails at one of its steps (the caller's own
    /// descriptor, the daemon's open of the new file, the node's descriptor, ...). Whichever step
    /// fails, a failed create leaves no file, and a create that succeeds leaves exactly its file.
    func testACreateThatFailsAtTheDescriptorLimitLeavesNoFile() throws {
        // This thread's first create through the mount: what the daemon keeps per caller is made.
        try "x".write(toFile: mnt + "/warm", atomically: false, encoding: .utf8)
        var saved = rlimit()
        XCTAssertEqual(getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &saved), 0)
        var failed = 0, made = 0
        for spare in 1...5 {
            for attempt in 0..<3 {
                let name = "f-\(spare)-\(attempt)"
                let highest = (try FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")).compactMap { Int($0) }.max() ?? 0
                var limit = saved
                limit.rlim_cur = rlim_t(highest + 1 + 64)
                XCTAssertEqual(setrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit), 0)
                var filler: [Int32] = []
                while true {
                    let fd = open("/dev/null", O_RDONLY | O_CLOEXEC)
                    if fd < 0 { break }
                    filler.append(fd)
                }
                for _ in 0..<min(spare, filler.count) { close(filler.removeLast()) }
                let fd = open(mnt + "/" + name, O_WRONLY | O_CREAT | O_CLOEXEC, 0o644)
                let error = errno
                filler.forEach { close($0) }
                if fd >= 0 { close(fd) }
                XCTAssertEqual(setrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &saved), 0)

                var st = stat()
                let inBacking = lstat(backing + "/" + name, &st) == 0
                if fd >= 0 {
                    made += 1
                    XCTAssertTrue(inBacking, "\(name): created through the mount, but not in the backing folder")
                    XCTAssertEqual(stat(mnt + "/" + name, &st), 0, "\(name): created, not seen through the mount")
                } else {
                    failed += 1
                    XCTAssertFalse(inBacking, "\(name): the create failed (\(String(cString: strerror(error)))) but left its file in the backing folder")
                    XCTAssertNotEqual(stat(mnt + "/" + name, &st), 0, "\(name): the create failed but the name shows through the mount")
                }
            }
        }
        XCTAssertGreaterThan(failed, 0, "no create failed: the limit did not bite")
        XCTAssertGreaterThan(made, 0, "no create succeeded even with 5 descriptors to spare")
        // The folder holds what it held and what was made, nothing else.
        let names = Set(try FileManager.default.contentsOfDirectory(atPath: backing)).subtracting([".coordfs"])
        XCTAssertEqual(names.count, made + 1, "backing folder: \(names.sorted())")
    }

    /// A create of a name that appeared beside the mount after the kernel looked it up (not
    /// O_EXCL) opens that file as open(2) would and keeps its content; a create with O_EXCL of it
    /// fails with EEXIST and removes nothing.
    func testACreateOfANameThatAppearedBesideTheMountKeepsThatFile() throws {
        var st = stat()
        XCTAssertNotEqual(stat(mnt + "/late", &st), 0)  // the kernel now knows "late" as missing
        try write("late", "beside")
        let excl = open(mnt + "/late", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        if excl >= 0 { close(excl) }
        XCTAssertTrue(excl < 0, "O_EXCL create of a name that exists beside the mount succeeded")
        XCTAssertEqual(try String(contentsOfFile: backing + "/late", encoding: .utf8), "beside", "an O_EXCL create that failed changed the file")
        let fd = open(mnt + "/late", O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        XCTAssertGreaterThanOrEqual(fd, 0, "create of a name that exists beside the mount: \(String(cString: strerror(errno)))")
        if fd >= 0 {
            var buffer = [UInt8](repeating: 0, count: 16)
            XCTAssertEqual(Glibc.read(fd, &buffer, 16), 6)
            close(fd)
        }
        XCTAssertEqual(try String(contentsOfFile: backing + "/late", encoding: .utf8), "beside")
    }
}
