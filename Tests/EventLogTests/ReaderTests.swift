import Foundation
import XCTest

@testable import EventLog

final class ReaderTests: XCTestCase {
    func testPausedReaderCatchesUpOn100kEventsWithNoneMissing() throws {
        let dir = makeLogDirectory(self)
        let w = try EventLogWriter(directory: dir, options: EventLogOptions(segmentBytes: 1 << 20))
        let reader = try EventLogReader(directory: dir)
        XCTAssertNil(try reader.next(), "empty log")
        w.append(.mount, path: "/")
        try w.flush()
        XCTAssertEqual(try reader.next()?.kind, .mount)
        // The reader pauses while 100,000 events are written (across several segments).
        for i in 0..<100_000 { w.append(.didChange, path: "/doc-\(i)") }
        try w.flush()
        XCTAssertGreaterThan(try EventLogReader.bounds(directory: dir).segments, 2)
        var expected: UInt64 = 2
        while let r = try reader.next() {
            XCTAssertEqual(r.seq, expected)
            if r.seq != expected { break }
            XCTAssertEqual(r.path, "/doc-\(expected - 2)")
            expected += 1
        }
        XCTAssertEqual(expected, 100_002, "all 100,000 caught up, in order")
        XCTAssertEqual(reader.cursor, 100_001)
        try w.close()
    }

    func testPositionsAndCursorResume() throws {
        let dir = makeLogDirectory(self)
        let w = try EventLogWriter(directory: dir, options: EventLogOptions(segmentBytes: 4096))
        for i in 1...500 { w.append(.released, path: "/r\(i)") }
        try w.flush()
        XCTAssertEqual(try readAll(dir, from: .from(250)).first?.seq, 250)
        XCTAssertEqual(try readAll(dir, from: .after(250)).first?.seq, 251)
        XCTAssertEqual(try readAll(dir, from: .from(250)).count, 251)
        XCTAssertEqual(try readAll(dir, from: .after(500)).count, 0)
        let tail = try EventLogReader(directory: dir, position: .end)
        XCTAssertEqual(tail.cursor, 500)
        XCTAssertNil(try tail.next())
        w.append(.granted, path: "/new")
        try w.flush()
        XCTAssertEqual(try tail.next()?.seq, 501)

        // Resume a filtered reader from its cursor: nothing read twice, nothing skipped.
        let filter = try EventFilter(kindNames: [], pids: [], pathPatterns: ["/r1*"])
        let first = try EventLogReader(directory: dir, filter: filter)
        let part1 = try first.read(limit: 20)
        let resumed = try EventLogReader(directory: dir, position: .after(first.cursor), filter: filter)
        let part2 = try resumed.read(limit: 1000)
        let whole = try readAll(dir, filter: filter)
        XCTAssertEqual(part1 + part2, whole)
        XCTAssertEqual(whole.count, 111)  // r1, r10-r19, r100-r199
        try w.close()
    }

    func testFilteredReadsByKindPidAndPath() throws {
        let dir = makeLogDirectory(self)
        let w = try EventLogWriter(directory: dir)
        for i in 0..<300 {
            let kind: EventKind = [.intentRequested, .granted, .released][i % 3]
            w.append(kind, path: i % 2 == 0 ? "/docs/a\(i).txt" : "/src/b\(i).swift",
                     actor: EventActor(pid: Int32(100 + i % 5), uid: 1000))
        }
        try w.close()
        let granted = try readAll(dir, filter: try EventFilter(kindNames: ["granted"], pids: [], pathPatterns: []))
        XCTAssertEqual(granted.count, 100)
        XCTAssertTrue(granted.allSatisfy { $0.kind == .granted })
        let byPid = try readAll(dir, filter: try EventFilter(kindNames: [], pids: [102], pathPatterns: []))
        XCTAssertEqual(byPid.count, 60)
        let txt = try readAll(dir, filter: try EventFilter(kindNames: [], pids: [], pathPatterns: ["/docs/*.txt"]))
        XCTAssertEqual(txt.count, 150)
        let all3 = try readAll(dir, filter: try EventFilter(kindNames: ["released"], pids: [100, 101], pathPatterns: ["**/*.swift"]))
        XCTAssertEqual(all3.map(\.seq), (0..<300).filter { $0 % 3 == 2 && $0 % 2 == 1 && $0 % 5 < 2 }.map { UInt64($0 + 1) })
    }

