import Foundation
import Glibc
import XCTest
@testable import Linux

/// Whether a process runs (`ProcessLife`), by its pid and, where a record has it, its start time:
/// a pid the kernel handed out again is another process.
final class ProcessLifeTests: XCTestCase {
    func testStartTimeIsField22EvenWithParenthesesAndSpacesInTheName() {
        let line = "4242 (a) b (c) R 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 100"
        XCTAssertEqual(ProcessLife.parseStartTime(Array(line.utf8)), 987_654)
        XCTAssertNil(ProcessLife.parseStartTime(Array("12 (x) R 1 2".utf8)))
        XCTAssertNotNil(ProcessLife.startTime(getpid()))
        XCTAssertEqual(ProcessLife.startTime(getpid()), ProcessLife.startTime(getpid()))
        XCTAssertNil(ProcessLife.startTime(0))
        XCTAssertNil(ProcessLife.startTime(Int32.max), "no such process")
    }

    /// A live process with the start recorded for it runs; the same pid with another start is a
    /// process that got its pid after the recorded one ended: that one is gone.
    func testAPidWithAnotherStartTimeIsAnotherProcess() throws {
        let me = getpid()
        let start = try XCTUnwrap(ProcessLife.startTime(me))
        XCTAssertTrue(ProcessLife.isRunning(me))
        XCTAssertTrue(ProcessLife.isRunning(me, startedAt: start))
        XCTAssertFalse(ProcessLife.isRunning(me, startedAt: start + 1))
        XCTAssertFalse(ProcessLife.isRunning(me, startedAt: start &- 1))
        XCTAssertFalse(ProcessLife.isRunning(Int32.max, startedAt: start))
    }

    /// A cluster node's mount record names its daemon by pid and start time: the record of a daemon
    /// whose pid now belongs to another process (its start differs) names no live daemon, so the
    /// node's name is free and its stale mount is not taken for a live one. A record of an older
    /// daemon (no start) is judged by its pid.
    func testAMountRecordWhosePidWasHandedOutAgainNamesNoLiveDaemon() throws {
        let folder = NSTemporaryDirectory() + "coordfs-record-\(getpid())"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        NodeMountRecord.write(in: folder, mountpoint: "/mnt/a b")
        let record = try XCTUnwrap(NodeMountRecord.read(in: folder))
        let start = try XCTUnwrap(ProcessLife.startTime(getpid()))
        XCTAssertEqual(record.pid, getpid())
        XCTAssertEqual(record.start, start)
        XCTAssertEqual(record.mountpoint, "/mnt/a b")
        XCTAssertTrue(record.isAlive)
        func write(_ text: String) throws { try text.write(toFile: folder + "/" + NodeMountRecord.fileName, atomically: true, encoding: .utf8) }
        try write("\(NodeMountRecord.bootID())\n\(getpid()) \(start + 1)\n/mnt/a b")
        XCTAssertFalse(try XCTUnwrap(NodeMountRecord.read(in: folder)).isAlive, "its pid is another process's")
        try write("\(NodeMountRecord.bootID())\n\(getpid())\n/mnt/a b")
        let older = try XCTUnwrap(NodeMountRecord.read(in: folder))
        XCTAssertNil(older.start)
        XCTAssertTrue(older.isAlive, "an older daemon's record: by its pid")
    }
}
