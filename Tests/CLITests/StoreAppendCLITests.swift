// Appends to a presented log through the binary, over a backing folder on a fresh ext4 image on a
// loop device (no reflink: the store's bases are lazy there): what the daemon writes per appended
// line (its /proc/PID/io write_bytes), and what a presenter with unsaved changes gets back from every
// resolution after appends, a truncate, writes below the end through the appending descriptor and a
// daemon restart (docs/document-store.md, "A growing log under a presenter").
import Foundation
import Glibc
import TestSupport
import XCTest

final class StoreAppendCLITests: LoopImageCLITestCase {
    /// The daemon's `write_bytes` (/proc/PID/io): what it caused to be written to storage.
    private func writeBytes(_ pid: pid_t) throws -> Int64 {
        let io = try String(contentsOfFile: "/proc/\(pid)/io", encoding: .utf8)
        let line = try XCTUnwrap(io.split(separator: "\n").first { $0.hasPrefix("write_bytes:") })
        return try XCTUnwrap(Int64(line.dropFirst("write_bytes:".count).trimmingCharacters(in: .whitespaces)))
    }

    /// Waits until the presenter printed `count` documentChanged lines (or 10 s); returns them.
    @discardableResult
    private func documentChanged(_ presenter: Child, count: Int) -> [String] {
        let deadline = Date().addingTimeInterval(10)
        var lines: [String] = []
        repeat {
            lines = presenter.lines.filter { $0.hasPrefix("notification documentChanged") }
            if lines.count >= count { break }
            usleep(20_000)
        } while Date() < deadline
        return lines
    }

    private func openConflicts() -> [[String: Any]] {
        coordfs("conflicts", mnt, "--json").lines.compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
    }

    private func waitForConflicts(_ count: Int, file: StaticString = #filePath, line: UInt = #line) -> [[String: Any]] {
        let deadline = Date().addingTimeInterval(10)
        var c = openConflicts()
        while c.count < count && Date() < deadline { usleep(100_000); c = openConflicts() }
        XCTAssertEqual(c.count, count, "open conflicts: \(c)", file: file, line: line)
        return c
    }

    private func text(_ relative: String) -> String? { try? String(contentsOfFile: backing + "/" + relative, encoding: .utf8) }

    /// The base of the open conflict of `relative` and what `coordfs show` prints of it.
    private func keptBase(of relative: String, in conflicts: [[String: Any]], file: StaticString = #filePath, line: UInt = #line) -> String? {
        guard let c = conflicts.first(where: { ($0["path"] as? String) == mnt + "/" + relative }),
              let version = (c["baseVersion"] as? NSNumber)?.int64Value else {
            XCTFail("\(relative): no conflict with a base in \(conflicts)", file: file, line: line)
            return nil
        }
        return coordfs("show", mnt + "/" + relative, "--version", String(version)).stdout
    }

    /// Ten spaced `echo >>` to a 16 MiB log that `coordfs present` presents (no unsaved changes:
    /// the store reloads it after each append, so its base is pending again at the next): the
    /// daemon writes less than twice the log's size in all (before, a copy of the whole log per
    /// line: about ten times its size), and keeps no version of it.
    func testSpacedAppendsToAPresentedLogWriteLessThanTwiceItsSize() throws {
        let line = String(repeating: "x", count: 99) + "\n"
        let log = String(repeating: line, count: (16 << 20) / 100)
        FileManager.default.createFile(atPath: backing + "/big.log", contents: Data(log.utf8))
        try mount()
        let presenter = try present("big.log")
        let pid = try XCTUnwrap(daemonPID())
        let before = try writeBytes(pid)
        for i in 1...10 {
            XCTAssertEqual(sh("echo 'line \(i)' >> '\(mnt!)/big.log'").status, 0)
            XCTAssertEqual(documentChanged(presenter, count: i).count, i, presenter.stdout)
        }
        let written = try writeBytes(pid) - before
        XCTAssertLessThan(written, 2 * Int64(log.utf8.count), "the daemon wrote \(written) bytes for 10 appends to a \(log.utf8.count)-byte log")
        XCTAssertTrue(documentChanged(presenter, count: 10).allSatisfy { $0.contains("action=reload") }, presenter.stdout)
        let versions = coordfs("versions", mnt + "/big.log", "--json")
        XCTAssertEqual(versions.status, 0, "\(versions)")
        XCTAssertEqual(versions.lines, [], "no version of the log per append")
        XCTAssertEqual(text("big.log")?.hasSuffix((1...10).map { "line \($0)\n" }.joined()), true)
    }

