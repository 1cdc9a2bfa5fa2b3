import Foundation
import XCTest

@testable import EventLog

/// The writer's in-memory index (`EventLogIndex`): a reader given it reads exactly what a reader of
/// the files alone reads, from any position, but seeks there, reading at most one index stretch of
/// frames, and takes the bounds without a scan. Work is counted in frames read, not timed.
final class SeekIndexTests: XCTestCase {
    /// Frames in one stretch of the index at most, for these tests' records (each frame is longer
    /// than 40 bytes), plus the one that crosses into the next.
    let stretchFrames = UInt64(EventLogIndex.stride / 40 + 2)

    private func path(_ i: Int) -> String { "/docs/seek/record-\(i).txt" }

    /// A log of `count` records in 1 MiB segments, written by a writer that is still open.
    private func writeLog(_ dir: String, count: Int, segmentBytes: Int = 1 << 20) throws -> EventLogWriter {
        let w = try EventLogWriter(directory: dir, options: EventLogOptions(segmentBytes: segmentBytes))
        for i in 0..<count { w.append(.didChange, path: path(i)) }
        try w.flush()
        return w
    }

    /// The first `count` records from `position` and the frames the reader read to get them.
    private func first(
        _ count: Int, of dir: String, from position: EventLogPosition, index: EventLogIndex?
    ) throws -> (records: [EventRecord], frames: UInt64) {
        let reader = try EventLogReader(directory: dir, position: position, index: index)
        let records = try reader.read(limit: count)
        return (records, reader.framesRead)
    }

    /// What a reader shows, reduced to what must be the same: seq, kind, path, gap range.
    private func shape(_ records: [EventRecord]) -> [String] {
        records.map { "\($0.seq) \($0.kind) \($0.path) \($0.gapRange.map { "\($0)" } ?? "")" }
    }

    func testAReaderSeeksToAnySeqThroughTheWritersIndex() throws {
        let dir = makeLogDirectory(self)
        let w = try writeLog(dir, count: 40_000)
        defer { try? w.close() }
        let names = try SegmentName.list(directory: dir)
        XCTAssertGreaterThanOrEqual(names.count, 3)

        // The bounds, in memory, are those a scan of the files finds.
        let scanned = try EventLogReader.bounds(directory: dir)
        XCTAssertEqual(w.index.bounds.oldestSeq, scanned.oldestSeq)
        XCTAssertEqual(w.index.bounds.nextSeq, scanned.nextSeq)
        XCTAssertEqual(w.index.segmentNames, names)

        let positions: [UInt64] = [1, 2, 12_345, names[1].firstSeq - 1, names[1].firstSeq, names[1].firstSeq + 9_000, 39_999, 40_000, 40_001, 90_000]
        for n in positions {
            let plain = try first(20, of: dir, from: .from(n), index: nil)
            let indexed = try first(20, of: dir, from: .from(n), index: w.index)
            XCTAssertEqual(shape(indexed.records), shape(plain.records), "from \(n)")
            if n <= 40_000 { XCTAssertEqual(indexed.records.first?.seq, n) }
            XCTAssertLessThanOrEqual(indexed.frames, stretchFrames + 20, "from \(n): read \(indexed.frames) frames")
        }
        // Without the index, the reader scans its segment from the start to get there.
        let deep = try first(1, of: dir, from: .from(names[1].firstSeq + 9_000), index: nil)
        XCTAssertGreaterThan(deep.frames, 9_000)

        // At the end: nothing yet, then what is written next, reading one stretch at most.
        let tail = try EventLogReader(directory: dir, position: .end, index: w.index)
        XCTAssertNil(try tail.next())
        w.append(.didDelete, path: "/after")
        try w.flush()
        XCTAssertEqual(try tail.next()?.path, "/after")
        XCTAssertLessThanOrEqual(tail.framesRead, stretchFrames + 1)
        XCTAssertEqual(w.index.bounds.nextSeq, 40_002)
    }