    /// The watcher is another process in real use, so it only shares the files with the writer:
    /// here a reader following in its own thread sees records from two successive writer instances.
    func testFollowSeesRecordsFromAnotherWriterInstance() throws {
        let dir = makeLogDirectory(self)
        let first = try EventLogWriter(directory: dir, options: EventLogOptions(segmentBytes: 4096))
        first.append(.mount, path: "/")
        try first.flush()

        let seen = Seen()
        let stop = StopFlag()
        let ready = DispatchSemaphore(value: 0)
        let done = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            defer { done.signal() }
            do {
                let reader = try EventLogReader(directory: dir, position: .end)
                ready.signal()
                try reader.follow(checkInterval: .milliseconds(50), shouldContinue: { !stop.isSet }) { r in
                    seen.add(r)
                }
            } catch {
                seen.fail("\(error)")
                ready.signal()
            }
        }
        ready.wait()
        let t0 = Date()
        first.append(.granted, path: "/live-1")
        XCTAssertTrue(seen.wait(for: 1, timeout: 5), "follow saw the live record")
        let latency = Date().timeIntervalSince(t0)
        XCTAssertLessThan(latency, 1.0)
        // Enough to rotate segments while following.
        for i in 0..<300 { first.append(.didChange, path: "/burst-\(i)") }
        try first.close()

