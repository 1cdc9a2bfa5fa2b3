import XCTest
import Foundation
import Glibc
import EventLog
@testable import CoordFS

/// Coordination at any depth (docs/semantics.md, "Deep paths"): below PATH_MAX (17 levels of
/// 250-byte names) the kernel no longer gives an item's path through /proc/self/fd, and the mount
/// once skipped coordination there silently (an unlink returned at once, nobody asked, nothing
/// logged). A `coordfs present` process on the top folder, tools working fd-relative below.
final class DeepPathTests: ClientMountTestCase {
    /// 17 levels of 250-byte names: 4,267 bytes of path below `d`.
    static let levels = (0..<17).map { String(format: "%02d", $0) + String(repeating: "n", count: 248) }
    static var deepDirectory: String { "d/" + levels.joined(separator: "/") }

    /// Makes d/<levels>/ and `files` in it in the backing folder, fd-relative (no path string
    /// beyond PATH_MAX is given to a system call).
    private func makeDeepTree(files: [String], levels: [String] = DeepPathTests.levels) throws {
        var fd = open(backing, O_RDONLY | O_DIRECTORY)
        XCTAssertGreaterThanOrEqual(fd, 0)
        for name in ["d"] + levels {
            XCTAssertEqual(mkdirat(fd, name, 0o755), 0, String(cString: strerror(errno)))
            let next = openat(fd, name, O_RDONLY | O_DIRECTORY)
            XCTAssertGreaterThanOrEqual(next, 0)
            close(fd)
            fd = next
        }
        for f in files {
            let file = openat(fd, f, O_WRONLY | O_CREAT, 0o644)
            XCTAssertGreaterThanOrEqual(file, 0)
            _ = write(file, "x\n", 2)
            close(file)
        }
        close(fd)
        XCTAssertGreaterThan(Self.deepDirectory.utf8.count + 1 + (mnt.utf8.count), Int(PATH_MAX))
    }

    /// A Python program run in the mount that walks down to the deep directory fd-relative and then
    /// does `action` (Python statements, `fd` being the deep directory).
    private func runDeep(_ action: String, levels: Int = 17, digits: Int = 2) throws -> (status: Int32?, output: String) {
        let script = """
        import os, sys
        fd = os.open(\(quoted(mnt + "/d")), os.O_RDONLY | os.O_DIRECTORY)
        for i in range(\(levels)):
            n = os.open("%0\(digits)d" % i + "n" * \(250 - digits), os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = n
        \(action)
        """
        return try run(["/usr/bin/python3", "-c", script])
    }

    private func quoted(_ s: String) -> String { "'" + s + "'" }

    func testAnUnlinkBelowPathMaxUnderAPresentedFolderAsksAndIsLogged() throws {
        try makeDeepTree(files: ["gone.txt"])
        let presenter = try start([try Self.coordfsBinary(), "present", mnt + "/d"])
        XCTAssertTrue(eventually { presenter.text.contains("registered presenter#") }, presenter.text)
        let deep = Self.deepDirectory + "/gone.txt"

        let r = try runDeep("os.unlink('gone.txt', dir_fd=fd)")
        XCTAssertEqual(r.status, 0, r.output)
        // The presenter was asked with the whole path, before, and told after.
        XCTAssertTrue(eventually { presenter.lines.contains { $0.hasPrefix("notification subitemDid") && $0.hasSuffix(" subitem=\(deep)") } },
                      "not told: \(presenter.text.suffix(2000))")
        XCTAssertTrue(presenter.lines.contains { $0.hasPrefix("ask ") && $0.contains(" accommodateSubitemDeletion d subitem=\(deep) ") },
                      "no accommodateSubitemDeletion ask for the deep item: \(presenter.text.suffix(2000))")
        // And the log has it, whole.
        try daemon.flushEventLog()
        let records = try EventLogReader(directory: daemon.plan.state.eventLog).read(limit: 100_000)
        let request = records.first { $0.kind == .intentRequested && $0.path == "/" + deep && $0.details.options.contains("forDeleting") }
        XCTAssertNotNil(request, "no intentRequested record for the deep item: \(records.map { "\($0.kind) \($0.path.count)" })")
        XCTAssertTrue(records.contains { $0.kind == .presenterAsked && $0.details.ask == .accommodateSubitemDeletion
                                         && $0.details.requestID == request?.details.requestID && $0.path == "/d" })
        XCTAssertTrue(records.contains { $0.kind == .subitemDeleted && $0.path == "/" + deep },
                      "no subitemDeleted record: \(records.map { "\($0.kind) \($0.path.count)" })")
        kill(presenter.pid, SIGTERM)
        _ = wait(presenter, timeout: 5)
    }

