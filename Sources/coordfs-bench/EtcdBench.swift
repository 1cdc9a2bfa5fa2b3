// The etcd client's costs, against a real one-member etcd on loopback started for the run (its
// data in a temporary folder, stopped at the end): each call's round trip through the v3 JSON
// gateway (median, p99), how soon a change made by one client reaches another client's watch
// (the path every cross-node ask, answer and tell takes), and how soon a lease that stops being
// renewed is gone and its key's deletion seen by a watch (how fast a dead node is noticed).
// Build with `-c release` to measure: `swift run -c release coordfs-bench etcd`.
import ClusterKV
import EtcdKV
import EtcdTestSupport
import Foundation

enum EtcdBench {
    enum BenchError: Error { case usage(String) }

    /// `coordfs-bench etcd [--iterations N] [--ttl S]`
    static func run(_ args: [String]) async throws {
        var iterations = 2_000
        var ttl: Int64 = 2
        var index = 0
        while index < args.count {
            let value = index + 1 < args.count ? Int(args[index + 1]) : nil
            switch args[index] {
            case "--iterations": iterations = value ?? iterations; index += 2
            case "--ttl": ttl = Int64(value ?? Int(ttl)); index += 2
            default: throw BenchError.usage("unknown option \(args[index])")
            }
        }
        guard EtcdCluster.etcdPath() != nil else {
            print("## etcd client\n\n(etcd is not installed: `make deps` installs etcd-server)\n")
            return
        }
        let etcd = try EtcdCluster(size: 1)
        defer { etcd.stop() }
        let configuration = EtcdConfiguration(endpoints: etcd.endpoints)
        let a = try EtcdClusterStore(configuration)
        let b = try EtcdClusterStore(configuration)

        let key = Array("bench/k".utf8)
        let (lease, _) = try await a.grantLease(ttl: 60)
        var rows: [(String, Stats)] = []
        rows.append(("range of one key", try await measure(iterations) { _ in _ = try await a.range(key, prefix: false) }))
        rows.append(("put", try await measure(iterations) { i in try await a.put(key, Array("v\(i)".utf8), lease: 0) }))
        rows.append((
            "txn (a compare, a put with a lease)",
            try await measure(iterations) { i in
                _ = try await a.transaction(
                    [Compare(key: key, .greater, .version(0))], success: [.put(key: key + [0x31], value: [UInt8(i & 0xff)], lease: lease)],
                    failure: [])
            }
        ))
        rows.append(("lease keepalive", try await measure(iterations) { _ in _ = try await a.keepAlive(lease) }))

        // A put by client a, seen by client b's watch.
        let watched = Array("bench/w".utf8)
        let start = try await a.range(watched, prefix: false).revision + 1
        var iterator = b.watch(watched, prefix: false, fromRevision: start).makeAsyncIterator()
        var watchSamples: [UInt64] = []
        let clock = ContinuousClock()
        for i in 0..<min(iterations, 1_000) {
            let t = clock.now
            let revision = try await a.put(watched, Array("\(i)".utf8), lease: 0)
            var seen: Revision = 0
            while seen < revision, let batch = try await iterator.next() {
                seen = batch.events.last.map { if case .put(let kv) = $0 { kv.modRevision } else { revision } } ?? seen
            }
            watchSamples.append(nanoseconds(clock.now - t))
        }
        let watch = Stats(watchSamples)

        // A lease left to expire: from its last renewal to the deletion of its key seen by a watch.
        var expirySamples: [UInt64] = []
        for round in 0..<3 {
            let (dying, _) = try await a.grantLease(ttl: ttl)
            let k = Array("bench/dead/\(round)".utf8)
            let created = try await a.put(k, [1], lease: dying)
            _ = try await a.keepAlive(dying)
            let renewed = clock.now
            for try await batch in b.watch(k, prefix: false, fromRevision: created + 1) {
                if batch.events.contains(where: { if case .delete = $0 { true } else { false } }) { break }
            }
            expirySamples.append(nanoseconds(clock.now - renewed))
        }
        try await a.revokeLease(lease)
        try await a.shutdown()
        try await b.shutdown()

        func ms(_ ns: UInt64) -> String { String(format: "%.2f ms", Double(ns) / 1e6) }
        print("## etcd client (v3 JSON gateway, one member on loopback)")
        print("")
        print("| benchmark | result |")
        print("|---|---|")
        for (name, stats) in rows {
            print("| \(name), \(stats.count) sequential calls: median / p99 / max | \(ms(stats.median)) / \(ms(stats.p99)) / \(ms(stats.max)) |")
        }
        print("| put by one client until another client's watch has it, \(watch.count) times: median / p99 / max | \(ms(watch.median)) / \(ms(watch.p99)) / \(ms(watch.max)) |")
        print("| lease of TTL \(ttl) s no longer renewed: last renewal until its key's deletion is watched, 3 times (target ≤ TTL + 1 s) | \(expirySamples.map { String(format: "%.2f s", Double($0) / 1e9) }.joined(separator: ", ")) |")
        print("")
    }

    struct Stats {
        var count: Int, median: UInt64, p99: UInt64, max: UInt64
        init(_ samples: [UInt64]) {
            let sorted = samples.sorted()
            count = sorted.count
            median = sorted.isEmpty ? 0 : sorted[sorted.count / 2]
            p99 = sorted.isEmpty ? 0 : sorted[min(sorted.count - 1, sorted.count * 99 / 100)]
            max = sorted.last ?? 0
        }
    }

    static func measure(_ iterations: Int, _ body: (Int) async throws -> Void) async throws -> Stats {
        let clock = ContinuousClock()
        for i in 0..<min(100, iterations) { try await body(i) }  // warm the connection
        var samples: [UInt64] = []
        samples.reserveCapacity(iterations)
        for i in 0..<iterations {
            let t = clock.now
            try await body(i)
            samples.append(nanoseconds(clock.now - t))
        }
        return Stats(samples)
    }

    static func nanoseconds(_ d: Duration) -> UInt64 {
        UInt64(d.components.seconds) * 1_000_000_000 + UInt64(d.components.attoseconds / 1_000_000_000)
    }
}
