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

    /// One process with two descriptors of a presented document open for writing writes through
    /// the second and closes the first, which wrote nothing: the first's release tells the change
    /// (it finds the file changed since its open), and the second's release, finding the file as
    /// told, tells nothing more (before: told twice, two didChange and two documentChanged for one
    /// write). A write through the second after that is a new change and is told at its close.
    func testAWriteThroughOneOfTwoDescriptorsIsToldOnceWhicheverClosesFirst() throws {
        try write("doc.txt", "orig\n")
        let (p, _) = try presentDocument("doc.txt")
        let script = """
        import os, time
        a = os.open("doc.txt", os.O_WRONLY); b = os.open("doc.txt", os.O_WRONLY)
        os.write(b, b"new\\n"); time.sleep(0.2)
        os.close(a); time.sleep(1.0)
        c = os.open("doc.txt", os.O_WRONLY); os.close(c); time.sleep(0.5)
        os.close(b)
        """
        try script.write(toFile: root + "/two.py", atomically: false, encoding: .utf8)
        try sh("python3 '\(root!)/two.py'")
        let once = p.waitForEvents(1, timeout: 10, settle: 1.5)
        XCTAssertEqual(once.map(\.action), [.reload], "one write, one change: \(once)")
        XCTAssertEqual(backingText("doc.txt"), "new\n\n", "written over orig\\n at 0")

        let again = """
        import os, time
        a = os.open("doc.txt", os.O_WRONLY); b = os.open("doc.txt", os.O_WRONLY)
        os.write(b, b"one\\n"); time.sleep(0.2)
        os.close(a); time.sleep(1.0)
        os.pwrite(b, b"two\\n", 4); time.sleep(0.2)
        os.close(b)
        """
        try again.write(toFile: root + "/again.py", atomically: false, encoding: .utf8)
        try sh("python3 '\(root!)/again.py'")
        let twice = p.waitForEvents(3, timeout: 10, settle: 1.5)
        XCTAssertEqual(twice.map(\.action), [.reload, .reload, .reload], "each of the two writes told once, neither lost: \(twice)")
        XCTAssertEqual(twice.last?.after?.size, 8, "the last change told as the second write left the file")
        XCTAssertEqual(backingText("doc.txt"), "one\ntwo\n")
    }
}
