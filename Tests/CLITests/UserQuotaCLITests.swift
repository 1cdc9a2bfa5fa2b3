// What one unprivileged user of an allow_other mount may make the daemon and the mount owner's disk
// hold, through the real mount and the real CLI as `nobody`: the per-user limits refuse with one
// exit status (75, EX_TEMPFAIL) whatever the command.
import Foundation
import Glibc
import TestSupport
import XCTest

final class UserQuotaCLITests: CLITestCase {
    /// A folder `shared` (0777) in a mount root every user reaches, with `names` in it (0666).
    private func makeSharedFolder(_ names: [String] = []) {
        chmod(root, 0o755)
        mkdir(backing + "/shared", 0o777)
        chmod(backing + "/shared", 0o777)
        for name in names {
            FileManager.default.createFile(atPath: backing + "/shared/" + name, contents: Data("one\n".utf8), attributes: [.posixPermissions: 0o666])
        }
    }

    /// The accesses `uid` holds, as `coordfs status --json` lists them.
    private func accesses(of uid: Int) -> Int {
        let r = coordfs("status", mnt, "--json")
        let report = (try? JSONSerialization.jsonObject(with: Data(r.stdout.utf8))) as? [String: Any]
        let held = report?["accesses"] as? [[String: Any]] ?? []
        return held.filter { ($0["uid"] as? NSNumber)?.intValue == uid }.count
    }

    // MARK: Exit status on a per-user limit

    /// `coordfs coordinate` refused by `max_user_accesses` exits 75 (try again later), as
    /// `restore`, `resolve` and `present` do on a per-user limit; before, it exited 1, the status
    /// of a presenter's refusal. The command does not run; the owner is not limited.
    func testCoordinateRefusedByAUserLimitExitsTempFail() throws {
        makeSharedFolder(["a.txt", "b.txt"])
        try mount(options: ["allow_other", "max_user_accesses=1"])
        let holder = try start("/usr/bin/setpriv", user(65534) + [binary, "coordinate", "--read", mnt + "/shared/a.txt", "--", "/bin/sleep", "60"])
        defer { _ = holder.stop(SIGKILL) }
        let held = Date().addingTimeInterval(10)
        while accesses(of: 65534) < 1 && Date() < held { usleep(50_000) }
        XCTAssertEqual(accesses(of: 65534), 1, "nobody holds one access: \(holder.stderr)")
        let marker = backing + "/shared/ran"
        let refused = coordfs(as: 65534, "coordinate", "--read", mnt + "/shared/b.txt", "--", "/usr/bin/touch", mnt + "/shared/ran")
        XCTAssertEqual(refused.status, 75, "\(refused)")
        XCTAssertTrue(refused.stderr.contains("max_user_accesses") && refused.stderr.contains("limitExceeded"), "\(refused)")
        XCTAssertFalse(FileManager.default.fileExists(atPath: marker), "the command did not run")
        // The owner is not bound by nobody's accesses.
        let owners = coordfs("coordinate", "--read", mnt + "/shared/b.txt", "--", "/bin/true")
        XCTAssertEqual(owners.status, 0, "\(owners)")
    }

    // MARK: Versions one user pins in the owner's store

    private var storeDatabase: String { backing + "/.coordfs/store/metadata.sqlite" }

