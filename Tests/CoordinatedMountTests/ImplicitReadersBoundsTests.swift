import XCTest
import Glibc
@testable import CoordFS
import Coordination
import DocumentStore

/// The bounds of the lost-update readers table (``ImplicitReaders/Limits``: `max_user_readers`,
/// `max_readers`) without a mount: one user's reads never grow it past its bound nor push out
/// another user's records unless that user holds more; what is dropped is counted.
final class ImplicitReadersBoundsTests: XCTestCase {
    let v = FileIdentity(device: 1, inode: 10, size: 5, modificationTimeNanoseconds: 1_000)

    private func table(perUser: Int, total: Int) -> ImplicitReaders {
        ImplicitReaders(sweepInterval: 0, limits: .init(perUser: perUser, total: total)) { pid in pid > 0 ? 7 : nil }
    }

    private func path(_ n: Int) throws -> ItemPath { try ItemPath("dir/file-\(n)") }

    func testAUserPastItsBoundLosesItsOwnOldestRecords() throws {
        let readers = table(perUser: 100, total: 1_000)
        readers.noteRead(try path(0), identity: v, by: 1, uid: 0)
        // Many files by one process of nobody's, and many processes of nobody's.
        for n in 1...1_000 { readers.noteRead(try path(n), identity: v, by: 2, uid: 65534) }
        for p in 3...300 { readers.noteRead(try path(5_000 + Int(p)), identity: v, by: pid_t(p), uid: 65534) }
        XCTAssertEqual(readers.count(of: 65534), 100)
        XCTAssertEqual(readers.count, 101)
        XCTAssertEqual(readers.dropped, 1_000 + 298 - 100)
        XCTAssertEqual(readers.readVersion(at: try path(0), by: 1), v, "root's record stays")
        XCTAssertNil(readers.readVersion(at: try path(1), by: 2), "the oldest of nobody's went first")
        XCTAssertEqual(readers.readVersion(at: try path(5_300), by: 300), v, "the latest stays")
        // Reading again a path it has a record for adds nothing and drops nothing.
        let before = readers.dropped
        readers.noteRead(try path(5_300), identity: v, by: 300, uid: 65534)
        XCTAssertEqual(readers.dropped, before)
        // A process that exits takes its records; the counts follow.
        readers.drop(try XCTUnwrap(readers.process(300)))
        XCTAssertEqual(readers.count(of: 65534), 99)
        XCTAssertEqual(readers.count, 100)
    }

    func testAtTheTotalTheUserHoldingTheMostPays() throws {
        let readers = table(perUser: 50, total: 60)
        for n in 0..<10 { readers.noteRead(try path(n), identity: v, by: 1, uid: 0) }
        for n in 100..<150 { readers.noteRead(try path(n), identity: v, by: 2, uid: 65534) }
        XCTAssertEqual(readers.count, 60)
        // A third user reads: the table stays at its total, nobody (the biggest) pays, root keeps all.
        for n in 200..<220 { readers.noteRead(try path(n), identity: v, by: 3, uid: 1234) }
        XCTAssertEqual(readers.count, 60)
        XCTAssertEqual(readers.count(of: 0), 10)
        XCTAssertEqual(readers.count(of: 1234), 20)
        XCTAssertEqual(readers.count(of: 65534), 30)
        XCTAssertNil(readers.readVersion(at: try path(100), by: 2))
        XCTAssertEqual(readers.readVersion(at: try path(149), by: 2), v)
        for n in 0..<10 { XCTAssertEqual(readers.readVersion(at: try path(n), by: 1), v) }
    }
}