    func testAWriteBelowPathMaxIsCoordinatedAndARenameMovesTheName() throws {
        try makeDeepTree(files: ["doc.txt"])
        let presenter = try start([try Self.coordfsBinary(), "present", mnt + "/d"])
        XCTAssertTrue(eventually { presenter.text.contains("registered presenter#") }, presenter.text)
        let deep = Self.deepDirectory

        // A file below PATH_MAX opened for writing: its path comes from the folder it was found in.
        var r = try runDeep("f = os.open('doc.txt', os.O_WRONLY | os.O_TRUNC, dir_fd=fd); os.write(f, b'new'); os.close(f)")
        XCTAssertEqual(r.status, 0, r.output)
        XCTAssertTrue(eventually { presenter.text.contains("notification subitemDidChange d subitem=\(deep)/doc.txt") },
                      presenter.text.suffix(2000).description)
        // A rename there: the presenter of the top folder hears the move with both whole paths.
        r = try runDeep("os.rename('doc.txt', 'moved.txt', src_dir_fd=fd, dst_dir_fd=fd)")
        XCTAssertEqual(r.status, 0, r.output)
        XCTAssertTrue(eventually { presenter.text.contains("notification subitemDidMove d subitem=\(deep)/doc.txt newPath=\(deep)/moved.txt") },
                      presenter.text.suffix(2000).description)
        try daemon.flushEventLog()
        let records = try EventLogReader(directory: daemon.plan.state.eventLog).read(limit: 100_000)
        XCTAssertTrue(records.contains { $0.kind == .subitemMoved && $0.oldPath == "/\(deep)/doc.txt" && $0.path == "/\(deep)/moved.txt" },
                      "no subitemMoved record with the deep paths")
        kill(presenter.pid, SIGTERM)
        _ = wait(presenter, timeout: 5)
    }

    /// A deep file held open while it is moved to another deep folder outside the mount, then
    /// fchmod'ed: its path is no longer where it was looked up, and is found among the folders the
    /// kernel knows (before: no path, so no coordination).
    func testADeepFileMovedOutsideTheMountIsStillCoordinatedWhereItIs() throws {
        try makeDeepTree(files: [])
        var fd = open(backing + "/d", O_RDONLY | O_DIRECTORY)
        for name in Self.levels {
            let next = openat(fd, name, O_RDONLY | O_DIRECTORY)
            close(fd)
            fd = next
        }
        XCTAssertEqual(mkdirat(fd, "a", 0o755), 0)
        XCTAssertEqual(mkdirat(fd, "b", 0o755), 0)
        let a = openat(fd, "a", O_RDONLY | O_DIRECTORY), b = openat(fd, "b", O_RDONLY | O_DIRECTORY)
        defer { close(a); close(b); close(fd) }
        close(openat(a, "doc.txt", O_WRONLY | O_CREAT, 0o644))
        let presenter = try start([try Self.coordfsBinary(), "present", mnt + "/d"])
        XCTAssertTrue(eventually { presenter.text.contains("registered presenter#") }, presenter.text)

        let go = root + "/go"
        let script = """
        import os, sys, time
        fd = os.open(\(quoted(mnt + "/d")), os.O_RDONLY | os.O_DIRECTORY)
        for i in range(17):
            n = os.open("%02d" % i + "n" * 248, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = n
        a = os.open("a", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        b = os.open("b", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        f = os.open("doc.txt", os.O_RDONLY, dir_fd=a)
        print("opened", flush=True)
        while not os.path.exists(\(quoted(go))):
            time.sleep(0.02)
        os.fchmod(f, 0o600)
        print("changed", flush=True)
        """
        let tool = try start(["/usr/bin/python3", "-c", script])
        XCTAssertTrue(eventually { tool.text.contains("opened") }, tool.text)
        // Moved in the backing folder, not through the mount.
        XCTAssertEqual(renameat(a, "doc.txt", b, "doc.txt"), 0)
        usleep(300_000)
        XCTAssertEqual(creat(go, 0o644) >= 0, true)
        XCTAssertEqual(wait(tool), 0, tool.text)
        let deep = Self.deepDirectory
        XCTAssertTrue(eventually { presenter.text.contains("notification subitemDidChange d subitem=\(deep)/b/doc.txt") },
                      "the fchmod was not told at the file's new path: \(presenter.text.suffix(600))")
        kill(presenter.pid, SIGTERM)
        _ = wait(presenter, timeout: 5)
    }

    /// Deeper than the protocol and the log carry (64 KiB of path): refused with ENAMETOOLONG, not
    /// done uncoordinated; the same operation above that depth works.
    func testAnItemDeeperThanCoordinationCarriesIsRefusedWithENAMETOOLONG() throws {
        let levels = (0..<262).map { String(format: "%03d", $0) + String(repeating: "n", count: 247) }
        try makeDeepTree(files: ["gone.txt"], levels: levels)
        let presenter = try start([try Self.coordfsBinary(), "present", mnt + "/d"])
        XCTAssertTrue(eventually { presenter.text.contains("registered presenter#") }, presenter.text)
        let attempt = ["try:", "    os.unlink('gone.txt', dir_fd=fd)", "    print('unlinked')",
                       "except OSError as e:", "    print('errno', e.errno)"].joined(separator: "\n")
        let r = try runDeep(attempt, levels: 262, digits: 3)
        XCTAssertEqual(r.output.trimmingCharacters(in: .whitespacesAndNewlines), "errno \(ENAMETOOLONG)", r.output)
        XCTAssertFalse(presenter.text.contains("accommodateSubitemDeletion"), presenter.text.suffix(500).description)
        // 258 levels (64,760 bytes of path) fit: a file made there (by one process) and removed (by
        // another: not a temp file of the first) is coordinated.
        let made = try runDeep("os.close(os.open('x.txt', os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))", levels: 258, digits: 3)
        XCTAssertEqual(made.status, 0, made.output)
        let fits = try runDeep("os.unlink('x.txt', dir_fd=fd)", levels: 258, digits: 3)
        XCTAssertEqual(fits.status, 0, fits.output)
        XCTAssertTrue(eventually { presenter.lines.contains { $0.contains(" accommodateSubitemDeletion d subitem=") && $0.contains("/x.txt ") } },
                      presenter.text.suffix(500).description)
        kill(presenter.pid, SIGTERM)
        _ = wait(presenter, timeout: 5)
    }
}
