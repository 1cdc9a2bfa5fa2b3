import XCTest
import Foundation
import Glibc
import ControlProtocol
@testable import CoordFS

/// End to end with the coordfs binary: `present` in a second process, `coordinate`, `status`,
/// permissions as nobody, and a presenter process killed with SIGKILL.
final class CommandLineTests: ClientMountTestCase {
    override func configure(_ options: inout MountOptions) {
        super.configure(&options)
        options.allowOther = true  // the permission tests connect as nobody
    }

    /// Starts `coordfs present` and waits for its registration line.
    private func present(_ relative: String, _ extra: [String] = [], user: (uid: uid_t, gid: gid_t)? = nil) throws -> Child {
        let child = try start([try Self.coordfsBinary(), "present", mnt + "/" + relative] + extra, user: user)
        XCTAssertTrue(eventually { child.text.contains("registered presenter#") || !self.isRunning(child) }, child.text)
        return child
    }

    func testAPresenterProcessIsAskedBeforeAToolWritesAndToldAfter() throws {
        try writeBacking("doc.txt", "old\n")
        let presenter = try present("doc.txt", ["--delay", "0.5"])
        XCTAssertTrue(presenter.text.contains("registered presenter#"), presenter.text)
        let writer = try start(["/bin/sh", "-c", "echo new > '\(mnt!)/doc.txt'"])
        XCTAssertTrue(eventually { presenter.text.contains("relinquishToWriter") }, presenter.text)
        XCTAssertEqual(readBacking("doc.txt"), "old\n", "the presenter is asked before the write lands")
        XCTAssertEqual(wait(writer), 0)
        XCTAssertEqual(readBacking("doc.txt"), "new\n")
        XCTAssertTrue(eventually { presenter.text.contains("notification didChange doc.txt") }, presenter.text)
        let lines = presenter.lines
        let ask = lines.firstIndex { $0.hasPrefix("ask ") && $0.contains("relinquishToWriter doc.txt") }
        let answered = lines.firstIndex { $0.hasPrefix("answered ") }
        let notified = lines.firstIndex { $0 == "notification didChange doc.txt" }
        XCTAssertNotNil(ask, presenter.text)
        XCTAssertLessThan(ask!, answered!)
        XCTAssertLessThan(answered!, notified!, "told after the write: \(lines)")
        // SIGTERM ends it cleanly and unregisters it.
        kill(presenter.pid, SIGTERM)
        XCTAssertEqual(wait(presenter, timeout: 5), 0)
        XCTAssertTrue(eventually { self.presenterCount == 0 })
    }

    func testOnSaveRunsACommandAndItsFailureRefusesTheAccess() throws {
        try writeBacking("doc.txt", "text\n")
        let marker = root + "/saved"
        let presenter = try present("doc.txt", ["--on-save", "echo \"$COORDFS_ASK $COORDFS_ITEM\" > '\(marker)'; test ! -e '\(root!)/refuse'"])
        // A coordinated read asks the presenter to save first.
        let read = try run([try Self.coordfsBinary(), "coordinate", "--read", mnt + "/doc.txt", "--", "cat", mnt + "/doc.txt"])
        XCTAssertEqual(read.status, 0, read.output)
        XCTAssertEqual(read.output, "text\n")
        XCTAssertEqual(try String(contentsOfFile: marker, encoding: .utf8), "save doc.txt\n")
        // Now the command fails: the save is refused, so is the read.
        creat(root + "/refuse", 0o644)
        let refused = try run([try Self.coordfsBinary(), "coordinate", "--read", mnt + "/doc.txt", "--", "true"])
        XCTAssertEqual(refused.status, 1, refused.output)
        XCTAssertTrue(refused.output.contains("refused"), refused.output)
        XCTAssertTrue(presenter.text.contains("failed ask#"), presenter.text)
    }

