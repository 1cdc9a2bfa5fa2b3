import XCTest
import Foundation
import Coordination
@testable import CoordFS

/// A change of names (rename over or away, unlink, create, mkdir, link) does not wait for another
/// program's file open for reading through the mount: the reader keeps reading the file it opened,
/// whatever name it has now, or none, as natively. Waiting gained nothing and could not end: the
/// kernel holds the folder (and a rename's or unlink's files) locked while the request waits in
/// the daemon, so a reader that creates, removes or looks up a name in that folder before it
/// closes (a second `sed -i` of the same file, making its temporary file) waited for the first
/// until `write_wait` ran out. An explicit coordinated read still holds a rename up. `write_wait`
/// is 30 s here and every command runs under `timeout 10`: a change that completes exits 0, one
/// that waits is still waiting at 10 s (exit 124): `OpenFilesTestCase`. docs/semantics.md, "Waits and deadlines".
final class NamesPastReadersTests: OpenFilesTestCase {
    /// Holds `relative` open for reading until `endReading`, which returns what it then read
    /// through that descriptor.
    private func holdOpenForReading(_ relative: String) throws -> Process {
        try holdOpen(relative, then: "while [ ! -e ../stop ]; do sleep 0.05; done; cat <&3 > ../seen")
    }

    private func endReading(_ p: Process) -> String? {
        FileManager.default.createFile(atPath: root + "/stop", contents: nil)
        let deadline = Date().addingTimeInterval(10)
        while p.isRunning && Date() < deadline { usleep(10_000) }
        end(p)
        return try? String(contentsOfFile: root + "/seen", encoding: .utf8)
    }

    func testSavesByRenameMovesAndRemovalsDoNotWaitForAFileOpenForReading() throws {
        try write("doc.txt", "one\n")
        try write("new.txt", "three\n")
        let reader = try holdOpenForReading("doc.txt")
        defer { _ = endReading(reader) } // also when a step throws: the reader's loop ends
        let presenter = try present("doc.txt")
        XCTAssertEqual(try within10s("sed -i s/one/two/ doc.txt"), 0, "a save by rename over the file is not held up (write_wait, 30 s)")
        XCTAssertEqual(try backingText("doc.txt"), "two\n")
        XCTAssertEqual(try within10s("mv new.txt doc.txt"), 0, "a rename over it")
        XCTAssertEqual(try backingText("doc.txt"), "three\n")
        XCTAssertEqual(try within10s("mv doc.txt moved.txt && rm moved.txt"), 0, "a move away and a removal")
        XCTAssertFalse(FileManager.default.fileExists(atPath: backing + "/moved.txt"))
        XCTAssertEqual(try within10s("echo four > doc.txt && mkdir dir && ln -s doc.txt link && ln doc.txt hard"), 0, "new names beside it")
        XCTAssertEqual(endReading(reader), "one\n", "the reader read the file it opened, as natively")
        // Presenters are still asked and told as for any save.
        let log = presenter.waitUntil(timeout: 5, settle: 0.5) { $0.contains("didChange") }
        XCTAssertTrue(log.contains("relinquishToWriter") && log.contains("didChange"), "\(log)")
    }

    /// Two `sed -i` of one file at once: each reads the file, then makes its temporary file in the
    /// same folder and renames it over the file. Before, the first one's rename waited for the
    /// second's read, while the kernel, holding the folder for that rename, kept the second from
    /// making its temporary file: both waited until `write_wait` (1 round in 5 here).
    func testTwoSedsOfOneFileAtOnceDoNotWaitForEachOther() throws {
        try write("doc.txt", "a\n")
        let rounds = "for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do sed -i s/a/b/ doc.txt & sed -i s/b/a/ doc.txt & wait; done"
        XCTAssertEqual(try within10s(rounds), 0, "20 rounds of two seds at once, none held up for write_wait (30 s)")
        let text = try backingText("doc.txt")
        XCTAssertTrue(["a\n", "b\n"].contains(text), text)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: backing).filter { $0.hasPrefix("sed") }, [], "no temporary file left")
    }

    /// A program appending to the file without pause: each of its writes needs the file, which the
    /// kernel holds locked for the rename waiting in the daemon, so it cannot go on and close it.
    /// The rename goes ahead once the daemon sees it wait there (two looks 50 ms apart), as it would
    /// at `write_wait` (30 s here; before, the rename waited all of it).
    func testARenameOverAFileAnotherProgramIsWritingGoesAheadWhenThatProgramCannotGoOn() throws {
        try write("doc.txt", "one\n")
        try write("new.txt", "two\n")
        let writer = try holdOpen("doc.txt", ">>", then: "while :; do echo x >&3; done")
        defer { end(writer) }
        usleep(100_000)
        let started = Date()
        XCTAssertEqual(try within10s("mv new.txt doc.txt"), 0, "the rename went ahead (write_wait is 30 s)")
        print("the rename took \(Date().timeIntervalSince(started)) s")
        XCTAssertEqual(try backingText("doc.txt"), "two\n", "the renamed file, not the writer's")
        let went = try logged().filter { $0.kind == .granted && $0.path == "/doc.txt" && ($0.details.message ?? "").contains("went ahead") }
        XCTAssertFalse(went.isEmpty, "the log says it went ahead past the writer")
    }

    /// The same for changes of mode and times by path, whose file the kernel holds locked while
    /// they wait: each goes ahead past the appending program. An open for writing holds no such
    /// lock: it waits for that program as for any writer.
    func testAttributeChangesByPathGoAheadWhenTheWriterCannotGoOn() throws {
        try write("doc.txt", "one\n")
        let writer = try holdOpen("doc.txt", ">>", then: "while :; do echo x >&3; done")
        defer { end(writer) }
        usleep(100_000)
        for command in ["chmod 600 doc.txt", "touch -c -d 2020-01-01 doc.txt"] {
            XCTAssertEqual(try within10s(command), 0, "\(command) went ahead (write_wait is 30 s)")
        }
        var st = stat()
        XCTAssertEqual(stat(backing + "/doc.txt", &st), 0)
        XCTAssertEqual(st.st_mode & 0o777, 0o600)
        XCTAssertEqual(try within10s("echo new > doc.txt"), 124, "an open for writing waits for the writer (write_wait, 30 s)")
    }

    /// A program that has written through its open of the file in place and can go on (it is
    /// writing the file, and closes it when done) holds the rename up (`write_wait`). One that has
    /// written nothing does not, after a second (IdleWritersTests), nor one that only appends,
    /// after a second (AppendPastReadersTests).
    func testARenameOverAFileAnotherProgramHoldsOpenForWritingStillWaitsForIt() throws {
        try write("doc.txt", "one\n")
        try write("new.txt", "two\n")
        let writer = try holdOpen("doc.txt", "<>", first: "printf ONE >&3; ")
        defer { end(writer) }
        XCTAssertEqual(try within10s("mv new.txt doc.txt"), 124, "a writer that can close holds the rename up (write_wait, 30 s)")
        XCTAssertEqual(try backingText("doc.txt"), "ONE\n")
    }

    func testARenameStillWaitsForAnExplicitCoordinatedRead() throws {
        try write("doc.txt", "one\n")
        try write("new.txt", "two\n")
        let held = try XCTUnwrap(coordinator.tryCoordinateImmediately(.readingIntent(with: try ItemPath("doc.txt")), origin: .currentProcess))
        defer { held.release() }
        XCTAssertEqual(try within10s("mv new.txt doc.txt"), 124, "an explicit coordinated read holds a rename over the file up (write_wait, 30 s)")
        XCTAssertEqual(try backingText("doc.txt"), "one\n")
    }
}
