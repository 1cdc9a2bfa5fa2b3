import XCTest
import Foundation
@testable import CoordFS

/// A program's open file whose name no longer leads to it (renamed away, replaced by a rename over
/// it, removed) holds nobody up at that name (docs/semantics.md, "Waits and deadlines"): what the
/// program reads or writes is not what the name leads to. `write_wait` is 30 s and every command
/// runs under `timeout 10`, so one that completes went ahead early.
final class NameLeftByOpenFileTests: OpenFilesTestCase {
    /// logrotate's way: the log renamed away under the program appending to it, a new one made in
    /// its place. The new log is nobody's open file: making it, appending to it, writing over it
    /// and reading it wait for nothing (before: each waited `write_wait` for the program, which
    /// writes the renamed file). Once that file is back at the name, the program holds it up again.
    func testALogRenamedAwayUnderTheProgramWritingItHoldsNobodyUpAtItsName() throws {
        try write("app.log", "")
        try write("new.txt", "new\n")
        let logger = try holdOpen("app.log", ">>", then: "while :; do printf 'x\\n' >&3; sleep 0.05; done")
        defer { end(logger) }
        XCTAssertEqual(try within10s("mv app.log app.log.1"), 0, "the rename went ahead")
        for command in ["touch app.log", "echo y >> app.log", "echo z > app.log", "cat app.log > ../out"] {
            XCTAssertEqual(try within10s(command), 0, "\(command): waited for the program writing the renamed log")
        }
        XCTAssertEqual(try backingText("app.log"), "z\n")
        XCTAssertEqual(try String(contentsOfFile: root + "/out", encoding: .utf8), "z\n")
        let rotated = try backingText("app.log.1").count
        usleep(300_000)
        XCTAssertGreaterThan(try backingText("app.log.1").count, rotated, "the program still writes the renamed log")

        // Its file back at the name: a writer there again.
        XCTAssertEqual(rename(backing + "/app.log.1", backing + "/app.log"), 0)
        XCTAssertEqual(try within10s("cp new.txt app.log"), 124, "a write waits for the program writing the file at that name")
        XCTAssertNotEqual(try backingText("app.log"), "new\n")
    }

    /// A document saved by rename (`sed -i`) under a program reading it: the program reads the
    /// file it opened, which has no name now, so a write over the new document goes ahead at
    /// once (before: `write_wait`, as for a reader of the document itself).
    func testADocumentReplacedUnderAReaderHoldsNoWriteOfTheNewOneUp() throws {
        try write("doc.txt", "one\n")
        try write("new.txt", "new\n")
        let reader = try holdOpen("doc.txt")
        defer { end(reader) }
        XCTAssertEqual(try within10s("sed -i s/one/two/ doc.txt"), 0)
        XCTAssertEqual(try within10s("cp new.txt doc.txt"), 0, "the write waited for the reader of the replaced file")
        XCTAssertEqual(try backingText("doc.txt"), "new\n")
    }

    /// A file removed (here beside the mount) under the program writing it: a new file of that
    /// name is made at once (before: `write_wait`).
    func testAFileRemovedUnderTheProgramWritingItHoldsNoNewFileOfItsNameUp() throws {
        try write("swap", "")
        let writer = try holdOpen("swap", "<>", first: "printf x >&3; ")
        defer { end(writer) }
        XCTAssertEqual(unlink(backing + "/swap"), 0)
        XCTAssertEqual(try within10s("echo y > swap"), 0, "the create waited for the program writing the removed file")
        XCTAssertEqual(try backingText("swap"), "y\n")
    }
}
