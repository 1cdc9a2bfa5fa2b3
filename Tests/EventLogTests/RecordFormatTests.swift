import Foundation
import XCTest

@testable import EventLog

final class RecordFormatTests: XCTestCase {
    func testEveryKindRoundTripsThroughFormatterJSON() throws {
        let formatter = EventFormatter(style: .json)
        for record in sampleRecords() {
            let line = formatter.format(record)
            XCTAssertFalse(line.contains("\n"), "one object per line")
            let decoded = try JSONDecoder().decode(EventRecord.self, from: Data(line.utf8))
            XCTAssertEqual(decoded, record, "\(record.kind)")
        }
    }

    func testEveryKindRoundTripsThroughCodable() throws {
        let encoder = JSONEncoder()
        for record in sampleRecords() {
            let data = try encoder.encode(record)
            XCTAssertEqual(try JSONDecoder().decode(EventRecord.self, from: data), record)
        }
    }

    /// `RecordFrames` (records passed on over the control socket): every kind round-trips, and a
    /// cut or altered frame is refused, never misread.
    func testEveryKindRoundTripsThroughRecordFrames() throws {
        let records = sampleRecords()
        let frames = RecordFrames.encode(records)
        XCTAssertEqual(try RecordFrames.decode(frames), records)
        XCTAssertEqual(try RecordFrames.decode([]), [])
        XCTAssertThrowsError(try RecordFrames.decode(Array(frames.dropLast())))
        var altered = frames
        altered[altered.count - 1] ^= 0x01
        XCTAssertThrowsError(try RecordFrames.decode(altered))
    }

