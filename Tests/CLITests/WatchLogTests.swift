// `coordfs watch` and `coordfs log` against a real background mount: the records a mount scenario
// produces, JSON through jq, filters, cursors, terminal and pipe output, errors.
import Foundation
import Glibc
import XCTest

final class WatchLogTests: CLITestCase {
    /// The seq the next record will get (`coordfs log --info --json`).
    private func nextSeq(file: StaticString = #filePath, line: UInt = #line) -> UInt64 {
        let r = coordfs("log", mnt, "--info", "--json")
        guard r.status == 0, let data = r.stdout.data(using: .utf8),
              let o = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
              let n = (o["nextSeq"] as? NSNumber)?.uint64Value else {
            XCTFail("coordfs log --info --json: \(r)", file: file, line: line)
            return 0
        }
        return n
    }

    /// Starts a live watcher (no --since) and waits until it demonstrably reads: it shows only
    /// records appended after it opened, so poke the mount until one arrives.
    private func startLiveWatcher(_ extra: [String] = []) throws -> (Child, UInt64) {
        let before = nextSeq()
        let w = try startCoordfs(["watch", mnt, "--json"] + extra)
        let deadline = Date().addingTimeInterval(10)
        while w.lines.isEmpty && Date() < deadline {
            FileOps.put(mnt + "/.poke", "")
            usleep(50_000)
        }
        XCTAssertFalse(w.lines.isEmpty, "a live watcher printed nothing while the mount was busy: \(w.stderr)")
        return (w, before)
    }

