// FUSE requests per file, by operation, for each workload `make bench` runs through the mount
// (issue 23 item 2): an in-process coordfs mount with its defaults (coordination, store, backing
// watcher, passthrough; the event log off: it adds no request), each workload run as `bench/run.sh`
// runs it, and the daemon's own request counters (FuseKit's `FuseRequestCounters`, the ones the
// metrics endpoint serves) read before and after. What the kernel answered from its caches never
// reaches the counters.
// `coordfs-bench requests [--files N] [--size-mb N] [--dir DIR] [--options O,...] [--privileges]`
// (`--privileges`: also rewrites, chowns and truncates of the small files, where the kernel asks
// `security.capability`; docs/benchmarks.md, "Where they come from").
import CoordFS
import Foundation
import FuseKit
import Glibc

enum RequestsBench {
    struct Options {
        var files = 2_000
        var sizeMB = 64
        var dir = "/var/tmp"
        var mountOptions: [String] = []
        var privileges = false
        mutating func parse(_ args: [String]) throws {
            var i = args.makeIterator()
            while let a = i.next() {
                switch a {
                case "--files": files = Int(i.next() ?? "") ?? files
                case "--size-mb": sizeMB = Int(i.next() ?? "") ?? sizeMB
                case "--dir": dir = i.next() ?? dir
                case "--options": mountOptions.append(i.next() ?? "")
                case "--privileges": privileges = true
                default: throw MountBench.BenchError("unknown option \(a)")
                }
            }
        }
    }

    /// One workload step: what it runs in the mount, and how many files it touches.
    struct Step {
        let name: String
        let files: Int
        let command: String
    }

