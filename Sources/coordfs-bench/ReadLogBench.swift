import EventLog
import Foundation

/// `coordfs-bench readlog [--records N] [--dir PATH]`
///
/// What one `readLog` request costs the daemon on a log of N records (default 1,000,000, in the
/// default 16 MiB segments), at its start, middle and end: the bounds, a reader opened at the seq
/// asked for, and 100 records read, as the daemon does it (the writer's in-memory bounds and
/// index, `EventLogWriter.index`) and as it did before (`EventLogReader.bounds(directory:)`, which
/// scans the newest segment, and a reader of the files alone, which scans the segment up to the
/// seq). No socket and no visibility check: those cost the same either way. The median of five
/// batches (10 requests before, 100 after); the page cache is warm, so this is CPU, the cost another user can make the daemon pay.
enum ReadLogBench {
    static func run(_ args: [String]) async throws {
        var records = 1_000_000
        var base: String?
        var i = 0
        while i < args.count {
            switch args[i] {
            case "--records" where i + 1 < args.count:
                records = max(1_000, Int(args[i + 1]) ?? records)
                i += 1
            case "--dir" where i + 1 < args.count:
                base = args[i + 1]
                i += 1
            default:
                throw EventLogError.invalidArgument("usage: coordfs-bench readlog [--records N] [--dir PATH]")
            }
            i += 1
        }
        let root = base ?? NSTemporaryDirectory() + "/coordfs-readlog-bench-\(getpid())"
        try? FileManager.default.removeItem(atPath: root)
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        defer { if base == nil { try? FileManager.default.removeItem(atPath: root) } }

        // The log a daemon finds at start: written by a previous writer, then opened again.
        let dir = root + "/log"
        let actor = EventActor(pid: 4242, uid: 1000, executable: "/usr/bin/vim")
        var writer = try EventLogWriter(directory: dir)
        for n in 0..<records {
            writer.append(.granted, path: "/projects/coordfs/docs/report-\(n & 1023).txt", documentID: "doc-\(n & 1023)", actor: actor)
        }
        try writer.close()
        writer = try EventLogWriter(directory: dir)
        defer { try? writer.close() }
        let bounds = try EventLogReader.bounds(directory: dir)
        print("## readLog on a log of \(records) records (\(bounds.segments) segments, \(bounds.bytes >> 20) MiB)")
        print("")
        print("| position | before: scan for bounds + reader of the files | after: writer's bounds + index | frames read before / after |")
        print("|---|---|---|---|")

        let index = writer.index
        let end = bounds.nextSeq
        let positions: [(String, UInt64?)] = [
            ("start (seq 1)", 1), ("middle (seq \(end / 2))", end / 2), ("end - 100", end - 100), ("end (a follower's poll)", nil),
        ]
        // What the first request into a previous writer's segment costs (it indexes the segment).
        var cold = 0.0
        do {
            let t0 = now()
            _ = try request(dir, from: end / 2, index: index, old: false)
            cold = now() - t0
        }
        for (name, from) in positions {
            // Timed as batches (this host's clock may tick coarsely); the median batch's mean.
            var before: [Double] = [], after: [Double] = []
            var framesBefore: UInt64 = 0, framesAfter: UInt64 = 0
            for _ in 0..<5 {
                var t0 = now()
                for _ in 0..<10 { framesBefore = try request(dir, from: from, index: index, old: true) }
                before.append((now() - t0) / 10)
                t0 = now()
                for _ in 0..<100 { framesAfter = try request(dir, from: from, index: index, old: false) }
                after.append((now() - t0) / 100)
            }
            print("| \(name) | \(ms(median(before))) | \(ms(median(after))) | \(framesBefore) / \(framesAfter) |")
        }
        print("")
        print("The first request into the middle of a previous writer's segment, which indexes it once: \(ms(cold)).")
    }

    /// One request's work: the bounds, a reader at `from` (nil: the end), up to 100 records.
    /// Returns the frames the reader read.
    private static func request(_ dir: String, from: UInt64?, index: EventLogIndex, old: Bool) throws -> UInt64 {
        let position: EventLogPosition = from.map { $0 <= 1 ? .start : .from($0) } ?? .end
        let reader: EventLogReader
        if old {
            _ = try EventLogReader.bounds(directory: dir)
            reader = try EventLogReader(directory: dir, position: position)
        } else {
            _ = index.bounds
            reader = try EventLogReader(directory: dir, position: position, index: index)
        }
        _ = try reader.read(limit: 100)
        return reader.framesRead
    }

    private static func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }
    private static func ms(_ seconds: Double) -> String { String(format: "%.3f ms", seconds * 1e3) }

    private static func now() -> Double {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
    }
}
