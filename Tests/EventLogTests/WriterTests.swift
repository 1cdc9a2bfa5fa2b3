import Foundation
import Synchronization
import XCTest

@testable import EventLog

final class WriterTests: XCTestCase {
    func testAppendFlushAndReadBack() throws {
        let dir = makeLogDirectory(self)
        let writer = try EventLogWriter(directory: dir)
        let samples = sampleRecords()
        var seqs: [UInt64] = []
        for i in 0..<1000 { seqs.append(writer.append(samples[i % samples.count])) }
        XCTAssertEqual(seqs, Array(1...1000))
        try writer.flush()
        XCTAssertEqual(writer.writtenSeq, 1000)
        let records = try readAll(dir)
        XCTAssertEqual(records.count, 1000)
        assertContinuous(records, from: 1)
        for (i, r) in records.enumerated() {
            var expected = samples[i % samples.count]
            expected.seq = r.seq
            expected.time = r.time
            XCTAssertEqual(r, expected)
        }
        XCTAssertEqual(records.map(\.time), records.map(\.time).sorted(), "times never go backwards")
        try writer.close()
        XCTAssertEqual(writer.append(.mount, path: "/"), 0, "appends after close are refused")
    }

    /// The log names every user's items: its folder and files are the writer's user's alone, and a
    /// log an older version left readable is closed up when a writer opens it.
    func testTheLogIsReadableByItsOwnerOnly() throws {
        let dir = makeLogDirectory(self)
        func modes() -> [String: mode_t] {
            var out: [String: mode_t] = [:]
            var st = stat()
            if stat(dir, &st) == 0 { out["."] = st.st_mode & 0o777 }
            for name in (try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? [] where stat(dir + "/" + name, &st) == 0 {
                out[name] = st.st_mode & 0o777
            }
            return out
        }
        var writer = try EventLogWriter(directory: dir)
        writer.append(.mount, path: "/")
        try writer.flush()
        try writer.close()
        XCTAssertEqual(modes().filter { $0.key != "." }.values.sorted(), [0o600, 0o600], "\(modes())")
        XCTAssertEqual(modes()["."], 0o700)
        // As an older version left it.
        chmod(dir, 0o755)
        for name in try FileManager.default.contentsOfDirectory(atPath: dir) { chmod(dir + "/" + name, 0o644) }
        writer = try EventLogWriter(directory: dir)
        XCTAssertEqual(Set(modes().values), [0o700, 0o600], "\(modes())")
        XCTAssertEqual(modes()["."], 0o700)
        try writer.close()
    }

    /// A source the writer pulls from: its records reach the file in order with direct appends,
    /// with the time they were stamped, without any flush, and a flush after draining has them all.
    func testASourceIsPulledByTheWriterThreadInOrder() throws {
        let dir = makeLogDirectory(self)
        let writer = try EventLogWriter(directory: dir, options: EventLogOptions(writerNiceness: 5))
        let pending = Mutex<[String]>([])
        let stamped = EventTime(millisecondsSinceEpoch: 1_800_000_000_000)
        let pulledOn = Mutex<Set<UInt64>>([])
        writer.setSource {
            pulledOn.withLock { _ = $0.insert(UInt64(pthread_self())) }
            for p in pending.withLock({ q -> [String] in defer { q.removeAll() }; return q }) {
                writer.append(EventRecord(kind: .didChange, path: p), at: stamped)
            }
        }
        writer.append(.mount, path: "/")
        pending.withLock { $0 = ["/a", "/b"] }
        writer.sourceHasRecords()
        let deadline = Date().addingTimeInterval(5)
        while writer.writtenSeq < 3 && Date() < deadline { usleep(1000) }
        XCTAssertEqual(writer.writtenSeq, 3, "pulled and written without a flush")
        XCTAssertFalse(pulledOn.withLock { $0 }.contains(UInt64(pthread_self())), "pulled on the writer's thread")
        // The writer thread runs at the nice value asked for (on Linux, per thread).
        let nices = try FileManager.default.contentsOfDirectory(atPath: "/proc/self/task").compactMap { tid -> String? in
            let stat = try? String(contentsOfFile: "/proc/self/task/\(tid)/stat", encoding: .utf8)
            return stat.flatMap { $0.split(separator: ")").last?.split(separator: " ").dropFirst(16).first.map(String.init) }
        }
        XCTAssertTrue(nices.contains("5"), "no thread at nice 5: \(nices)")
        try writer.flush()
        writer.setSource(nil)
        try writer.close()
        let records = try readAll(dir)
        XCTAssertEqual(records.map(\.path), ["/", "/a", "/b"])
        XCTAssertEqual(records[1].time, stamped, "the stamped time, not the time of the pull")
        XCTAssertThrowsError(try EventLogWriter(directory: makeLogDirectory(self), options: EventLogOptions(writerNiceness: 20)))
    }

    /// An idle writer pulls its source at each retention check too (the wake-up it makes anyway),
    /// so a source can write what it held back until a time (a user's summary) without a wake-up
    /// of its own: a record the source holds, never announced, is written at the next check.
    func testAnIdleWritersRetentionCheckPullsTheSource() throws {
        let dir = makeLogDirectory(self)
        let writer = try EventLogWriter(directory: dir, options: EventLogOptions(maxTotalBytes: 64 << 20, retentionCheckInterval: .milliseconds(200)))
        let held = Mutex<[String]>(["/held"])
        let pulls = Atomic<Int>(0)
        writer.setSource {
            pulls.add(1, ordering: .relaxed)
            for p in held.withLock({ q -> [String] in defer { q.removeAll() }; return q }) { writer.append(.didChange, path: p) }
        }
        let deadline = Date().addingTimeInterval(10)
        while writer.writtenSeq < 1 && Date() < deadline { usleep(10_000) }
        XCTAssertEqual(writer.writtenSeq, 1, "the held record written at a retention check, never announced")
        while pulls.load(ordering: .relaxed) < 3 && Date() < deadline { usleep(10_000) }
        XCTAssertGreaterThanOrEqual(pulls.load(ordering: .relaxed), 3, "pulled at each check")
        writer.setSource(nil)
        try writer.close()
        XCTAssertEqual(try readAll(dir).map(\.path), ["/held"])
    }

    /// The hand-off to the writer takes no lock on the producers' side: many threads saying
    /// `sourceHasRecords` while the writer goes idle, coalesces or pulls never leave a record
    /// waiting (a lost wake-up would leave it until a flush: no retention timer here to hide it).
    func testSourceHandOffLosesNoWakeUp() throws {
        let dir = makeLogDirectory(self)
        let writer = try EventLogWriter(directory: dir, options: EventLogOptions(retentionCheckInterval: .seconds(3600)))
        let pending = Mutex<[EventRecord]>([])
        let pushed = Atomic<UInt64>(0)
        writer.setSource {
            var batch = pending.withLock { q -> [EventRecord] in defer { q.removeAll() }; return q }
            writer.append(contentsOf: &batch)
        }
        let failures = Atomic<Int>(0)
        DispatchQueue.concurrentPerform(iterations: 4) { t in
            var rng = SystemRandomNumberGenerator()
            for i in 0..<300 where failures.load(ordering: .relaxed) == 0 {
                let target = pending.withLock { q -> UInt64 in
                    q.append(EventRecord(time: EventTime.now(), kind: .didChange, path: "/t\(t)/\(i)"))
                    return pushed.add(1, ordering: .sequentiallyConsistent).newValue
                }
                writer.sourceHasRecords()
                if Bool.random(using: &rng) { usleep(UInt32.random(in: 0...300, using: &rng)) }
                let deadline = Date().addingTimeInterval(2)
                while writer.writtenSeq < target && Date() < deadline { usleep(50) }
                if writer.writtenSeq < target { failures.add(1, ordering: .relaxed) }
            }
        }
        XCTAssertEqual(failures.load(ordering: .relaxed), 0, "records waited for a wake-up that never came")
        try writer.flush()
        writer.setSource(nil)
        try writer.close()
        let records = try readAll(dir)
        XCTAssertEqual(records.count, Int(pushed.load(ordering: .relaxed)))
        XCTAssertEqual(records.map(\.seq), (0..<records.count).map { UInt64($0) + 1 }, "one seq each, in order")
        for t in 0..<4 {
            let mine = records.filter { $0.path.hasPrefix("/t\(t)/") }.map(\.path)
            XCTAssertEqual(mine, (0..<mine.count).map { "/t\(t)/\($0)" }, "thread \(t)'s records in the order it pushed them")
        }
    }

    /// Records said after the source is gone (a late event at unmount) leave the writer idle: it
    /// does not wake every coalescing delay for a source it no longer has.
    func testAWriterWithoutASourceStaysIdle() throws {
        let dir = makeLogDirectory(self)
        let writer = try EventLogWriter(directory: dir, options: EventLogOptions(retentionCheckInterval: .seconds(3600)))
        writer.setSource {}
        writer.setSource(nil)
        writer.sourceHasRecords()
        usleep(50_000)
        guard let tid = try FileManager.default.contentsOfDirectory(atPath: "/proc/self/task").first(where: { tid in
            (try? String(contentsOfFile: "/proc/self/task/\(tid)/comm", encoding: .utf8))?.hasPrefix("eventlog-writer") == true
        }) else { return XCTFail("no thread named eventlog-writer") }
        func switches() -> Int {
            let status = (try? String(contentsOfFile: "/proc/self/task/\(tid)/status", encoding: .utf8)) ?? ""
            return status.split(separator: "\n").first { $0.hasPrefix("voluntary_ctxt_switches:") }
                .flatMap { Int($0.split(separator: ":")[1].trimmingCharacters(in: .whitespaces)) } ?? -1
        }
        let before = switches()
        usleep(300_000)
        XCTAssertLessThan(switches() - before, 10, "the writer kept waking up with nothing to do")
        try writer.close()
    }

    /// The durability policy: a record reaches the file on its own within milliseconds of
    /// `append`, without `flush()`, so a SIGKILL from then on cannot lose it.
    func testRecordsReachTheFileWithoutFlush() throws {
        let dir = makeLogDirectory(self)
        let w = try EventLogWriter(directory: dir)
        let start = Date()
        let seq = w.append(.granted, path: "/soon")
        while w.writtenSeq < seq && Date().timeIntervalSince(start) < 5 { usleep(200) }
        let elapsed = Date().timeIntervalSince(start)
        XCTAssertEqual(w.writtenSeq, seq)
        XCTAssertLessThan(elapsed, 0.5, "written \(elapsed * 1000) ms after append")
        XCTAssertEqual(try readAll(dir).map(\.path), ["/soon"], "visible to another reader before any flush")
        try w.close()
    }

    func testSequenceContinuesAfterReopen() throws {
        let dir = makeLogDirectory(self)
        do {
            let w = try EventLogWriter(directory: dir)
            for _ in 0..<10 { w.append(.granted, path: "/a") }
            try w.close()
        }
        let w = try EventLogWriter(directory: dir)
        XCTAssertNil(w.recovery)
        XCTAssertEqual(w.append(.released, path: "/a"), 11)
        try w.close()
        let all = try readAll(dir)
        XCTAssertEqual(all.count, 11)
        assertContinuous(all, from: 1)
    }

    func testTornTailIsTruncatedAndTheSequenceContinues() throws {
        let dir = makeLogDirectory(self)
        do {
            let w = try EventLogWriter(directory: dir)
            for i in 0..<100 { w.append(.didChange, path: "/f\(i)") }
            try w.close()
        }
        let segment = dir + "/" + SegmentName(firstSeq: 1).fileName
        let size = try FileManager.default.attributesOfItem(atPath: segment)[.size] as! Int
        XCTAssertEqual(truncate(segment, off_t(size - 5)), 0, "cut the last record mid-way, like a SIGKILL mid-write")

        let w = try EventLogWriter(directory: dir)
        let recovery = try XCTUnwrap(w.recovery)
        XCTAssertEqual(recovery.lastSeq, 99)
        XCTAssertGreaterThan(recovery.bytesTruncated, 0)
        XCTAssertEqual(w.append(.didChange, path: "/after"), 101, "seq 100 is the logRecovered record")
        try w.close()
        let all = try readAll(dir)
        assertContinuous(all, from: 1)
        XCTAssertEqual(all.count, 101)
        XCTAssertEqual(all[98].path, "/f98")
        XCTAssertEqual(all[99].kind, .logRecovered)
        XCTAssertEqual(all[99].details.bytes, UInt64(recovery.bytesTruncated))
        XCTAssertEqual(all[100].path, "/after")
    }

    func testGarbageTailIsCutAtTheFirstBadFrame() throws {
        let dir = makeLogDirectory(self)
        do {
            let w = try EventLogWriter(directory: dir)
            for i in 0..<20 { w.append(.didChange, path: "/f\(i)") }
            try w.close()
        }
        let segment = dir + "/" + SegmentName(firstSeq: 1).fileName
        let h = try XCTUnwrap(FileHandle(forWritingAtPath: segment))
        h.seekToEndOfFile()
        h.write(Data([40, 0, 0, 0, 1, 2, 3, 4] + [UInt8](repeating: 0xAB, count: 40)))  // checksum wrong
        h.closeFile()
        let w = try EventLogWriter(directory: dir)
        XCTAssertEqual(w.recovery?.bytesTruncated, 48)
        XCTAssertEqual(w.recovery?.lastSeq, 20)
        try w.close()
        let all = try readAll(dir)
        XCTAssertEqual(all.count, 21)
        assertContinuous(all, from: 1)
    }

    func testASecondWriterOnTheSameDirectoryIsRefused() throws {
        let dir = makeLogDirectory(self)
        let w = try EventLogWriter(directory: dir)
        XCTAssertThrowsError(try EventLogWriter(directory: dir)) { e in
            XCTAssertEqual(e as? EventLogError, .locked(path: dir))
        }
        try w.close()
        // Once released, a new writer (a remount) may open it.
        let again = try EventLogWriter(directory: dir)
        try again.close()
    }

    /// The daemon opens its log through a descriptor it holds (`/proc/self/fd/N/log`): a refusal
    /// names the folder where it is now, never that path.
    func testARefusalOfALogOpenedThroughAHeldDescriptorNamesTheFolderWhereItIs() throws {
        let parent = makeTempDirectory(self)
        XCTAssertEqual(mkdir(parent + "/state", 0o700), 0)
        let fd = open(parent + "/state", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        XCTAssertGreaterThanOrEqual(fd, 0)
        defer { close(fd) }
        let w = try EventLogWriter(directory: "/proc/self/fd/\(fd)/log")
        XCTAssertEqual(rename(parent + "/state", parent + "/moved"), 0)
        let moved = try XCTUnwrap(realpath(parent + "/moved", nil).map { p in defer { free(p) }; return String(cString: p) })
        XCTAssertThrowsError(try EventLogWriter(directory: "/proc/self/fd/\(fd)/log")) { e in
            XCTAssertEqual(e as? EventLogError, .locked(path: moved + "/log"))
        }
        // A failed system call too: a log folder that is not there.
        XCTAssertThrowsError(try EventLogReader(directory: "/proc/self/fd/\(fd)/nothing")) { e in
            guard case let .system(_, path, code)? = e as? EventLogError else { return XCTFail("\(e)") }
            XCTAssertEqual(code, ENOENT)
            XCTAssertEqual(path, moved + "/nothing")
        }
        try w.close()
    }

    func testAForeignFileIsRejectedAndLeftUntouched() throws {
        let dir = makeLogDirectory(self)
        XCTAssertEqual(mkdir(dir, 0o755), 0)
        let path = dir + "/" + SegmentName(firstSeq: 1).fileName
        let junk = Data("this is not an event log, but it is long enough".utf8)
        XCTAssertTrue(FileManager.default.createFile(atPath: path, contents: junk))
        XCTAssertThrowsError(try EventLogWriter(directory: dir)) { e in
            guard case .notASegment = e as? EventLogError else { return XCTFail("\(e)") }
        }
        XCTAssertEqual(FileManager.default.contents(atPath: path), junk)
        XCTAssertThrowsError(try EventLogWriter(directory: dir, options: EventLogOptions(segmentBytes: 10)))
        XCTAssertThrowsError(try EventLogWriter(directory: ""))
    }

    func testSegmentsRotateAndReadBackAcrossThem() throws {
        let dir = makeLogDirectory(self)
        let w = try EventLogWriter(directory: dir, options: EventLogOptions(segmentBytes: 4096))
        for i in 0..<3000 { w.append(.subitemChanged, path: "/dir/item-\(i)") }
        try w.close()
        let bounds = try EventLogReader.bounds(directory: dir)
        XCTAssertGreaterThan(bounds.segments, 20)
        XCTAssertEqual(bounds.oldestSeq, 1)
        XCTAssertEqual(bounds.nextSeq, 3001)
        let all = try readAll(dir)
        XCTAssertEqual(all.count, 3000)
        assertContinuous(all, from: 1)
        XCTAssertEqual(all.last?.path, "/dir/item-2999")
        // Every segment starts with the record its name says.
        for name in try SegmentName.list(directory: dir) {
            XCTAssertEqual(try readAll(dir, from: .from(name.firstSeq)).first?.seq, name.firstSeq)
        }
    }

    func testConcurrentAppendersFromManyThreads() throws {
        let dir = makeLogDirectory(self)
        let w = try EventLogWriter(directory: dir, options: EventLogOptions(segmentBytes: 1 << 20))
        let threads = 8
        let perThread = 10_000
        let results = ResultBox(threads)
        DispatchQueue.concurrentPerform(iterations: threads) { t in
            var mine: [UInt64] = []
            mine.reserveCapacity(perThread)
            for i in 0..<perThread {
                mine.append(w.append(.granted, path: "/t\(t)/\(i)", actor: EventActor(pid: Int32(t), uid: 0)))
            }
            results.set(t, mine)
        }
        try w.flush()
        let all = results.all
        for seqs in all {
            XCTAssertEqual(seqs, seqs.sorted(), "one thread's seqs increase")
            XCTAssertEqual(Set(seqs).count, seqs.count)
        }
        XCTAssertEqual(Set(all.joined()), Set(1...UInt64(threads * perThread)), "none lost, none duplicated")
        let records = try readAll(dir)
        XCTAssertEqual(records.count, threads * perThread)
        assertContinuous(records, from: 1)
        // Each thread's records appear in the order it appended them.
        var nextIndex = [Int](repeating: 0, count: threads)
        for r in records {
            let t = Int(r.actor!.pid)
            XCTAssertEqual(r.path, "/t\(t)/\(nextIndex[t])")
            nextIndex[t] += 1
        }
        XCTAssertEqual(w.statistics.dropped, 0)
        try w.close()
    }

    func testQueueOverflowIsRecordedAsGapsNeverSilently() throws {
        let dir = makeLogDirectory(self)
        let w = try EventLogWriter(directory: dir, options: EventLogOptions(maxQueuedRecords: 2))
        DispatchQueue.concurrentPerform(iterations: 4) { t in
            for i in 0..<5000 { w.append(.didChange, path: "/\(t)/\(i)") }
        }
        try w.flush()
        let stats = w.statistics
        try w.close()
        XCTAssertEqual(stats.appended, 20_000)
        XCTAssertGreaterThan(stats.dropped, 0, "a 2-record queue cannot keep up with 4 threads")
        let records = try readAll(dir)
        assertContinuous(records, from: 1)
        XCTAssertEqual(records.last?.seq, 20_000)
        let gaps = records.filter { $0.kind == .gap }
        XCTAssertFalse(gaps.isEmpty)
        XCTAssertTrue(gaps.allSatisfy { $0.details.reason == GapReason.dropped.rawValue })
        XCTAssertEqual(gaps.reduce(0) { $0 + UInt64($1.gapRange!.count) }, stats.dropped)
        XCTAssertEqual(UInt64(records.count - gaps.count) + stats.dropped, 20_000)
    }

    /// A 256 KiB tmpfs for this test, unmounted when it ends (root only).
    private func smallTmpfs() throws -> String {
        guard getuid() == 0 else { throw XCTSkip("mounts a small tmpfs: needs root") }
        let root = makeTempDirectory(self)
        XCTAssertEqual(mount("tmpfs", root, "tmpfs", 0, "size=256k"), 0, String(cString: strerror(errno)))
        addTeardownBlock { umount2(root, Int32(MNT_DETACH)) }
        return root
    }

    /// Fills the file system with the file `filler` but for about `leave` bytes.
    private func fill(_ filler: String, leaving leave: Int) {
        let fd = open(filler, O_WRONLY | O_CREAT, 0o644)
        XCTAssertGreaterThanOrEqual(fd, 0)
        let block = [UInt8](repeating: 0x5a, count: 4096)
        while Glibc.write(fd, block, block.count) == block.count {}
        close(fd)
        var st = stat()
        XCTAssertEqual(stat(filler, &st), 0)
        XCTAssertEqual(truncate(filler, max(0, st.st_size - off_t(leave))), 0)
    }

    /// A full disk: the writer keeps what it could not write, cuts no frame in half, retries, and once
    /// there is room again every record is there, in order, none twice.
    /// A writer (16 KiB segments, so the failure meets rotations too) on a small tmpfs filled but
    /// for about 8 KiB, handed 2,000 records its flush could not write (the disk is full).
    private func writerOnAFullDisk() throws -> (writer: EventLogWriter, dir: String, filler: String) {
        let root = try smallTmpfs()
        let dir = root + "/log"
        let w = try EventLogWriter(directory: dir, options: EventLogOptions(segmentBytes: 16 * 1024))
        let filler = root + "/filler"
        fill(filler, leaving: 8192)
        for i in 0..<2000 { w.append(.didChange, path: "/docs/a-somewhat-long-name-\(i).txt") }
        XCTAssertThrowsError(try w.flush(), "the disk is full") { error in
            XCTAssertTrue("\(error)".contains("No space left"), "\(error)")
        }
        return (w, dir, filler)
    }

    func testAFullDiskLosesNothingOnceThereIsRoomAgain() throws {
        let (w, dir, filler) = try writerOnAFullDisk()
        XCTAssertGreaterThan(w.statistics.writeErrors, 0)
        XCTAssertLessThan(w.writtenSeq, 2000)

        XCTAssertEqual(unlink(filler), 0)
        try w.flush()   // the writer retries on its own
        XCTAssertGreaterThanOrEqual(w.writtenSeq, 2000)
        try w.close()
        let records = try readAll(dir)
        XCTAssertEqual(records.count, 2001, "the 2,000 records, then the logStalled record")
        assertContinuous(records, from: 1)
        XCTAssertEqual(records[1999].path, "/docs/a-somewhat-long-name-1999.txt")
        XCTAssertEqual(records.last?.kind, .logStalled)
    }

    /// Room made while a retry was already failing, then a flush: the flush is answered by a write
    /// begun after it, not by the failure of the attempt under way when it came (which it threw: a
    /// caller that freed the disk was told the disk was full). The CI of 93cf132 met this once.
    func testAFlushAfterRoomIsMadeIsNotAnsweredByTheRetryAlreadyFailing() throws {
        let (w, dir, filler) = try writerOnAFullDisk()
        // Hold the writer's next failed retry (every 100 ms) until room is made and a flush waits.
        let failed = DispatchSemaphore(value: 0), go = DispatchSemaphore(value: 0)
        let held = Atomic<Bool>(false)
        w.setAfterFailedWrite {
            guard !held.exchange(true, ordering: .relaxed) else { return }
            failed.signal()
            go.wait()
        }
        XCTAssertEqual(failed.wait(timeout: .now() + 5), .success, "the writer never retried")
        XCTAssertEqual(unlink(filler), 0)
        DispatchQueue.global().async {
            while !w.flushWaiting { usleep(1000) }
            go.signal()
        }
        try w.flush()
        XCTAssertGreaterThanOrEqual(w.writtenSeq, 2000)
        XCTAssertNil(w.stuckSince)
        w.setAfterFailedWrite(nil)
        try w.close()
        let records = try readAll(dir)
        XCTAssertEqual(records.count, 2001, "the 2,000 records, then the logStalled record")
        assertContinuous(records, from: 1)
    }

    /// A full disk, room again, and the log closed at once (no flush first): the records that waited
    /// are written on the way out, and so is the logStalled record saying they waited (the writer
    /// queued it after deciding it was done, when close() already refused appends).
    func testALogClosedAsItWritesAgainStillSaysItStalled() throws {
        let (w, dir, filler) = try writerOnAFullDisk()
        XCTAssertEqual(unlink(filler), 0)
        try w.close()
        let records = try readAll(dir)
        XCTAssertEqual(records.count, 2001, "the 2,000 records, then the logStalled record")
        assertContinuous(records, from: 1)
        XCTAssertEqual(records.last?.kind, .logStalled)
    }

    /// A full disk: the writer keeps the whole records the file took (readers may have shown them),
    /// cuts only the partial one, and says it is stuck (its notice, `stuckSince`, writer.lock); what a
    /// reader saw meanwhile is exactly what the files hold, so a SIGKILL then would take nothing back.
    /// Once there is room, the records that waited follow, then one `logStalled` record.
    func testAFullDiskNeverTakesBackARecordAReaderSawAndSaysItIsStuck() throws {
        let root = try smallTmpfs()
        let dir = root + "/log"
        let w = try EventLogWriter(directory: dir, options: EventLogOptions(segmentBytes: 64 * 1024))
        let notices = NoticeBox()
        w.setNoticeHandler { notices.add($0) }
        for i in 0..<50 { w.append(.didChange, path: "/before-\(i)") }
        try w.flush()
        // Leave less room than the next burst needs, not on a frame boundary.
        let filler = root + "/filler"
        fill(filler, leaving: 6000)

        let reader = try EventLogReader(directory: dir)
        var seen = try reader.read(limit: 100_000)
        XCTAssertEqual(seen.count, 50)
        for i in 0..<3000 { w.append(.didChange, path: "/docs/a-somewhat-long-name-for-a-record-\(i).txt") }
        XCTAssertThrowsError(try w.flush(), "the disk is full")
        XCTAssertNotNil(w.stuckSince)
        XCTAssertGreaterThan(w.writtenSeq, 50, "the file took part of the burst")
        XCTAssertLessThan(w.writtenSeq, 3050)
        // Retries (every 100 ms) change nothing a reader saw.
        usleep(300_000)
        seen += try reader.read(limit: 100_000)
        XCTAssertGreaterThan(seen.count, 50, "the reader saw nothing of the burst")
        XCTAssertEqual(seen.last?.seq, w.writtenSeq)
        // What a SIGKILL now would leave is the files: every record the reader showed, unchanged.
        let stored = try readAll(dir)
        XCTAssertEqual(stored, seen, "a record a reader showed is not (or no longer) in the log")
        // Stuck, and said so.
        let state = try XCTUnwrap(EventLogWriterState.read(directory: dir))
        XCTAssertEqual(state.phase, .stuck)
        XCTAssertTrue(state.error?.contains("No space left") ?? false, "\(state)")
        XCTAssertGreaterThan(state.waiting ?? 0, 0)
        XCTAssertTrue(state.summary.hasPrefix("STUCK since "), state.summary)
        guard case .stuck(_, let error, let waiting)? = notices.all.first else { return XCTFail("no stuck notice: \(notices.all)") }
        XCTAssertEqual(error.errno, ENOSPC)
        XCTAssertGreaterThan(waiting, 0)
        XCTAssertEqual(notices.all.count, 1, "one notice per stuck spell: \(notices.all)")

        XCTAssertEqual(unlink(filler), 0)
        try w.flush()
        XCTAssertNil(w.stuckSince)
        w.append(.didChange, path: "/after")
        try w.flush()
        guard case .writingAgain(_, _, let first)? = notices.all.last else { return XCTFail("no writingAgain notice: \(notices.all)") }
        XCTAssertEqual(first, seen.last!.seq + 1, "the first record that waited")
        XCTAssertEqual(EventLogWriterState.read(directory: dir)?.phase, .writing)
        try w.close()
        XCTAssertEqual(EventLogWriterState.read(directory: dir)?.phase, .closed)
        let all = try readAll(dir)
        assertContinuous(all, from: 1)
        XCTAssertEqual(Array(all.prefix(seen.count)), seen)
        XCTAssertEqual(all.filter { $0.path.hasPrefix("/docs/") }.count, 3000, "every record that waited is there, once")
        let stalled = try XCTUnwrap(all.first { $0.kind == .logStalled })
        XCTAssertGreaterThan(stalled.seq, 3050, "the logStalled record comes after the records that waited")
        XCTAssertEqual(stalled.details.errno, ENOSPC)
        XCTAssertTrue(stalled.details.message?.contains("none lost") ?? false, "\(stalled)")
        XCTAssertEqual(all.last?.path, "/after")
    }

    /// A writer that ended without closing (SIGKILL while stuck) left "stuck" in writer.lock: the next
    /// writer's first record says so, and what was lost.
    func testTheNextWriterSaysThePreviousEndedWithoutClosing() throws {
        let dir = makeLogDirectory(self)
        do {
            let w = try EventLogWriter(directory: dir)
            for i in 0..<10 { w.append(.didChange, path: "/f\(i)") }
            try w.close()
        }
        // What a killed writer leaves: its state as it was.
        let stuck = EventLogWriterState(phase: .stuck, pid: 4242, since: EventTime(millisecondsSinceEpoch: 1_790_000_000_000),
                                        error: "write: No space left on device (errno 28)", waiting: 17)
        let fd = open(dir + "/writer.lock", O_WRONLY)
        XCTAssertEqual(stuck.bytes.withUnsafeBytes { pwrite(fd, $0.baseAddress!, $0.count, 0) }, EventLogWriterState.fileSize)
        close(fd)
        XCTAssertEqual(EventLogWriterState.read(directory: dir), stuck)

        let w = try EventLogWriter(directory: dir)
        XCTAssertEqual(w.previousWriter, stuck)
        XCTAssertNil(w.recovery)
        try w.close()
        let all = try readAll(dir)
        assertContinuous(all, from: 1)
        XCTAssertEqual(all.count, 11)
        let r = all[10]
        XCTAssertEqual(r.kind, .logRecovered)
        XCTAssertEqual(r.details.reason, "uncleanShutdown")
        let message = r.details.message ?? ""
        XCTAssertTrue(message.contains("pid 4242") && message.contains("stuck since") && message.contains("17 record(s) waiting")
                      && message.contains("continues at seq 11"), message)
        // Closed cleanly this time: the next writer says nothing.
        let again = try EventLogWriter(directory: dir)
        XCTAssertNil(again.previousWriter)
        try again.close()
        XCTAssertEqual(try readAll(dir).count, 11)
    }

    func testSyncEveryBatchPolicyWrites() throws {
        let dir = makeLogDirectory(self)
        let w = try EventLogWriter(directory: dir, options: EventLogOptions(sync: .everyBatch, segmentBytes: 8192))
        for i in 0..<500 { w.append(.snapshotTaken, path: "/s\(i)", details: EventDetails(snapshotMethod: Recorded(.copy), bytes: UInt64(i))) }
        try w.close()
        let all = try readAll(dir)
        XCTAssertEqual(all.count, 500)
        XCTAssertEqual(all.last?.details.bytes, 499)
    }
}

/// Notices of a writer, in order.
final class NoticeBox: @unchecked Sendable {
    private let lock = NSLock()
    private var list: [EventLogWriter.Notice] = []
    func add(_ n: EventLogWriter.Notice) { lock.withLock { list.append(n) } }
    var all: [EventLogWriter.Notice] { lock.withLock { list } }
}

/// Per-thread results collected from `concurrentPerform`.
final class ResultBox: @unchecked Sendable {
    private let lock = NSLock()
    private var values: [[UInt64]]
    init(_ n: Int) { values = Array(repeating: [], count: n) }
    func set(_ i: Int, _ v: [UInt64]) { lock.withLock { values[i] = v } }
    var all: [[UInt64]] { lock.withLock { values } }
}
