import Foundation
import NameBytes
import XCTest

@testable import EventLog

/// The event log's byte buffer (`ByteBuffer`, what records are encoded into) and the encoders that
/// write into it: the same bytes as encoding into an array, and value semantics.
final class ByteBufferTests: XCTestCase {
    /// A copy is a value: appending to, overwriting in or emptying one leaves the other as it was,
    /// also after the buffer grew past its first allocation.
    func testACopyIsIndependentOfTheOriginal() {
        var a = ByteBuffer()
        XCTAssertTrue(a.isEmpty)
        for i in 0..<100 { a.append(UInt8(i)) }
        let before = a.array
        var b = a
        b.append(200)
        [UInt8]([1, 2, 3]).withUnsafeBytes { b.append(contentsOf: $0) }
        b.store(UInt64.max, at: 0)
        XCTAssertEqual(a.array, before, "the original is unchanged")
        XCTAssertEqual(b.count, 104)
        XCTAssertEqual(Array(b.array[0..<8]), Array(repeating: 0xFF, count: 8))
        XCTAssertEqual(Array(b.array[8..<100]), Array(before[8...]))
        XCTAssertEqual(Array(b.array[100...]), [200, 1, 2, 3])
        var c = a
        c.removeAll()
        XCTAssertEqual(c.count, 0)
        XCTAssertEqual(a.array, before)
        a.append(7)
        XCTAssertEqual(a.array, before + [7])
        XCTAssertEqual(c.array, [])
    }

    /// `append(_:_:)` copies a range of another buffer, also of a copy of itself.
    func testAppendingARangeOfABuffer() {
        var a = ByteBuffer()
        Array(0..<50).map(UInt8.init).withUnsafeBytes { a.append(contentsOf: $0) }
        var b = ByteBuffer()
        b.append(a, 10..<20)
        b.append(a, 0..<0)
        XCTAssertEqual(b.array, Array(10..<20).map(UInt8.init))
        let copy = a
        a.append(copy, 45..<50)
        XCTAssertEqual(a.array, Array(0..<50).map(UInt8.init) + Array(45..<50).map(UInt8.init))
    }

    /// Frames and fields encoded into a `ByteBuffer` are the bytes encoded into an array, for every
    /// kind of record (the documented bytes themselves: `EncodedRecordsTests.testFramesAreTheDocumentedBytes`).
    func testTheBufferHoldsTheArraysBytes() {
        for r in sampleRecords() {
            var array: [UInt8] = [9]
            var buffer = ByteBuffer()
            buffer.append(9)
            RecordCodec.appendFrame(r, to: &array)
            RecordCodec.appendFrame(r, to: &buffer)
            XCTAssertEqual(buffer.array, array, "\(r.kind)")
        }
        for v: UInt64 in [0, 1, 127, 128, 300, 1 << 35, UInt64.max] {
            var array: [UInt8] = []
            var buffer = ByteBuffer()
            RecordCodec.appendVarintField(.requestID, v, to: &array)
            RecordCodec.appendVarintField(.requestID, v, to: &buffer)
            XCTAssertEqual(buffer.array, array, "\(v)")
        }
    }

    /// A path from components is byte for byte the path as a string also when a name has the byte
    /// 0xF4 (a character from U+100000 on, which is plain text) or is not UTF-8 (stored as its own
    /// bytes), and no byte of a path given up half way is left behind.
    func testPathsWithTheEscapeLeadByteMatchThePathAsAString() throws {
        let notUTF8 = LosslessName.string([0x66, 0xFF, 0x67])
        let cases: [[String]] = [
            ["dir", "\u{100000}x"],
            ["dir", notUTF8],
            ["a", "b", notUTF8, "\u{10FFFD}"],
            [notUTF8],
        ]
        for components in cases {
            var fields = RecordFields()
            fields.requestID(1)
            fields.path(components)
            fields.latencyMicros(2)
            var expected: [UInt8] = []
            RecordCodec.appendVarintField(.requestID, 1, to: &expected)
            RecordCodec.appendString(.path, "/" + components.joined(separator: "/"), to: &expected)
            RecordCodec.appendVarintField(.latencyMicros, 2, to: &expected)
            XCTAssertEqual(fields.bytes, expected, "\(components)")
        }
        var fields = RecordFields()
        fields.path(["dir", notUTF8])
        let frame = fields.buffer.withUnsafeBytes { f -> [UInt8] in
            var frame: [UInt8] = []
            RecordCodec.appendFrame(kind: .didChange, seq: 1, time: EventTime(millisecondsSinceEpoch: 0), fields: f, to: &frame)
            return frame
        }
        let decoded = try frame.withUnsafeBytes { try RecordCodec.decode(UnsafeRawBufferPointer(rebasing: $0[RecordCodec.frameHeaderSize...])) }
        XCTAssertEqual(decoded.path.nameBytes, Array("/dir/".utf8) + [0x66, 0xFF, 0x67], "the name's own bytes")
    }
}
