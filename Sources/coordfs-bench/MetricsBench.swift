// What the Prometheus metrics (`-o metrics=`) cost per FUSE request, measured so that the noise of
// a shared machine cannot hide it: the nanoseconds the daemon's real recording code takes (a tight
// loop over it, timed in the thread's own CPU time, the best of several repetitions), divided by the
// time one FUSE request of the metadata workload takes in the same run, through an in-process
// mount with coordination, the event log and metrics on (the defaults plus metrics).
//   - the FUSE request counter (`FuseRequestCounters.count`, one relaxed add), in the workload's
//     own mix of operations, alone and with two threads counting on the same counters;
//   - the coordination counts (`DaemonMetrics.eventSink`), replaying the workload's own events;
//   - a scrape (every metric, /proc/self read), spread over the requests of one second.
// `coordfs-bench metrics [--files N] [--rounds R] [--dir DIR] [--iterations N]`
import Coordination
import CoordFS
import FuseKit
import Foundation
import Glibc
import Synchronization

enum MetricsBench {
    struct Options {
        var files = 10_000
        var rounds = 5
        var dir = "/var/tmp"
        var iterations = 4_000_000
        mutating func parse(_ args: [String]) throws {
            var i = args.makeIterator()
            while let a = i.next() {
                switch a {
                case "--files": files = Int(i.next() ?? "") ?? files
                case "--rounds": rounds = Int(i.next() ?? "") ?? rounds
                case "--dir": dir = i.next() ?? dir
                case "--iterations": iterations = Int(i.next() ?? "") ?? iterations
                default: throw MountBench.BenchError("unknown option \(a)")
                }
            }
        }
    }

    /// Keeps the coordinator's events of a round (for the replay), then hands them on.
    final class Capture: CoordinationEventSink, @unchecked Sendable {
        let next: (any CoordinationEventSink)?
        let events = Mutex<[CoordinationEvent]>([])
        init(next: (any CoordinationEventSink)?) { self.next = next }
        func record(_ event: CoordinationEvent) {
            events.withLock { $0.append(event) }
            next?.record(event)
        }
    }

    static func run(_ args: [String]) async throws {
        var o = Options()
        try o.parse(args)
        // Seconds inside python (no interpreter start): N creates, N stats, N unlinks.
        let workload = "python3 -c \"import os, time\nnames = ['f%d' % i for i in range(\(o.files))]\nt = time.perf_counter()\n"
            + "for p in names: os.close(os.open(p, os.O_CREAT | os.O_WRONLY, 0o644))\nfor p in names: os.stat(p)\nfor p in names: os.unlink(p)\n"
            + "print(time.perf_counter() - t)\""
        let root = o.dir + "/coordfs-bench-\(getpid())-metrics"
        for sub in ["/backing", "/mnt"] {
            try? FileManager.default.removeItem(atPath: root + sub)
            try FileManager.default.createDirectory(atPath: root + sub, withIntermediateDirectories: true)
        }
        defer { try? FileManager.default.removeItem(atPath: root) }
        var options = MountOptions()
        options.metrics = MetricsAddress(host: "127.0.0.1", port: 0)
        let daemon = try Daemon(plan: MountPreflight.plan(backing: root + "/backing", mountpoint: root + "/mnt", options: options))
        try daemon.startInProcess()
        defer { daemon.stopAndWait() }
        guard let counters = daemon.requestCounters, let metrics = daemon.metrics else { throw MountBench.BenchError("no metrics on the mount") }
        let mnt = root + "/mnt"
        func requests() -> [UInt64] { FuseOperation.allCases.map { counters.value($0) } }

        // A round that keeps its events and its operations: the mix the loops below replay.
        let sink = daemon.coordinator.eventSink
        let capture = Capture(next: sink)
        daemon.coordinator.eventSink = capture
        let before = requests()
        _ = try output(workload, in: mnt)
        let perOperation = zip(requests(), before).map { $0 - $1 }
        daemon.coordinator.eventSink = sink
        let events = capture.events.withLock { $0 }
        let captured = perOperation.reduce(0, +)
        guard captured > 0, !events.isEmpty else { throw MountBench.BenchError("the workload sent no requests") }
        let eventsPerRequest = Double(events.count) / Double(captured)
        // 1024 operations in the workload's proportions.
        var mix: [FuseOperation] = []
        for (op, n) in zip(FuseOperation.allCases, perOperation) where n > 0 {
            mix += Array(repeating: op, count: max(1, Int((Double(n) / Double(captured) * 1024).rounded())))
        }
        while mix.count < 1024 { mix.append(mix[mix.count % max(1, mix.count)]) }
        mix = Array(mix.prefix(1024))

        // The workload, timed: wall seconds (inside python), the daemon's CPU (this process), requests.
        var wallPerRequest: [Double] = [], cpuPerRequest: [Double] = []
        for _ in 0..<o.rounds {
            sync()
            let r0 = requests().reduce(0, +), c0 = cpuSeconds()
            let wall = Double(try output(workload, in: mnt).trimmingCharacters(in: .whitespacesAndNewlines)) ?? .nan
            let n = Double(requests().reduce(0, +) - r0), cpu = cpuSeconds() - c0
            wallPerRequest.append(wall / n * 1e9)
            cpuPerRequest.append(cpu / n * 1e9)
        }
        let wallNs = median(wallPerRequest), cpuNs = median(cpuPerRequest)

        // The recording code, in tight loops (best of 5).
        let fresh = FuseRequestCounters()
        let countNs = best { fuseLoop(fresh, mix, o.iterations) }
        let countNs2 = best { contended(fresh, mix, o.iterations) }
        let metricsSink = DaemonMetrics().eventSink(next: nil)
        // The daemon counts an event the coordinator has just built (in cache): a window of the
        // workload's events (100 files' worth, every kind in its proportion) replayed, not all of them.
        let window = Array(events.prefix(events.count / o.files * 100))
        let sinkNs = best { sinkLoop(metricsSink, window, o.iterations) }
        let sinkColdNs = best { sinkLoop(metricsSink, events, o.iterations) }
        var scrapes: [Double] = []
        for _ in 0..<30 {
            let t = threadCPU()
            _ = metrics.scrape(daemon: daemon)
            scrapes.append(threadCPU() - t)
        }
        let scrapeNs = median(scrapes)
        // A scrape a second (Prometheus's default is a minute): its share of each request's time.
        let scrapePerRequest = scrapeNs * wallNs / 1e9
        let perRequest = max(countNs, countNs2) + eventsPerRequest * sinkNs + scrapePerRequest

        print("| measured (one run; load average \(loadAverage())) | value |")
        print("|---|---|")
        print(String(format: "| the metadata workload (create+stat+unlink %d files), coordination, log and metrics on | %.1f FUSE requests and %.2f coordination events per file; %.2f events per request |",
                     o.files, Double(captured) / Double(o.files), Double(events.count) / Double(o.files), eventsPerRequest))
        print(String(format: "| time per FUSE request (median of %d rounds) | wall %.2f µs; daemon CPU %.2f µs |", o.rounds, wallNs / 1000, cpuNs / 1000))
        print(String(format: "| FUSE request counter (one relaxed add, the workload's mix; thread CPU time, best of 5 × %d) | %.2f ns alone; %.2f ns with two threads counting at once |",
                     o.iterations, countNs, countNs2))
        print(String(format: "| coordination counts (the metrics sink; the workload's events replayed, %d at a time as the daemon has them in cache; thread CPU time, best of 5) | %.2f ns per event, %.2f ns per request (all %d at once, out of cache: %.2f ns per event) |",
                     window.count, sinkNs, sinkNs * eventsPerRequest, events.count, sinkColdNs))
        print(String(format: "| a scrape (every metric, /proc/self read; thread CPU time, median of 30) | %.0f µs: at one a second %.3f%% of the time, %.2f ns per request |",
                     scrapeNs / 1000, scrapeNs / 1e9 * 100, scrapePerRequest))
        print(String(format: "| **metrics per FUSE request** (the slower counter + events + scrape share) | **%.1f ns: %.3f%% of the wall time per request, %.3f%% of the daemon's CPU per request** (target ≤ 1%%) |",
                     perRequest, perRequest / wallNs * 100, perRequest / cpuNs * 100))
    }

