import Foundation
import Glibc
import TestSupport
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

    /// A presenter with unsaved changes whose conflict opened before its daemon was killed
    /// (SIGKILL) has it back once it registered again after the next mount: it is told
    /// (`didGainConflict`, after its second `registered` line), `coordfs conflicts` lists it as the
    /// new daemon's presenter's, and the presenter is told when `coordfs resolve` resolves it. Before,
    /// the conflict stayed with the dead daemon's presenter: the presenter heard nothing of it,
    /// neither at its registration nor at its resolution, and the next change opened a second one.
    func testAConflictOpenedBeforeTheDaemonWasKilledIsThePresentersAgainAfterTheRemount() throws {
        FileManager.default.createFile(atPath: backing + "/doc.txt", contents: Data("a\n".utf8))
        try mount()
        let presenter = try present(["--unsaved"])
        XCTAssertEqual(sh("echo b > '\(mnt!)/doc.txt'").status, 0)
        let gained = { (lines: [String]) in lines.filter { $0.hasPrefix("notification didGainConflict doc.txt conflict=") } }
        XCTAssertTrue(waitFor(presenter) { gained($0).count == 1 }, "the conflict opened: \(presenter.stdout)")
        let conflict = try XCTUnwrap(gained(presenter.lines).first?.split(separator: "=").last.map(String.init))

        let first = try XCTUnwrap(daemonPID())
        XCTAssertEqual(kill(first, SIGKILL), 0)
        XCTAssertTrue(ProcessEnd.wait(first, timeout: 10), "daemon \(first) gone")
        XCTAssertTrue(waitFor(presenter, timeout: 3) { $0.contains("disconnected doc.txt") }, presenter.stdout)
        try mount()  // cleans the stale mount first
        let second = try XCTUnwrap(daemonPID())
        XCTAssertTrue(waitFor(presenter) { lines in
            guard let again = lines.lastIndex(where: { $0.hasPrefix("registered presenter#") }), lines.filter({ $0.hasPrefix("registered") }).count == 2 else { return false }
            return lines[again...].contains("notification didGainConflict doc.txt conflict=\(conflict)")
        }, "told of its conflict once registered again: \(presenter.stdout) \(presenter.stderr)")

        let listed = coordfs("conflicts", mnt, "--json")
        XCTAssertEqual(listed.status, 0, "\(listed)")
        let rows = listed.lines.compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        XCTAssertEqual(rows.count, 1, "one conflict: \(listed.stdout)")
        XCTAssertEqual((rows.first?["id"] as? NSNumber)?.stringValue, conflict)
        XCTAssertTrue((rows.first?["presenter"] as? String)?.hasPrefix("coordfs-\(second)-") == true, "the new daemon's presenter's: \(listed.stdout)")

        // Another change under it folds into the same conflict.
        XCTAssertEqual(sh("echo c > '\(mnt!)/doc.txt'").status, 0)
        XCTAssertTrue(waitFor(presenter) { $0.filter { $0.hasPrefix("notification documentChanged doc.txt") }.count == 2 }, presenter.stdout)
        XCTAssertEqual(coordfs("conflicts", mnt, "--json").lines.count, 1, "still one conflict")

        let resolved = coordfs("resolve", mnt + "/doc.txt", "--reload")
        XCTAssertEqual(resolved.status, 0, "\(resolved)")
        XCTAssertTrue(waitFor(presenter) { $0.contains("notification didResolveConflict doc.txt conflict=\(conflict) resolution=reload") },
                      "told of the resolution: \(presenter.stdout)")
        XCTAssertEqual(presenter.stop(), 0)
    }

    /// A presenter with unsaved changes whose document was changed while its daemon was down (the
    /// daemon SIGKILLed, then the file written in the backing folder, as another node or a program
    /// beside the mount would) has a conflict once it registered again after the next mount: it is
    /// told (`didGainConflict`, after its second `registered` line), `coordfs conflicts` lists it as
    /// a change against the file it had, the new daemon's presenter's, the event log records it, and
    /// the presenter is told of its resolution. Before, it registered again with the changed file as
    /// its new base and heard nothing: its next save would have gone over that change unseen.
    func testADocumentChangedWhileTheDaemonWasDownIsAConflictOnceThePresenterIsBack() throws {
        try assertAChangeWhileDownIsAConflictOnceBack { daemon in
            XCTAssertEqual(kill(daemon, SIGKILL), 0)
            XCTAssertTrue(ProcessEnd.wait(daemon, timeout: 10), "daemon \(daemon) gone")
        }
    }

    /// The same after a clean end: `coordfs unmount` while the presenter with unsaved changes is
    /// still connected, then the file written in the backing folder, then the mount again. The
    /// presenter had not let go, so its interest stays in the store at the clean end as at a crash
    /// and the next start opens its conflict. Before, the clean end dropped its interest with its
    /// connection, and the change silently became its new base.
    func testADocumentChangedAfterACleanUnmountIsAConflictOnceThePresenterIsBack() throws {
        try assertAChangeWhileDownIsAConflictOnceBack { daemon in
            unmount()
            XCTAssertTrue(ProcessEnd.wait(daemon, timeout: 10), "daemon \(daemon) ended")
        }
    }

    /// A presenter of doc.txt registered (`extra`), its daemon ended by `end` (given its pid), then
    /// doc.txt written (or `change`d) in the backing folder (as another node or a program beside the mount would),
    /// then the mount back. Returns the presenter and the two daemons' pids.
    private func presentThenChangeWhileDown(_ extra: [String], change: String = "echo theirs >", end: (pid_t) -> Void) throws -> (Child, pid_t, pid_t) {
        FileManager.default.createFile(atPath: backing + "/doc.txt", contents: Data("a\n".utf8))
        try mount()
        let presenter = try present(extra)
        if !extra.contains("--unsaved") {
            // Its registration reaches the store a moment after its answer, unless it has unsaved
            // changes: a write through the mount first, told to it once the store has it.
            XCTAssertEqual(sh("echo b > '\(mnt!)/doc.txt'").status, 0)
            XCTAssertTrue(waitFor(presenter) { $0.contains { $0.hasPrefix("notification documentChanged doc.txt kind=change action=reload") } }, presenter.stdout)
        }
        let first = try XCTUnwrap(daemonPID())
        end(first)
        XCTAssertTrue(waitFor(presenter, timeout: 3) { $0.contains("disconnected doc.txt") }, presenter.stdout)
        XCTAssertEqual(sh("\(change) '\(backing!)/doc.txt'").status, 0)
        try mount()  // cleans a stale mount first
        return (presenter, first, try XCTUnwrap(daemonPID()))
    }

    /// The lines after the presenter's second `registered` line (none before it).
    private func afterRegisteringAgain(_ lines: [String]) -> ArraySlice<String> {
        guard lines.filter({ $0.hasPrefix("registered") }).count == 2, let i = lines.lastIndex(where: { $0.hasPrefix("registered") }) else { return [] }
        return lines[i...]
    }

    private func assertAChangeWhileDownIsAConflictOnceBack(end: (pid_t) -> Void) throws {
        let (presenter, first, second) = try presentThenChangeWhileDown(["--unsaved"], end: end)
        let gained = { (lines: [String]) -> [String] in
            self.afterRegisteringAgain(lines).filter { $0.hasPrefix("notification didGainConflict doc.txt conflict=") }.compactMap { $0.split(separator: "=").last.map(String.init) }
        }
        XCTAssertTrue(waitFor(presenter) { gained($0).count == 1 }, "told of a conflict once registered again: \(presenter.stdout) \(presenter.stderr)")
        let conflict = try XCTUnwrap(gained(presenter.lines).first)

        let listed = coordfs("conflicts", mnt, "--json")
        XCTAssertEqual(listed.status, 0, "\(listed)")
        let rows = listed.lines.compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        XCTAssertEqual(rows.count, 1, "one conflict: \(listed.stdout)")
        XCTAssertEqual((rows.first?["id"] as? NSNumber)?.stringValue, conflict)
        XCTAssertEqual(rows.first?["kind"] as? String, "change")
        XCTAssertTrue((rows.first?["presenter"] as? String)?.hasPrefix("coordfs-\(second)-") == true, "the new daemon's presenter's: \(listed.stdout)")
        let detected = log(["--kind", "conflictDetected"])
        XCTAssertEqual(detected.map(\.path), ["/doc.txt"], "logged once, at the start")
        XCTAssertTrue((detected.first?.details["presenterID"] as? String)?.hasPrefix("coordfs-\(first)-") == true, "\(detected.map(\.json))")

        let resolved = coordfs("resolve", mnt + "/doc.txt", "--reload")
        XCTAssertEqual(resolved.status, 0, "\(resolved)")
        XCTAssertTrue(waitFor(presenter) { $0.contains("notification didResolveConflict doc.txt conflict=\(conflict) resolution=reload") },
                      "told of the resolution: \(presenter.stdout)")
        XCTAssertEqual(try String(contentsOfFile: backing + "/doc.txt", encoding: .utf8), "theirs\n", "reload keeps theirs")
        XCTAssertEqual(presenter.stop(), 0)
    }

    /// A presenter WITHOUT unsaved changes whose document was written while its daemon was down
    /// (SIGKILL, or a clean `coordfs unmount`) is told once it registered again after the next
    /// mount, as a running daemon would have told it: `documentChanged` with action reload, then
    /// `didChange`, and no conflict. A presenter registering later hears nothing of it (told once).
    /// Before, it registered again with the changed file as its new base, told nothing: its editor
    /// went on showing the old bytes, and its next save went over the change unseen.
    func testAPresenterWithoutUnsavedChangesIsToldToReloadADocumentChangedWhileTheDaemonWasDown() throws {
        try assertToldOnceBack(["documentChanged doc.txt kind=change action=reload", "didChange doc.txt"]) { daemon in
            XCTAssertEqual(kill(daemon, SIGKILL), 0)
            XCTAssertTrue(ProcessEnd.wait(daemon, timeout: 10), "daemon \(daemon) gone")
        }
    }

    func testAPresenterWithoutUnsavedChangesIsToldToReloadADocumentChangedAfterACleanUnmount() throws {
        try assertToldOnceBack(["documentChanged doc.txt kind=change action=reload", "didChange doc.txt"]) { daemon in
            unmount()
            XCTAssertTrue(ProcessEnd.wait(daemon, timeout: 10), "daemon \(daemon) ended")
        }
    }

    /// The same for a document deleted while the daemon was down: it is told to close
    /// (`documentChanged` with kind deletion, action close, then `didDelete`).
    func testAPresenterWithoutUnsavedChangesIsToldToCloseADocumentDeletedWhileTheDaemonWasDown() throws {
        try assertToldOnceBack(["documentChanged doc.txt kind=deletion action=close", "didDelete doc.txt"], change: "rm") { daemon in
            XCTAssertEqual(kill(daemon, SIGKILL), 0)
            XCTAssertTrue(ProcessEnd.wait(daemon, timeout: 10), "daemon \(daemon) gone")
        }
    }

    /// `told`: the notifications (after `notification `, each line's start) it hears, in order, once
    /// registered again after `end` and the change; none is a conflict, and a second presenter of
    /// the same document registered afterwards is told nothing.
    private func assertToldOnceBack(_ told: [String], change: String = "echo theirs >", end: (pid_t) -> Void) throws {
        let (presenter, _, _) = try presentThenChangeWhileDown([], change: change, end: end)
        let heard = { (lines: [String]) -> [String] in
            self.afterRegisteringAgain(lines).filter { $0.hasPrefix("notification ") }.map { String($0.dropFirst("notification ".count)) }
        }
        XCTAssertTrue(waitFor(presenter) { heard($0).count >= told.count }, "told once registered again: \(presenter.stdout) \(presenter.stderr)")
        let lines = heard(presenter.lines)
        XCTAssertEqual(lines.count, told.count, "\(lines)")
        for (line, start) in zip(lines, told) { XCTAssertTrue(line.hasPrefix(start), "\(line) is \(start)...") }
        XCTAssertEqual(coordfs("conflicts", mnt, "--json").stdout, "", "no conflict")
        // In the event log as a running daemon's tell: one did* record, by this daemon (after its
        // mount record), its actor unknown (pid 0) and the presenter's user.
        let kind = told.last!.split(separator: " ")[0]
        let toldRecords = { () -> [Record] in
            let all = self.log()
            let mounted = all.lastIndex { $0.kind == "mount" } ?? 0
            return all[mounted...].filter { $0.kind == kind && $0.path == "/doc.txt" }
        }
        XCTAssertTrue(pollUntil(within: 10) { !toldRecords().isEmpty }, "the tell is logged: \(log().map(\.json))")
        let logged = toldRecords()
        XCTAssertEqual(logged.count, 1, "once: \(logged.map(\.json))")
        XCTAssertEqual(logged.first?.pid, 0, "\(logged.map(\.json))")
        XCTAssertEqual(logged.first?.uid, getuid(), "\(logged.map(\.json))")
        let later = try present()
        XCTAssertEqual(sh("echo mine > '\(mnt!)/doc.txt'").status, 0, "a write (the file made again)")
        XCTAssertTrue(waitFor(later) { $0.contains("notification didChange doc.txt") }, later.stdout)
        // What it is told at its registration comes before the write asks it anything: nothing.
        XCTAssertEqual(later.lines.prefix { !$0.hasPrefix("ask ") }.filter { $0.hasPrefix("notification ") }, [], "told nothing: \(later.stdout)")
        XCTAssertEqual(later.stop(), 0)
        XCTAssertEqual(presenter.stop(), 0)
    }

    /// Two editors of one user with unsaved changes in one document each have a conflict when its
    /// daemon is killed: once both registered again after the next mount, each has one of the two
    /// back (told with `didGainConflict`), never both nor the same one, and `coordfs conflicts`
    /// lists two, each the new daemon's presenter's: nothing lost, nothing doubled. (Which editor gets
    /// which cannot be told after the crash: the newest goes to the first to register again.)
    func testTwoPresentersConflictsAfterTheDaemonWasKilledAreOneEachAgain() throws {
        FileManager.default.createFile(atPath: backing + "/doc.txt", contents: Data("a\n".utf8))
        try mount()
        let editors = [try present(["--unsaved"]), try present(["--unsaved"])]
        XCTAssertEqual(sh("echo b > '\(mnt!)/doc.txt'").status, 0)
        let gained = { (lines: [String]) in lines.filter { $0.hasPrefix("notification didGainConflict doc.txt conflict=") }.compactMap { $0.split(separator: "=").last.map(String.init) } }
        for e in editors { XCTAssertTrue(waitFor(e) { gained($0).count == 1 }, "the conflict opened: \(e.stdout)") }
        let before = Set(editors.flatMap { gained($0.lines) })
        XCTAssertEqual(before.count, 2, "one each")

        let first = try XCTUnwrap(daemonPID())
        XCTAssertEqual(kill(first, SIGKILL), 0)
        XCTAssertTrue(ProcessEnd.wait(first, timeout: 10), "daemon \(first) gone")
        try mount()  // cleans the stale mount first
        let second = try XCTUnwrap(daemonPID())
        // After its second `registered` line, each is told of one conflict.
        let again = { (lines: [String]) -> [String] in
            guard lines.filter({ $0.hasPrefix("registered") }).count == 2, let i = lines.lastIndex(where: { $0.hasPrefix("registered") }) else { return [] }
            return gained(Array(lines[i...]))
        }
        for e in editors { XCTAssertTrue(waitFor(e) { again($0).count == 1 }, "told of one once registered again: \(e.stdout) \(e.stderr)") }
        XCTAssertEqual(Set(editors.flatMap { again($0.lines) }), before, "each has one of the two back")
        let listed = coordfs("conflicts", mnt, "--json")
        XCTAssertEqual(listed.status, 0, "\(listed)")
        let rows = listed.lines.compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        XCTAssertEqual(Set(rows.compactMap { ($0["id"] as? NSNumber)?.stringValue }), before, "\(listed.stdout)")
        XCTAssertEqual(Set(rows.compactMap { $0["presenter"] as? String }).count, 2, "two presenters: \(listed.stdout)")
        XCTAssertTrue(rows.allSatisfy { ($0["presenter"] as? String)?.hasPrefix("coordfs-\(second)-") == true }, "the new daemon's presenters': \(listed.stdout)")
        for e in editors { XCTAssertEqual(e.stop(), 0) }
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
