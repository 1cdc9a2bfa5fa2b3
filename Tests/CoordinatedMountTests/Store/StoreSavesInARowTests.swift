import XCTest
import Foundation
@testable import CoordFS
import Coordination
import DocumentStore

/// One process saving a presented document again and again (a shell's `echo a > doc; echo b > doc`):
/// close(2) does not wait for the daemon's RELEASE, so each next open may come before the last
/// one's release was handled. Each save is one change, and keeps the version the presenter had
/// before it.
final class StoreSavesInARowTests: StoreMountTestCase {
    func testOneProcessesSavesInARowKeepEachVersionThePresenterHadBefore() throws {
        try write("doc.txt", "orig\n")
        let (p, _) = try presentDocument("doc.txt")
        // Each RELEASE handled a second late: the next save's open always comes first.
        try delayReleases(1000)
        try sh("echo a > doc.txt; echo b > doc.txt; echo c > doc.txt")
        let events = p.waitForEvents(3, timeout: 20, settle: 1.5)
        XCTAssertEqual(events.map(\.action), [.reload, .reload, .reload], "one change per save: \(events)")
        XCTAssertEqual(events.map { $0.after?.size }, [2, 2, 2], "each save told as it left the file: \(events)")
        XCTAssertEqual(try keptTexts("doc.txt"), ["b\n", "a\n", "orig\n"], "the version before each save")
        XCTAssertEqual(try store.versions(ofPath: "doc.txt").map(\.reason), [.beforeWrite, .beforeWrite, .beforeWrite])
        guard case .pending(let identity)? = try store.document(atPath: "doc.txt")?.presenters.first?.base else {
            return XCTFail("the presenter's base is the file as it is now: \(String(describing: try store.document(atPath: "doc.txt")))")
        }
        XCTAssertEqual(identity.size, 2)
        XCTAssertEqual(backingText("doc.txt"), "c\n")
    }
}
