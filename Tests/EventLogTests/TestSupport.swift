import Foundation
import XCTest

@testable import EventLog

/// A fresh temporary directory, removed when the test ends.
func makeTempDirectory(_ test: XCTestCase, file: StaticString = #filePath, line: UInt = #line) -> String {
    var template = Array((NSTemporaryDirectory() + "/eventlog-test-XXXXXX").utf8CString)
    let path = template.withUnsafeMutableBufferPointer { p -> String in
        guard let r = mkdtemp(p.baseAddress!) else { return "" }
        return String(cString: r)
    }
    XCTAssertFalse(path.isEmpty, "mkdtemp failed", file: file, line: line)
    test.addTeardownBlock { try? FileManager.default.removeItem(atPath: path) }
    return path
}

/// The log directory inside a fresh temporary directory.
func makeLogDirectory(_ test: XCTestCase) -> String {
    makeTempDirectory(test) + "/log"
}

/// One record of every kind, with every field a kind might use filled in.
func sampleRecords() -> [EventRecord] {
    EventKind.allCases.enumerated().map { i, kind in
        EventRecord(
            seq: UInt64(i + 1), time: EventTime(millisecondsSinceEpoch: 1_790_000_000_123 + Int64(i)),
            kind: kind, path: "/docs/report \(i).txt",
            oldPath: kind == .didMove || kind == .subitemMoved ? "/docs/old \"name\"\n.txt" : nil,
            documentID: "doc-\(i)",
            actor: EventActor(pid: 4242 + Int32(i), uid: 1000, executable: "/usr/bin/vim"),
            details: EventDetails(
                intent: .write, options: ["forDeleting", "forMoving"], requestID: UInt64(i) * 7,
                presenterID: "p\(i)", ask: .saveChanges, latencyMicros: 1234, snapshotMethod: Recorded(.reflink),
                bytes: 1 << 40, versionID: "v\(i)", resolution: Recorded(.keepBoth), errno: -13, reason: "deadline",
                message: "tab\there \u{1B}[31m ünïcode", gapFrom: 3, gapTo: 9))
    }
}

/// Flips a byte in the middle of `segment` of the log in `directory`.
func damageTheMiddle(of segment: SegmentName, in directory: String) throws {
    let victim = directory + "/" + segment.fileName
    var bytes = try XCTUnwrap(FileManager.default.contents(atPath: victim))
    bytes[bytes.count / 2] ^= 0xFF
    try bytes.write(to: URL(fileURLWithPath: victim))
}

/// Every record in the log from the start.
func readAll(_ directory: String, from position: EventLogPosition = .start, filter: EventFilter = EventFilter()) throws -> [EventRecord] {
    let reader = try EventLogReader(directory: directory, position: position, filter: filter)
    var out: [EventRecord] = []
    while let r = try reader.next() { out.append(r) }
    return out
}

/// Checks that seqs are continuous from `first`, with gaps standing in for their ranges.
func assertContinuous(_ records: [EventRecord], from first: UInt64, file: StaticString = #filePath, line: UInt = #line) {
    var expected = first
    for r in records {
        let start = r.gapRange?.lowerBound ?? r.seq
        if start > expected || (r.gapRange == nil && r.seq != expected) {
            XCTFail("expected seq \(expected), got \(r.seq) (\(r.kind))", file: file, line: line)
            return
        }
        expected = r.seq + 1
    }
}
