import Foundation
import Glibc
import XCTest
@testable import Linux

/// The one reader of `/proc/PID/status` (`ProcessStatus`): real processes, a process that is gone,
/// files cut short or not as the kernel writes them, and group lists far larger than its first read.
final class ProcessStatusTests: XCTestCase {
    func status(_ text: String) -> ProcessStatus { ProcessStatus(parsing: Array(text.utf8)) }

    func testThisProcessIsReadAsTheKernelSaysItIs() throws {
        let me = try XCTUnwrap(ProcessStatus.read(pid: getpid()))
        XCTAssertEqual(me.uids, .init(real: getuid(), effective: geteuid(), saved: geteuid(), filesystem: geteuid()))
        XCTAssertEqual(me.gids?.real, getgid())
        XCTAssertEqual(me.gids?.effective, getegid())
        var groups = [gid_t](repeating: 0, count: 65536)
        let count = getgroups(Int32(groups.count), &groups)
        XCTAssertEqual(me.groups.map(Set.init), Set(groups.prefix(Int(max(count, 0)))))
    }

    func testAProcessThatIsGoneOrNeverWasHasNoStatus() {
        XCTAssertNil(ProcessStatus.read(pid: Int32.max))
        XCTAssertNil(ProcessStatus.read(pid: 0))
        XCTAssertNil(ProcessStatus.read(pid: -1))
        XCTAssertNil(ProcessStatus.read(path: "/nonexistent/status"))
        // A process that ended: its pid is not reused within the test (pids wrap at pid_max).
        let child = Process()
        child.executableURL = URL(fileURLWithPath: "/bin/true")
        XCTAssertNoThrow(try child.run())
        child.waitUntilExit()
        XCTAssertNil(ProcessStatus.read(pid: child.processIdentifier))
    }

    func testTheLinesAsTheKernelWritesThem() {
        let s = status("Name:\tcat\nUmask:\t0022\nUid:\t1000\t1001\t1002\t1003\nGid:\t100\t101\t102\t103\nFDSize:\t256\nGroups:\t4 24 27 4294967295 \nNStgid:\t1\n")
        XCTAssertEqual(s.uids, .init(real: 1000, effective: 1001, saved: 1002, filesystem: 1003))
        XCTAssertEqual(s.gids, .init(real: 100, effective: 101, saved: 102, filesystem: 103))
        XCTAssertEqual(s.groups, [4, 24, 27, UInt32.max])
        // No supplementary group: the line is there, empty (or a lone space or tab).
        XCTAssertEqual(status("Groups:\t\n").groups, [])
        XCTAssertEqual(status("Groups:\t \n").groups, [])
        XCTAssertEqual(status("Groups:\n").groups, [])
        // A name that is not UTF-8 is no matter.
        XCTAssertEqual(ProcessStatus(parsing: Array("Name:\t".utf8) + [0xFF, 0xFE, 0x0A] + Array("Groups:\t7\n".utf8)).groups, [7])
    }

    func testAFileCutShortGivesNothingCutShort() {
        let full = "Uid:\t1000\t1000\t1000\t1000\nGid:\t1000\t1000\t1000\t1000\nGroups:\t4 24 2700\nNStgid:\t5\n"
        let bytes = Array(full.utf8)
        let uidLineEnd = bytes.firstIndex(of: 0x0A)! + 1
        for end in 0...bytes.count {
            let s = ProcessStatus(parsing: Array(bytes[0..<end]))
            let text = String(decoding: bytes[0..<end], as: UTF8.self)
            // Each line counts once its newline is there, and never before.
            XCTAssertEqual(s.uids != nil, end >= uidLineEnd, "cut at \(end): \(text.debugDescription)")
            if let groups = s.groups { XCTAssertEqual(groups, [4, 24, 2700], "cut at \(end)") }
            XCTAssertEqual(s.groups != nil, text.contains("2700\n"), "cut at \(end)")
        }
    }