    func testAKilledPresenterProcessDisappearsAtOnceAndTheWaitingWriteGoesAhead() throws {
        try writeBacking("doc.txt", "old\n")
        let presenter = try present("doc.txt", ["--delay", "60"])
        let writer = try start(["/bin/sh", "-c", "echo new > '\(mnt!)/doc.txt'"])
        XCTAssertTrue(eventually { presenter.text.contains("relinquishToWriter") }, presenter.text)
        usleep(100_000)
        XCTAssertTrue(isRunning(writer), "waiting for the slow presenter")
        let killed = Date()
        kill(presenter.pid, SIGKILL)
        XCTAssertEqual(wait(writer, timeout: 8), 0)
        XCTAssertLessThan(Date().timeIntervalSince(killed), 2, "not at the 10 s ask deadline")
        XCTAssertEqual(readBacking("doc.txt"), "new\n")
        XCTAssertTrue(eventually { self.presenterCount == 0 })
        XCTAssertFalse(recorded { if case .presenterGone = $0 { return true }; return false }.isEmpty)
    }

    func testCoordinateRunsTheCommandWithItsExitCodeAndExcludesOtherWriters() throws {
        try writeBacking("doc.txt", "0\n")
        let bin = try Self.coordfsBinary()
        XCTAssertEqual(try run([bin, "coordinate", "--read", mnt + "/doc.txt", "--", "sh", "-c", "exit 3"]).status, 3)
        XCTAssertEqual(try run([bin, "coordinate", "--read", mnt + "/doc.txt", "--", "/nonexistent/tool"]).status, 127)
        XCTAssertEqual(try run([bin, "coordinate", "--read", "/tmp", "--", "true"]).status, 69)
        XCTAssertEqual(try run([bin, "coordinate", "--write", mnt + "/missing-dir/x", "--", "true"]).status, 66)
        XCTAssertEqual(try run([bin, "coordinate", "--read", "--write", mnt + "/doc.txt", "--", "true"]).status, 64)
        // The command's own write through the mount does not wait for its access.
        let start = Date()
        let own = try run([bin, "coordinate", "--write", mnt + "/doc.txt", "--", "sh", "-c", "echo 1 > '\(mnt!)/doc.txt'"])
        XCTAssertEqual(own.status, 0, own.output)
        XCTAssertLessThan(Date().timeIntervalSince(start), 5)
        XCTAssertEqual(readBacking("doc.txt"), "1\n")
        // Nor do the writes of the processes it starts (a script's cp; before, they waited for the
        // access until write_wait and failed with EBUSY); their own explicit accesses still do.
        try writeBacking("new.txt", "3\n")
        let children = Date()
        let script = try run([bin, "coordinate", "--write", mnt + "/doc.txt", "--", "sh", "-c",
                              "cp '\(mnt!)/new.txt' '\(mnt!)/doc.txt' && cat '\(mnt!)/doc.txt' > /dev/null; true"])
        XCTAssertEqual(script.status, 0, script.output)
        XCTAssertLessThan(Date().timeIntervalSince(children), 5)
        XCTAssertEqual(readBacking("doc.txt"), "3\n")
        let nested = try run([bin, "coordinate", "--write", mnt + "/doc.txt", "--", "sh", "-c",
                              "'\(bin)' coordinate --write --timeout 0.3 -q '\(mnt!)/doc.txt' -- true; echo $?"])
        XCTAssertEqual(nested.output.trimmingCharacters(in: .whitespacesAndNewlines), "75", "a nested coordinate waits for the access it runs in")
        // A holder: others (coordinated or not) wait until its command exits.
        let holder = try self.start([bin, "coordinate", "--write", mnt + "/doc.txt", "--", "sleep", "1.5"])
        // (Its own access: the release of an earlier close(2) may still be on its way.)
        XCTAssertTrue(eventually { self.daemon.coordinator.status().held.contains { $0.origin.pid == holder.pid } }, holder.text)
        let began = Date()
        let second = try run([bin, "coordinate", "--write", mnt + "/doc.txt", "--", "sh", "-c", "echo 2 > '\(mnt!)/doc.txt'"])
        XCTAssertEqual(second.status, 0, second.output)
        XCTAssertGreaterThan(Date().timeIntervalSince(began), 0.8, "the second writer waited for the first")
        XCTAssertEqual(wait(holder), 0)
        XCTAssertEqual(readBacking("doc.txt"), "2\n")
        // A timeout: the access is not granted in time.
        let blocker = try self.start([bin, "coordinate", "--write", mnt + "/doc.txt", "--", "sleep", "3"])
        XCTAssertTrue(eventually { self.daemon.coordinator.status().held.contains { $0.origin.pid == blocker.pid } })
        XCTAssertEqual(try run([bin, "coordinate", "--read", "--timeout", "0.3", mnt + "/doc.txt", "--", "true"]).status, 75)
        kill(blocker.pid, SIGKILL)
        wait(blocker)
    }

