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
        try write("\(ProcessLife.bootID())\n\(getpid()) \(start + 1)\n/mnt/a b")
        XCTAssertFalse(try XCTUnwrap(NodeMountRecord.read(in: folder)).isAlive, "its pid is another process's")
        try write("\(ProcessLife.bootID())\n\(getpid())\n/mnt/a b")
        let older = try XCTUnwrap(NodeMountRecord.read(in: folder))
        XCTAssertNil(older.start)
        XCTAssertTrue(older.isAlive, "an older daemon's record: by its pid")
        // Read before the CLI knows whose folder it is: a link to /dev/zero is no record (it was read on and on).
        try FileManager.default.removeItem(atPath: folder + "/" + NodeMountRecord.fileName)
        XCTAssertEqual(symlink("/dev/zero", folder + "/" + NodeMountRecord.fileName), 0)
        XCTAssertNil(NodeMountRecord.read(in: folder))
    }

    /// A daemon's pid file (`daemon.pid`): the pid alone on its first line, then `start=... boot=...`.
    /// The file names a running daemon only while a process with its pid runs that started when it
    /// says, in this boot: a pid the kernel handed to a process that started at another time, or a
    /// file left from before a reboot, names none. An older daemon's file (the pid alone) is judged
    /// by its pid. No word after the pid reads as a number: `kill $(cat daemon.pid)` signals the daemon
    /// and no other process.
    func testAPidFileNamingALiveProcessWithAnotherStartIsNotRunning() throws {
        let me = getpid()
        let start = try XCTUnwrap(ProcessLife.startTime(me))
        let boot = ProcessLife.bootID()
        XCTAssertFalse(boot.isEmpty)
        let written = DaemonPIDFile.contents()
        let text = String(decoding: written, as: UTF8.self)
        XCTAssertEqual(text, "\(me)\nstart=\(start) boot=\(boot)\n")
        XCTAssertEqual(text.split(whereSeparator: { $0 == " " || $0 == "\n" }).filter { Int($0) != nil }.map(String.init), ["\(me)"],
                       "only the pid reads as a number")
        let mine = try XCTUnwrap(DaemonPIDFile.parse(written))
        XCTAssertEqual(mine, DaemonPIDFile(pid: me, start: start, bootID: boot))
        XCTAssertTrue(mine.isRunning)
        func file(_ text: String) -> DaemonPIDFile? { DaemonPIDFile.parse(Array(text.utf8)) }
        XCTAssertFalse(try XCTUnwrap(file("\(me)\nstart=\(start + 1) boot=\(boot)\n")).isRunning, "its pid is another process's")
        XCTAssertFalse(try XCTUnwrap(file("\(me)\nstart=\(start) boot=0b0a-another-boot\n")).isRunning, "written in another boot")
        XCTAssertFalse(try XCTUnwrap(file("\(Int32.max)\nstart=\(start) boot=\(boot)\n")).isRunning, "no such process")
        let older = try XCTUnwrap(file("\(me)\n"))
        XCTAssertEqual(older, DaemonPIDFile(pid: me))
        XCTAssertTrue(older.isRunning, "an older daemon's file: by its pid")
        XCTAssertEqual(file(" \(me)\r\nstart=\(start) later=1\n"), DaemonPIDFile(pid: me, start: start), "unknown words left alone")
        XCTAssertEqual(file("\(me)\nstart=soon\n"), DaemonPIDFile(pid: me), "a start that is no number is none")
        for bad in ["", "\n", "0\n", "-1\n", "12 34\n", "pid\n", "\nstart=\(start)\n", "99999999999\n"] {
            XCTAssertNil(file(bad), "no pid: \(bad.debugDescription)")
        }
        // Read where the CLI finds it before it knows whose folder it is: only a regular file is one.
        let folder = NSTemporaryDirectory() + "coordfs-pidfile-\(me)"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        try Data(written).write(to: URL(fileURLWithPath: folder + "/daemon.pid"))
        XCTAssertEqual(DaemonPIDFile.read(folder + "/daemon.pid"), mine)
        XCTAssertEqual(symlink(folder + "/daemon.pid", folder + "/link"), 0)
        XCTAssertEqual(symlink("/dev/zero", folder + "/zero"), 0)
        XCTAssertEqual(mkfifo(folder + "/fifo", 0o600), 0)
        for name in ["link", "zero", "fifo", "missing"] { XCTAssertNil(DaemonPIDFile.read(folder + "/" + name), name) }
    }
}
