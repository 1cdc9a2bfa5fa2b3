import DocumentStore
import Foundation
import Glibc
import Linux

/// Measures what keeping a version costs against file size, for each snapshot method the
/// filesystem under `directory` offers, through the store's public calls (so the SQLite commit is
/// included). `coordfs-bench store` runs it.
enum SnapshotBenchmark {
    /// What the snapshot is kept before.
    enum Operation: String, Sendable, Hashable, CaseIterable {
        /// A rename over the document (`preserveBeforeReplace`; a deletion costs the same).
        case replace
        /// An in-place write (`preserveBeforeInPlaceWrite`).
        case inPlace = "in-place write"
    }

    struct Measurement: Sendable, Hashable {
        var filesystem: String
        var operation: Operation
        var method: SnapshotMethod
        var size: Int64
        /// Median wall time of one snapshot, in nanoseconds.
        var medianNanoseconds: UInt64
        /// Free space the first snapshot consumed (statvfs, after sync), in bytes.
        var extraBytes: Int64
        /// Median time of a second in-place write to the same base (should be ~0: nothing kept).
        var repeatWriteNanoseconds: UInt64?
    }

    /// Runs the measurements; `repetitions` snapshots per (size, operation, method), each of a
    /// fresh file state. Every snapshot is a clone or a copy (the store keeps no hard links).
    static func run(directory: String, sizes: [Int64], repetitions: Int = 3) throws -> [Measurement] {
        var results: [Measurement] = []
        for size in sizes {
            for operation in Operation.allCases {
                for method in [SnapshotMethod.reflink, .copy] {
                    if let m = try measure(directory: directory, size: size, operation: operation, method: method, repetitions: repetitions) {
                        results.append(m)
                    }
                }
            }
        }
        return results
    }

    private static func measure(directory: String, size: Int64, operation: Operation, method: SnapshotMethod, repetitions: Int) throws -> Measurement? {
        let root = directory + "/snapshot-bench-\(UInt64.random(in: 0...UInt64.max))"
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        defer { removeTree(root) }
        let configuration = StoreConfiguration(
            retention: Retention(maxVersionsPerDocument: 1000, maxTotalBytes: .max),
            unpresentedFiles: .always, eagerBaseWhenCloneable: false, allowReflink: method != .copy)
        let store = try DocumentStore(backingRoot: root, stateDirectory: root + "/.coordfs/store", configuration: configuration)
        if method == .reflink && !store.cloneSupported { return nil }
        try fill(root + "/doc.bin", size: size)
        var times: [UInt64] = []
        var extra: Int64 = 0
        for round in 0..<repetitions {
            // A new mtime is a new file state: the store keeps it again instead of reusing.
            try touch(root + "/doc.bin", round: round)
            let free = freeBytes(root)
            let started = monotonicNanoseconds()
            let snapshot = operation == .replace ? try store.preserveBeforeReplace("doc.bin") : try store.preserveBeforeInPlaceWrite("doc.bin")
            times.append(monotonicNanoseconds() - started)
            guard snapshot?.version.method == method else {
                throw StoreBench.BenchError("benchmark expected \(method), got \(String(describing: snapshot?.version.method))")
            }
            if round == 0 { extra = free - freeBytes(root) }
        }
        var repeatWrite: UInt64?
        if operation == .inPlace {
            // A presenter's base: the first in-place write pays, the next ones do not.
            let presenter = StorePresenterID("bench")
            try touch(root + "/doc.bin", round: repetitions)
            try store.register(presenter, path: "doc.bin")
            _ = try store.preserveBeforeInPlaceWrite("doc.bin")
            var repeats: [UInt64] = []
            for _ in 0..<repetitions {
                let started = monotonicNanoseconds()
                let none = try store.preserveBeforeInPlaceWrite("doc.bin")
                repeats.append(monotonicNanoseconds() - started)
                precondition(none == nil, "a second write to the same base kept something")
            }
            repeatWrite = repeats.sorted()[repeats.count / 2]
        }
        return Measurement(
            filesystem: store.filesystemName, operation: operation, method: method, size: size,
            medianNanoseconds: times.sorted()[times.count / 2], extraBytes: extra, repeatWriteNanoseconds: repeatWrite)
    }