    func testLinesThatAreNotTheKernelsGiveNothing() {
        XCTAssertNil(status("Uid:\t0\t0\t0\n").uids, "three ids")
        XCTAssertNil(status("Uid:\t0\t0\t0\t0\t0\n").uids, "five ids")
        XCTAssertNil(status("Uid:\t0\t0\t-1\t0\n").uids, "a sign")
        XCTAssertNil(status("Uid:\t0\t0\t4294967296\t0\n").uids, "past 32 bits")
        XCTAssertNil(status("Uid:\t0\t0\t99999999999999999999999\t0\n").uids, "far past 64 bits")
        XCTAssertNil(status("Groups:\t4 x 5\n").groups, "a word among the groups")
        XCTAssertNil(status("Groups:\t4 24\r\n").groups, "a carriage return")
        XCTAssertNil(status("Groups:\t4,24\n").groups, "commas")
        XCTAssertNil(status("Groups:\t4\0 24\n").groups, "a NUL")
        // No such line at all; names that only start alike.
        XCTAssertEqual(status("Name:\tx\n"), ProcessStatus())
        XCTAssertEqual(status("NGroups:\t4\nGroupsX:\t5\n uid:\t1\t1\t1\t1\n"), ProcessStatus())
        XCTAssertEqual(status(""), ProcessStatus())
        // A line given twice: the first counts.
        XCTAssertEqual(status("Groups:\t4\nGroups:\t0\n").groups, [4])
        XCTAssertEqual(status("Uid:\t5\t5\t5\t5\nUid:\t0\t0\t0\t0\n").uids?.filesystem, 5)
        // One odd line spoils only itself.
        let s = status("Uid:\t1\t2\nGid:\t3\t3\t3\t3\nGroups:\t9\n")
        XCTAssertNil(s.uids)
        XCTAssertEqual(s.gids?.filesystem, 3)
        XCTAssertEqual(s.groups, [9])
    }

    /// NGROUPS_MAX groups (65,536; some 700 KiB of status) from a file in the status format: read
    /// beyond the first read, every group there.
    func testAHugeGroupListIsReadWhole() throws {
        let groups = (0..<65536).map { UInt32(4_000_000_000) + UInt32($0) }
        let text = "Name:\tbig\nUid:\t1\t1\t1\t1\nGid:\t2\t2\t2\t2\nGroups:\t" + groups.map(String.init).joined(separator: " ") + " \nNStgid:\t9\n"
        XCTAssertGreaterThan(text.utf8.count, 600_000)
        let path = NSTemporaryDirectory() + "status-\(getpid())"
        defer { unlink(path) }
        try text.write(toFile: path, atomically: false, encoding: .utf8)
        let s = try XCTUnwrap(ProcessStatus.read(path: path))
        XCTAssertEqual(s.groups, groups)
        XCTAssertEqual(s.uids?.filesystem, 1)
        XCTAssertEqual(s.gids?.filesystem, 2)
    }

    /// A real process with 18,000 supplementary groups (setpriv; one argument may be at most 128 KiB):
    /// its status is far larger than the first read, and every group is read.
    func testARealProcessWithManyGroups() throws {
        try XCTSkipUnless(getuid() == 0, "setgroups needs root")
        let groups = (1...18000).map { UInt32($0) }
        let child = Process()
        child.executableURL = URL(fileURLWithPath: "/usr/bin/setpriv")
        child.arguments = ["--groups", groups.map(String.init).joined(separator: ","), "--", "/bin/sleep", "30"]
        try child.run()
        defer {
            child.terminate()
            child.waitUntilExit()
        }
        // Until setpriv has made its groups (it execs sleep after).
        var seen: ProcessStatus?
        for _ in 0..<200 {
            seen = ProcessStatus.read(pid: child.processIdentifier)
            if seen?.groups?.count == groups.count { break }
            usleep(50_000)
        }
        XCTAssertEqual(seen?.groups, groups)
        XCTAssertEqual(seen?.uids?.filesystem, 0)
    }
}