    /// `coordfs present --unsaved` on five documents, each appended to (`echo >>`); one also
    /// truncated through its appending descriptor, one written below its end through it
    /// (`pwritev2(RWF_NOAPPEND)`, then `fcntl(F_SETFL)` clearing O_APPEND and a write at offset 0).
    /// Every conflict's base is what the presenter loaded; merge, keep both and save give the
    /// presenter its loaded contents back, also after the daemon is restarted (unmounted and mounted
    /// again) between the appends and the resolution.
    func testAppendsUnderUnsavedChangesThenEveryResolutionHasTheLoadedBase() throws {
        let base = "first\nmiddle\nlast\n"
        let names = ["merge", "keep-both", "save", "truncated", "below"]
        for n in names { FileManager.default.createFile(atPath: backing + "/\(n).txt", contents: Data(base.utf8)) }
        try mount()
        let presenters = try names.map { try present("\($0).txt", unsaved: true) }
        for n in ["merge", "keep-both", "save"] {
            XCTAssertEqual(sh("cd '\(mnt!)' && echo appended >> \(n).txt && echo again >> \(n).txt").status, 0)
        }
        let script = """
            import os, fcntl
            fd = os.open("truncated.txt", os.O_WRONLY | os.O_APPEND)
            os.write(fd, b"appended\\n")
            os.ftruncate(fd, 3)
            os.close(fd)
            fd = os.open("below.txt", os.O_WRONLY | os.O_APPEND)
            os.write(fd, b"appended\\n")
            os.pwritev(fd, [b"XXX"], 0, getattr(os, "RWF_NOAPPEND", 0x20))
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_APPEND)
            os.lseek(fd, 0, os.SEEK_SET)
            os.write(fd, b"YYY")
            os.close(fd)
            """
        let r = sh("cd '\(mnt!)' && python3 -c '\(script)'")
        XCTAssertEqual(r.status, 0, "\(r)")
        XCTAssertEqual(text("truncated.txt"), "fir")
        let listed = waitForConflicts(names.count)
        for n in names { XCTAssertEqual(keptBase(of: "\(n).txt", in: listed), base, n) }
        XCTAssertEqual(text("merge.txt"), base + "appended\nagain\n")

        let mine = root + "/mine.txt"
        try "first mine\nmiddle\nlast\n".write(toFile: mine, atomically: false, encoding: .utf8)
        let merged = coordfs("resolve", mnt + "/merge.txt", "--merge", "--from", mine)
        XCTAssertEqual(merged.status, 0, "\(merged)")
        XCTAssertTrue(merged.stdout.contains("merged cleanly"), merged.stdout)
        XCTAssertEqual(text("merge.txt"), "first mine\nmiddle\nlast\nappended\nagain\n")

        // The daemon restarted between the appends and the other resolutions.
        unmount()
        for p in presenters { p.stop(SIGKILL) }
        try mount()
        let after = waitForConflicts(names.count - 1)
        for n in ["keep-both", "save", "truncated", "below"] { XCTAssertEqual(keptBase(of: "\(n).txt", in: after), base, "after the restart: \(n)") }
        XCTAssertEqual(coordfs("resolve", mnt + "/keep-both.txt", "--keep-both", "--from", mine).status, 0)
        XCTAssertEqual(text("keep-both.txt"), base + "appended\nagain\n")
        let copies = try FileManager.default.contentsOfDirectory(atPath: backing).filter { $0.hasPrefix("keep-both (conflict ") }
        XCTAssertEqual(copies.map { text($0) }, ["first mine\nmiddle\nlast\n"])
        XCTAssertEqual(coordfs("resolve", mnt + "/save.txt", "--save", "--from", mine).status, 0)
        XCTAssertEqual(text("save.txt"), "first mine\nmiddle\nlast\n")
        let truncated = coordfs("resolve", mnt + "/truncated.txt", "--save", "--from", mine)
        XCTAssertEqual(truncated.status, 0, "\(truncated)")
        let below = coordfs("resolve", mnt + "/below.txt", "--merge", "--from", mine)
        XCTAssertEqual(below.status, 0, "a merge has its base: \(below)")
        XCTAssertEqual(openConflicts().count, 0)
    }
}