    /// Median cost of the store calls the mount makes for a file that is no document
    /// (`preserveBeforeInPlaceWrite` then `noteExternalChange`), in nanoseconds.
    static func callOverheadForUnpresentedFile(directory: String, calls: Int = 2000) throws -> UInt64 {
        let root = directory + "/call-bench-\(UInt64.random(in: 0...UInt64.max))"
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        defer { removeTree(root) }
        let store = try DocumentStore(backingRoot: root, stateDirectory: root + "/.coordfs/store",
                                      configuration: StoreConfiguration(unpresentedFiles: .never))
        try fill(root + "/plain.txt", size: 4096)
        var times: [UInt64] = []
        for _ in 0..<calls {
            let started = monotonicNanoseconds()
            _ = try store.preserveBeforeInPlaceWrite("plain.txt")
            _ = try store.noteExternalChange("plain.txt", .changed(before: nil, after: nil))
            times.append(monotonicNanoseconds() - started)
        }
        return times.sorted()[times.count / 2]
    }

    /// A Markdown table of measurements.
    static func table(_ results: [Measurement]) -> String {
        var out = "| filesystem | before | method | size | snapshot (median) | extra space | 2nd write to same base |\n|---|---|---|---:|---:|---:|---:|\n"
        for r in results {
            out += "| \(r.filesystem) | \(r.operation.rawValue) | \(r.method) | \(bytes(r.size)) | \(duration(r.medianNanoseconds)) | \(bytes(r.extraBytes)) | \(r.repeatWriteNanoseconds.map(duration) ?? "n/a") |\n"
        }
        return out
    }

    static func bytes(_ n: Int64) -> String {
        let magnitude = abs(n)
        if magnitude >= 1 << 30 { return String(format: "%.2f GiB", Double(n) / Double(1 << 30)) }
        if magnitude >= 1 << 20 { return String(format: "%.1f MiB", Double(n) / Double(1 << 20)) }
        if magnitude >= 1 << 10 { return String(format: "%.0f KiB", Double(n) / 1024) }
        return "\(n) B"
    }

    static func duration(_ ns: UInt64) -> String {
        if ns >= 1_000_000_000 { return String(format: "%.2f s", Double(ns) / 1e9) }
        if ns >= 1_000_000 { return String(format: "%.2f ms", Double(ns) / 1e6) }
        return String(format: "%.0f µs", Double(ns) / 1e3)
    }

    private static func fill(_ path: String, size: Int64) throws {
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        try check(fd, "open", path)
        defer { close(fd) }
        var chunk = [UInt8](repeating: 0, count: 1 << 20)
        for i in chunk.indices { chunk[i] = UInt8(truncatingIfNeeded: i &* 2_654_435_761 >> 7) }
        var written: Int64 = 0
        while written < size {
            let n = Int(min(Int64(chunk.count), size - written))
            let done = retryingEINTR { chunk.withUnsafeBytes { write(fd, $0.baseAddress!, n) } }
            try check(Int32(done < 0 ? -1 : 0), "write", path)
            written += Int64(done)
        }
        try check(fsync(fd), "fsync", path)
    }

    private static func touch(_ path: String, round: Int) throws {
        var times = [timespec(tv_sec: 1_000_000 + round, tv_nsec: 0), timespec(tv_sec: 1_000_000 + round, tv_nsec: 0)]
        try check(utimensat(AT_FDCWD, path, &times, 0), "utimensat", path)
    }

    private static func check(_ result: Int32, _ call: String, _ path: String) throws {
        if result < 0 { throw StoreBench.BenchError("\(call) \(path): \(String(cString: strerror(errno)))") }
    }

    private static func monotonicNanoseconds() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
    }

    private static func freeBytes(_ path: String) -> Int64 {
        sync()
        var st = statvfs()
        guard statvfs(path, &st) == 0 else { return 0 }
        return Int64(st.f_bfree) * Int64(st.f_frsize)
    }

    private static func removeTree(_ path: String) {
        try? FileManager.default.removeItem(atPath: path)
    }
}