    /// The first column of the first row of a query of the store's database (Python's sqlite3).
    private func sql(_ statement: String, file: StaticString = #filePath, line: UInt = #line) -> String {
        let script = "import sqlite3,sys; c=sqlite3.connect(sys.argv[1], timeout=10); r=c.execute(sys.argv[2]).fetchone(); print(r[0] if r else '')"
        let r = run("/usr/bin/python3", ["-c", script, storeDatabase, statement])
        XCTAssertEqual(r.status, 0, "sql \(statement): \(r)", file: file, line: line)
        return r.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// The distinct versions open conflicts and presenters' bases of `uid` pin.
    private func pinned(by uid: Int) -> Int {
        Int(sql("""
            SELECT COUNT(*) FROM version WHERE id IN (SELECT baseVersionId FROM interest WHERE ownerUid = \(uid))
              OR id IN (SELECT baseVersionId FROM conflict WHERE ownerUid = \(uid) AND state = 'open')
              OR id IN (SELECT theirsVersionId FROM conflict WHERE ownerUid = \(uid) AND state = 'open')
            """)) ?? -1
    }

    private func openConflicts(of uid: Int) -> Int {
        Int(sql("SELECT COUNT(*) FROM conflict WHERE state = 'open' AND ownerUid = \(uid)")) ?? -1
    }

    /// `coordfs present PATH --unsaved` as `uid`, once it is registered (or has exited).
    private func presentUnsaved(_ relative: String, as uid: Int = 65534) throws -> Child {
        let child = try start("/usr/bin/setpriv", user(uid) + [binary, "present", mnt + "/" + relative, "--unsaved"])
        let deadline = Date().addingTimeInterval(10)
        while !child.lines.contains(where: { $0.hasPrefix("registered") }) && child.wait(timeout: 0) == nil && Date() < deadline { usleep(20_000) }
        return child
    }

    /// Writes `text` into `relative` through the mount as `uid`.
    private func write(_ relative: String, _ text: String, as uid: Int = 65534) -> CommandResult {
        run("/usr/bin/setpriv", user(uid) + ["/bin/sh", "-c", "echo '\(text)' >> '\(mnt!)/\(relative)'"])
    }

    /// nobody's present --unsaved / write cycles, many at once and one after the other, pin at most
    /// `max_user_pinned_versions` versions in the owner's store: each write under a presenter with
    /// unsaved changes keeps its base and opens a conflict pinning it (before, without bound). At
    /// the budget nobody's next `present` is refused with exit 75 naming the limit and nothing of
    /// anyone else's, and nothing is registered; its conflicts beyond the budget are still
    /// recorded (without a base). Root presents and pins as before; once nobody resolves one of
    /// its conflicts it may present again.
    func testAUsersPresentCyclesPinAtMostItsBudget() throws {
        let files = (1...8).map { "doc\($0).txt" }
        makeSharedFolder(files + ["root.txt", "late.txt"])
        try mount(options: ["allow_other", "max_user_pinned_versions=3"])
        // Eight concurrent clients of nobody's, each writing under its presenter.
        var presenters = try files.map { try presentUnsaved("shared/" + $0) }
        defer { for p in presenters { _ = p.stop(SIGKILL) } }
        XCTAssertEqual(presenters.filter { $0.lines.contains { $0.hasPrefix("registered") } }.count, 8,
                       "nobody pins nothing yet: \(presenters.map(\.stderr))")
        let writes = files.map { "echo nobody >> '\(mnt!)/shared/\($0)' &" }.joined(separator: " ")
        XCTAssertEqual(run("/usr/bin/setpriv", user(65534) + ["/bin/sh", "-c", writes + " wait"]).status, 0)
        let recorded = Date().addingTimeInterval(10)
        while openConflicts(of: 65534) < 8 && Date() < recorded { usleep(100_000) }
        XCTAssertEqual(openConflicts(of: 65534), 8, "every conflict recorded")
        XCTAssertEqual(pinned(by: 65534), 3, "pinned within the budget")
        // More cycles: refused at once, exit 75, nothing registered, nothing more pinned.
        for p in presenters { _ = p.stop(SIGKILL) }
        presenters = []
        for _ in 1...3 {
            let refused = try presentUnsaved("shared/late.txt")
            XCTAssertEqual(refused.wait(timeout: 10), 75, "\(refused.stdout) \(refused.stderr)")
            XCTAssertTrue(refused.stderr.contains("max_user_pinned_versions") && refused.stderr.contains("65534"), refused.stderr)
            XCTAssertFalse(refused.stderr.contains("presenter#") || refused.stderr.contains("root.txt") || refused.stderr.contains("uid 0"), refused.stderr)
            XCTAssertEqual(write("shared/late.txt", "late").status, 0)
        }
        XCTAssertEqual(sql("SELECT COUNT(*) FROM interest WHERE ownerUid = 65534"), "0", "nothing of nobody's registered")
        XCTAssertEqual(pinned(by: 65534), 3)
        // The owner (root) is not limited by nobody's usage.
        let roots = try presentUnsaved("shared/root.txt", as: 0)
        defer { _ = roots.stop(SIGKILL) }
        XCTAssertTrue(roots.lines.contains { $0.hasPrefix("registered") }, roots.stderr)
        XCTAssertEqual(write("shared/root.txt", "theirs", as: 65534).status, 0)
        let rootsConflict = Date().addingTimeInterval(10)
        while pinned(by: 0) < 1 && Date() < rootsConflict { usleep(100_000) }
        XCTAssertEqual(pinned(by: 0), 1, "root's base kept")
        XCTAssertEqual(sql("SELECT COUNT(*) FROM conflict WHERE ownerUid = 0 AND state = 'open' AND baseVersionId IS NOT NULL"), "1")
        // nobody lets go of a conflict that pins: room again.
        let pinning = sql("SELECT d.path FROM conflict c JOIN document d ON d.id = c.documentId WHERE c.ownerUid = 65534 AND c.baseVersionId IS NOT NULL LIMIT 1")
        let closed = coordfs(as: 65534, "resolve", mnt + "/" + pinning, "--close")
        XCTAssertEqual(closed.status, 0, "\(closed)")
        let again = try presentUnsaved("shared/late.txt")
        defer { _ = again.stop(SIGKILL) }
        XCTAssertTrue(again.lines.contains { $0.hasPrefix("registered") }, "\(again.stdout) \(again.stderr)")
    }

    // MARK: The lost-update readers table

    /// A process of `uid` that reads `reads` through the mount (one after the other), prints
    /// `read`, waits for the file `go`, then saves each of `saves` (open for writing, write, close)
    /// and prints `saved`; then it stays alive.
    private func reader(_ uid: Int, reads: [String], saves: [String], go: String) throws -> Child {
        let script = """
        import os, sys, time
        for f in sys.argv[1].split(','):
            with open(f) as h: h.read()
        print("read", flush=True)
        while not os.path.exists(sys.argv[3]): time.sleep(0.02)
        for f in sys.argv[2].split(','):
            with open(f, 'w') as h: h.write('late\\n')
        print("saved", flush=True)
        time.sleep(60)
        """
        let paths = { (names: [String]) in names.map { self.mnt + "/shared/" + $0 }.joined(separator: ",") }
        let child = try start("/usr/bin/setpriv", user(uid) + ["/usr/bin/python3", "-c", script, paths(reads), paths(saves), go])
        let deadline = Date().addingTimeInterval(10)
        while !child.lines.contains("read") && Date() < deadline { usleep(20_000) }
        XCTAssertTrue(child.lines.contains("read"), "\(child.stdout) \(child.stderr)")
        return child
    }

    private func lostUpdates(at name: String, of uid: Int) -> Int {
        Int(sql("""
            SELECT COUNT(*) FROM conflict c JOIN document d ON d.id = c.documentId
            WHERE c.kind = 'lostUpdate' AND c.ownerUid = \(uid) AND d.path = 'shared/\(name)'
            """)) ?? -1
    }

    /// One user reading many files keeps at most `max_user_readers` records in the lost-update
    /// readers table (before: one per file, without bound): its oldest record goes (its late save
    /// there is no longer recognised), its latest stay. At `max_readers` a third user's read drops
    /// a record of the user holding the most, never root's one: root's late save is still
    /// recognised as a lost update.
    func testOneUsersReadsCannotPushOutAnotherUsersReaders() throws {
        let many = (1...20).map { "n\($0)" }
        makeSharedFolder(many + ["r", "o"])
        try mount(options: ["allow_other", "max_user_readers=4", "max_readers=5"])
        let go = root + "/go"
        let roots = try reader(0, reads: ["r"], saves: ["r"], go: go)
        defer { _ = roots.stop(SIGKILL) }
        let nobodys = try reader(65534, reads: many, saves: ["n1", "n20"], go: go)
        defer { _ = nobodys.stop(SIGKILL) }
        let others = try reader(1234, reads: ["o"], saves: [], go: root + "/never")
        defer { _ = others.stop(SIGKILL) }
        // Another process changes what they read; then they save over it.
        XCTAssertEqual(sh("for f in r n1 n20 o; do echo changed > '\(mnt!)/shared/'$f; done").status, 0)
        XCTAssertTrue(FileManager.default.createFile(atPath: go, contents: Data()))
        for child in [roots, nobodys] {
            let saved = Date().addingTimeInterval(10)
            while !child.lines.contains("saved") && Date() < saved { usleep(20_000) }
            XCTAssertTrue(child.lines.contains("saved"), "\(child.stdout) \(child.stderr)")
        }
        let recorded = Date().addingTimeInterval(10)
        while (lostUpdates(at: "r", of: 0) < 1 || lostUpdates(at: "n20", of: 65534) < 1) && Date() < recorded { usleep(100_000) }
        XCTAssertEqual(lostUpdates(at: "r", of: 0), 1, "root's record survived nobody's reads")
        XCTAssertEqual(lostUpdates(at: "n20", of: 65534), 1, "nobody's latest record is kept")
        XCTAssertEqual(lostUpdates(at: "n1", of: 65534), 0, "nobody's oldest record was dropped")
    }

    // MARK: One user's churn and everyone else's history

    /// `coordfs log ARGUMENTS --json` (as root) as records.
    private func logRecords(_ arguments: String...) -> [[String: Any]] {
        let r = coordfs(arguments: ["log"] + arguments + ["--json"], timeout: 120)
        XCTAssertEqual(r.status, 0, "\(r.stderr)")
        return r.lines.compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
    }

    private func uid(_ record: [String: Any]) -> Int? { ((record["actor"] as? [String: Any])?["uid"] as? NSNumber)?.intValue }
    private func details(_ record: [String: Any]) -> [String: Any] { record["details"] as? [String: Any] ?? [:] }

    /// How many records a `coalesced` record says it summarised.
    private func summarised(_ record: [String: Any]) -> Int {
        guard let m = details(record)["message"] as? String, let r = m.range(of: " records summarised") else { return 0 }
        return Int(m[..<r.lowerBound].split(separator: " ").last ?? "") ?? 0
    }

    /// nobody creating and deleting 20,000 files on an `allow_other` mount with a 1 MiB log: root's
    /// records from before the flood are still in the log afterwards (before, retention dropped them
    /// with nobody's, oldest first), nobody's records take at most its share (`log_user_share`, 10%)
    /// one by one, and the rest of what it did is in `coalesced` records of its uid: one as soon as it
    /// reached its share, then summaries whose counts, with its records stored one by one, account for
    /// all of it.
    func testOneUsersFloodKeepsOthersHistoryAndIsSummarised() throws {
        makeSharedFolder()
        try mount(options: ["allow_other", "log_max_mb=1"])
        XCTAssertEqual(sh("for i in $(seq 1 20); do echo root > '\(mnt!)/shared/root-'$i; done").status, 0)
        let before = logRecords(mnt, "--path", "/shared/root-*")
        XCTAssertGreaterThanOrEqual(before.count, 20 * 3, "root's records")
        let flood = """
            import os, sys
            d = sys.argv[1]
            for i in range(int(sys.argv[2])):
                p = os.path.join(d, "f%d" % i)
                os.close(os.open(p, os.O_CREAT | os.O_WRONLY, 0o644))
                os.unlink(p)
            """
        let started = Date()
        let nobodys = run("/usr/bin/setpriv", user(65534) + ["/usr/bin/python3", "-c", flood, mnt + "/shared", "20000"], timeout: 300)
        XCTAssertEqual(nobodys.status, 0, "\(nobodys)")
        print("nobody's 20,000 creates and unlinks took \(Date().timeIntervalSince(started)) s")
        // The moment it reached its share is in the log at once.
        let reached = Date().addingTimeInterval(10)
        var coalesced = logRecords(mnt, "--kind", "coalesced")
        while coalesced.isEmpty && Date() < reached { usleep(100_000); coalesced = logRecords(mnt, "--kind", "coalesced") }
        XCTAssertTrue((coalesced.first?["details"] as? [String: Any])?["message"].map { "\($0)".contains("uid 65534 reached its share of the log") } == true,
                      "\(coalesced.first ?? [:])")
        XCTAssertEqual(sh("echo root > '\(mnt!)/shared/root-after'").status, 0)
        XCTAssertEqual(coordfs("unmount", mnt).status, 0)

        // Root's history from before the flood, the same records, and its record after it.
        let after = logRecords("--backing", backing, "--path", "/shared/root-*")
        XCTAssertEqual(after.filter { ($0["seq"] as? NSNumber).map { s in before.contains { ($0["seq"] as? NSNumber) == s } } == true }.count,
                       before.count, "root's earlier records survive nobody's flood")
        XCTAssertTrue(after.contains { $0["path"] as? String == "/shared/root-after" && uid($0) == 0 })
        let all = logRecords("--backing", backing)
        XCTAssertFalse(all.contains { $0["kind"] as? String == "gap" }, "nothing was dropped")
        let stored = all.filter { uid($0) == 65534 && $0["kind"] as? String != "coalesced" }
        let summaries = all.filter { $0["kind"] as? String == "coalesced" }
        XCTAssertGreaterThan(stored.count, 100, "nobody's first records are stored one by one")
        XCTAssertLessThan(stored.count, 1_048_576 / 10 / 40, "within its share (records of 40 bytes or more)")
        XCTAssertTrue(summaries.allSatisfy { uid($0) == 65534 && details($0)["reason"] as? String == "userShare" }, "\(summaries.prefix(3))")
        let counted = summaries.map(summarised).reduce(0, +)
        // Each create and each unlink is at least a request, a grant and a release.
        XCTAssertGreaterThanOrEqual(stored.count + counted, 40_000 * 3, "every record of nobody's is stored or counted")
        let said = summaries.compactMap { details($0)["message"] as? String }.joined(separator: "\n")
        for kind in ["intentRequested", "granted", "released"] { XCTAssertTrue(said.contains(kind + " "), said) }
        // Each names the first and last item it summarises (nobody's items are all in shared/).
        XCTAssertTrue(summaries.dropFirst().allSatisfy { ($0["path"] as? String)?.hasPrefix("/shared") == true && ($0["oldPath"] as? String)?.hasPrefix("/shared") == true },
                      "\(summaries.map { [$0["path"], $0["oldPath"]] })")
        print("nobody: \(stored.count) records stored, \(counted) in \(summaries.count) summaries; log: \(all.count) records")
    }

    /// A user over its share that went quiet: what was gathered for its next summary is written
    /// within a bound on an otherwise idle mount (at the log writer's retention check, which wakes
    /// it every 10 s anyway, every `log_summary_interval` when that is shorter: 1 s here), not only
    /// at its next record or at unmount; and the operator sees who is summarised in `coordfs status`
    /// (text and JSON; nobody sees only itself) and the metrics.
    func testAQuietUsersPendingSummaryIsWrittenSoonAndStatusAndMetricsNameIt() throws {
        makeSharedFolder()
        try mount(options: ["allow_other", "log_max_mb=1", "log_user_share=1", "log_summary_interval=1", "metrics=127.0.0.1:0"])
        let flood = """
            import os, sys
            d = sys.argv[1]
            for i in range(int(sys.argv[2])):
                p = os.path.join(d, "f%d" % i)
                os.close(os.open(p, os.O_CREAT | os.O_WRONLY, 0o644))
                os.unlink(p)
            os.close(os.open(os.path.join(d, "last-marker"), os.O_CREAT | os.O_WRONLY, 0o644))
            """
        let nobodys = run("/usr/bin/setpriv", user(65534) + ["/usr/bin/python3", "-c", flood, mnt + "/shared", "300"], timeout: 120)
        XCTAssertEqual(nobodys.status, 0, "\(nobodys)")
        // nobody is quiet now; its last records (last-marker's) wait for a summary. It comes
        // without another record of anyone's and without an unmount (within summary interval +
        // retention check, 2 s; 60 s allowed; only the unmount would write it without them).
        let deadline = Date().addingTimeInterval(60)
        func markerSummarised() -> Bool {
            logRecords(mnt, "--kind", "coalesced").contains { $0["oldPath"] as? String == "/shared/last-marker" && uid($0) == 65534 }
        }
        var said = markerSummarised()
        while !said && Date() < deadline { usleep(500_000); said = markerSummarised() }
        XCTAssertTrue(said, "a coalesced record of nobody's ending at /shared/last-marker, before any unmount: \(logRecords(mnt, "--kind", "coalesced"))")

        // coordfs status names the user, in text and JSON.
        let text = coordfs("status", mnt)
        XCTAssertTrue(text.stdout.contains("event log: uid 65534 over its share since "), "\(text)")
        XCTAssertTrue(text.stdout.contains("of 10485 bytes"), "the share: 1% of 1 MiB: \(text)")
        func logShare(_ r: CommandResult) -> [[String: Any]] {
            ((try? JSONSerialization.jsonObject(with: Data(r.stdout.utf8))) as? [String: Any])?["logShare"] as? [[String: Any]] ?? []
        }
        let json = logShare(coordfs("status", mnt, "--json"))
        XCTAssertEqual(json.compactMap { ($0["uid"] as? NSNumber)?.intValue }, [65534], "\(json)")
        XCTAssertGreaterThan((json.first?["records"] as? NSNumber)?.intValue ?? 0, 300, "\(json)")
        XCTAssertEqual((json.first?["limitBytes"] as? NSNumber)?.intValue, 10485, "\(json)")
        XCTAssertNotNil(json.first?["since"] as? String, "\(json)")
        // nobody sees itself; another user (not over its share) sees no one.
        XCTAssertEqual(logShare(coordfs(as: 65534, "status", mnt, "--json")).compactMap { ($0["uid"] as? NSNumber)?.intValue }, [65534])
        let stranger = run("/usr/bin/setpriv", user(65533) + [binary, "status", mnt, "--json"], timeout: 30)
        XCTAssertEqual(stranger.status, 0, "\(stranger)")
        XCTAssertTrue(logShare(stranger).isEmpty, "\(stranger)")

        // The metrics: one user over its share, its records summarised.
        let log = (try? String(contentsOfFile: backing + "/.coordfs/daemon.log", encoding: .utf8)) ?? ""
        let port = try XCTUnwrap(log.split(separator: "\n").last(where: { $0.contains("metrics at http://127.0.0.1:") })
            .flatMap { $0.split(separator: ":").last?.split(separator: "/").first.flatMap { UInt16($0) } }, log)
        let metrics = try XCTUnwrap(HTTP.request(port: port, "GET", "/metrics")).text
        func value(_ series: String) -> Double? {
            metrics.split(separator: "\n").first { $0.hasPrefix(series + " ") }.flatMap { Double($0.split(separator: " ").last ?? "") }
        }
        XCTAssertEqual(value("coordfs_event_log_users_over_share"), 1, metrics)
        XCTAssertGreaterThan(value("coordfs_event_log_records_summarised_total") ?? 0, 300, metrics)
    }

    /// nobody's churn on its own document (written 40 times under its presenter, 64 KiB each) on a
    /// mount that keeps 1 MiB of versions: root's versions of its document, kept before, survive
    /// (before, the oldest went first, root's among them); nobody's oldest go instead.
    func testOneUsersChurnEvictsItsOwnVersionsBeforeOthers() throws {
        makeSharedFolder()
        XCTAssertTrue(FileManager.default.createFile(atPath: backing + "/shared/root.txt", contents: Data("root\n".utf8)))
        try mount(options: ["allow_other", "keep_mb=1", "keep_versions=100000"])
        let bigWrite = { (path: String, uid: Int, n: Int) -> CommandResult in
            self.run("/usr/bin/setpriv", self.user(uid) + ["/bin/sh", "-c", "for i in $(seq 1 \(n)); do head -c 65536 /dev/urandom > '\(path)'; done"])
        }
        let versions = { (relative: String) -> [[String: Any]] in
            let r = self.coordfs("versions", self.mnt + "/" + relative, "--json")
            return r.lines.compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        }
        // Root keeps three versions of its document, then lets go of it.
        let roots = try start(binary, ["present", mnt + "/shared/root.txt"])
        XCTAssertTrue(roots.waitForLastLine(prefix: "registered", timeout: 10) || roots.lines.contains { $0.hasPrefix("registered") }, roots.stderr)
        // One save at a time, each once the presenter was told of the one before: a version is a
        // presenter's base kept before a write, and a write granted before the presenter heard of
        // the one before it goes over no base of its (the shell's next open can come before the
        // kernel's RELEASE of the last one), so it keeps nothing (docs/document-store.md, "The base").
        for i in 1...3 {
            XCTAssertEqual(bigWrite(mnt + "/shared/root.txt", 0, 1).status, 0)
            let told = Date().addingTimeInterval(10)
            while roots.lines.filter({ $0.hasPrefix("notification documentChanged") }).count < i && Date() < told { usleep(20_000) }
        }
        let kept = Date().addingTimeInterval(10)
        while versions("shared/root.txt").count < 3 && Date() < kept { usleep(100_000) }
        _ = roots.stop()
        let rootsVersions = versions("shared/root.txt").compactMap { ($0["version"] as? NSNumber)?.int64Value }
        XCTAssertEqual(rootsVersions.count, 3, "root's versions")
        // nobody's own document, presented and written 40 times: 2.5 MiB of versions.
        XCTAssertEqual(run("/usr/bin/setpriv", user(65534) + ["/bin/sh", "-c", "echo n > '\(mnt!)/shared/n.txt'"]).status, 0)
        let nobodys = try start("/usr/bin/setpriv", user(65534) + [binary, "present", mnt + "/shared/n.txt"])
        defer { _ = nobodys.stop(SIGKILL) }
        let registered = Date().addingTimeInterval(10)
        while !nobodys.lines.contains(where: { $0.hasPrefix("registered") }) && Date() < registered { usleep(20_000) }
        XCTAssertEqual(bigWrite(mnt + "/shared/n.txt", 65534, 40).status, 0)
        // Each version is kept inside its write's access (before the write goes on), and its
        // `snapshotTaken` record queued then; the log stores records in the order they were
        // queued. So once a record of a change made after the last write is in the log, so is
        // every version's. (Waiting for 40 of them waited the whole bound whenever a write kept
        // none: one granted before the presenter heard of the write before it.)
        XCTAssertEqual(sh("echo after > '\(mnt!)/shared/after-churn'").status, 0)
        let logged = Date().addingTimeInterval(20)
        while logRecords(mnt, "--path", "/shared/after-churn").isEmpty && Date() < logged { usleep(100_000) }
        let snapshots = logRecords(mnt, "--kind", "snapshotTaken", "--path", "/shared/n.txt")
        XCTAssertGreaterThan(snapshots.count, 20, "nobody kept more versions than fit")
        XCTAssertEqual(versions("shared/root.txt").compactMap { ($0["version"] as? NSNumber)?.int64Value }, rootsVersions,
                       "root's versions survive nobody's churn")
        let nobodysLeft = versions("shared/n.txt")
        XCTAssertLessThan(nobodysLeft.count, snapshots.count, "nobody's oldest went")
        XCTAssertLessThanOrEqual(Int(sql("SELECT SUM(size) FROM version")) ?? .max, (1 << 20) + 65536, "within keep_mb (and a pinned base)")
        print("nobody kept \(snapshots.count) versions, \(nobodysLeft.count) left; root's \(rootsVersions.count) left")
    }
}
