// The coordinated mount's overhead: the metadata workload (create+stat+unlink) and a source-tree
// unpack+delete through an in-process mount, with coordination off (the bare passthrough), on with no
// presenters, and on with N presenters registered on other files; and the median ask-to-answer latency
// of an in-process presenter. `coordfs-bench mount [--files N] [--presenters N] [--tarball PATH] [--dir DIR]`
import Coordination
import CoordFS
import Foundation
import Glibc
import Synchronization

enum MountBench {
    struct Options {
        var files = 10_000
        var presenters = 10_000
        var tarball: String? = nil
        var dir = "/var/tmp"
        var rounds = 3
        mutating func parse(_ args: [String]) throws {
            var i = args.makeIterator()
            while let a = i.next() {
                switch a {
                case "--files": files = Int(i.next() ?? "") ?? files
                case "--presenters": presenters = Int(i.next() ?? "") ?? presenters
                case "--tarball": tarball = i.next()
                case "--dir": dir = i.next() ?? dir
                case "--rounds": rounds = Int(i.next() ?? "") ?? rounds
                default: throw BenchError("unknown option \(a)")
                }
            }
        }
    }
    struct BenchError: Error, CustomStringConvertible { let description: String; init(_ d: String) { description = d } }

    /// A presenter that answers at once and measures nothing itself (the coordinator's events do).
    final class QuietPresenter: FilePresenter, @unchecked Sendable {
        let path: ItemPath
        init(_ path: ItemPath) { self.path = path }
        var presentedItemPath: ItemPath? { path }
    }

    static func run(_ args: [String]) async throws {
        var o = Options()
        try o.parse(args)
        let tarball = try o.tarball ?? makeTarball(in: o.dir)
        let metadata = "python3 -c \"import os\nfor i in range(\(o.files)):\n  p='f%d' % i\n  open(p, 'w').close(); os.stat(p); os.unlink(p)\""
        let unpack = "tar xf \(tarball) && rm -rf usr"

        var rows: [(String, Double, Double)] = []
        var results: [String: (Double, Double)] = [:]
        for (name, coordination, presenters) in [("passthrough (coordination off)", false, 0),
                                                  ("coordinated, no presenters", true, 0),
                                                  ("coordinated, \(o.presenters) presenters on other files", true, o.presenters)] {
            var best = (Double.infinity, Double.infinity)
            for _ in 0..<o.rounds {
                let r = try withMount(dir: o.dir, coordination: coordination, presenters: presenters) { mnt, _ in
                    settle(tarball)
                    let m = try time(metadata, in: mnt)
                    settle(tarball)
                    return (m, try time(unpack, in: mnt))
                }
                best = (min(best.0, r.0), min(best.1, r.1))
            }
            results[name] = best
            rows.append((name, best.0, best.1))
        }
        let base = rows[0]
        print("| mount | create+stat+unlink \(o.files) files | ratio | unpack+delete \(tarball.split(separator: "/").last ?? "") | ratio |")
        print("|---|---|---|---|---|")
        for r in rows {
            print(String(format: "| %@ | %.2f s | %.3f | %.2f s | %.3f |", r.0, r.1, r.1 / base.1, r.2, r.2 / base.2))
        }
        // Ask-to-answer latency of an in-process presenter: 500 reads of a presented file.
        let latencies = try withMount(dir: o.dir, coordination: true, presenters: 0) { mnt, daemon -> [UInt64] in
            let collected = Mutex<[UInt64]>([])
            daemon.coordinator.eventSink = ClosureEventSink { e in
                if case .presenterAnswered(_, _, let nanos) = e.kind { collected.withLock { $0.append(nanos) } }
            }
            FileManager.default.createFile(atPath: mnt + "/presented.txt", contents: Data("x".utf8))
            _ = try daemon.coordinator.addFilePresenter(QuietPresenter(try ItemPath("presented.txt")))
            _ = try time("for i in $(seq 500); do cat presented.txt > /dev/null; done", in: mnt)
            return collected.withLock { $0 }.sorted()
        }
        if !latencies.isEmpty {
            let median = latencies[latencies.count / 2], p99 = latencies[min(latencies.count - 1, latencies.count * 99 / 100)]
            print("")
            print(String(format: "In-process presenter, ask to answer (%d asks): median %.1f µs, p99 %.1f µs",
                         latencies.count, Double(median) / 1000, Double(p99) / 1000))
        }
    }

    static func withMount<T>(dir: String, coordination: Bool, presenters: Int, _ body: (String, Daemon) throws -> T) throws -> T {
        let root = dir + "/coordfs-bench-\(getpid())"
        try? FileManager.default.removeItem(atPath: root)
        try FileManager.default.createDirectory(atPath: root + "/backing", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: root + "/mnt", withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: root) }
        var options = MountOptions()
        options.coordination.enabled = coordination
        options.eventLog.enabled = false
        let daemon = try Daemon(plan: MountPreflight.plan(backing: root + "/backing", mountpoint: root + "/mnt", options: options))
        for i in 0..<presenters {
            _ = try daemon.coordinator.addFilePresenter(QuietPresenter(try ItemPath("other/d\(i % 100)/doc\(i).txt")))
        }
        try daemon.startInProcess()
        defer { daemon.stopAndWait() }
        return try body(root + "/mnt", daemon)
    }

    /// Before a metadata workload: nothing dirty, no cached inode-table blocks (ext4 skips inodes
    /// deleted in the last minute while their block is cached: that scan dominated whichever run came
    /// next), and the tarball read back into memory.
    static func settle(_ tarball: String) {
        sync()
        if let f = fopen("/proc/sys/vm/drop_caches", "w") { fputs("3\n", f); fclose(f) }
        _ = try? time("cat \(tarball) > /dev/null", in: "/")
    }

    /// Seconds to run a shell command in `dir`.
    static func time(_ command: String, in dir: String) throws -> Double {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/bin/sh")
        p.arguments = ["-c", command]
        p.currentDirectoryURL = URL(fileURLWithPath: dir)
        let start = Date()
        try p.run()
        p.waitUntilExit()
        guard p.terminationStatus == 0 else { throw BenchError("`\(command)` failed (\(p.terminationStatus))") }
        return Date().timeIntervalSince(start)
    }

    static func makeTarball(in dir: String) throws -> String {
        let path = dir + "/coordfs-bench-include.tar"
        if !FileManager.default.fileExists(atPath: path) {
            _ = try time("tar cf \(path) /usr/include 2>/dev/null", in: "/")
        }
        return path
    }
}