        let second = try EventLogWriter(directory: dir, options: EventLogOptions(segmentBytes: 4096))
        second.append(.mount, path: "/")
        second.append(.granted, path: "/live-2")
        try second.flush()
        XCTAssertTrue(seen.wait(for: 303, timeout: 10))
        stop.set()
        done.wait()
        XCTAssertNil(seen.failure)
        let records = seen.records
        XCTAssertEqual(records.first?.path, "/live-1")
        XCTAssertEqual(records.last?.path, "/live-2")
        assertContinuous(records, from: 2)
        try second.close()
    }

    func testRetentionBySizeKeepsSeqsContinuousWithGapRecords() throws {
        let dir = makeLogDirectory(self)
        let w = try EventLogWriter(
            directory: dir, options: EventLogOptions(segmentBytes: 4096, maxTotalBytes: 16 * 1024))
        for i in 0..<2000 { w.append(.didChange, path: "/docs/item-\(i)") }
        try w.flush()
        try w.enforceRetention()
        try w.flush()
        let bounds = try EventLogReader.bounds(directory: dir)
        let oldest = try XCTUnwrap(bounds.oldestSeq)
        XCTAssertGreaterThan(oldest, 1)
        XCTAssertLessThanOrEqual(bounds.bytes, 16 * 1024 + 4096)
        XCTAssertGreaterThan(w.statistics.segmentsDeleted, 0)

        // From the start: a gap stands in for everything deleted, then the rest, continuous.
        let all = try readAll(dir)
        let gap = try XCTUnwrap(all.first)
        XCTAssertEqual(gap.kind, .gap)
        XCTAssertEqual(gap.details.reason, GapReason.retention.rawValue)
        XCTAssertEqual(gap.gapRange, 1...(oldest - 1))
        XCTAssertEqual(gap.seq, oldest - 1)
        XCTAssertEqual(all[1].seq, oldest)
        assertContinuous(all, from: 1)
        XCTAssertEqual(all.last?.seq, w.lastAssignedSeq)

        // A cursor older than retention is told so.
        let resumed = try readAll(dir, from: .after(10))
        XCTAssertEqual(resumed.first?.gapRange, 11...(oldest - 1))
        XCTAssertTrue(resumed.first?.details.message?.contains("cursor older than retention") ?? false)
        // A filtered reader still sees the gap.
        let filtered = try readAll(dir, filter: try EventFilter(kindNames: ["granted"], pids: [], pathPatterns: []))
        XCTAssertEqual(filtered.map(\.kind), [.gap])

        // The writer logged what it deleted, range after range. (Retention runs after each rotation
        // while the records are written, so the first notes may be in segments deleted since.)
        let notes = all.filter { $0.kind == .retention }
        XCTAssertFalse(notes.isEmpty)
        XCTAssertGreaterThanOrEqual(notes.first?.details.gapFrom ?? 0, 1)
        for (earlier, later) in zip(notes, notes.dropFirst()) {
            XCTAssertEqual(later.details.gapFrom, (earlier.details.gapTo ?? 0) + 1)
        }
        XCTAssertEqual(notes.last?.details.gapTo, oldest - 1)
        try w.close()
    }

    func testRetentionByAge() throws {
        let dir = makeLogDirectory(self)
        let w = try EventLogWriter(
            directory: dir,
            options: EventLogOptions(segmentBytes: 4096, maxAge: .milliseconds(200), retentionCheckInterval: .milliseconds(50)))
        for i in 0..<500 { w.append(.didDelete, path: "/old-\(i)") }
        try w.flush()
        let before = try EventLogReader.bounds(directory: dir).segments
        XCTAssertGreaterThan(before, 3)
        usleep(300_000)
        w.append(.mount, path: "/fresh")
        try w.flush()
        // The periodic check runs without being asked.
        let deadline = Date().addingTimeInterval(5)
        while try EventLogReader.bounds(directory: dir).segments > 1 && Date() < deadline { usleep(20_000) }
        XCTAssertEqual(try EventLogReader.bounds(directory: dir).segments, 1, "only the active segment is left")
        try w.flush()
        let all = try readAll(dir)
        XCTAssertEqual(all.first?.kind, .gap)
        assertContinuous(all, from: 1)
        XCTAssertTrue(all.contains { $0.path == "/fresh" })
        try w.close()
    }

    func testReaderKeepsGoingWhileRetentionDeletesUnderIt() throws {
        let dir = makeLogDirectory(self)
        let w = try EventLogWriter(
            directory: dir, options: EventLogOptions(segmentBytes: 4096, maxTotalBytes: 12 * 1024))
        for i in 0..<100 { w.append(.didChange, path: "/a\(i)") }
        try w.flush()
        let reader = try EventLogReader(directory: dir)
        var got = try reader.read(limit: 10)
        // While the reader is paused mid-segment, much more is written and old segments go.
        for i in 0..<3000 { w.append(.didChange, path: "/b\(i)") }
        try w.flush()
        try w.enforceRetention()
        try w.flush()
        while let r = try reader.next() { got.append(r) }
        assertContinuous(got, from: 1)
        XCTAssertEqual(got.last?.seq, w.lastAssignedSeq)
        XCTAssertTrue(got.contains { $0.kind == .gap && $0.details.reason == GapReason.retention.rawValue })
        try w.close()
    }

    func testDamagedMiddleSegmentBecomesAMissingGap() throws {
        let dir = makeLogDirectory(self)
        let w = try EventLogWriter(directory: dir, options: EventLogOptions(segmentBytes: 4096))
        for i in 0..<1000 { w.append(.didChange, path: "/x\(i)") }
        try w.close()
        let names = try SegmentName.list(directory: dir)
        XCTAssertGreaterThan(names.count, 3)
        try damageTheMiddle(of: names[1], in: dir)
        let all = try readAll(dir)
        assertContinuous(all, from: 1)
        XCTAssertEqual(all.last?.seq, 1000)
        let gaps = all.filter { $0.kind == .gap }
        XCTAssertEqual(gaps.count, 1)
        XCTAssertEqual(gaps[0].details.reason, GapReason.missing.rawValue)
        XCTAssertEqual(gaps[0].gapRange?.upperBound, names[2].firstSeq - 1)
    }

    func testReaderRejectsMissingOrForeignDirectories() throws {
        XCTAssertThrowsError(try EventLogReader(directory: "/nonexistent/log"))
        XCTAssertThrowsError(try EventLogReader(directory: ""))
        let dir = makeLogDirectory(self)
        XCTAssertEqual(mkdir(dir, 0o755), 0)
        let junk = dir + "/" + SegmentName(firstSeq: 1).fileName
        XCTAssertTrue(FileManager.default.createFile(atPath: junk, contents: Data(repeating: 7, count: 64)))
        let reader = try EventLogReader(directory: dir)
        XCTAssertThrowsError(try reader.next()) { e in
            guard case .notASegment = e as? EventLogError else { return XCTFail("\(e)") }
        }
    }
}

final class Seen: @unchecked Sendable {
    private let cond = NSCondition()
    private var list: [EventRecord] = []
    private(set) var failure: String?
    func add(_ r: EventRecord) { cond.lock(); list.append(r); cond.broadcast(); cond.unlock() }
    func fail(_ s: String) { cond.lock(); failure = s; cond.broadcast(); cond.unlock() }
    var records: [EventRecord] { cond.lock(); defer { cond.unlock() }; return list }
    func wait(for count: Int, timeout: TimeInterval) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        cond.lock()
        defer { cond.unlock() }
        while list.count < count && failure == nil {
            if !cond.wait(until: deadline) { return false }
        }
        return list.count >= count
    }
}

final class StopFlag: @unchecked Sendable {
    private let lock = NSLock()
    private var value = false
    func set() { lock.withLock { value = true } }
    var isSet: Bool { lock.withLock { value } }
}