    // MARK: the loops

    @inline(never)
    static func fuseLoop(_ counters: FuseRequestCounters, _ mix: [FuseOperation], _ n: Int) -> Double {
        let t = threadCPU()
        mix.withUnsafeBufferPointer { ops in
            for i in 0..<n { counters.count(ops[i & 1023]) }
        }
        return (threadCPU() - t) / Double(n)
    }

    /// Two threads counting at once on the same counters (two FUSE workers on two cores).
    static func contended(_ counters: FuseRequestCounters, _ mix: [FuseOperation], _ n: Int) -> Double {
        let results = Mutex<[Double]>([])
        let group = DispatchGroup()
        for _ in 0..<2 {
            group.enter()
            Thread.detachNewThread {
                let ns = fuseLoop(counters, mix, n)
                results.withLock { $0.append(ns) }
                group.leave()
            }
        }
        group.wait()
        return results.withLock { $0.max() ?? .nan }
    }

    @inline(never)
    static func sinkLoop(_ sink: any CoordinationEventSink, _ events: [CoordinationEvent], _ n: Int) -> Double {
        let t = threadCPU()
        events.withUnsafeBufferPointer { e in
            var k = 0
            for _ in 0..<n {
                sink.record(e[k])
                k += 1
                if k == e.count { k = 0 }
            }
        }
        return (threadCPU() - t) / Double(n)
    }

    // MARK: helpers

    static func best(_ body: () -> Double) -> Double { (0..<5).map { _ in body() }.min() ?? .nan }
    static func median(_ v: [Double]) -> Double { let s = v.sorted(); return s.isEmpty ? .nan : s[s.count / 2] }

    static func now() -> Double {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Double(ts.tv_sec) * 1e9 + Double(ts.tv_nsec)
    }

    /// The calling thread's CPU time: what a loop costs, without the time other processes took the
    /// core meanwhile (on a loaded machine the wall clock would count theirs too).
    static func threadCPU() -> Double {
        var ts = timespec()
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts)
        return Double(ts.tv_sec) * 1e9 + Double(ts.tv_nsec)
    }

    /// This process's CPU seconds (the in-process daemon's threads).
    static func cpuSeconds() -> Double {
        var u = rusage()
        getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &u)
        return Double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + Double(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6
    }

    static func loadAverage() -> String {
        ((try? String(contentsOfFile: "/proc/loadavg", encoding: .utf8)) ?? "?").split(separator: " ").prefix(3).joined(separator: " ")
    }

    /// A shell command's standard output, run in `dir`.
    static func output(_ command: String, in dir: String) throws -> String {
        let p = Process()
        let pipe = Pipe()
        p.executableURL = URL(fileURLWithPath: "/bin/sh")
        p.arguments = ["-c", command]
        p.currentDirectoryURL = URL(fileURLWithPath: dir)
        p.standardOutput = pipe
        try p.run()
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        guard p.terminationStatus == 0 else { throw MountBench.BenchError("`\(command)` failed (\(p.terminationStatus))") }
        return String(decoding: data, as: UTF8.self)
    }
}
