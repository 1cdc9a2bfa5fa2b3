// The event log through the CLI under stress: a watcher paused for 100,000 records catches up with
// none missing, a daemon killed with SIGKILL mid-stream loses no record a watcher saw and the next
// mount continues the sequence, retention leaves gap records and says so, a full disk and a SIGKILL
// take back nothing a watcher showed.
import Foundation
import Glibc
import TestSupport
import XCTest

final class DurabilityTests: CLITestCase {
    private func info(file: StaticString = #filePath, line: UInt = #line) -> [String: Any] {
        let r = coordfs("log", "--backing", backing, "--info", "--json")
        guard r.status == 0, let data = r.stdout.data(using: .utf8),
              let o = try? JSONSerialization.jsonObject(with: data) as? [String: Any] else {
            XCTFail("coordfs log --info: \(r)", file: file, line: line)
            return [:]
        }
        return o
    }

    private func seqField(_ o: [String: Any], _ key: String) -> UInt64 { (o[key] as? NSNumber)?.uint64Value ?? 0 }

    /// The log files' next seq once it reaches `target`, or once it has stopped growing for a second
    /// (30 s at most): what the writer still had queued is then on disk.
    private func nextSeqOnDisk(reaching target: UInt64) -> UInt64 {
        var next = seqField(info(), "nextSeq")
        var unchangedSince = Date()
        let deadline = Date().addingTimeInterval(30)
        while next < target, Date() < deadline, Date().timeIntervalSince(unchangedSince) < 1 {
            usleep(100_000)
            let now = seqField(info(), "nextSeq")
            if now != next { next = now; unchangedSince = Date() }
        }
        return next
    }

    func testPausedWatcherCatchesUpOnOneHundredThousandRecords() throws {
        try mount()
        FileOps.put(mnt + "/f", "x")
        let start = seqField(info(), "nextSeq")
        let watcher = try startCoordfs(["watch", mnt, "--json", "--since", String(start)])
        // A second watcher starts only after everything happened: it must catch up the same way.
        kill(watcher.pid, SIGSTOP)
        let opens = 34_000  // three records each
        XCTAssertEqual(FileOps.openClose(mnt + "/f", times: opens), opens)
        // The daemon's writer appends asynchronously: under load its queue may still hold the last
        // opens' records when the loop ends, so wait until the files show them (or stop growing).
        let end = nextSeqOnDisk(reaching: start + 100_000) - 1
        XCTAssertGreaterThanOrEqual(end - start + 1, 100_000, "fewer records than intended")
        let late = try startCoordfs(["watch", mnt, "--json", "--since", String(start)])
        kill(watcher.pid, SIGCONT)
        let count = Int(end - start + 1)
        for w in [watcher, late] {
            XCTAssertTrue(w.waitForLastLine(prefix: "{\"seq\":\(end),", timeout: 60), "watcher \(w.pid) did not reach \(end)")
            w.stop()
            // Checked cheaply (100,000 lines): each line's seq, in order, and no gap record.
            let lines = w.lines
            XCTAssertGreaterThanOrEqual(lines.count, count, "watcher \(w.pid) showed \(lines.count) of \(count) records")
            var expected = start
            for l in lines.prefix(count) {
                guard seq(of: l) == expected else { return XCTFail("watcher \(w.pid): expected seq \(expected), got \(l.prefix(120))") }
                XCTAssertFalse(l.contains("\"kind\":\"gap\""), "a gap in a log that lost nothing: \(l)")
                expected += 1
            }
            // A sample parses as a full record.
            XCTAssertEqual(records([lines[0], lines[count / 2], lines[count - 1]]).map(\.seq), [start, start + UInt64(count / 2), end])
        }
    }

    /// The seq of a JSON line (`{"seq":N,...`), without a JSON parser.
    private func seq(of line: String) -> UInt64? {
        guard line.hasPrefix("{\"seq\":") else { return nil }
        return UInt64(line.dropFirst(7).prefix { $0 != "," })
    }

