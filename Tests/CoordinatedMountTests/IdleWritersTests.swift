import XCTest
import Foundation
@testable import CoordFS
import EventLog

/// A program that holds a file open for writing without writing through it (an office suite with
/// its document loaded, a database connection that has only read, `exec 3<>doc`) holds nobody up
/// once it has held it a second: reads, in-place writes, appends and renames go ahead past it
/// (docs/semantics.md, "Waits and deadlines"). One that has written through its open holds them up
/// until their deadline, as before. `read_wait` and `write_wait` are 30 s here, so a command that
/// completes within `timeout 10` went ahead early.
class IdleWritersTests: OpenFilesTestCase {
    override func configure(_ options: inout MountOptions) {
        super.configure(&options)
        options.coordination.readWait = 30
    }

    private func wentAhead(_ path: String) throws -> [EventRecord] {
        try logged().filter { $0.kind == .granted && $0.path == path && ($0.details.message ?? "").contains("went ahead") }
    }

    func testAReadAndAWriteGoAheadPastAFileHeldOpenForWritingWithoutWriting() throws {
        try write("doc.txt", "one\n")
        try write("new.txt", "two\n")
        let holder = try holdOpen("doc.txt", "<>")
        defer { end(holder) }
        let started = Date()
        XCTAssertEqual(try within10s("cat doc.txt > ../out"), 0, "the read went ahead (read_wait is 30 s)")
        XCTAssertGreaterThan(Date().timeIntervalSince(started), 0.7, "not before the program held the file a second")
        XCTAssertEqual(try String(contentsOfFile: root + "/out", encoding: .utf8), "one\n")
        XCTAssertEqual(try within10s("cp new.txt doc.txt"), 0, "the write went ahead (write_wait is 30 s)")
        XCTAssertEqual(try backingText("doc.txt"), "two\n")
        let went = try wentAhead("/doc.txt")
        XCTAssertEqual(went.map(\.details.intent), [IntentKind.read, .write], "the log says each went ahead past the holder: \(went)")
        XCTAssertFalse(try logged().contains { $0.kind == .denied })
    }

    func testARenameAndAnAppendGoAheadPastFilesHeldOpenForAppendingWithoutWriting() throws {
        try write("doc.txt", "one\n")
        try write("new.txt", "two\n")
        try write("doc.log", "line0\n")
        let a = try holdOpen("doc.txt", ">>")
        defer { end(a) }
        let b = try holdOpen("doc.log", ">>")
        defer { end(b) }
        XCTAssertEqual(try within10s("mv new.txt doc.txt"), 0, "the rename went ahead (write_wait is 30 s)")
        XCTAssertEqual(try within10s("echo x >> doc.log"), 0, "the append went ahead")
        XCTAssertEqual(try backingText("doc.txt"), "two\n")
        XCTAssertEqual(try backingText("doc.log"), "line0\nx\n")
    }

    /// A write that went ahead past such a program (a `cp` over the document an office suite holds)
    /// is not the program's: once it is over, the file just as it left it, the program holds
    /// nobody up again (before, it was taken for a writer until it closed: each `cat` of the file
    /// waited `read_wait`, each `cp` `write_wait`).
    func testAWriteThatWentAheadPastAProgramDoesNotMakeItAWriter() throws {
        try write("doc.txt", "one\n")
        try write("new.txt", "two\n")
        try write("newer.txt", "three\n")
        let holder = try holdOpen("doc.txt", "<>")
        defer { end(holder) }
        XCTAssertEqual(try within10s("cp new.txt doc.txt"), 0, "the write went ahead (write_wait is 30 s)")
        XCTAssertEqual(try within10s("cat doc.txt > ../out"), 0, "the read after it went ahead too (read_wait is 30 s)")
        XCTAssertEqual(try String(contentsOfFile: root + "/out", encoding: .utf8), "two\n")
        XCTAssertEqual(try within10s("cp newer.txt doc.txt"), 0, "and the next write")
        XCTAssertEqual(try backingText("doc.txt"), "three\n")
        XCTAssertEqual(try wentAhead("/doc.txt").count, 3)
    }

    /// Its own write makes a program a writer again: whether it is done cannot be told, so it is
    /// waited for (`read_wait`), however long ago it wrote.
    func testAReadStillWaitsForAProgramThatWroteThroughItsOpen() throws {
        try write("doc.txt", "one\n")
        let holder = try holdOpen("doc.txt", "<>", first: "printf O >&3; ")
        defer { end(holder) }
        usleep(1_500_000)
        XCTAssertEqual(try within10s("cat doc.txt > /dev/null"), 124, "the read waits for the writer (read_wait, 30 s)")
        XCTAssertEqual(try backingText("doc.txt"), "One\n")
    }
}

/// The same with `passthrough=off`: the daemon serves every open's reads and writes, and tells one
/// that has written from its requests and the file's state.
final class IdleWritersServedByTheDaemonTests: IdleWritersTests {
    override func configure(_ options: inout MountOptions) {
        super.configure(&options)
        options.passthrough = false
    }

    // XCTest on Linux runs a subclass's inherited tests only when it declares one of its own.
    override func testAReadAndAWriteGoAheadPastAFileHeldOpenForWritingWithoutWriting() throws {
        try super.testAReadAndAWriteGoAheadPastAFileHeldOpenForWritingWithoutWriting()
    }
    override func testARenameAndAnAppendGoAheadPastFilesHeldOpenForAppendingWithoutWriting() throws {
        try super.testARenameAndAnAppendGoAheadPastFilesHeldOpenForAppendingWithoutWriting()
    }
    override func testAReadStillWaitsForAProgramThatWroteThroughItsOpen() throws {
        try super.testAReadStillWaitsForAProgramThatWroteThroughItsOpen()
    }
    override func testAWriteThatWentAheadPastAProgramDoesNotMakeItAWriter() throws {
        try super.testAWriteThatWentAheadPastAProgramDoesNotMakeItAWriter()
    }
}
