import Foundation
import Glibc
import XCTest

/// Names are bytes through the command line: `watch`/`log` JSON that round-trips to the exact bytes
/// (PEP 383, checked with Python's own json and os.fsencode), text that shows `\xNN` and cannot be
/// forged by control or bidirectional-override characters, and paths given on the command line
/// that are not UTF-8.
final class ByteNameCLITests: CLITestCase {
    /// A shell word for `bytes` (octal escapes for printf).
    func word(_ bytes: [UInt8]) -> String {
        "\"$(printf '" + bytes.map { String(format: "\\%03o", $0) }.joined() + "')\""
    }

    func testLogJSONRoundTripsTheBytesAndTextEscapesThem() throws {
        try mount()
        let names: [[UInt8]] = [Array("col".utf8) + [0xFF], Array("col".utf8) + [0xFE], Array("\u{1B}[31mred\u{202E}txt.exe".utf8)]
        for name in names {
            let r = sh("cd '\(mnt!)' && printf x > \(word(name))")
            XCTAssertEqual(r.status, 0, "\(r)")
        }
        // Every line is JSON (Python's strict loads), and the paths are exactly the bytes created.
        let python = """
            import json, os, sys
            seen = set()
            for line in sys.stdin:
                r = json.loads(line)
                if r["kind"] == "subitemAppeared" or r["kind"] == "intentRequested":
                    seen.add(os.fsencode(r["path"]).hex())
            print(" ".join(sorted(seen)))
            """
        let r = sh("\"$COORDFS\" log '\(mnt!)' --json | python3 -c '\(python)'")
        XCTAssertEqual(r.status, 0, "\(r)")
        let seen = Set(r.stdout.split(whereSeparator: { $0 == " " || $0 == "\n" }).map(String.init))
        for name in names {
            let hex = ([UInt8(ascii: "/")] + name).map { String(format: "%02x", $0) }.joined()
            XCTAssertTrue(seen.contains(hex), "no record with the path bytes \(hex): \(r.stdout)")
        }
        // Text: \xff, and no raw ESC or U+202E reaches the terminal.
        let text = coordfs("log", mnt)
        XCTAssertEqual(text.status, 0, "\(text)")
        XCTAssertTrue(text.stdout.contains("/col\\xff"), text.stdout)
        XCTAssertTrue(text.stdout.contains("/col\\xfe"), text.stdout)
        XCTAssertTrue(text.stdout.contains("/\\x1b[31mred\\u202etxt.exe"), text.stdout)
        XCTAssertFalse(text.stdout.contains("\u{1B}"), text.stdout)
        XCTAssertFalse(text.stdout.contains("\u{202E}"), text.stdout)
        XCTAssertFalse(text.stdout.contains("\u{FFFD}"), text.stdout)
    }
}
