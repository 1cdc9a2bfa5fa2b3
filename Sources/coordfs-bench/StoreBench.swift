// The document store's snapshot cost against file size, before a rename over (or a deletion) and
// before an in-place write, for each method the filesystem offers: reflink (FICLONE, where the
// filesystem clones) and copy (elsewhere; the store keeps no hard links), on the machine's disk (ext4) and on
// a small XFS image with reflink=1 on a loop device when this runs as root with loop devices.
// Each figure goes through the store's public calls, SQLite commit included.
// `coordfs-bench store [--sizes 1,16,128,1024] [--dir DIR] [--repetitions N] [--no-xfs]`
import DocumentStore
import Foundation
import Glibc

enum StoreBench {
    struct Options {
        /// MiB.
        var sizes: [Int64] = [1, 16, 128, 1024]
        var dir = "/var/tmp"
        var repetitions = 3
        var xfs = true
        mutating func parse(_ args: [String]) throws {
            var i = args.makeIterator()
            while let a = i.next() {
                switch a {
                case "--sizes":
                    let list = (i.next() ?? "").split(separator: ",").compactMap { Int64($0) }
                    guard !list.isEmpty, list.allSatisfy({ $0 > 0 }) else { throw BenchError("--sizes expects MiB, comma-separated") }
                    sizes = list
                case "--dir": dir = i.next() ?? dir
                case "--repetitions":
                    guard let n = Int(i.next() ?? ""), n > 0 else { throw BenchError("--repetitions expects a positive number") }
                    repetitions = n
                case "--no-xfs": xfs = false
                default: throw BenchError("unknown option \(a) (--sizes, --dir, --repetitions, --no-xfs)")
                }
            }
        }
    }
    struct BenchError: Error, CustomStringConvertible { let description: String; init(_ d: String) { description = d } }

    static func run(_ args: [String]) async throws {
        var o = Options()
        try o.parse(args)
        let bytes = o.sizes.map { $0 << 20 }
        print("## Document store: snapshot cost against file size\n")
        print("Median of \(o.repetitions) snapshots per row through the store's public calls (SQLite commit included); extra space is what the first snapshot took from the filesystem; the last column is a second in-place write to the same base (nothing kept).\n")
        var results = try SnapshotBenchmark.run(directory: o.dir, sizes: bytes, repetitions: o.repetitions)
        var note = ""
        if o.xfs {
            if let reason = XFSImage.unavailableReason() {
                note = "XFS reflink image skipped: \(reason)."
            } else {
                let image = try XFSImage(size: "\(max(4, (o.sizes.max() ?? 1) * Int64(o.repetitions + 2) / 1024 + 2))G", in: o.dir)
                defer { image.destroy() }
                results += try SnapshotBenchmark.run(directory: image.mountPoint, sizes: bytes, repetitions: o.repetitions)
            }
        }
        print(SnapshotBenchmark.table(results))
        if !note.isEmpty { print(note + "\n") }
        let overhead = try SnapshotBenchmark.callOverheadForUnpresentedFile(directory: o.dir)
        print("A file nobody presents, the store calls around one write (`preserveBeforeInPlaceWrite` + `noteExternalChange`): \(String(format: "%.0f", Double(overhead) / 1000)) µs (median). Through the mount the store is not called at all for such files.")
    }
}

/// A sparse XFS image with reflink=1 on a loop device, mounted; `destroy()` undoes everything.
final class XFSImage {
    let directory: String
    var mountPoint: String { directory + "/fs" }
    private var device: String?
    private var mounted = false

    static func unavailableReason() -> String? {
        if geteuid() != 0 { return "not root" }
        if access("/dev/loop-control", F_OK) != 0 { return "no loop devices" }
        for tool in ["/usr/sbin/mkfs.xfs", "/usr/sbin/losetup", "/usr/bin/mount", "/usr/bin/umount", "/usr/bin/truncate"] where access(tool, X_OK) != 0 {
            return "\(tool) is not installed"
        }
        return nil
    }

    init(size: String, in parent: String) throws {
        directory = parent + "/coordfs-bench-xfs-\(getpid())"
        try FileManager.default.createDirectory(atPath: mountPoint, withIntermediateDirectories: true)
        do {
            try Self.run("/usr/bin/truncate", ["-s", size, directory + "/image"])
            device = try Self.run("/usr/sbin/losetup", ["-f", "--show", directory + "/image"]).trimmingCharacters(in: .whitespacesAndNewlines)
            try Self.run("/usr/sbin/mkfs.xfs", ["-q", "-f", "-m", "reflink=1", device!])
            try Self.run("/usr/bin/mount", ["-t", "xfs", device!, mountPoint])
            mounted = true
        } catch {
            destroy()
            throw error
        }
    }

    func destroy() {
        if mounted, (try? Self.run("/usr/bin/umount", [mountPoint])) == nil { _ = try? Self.run("/usr/bin/umount", ["-l", mountPoint]) }
        mounted = false
        if let device { _ = try? Self.run("/usr/sbin/losetup", ["-d", device]) }
        device = nil
        try? FileManager.default.removeItem(atPath: directory)
    }

    @discardableResult
    static func run(_ executable: String, _ arguments: [String]) throws -> String {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: executable)
        p.arguments = arguments
        let pipe = Pipe()
        p.standardOutput = pipe
        p.standardError = pipe
        try p.run()
        let out = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        p.waitUntilExit()
        guard p.terminationStatus == 0 else {
            throw StoreBench.BenchError("\(executable) \(arguments.joined(separator: " ")) exited \(p.terminationStatus): \(out)")
        }
        return out
    }
}
