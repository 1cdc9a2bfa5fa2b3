import Foundation
import XCTest

@testable import EventLog

/// Records appended in their stored form (`EncodedRecords`, the daemon's event recorder) are the same
/// records as those appended as `EventRecord`s.
final class EncodedRecordsTests: XCTestCase {
    func testEncodedRecordsReadBackAsTheSameRecordsInOrderWithDirectOnes() throws {
        let dir = makeLogDirectory(self)
        let writer = try EventLogWriter(directory: dir)
        let samples = sampleRecords()
        var batch = EncodedRecords()
        let t0 = EventTime(millisecondsSinceEpoch: 1_800_000_000_000)
        for (i, r) in samples.enumerated() {
            batch.append(r, at: EventTime(millisecondsSinceEpoch: t0.millisecondsSinceEpoch + Int64(i)))
        }
        // A record built field by field, as the recorder builds a granted.
        batch.fields.path(["dir", "naïve.txt"])
        batch.fields.intent(.write)
        batch.fields.option("forDeleting")
        batch.fields.actor(pid: 42, uid: 501, executable: "vim")
        batch.fields.requestID(7)
        batch.fields.latencyMicros(12)
        batch.finish(.granted, at: t0)  // earlier than the records before it
        XCTAssertEqual(batch.count, samples.count + 1)
        writer.append(.mount, path: "/")
        writer.append(encoded: &batch)
        XCTAssertTrue(batch.isEmpty, "the batch is left empty")
        XCTAssertEqual(batch.fields.count, 0)
        writer.append(.unmount, path: "/")
        try writer.flush()
        try writer.close()

        let records = try readAll(dir)
        assertContinuous(records, from: 1)
        XCTAssertEqual(records.count, samples.count + 3)
        XCTAssertEqual(records.first?.kind, .mount)
        XCTAssertEqual(records.last?.kind, .unmount)
        for (i, sample) in samples.enumerated() {
            var expected = sample
            expected.seq = UInt64(i + 2)
            expected.time = EventTime(millisecondsSinceEpoch: t0.millisecondsSinceEpoch + Int64(i))
            XCTAssertEqual(records[i + 1], expected, "\(sample.kind)")
        }
        let built = records[samples.count + 1]
        XCTAssertEqual(built, EventRecord(
            seq: UInt64(samples.count + 2), time: records[samples.count].time, kind: .granted, path: "/dir/naïve.txt",
            actor: EventActor(pid: 42, uid: 501, executable: "vim"),
            details: EventDetails(intent: .write, options: ["forDeleting"], requestID: 7, latencyMicros: 12)))
        XCTAssertEqual(records.map(\.time), records.map(\.time).sorted(), "times never go backwards")
    }

    /// A path written from its components is byte for byte the path written as a string, also for
    /// the root, non-ASCII names, and a path past the string limit (cut at a character boundary).
    func testPathFromComponentsMatchesThePathAsAString() {
        let long = Array(repeating: "é" + String(repeating: "x", count: 200), count: 100)
        for components in [[], ["a"], ["dir", "sub", "файл.txt"], long] {
            var fields = RecordFields()
            fields.path(components)
            fields.oldPath(components)
            var expected: [UInt8] = []
            let string = "/" + components.joined(separator: "/")
            RecordCodec.appendString(.path, string, to: &expected)
            RecordCodec.appendString(.oldPath, string, to: &expected)
            XCTAssertEqual(fields.bytes, expected, "\(components.prefix(3))")
        }
    }

    /// Copied fields keep their meaning: a request's items encoded once and copied into records.
    func testCopiedFieldsDecodeLikeTheOriginals() throws {
        var items = RecordFields()
        items.path(["a"])
        items.intent(.read)
        let firstEnd = items.count
        items.path(["b"])
        items.intent(.write)
        items.option("forMoving")
        var batch = EncodedRecords()
        batch.fields.append(items, firstEnd..<items.count)
        batch.fields.latencyMicros(5)
        batch.finish(.released, at: EventTime(millisecondsSinceEpoch: 0))
        var frames: [UInt8] = []
        batch.forEach { kind, time, fields in
            RecordCodec.appendFrame(kind: kind, seq: 9, time: time, fields: fields, to: &frames)
        }
        let decoded = try frames.withUnsafeBytes {
            try RecordCodec.decode(UnsafeRawBufferPointer(rebasing: $0[RecordCodec.frameHeaderSize...]))
        }
        XCTAssertEqual(decoded, EventRecord(
            seq: 9, kind: .released, path: "/b", details: EventDetails(intent: .write, options: ["forMoving"], latencyMicros: 5)))
    }

    /// A frame is byte for byte the stored form docs/event-log.md describes (length and CRC-32 of
    /// the payload, little-endian; version, kind code, seq and time, little-endian; the fields), for
    /// a record encoded whole and for one whose fields were encoded before (`FrameQueue`), with seqs
    /// and times whose bytes all differ and a time before 1970.
    func testFramesAreTheDocumentedBytes() {
        let times: [Int64] = [1_800_000_000_123, -1, 0x0102_0304_0506_0708]
        let seqs: [UInt64] = [1, 0x1122_3344_5566_7788, UInt64.max]
        for (i, sample) in sampleRecords().enumerated() {
            var r = sample
            r.seq = seqs[i % seqs.count]
            r.time = EventTime(millisecondsSinceEpoch: times[i % times.count])
            var fields: [UInt8] = []
            RecordCodec.appendFields(of: r, to: &fields)
            var payload: [UInt8] = [1, r.kind.code]
            payload += withUnsafeBytes(of: r.seq.littleEndian, Array.init)
            payload += withUnsafeBytes(of: r.time.millisecondsSinceEpoch.littleEndian, Array.init)
            payload += fields
            var expected = withUnsafeBytes(of: UInt32(payload.count).littleEndian, Array.init)
            expected += withUnsafeBytes(of: CRC32.checksum(payload).littleEndian, Array.init)
            expected += payload

            var whole: [UInt8] = [7]  // a frame appended after other bytes
            RecordCodec.appendFrame(r, to: &whole)
            XCTAssertEqual(Array(whole.dropFirst()), expected, "\(r.kind)")
            var queue = FrameQueue()
            fields.withUnsafeBytes { queue.append(kind: r.kind, seq: r.seq, time: r.time, fields: $0) }
            XCTAssertEqual(queue.bytes, expected, "\(r.kind)")
        }
    }

    /// Past the queue's bound, encoded records are dropped and counted like direct ones, and a gap
    /// record stands in for them.
    func testEncodedRecordsPastTheQueueBoundBecomeAGap() throws {
        let dir = makeLogDirectory(self)
        let writer = try EventLogWriter(directory: dir, options: EventLogOptions(maxQueuedRecords: 10, coalescing: .milliseconds(100)))
        var batch = EncodedRecords()
        for i in 0..<1000 {
            batch.fields.path(["f\(i)"])
            batch.finish(.didChange, at: EventTime.now())
        }
        writer.append(encoded: &batch)
        try writer.flush()
        let stats = writer.statistics
        try writer.close()
        XCTAssertEqual(stats.appended, 1000)
        XCTAssertGreaterThan(stats.dropped, 0)
        let records = try readAll(dir)
        assertContinuous(records, from: 1)
        XCTAssertEqual(records.last?.seq, 1000)
        let gaps = records.filter { $0.kind == .gap }
        XCTAssertEqual(gaps.reduce(0) { $0 + UInt64($1.gapRange!.count) }, stats.dropped)
        XCTAssertEqual(records.first?.path, "/f0")
    }
}