    func testEveryRecordKindOfAMountScenarioWithLiveWatcher() throws {
        try mount()
        let (watcher, before) = try startLiveWatcher()
        let me = getpid()
        FileOps.put(mnt + "/a.txt", "one")
        XCTAssertEqual(FileOps.get(mnt + "/a.txt"), "one")
        FileOps.check(rename(mnt + "/a.txt", mnt + "/b.txt"), "rename")
        FileOps.check(mkdir(mnt + "/d", 0o755), "mkdir")
        FileOps.check(rename(mnt + "/b.txt", mnt + "/d/b.txt"), "rename into d")
        FileOps.check(unlink(mnt + "/d/b.txt"), "unlink")
        FileOps.check(rmdir(mnt + "/d"), "rmdir")
        unmount()

        // The live watcher follows the log across the unmount: it ends with the unmount record.
        let deadline = Date().addingTimeInterval(10)
        while !watcher.stdout.contains("\"kind\":\"unmount\"") && Date() < deadline { usleep(20_000) }
        watcher.stop()
        let live = records(watcher.lines)
        XCTAssertGreaterThanOrEqual(live.first?.seq ?? 0, before, "a watcher without --since showed old records")
        assertContinuous(live, "live watcher")

        // The log is readable without the daemon, from the backing folder.
        let r = coordfs("log", "--backing", backing, "--json")
        XCTAssertEqual(r.status, 0, "log --backing: \(r)")
        let all = records(r.lines)
        assertContinuous(all, from: 1, "log")
        XCTAssertEqual(all.first?.kind, "mount")
        XCTAssertEqual(all.last?.kind, "unmount")
        // Watch and log print identical lines for the same records.
        let byLine = Set(r.lines)
        for l in watcher.lines { XCTAssertTrue(byLine.contains(l), "watch printed a line log does not have: \(l)") }

        let kinds = Set(all.map(\.kind))
        for k in ["mount", "unmount", "intentRequested", "granted", "released", "didChange", "didMove", "didDelete", "subitemAppeared"] {
            XCTAssertTrue(kinds.contains(k), "no \(k) record in: \(kinds.sorted())")
        }
        let timeFormat = try NSRegularExpression(pattern: #"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$"#)
        for rec in all {
            XCTAssertNotNil(timeFormat.firstMatch(in: rec.time, range: NSRange(rec.time.startIndex..., in: rec.time)), "time \(rec.time)")
            // The daemon's own mount/unmount records carry no item; every other path is mount-relative.
            if rec.kind == "mount" || rec.kind == "unmount" { continue }
            XCTAssertTrue(rec.path.hasPrefix("/"), "path not relative to the mount root with a leading /: \(rec)")
        }
        let mine = all.filter { $0.pid == me }
        XCTAssertFalse(mine.isEmpty, "no record names this process (pid \(me)) as actor")
        for rec in mine {
            XCTAssertEqual(rec.uid, getuid(), "actor uid of \(rec)")
            XCTAssertFalse((rec.executable ?? "").isEmpty, "actor without executable: \(rec)")
        }
        // Moves carry both paths; the options say what kind of write it was.
        let moves = all.filter { $0.kind == "didMove" }.map { "\($0.oldPath ?? "?") -> \($0.path)" }
        XCTAssertEqual(moves, ["/a.txt -> /b.txt", "/b.txt -> /d/b.txt"])
        XCTAssertTrue(all.contains { $0.kind == "intentRequested" && $0.path == "/a.txt" && $0.options.contains("forMoving") })
        XCTAssertTrue(all.contains { $0.kind == "intentRequested" && $0.path == "/d/b.txt" && $0.options.contains("forDeleting") })
        XCTAssertTrue(all.contains { $0.kind == "intentRequested" && $0.path == "/a.txt" && $0.intent == "read" })
        XCTAssertTrue(all.contains { $0.kind == "didDelete" && $0.path == "/d/b.txt" })
        XCTAssertTrue(all.contains { $0.kind == "didDelete" && $0.path == "/d" })
        XCTAssertTrue(all.contains { $0.kind == "subitemAppeared" && $0.path == "/d" })
        XCTAssertTrue(all.contains { $0.kind == "didChange" && $0.path == "/a.txt" })
        // Every grant is released, under the same request id and path.
        for g in all where g.kind == "granted" {
            guard let id = g.requestID else { XCTFail("granted without requestID: \(g)"); continue }
            let released = all.filter { $0.kind == "released" && $0.requestID == id }
            XCTAssertTrue(released.contains { $0.path == g.path && $0.seq > g.seq }, "grant \(g) (request \(id)) has no release for its path: \(released)")
        }
    }

    func testJSONLinesParseWithJq() throws {
        try mount()
        FileOps.put(mnt + "/a \"quoted\"\ttab.txt", "x")
        FileOps.check(rename(mnt + "/a \"quoted\"\ttab.txt", mnt + "/b.txt"), "rename")
        let jq = sh("\"$COORDFS\" log '\(mnt!)' --json | jq -c 'select(.kind == \"didMove\") | [.oldPath, .path, .actor.pid, .seq]'")
        XCTAssertEqual(jq.status, 0, "jq: \(jq)")
        XCTAssertEqual(jq.lines.count, 1, "one didMove expected: \(jq)")
        if let data = jq.lines.first?.data(using: .utf8), let a = try JSONSerialization.jsonObject(with: data) as? [Any] {
            XCTAssertEqual(a[0] as? String, "/a \"quoted\"\ttab.txt")
            XCTAssertEqual(a[1] as? String, "/b.txt")
            XCTAssertEqual((a[2] as? NSNumber)?.int32Value, getpid())
        } else {
            XCTFail("jq output is not an array: \(jq)")
        }
        // jq accepts every line; the count equals the text output's (no header in a pipe).
        let count = sh("\"$COORDFS\" log '\(mnt!)' --json | jq -e -s 'length'")
        let text = coordfs("log", mnt)
        XCTAssertEqual(count.status, 0, "jq -s: \(count)")
        XCTAssertEqual(Int(count.stdout.trimmingCharacters(in: .whitespacesAndNewlines)), text.lines.count, "jq count vs text lines")
        XCTAssertFalse(text.stdout.contains("\u{1B}["), "colour escapes in a pipe")
        XCTAssertFalse(text.stdout.contains("SEQ"), "a header in a pipe")
        // One record per line even for a name with a tab and quotes; columns aligned (kind at a fixed offset).
        XCTAssertTrue(text.stdout.contains("/a \"quoted\"\\ttab.txt"), "control characters not escaped in text: \(text.stdout)")
        // Columns: seq (8, right-aligned), time (23), kind (17), uid (5): the kind starts at 33.
        for l in text.lines {
            let c = Array(l.unicodeScalars)
            guard c.count > 51 else { XCTFail("short line: \(l)"); continue }
            XCTAssertTrue(c[8] == " " && c[32] == " " && c[33] != " " && c[50] == " ", "columns not aligned: \(l)")
        }
        let coloured = coordfs("log", mnt, "--color", "always")
        XCTAssertTrue(coloured.stdout.contains("\u{1B}["), "--color always gave no colour")
        XCTAssertFalse(coordfs("log", mnt, "--json", "--color", "always").stdout.contains("\u{1B}["), "colour inside JSON")
    }

    func testTerminalGetsHeaderAndColour() throws {
        try mount()
        FileOps.put(mnt + "/t.txt", "x")
        // `script` gives the command a pseudo-terminal.
        let r = sh("TERM=xterm script -qec \"\\\"$COORDFS\\\" log '\(mnt!)' --last 3\" /dev/null")
        XCTAssertEqual(r.status, 0, "log on a terminal: \(r)")
        XCTAssertTrue(r.stdout.contains("SEQ"), "no header on a terminal: \(r.stdout)")
        XCTAssertTrue(r.stdout.contains("\u{1B}["), "no colour on a terminal")
        let plain = sh("TERM=xterm NO_COLOR=1 script -qec \"\\\"$COORDFS\\\" log '\(mnt!)' --last 3\" /dev/null")
        XCTAssertFalse(plain.stdout.contains("\u{1B}["), "NO_COLOR ignored")
    }

    func testFilters() throws {
        try mount()
        FileOps.check(mkdir(mnt + "/sub", 0o755), "mkdir")
        FileOps.put(mnt + "/x.txt", "x")
        FileOps.put(mnt + "/sub/z.txt", "z")
        FileOps.put(mnt + "/sub/w.md", "w")
        let child = sh("echo $$; : > '\(mnt!)/y.md'")
        XCTAssertEqual(child.status, 0, "\(child)")
        let shPID = Int32(child.lines.first ?? "") ?? -1

        let changes = log(["--kind", "didChange"])
        XCTAssertEqual(Set(changes.map(\.kind)), ["didChange"])
        XCTAssertEqual(Set(changes.map(\.path)), ["/x.txt", "/sub/z.txt", "/sub/w.md", "/y.md"])
        let two = log(["--kind", "granted,released", "--kind", "did-change"])
        XCTAssertEqual(Set(two.map(\.kind)), ["granted", "released", "didChange"])

        let txt = log(["--path", "*.txt"])
        XCTAssertFalse(txt.isEmpty)
        XCTAssertTrue(txt.allSatisfy { $0.path.hasSuffix(".txt") }, "--path *.txt: \(txt.map(\.path))")
        XCTAssertEqual(Set(txt.map(\.path)), ["/x.txt", "/sub/z.txt"])
        let sub = log(["--path", "/sub/**", "--kind", "didChange"])
        XCTAssertEqual(Set(sub.map(\.path)), ["/sub/z.txt", "/sub/w.md"])
        // A pattern given through the mountpoint, and a path inside the mount as the argument.
        XCTAssertEqual(Set(log(["--path", mnt + "/sub/z.txt", "--kind", "didChange"]).map(\.path)), ["/sub/z.txt"])
        let inside = coordfs("log", mnt + "/sub", "--json", "--kind", "didChange")
        XCTAssertEqual(Set(records(inside.lines).map(\.path)), ["/sub/z.txt", "/sub/w.md"], "log MNT/sub: \(inside)")

        let byPID = log(["--pid", String(shPID)])
        XCTAssertFalse(byPID.isEmpty, "nothing for pid \(shPID)")
        XCTAssertTrue(byPID.allSatisfy { $0.pid == shPID })
        XCTAssertTrue(byPID.contains { $0.kind == "didChange" && $0.path == "/y.md" })
        XCTAssertTrue(log(["--pid", String(shPID), "--path", "*.txt"]).isEmpty, "criteria must combine with AND")
        let both = log(["--pid", String(shPID), "--pid", String(getpid()), "--kind", "didChange"])
        XCTAssertEqual(both.count, 4, "pids combine with OR")

        // Hostile filters: a clear error, exit status 64 (usage), nothing printed.
        for (args, word) in [(["--kind", "nope"], "nope"), (["--path", "a[b"], "["), (["--pid=-3"], "-3"), (["--pid", "0"], "0"), (["--since", "0"], "0")] {
            let r = coordfs(arguments: ["log", mnt] + args)
            XCTAssertEqual(r.status, 64, "\(args): \(r)")
            XCTAssertTrue(r.stderr.contains(word), "\(args): the error does not name \(word): \(r.stderr)")
            XCTAssertTrue(r.stdout.isEmpty)
        }
    }

    func testCursorsResumeExactly() throws {
        try mount()
        for i in 0..<20 { FileOps.put(mnt + "/f\(i)", "\(i)") }
        // The log is whole once every write was released: a file's RELEASE (its write's didChange
        // and released records) may come after close(2) returned, and under load after the next
        // commands here read the log, which then differ by those records.
        let files = Set((0..<20).map { "/f\($0)" })
        let deadline = Date().addingTimeInterval(20)
        var released = Set<String>()
        while released != files && Date() < deadline {
            released = Set(log(["--kind", "released"]).filter { ($0.details["intent"] as? String) == "write" }.map(\.path)).intersection(files)
            if released != files { usleep(20_000) }
        }
        XCTAssertEqual(released, files, "not every write was released")
        let full = coordfs("log", mnt, "--json")
        let all = records(full.lines)
        XCTAssertGreaterThan(all.count, 100)
        let cut = all[all.count / 2].seq
        // --since is inclusive, and gives exactly the tail, byte for byte.
        let tail = coordfs("log", mnt, "--json", "--since", String(cut))
        XCTAssertEqual(tail.lines, Array(full.lines.drop { !$0.hasPrefix("{\"seq\":\(cut),") }))
        // A watcher resumes page by page: each page starts right after the last seq of the one before.
        var cursor: UInt64 = 1
        var paged: [String] = []
        while paged.count < 60 {
            let page = coordfs("watch", mnt, "--json", "--since", String(cursor), "--limit", "20", timeout: 20)
            XCTAssertEqual(page.status, 0, "watch --limit: \(page)")
            let recs = records(page.lines)
            XCTAssertEqual(recs.count, 20)
            guard let last = recs.last else { break }
            paged += page.lines
            cursor = last.seq + 1
        }
        XCTAssertEqual(paged, Array(full.lines.prefix(60)))
        // --limit, --last and --until.
        XCTAssertEqual(coordfs("log", mnt, "--json", "--limit", "7").lines, Array(full.lines.prefix(7)))
        XCTAssertEqual(coordfs("log", mnt, "--json", "--last", "5").lines, Array(full.lines.suffix(5)))
        let lastTwoChanges = records(coordfs("log", mnt, "--json", "--last", "2", "--kind", "didChange").lines)
        // The log's last two didChange records, whichever files they are: close(2) sends its RELEASE
        // in the background, so two files' RELEASEs (and their didChange) may reach the daemon on
        // different queues and be recorded in either order.
        let changes = all.filter { $0.kind == "didChange" }
        XCTAssertTrue(files.isSubset(of: Set(changes.map(\.path))), "a write without its didChange")
        XCTAssertEqual(lastTwoChanges.map(\.seq), changes.suffix(2).map(\.seq))
        XCTAssertTrue(Set(lastTwoChanges.map(\.path)).isSubset(of: files), "\(lastTwoChanges.map(\.path))")
        XCTAssertEqual(coordfs("log", mnt, "--json", "--since", "3", "--until", "5").lines, Array(full.lines[2..<5]))
        // A cursor beyond the end: nothing, and a warning.
        let beyond = coordfs("log", mnt, "--json", "--since", "999999")
        XCTAssertEqual(beyond.status, 0)
        XCTAssertTrue(beyond.stdout.isEmpty)
        XCTAssertTrue(beyond.stderr.contains("beyond the end"), "\(beyond)")
    }

    func testLiveRecordsAppearPromptly() throws {
        try mount()
        let (watcher, _) = try startLiveWatcher()
        // Generous bound (a loaded machine): the benchmark measures the real latency.
        var worst = 0.0
        for i in 0..<10 {
            let name = "/late\(i)"
            let t0 = Date()
            FileOps.put(mnt + name, "x")
            while !watcher.stdout.contains("\"path\":\"\(name)\"") && Date().timeIntervalSince(t0) < 5 { usleep(1_000) }
            worst = max(worst, Date().timeIntervalSince(t0))
        }
        XCTAssertLessThan(worst, 2, "a record took \(worst) s to reach the watcher")
        print("live watcher: worst operation-to-output \(Int(worst * 1000)) ms over 10 creates")
    }

    func testPipeReaderGoingAwayEndsWatcherQuietly() throws {
        try mount()
        for i in 0..<5 { FileOps.put(mnt + "/p\(i)", "x") }
        // head exits after one line; the idle watcher notices and exits 0 without a word.
        let t0 = Date()
        let r = sh("\"$COORDFS\" watch '\(mnt!)' --since 1 2>'\(root!)/watch.err' | head -n 1; echo \"status=$?\"", timeout: 20)
        let elapsed = Date().timeIntervalSince(t0)
        XCTAssertEqual(r.status, 0, "\(r)")
        XCTAssertLessThan(elapsed, 5, "the watcher outlived its reader by \(elapsed) s")
        XCTAssertEqual(r.lines.count, 2, "\(r)")
        XCTAssertEqual((try? String(contentsOfFile: root + "/watch.err", encoding: .utf8)) ?? "?", "", "watch said something on stderr")
        // Busy case: more output than a pipe holds, the reader takes three lines and leaves.
        for i in 0..<300 { FileOps.put(mnt + "/q\(i % 10)", "x") }
        let busy = sh("\"$COORDFS\" log '\(mnt!)' --json 2>'\(root!)/log.err' | head -n 3 >/dev/null; echo done", timeout: 20)
        XCTAssertEqual(busy.stdout, "done\n")
        XCTAssertEqual((try? String(contentsOfFile: root + "/log.err", encoding: .utf8)) ?? "?", "")
        // A write error that is not a vanished reader is an error.
        let full = sh("\"$COORDFS\" log '\(mnt!)' > /dev/full")
        XCTAssertEqual(full.status, 1, "\(full)")
        XCTAssertTrue(full.stderr.contains("No space left"), "\(full)")
        // SIGTERM ends a watcher with status 0 and whole lines.
        let w = try startCoordfs(["watch", mnt, "--since", "1"])
        _ = w.waitForLines(5)
        XCTAssertEqual(w.stop(SIGTERM), 0)
        XCTAssertTrue(w.stdout.hasSuffix("\n"))
    }

    /// Presenter and document-store records from an out-of-process presenter (`coordfs present`,
    /// through the control socket): asks and answers, the version kept, the conflict, all readable
    /// and filterable from the CLI.
    func testPresenterAndStoreRecordsThroughTheCLI() throws {
        FileManager.default.createFile(atPath: backing + "/doc.txt", contents: Data("ours\n".utf8))
        try mount()
        let presenter = try startCoordfs(["present", mnt + "/doc.txt"])
        let deadline = Date().addingTimeInterval(10)
        while !presenter.lines.contains(where: { $0.hasPrefix("registered") }) && Date() < deadline { usleep(20_000) }
        guard presenter.lines.contains(where: { $0.hasPrefix("registered") }) else {
            return XCTFail("coordfs present did not register: \(presenter.stdout) \(presenter.stderr)")
        }
        // The presenter has unsaved changes (set in the store's database, as the protocol message
        // for it will), so an outside write is a conflict.
        let db = backing + "/.coordfs/store/metadata.sqlite"
        let sql = "import sqlite3,sys,time\nfor _ in range(200):\n c=sqlite3.connect(sys.argv[1], timeout=10)\n if c.execute('SELECT COUNT(*) FROM interest').fetchone()[0]: break\n time.sleep(0.05)\nc.execute('UPDATE interest SET hasUnsavedChanges = 1'); c.commit()"
        let marked = run("/usr/bin/python3", ["-c", sql, db])
        XCTAssertEqual(marked.status, 0, "\(marked)")
        XCTAssertEqual(sh("printf 'theirs\\n' > '\(mnt!)/doc.txt'").status, 0)
        var conflict: [Record] = []
        let until = Date().addingTimeInterval(10)
        while conflict.isEmpty && Date() < until {
            usleep(50_000)
            conflict = records(coordfs("log", mnt, "--json", "--kind", "conflict-detected").lines)
        }
        XCTAssertEqual(conflict.map(\.path), ["/doc.txt"], "no conflictDetected record")
        let resolved = coordfs("resolve", mnt + "/doc.txt", "--reload")
        XCTAssertEqual(resolved.status, 0, "\(resolved)")
        presenter.stop()
        let all = records(coordfs("log", mnt, "--json").lines)
        assertContinuous(all, from: 1, "log")
        func first(_ kind: String) -> Record? { all.first { $0.kind == kind && $0.path == "/doc.txt" } }
        XCTAssertNotNil(first("presenterAdded"), "\(all.map(\.kind))")
        XCTAssertEqual(first("presenterAsked")?.details["ask"] as? String, "relinquishToWriter")
        XCTAssertNotNil(first("presenterAnswered")?.details["latencyMicros"])
        let snapshot = first("snapshotTaken")
        XCTAssertNotNil(snapshot?.details["snapshotMethod"], "snapshotTaken without method: \(String(describing: snapshot?.json))")
        XCTAssertNotNil(snapshot?.details["bytes"])
        XCTAssertNotNil(snapshot?.json["documentID"])
        // `coordfs resolve` resolves in the store without the daemon, so it writes no
        // `conflictResolved` record (the in-process store path does: EventLogStoreRecordTests).
        let removed = records(coordfs("log", mnt, "--json", "--kind", "presenterRemoved").lines)
        XCTAssertEqual(removed.map(\.path), ["/doc.txt"])
        // The store's kinds pass a kind filter together.
        let store = records(coordfs("log", mnt, "--json", "--kind", "snapshotTaken,conflictDetected,conflictResolved").lines)
        XCTAssertTrue(Set(store.map(\.kind)).isSuperset(of: ["snapshotTaken", "conflictDetected"]), "\(store)")
        XCTAssertTrue(Set(store.map(\.kind)).isSubset(of: ["snapshotTaken", "conflictDetected", "conflictResolved"]), "\(store)")
    }

    func testLocatingTheLogAndErrors() throws {
        // Help with examples.
        for cmd in ["watch", "log"] {
            let h = coordfs(cmd, "--help")
            XCTAssertEqual(h.status, 0)
            for word in ["--since", "--json", "--path", "--kind", "--pid", "--backing", "Examples"] {
                XCTAssertTrue(h.stdout.contains(word), "coordfs \(cmd) --help lacks \(word)")
            }
        }
        let none = coordfs("log")
        XCTAssertEqual(none.status, 64, "\(none)")
        XCTAssertTrue(none.stderr.contains("--backing"))
        let notMount = coordfs("log", root)
        XCTAssertNotEqual(notMount.status, 0)
        XCTAssertTrue(notMount.stderr.contains("not in a coordfs mount"), "\(notMount)")
        let empty = coordfs("log", "--backing", root)
        XCTAssertNotEqual(empty.status, 0)
        XCTAssertTrue(empty.stderr.contains("no coordfs event log"), "\(empty)")

        try mount()
        FileOps.put(mnt + "/k", "x")
        let both = coordfs("log", mnt, "--backing", backing)
        XCTAssertEqual(both.status, 64, "\(both)")
        // The backing folder given as mountpoint: the error says to use --backing.
        let wrong = coordfs("log", backing)
        XCTAssertTrue(wrong.stderr.contains("--backing \(backing!)"), "\(wrong)")
        let info = coordfs("log", mnt + "/k", "--info")
        XCTAssertTrue(info.stdout.contains(backing + "/.coordfs/log"), "\(info)")
        XCTAssertTrue(info.stdout.contains("(mounted)"), "\(info)")
        unmount()
        // Unmounted: the mountpoint no longer leads to the log, the backing folder does.
        XCTAssertNotEqual(coordfs("log", mnt).status, 0)
        let after = records(coordfs("log", "--backing", backing, "--json", "--last", "1").lines)
        XCTAssertEqual(after.map(\.kind), ["unmount"])
        // A mount with the log off has none to show.
        try? FileManager.default.removeItem(atPath: backing + "/.coordfs/log")
        try mount(options: ["log=off"])
        let off = coordfs("log", mnt)
        XCTAssertNotEqual(off.status, 0)
        XCTAssertTrue(off.stderr.contains("log=off"), "\(off)")
    }

    /// The backing folder renamed while mounted: the mount table keeps the old path, the daemon
    /// goes on logging in the folder it holds. `log` finds it where it is now (and says so); a user
    /// who cannot see where it went is told what happened, not that the log is off.
    func testTheLogOfAMountWhoseBackingFolderWasRenamedWhileMountedIsFound() throws {
        chmod(root, 0o755)  // nobody reaches the mount
        try mount()
        FileOps.put(mnt + "/before.txt", "one")
        let moved = root + "/moved"
        FileOps.check(rename(backing, moved), "rename the backing folder")
        defer { _ = rename(moved, backing) }  // the fixture unmounts and cleans by the old name
        FileOps.put(mnt + "/after.txt", "two")
        let r = coordfs("log", mnt, "--json")
        XCTAssertEqual(r.status, 0, "log of a mount whose backing folder moved: \(r)")
        let paths = records(r.lines).map(\.path)
        XCTAssertTrue(paths.contains("/before.txt") && paths.contains("/after.txt"), "\(paths)")
        XCTAssertTrue(r.stderr.contains("moved from '\(backing!)' to '\(moved)'"), "\(r.stderr)")
        XCTAssertFalse(r.stderr.contains("log=off"), "\(r.stderr)")
        let info = coordfs("log", mnt, "--info")
        XCTAssertTrue(info.stdout.contains(moved + "/.coordfs/log"), "\(info)")

        let nobody = run("/usr/bin/setpriv", ["--reuid=65534", "--regid=65534", "--clear-groups", "--", binary, "log", mnt])
        XCTAssertNotEqual(nobody.status, 0, "\(nobody)")
        XCTAssertTrue(nobody.stderr.contains("was renamed or moved while mounted") && nobody.stderr.contains("--backing"), "\(nobody)")
        XCTAssertFalse(nobody.stderr.contains("log=off"), "\(nobody)")
    }
}
