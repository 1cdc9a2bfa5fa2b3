import Foundation
import NameBytes
import XCTest
@testable import EventLog

/// Names are bytes in the log: stored as the name's own bytes (format v1 unchanged), read back
/// exactly, shown escaped in text and as PEP 383 `\udcNN` in JSON.
final class ByteNameRecordTests: XCTestCase {
    let notUTF8 = String(nameBytes: Array("/col".utf8) + [0xFF])
    let hostile = "/\u{1B}[31mred\u{202E}txt.exe"

    func record(_ path: String, oldPath: String? = nil) -> EventRecord {
        EventRecord(seq: 7, time: EventTime(millisecondsSinceEpoch: 1_790_000_000_000), kind: .didMove, path: path, oldPath: oldPath,
                    actor: EventActor(pid: 1, uid: 0, executable: "cp"), details: EventDetails(message: "cannot open " + path))
    }

    func roundTrip(_ r: EventRecord) throws -> (frame: [UInt8], decoded: EventRecord) {
        var frame: [UInt8] = []
        RecordCodec.appendFrame(r, to: &frame)
        let decoded = try frame.withUnsafeBytes {
            try RecordCodec.decode(UnsafeRawBufferPointer(rebasing: $0[RecordCodec.frameHeaderSize...]))
        }
        return (frame, decoded)
    }

    func testAPathThatIsNotUTF8IsStoredAsItsBytesAndReadBackExactly() throws {
        let other = String(nameBytes: Array("/col".utf8) + [0xFE])
        let (frame, decoded) = try roundTrip(record(notUTF8, oldPath: other))
        XCTAssertEqual(frame[RecordCodec.frameHeaderSize], 1, "the record format stays version 1")
        XCTAssertNotNil(frame.firstRange(of: Array("/col".utf8) + [0xFF]), "the name's own bytes are on disk")
        XCTAssertNil(frame.firstRange(of: [0xEF, 0xBF, 0xBD]), "no U+FFFD")
        XCTAssertEqual(decoded.path.nameBytes, Array("/col".utf8) + [0xFF])
        XCTAssertEqual(decoded.oldPath?.nameBytes, Array("/col".utf8) + [0xFE])
        XCTAssertEqual(decoded.details.message?.nameBytes, Array("cannot open /col".utf8) + [0xFF])
    }

    func testPathsWrittenFromComponentsAreTheSameBytes() throws {
        var fields = RecordFields()
        fields.path(["col" + String(nameBytes: [0xFF])])
        var frame: [UInt8] = []
        fields.bytes.withUnsafeBytes { RecordCodec.appendFrame(kind: .didChange, seq: 1, time: EventTime(millisecondsSinceEpoch: 0), fields: $0, to: &frame) }
        let decoded = try frame.withUnsafeBytes {
            try RecordCodec.decode(UnsafeRawBufferPointer(rebasing: $0[RecordCodec.frameHeaderSize...]))
        }
        XCTAssertEqual(decoded.path.nameBytes, Array("/col".utf8) + [0xFF])
    }

    func testTextShowsBytesAsHexAndEscapesControlsAndBidiOverrides() {
        let line = EventFormatter(style: .text).format(record(hostile, oldPath: notUTF8))
        XCTAssertTrue(line.contains("/col\\xff -> /\\x1b[31mred\\u202etxt.exe"), line)
        XCTAssertFalse(line.contains("\u{1B}"), line)
        XCTAssertFalse(line.contains("\u{202E}"), line)
        XCTAssertFalse(line.contains("\u{FFFD}"), line)
    }

    func testJSONIsValidAndCarriesTheBytesAsSurrogateEscapes() throws {
        let line = EventFormatter(style: .json).format(record(notUTF8, oldPath: hostile))
        XCTAssertTrue(line.contains(#""path":"/col\udcff""#), line)
        XCTAssertTrue(line.contains(#""oldPath":"/\u001b[31mred\#u{202E}txt.exe""#), line)
        XCTAssertNotNil(String(validating: Array(line.utf8), as: UTF8.self))
    }
}
