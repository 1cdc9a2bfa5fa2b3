import XCTest
import Foundation
import Coordination
@testable import CoordFS

/// Programs that keep a file open for writing for long and share it through their own locks
/// (databases, logs appended by several processes, office suites holding a loaded document): an open
/// for writing that waits past `write_wait` for another program's open file goes ahead without
/// exclusion, so each works through the mount exactly as on the native folder (same output, same
/// exit status). Each scenario runs on a native folder first and then through the mount.
final class SelfCoordinatingProgramsTests: InProcessMountTestCase {
    override func configure(_ options: inout MountOptions) {
        super.configure(&options)
        options.coordination.writeWait = 1
    }

    var native: String { root + "/native" }

    /// Runs `commands` at once in `directory`, each a shell command; returns each one's status and
    /// output, in order.
    func runTogether(_ commands: [String], in directory: String, timeout: Double = 120) throws -> [(status: Int32, output: String)] {
        let started = try commands.map { command -> (Process, Pipe) in
            let p = Process()
            p.executableURL = URL(fileURLWithPath: "/bin/sh")
            p.arguments = ["-c", command]
            p.currentDirectoryURL = URL(fileURLWithPath: directory)
            let pipe = Pipe()
            p.standardOutput = pipe
            p.standardError = pipe
            p.standardInput = FileHandle.nullDevice
            try p.run()
            return (p, pipe)
        }
        let deadline = Date().addingTimeInterval(timeout)
        return started.map { p, pipe in
            // Read while it runs: a full pipe would stop the program.
            let data = pipe.fileHandleForReading.readDataToEndOfFile()
            while p.isRunning && Date() < deadline { usleep(5_000) }
            if p.isRunning { p.terminate(); XCTFail("timed out: \(p.arguments ?? [])") }
            p.waitUntilExit()
            return (p.terminationStatus, String(decoding: data, as: UTF8.self))
        }
    }

    /// Prepares `directory` with `setup`, runs `commands` together there, and returns the outcomes.
    func scenario(_ setup: String, _ commands: [String], in directory: String) throws -> [(status: Int32, output: String)] {
        try sh(setup, in: directory)
        return try runTogether(commands, in: directory)
    }

    /// The same scenario natively and through the mount: every program's status and output match,
    /// and every program succeeded.
    func assertSameAsNative(setup: String, _ commands: [String], check: String? = nil,
                            file: StaticString = #filePath, line: UInt = #line) throws {
        try FileManager.default.createDirectory(atPath: native, withIntermediateDirectories: true)
        let expected = try scenario(setup, commands, in: native)
        let got = try scenario(setup, commands, in: mnt)
        for (i, (e, g)) in zip(expected, got).enumerated() {
            XCTAssertEqual(e.status, 0, "natively, program \(i) failed: \(e.output)", file: file, line: line)
            XCTAssertEqual(g.status, e.status, "program \(i): \(g.output)", file: file, line: line)
            XCTAssertEqual(g.output, e.output, "program \(i)", file: file, line: line)
        }
        if let check {
            let n = try sh(check, in: native).output, m = try sh(check, in: mnt).output
            XCTAssertEqual(m, n, "`\(check)`", file: file, line: line)
        }
    }

    /// A writer of an SQLite database: connects (and keeps its connection), inserts `n` rows one
    /// transaction each, pausing between them, and prints how many rows it sees of its own.
    func sqliteWriter(_ who: String, rows n: Int, pause: Double) -> String {
        """
        python3 -c "
        import sqlite3, time
        db = sqlite3.connect('db.sqlite', timeout=60)
        for i in range(\(n)):
            db.execute('INSERT INTO t VALUES (?, ?)', ('\(who)', i)); db.commit(); time.sleep(\(pause))
        print('\(who)', db.execute('SELECT count(*) FROM t WHERE who = ?', ('\(who)',)).fetchone()[0])
        "
        """
    }

    func sqliteSetup(journalMode: String) -> String {
        "rm -f db.sqlite*; python3 -c \"import sqlite3; db = sqlite3.connect('db.sqlite'); db.execute('PRAGMA journal_mode=\(journalMode)'); db.execute('CREATE TABLE t (who TEXT, i INTEGER)'); db.commit()\""
    }

    let countRows = "python3 -c \"import sqlite3; print(sqlite3.connect('db.sqlite').execute('SELECT who, count(*) FROM t GROUP BY who ORDER BY who').fetchall())\""

    /// One process holds its connection while the other inserts: natively both succeed.
    func assertTwoProcesses(journalMode: String, file: StaticString = #filePath, line: UInt = #line) throws {
        try assertSameAsNative(setup: sqliteSetup(journalMode: journalMode),
                               [sqliteWriter("a", rows: 2, pause: 1.5), "sleep 0.3; " + sqliteWriter("b", rows: 3, pause: 0)],
                               check: countRows, file: file, line: line)
    }

    func assertFourWriters(journalMode: String, file: StaticString = #filePath, line: UInt = #line) throws {
        try assertSameAsNative(setup: sqliteSetup(journalMode: journalMode),
                               ["a", "b", "c", "d"].map { sqliteWriter($0, rows: 15, pause: 0.1) }, check: countRows, file: file, line: line)
    }

    func testSQLiteRollbackJournalTwoProcesses() throws { try assertTwoProcesses(journalMode: "DELETE") }
    func testSQLiteRollbackJournalFourWriters() throws { try assertFourWriters(journalMode: "DELETE") }
    func testSQLiteWALTwoProcesses() throws { try assertTwoProcesses(journalMode: "WAL") }
    func testSQLiteWALFourWriters() throws { try assertFourWriters(journalMode: "WAL") }

    /// Processes that each keep a log open for appending and take the lock (`lock`: a Python
    /// expression on file `f`) around each line.
    func lockedAppender(_ who: String, lock: String, unlock: String) -> String {
        """
        python3 -c "
        import fcntl, time
        f = open('log.txt', 'a')
        for i in range(25):
            \(lock); f.write('\(who) %d\\\\n' % i); f.flush(); \(unlock); time.sleep(0.06)
        print('\(who) done')
        "
        """
    }

    func testFlockAppenders() throws {
        try assertSameAsNative(setup: "rm -f log.txt; : > log.txt",
                               ["a", "b", "c"].map { lockedAppender($0, lock: "fcntl.flock(f, fcntl.LOCK_EX)", unlock: "fcntl.flock(f, fcntl.LOCK_UN)") },
                               check: "sort log.txt | md5sum; wc -l < log.txt")
    }

    func testFcntlLockAppenders() throws {
        try assertSameAsNative(setup: "rm -f log.txt; : > log.txt",
                               ["a", "b", "c"].map { lockedAppender($0, lock: "fcntl.lockf(f, fcntl.LOCK_EX)", unlock: "fcntl.lockf(f, fcntl.LOCK_UN)") },
                               check: "sort log.txt | md5sum; wc -l < log.txt")
    }

    /// An office suite keeps the loaded document open for writing; another program copies over it.
    func testCopyOverADocumentAnotherProgramHoldsOpenForWriting() throws {
        try "copied\n".write(toFile: root + "/src.txt", atomically: false, encoding: .utf8)
        try assertSameAsNative(setup: "printf 'loaded\\n' > doc.txt",
                               ["python3 -c \"import time; f = open('doc.txt', 'r+'); time.sleep(2.5); f.close(); print('closed')\"",
                                "sleep 0.3; cp ../src.txt doc.txt && cat doc.txt"],
                               check: "cat doc.txt")
    }
}