    func testStatusListsPresentersAccessesAndWaitingRequests() throws {
        try writeBacking("doc.txt", "d\n")
        let bin = try Self.coordfsBinary()
        let presenter = try present("doc.txt")
        let holder = try start([bin, "coordinate", "--write", mnt + "/doc.txt", "--", "sleep", "3"])
        XCTAssertTrue(eventually { !self.daemon.coordinator.status().held.isEmpty })
        let waiter = try start([bin, "coordinate", "--read", mnt + "/doc.txt", "--", "true"])
        XCTAssertTrue(eventually { !self.daemon.coordinator.status().waiting.isEmpty })
        let text = try run([bin, "status", mnt])
        XCTAssertEqual(text.status, 0, text.output)
        XCTAssertTrue(text.output.contains("presenters (1)"), text.output)
        XCTAssertTrue(text.output.contains("held accesses (1)"), text.output)
        XCTAssertTrue(text.output.contains("waiting requests (1)"), text.output)
        let presenterRow = text.output.split(separator: "\n").first { $0.contains(" \(presenter.pid) ") }
        XCTAssertNotNil(presenterRow, text.output)
        XCTAssertTrue(presenterRow?.contains("coordfs") == true && presenterRow?.hasSuffix("doc.txt") == true, text.output)
        XCTAssertTrue(text.output.contains("sleep"), "the holder runs sleep in its own process: \(text.output)")

        let json = try run([bin, "status", "--json", mnt])
        XCTAssertEqual(json.status, 0, json.output)
        let object = try JSONSerialization.jsonObject(with: Data(json.output.utf8)) as? [String: Any]
        let presenters = object?["presenters"] as? [[String: Any]]
        XCTAssertEqual(presenters?.first?["path"] as? String, "doc.txt")
        XCTAssertEqual(presenters?.first?["pid"] as? Int, Int(presenter.pid))
        let accesses = object?["accesses"] as? [[String: Any]]
        XCTAssertEqual(accesses?.first?["pid"] as? Int, Int(holder.pid))
        XCTAssertEqual((accesses?.first?["intents"] as? [[String: Any]])?.first?["intent"] as? String, "write")
        XCTAssertEqual((object?["waiting"] as? [[String: Any]])?.first?["pid"] as? Int, Int(waiter.pid))
        XCTAssertEqual(wait(holder), 0)
        XCTAssertEqual(wait(waiter), 0)
        XCTAssertEqual(try run([bin, "status", "/tmp"]).status, 69)
    }

