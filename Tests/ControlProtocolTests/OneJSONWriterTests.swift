import EventLog
import NameBytes
import XCTest

@testable import ControlProtocol

/// JSON is written one way (`JSONString`'s literals and numbers): the protocol's `JSONWriter`, the
/// event log's JSON lines (`coordfs watch --json`, `log --json`) and the CLI's JSON output
/// (`versions`, `conflicts`, `log --info` use `JSONString` directly) give the same bytes for the
/// same string, a name that is not UTF-8 as `\udcNN` (docs/protocol.md).
final class OneJSONWriterTests: XCTestCase {
    /// Quote, backslash, the short escapes, other controls and DEL, a bidirectional override, NFC
    /// and NFD "café" (two names), and the bytes 0xE9 and 0xFF, which are not UTF-8.
    private let hostile = String(nameBytes: Array("a\"b\\c\n\r\t\u{01}\u{7F}\u{202E}caf\u{E9}/cafe\u{301}/".utf8) + [0xE9, 0xFF])
    private let expected = #""a\"b\\c\n\r\t\u0001\u007f"# + "\u{202E}caf\u{E9}/cafe\u{301}/" + #"\udce9\udcff""#

    func testTheWireTheLogAndTheCLIEscapeAStringTheSameWay() throws {
        XCTAssertEqual(JSONString.literal(hostile), expected, "the one writer")
        XCTAssertEqual(String(decoding: JSONWriter.write(.string(hostile)), as: UTF8.self), expected, "the wire")
        let record = EventRecord(seq: 1, time: EventTime(millisecondsSinceEpoch: 0), kind: .didChange, path: hostile)
        let line = EventFormatter(style: .json).format(record)
        XCTAssertTrue(line.contains(#""path":"# + expected), "the log: \(line)")
        // The log's line and the wire's object read back to the same bytes.
        let object = try JSONParser.parse(Array(line.utf8))
        guard case .object(let o) = object, case .string(let path)? = o["path"] else { return XCTFail("\(object)") }
        XCTAssertEqual(path.nameBytes, hostile.nameBytes)
    }

    func testNumbersAreWrittenTheSameWay() {
        for n: Int64 in [0, 7, -1, 1 << 53, Int64.max, Int64.min] {
            var out: [UInt8] = []
            JSONString.appendNumber(n, to: &out)
            XCTAssertEqual(String(decoding: out, as: UTF8.self), String(n))
            XCTAssertEqual(JSONWriter.write(.int(n)), out)
        }
        var out: [UInt8] = []
        JSONString.appendNumber(UInt64.max, to: &out)
        XCTAssertEqual(String(decoding: out, as: UTF8.self), "18446744073709551615")
    }
}
