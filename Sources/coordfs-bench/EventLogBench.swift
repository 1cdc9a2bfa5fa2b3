import EventLog
import Foundation

/// `coordfs-bench eventlog [--records N] [--threads T] [--sync] [--coalesce-us N] [--dir PATH]`
///
/// Measures the event log on this machine: the rate `append` accepts records from one and from
/// several threads, the sustained rate (append until everything is in the file), the rate a
/// reader decodes stored records and the formatters print them, and the append-to-reader latency
/// of a follower tailing the directory (what `coordfs watch` adds before the terminal).
enum EventLogBench {
    static func run(_ args: [String]) async throws {
        var records = 1_000_000
        var threads = 2
        var sync = EventLogOptions.SyncPolicy.none
        var base: String?
        var coalescing = EventLogOptions().coalescing
        var i = 0
        while i < args.count {
            switch args[i] {
            case "--records" where i + 1 < args.count:
                records = Int(args[i + 1]) ?? records
                i += 1
            case "--threads" where i + 1 < args.count:
                threads = max(1, Int(args[i + 1]) ?? threads)
                i += 1
            case "--dir" where i + 1 < args.count:
                base = args[i + 1]
                i += 1
            case "--coalesce-us" where i + 1 < args.count:
                coalescing = .microseconds(Int(args[i + 1]) ?? 1000)
                i += 1
            case "--sync":
                sync = .everyBatch
            default:
                throw EventLogError.invalidArgument(
                    "usage: coordfs-bench eventlog [--records N] [--threads T] [--sync] [--coalesce-us N] [--dir PATH]")
            }
            i += 1
        }
        let root = base ?? NSTemporaryDirectory() + "/coordfs-eventlog-bench-\(getpid())"
        try? FileManager.default.removeItem(atPath: root)
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        defer { if base == nil { try? FileManager.default.removeItem(atPath: root) } }

        print("## EventLog (\(records) records, sync: \(sync == .none ? "none" : "everyBatch"), coalescing: \(coalescing))")
        print("")
        print("| measurement | result |")
        print("|---|---|")

        let options = EventLogOptions(sync: sync, coalescing: coalescing)
        let paths = (0..<1024).map { "/projects/coordfs/docs/report-\($0).txt" }
        let actor = EventActor(pid: 4242, uid: 1000, executable: "/usr/bin/vim")

        // 1. One appending thread: append rate, then sustained (until written).
        let dir1 = root + "/single"
        var writer = try EventLogWriter(directory: dir1, options: options)
        var t0 = now()
        for n in 0..<records {
            writer.append(
                .granted, path: paths[n & 1023], documentID: "doc-\(n & 1023)", actor: actor,
                details: EventDetails(intent: .write, requestID: UInt64(n), latencyMicros: 85))
        }
        let appended = now() - t0
        try writer.flush()
        let sustained = now() - t0
        let stats = writer.statistics
        try writer.close()
        row("append, 1 thread", rate(records, appended))
        row("sustained append + write, 1 thread", rate(records, sustained))
        row("queued record size in memory (struct, strings extra)", "\(MemoryLayout<EventRecord>.stride) bytes")
        row("bytes per record on disk", String(format: "%.1f", Double(stats.bytesWritten) / Double(records)))
        row("write batches (avg records per batch)", "\(stats.batches) (\(stats.batches == 0 ? 0 : records / Int(stats.batches)))")

        // 2. Several appending threads.
        let dir2 = root + "/multi"
        writer = try EventLogWriter(directory: dir2, options: options)
        let perThread = records / threads
        let shared = writer
        t0 = now()
        DispatchQueue.concurrentPerform(iterations: threads) { t in
            for n in 0..<perThread {
                shared.append(
                    .didChange, path: paths[(n + t) & 1023], actor: actor,
                    details: EventDetails(requestID: UInt64(n)))
            }
        }
        let multiAppend = now() - t0
        try writer.flush()
        let multiSustained = now() - t0
        try writer.close()
        row("append, \(threads) threads", rate(perThread * threads, multiAppend))
        row("sustained append + write, \(threads) threads", rate(perThread * threads, multiSustained))

        // 3. Reading and formatting what was stored.
        t0 = now()
        var count = 0
        var reader = try EventLogReader(directory: dir1)
        var stored: [EventRecord] = []
        stored.reserveCapacity(min(records, 200_000))
        while let r = try reader.next() {
            count += 1
            if stored.count < 200_000 { stored.append(r) }
        }
        row("read (decode + checksum)", rate(count, now() - t0))
        reader = try EventLogReader(directory: dir1, filter: try EventFilter(kindNames: [], pids: [], pathPatterns: ["**/report-1?.txt"]))
        t0 = now()
        count = 0
        while try reader.next() != nil { count += 1 }
        row("read with a path glob filter", rate(records, now() - t0))
        for style in EventFormatter.Style.allCases {
            let f = EventFormatter(style: style)
            var out: [UInt8] = []
            out.reserveCapacity(stored.count * 200)
            t0 = now()
            for r in stored { f.append(r, to: &out) }
            row("format \(style.rawValue)", rate(stored.count, now() - t0))
        }
        // For comparison: Foundation's encoder on the same records.
        let encoder = JSONEncoder()
        let sample = stored.prefix(50_000)
        t0 = now()
        for r in sample { _ = try encoder.encode(r) }
        row("JSONEncoder (comparison)", rate(sample.count, now() - t0))

        // 4. Append-to-follower latency, one record every 2 ms.
        let dir4 = root + "/follow"
        writer = try EventLogWriter(directory: dir4, options: options)
        let latencies = LatencyBox()
        let samples = 500
        let ready = DispatchSemaphore(value: 0)
        let finished = DispatchSemaphore(value: 0)
        let follower = Thread {
            defer { finished.signal() }
            guard let r = try? EventLogReader(directory: dir4, position: .end) else { return }
            ready.signal()
            try? r.follow(checkInterval: .milliseconds(100), shouldContinue: { latencies.count < samples }) { rec in
                if let sent = rec.details.requestID { latencies.add(now() - Double(sent) / 1e9) }
            }
        }
        follower.start()
        ready.wait()
        for _ in 0..<samples {
            writer.append(.granted, path: paths[0], details: EventDetails(requestID: UInt64(now() * 1e9)))
            usleep(2000)
        }
        finished.wait()
        try writer.close()
        let l = latencies.sorted
        if !l.isEmpty {
            row("append to follower latency p50 / p99 / max",
                String(format: "%.2f / %.2f / %.2f ms", l[l.count / 2] * 1e3, l[l.count * 99 / 100] * 1e3, l[l.count - 1] * 1e3))
        }
    }

    private static func now() -> Double {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
    }

    private static func rate(_ n: Int, _ seconds: Double) -> String {
        String(format: "%.0f records/s (%.3f s)", Double(n) / seconds, seconds)
    }

    private static func row(_ name: String, _ value: String) { print("| \(name) | \(value) |") }
}

private final class LatencyBox: @unchecked Sendable {
    private let lock = NSLock()
    private var values: [Double] = []
    func add(_ v: Double) { lock.withLock { values.append(v) } }
    var count: Int { lock.withLock { values.count } }
    var sorted: [Double] { lock.withLock { values.sorted() } }
}
