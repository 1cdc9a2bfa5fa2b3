import NameBytes
import XCTest
@testable import ControlProtocol

/// Names are bytes on the wire: PEP 383, a byte that is not UTF-8 is the lone surrogate escape
/// `\udcNN` (80...ff), and only those stand alone.
final class ByteNameWireTests: XCTestCase {
    func parse(_ json: String) throws -> String? {
        if case .string(let s) = try JSONParser.parse(Array(json.utf8)) { return s }
        return nil
    }

    func testSurrogateEscapesAreBytes() throws {
        XCTAssertEqual(try parse(#""col\udcff""#)?.nameBytes, Array("col".utf8) + [0xFF])
        XCTAssertEqual(try parse(#""\udc80\uDCFE""#)?.nameBytes, [0x80, 0xFE])
        // Bytes that happen to form UTF-8 are that text: the same name either way.
        XCTAssertEqual(try parse(#""caf\udcc3\udca9""#).map(ExactName.init), ExactName("caf\u{E9}"))
        // A real pair is still one scalar.
        XCTAssertEqual(try parse(#""\ud83d\udc80""#), "\u{1F480}")
        // A literal scalar of the private escape range is that scalar's four bytes, not one byte.
        XCTAssertEqual(try parse("\"\u{10DCFF}\"")?.nameBytes, Array("\u{10DCFF}".utf8))
    }

    func testOtherLoneSurrogatesAreStillRefused() {
        for bad in [#""\udc41""#, #""\udc00""#, #""\ud800""#, #""\udd80""#] {
            XCTAssertThrowsError(try JSONParser.parse(Array(bad.utf8)), bad)
        }
    }

    func testWritingAndParsingRoundTripsEveryByte() throws {
        for b in 0x80...0xFF {
            let name = String(nameBytes: Array("n".utf8) + [UInt8(b)] + Array("\u{202E}".utf8))
            let written = JSONWriter.write(.string(name))
            XCTAssertNotNil(String(validating: written, as: UTF8.self), "the JSON is UTF-8")
            XCTAssertEqual(try parse(String(decoding: written, as: UTF8.self))?.nameBytes, name.nameBytes)
        }
        XCTAssertEqual(String(decoding: JSONWriter.write(.string(String(nameBytes: [0x61, 0xFF]))), as: UTF8.self), #""a\udcff""#)
    }

    /// A path's limits count its bytes: a byte that is not UTF-8 is one, though its lossless form
    /// holds it as four bytes of UTF-8 (255 such bytes were refused as a 1,020-byte component).
    func testMountPathLimitsCountBytes() throws {
        let component = String(nameBytes: [UInt8](repeating: 0xFF, count: 255))
        XCTAssertEqual(LosslessName.byteCount(component), 255)
        XCTAssertEqual(LosslessName.byteCount("a/é" + component), 259)
        XCTAssertEqual(try MountPath(validating: "d/" + component).rawValue.nameBytes.count, 257)
        XCTAssertThrowsError(try MountPath(validating: component + String(nameBytes: [0xFE]))) { error in
            XCTAssertTrue("\(error)".contains("256 bytes long"), "\(error)")
        }
        // 257 components of 255 bytes that are not UTF-8 are 65,791 bytes; 255 and one of 254 fit.
        let deep = Array(repeating: component, count: 257).joined(separator: "/")
        XCTAssertThrowsError(try MountPath(validating: deep)) { error in
            XCTAssertTrue("\(error)".contains("65791 bytes long"), "\(error)")
        }
        let fits = Array(repeating: component, count: 255).joined(separator: "/") + "/" + String(nameBytes: [UInt8](repeating: 0xFF, count: 254))
        XCTAssertEqual(try MountPath(validating: fits).components.count, 256)
    }

    func testMountPathsCompareByBytes() throws {
        let nfc = try MountPath(validating: "d/caf\u{E9}"), nfd = try MountPath(validating: "d/cafe\u{301}")
        XCTAssertNotEqual(nfc, nfd)
        XCTAssertEqual(Set([nfc, nfd]).count, 2)
        XCTAssertEqual(try MountPath(validating: "a/\u{301}b").components.count, 2)
        let bytes = try MountPath(validating: String(nameBytes: [0x64, 0xFF, 0x2F, 0x65]))
        XCTAssertEqual(bytes.components.map { String($0).nameBytes }, [[0x64, 0xFF], [0x65]])
    }
}