    func testRotationAndRetentionWhileReadingThroughTheIndex() throws {
        let dir = makeLogDirectory(self)
        let w = try EventLogWriter(
            directory: dir, options: EventLogOptions(segmentBytes: 256 * 1024, maxTotalBytes: 1 << 20))
        defer { try? w.close() }
        let indexed = try EventLogReader(directory: dir, index: w.index)
        let plain = try EventLogReader(directory: dir)
        var seenIndexed: [EventRecord] = [], seenPlain: [EventRecord] = []
        // Rounds of writing while both read, part of the way each time: segments rotate under
        // them and retention deletes the oldest.
        for round in 0..<12 {
            for i in 0..<5_000 { w.append(.didChange, path: path(round * 5_000 + i)) }
            try w.flush()
            try w.enforceRetention()
            try w.flush()
            seenIndexed += try indexed.read(limit: 3_000)
            seenPlain += try plain.read(limit: 3_000)
        }
        while let r = try indexed.next() { seenIndexed.append(r) }
        while let r = try plain.next() { seenPlain.append(r) }
        XCTAssertEqual(shape(seenIndexed), shape(seenPlain))
        assertContinuous(seenIndexed, from: 1)
        XCTAssertEqual(seenIndexed.last?.seq, w.lastAssignedSeq)
        XCTAssertTrue(seenIndexed.contains { $0.kind == .gap && $0.details.reason == GapReason.retention.rawValue })

        // The index follows rotation and retention: its segments and bounds are the files'.
        let names = try SegmentName.list(directory: dir)
        XCTAssertEqual(w.index.segmentNames, names)
        let scanned = try EventLogReader.bounds(directory: dir)
        XCTAssertEqual(w.index.bounds.oldestSeq, scanned.oldestSeq)
        XCTAssertEqual(w.index.bounds.nextSeq, scanned.nextSeq)

        // From any position, deleted ones included, the same records as the files alone give.
        let oldest = try XCTUnwrap(scanned.oldestSeq)
        XCTAssertGreaterThan(oldest, 1)
        for n in [1, oldest - 1, oldest, oldest + 1, names[names.count - 1].firstSeq + 100, scanned.nextSeq - 1] {
            let a = try first(30, of: dir, from: .from(n), index: w.index)
            let b = try first(30, of: dir, from: .from(n), index: nil)
            XCTAssertEqual(shape(a.records), shape(b.records), "from \(n)")
            XCTAssertLessThanOrEqual(a.frames, stretchFrames + 30, "from \(n)")
        }
        let resumed = try first(1, of: dir, from: .after(10), index: w.index).records
        XCTAssertEqual(resumed.first?.gapRange, 11...(oldest - 1))
    }

    func testAPreviousWritersSegmentsAreIndexedOnceByTheFirstReader() throws {
        let dir = makeLogDirectory(self)
        try writeLog(dir, count: 40_000).close()
        let names = try SegmentName.list(directory: dir)
        let w = try EventLogWriter(directory: dir, options: EventLogOptions(segmentBytes: 1 << 20))
        defer { try? w.close() }
        // The new writer knows every segment, and where records are in the newest one (its scan at open).
        XCTAssertEqual(w.index.segmentNames, names)
        XCTAssertEqual(w.index.bounds.nextSeq, 40_001)
        let atOpen = w.index.entryCount

        // A segment the previous writer wrote is scanned by the first reader going through it...
        let n = names[1].firstSeq - 50
        let firstReader = try first(10, of: dir, from: .from(n), index: w.index)
        XCTAssertEqual(firstReader.records.first?.seq, n)
        XCTAssertGreaterThan(firstReader.frames, 5_000)
        XCTAssertGreaterThan(w.index.entryCount, atOpen)
        // ...and every later reader seeks in it.
        for m in [n - 7_000, n - 3, n + 20] {
            let later = try first(10, of: dir, from: .from(m), index: w.index)
            XCTAssertEqual(shape(later.records), shape(try first(10, of: dir, from: .from(m), index: nil).records))
            XCTAssertLessThanOrEqual(later.frames, stretchFrames + 10, "from \(m)")
        }
    }

    func testDamagedFramesReadTheSameThroughTheIndex() throws {
        let dir = makeLogDirectory(self)
        try writeLog(dir, count: 40_000).close()
        let names = try SegmentName.list(directory: dir)
        XCTAssertGreaterThanOrEqual(names.count, 3)
        try damageTheMiddle(of: names[1], in: dir)
        let w = try EventLogWriter(directory: dir, options: EventLogOptions(segmentBytes: 1 << 20))
        defer { try? w.close() }

        let plainAll = try readAll(dir)
        let gaps = plainAll.filter { $0.kind == .gap }
        XCTAssertEqual(gaps.count, 1)
        let missing = try XCTUnwrap(gaps.first?.gapRange)
        // Before any reader went through it, and after one did (the index then knows the segment
        // up to the damage), every position reads as from the files alone.
        for round in 0..<2 {
            let reader = try EventLogReader(directory: dir, index: w.index)
            var all: [EventRecord] = []
            while let r = try reader.next() { all.append(r) }
            XCTAssertEqual(shape(all), shape(plainAll), "round \(round)")
            for n in [missing.lowerBound - 5, missing.lowerBound, missing.lowerBound + 100, missing.upperBound, missing.upperBound + 1] {
                let a = try first(8, of: dir, from: .from(n), index: w.index)
                let b = try first(8, of: dir, from: .from(n), index: nil)
                XCTAssertEqual(shape(a.records), shape(b.records), "round \(round), from \(n)")
            }
        }
    }

    func testAFrameBudgetBoundsOneCallAndTheReaderGoesOnFromThere() throws {
        let dir = makeLogDirectory(self)
        try writeLog(dir, count: 20_000).close()
        let reader = try EventLogReader(directory: dir, position: .from(15_000))
        var calls = 0
        var record: EventRecord?
        while record == nil && calls < 100 {
            calls += 1
            let before = reader.framesRead
            reader.frameBudget = 1_000
            record = try reader.next()
            XCTAssertLessThanOrEqual(reader.framesRead - before, 1_000)
        }
        XCTAssertEqual(record?.seq, 15_000)
        XCTAssertGreaterThan(calls, 10, "15,000 frames to pass, 1,000 a call")
        reader.frameBudget = nil
        XCTAssertEqual(try reader.read(limit: 5).map(\.seq), [15_001, 15_002, 15_003, 15_004, 15_005])
    }
}