    /// An access still asking a slow presenter says so in `status`: which presenter, which ask,
    /// for how long (before, it was listed as held like a granted one, and nothing told an
    /// operator that the writer was in fact waiting for that presenter).
    func testStatusSaysWhichPresenterAnAccessNotGrantedYetWaitsFor() throws {
        try writeBacking("doc.txt", "old\n")
        let bin = try Self.coordfsBinary()
        let presenter = try present("doc.txt", ["--delay", "3"])
        let id = presenter.lines.first { $0.hasPrefix("registered presenter#") }?.split(separator: " ")[1].dropFirst("presenter#".count)
        let writer = try start(["/bin/sh", "-c", "echo new > '\(mnt!)/doc.txt'"])
        XCTAssertTrue(eventually { presenter.text.contains("relinquishToWriter") }, presenter.text)
        let text = try run([bin, "status", mnt])
        XCTAssertEqual(text.status, 0, text.output)
        let row = text.output.split(separator: "\n").first { $0.contains("write doc.txt") }
        XCTAssertTrue(row?.contains("asking presenter \(id ?? "?") to relinquishToWriter (") == true, text.output)

        let json = try run([bin, "status", "--json", mnt])
        let object = try JSONSerialization.jsonObject(with: Data(json.output.utf8)) as? [String: Any]
        let access = (object?["accesses"] as? [[String: Any]])?.first
        let asking = access?["asking"] as? [[String: Any]]
        XCTAssertEqual(asking?.count, 1, json.output)
        XCTAssertEqual(asking?.first?["presenter"] as? Int, id.flatMap { Int($0) }, json.output)
        XCTAssertEqual(asking?.first?["ask"] as? String, "relinquishToWriter", json.output)
        XCTAssertNotNil(asking?.first?["askingMs"] as? Int, json.output)

        // Granted, it asks no one: a holder's entry has an empty list.
        XCTAssertEqual(wait(writer, timeout: 10), 0)
        let holder = try start([bin, "coordinate", "--write", "--timeout", "10", mnt + "/doc.txt", "--", "sleep", "30"])
        XCTAssertTrue(eventually(timeout: 15) { self.daemon.coordinator.status().held.contains { $0.origin.pid == holder.pid && $0.phase == .granted } })
        let held = try run([bin, "status", "--json", mnt])
        let after = try JSONSerialization.jsonObject(with: Data(held.output.utf8)) as? [String: Any]
        XCTAssertEqual(((after?["accesses"] as? [[String: Any]])?.first?["asking"] as? [Any])?.count, 0, held.output)
        XCTAssertFalse(try run([bin, "status", mnt]).output.contains("asking presenter"))
        kill(holder.pid, SIGKILL)
        wait(holder)
    }

    func testNobodyMayPresentAndCoordinateOnlyWhatItCouldAccess() throws {
        let bin = try Self.coordfsBinary()
        let nobody = (uid: uid_t(65534), gid: gid_t(65534))
        var st = stat()
        XCTAssertEqual(stat(socketPath, &st), 0)
        XCTAssertEqual(st.st_mode & 0o777, 0o666, "allow_other opens the socket to everyone")
        try writeBacking("secret.txt", "s\n", mode: 0o600)
        try writeBacking("public.txt", "p\n", mode: 0o644)
        mkdir(backing + "/private", 0o700)
        try writeBacking("private/inner.txt", "i\n", mode: 0o644)

        let denied = try present("secret.txt", user: nobody)
        XCTAssertEqual(wait(denied), 77, denied.text)
        XCTAssertTrue(denied.text.contains("permissionDenied"), denied.text)
        let hidden = try present("private/inner.txt", user: nobody)
        XCTAssertEqual(wait(hidden), 77, "a directory it cannot search: \(hidden.text)")
        XCTAssertEqual(try run([bin, "coordinate", "--write", mnt + "/public.txt", "--", "true"], user: nobody).status, 77)
        XCTAssertEqual(try run([bin, "coordinate", "--write", mnt + "/new.txt", "--", "true"], user: nobody).status, 77,
                       "creating needs the directory writable")
        XCTAssertEqual(try run([bin, "coordinate", "--read", mnt + "/secret.txt", "--", "true"], user: nobody).status, 77)
        XCTAssertEqual(presenterCount, 0)
        XCTAssertTrue(daemon.coordinator.status().held.isEmpty, "nothing changed")

        // What nobody can read, it may present and coordinate-read.
        let allowed = try present("public.txt", user: nobody)
        XCTAssertTrue(isRunning(allowed), allowed.text)
        XCTAssertEqual(try run([bin, "coordinate", "--read", mnt + "/public.txt", "--", "cat", mnt + "/public.txt"], user: nobody).output, "p\n")
        XCTAssertEqual(daemon.coordinator.status().presenters.first?.owner.uid, 65534)
        // And it does not see root's presenters in places it cannot reach.
        let rootPresenter = try present("private/inner.txt")
        XCTAssertTrue(isRunning(rootPresenter))
        let status = try run([bin, "status", "--json", mnt], user: nobody)
        XCTAssertTrue(status.output.contains("public.txt"), status.output)
        XCTAssertFalse(status.output.contains("inner.txt"), status.output)
    }
}