    func testMinimalRecordOmitsAbsentFieldsAndKeepsKeyOrder() {
        let r = EventRecord(seq: 5, time: EventTime(millisecondsSinceEpoch: 0), kind: .granted, path: "/a")
        XCTAssertEqual(EventFormatter(style: .json).format(r),
                       #"{"seq":5,"time":"1970-01-01T00:00:00.000Z","kind":"granted","path":"/a"}"#)
        var full = r
        full.oldPath = "/b"
        full.documentID = "d"
        full.actor = EventActor(pid: 1, uid: 2, executable: "x")
        full.details.latencyMicros = 3
        XCTAssertEqual(EventFormatter(style: .json).format(full),
                       #"{"seq":5,"time":"1970-01-01T00:00:00.000Z","kind":"granted","path":"/a","oldPath":"/b","documentID":"d","actor":{"pid":1,"uid":2,"executable":"x"},"details":{"latencyMicros":3}}"#)
    }

    func testBinaryCodecRoundTripsEveryKind() throws {
        for record in sampleRecords() {
            var frame: [UInt8] = []
            RecordCodec.appendFrame(record, to: &frame)
            let length = Int(frame[0]) | Int(frame[1]) << 8 | Int(frame[2]) << 16 | Int(frame[3]) << 24
            XCTAssertEqual(length, frame.count - RecordCodec.frameHeaderSize)
            let decoded = try frame.withUnsafeBytes {
                try RecordCodec.decode(UnsafeRawBufferPointer(rebasing: $0[RecordCodec.frameHeaderSize...]))
            }
            XCTAssertEqual(decoded, record)
        }
    }

    /// The standard CRC-32 check values, and a bit-by-bit reference for every length and alignment
    /// the 8-byte loop and its tail can meet.
    /// The snapshot method and the resolution are Vocabulary's enums, but a record holds them
    /// open: a value a newer writer logged (unknown to this build) survives the binary codec, the
    /// JSON line and Codable, and a known one reads back as the enum's case.
    func testSnapshotMethodAndResolutionStayOpenEnded() throws {
        var r = EventRecord(seq: 9, time: EventTime(millisecondsSinceEpoch: 0), kind: .conflictResolved, path: "/d")
        r.details.snapshotMethod = "dedupe"
        r.details.resolution = "rebase"
        var frame: [UInt8] = []
        RecordCodec.appendFrame(r, to: &frame)
        let binary = try frame.withUnsafeBytes {
            try RecordCodec.decode(UnsafeRawBufferPointer(rebasing: $0[RecordCodec.frameHeaderSize...]))
        }
        let line = EventFormatter(style: .json).format(r)
        let json = try JSONDecoder().decode(EventRecord.self, from: Data(line.utf8))
        let codable = try JSONDecoder().decode(EventRecord.self, from: JSONEncoder().encode(r))
        for decoded in [binary, json, codable] {
            XCTAssertEqual(decoded.details.snapshotMethod?.rawValue, "dedupe")
            XCTAssertEqual(decoded.details.resolution?.rawValue, "rebase")
            XCTAssertNil(decoded.details.resolution?.known)
        }
        XCTAssertTrue(line.contains(#""snapshotMethod":"dedupe""#) && line.contains(#""resolution":"rebase""#), line)
        XCTAssertEqual(Recorded(Resolution.keepBoth).rawValue, "keepBoth")
        XCTAssertEqual(Recorded<SnapshotMethod>(rawValue: "reflink").known, .reflink)
    }

    /// The IEEE CRC-32, a bit at a time: what the tables and the CPU's fold must agree with.
    private func reference(_ bytes: ArraySlice<UInt8>) -> UInt32 {
        var crc: UInt32 = 0xFFFF_FFFF
        for b in bytes {
            crc ^= UInt32(b)
            for _ in 0..<8 { crc = crc & 1 != 0 ? (crc >> 1) ^ 0xEDB8_8320 : crc >> 1 }
        }
        return crc ^ 0xFFFF_FFFF
    }

    func testCRC32MatchesTheStandardAndABitwiseReference() {
        XCTAssertEqual(CRC32.checksum(Array("123456789".utf8)), 0xCBF4_3926)
        XCTAssertEqual(CRC32.checksum(Array("The quick brown fox jumps over the lazy dog".utf8)), 0x414F_A339)
        XCTAssertEqual(CRC32.checksum([UInt8]()), 0)
        var generator = SystemRandomNumberGenerator()
        let data = (0..<200).map { _ in UInt8.random(in: 0...255, using: &generator) }
        for offset in 0..<8 {
            for length in 0...(data.count - offset) {
                let slice = data[offset..<(offset + length)]
                let crc = slice.withUnsafeBytes { CRC32.checksum($0) }
                XCTAssertEqual(crc, reference(slice), "offset \(offset), length \(length)")
            }
        }
    }

    /// Where the CPU has PCLMULQDQ (this machine's has), whole 16-byte blocks are folded by it
    /// (`CRC32.usesCarrylessMultiply`), and the checksum is still the standard one: the check
    /// values and the bitwise reference above, and here long buffers at every alignment.
    func testTheCPUsCarrylessCRC32IsTheSameChecksum() throws {
        #if arch(x86_64)
        let flags = try String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8)
            .split(separator: "\n").first { $0.hasPrefix("flags") }.map { $0.split(separator: " ").map(String.init) } ?? []
        XCTAssertEqual(CRC32.usesCarrylessMultiply, flags.contains("pclmulqdq") && flags.contains("sse4_1"))
        #endif
        var generator = SystemRandomNumberGenerator()
        let data = (0..<70_000).map { _ in UInt8.random(in: 0...255, using: &generator) }
        for (offset, length) in [(0, 16), (1, 17), (3, 31), (5, 32), (7, 33), (9, 1_000), (15, 4_099), (2, 65_536), (11, 69_989)] {
            let slice = data[offset..<(offset + length)]
            XCTAssertEqual(slice.withUnsafeBytes { CRC32.checksum($0) }, reference(slice), "offset \(offset), length \(length)")
        }
        XCTAssertEqual(CRC32.checksum(Array(repeating: 0xFF, count: 64)), reference(ArraySlice(repeating: 0xFF, count: 64)))
        XCTAssertEqual(CRC32.checksum(Array(repeating: 0, count: 48)), reference(ArraySlice(repeating: 0, count: 48)))
    }

    func testDecoderRejectsDamageWithAnError() {
        var frame: [UInt8] = []
        RecordCodec.appendFrame(sampleRecords()[3], to: &frame)
        var payload = Array(frame[RecordCodec.frameHeaderSize...])
        payload[1] = 250  // unknown kind
        XCTAssertThrowsError(try payload.withUnsafeBytes { try RecordCodec.decode($0) })
        payload = Array(frame[RecordCodec.frameHeaderSize...])
        payload.removeLast(3)  // a string field now runs past the end
        XCTAssertThrowsError(try payload.withUnsafeBytes { try RecordCodec.decode($0) })
    }

    func testKindCodesAndNamesAreUniqueAndParse() {
        XCTAssertEqual(Set(EventKind.allCases.map(\.code)).count, EventKind.allCases.count)
        for k in EventKind.allCases {
            XCTAssertEqual(EventKind(code: k.code), k)
            XCTAssertEqual(EventKind(name: k.rawValue), k)
        }
        XCTAssertEqual(EventKind(name: "presenter-timed-out"), .presenterTimedOut)
        XCTAssertEqual(EventKind(name: "SUBITEM_MOVED"), .subitemMoved)
        XCTAssertNil(EventKind(name: "bogus"))
        XCTAssertNil(EventKind(code: 0))
    }

    func testTimeFormatsAndParsesISO8601() {
        let t = EventTime(millisecondsSinceEpoch: 1_795_810_466_123)
        XCTAssertEqual(t.iso8601, "2026-11-27T20:14:26.123Z")
        XCTAssertEqual(EventTime(iso8601: t.iso8601), t)
        XCTAssertEqual(EventTime(iso8601: "2000-02-29T23:59:59.999Z")?.iso8601, "2000-02-29T23:59:59.999Z")
        XCTAssertEqual(EventTime(iso8601: "1970-01-01T00:00:00Z")?.millisecondsSinceEpoch, 0)
        XCTAssertNil(EventTime(iso8601: "2026-13-01T00:00:00.000Z"))
        XCTAssertNil(EventTime(iso8601: "yesterday"))
        // Agrees with the C library for a spread of instants.
        for ms in stride(from: Int64(0), to: 4_000_000_000_000, by: 97_654_321_987) {
            var secs = time_t(ms / 1000)
            var tm = Glibc.tm()
            gmtime_r(&secs, &tm)
            let c = EventTime(millisecondsSinceEpoch: ms).components
            XCTAssertEqual([c.year, c.month, c.day, c.hour, c.minute, c.second],
                           [Int(tm.tm_year) + 1900, Int(tm.tm_mon) + 1, Int(tm.tm_mday), Int(tm.tm_hour), Int(tm.tm_min), Int(tm.tm_sec)])
        }
    }

    func testTextFormatIsAlignedEscapedAndColouredOnlyWhenAsked() {
        let plain = EventFormatter(style: .text, colour: false)
        let records = sampleRecords()
        let lines = records.map { plain.format($0) }
        // The path column starts at the same offset on every line.
        let offsets = lines.map { line -> Int in line.distance(from: line.startIndex, to: line.range(of: "/docs/")!.lowerBound) }
        XCTAssertEqual(Set(offsets).count, 1, lines.joined(separator: "\n"))
        XCTAssertEqual(plain.header!.distance(from: plain.header!.startIndex, to: plain.header!.range(of: "PATH")!.lowerBound), offsets[0])
        for line in lines {
            XCTAssertFalse(line.contains("\n"))
            XCTAssertFalse(line.contains("\u{1B}"), "no raw escape characters: \(line)")
        }
        let move = lines[EventKind.allCases.firstIndex(of: .didMove)!]
        XCTAssertTrue(move.contains(#"/docs/old "name"\n.txt -> /docs/report"#), move)
        XCTAssertTrue(lines[0].contains("vim[4242]"))
        XCTAssertTrue(lines[0].contains("latency=1.234ms"))
        XCTAssertTrue(lines[0].contains("1000 vim[4242]"))
        let coloured = EventFormatter(style: .text, colour: true).format(records[0])
        XCTAssertTrue(coloured.contains("\u{1B}[1mmount\u{1B}[0m"))
        XCTAssertNil(EventFormatter(style: .json).header)
        XCTAssertEqual(EventFormatter.latencyText(999), "999µs")
        XCTAssertEqual(EventFormatter.latencyText(1_005), "1.005ms")
    }

    /// `coordfs watch --json | jq` must work: every line parses and keeps its fields.
    func testJSONLinesParseWithJq() throws {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/jq") else {
            throw XCTSkip("jq is not installed (make deps installs it)")
        }
        let dir = makeTempDirectory(self)
        var out: [UInt8] = []
        let formatter = EventFormatter(style: .json)
        for r in sampleRecords() { formatter.append(r, to: &out) }
        let input = dir + "/lines.json"
        _ = FileManager.default.createFile(atPath: input, contents: Data(out))
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/jq")
        p.arguments = ["-c", "[.seq, .kind, .actor.pid, .details.latencyMicros, .oldPath]", input]
        let pipe = Pipe()
        p.standardOutput = pipe
        try p.run()
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        XCTAssertEqual(p.terminationStatus, 0)
        let rows = String(decoding: data, as: UTF8.self).split(separator: "\n")
        XCTAssertEqual(rows.count, EventKind.allCases.count)
        XCTAssertEqual(rows[0], #"[1,"mount",4242,1234,null]"#)
        let moveIndex = EventKind.allCases.firstIndex(of: .didMove)!
        XCTAssertEqual(rows[moveIndex], #"[\#(moveIndex + 1),"didMove",\#(4242 + moveIndex),1234,"/docs/old \"name\"\n.txt"]"#)
    }
}
