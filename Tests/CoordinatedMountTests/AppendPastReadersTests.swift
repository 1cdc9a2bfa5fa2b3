import XCTest
import Foundation
import Coordination
@testable import CoordFS

/// An append (an open for writing with O_APPEND and without O_TRUNC: `echo x >> doc.log`, a
/// logger) does not wait for another program's file open for reading through the mount (`tail -f`,
/// `less`, `sleep 60 < doc.log`): it changes no byte such a reader could already read. Everything
/// else still waits: a truncating write, an ftruncate through the append's handle, an append while
/// an explicit coordinated read holds the file. `write_wait` is 30 s here and every command runs
/// under `timeout 10`: an append completes (exit 0), a write that waits is still waiting at 10 s
/// (exit 124, the file unchanged): `OpenFilesTestCase`. docs/semantics.md, "Waits and deadlines".
final class AppendPastReadersTests: OpenFilesTestCase {
    override func configure(_ options: inout MountOptions) {
        super.configure(&options)
        options.coordination.readWait = 30
    }

    /// The other way round: a read does not wait for another program appending to the file (a log
    /// it keeps open and writes, or one it made with `>>`): it sees the file's old end or the new
    /// bytes, as natively (before: `read_wait` each, so a `cat` of a log a service keeps open
    /// took a second). A read still waits for a program that writes in place (`IdleWritersTests`).
    func testAReadDoesNotWaitForAProgramAppendingToTheFile() throws {
        try write("doc.log", "line0\n")
        let logger = try holdOpen("doc.log", ">>", then: "while :; do echo x >&3; sleep 0.05; done")
        defer { end(logger) }
        XCTAssertEqual(try within10s("cat doc.log > ../out"), 0, "the read waited for the appender (read_wait is 30 s)")
        XCTAssertTrue(try String(contentsOfFile: root + "/out", encoding: .utf8).hasPrefix("line0\n"))
        let maker = try holdOpen("new.log", ">>", first: "echo made >&3; ")
        defer { end(maker) }
        XCTAssertEqual(try within10s("cat new.log > ../out"), 0, "the read waited for the program that made the log with >>")
        XCTAssertEqual(try String(contentsOfFile: root + "/out", encoding: .utf8), "made\n")
    }
    func testAnAppendDoesNotWaitForAFileOpenForReadingAndEachIsToldOnce() throws {
        try write("doc.log", "line0\n")
        let reader = try holdOpen("doc.log")
        defer { end(reader) }
        let presenter = try present("doc.log")
        XCTAssertEqual(try within10s("echo x >> doc.log"), 0, "the first append completed (not held up for write_wait, 30 s)")
        presenter.waitUntil(timeout: 5, settle: 0.5) { $0.contains("didChange") }
        XCTAssertEqual(try within10s("echo y >> doc.log"), 0, "the second append completed")
        let log = presenter.waitUntil(timeout: 5, settle: 0.8) { $0.filter { $0 == "didChange" }.count >= 2 }
        XCTAssertEqual(log.filter { $0 == "didChange" }.count, 2, "each append told once: \(log)")
        XCTAssertEqual(log.filter { $0 == "relinquishToWriter" }.count, 2, "asked before each append: \(log)")
        XCTAssertEqual(try backingText("doc.log"), "line0\nx\ny\n")
        XCTAssertTrue(reader.isRunning, "the reader still holds its file open")
        // Read through the mount, the file has both appends at its end.
        XCTAssertEqual(try sh("cat doc.log").output, "line0\nx\ny\n")
        // Each append is one didChange record in the log.
        let records = try logged().filter { $0.kind == .didChange && $0.path == "/doc.log" }
        XCTAssertEqual(records.count, 2, "one didChange record per append")
    }

    func testATruncatingWriteStillWaitsForTheReader() throws {
        try write("doc.log", "line0\n")
        let reader = try holdOpen("doc.log")
        defer { end(reader) }
        XCTAssertEqual(try within10s("echo y > doc.log"), 124, "O_TRUNC replaces what the reader reads: it waits (write_wait, 30 s)")
        XCTAssertEqual(try backingText("doc.log"), "line0\n", "the interrupted write changed nothing")
    }

    func testAnFtruncateThroughAnAppendsHandleStillWaitsForTheReader() throws {
        try write("doc.log", "line0\n")
        let reader = try holdOpen("doc.log")
        defer { end(reader) }
        // The O_APPEND open goes ahead at once (it prints "opened"); its ftruncate waits.
        let r = try sh("timeout 10 python3 -c \"import os, sys; fd = os.open('doc.log', os.O_WRONLY | os.O_APPEND); print('opened', flush=True); os.ftruncate(fd, 0)\"",
                       allowFailure: true, timeout: 40)
        XCTAssertTrue(r.output.contains("opened"), "the append's open did not wait: \(r.output)")
        XCTAssertEqual(r.status, 124, "the ftruncate waits for the reader as a truncate does: \(r.output)")
        XCTAssertEqual(try backingText("doc.log"), "line0\n", "the interrupted ftruncate changed nothing")
    }

    func testAnAppendStillWaitsForAnExplicitCoordinatedRead() throws {
        try write("doc.log", "line0\n")
        let held = try XCTUnwrap(coordinator.tryCoordinateImmediately(.readingIntent(with: try ItemPath("doc.log")), origin: .currentProcess))
        defer { held.release() }
        XCTAssertEqual(try within10s("echo x >> doc.log"), 124, "an explicit coordinated read holds an append up (write_wait, 30 s)")
        XCTAssertEqual(try backingText("doc.log"), "line0\n")
    }

    func testAnAppendStillWaitsForAnotherWriter() throws {
        try write("doc.log", "....\n")
        let writer = try holdOpen("doc.log", "<>", first: "printf held >&3; ")
        defer { end(writer) }
        XCTAssertEqual(try within10s("echo x >> doc.log"), 124, "a program writing the file in place holds an append up (write_wait, 30 s)")
        XCTAssertEqual(try backingText("doc.log"), "held\n")
    }

    /// A program that keeps a log open and appends to it (a service's log), held a second, holds
    /// up no other append, no rename of the log (logrotate's `mv`) and no removal: it closes its
    /// log when it exits, not when their wait would end, and what they do leaves its bytes whole
    /// at the end of its file, as natively (before: `write_wait` each). An in-place write over the
    /// log still waits for it.
    func testAnAppendAndAChangeOfNamesGoAheadPastAProgramAppendingForASecond() throws {
        try write("doc.log", "")
        try write("new.txt", "new\n")
        let logger = try holdOpen("doc.log", ">>", first: "echo held >&3; ")
        defer { end(logger) }
        usleep(1_100_000)
        XCTAssertEqual(try within10s("echo x >> doc.log"), 0, "an append waited for the program appending to the log")
        XCTAssertEqual(try backingText("doc.log"), "held\nx\n")
        XCTAssertEqual(try within10s("cp new.txt doc.log"), 124, "an in-place write waits for the program appending (write_wait, 30 s)")
        XCTAssertEqual(try backingText("doc.log"), "held\nx\n")
        XCTAssertEqual(try within10s("mv doc.log doc.log.1"), 0, "logrotate's rename waited for the program appending to the log")
        XCTAssertEqual(try backingText("doc.log.1"), "held\nx\n")
        XCTAssertEqual(try within10s("rm doc.log.1"), 0, "a removal waited for the program appending to the log")
        XCTAssertFalse(FileManager.default.fileExists(atPath: backing + "/doc.log.1"))
    }
}
