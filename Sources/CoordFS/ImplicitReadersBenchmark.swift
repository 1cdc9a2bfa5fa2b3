import Coordination
import DocumentStore
import Dispatch
import Glibc
import LinuxGNU

/// What one implicit reader costs (`coordfs-bench readers`, docs/benchmarks.md): the heap bytes
/// per (process, path) record, measured with glibc's `mallinfo2` (heap bytes in use) around filling a table, and the time of a
/// read's record and of a sweep. The processes are simulated (a fixed start time), so nothing but
/// the table is measured.
public enum ImplicitReadersBenchmark {
    public struct Result: Sendable {
        public var records: Int
        public var processes: Int
        public var bytesPerRecord: Double
        public var nanosecondsPerRead: Double
        public var sweepMilliseconds: Double
    }

    /// `processes` processes reading `pathsPerProcess` files each, at paths like `dir17/file-000042.txt`
    /// (the bytes include the path each record keeps alive).
    public static func run(processes: Int, pathsPerProcess: Int) -> Result {
        // Each path is made for its record and kept only by the table, as after the open's request.
        let identity = FileIdentity(device: 2049, inode: 1, size: 4096, modificationTimeNanoseconds: 1_700_000_000_000_000_000)
        let before = LinuxCalls.heapBytesInUse()
        let started = DispatchTime.now().uptimeNanoseconds
        // Bounds above the records made: the table's cost, not its drops, is measured.
        let readers = ImplicitReaders(sweepInterval: 0, limits: .init(perUser: 1 << 30, total: 1 << 30)) { pid in pid > 0 ? 42 : nil }
        for p in 0..<processes {
            for f in 0..<pathsPerProcess {
                var id = identity
                id.inode = UInt64(p * pathsPerProcess + f)
                let i = p * pathsPerProcess + f
                readers.noteRead(try! ItemPath("dir\(i % 100)/file-\(String(i).leftPad(6)).txt"), identity: id, by: pid_t(1000 + p),
                                 uid: UInt32(1000 + p % 8))
            }
        }
        let elapsed = DispatchTime.now().uptimeNanoseconds - started
        let after = LinuxCalls.heapBytesInUse()
        let sweepStart = DispatchTime.now().uptimeNanoseconds
        readers.sweep()
        let sweep = DispatchTime.now().uptimeNanoseconds - sweepStart
        let records = readers.count
        withExtendedLifetime(readers) {}
        return Result(records: records, processes: processes,
                      bytesPerRecord: Double(Int(after) - Int(before)) / Double(max(1, records)),
                      nanosecondsPerRead: Double(elapsed) / Double(max(1, records)),
                      sweepMilliseconds: Double(sweep) / 1e6)
    }
}

private extension String {
    func leftPad(_ width: Int) -> String { count >= width ? self : String(repeating: "0", count: width - count) + self }
}