    static func run(_ args: [String]) async throws {
        var o = Options()
        try o.parse(args)
        let tarball = o.dir + "/coordfs-bench-requests-include.tar"
        if !FileManager.default.fileExists(atPath: tarball) {
            _ = try MountBench.time("tar -C /usr -cf \(tarball) include", in: "/")
        }
        let entries = Int(try shell("tar tf \(tarball) | wc -l").trimmingCharacters(in: .whitespacesAndNewlines)) ?? 1
        let n = o.files
        // The phases of bench/run.sh's smallfiles workload, one by one (python3, as there).
        func python(_ body: String) -> String {
            "python3 -c \"import os\nfor i in range(\(n)):\n  \(body)\""
        }
        let steps: [Step] = [
            Step(name: "smallfiles: create (100 B, O_CREAT+O_EXCL, write, close)", files: n,
                 command: "mkdir small && cd small && " + python("fd = os.open('f%d' % i, os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o644); os.write(fd, b'x' * 100); os.close(fd)")),
            Step(name: "smallfiles: stat", files: n, command: "cd small && " + python("os.stat('f%d' % i)")),
        ] + (!o.privileges ? [] : [
            Step(name: "rewrite: open, write 1 byte, close", files: n, command: "cd small && " + python("fd = os.open('f%d' % i, os.O_WRONLY); os.write(fd, b'y'); os.close(fd)")),
            Step(name: "rewrite again", files: n, command: "cd small && " + python("fd = os.open('f%d' % i, os.O_WRONLY); os.write(fd, b'y'); os.close(fd)")),
            Step(name: "chown to its owner", files: n, command: "cd small && " + python("os.chown('f%d' % i, 0, 0)")),
            Step(name: "chown to its owner again", files: n, command: "cd small && " + python("os.chown('f%d' % i, 0, 0)")),
            Step(name: "truncate", files: n, command: "cd small && " + python("os.truncate('f%d' % i, 10)")),
            Step(name: "open O_TRUNC", files: n, command: "cd small && " + python("os.close(os.open('f%d' % i, os.O_WRONLY | os.O_TRUNC))")),
            Step(name: "stat, open, write twice, close", files: n, command: "cd small && " + python("os.stat('f%d' % i); fd = os.open('f%d' % i, os.O_WRONLY); os.write(fd, b'y'); os.write(fd, b'y'); os.close(fd)")),
        ]) + [
            Step(name: "smallfiles: unlink", files: n, command: "cd small && " + python("os.unlink('f%d' % i)") + " && cd .. && rmdir small"),
            Step(name: "stat of a missing name, twice", files: n,
                 command: python("[os.path.exists('missing%d' % i) for _ in range(2)]")),
            Step(name: "tar: unpack /usr/include", files: entries, command: "mkdir tree && tar -C tree -xf \(tarball)"),
            Step(name: "ls -l of the tree (warm)", files: entries, command: "ls -lR tree > /dev/null"),
            Step(name: "ls -l of the tree again", files: entries, command: "ls -lR tree > /dev/null"),
            Step(name: "grep -r of the tree (every file opened, read, closed)", files: entries, command: "grep -r coordfs-bench-no-such-text tree > /dev/null; true"),
            Step(name: "tar: rm -rf", files: entries, command: "rm -rf tree"),
            Step(name: "seqwrite: \(o.sizeMB) MiB in 1 MiB blocks, fsync", files: 1,
                 command: "dd if=/dev/zero of=seq.dat bs=1M count=\(o.sizeMB) conv=fsync status=none"),
            Step(name: "seqread: \(o.sizeMB) MiB in 1 MiB blocks", files: 1, command: "dd if=seq.dat of=/dev/null bs=1M status=none && rm seq.dat"),
        ]

        let root = o.dir + "/coordfs-bench-requests-\(getpid())"
        for sub in ["/backing", "/mnt"] { try FileManager.default.createDirectory(atPath: root + sub, withIntermediateDirectories: true) }
        defer { try? FileManager.default.removeItem(atPath: root) }
        var options = try MountOptions.parse(o.mountOptions)
        options.eventLog.enabled = false
        let daemon = try Daemon(plan: MountPreflight.plan(backing: root + "/backing", mountpoint: root + "/mnt", options: options))
        try daemon.startInProcess()
        defer { daemon.stopAndWait() }
        guard let counters = daemon.requestCounters else { throw MountBench.BenchError("the mount has no request counters") }
        func snapshot() -> [UInt64] { FuseOperation.allCases.map { counters.value($0) } }

        var rows: [(Step, [Double])] = []
        for step in steps {
            sync()
            usleep(200_000)   // the previous step's late RELEASEs and FORGETs
            let before = snapshot()
            _ = try MountBench.time(step.command, in: root + "/mnt")
            usleep(200_000)
            let after = snapshot()
            rows.append((step, zip(after, before).map { Double($0 - $1) / Double(step.files) }))
        }
        let shown = FuseOperation.allCases.filter { op in rows.contains { $0.1[op.rawValue] >= 0.005 } }
        print("## FUSE requests per file")
        print("")
        print("`coordfs-bench requests`: each workload of `make bench` through an in-process coordfs mount with its")
        print("defaults\(o.mountOptions.isEmpty ? "" : " and `-o \(o.mountOptions.joined(separator: ","))`") (the event log off: it sends no request), the daemon's request counters")
        print("(the metrics endpoint's `coordfs_fuse_requests_total`) read before and after each step, divided by")
        print("the files the step touched (\(n) for smallfiles, \(entries) entries of the /usr/include tarball for tar).")
        print("What the kernel answers from its caches never reaches the daemon.")
        print("")
        print("| workload | files | all | " + shown.map(\.name).joined(separator: " | ") + " |")
        print("|---|---:|---:|" + String(repeating: "---:|", count: shown.count))
        for (step, perFile) in rows {
            let total = perFile.reduce(0, +)
            print("| \(step.name) | \(step.files) | \(format(total)) | " + shown.map { format(perFile[$0.rawValue]) }.joined(separator: " | ") + " |")
        }
        print("")
    }

    static func format(_ x: Double) -> String { x < 0.005 ? "0" : String(format: "%.2f", x) }

    static func shell(_ command: String) throws -> String {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/bin/sh")
        p.arguments = ["-c", command]
        let pipe = Pipe()
        p.standardOutput = pipe
        try p.run()
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        return String(decoding: data, as: UTF8.self)
    }
}
