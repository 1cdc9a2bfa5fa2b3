import Glibc
import TestSupport
import XCTest

/// `writtenLines`: what the tests take from a child's output file. A line the child is still writing
/// is not a line yet (PeerLimitsTests once counted "conn" of "conn 2 error limitExceeded" as the
/// third connection's answer, and then found no answer for it).
final class WrittenLinesTests: XCTestCase {
    func testAHalfWrittenLineOfARunningWriterIsNotALineYet() {
        // This process runs: its half line is left out, whole lines are kept.
        XCTAssertEqual(writtenLines(of: getpid()) { "conn 0 welcome \nconn 1 welcome \nconn" }, ["conn 0 welcome ", "conn 1 welcome "])
        XCTAssertEqual(writtenLines(of: getpid()) { "conn" }, [])
        XCTAssertEqual(writtenLines(of: getpid()) { "a\n\nb\n" }, ["a", "b"])
    }

    func testAnEndedWritersLastLineCountsWithoutItsNewline() throws {
        var pid: pid_t = 0
        let argv: [UnsafeMutablePointer<CChar>?] = [strdup("/bin/true"), nil]
        defer { argv.forEach { free($0) } }
        XCTAssertEqual(posix_spawn(&pid, "/bin/true", nil, nil, argv, environ), 0)
        var status: Int32 = 0
        XCTAssertEqual(waitpid(pid, &status, 0), pid)
        XCTAssertEqual(writtenLines(of: pid) { "closed\nopen" }, ["closed", "open"])
    }
}
