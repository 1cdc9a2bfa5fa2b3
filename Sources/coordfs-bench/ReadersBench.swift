// What an implicit reader costs (docs/semantics.md, "Lost updates"): heap bytes per (process,
// path) record, the time to record a read, and a sweep of the table's processes.
// `coordfs-bench readers [--processes N] [--paths N]`
import CoordFS
import Foundation

enum ReadersBench {
    static func run(_ args: [String]) async throws {
        var processes = 1_000, paths = 100
        var i = args.makeIterator()
        while let a = i.next() {
            switch a {
            case "--processes": processes = Int(i.next() ?? "") ?? processes
            case "--paths": paths = Int(i.next() ?? "") ?? paths
            default: throw MountBench.BenchError("unknown option \(a)")
            }
        }
        print("## Implicit readers (lost updates): heap per record")
        print("")
        print("| processes | files read each | records | bytes per record | per read | sweep |")
        print("|---|---|---|---|---|---|")
        for (p, f) in [(processes * paths, 1), (processes, paths), (1, processes * paths)] {
            let r = ImplicitReadersBenchmark.run(processes: p, pathsPerProcess: f)
            print(String(format: "| %d | %d | %d | %.0f | %.2f µs | %.1f ms |", r.processes, f, r.records, r.bytesPerRecord,
                         r.nanosecondsPerRead / 1000, r.sweepMilliseconds))
        }
        print("")
        print("Bytes per (process, path) record include the path it keeps alive (`dirN/file-NNNNNN.txt`); the target is 256.")
        print("")
    }
}