    func testDaemonKilledMidStreamLosesNoAcknowledgedRecord() throws {
        try mount()
        let watcher = try startCoordfs(["watch", mnt, "--json", "--since", "1"])
        // Load from another process: truncating opens as fast as the shell goes, until the mount dies.
        let load = try start("/bin/sh", ["-c", "while : > '\(mnt!)/busy'; do :; done"])
        watcher.waitForLines(3000, timeout: 30)
        guard let daemon = daemonPID() else { return XCTFail("no daemon pid") }
        kill(daemon, SIGKILL)
        XCTAssertNotNil(load.wait(timeout: 10), "the load did not stop when the mount died")
        // Let the watcher drain what was written, then stop it.
        var previous = -1
        while watcher.lines.count != previous { previous = watcher.lines.count; usleep(300_000) }
        watcher.stop()
        let seen = watcher.lines
        XCTAssertGreaterThan(seen.count, 1000)

        // Every record the watcher saw before the kill is readable through the (stale) mountpoint.
        let history = coordfs("log", mnt, "--json")
        XCTAssertEqual(history.status, 0, "log on a dead mount: \(history)")
        let stored = records(history.lines)
        assertContinuous(stored, from: 1, "log after SIGKILL")
        XCTAssertEqual(Array(history.lines.prefix(seen.count)), seen, "the watcher saw records that the log does not hold")
        let lastBefore = stored.last?.seq ?? 0

        // A fresh mount cleans the stale one and continues the sequence.
        try mount()
        FileOps.put(mnt + "/after", "x")
        unmount()
        let all = records(coordfs("log", "--backing", backing, "--json").lines)
        assertContinuous(all, from: 1, "log after remount")
        let resumed = all.filter { $0.seq > lastBefore }
        XCTAssertTrue(resumed.prefix(2).contains { $0.kind == "mount" }, "the new mount did not continue at \(lastBefore + 1): \(resumed.prefix(3))")
        XCTAssertTrue(resumed.contains { $0.kind == "didChange" && $0.path == "/after" })
        XCTAssertEqual(Set(all.map(\.seq)).count, all.count, "a seq was used twice")
    }

    /// A torn tail (a frame cut short, as a crash mid-write leaves it) is cut by the next mount and
    /// said by its `logRecovered` record, naming the segment as it is in the log's folder (before:
    /// `/proc/self/fd/N/log/segment-...`, the daemon's own descriptor path).
    func testATornTailIsCutByTheNextMountAndNamedInTheLogsFolder() throws {
        try mount()
        FileOps.put(mnt + "/before", "x")
        unmount()
        let log = backing + "/.coordfs/log"
        let segment = try XCTUnwrap(try FileManager.default.contentsOfDirectory(atPath: log).filter { $0.hasPrefix("segment-") }.max())
        // A frame header promising 100 bytes, and 3 of them.
        let fd = open(log + "/" + segment, O_WRONLY | O_APPEND)
        XCTAssertGreaterThanOrEqual(fd, 0)
        let torn: [UInt8] = [100, 0, 0, 0, 1, 2, 3]
        XCTAssertEqual(write(fd, torn, torn.count), torn.count)
        close(fd)

        try mount()
        FileOps.put(mnt + "/after", "x")
        unmount()
        let all = records(coordfs("log", "--backing", backing, "--json").lines)
        assertContinuous(all, from: 1, "log after the torn tail")
        let recovered = all.filter { $0.kind == "logRecovered" }
        XCTAssertEqual(recovered.count, 1, "\(recovered.map(\.description))")
        let message = recovered.first?.details["message"] as? String ?? ""
        XCTAssertEqual(recovered.first?.reason, "tornTail")
        XCTAssertEqual((recovered.first?.details["bytes"] as? NSNumber)?.intValue, torn.count)
        XCTAssertTrue(message.contains("at the end of \(segment)"), message)
        XCTAssertFalse(message.contains("/proc/"), message)
        XCTAssertTrue(all.contains { $0.kind == "didChange" && $0.path == "/after" })
    }

