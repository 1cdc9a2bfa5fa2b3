import Foundation
import Glibc
import XCTest

/// `coordfs present` when its mount goes away and comes back (issue 20, item 6).
final class PresentLifecycleTests: CLITestCase {
    private func present(_ extra: [String] = []) throws -> Child {
        let child = try startCoordfs(["present", mnt + "/doc.txt"] + extra)
        let deadline = Date().addingTimeInterval(10)
        while !child.lines.contains(where: { $0.contains("registered") }) && Date() < deadline { usleep(20_000) }
        guard child.lines.contains(where: { $0.contains("registered") }) else {
            throw CLIError("coordfs present did not register: \(child.stdout) \(child.stderr)")
        }
        return child
    }

    private func waitFor(_ child: Child, timeout: Double = 10, _ condition: ([String]) -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while !condition(child.lines) { if Date() > deadline { return false }; usleep(20_000) }
        return true
    }

    func testPresentSaysAtOnceThatTheMountWentAwayAndRegistersAgainWhenItComesBack() throws {
        FileManager.default.createFile(atPath: backing + "/doc.txt", contents: Data("a\n".utf8))
        try mount()
        let presenter = try present()
        unmount()
        XCTAssertTrue(waitFor(presenter, timeout: 3) { $0.contains("disconnected doc.txt") }, "said at once: \(presenter.stdout)")
        XCTAssertTrue(presenter.stderr.contains("went away"), presenter.stderr)
        XCTAssertNil(presenter.wait(timeout: 0.5), "it waits for the mount to come back")
        try mount()
        XCTAssertTrue(waitFor(presenter) { $0.filter { $0.hasPrefix("registered presenter#") && $0.hasSuffix(" file doc.txt") }.count == 2 },
                      "registered again: \(presenter.stdout) \(presenter.stderr)")
        // And it is a presenter again: a write through the new mount reaches it.
        XCTAssertEqual(sh("echo b > '\(mnt!)/doc.txt'").status, 0)
        XCTAssertTrue(waitFor(presenter) { $0.contains("notification didChange doc.txt") }, presenter.stdout)
        XCTAssertEqual(presenter.stop(), 0)
    }

    /// `--unsaved` survives the remount, and its `registered` line says so again (before, the
    /// session registered it with unsaved changes but the line after the remount left that out).
    func testAPresenterWithUnsavedChangesRegistersAgainWithThem() throws {
        FileManager.default.createFile(atPath: backing + "/doc.txt", contents: Data("a\n".utf8))
        try mount()
        let presenter = try present(["--unsaved"])
        unmount()
        XCTAssertTrue(waitFor(presenter, timeout: 3) { $0.contains("disconnected doc.txt") }, presenter.stdout)
        try mount()
        XCTAssertTrue(waitFor(presenter) { $0.filter { $0.hasPrefix("registered presenter#") && $0.hasSuffix(" file doc.txt unsaved") }.count == 2 },
                      "registered again, with unsaved changes: \(presenter.stdout) \(presenter.stderr)")
        XCTAssertEqual(sh("echo b > '\(mnt!)/doc.txt'").status, 0)
        XCTAssertTrue(waitFor(presenter) { $0.contains { $0.hasPrefix("notification documentChanged doc.txt") && $0.contains("action=conflict") } },
                      "a change is a conflict: \(presenter.stdout)")
        XCTAssertEqual(presenter.stop(), 0)
    }

    func testPresentExitsWhenTheMountGoesAwayWithExitWhenGone() throws {
        FileManager.default.createFile(atPath: backing + "/doc.txt", contents: Data("a\n".utf8))
        try mount()
        let presenter = try present(["--exit-when-gone", "--json"])
        unmount()
        XCTAssertEqual(presenter.wait(timeout: 3), 69, "exits at once with EX_UNAVAILABLE: \(presenter.stdout) \(presenter.stderr)")
        XCTAssertTrue(presenter.lines.last?.contains("\"type\":\"disconnected\"") == true, presenter.stdout)
        XCTAssertTrue(presenter.stderr.contains("went away"), presenter.stderr)
    }
}
