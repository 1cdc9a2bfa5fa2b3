import Foundation
import Glibc
import XCTest
@testable import Linux

/// Who waits for whose file lock (`/proc/locks`) and which processes started a process: what the
/// mount looks at when a request waits for open files (docs/semantics.md, "Waits and deadlines").
final class FileLockWaitsTests: XCTestCase {
    /// Each `->` line waits for the held lock of its number above it, also when nested (indented
    /// further); an OFD lock names no process (-1), and a line not in the format counts for nothing.
    func testWaitersAreMatchedToTheOwnerOfTheLockTheyWaitFor() {
        let text = """
        1: FLOCK  ADVISORY  WRITE 8295 00:27:6728336 0 EOF
        1: -> FLOCK  ADVISORY  WRITE 8299 00:27:6728336 0 EOF
        1:  -> FLOCK  ADVISORY  WRITE 8300 00:27:6728336 0 EOF
        2: POSIX  ADVISORY  READ 6986 fe:00:6725646 128 128
        3: POSIX  ADVISORY  WRITE 700 fe:00:12 0 EOF
        3: -> POSIX  ADVISORY  WRITE 701 fe:00:12 0 EOF
        3: -> POSIX  ADVISORY  READ 8299 fe:00:12 0 EOF
        4: OFDLCK ADVISORY  WRITE -1 fe:00:16228476 0 EOF
        4: -> OFDLCK ADVISORY  WRITE -1 fe:00:16228476 0 EOF
        5: -> POSIX  ADVISORY  WRITE 702 fe:00:13 0 EOF
        6: garbage
        6: -> POSIX  ADVISORY  WRITE 703 fe:00:14 0 EOF
        7: DELEG  ACTIVE    READ 1 fe:00:15 0 EOF
        8: FLOCK  ADVISORY  WRITE 900 00:27:1 0 EOF
        8: -> FLOCK  ADVISORY  WRITE 9x1 00:27:1 0 EOF
        """
        let waits = FileLockWaits(parsing: Array(text.utf8))
        XCTAssertEqual(waits.owners, [8299: [8295, 700], 8300: [8295], 701: [700]])
        XCTAssertTrue(waits.waits(8299, forAnyOf: [700, 1]))
        XCTAssertTrue(waits.waits(8300, forAnyOf: [8295]))
        XCTAssertFalse(waits.waits(8300, forAnyOf: [8299]), "a waiter ahead of it holds nothing")
        XCTAssertFalse(waits.waits(8295, forAnyOf: [8295, 8299]), "the owner waits for nobody")
        XCTAssertFalse(waits.waits(702, forAnyOf: [700]), "no held lock above it")
        XCTAssertTrue(FileLockWaits(parsing: Array("".utf8)).isEmpty)
        XCTAssertTrue(FileLockWaits(parsing: Array("1: FLOCK  ADVISORY  WRITE 5 00:27:1 0 EOF".utf8)).isEmpty)
    }

    /// A process blocked in flock(2) on a file another process holds locked is seen waiting for that
    /// process, and for nobody once the lock is let go.
    func testAProcessBlockedInFlockWaitsForTheLocksOwner() throws {
        let dir = NSTemporaryDirectory() + "coordfs-lockwaits-\(getpid())"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let file = dir + "/f"
        FileManager.default.createFile(atPath: file, contents: Data())
        let fd = open(file, O_RDONLY | O_CLOEXEC)
        XCTAssertGreaterThanOrEqual(fd, 0)
        defer { close(fd) }
        XCTAssertEqual(flock(fd, LOCK_EX), 0)
        let waiter = Process()
        waiter.executableURL = URL(fileURLWithPath: "/usr/bin/flock")
        waiter.arguments = [file, "true"]
        try waiter.run()
        defer { if waiter.isRunning { waiter.terminate() }; waiter.waitUntilExit() }
        let deadline = Date().addingTimeInterval(10)
        while !FileLockWaits.read().waits(waiter.processIdentifier, forAnyOf: [getpid()]) {
            guard Date() < deadline else { return XCTFail("flock(1) was never seen waiting: \(String(decoding: readWholeFileBytes("/proc/locks") ?? [], as: UTF8.self))") }
            usleep(10_000)
        }
        XCTAssertFalse(FileLockWaits.read().waits(waiter.processIdentifier, forAnyOf: [waiter.processIdentifier]))
        XCTAssertEqual(flock(fd, LOCK_UN), 0)
        waiter.waitUntilExit()
        XCTAssertEqual(waiter.terminationStatus, 0)
        XCTAssertFalse(FileLockWaits.read().waits(waiter.processIdentifier, forAnyOf: [getpid()]))
    }

    func testTheParentIsTheFourthFieldEvenWithParenthesesAndSpacesInTheName() {
        XCTAssertEqual(ProcessLife.parseParent(Array("4242 (a) b (c) S 77 4242 4242 0 -1".utf8)), 77)
        XCTAssertEqual(ProcessLife.parseParent(Array("4242 (x) S 12".utf8)), 12)
        XCTAssertNil(ProcessLife.parseParent(Array("4242 (x) S".utf8)))
        XCTAssertNil(ProcessLife.parseParent(Array("4242 (x) S 1a 3".utf8)))
        XCTAssertNil(ProcessLife.parseParent(Array("4242 x S 12".utf8)))
    }

    /// A process's ancestors: its parent first, then the parent's, up to (not including) init; none
    /// for a pid that names no process.
    func testAncestorsAreTheProcessesThatStartedItNearestFirst() throws {
        let mine = ProcessLife.ancestors(of: getpid())
        XCTAssertEqual(mine.first, getppid())
        XCTAssertFalse(mine.contains(1))
        XCTAssertFalse(mine.contains(getpid()))
        // sh, then its child sleep: the child's ancestors are sh, this process, then this one's.
        let sh = Process()
        sh.executableURL = URL(fileURLWithPath: "/bin/sh")
        sh.arguments = ["-c", "sleep 30; true"]
        try sh.run()
        defer { if sh.isRunning { sh.terminate() }; sh.waitUntilExit() }
        var child: pid_t?
        let deadline = Date().addingTimeInterval(10)
        while child == nil, Date() < deadline {
            let children = String(decoding: readWholeFileBytes("/proc/\(sh.processIdentifier)/task/\(sh.processIdentifier)/children") ?? [], as: UTF8.self)
            child = children.split(separator: " ").first.flatMap { pid_t($0) }
            if child == nil { usleep(10_000) }
        }
        let sleeper = try XCTUnwrap(child, "sh started no child")
        defer { kill(sleeper, SIGKILL) }
        XCTAssertEqual(ProcessLife.ancestors(of: sleeper), [sh.processIdentifier, getpid()] + mine)
        XCTAssertEqual(ProcessLife.ancestors(of: sleeper, limit: 1), [sh.processIdentifier])
        XCTAssertEqual(ProcessLife.ancestors(of: Int32.max), [])
        XCTAssertEqual(ProcessLife.ancestors(of: 1), [])
    }
}
