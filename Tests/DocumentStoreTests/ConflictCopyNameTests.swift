import NameBytes
import XCTest
@testable import DocumentStore

/// The name of a keep-both copy stays within NAME_MAX (255 bytes), however long the document's name:
/// its stem is shortened at the start of a UTF-8 sequence; an extension that leaves no room for a
/// stem is shortened with it. (A 230-byte name made a copy name past 255 bytes and the resolution failed
/// with ENAMETOOLONG.)
final class ConflictCopyNameTests: XCTestCase {
    let stamp = "2026-11-26 143012"

    func testAShortNameKeepsItsWholeStemAndExtension() {
        XCTAssertEqual(DocumentStore.conflictCopyName(of: "notes.txt", stamp: stamp, attempt: 1), "notes (conflict 2026-11-26 143012).txt")
        XCTAssertEqual(DocumentStore.conflictCopyName(of: "notes.txt", stamp: stamp, attempt: 3), "notes (conflict 2026-11-26 143012 3).txt")
        XCTAssertEqual(DocumentStore.conflictCopyName(of: ".profile", stamp: stamp, attempt: 1), ".profile (conflict 2026-11-26 143012)")
    }

    func testALongNameIsShortenedToNameMaxKeepingItsExtension() {
        let name = String(nameBytes: [UInt8](repeating: 0xFF, count: 251) + Array(".txt".utf8))
        for attempt in [1, 2, 1000] {
            let copy = DocumentStore.conflictCopyName(of: name, stamp: stamp, attempt: attempt).nameBytes
            XCTAssertEqual(copy.count, 255, "attempt \(attempt)")
            XCTAssertTrue(copy.starts(with: [UInt8](repeating: 0xFF, count: 200)), "attempt \(attempt)")
            XCTAssertTrue(String(decoding: copy.suffix(30), as: UTF8.self).hasSuffix(attempt == 1 ? "143012).txt" : "143012 \(attempt)).txt"), "attempt \(attempt)")
        }
    }

    func testAShortenedStemIsNeverCutInsideAUTF8Sequence() {
        for width in 1...4 {
            let character = ["a", "é", "€", "😀"][width - 1]
            for count in 60...70 {
                let name = String(repeating: character, count: count) + ".md"
                let copy = DocumentStore.conflictCopyName(of: name, stamp: stamp, attempt: 1)
                XCTAssertLessThanOrEqual(copy.nameBytes.count, 255, "\(width)-byte characters × \(count)")
                XCTAssertTrue(LosslessName.isPlain(copy), "\(width)-byte characters × \(count): a sequence was cut")
                XCTAssertTrue(copy.hasSuffix(" (conflict 2026-11-26 143012).md"), copy)
            }
        }
    }

    func testAnExtensionThatLeavesNoRoomIsShortenedAsTheStem() {
        let name = "a." + String(repeating: "x", count: 240)
        let copy = DocumentStore.conflictCopyName(of: name, stamp: stamp, attempt: 1)
        XCTAssertLessThanOrEqual(copy.nameBytes.count, 255)
        XCTAssertTrue(copy.hasPrefix("a.xxx"), copy)
        XCTAssertTrue(copy.hasSuffix(" (conflict 2026-11-26 143012)"), copy)
    }
}
