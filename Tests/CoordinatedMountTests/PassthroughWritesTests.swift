import XCTest
import Coordination
@testable import CoordFS

/// The matching of the mount's own passthrough writes with the backing watcher's events.
final class PassthroughWritesTests: XCTestCase {
    private let file = NSObject(), other = NSObject()

    func testEventsOfTheWriterWhileItHoldsTheFileOpenAreOwn() {
        let w = PassthroughWrites()
        w.opened(file, by: 10)
        XCTAssertTrue(w.isOwn(file, pid: 10, close: false))
        XCTAssertFalse(w.isOwn(file, pid: 11, close: false), "another process writing the backing file")
        XCTAssertFalse(w.isOwn(other, pid: 10, close: false), "another file")
    }

    func testAReleaseBeforeItsCloseEventIsMatchedOnce() {
        let w = PassthroughWrites()
        w.opened(file, by: 10)
        w.released(file, by: 10)
        XCTAssertTrue(w.isOwn(file, pid: 10, close: false), "its last MODIFY, read after the release")
        XCTAssertTrue(w.isOwn(file, pid: 10, close: true))
        XCTAssertFalse(w.isOwn(file, pid: 10, close: true), "a second close is a change made outside the mount")
        XCTAssertFalse(w.isOwn(file, pid: 10, close: false))
    }

    func testACloseEventBeforeItsReleaseIsMatchedOnce() {
        let w = PassthroughWrites()
        w.opened(file, by: 10)
        XCTAssertTrue(w.isOwn(file, pid: 10, close: true))
        w.released(file, by: 10)
        XCTAssertFalse(w.isOwn(file, pid: 10, close: true), "the release used up the close already seen")
        XCTAssertFalse(w.isOwn(file, pid: 10, close: false))
    }

    func testTwoOpensOfOneProcessAreCountedApart() {
        let w = PassthroughWrites()
        w.opened(file, by: 10)
        w.opened(file, by: 10)
        w.released(file, by: 10)
        XCTAssertTrue(w.isOwn(file, pid: 10, close: true), "the first one's close")
        XCTAssertTrue(w.isOwn(file, pid: 10, close: false), "the second is still open")
        XCTAssertTrue(w.isOwn(file, pid: 10, close: true), "the second one's close, before its release")
        w.released(file, by: 10)
        XCTAssertFalse(w.isOwn(file, pid: 10, close: true))
    }

    func testAnUnmatchedReleaseLapses() throws {
        let w = PassthroughWrites(matchWindow: .milliseconds(50))
        w.opened(file, by: 10)
        w.released(file, by: 10)
        Thread.sleep(forTimeInterval: 0.1)
        XCTAssertFalse(w.isOwn(file, pid: 10, close: true), "a close event that never came (merged with another)")
    }

    /// The kernel forgot the file before the watcher read the close: matched by the path it was opened by.
    func testAForgottenFileIsMatchedByItsPath() throws {
        let w = PassthroughWrites()
        let path = try ItemPath("d/a.txt")
        w.opened(file, by: 10, at: path)
        w.released(file, by: 10)
        XCTAssertFalse(w.isOwn(nil, path: try ItemPath("d/b.txt"), pid: 10, close: true), "another path")
        XCTAssertFalse(w.isOwn(nil, path: path, pid: 11, close: true), "another process")
        XCTAssertTrue(w.isOwn(nil, path: path, pid: 10, close: true))
        XCTAssertFalse(w.isOwn(nil, path: path, pid: 10, close: true), "matched once")
        XCTAssertFalse(w.isOwn(nil, pid: 10, close: true), "neither file nor path")
    }

    /// The same name written, removed and written again: the close is matched with the file that
    /// process wrote, not with an older one of that name.
    func testAPathOfSeveralFilesMatchesTheOneThisProcessWrote() throws {
        let w = PassthroughWrites()
        let path = try ItemPath("d/a.txt")
        w.opened(file, by: 10, at: path)
        w.opened(other, by: 11, at: path)
        w.released(other, by: 11)
        XCTAssertTrue(w.isOwn(nil, path: path, pid: 11, close: true))
        XCTAssertTrue(w.isOwn(nil, path: path, pid: 10, close: true), "the first file, still open")
    }

    /// Tokens whose close event never comes lapse, and their entries go (they keep their nodes alive).
    func testUnmatchedEntriesAreDroppedOnceLapsed() {
        let w = PassthroughWrites(matchWindow: .milliseconds(20))
        weak var gone: NSObject?
        do {
            let node = NSObject()
            gone = node
            w.opened(node, by: 10)
            w.released(node, by: 10)
        }
        XCTAssertNotNil(gone, "kept while its close event may come")
        Thread.sleep(forTimeInterval: 0.05)
        // Many files written since, whose close events have not come yet either.
        let others = (0..<70).map { _ in NSObject() }
        for n in others {
            w.opened(n, by: 10)
            w.released(n, by: 10)
        }
        XCTAssertNil(gone, "dropped once lapsed")
    }
}
