import XCTest
import Foundation
import Glibc
import TestSupport
import EventLog
@testable import CoordFS

/// What one peer's `readLog` requests cost the daemon does not grow with the log: on an
/// `allow_other` mount whose newest log segment holds some 14 MiB of records, nobody's requests
/// (at the end, from the middle, each on a new connection, so nothing is reused) read a small,
/// fixed amount of the log each, counted as the bytes the daemon's process reads (`rchar` in
/// /proc/self/io: the daemon runs in this process), not timed. Before the writer's index, every
/// request scanned the whole newest segment for the bounds and a reader from the middle scanned
/// the segment up to its position: hundreds of MiB for these requests.
final class LogRequestCostTests: ClientMountTestCase {
    let nobody = (uid: uid_t(65534), gid: gid_t(65534))

    override func configure(_ options: inout MountOptions) {
        super.configure(&options)
        options.allowOther = true
    }

    /// Bytes this process has read with read(2) and its kind so far.
    private func bytesRead() throws -> UInt64 {
        let io = try String(contentsOfFile: "/proc/self/io", encoding: .utf8)
        let line = try XCTUnwrap(io.split(separator: "\n").first { $0.hasPrefix("rchar:") })
        return try XCTUnwrap(UInt64(line.dropFirst("rchar:".count).trimmingCharacters(in: .whitespaces)))
    }

    func testNobodysReadLogRequestsReadLittleOfALargeLog() throws {
        let log = try XCTUnwrap(daemon.eventLog)
        let count = 150_000
        for i in 0..<count { log.append(.didChange, path: "/record-\(i)-of-a-long-enough-log-to-fill-a-segment.txt") }
        try log.flush()
        let bounds = try EventLogReader.bounds(directory: daemon.plan.state.eventLog)
        XCTAssertEqual(bounds.segments, 1, "one segment, the newest, holds them all")
        XCTAssertGreaterThan(bounds.bytes, 12 << 20)
        let end = bounds.nextSeq
        let middle = end - UInt64(count / 2)

        let script = root + "/readlog.py"
        try (pythonClientPrelude + """
        import socket as socketmodule
        middle = int(sys.argv[2])
        for k in range(20):
            for request in ({"type": "readLog", "id": 2}, {"type": "readLog", "id": 3, "from": middle + 37 * k, "limit": 10}):
                sock = socketmodule.socket(socketmodule.AF_UNIX, socketmodule.SOCK_STREAM)
                sock.settimeout(20)
                sock.connect(sys.argv[1])
                send({"type": "hello", "id": 1, "versions": [1]})
                receive()
                send(request)
                reply = receive()
                print(json.dumps({"from": request.get("from"), "type": reply["type"], "next": reply.get("next"), "end": reply.get("end")}), flush=True)
                sock.close()
        """).write(toFile: script, atomically: true, encoding: .utf8)
        let before = try bytesRead()
        let replies = try run(["/usr/bin/python3", script, socketPath, String(middle)], user: nobody)
        let read = try bytesRead() - before
        XCTAssertEqual(replies.status, 0, replies.output)
        let lines = replies.output.split(separator: "\n").compactMap {
            try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
        }
        XCTAssertEqual(lines.count, 40, replies.output)
        for line in lines {
            XCTAssertEqual(line["type"] as? String, "logRecords", "\(line)")
            XCTAssertEqual((line["end"] as? NSNumber)?.uint64Value, end, "\(line)")
            if let from = (line["from"] as? NSNumber)?.uint64Value {
                XCTAssertEqual((line["next"] as? NSNumber)?.uint64Value, from + 10, "10 records from \(from): \(line)")
            } else {
                XCTAssertEqual((line["next"] as? NSNumber)?.uint64Value, end, "from the end: \(line)")
            }
        }
        // 40 requests: each reads at most a buffer (256 KiB) from where it seeks to. Scanning for
        // the bounds alone read the whole segment (over 12 MiB) per request.
        XCTAssertLessThan(read, 20 << 20, "the daemon read \(read) bytes for 40 requests")

        // What nobody's `coordfs log` shows from the middle (through the daemon) is what root's
        // (from the files) shows.
        let bin = try Self.coordfsBinary()
        let arguments = [bin, "log", "--json", "--since", String(middle + 5), "--limit", "25", mnt!]
        let mine = try run(arguments, user: nobody)
        let roots = try run(arguments)
        XCTAssertEqual(mine.status, 0, mine.output)
        XCTAssertEqual(roots.status, 0, roots.output)
        XCTAssertEqual(mine.output.split(separator: "\n").count, 25, mine.output)
        XCTAssertEqual(mine.output, roots.output)
        XCTAssertTrue(mine.output.contains("\"seq\":\(middle + 5),"), mine.output)
    }

    /// A request stops after 50,000 frames, shown or not: nobody, who may see none of 120,000
    /// records in root's 700 folder, gets replies with no records that say where to go on, and its
    /// `coordfs log` goes on through them to the public records after.
    func testHiddenRecordsCostARequestNoMoreThanItsBudgetAndTheReaderGoesOn() throws {
        mkdir(backing + "/private", 0o700)
        let log = try XCTUnwrap(daemon.eventLog)
        let first = log.lastAssignedSeq + 1
        for i in 0..<120_000 { log.append(.didChange, path: "/private/secret-\(i).txt") }
        for i in 0..<3 { log.append(.didChange, path: "/public-\(i).txt") }
        try log.flush()

        let script = root + "/budget.py"
        try (pythonClientPrelude + """
        send({"type": "hello", "id": 1, "versions": [1]})
        receive()
        send({"type": "readLog", "id": 2, "from": int(sys.argv[2])})
        reply = receive()
        print(json.dumps({"records": reply["records"], "next": reply["next"], "end": reply["end"]}), flush=True)
        """).write(toFile: script, atomically: true, encoding: .utf8)
        let raw = try run(["/usr/bin/python3", script, socketPath, String(first)], user: nobody)
        XCTAssertEqual(raw.status, 0, raw.output)
        let reply = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(raw.output.utf8)) as? [String: Any])
        XCTAssertEqual(reply["records"] as? String, "", "nothing nobody may see")
        let next = try XCTUnwrap((reply["next"] as? NSNumber)?.uint64Value)
        XCTAssertLessThanOrEqual(next, first + 50_000, "one request reads at most 50,000 frames")
        XCTAssertGreaterThan(next, first + 49_000, "and goes that far")
        XCTAssertLessThan(next, try XCTUnwrap((reply["end"] as? NSNumber)?.uint64Value))

        let bin = try Self.coordfsBinary()
        let shown = try run([bin, "log", "--json", "--since", String(first), mnt!], user: nobody)
        XCTAssertEqual(shown.status, 0, shown.output)
        XCTAssertFalse(shown.output.contains("secret"), shown.output)
        for i in 0..<3 { XCTAssertTrue(shown.output.contains("public-\(i).txt"), shown.output) }
    }
}
