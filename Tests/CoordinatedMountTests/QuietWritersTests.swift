import XCTest
import Foundation
@testable import CoordFS

/// A program that has written through its open file in place and keeps it open (a database
/// connection between its transactions) holds nobody up once it has held the file `write_wait` and
/// nobody changed the file for a second (docs/semantics.md, "Waits and deadlines"): a request would
/// go ahead past it at that deadline anyway. One writing now, and one that opened with O_TRUNC,
/// are waited for. `write_wait` is 2 s and `read_wait` 30 s here, so a read that completes within
/// `timeout 10` went ahead past the writer.
final class QuietWritersTests: OpenFilesTestCase {
    override func configure(_ options: inout MountOptions) {
        super.configure(&options)
        options.coordination.writeWait = 2
        options.coordination.readWait = 30
    }

    func testAProgramThatWroteHoldsNobodyUpOnceItHeldItsFileWriteWaitAndPaused() throws {
        try write("doc.txt", "one\n")
        let writer = try holdOpen("doc.txt", "<>", first: "printf O >&3; ")
        defer { end(writer) }
        let started = Date()
        XCTAssertEqual(try within10s("cat doc.txt > ../out"), 0, "the read waited for a writer that paused (read_wait is 30 s)")
        XCTAssertGreaterThan(Date().timeIntervalSince(started), 0.9, "not before the writer held its file write_wait (2 s)")
        XCTAssertEqual(try String(contentsOfFile: root + "/out", encoding: .utf8), "One\n")
        XCTAssertEqual(try within10s("cat doc.txt > /dev/null"), 0)
    }

    /// SQLite: a connection that wrote and stays open, and another process's connection reading
    /// the database (before: `read_wait` for a read-only connection, `write_wait` for a read-write
    /// one, for as long as the first stays open).
    func testADatabaseConnectionThatWroteHoldsNoOtherConnectionUp() throws {
        try sh("python3 -c \"import sqlite3; c = sqlite3.connect('db.sqlite'); c.execute('create table t(x)'); c.commit(); c.close()\"")
        try write("other.txt", "")
        let app = try holdOpen("other.txt", "<", then: "exec python3 -c \"import sqlite3, time; c = sqlite3.connect('db.sqlite'); c.execute('insert into t values(1)'); c.commit(); time.sleep(60)\"")
        defer { end(app) }
        usleep(2_500_000)
        XCTAssertEqual(try within10s("python3 -c \\\"import sqlite3; c = sqlite3.connect('file:db.sqlite?mode=ro', uri=True); assert c.execute('select count(*) from t').fetchone()[0] == 1\\\""), 0,
                       "a read-only connection waited for the connection that wrote (read_wait is 30 s)")
        XCTAssertEqual(try within10s("python3 -c \\\"import sqlite3; c = sqlite3.connect('db.sqlite'); c.execute('insert into t values(2)'); c.commit()\\\""), 0)
        XCTAssertEqual(try sh("python3 -c \"import sqlite3; print(sqlite3.connect('db.sqlite').execute('select count(*) from t').fetchone()[0])\"").output, "2\n")
    }

    func testAProgramWritingNowIsWaitedFor() throws {
        try write("doc.txt", "")
        let writer = try holdOpen("doc.txt", "<>", then: "while :; do printf x >&3; sleep 0.3; done")
        defer { end(writer) }
        usleep(2_500_000)
        XCTAssertEqual(try within10s("cat doc.txt > /dev/null"), 124, "a read went ahead past a program writing now")
    }

    func testAProgramThatTruncatedItsFileIsWaitedFor() throws {
        try write("doc.txt", "old\n")
        let writer = try holdOpen("doc.txt", ">", first: "printf N >&3; ")
        defer { end(writer) }
        usleep(2_500_000)
        XCTAssertEqual(try within10s("cat doc.txt > /dev/null"), 124, "a read went ahead past a program saving over the file")
    }
}