    /// Fills the file system of `path` but for `leave` bytes with a file `name` in it.
    private func fillDisk(_ path: String, leave: Int = 0) {
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        XCTAssertGreaterThanOrEqual(fd, 0)
        let block = [UInt8](repeating: 0x5a, count: 64 * 1024)
        while write(fd, block, block.count) > 0 {}
        if leave > 0 {
            let size = lseek(fd, 0, SEEK_END)
            XCTAssertEqual(ftruncate(fd, max(0, size - off_t(leave))), 0)
        }
        close(fd)
    }

    private func eventually(timeout: Double, _ condition: () -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if condition() { return true }
            usleep(100_000)
        }
        return condition()
    }

    /// Puts the backing folder on a 12 MiB tmpfs for this test (root only); at its end the mount
    /// and then the tmpfs are taken down.
    private func backingOnSmallTmpfs() throws {
        guard getuid() == 0 else { throw XCTSkip("mounts a small tmpfs: needs root") }
        XCTAssertEqual(Glibc.mount("tmpfs", backing, "tmpfs", 0, "size=12m"), 0, String(cString: strerror(errno)))
        addTeardownBlock { [self] in
            if Self.mounts(under: mnt).contains(mnt) { _ = coordfs("unmount", mnt) }
            umount2(mnt, Int32(MNT_DETACH))
            umount2(backing, Int32(MNT_DETACH))
        }
    }

    private func statusSays(_ text: String) -> Bool {
        let r = coordfs("status", mnt)
        return r.status == 0 && r.stdout.contains(text)
    }

    /// `coordfs mount` on a full disk says why the daemon did not come up, on its own stderr: the
    /// daemon's log, where it says so too, is on that disk. Before, it said only "the coordfs daemon
    /// did not come up" (the reason went to a daemon.log it could not write). Once there is room,
    /// the mount comes up.
    func testAMountOnAFullDiskSaysWhy() throws {
        try backingOnSmallTmpfs()
        let filler = backing + "/filler"
        fillDisk(filler)
        let refused = coordfs("mount", backing, mnt)
        XCTAssertNotEqual(refused.status, 0, "\(refused)")
        XCTAssertTrue(refused.stderr.contains("cannot open the") && (refused.stderr.contains("full") || refused.stderr.contains("No space left")),
                      "the refusal names what could not be opened and why: \(refused)")
        XCTAssertFalse(Self.mounts(under: root).contains(mnt), "nothing is left mounted")
        XCTAssertEqual(unlink(filler), 0)
        try mount()
        FileOps.put(mnt + "/f", "x")
        unmount()
    }

    /// The issue-17 case: a full disk while a watcher follows, a SIGKILL of the daemon while it is
    /// stuck, space freed, a new mount. Every record the watcher showed is still in the log with the
    /// same seq and contents, no seq is shown twice, the watcher goes on with the new mount's
    /// records, and the stuck writer said so (status while stuck, daemon.log and a logStalled record
    /// once it could write again, the next mount's logRecovered record after the kill).
    func testAFullDiskThenSIGKILLTakesBackNothingAWatcherShowed() throws {
        try backingOnSmallTmpfs()
        try mount()
        let watcher = try startCoordfs(["watch", mnt, "--json", "--since", "1"])
        FileOps.put(mnt + "/f", "x")
        let filler = backing + "/filler"

        // First spell: stuck, then room again.
        fillDisk(filler)
        XCTAssertEqual(FileOps.openClose(mnt + "/f", times: 3000), 3000)
        XCTAssertTrue(eventually(timeout: 20) { self.statusSays("event log: STUCK since ") }, coordfs("status", mnt).stdout)
        let json = coordfs("status", mnt, "--json").stdout
        XCTAssertTrue(json.contains("\"eventLog\":{") && json.contains("\"state\":\"stuck\"") && json.contains("No space left"), json)
        XCTAssertEqual(unlink(filler), 0)
        XCTAssertTrue(eventually(timeout: 20) { self.statusSays("event log: writing") }, coordfs("status", mnt).stdout)
        XCTAssertTrue(watcher.waitForLastLine(prefix: "{", timeout: 10))
        XCTAssertTrue(eventually(timeout: 20) { watcher.lines.contains { $0.contains("\"kind\":\"logStalled\"") } }, "no logStalled record")
        let daemonLog = (try? String(contentsOfFile: backing + "/.coordfs/daemon.log", encoding: .utf8)) ?? ""
        XCTAssertTrue(daemonLog.contains("event log: writing again after") && daemonLog.contains("No space left"), daemonLog)

        // Second spell: stuck, and the daemon killed while it is.
        fillDisk(filler)
        XCTAssertEqual(FileOps.openClose(mnt + "/f", times: 3000), 3000)
        XCTAssertTrue(eventually(timeout: 20) { self.statusSays("event log: STUCK since ") }, coordfs("status", mnt).stdout)
        // What the watcher shows settles (the writer retries, and keeps what the file took).
        var settled = -1
        while watcher.lines.count != settled { settled = watcher.lines.count; usleep(400_000) }
        let shown = watcher.lines
        guard let daemon = daemonPID() else { return XCTFail("no daemon pid") }
        kill(daemon, SIGKILL)
        XCTAssertTrue(ProcessEnd.wait(daemon, timeout: 10), "the daemon outlived SIGKILL")
        let lastShown = seq(of: shown.last ?? "") ?? 0

        // Room again, and a new mount; the watcher keeps running.
        XCTAssertEqual(unlink(filler), 0)
        try mount()
        FileOps.put(mnt + "/after", "x")
        XCTAssertTrue(eventually(timeout: 20) { watcher.lines.contains { $0.contains("\"path\":\"/after\"") } },
                      "the watcher stopped at seq \(lastShown): \(watcher.lines.suffix(3))")
        unmount()
        watcher.stop()

        // Every record shown before the kill is in the log, the same, under the same seq.
        let stored = coordfs("log", "--backing", backing, "--json").lines
        var bySeq: [UInt64: String] = [:]
        for line in stored { if let s = seq(of: line) { bySeq[s] = line } }
        for line in shown {
            guard let s = seq(of: line) else { continue }
            XCTAssertEqual(bySeq[s], line, "seq \(s) was shown as one record and is stored as another (or not at all)")
        }
        // The watcher never showed a seq twice, nor skipped one.
        let seqs = watcher.lines.compactMap { seq(of: $0) }
        XCTAssertEqual(seqs, Array(seqs.first!...seqs.last!), "the watcher's seqs are not 1, 2, 3, ...")
        assertContinuous(records(stored), from: 1, "log after the kill and remount")
        // The next mount said the previous writer ended stuck.
        let recovered = records(stored).first { $0.kind == "logRecovered" && $0.seq > lastShown }
        let message = recovered?.details["message"] as? String ?? ""
        XCTAssertTrue(message.contains("ended without closing the log, stuck since") && message.contains("No space left"),
                      "no logRecovered record saying the writer was stuck: \(recovered.map(\.description) ?? "none")")
    }

    /// The store on a full disk: a presenter with unsaved changes whose document is written in place
    /// gets a `failed` action naming the error (not a bare didChange, as before), and the log has a
    /// `storeFailed` record once it can be written. One save, one event: the store could neither
    /// keep the version the presenter loaded nor record the change, and the one `failed` event
    /// names both (before, each was a `failed` event of its own); the log has a record of each.
    func testAStoreFailureOnAFullDiskReachesThePresenterAndTheLog() throws {
        try backingOnSmallTmpfs()
        FileOps.put(backing + "/doc.txt", String(repeating: "line of the document\n", count: 4000))
        try mount()
        let presenter = try startCoordfs(["present", mnt + "/doc.txt", "--unsaved"])
        XCTAssertTrue(eventually(timeout: 10) { presenter.stdout.contains("registered presenter#") }, presenter.stdout + presenter.stderr)
        fillDisk(backing + "/filler")
        // An in-place write of bytes the file already has: it needs no new block, the store's copy
        // of the version the presenter loaded does.
        let fd = open(mnt + "/doc.txt", O_WRONLY)
        XCTAssertGreaterThanOrEqual(fd, 0)
        XCTAssertEqual(pwrite(fd, "LINE", 4, 0), 4)
        close(fd)
        XCTAssertTrue(eventually(timeout: 10) { presenter.stdout.contains("notification documentChanged doc.txt kind=change action=failed") },
                      presenter.stdout)
        let line = presenter.lines.first { $0.contains("action=failed") } ?? ""
        XCTAssertTrue(line.contains("No space left on device") || line.contains("full"), line)
        XCTAssertTrue(line.contains("could not keep the version you loaded") && line.contains("nor record this change"), line)
        // Its did change after the store's event: nothing more comes for this save.
        XCTAssertTrue(eventually(timeout: 10) { presenter.stdout.contains("notification didChange doc.txt") }, presenter.stdout)
        // Room again: the log has the failure.
        XCTAssertEqual(unlink(backing + "/filler"), 0)
        XCTAssertTrue(eventually(timeout: 20) { self.statusSays("event log: writing") }, coordfs("status", mnt).stdout)
        presenter.stop()
        let told = presenter.lines.filter { $0.contains("notification documentChanged") }
        XCTAssertEqual(told.count, 1, "one save, one event: \(told)")
        unmount()
        let stored = records(coordfs("log", "--backing", backing, "--json").lines)
        let failures = stored.filter { $0.kind == "storeFailed" && $0.path == "/doc.txt" }
        XCTAssertEqual(failures.map(\.reason), ["keepVersion", "noteChange"], "\(failures.map(\.description))")
        for failure in failures {
            XCTAssertEqual((failure.details["errno"] as? NSNumber)?.int32Value, ENOSPC, failure.description)
        }
    }

    /// A save by `cp` on a full disk: the store cannot keep the version the presenter (unsaved
    /// changes) loaded, then the truncation frees room and the change is recorded: one event, the
    /// conflict (without a base), not a `failed` event before it; the log has the `storeFailed`
    /// record of the version not kept and the conflict.
    func testASaveOnAFullDiskTheStoreThenRecordsIsOneConflict() throws {
        try backingOnSmallTmpfs()
        FileOps.put(backing + "/doc.txt", String(repeating: "line of the document\n", count: 4000))
        FileOps.put(root + "/new.txt", String(repeating: "a new version\n", count: 3000))
        try mount()
        let presenter = try startCoordfs(["present", mnt + "/doc.txt", "--unsaved"])
        XCTAssertTrue(eventually(timeout: 10) { presenter.stdout.contains("registered presenter#") }, presenter.stdout + presenter.stderr)
        fillDisk(backing + "/filler")
        let cp = run("/bin/cp", [root + "/new.txt", mnt + "/doc.txt"])
        XCTAssertEqual(cp.status, 0, "\(cp)")
        XCTAssertTrue(eventually(timeout: 10) { presenter.stdout.contains("notification didChange doc.txt") }, presenter.stdout)
        XCTAssertEqual(unlink(backing + "/filler"), 0)
        XCTAssertTrue(eventually(timeout: 20) { self.statusSays("event log: writing") }, coordfs("status", mnt).stdout)
        presenter.stop()
        let told = presenter.lines.filter { $0.contains("notification documentChanged") }
        XCTAssertEqual(told.count, 1, "one save, one event: \(told)")
        XCTAssertTrue(told.first?.contains("kind=change action=conflict") ?? false, "\(told)")
        unmount()
        let stored = records(coordfs("log", "--backing", backing, "--json").lines)
        XCTAssertEqual(stored.filter { $0.kind == "storeFailed" && $0.path == "/doc.txt" }.map(\.reason), ["keepVersion"])
        XCTAssertEqual(stored.filter { $0.kind == "conflictDetected" && $0.path == "/doc.txt" }.count, 1)
    }

    func testRetentionLeavesGapRecordsAndSaysSo() throws {
        try mount(options: ["log_max_mb=1"])
        // Long paths make big records, so the 16 MiB segment fills (and rotates) quickly.
        var dir = mnt!
        for i in 0..<4 {
            dir += "/" + String(repeating: Character(UnicodeScalar(UInt8(97 + i))), count: 240)
            FileOps.check(mkdir(dir, 0o755), "mkdir")
        }
        let file = dir + "/" + String(repeating: "f", count: 240)
        FileOps.put(file, "x")
        var oldest: UInt64 = 1
        for _ in 0..<20 where oldest == 1 {
            XCTAssertEqual(FileOps.openClose(file, times: 1_000), 1_000)
            oldest = seqField(info(), "oldestSeq")
        }
        XCTAssertGreaterThan(oldest, 1, "retention deleted nothing with log_max_mb=1")
        // Unmounted, the log is final: the last records of the burst (a RELEASE can arrive after its
        // close returned) and the unmount record can rotate a segment and run retention once more.
        unmount()
        let settled = info()
        oldest = seqField(settled, "oldestSeq")
        let bytes = seqField(settled, "bytes")
        XCTAssertLessThan(bytes, 17 << 20, "the log kept \(bytes) bytes")

        // From the start: a retention gap stands in for the deleted records, quietly.
        let fromStart = coordfs("log", "--backing", backing, "--json", "--limit", "2")
        let head = records(fromStart.lines)
        XCTAssertEqual(head.first?.kind, "gap")
        XCTAssertEqual(head.first?.reason, "retention")
        XCTAssertEqual(head.first?.gapFrom, 1)
        XCTAssertEqual(head.first?.gapTo, oldest - 1)
        XCTAssertEqual(head.last?.seq, oldest)
        XCTAssertTrue(fromStart.stderr.isEmpty, "\(fromStart)")
        // A cursor older than retention: stderr says so, then it continues from the oldest kept.
        for cmd in ["log", "watch"] {
            let r = coordfs(cmd, "--backing", backing, "--json", "--since", "5", "--limit", "2")
            XCTAssertEqual(r.status, 0, "\(cmd): \(r)")
            XCTAssertTrue(r.stderr.contains("older than retention"), "\(cmd) --since 5: \(r)")
            let recs = records(r.lines)
            XCTAssertEqual(recs.map(\.kind).first, "gap")
            XCTAssertEqual(recs.first?.gapFrom, 5)
            XCTAssertEqual(recs.last?.seq, oldest)
        }
        // Filters never hide a gap; the writer recorded what it deleted.
        let filtered = records(coordfs("log", "--backing", backing, "--json", "--kind", "didMove", "--limit", "1").lines)
        XCTAssertEqual(filtered.first?.kind, "gap")
        let retention = records(coordfs("log", "--backing", backing, "--json", "--kind", "retention").lines).filter { $0.kind == "retention" }
        XCTAssertFalse(retention.isEmpty, "no retention record")
        // Several passes may have run (small segments); older retention records can themselves be
        // gone. The kept ones reach up to the oldest kept record.
        XCTAssertTrue(retention.allSatisfy { ($0.gapFrom ?? 0) >= 1 && ($0.gapTo ?? .max) < oldest }, "\(retention)")
        XCTAssertEqual(retention.compactMap(\.gapTo).max(), oldest - 1)
        let all = records(coordfs("log", "--backing", backing, "--json").lines)
        assertContinuous(all, from: 1, "log after retention")
    }
}
