// coordfs-bench: micro-benchmarks for the FUSE-free modules. `make bench` runs every suite and
// writes the figures into docs/benchmarks.md. Each suite lives in its own file.
import Foundation

let suites: [String: ([String]) async throws -> Void] = [
    "cluster": ClusterBench.run,
    "coordination": CoordinationBench.run,
    "etcd": EtcdBench.run,
    "eventlog": EventLogBench.run,
    "floor": FloorBench.run,
    "protocol": ProtocolBench.run,
    "recorder": RecorderBench.run,
    "metrics": MetricsBench.run,
    "mount": MountBench.run,
    "readers": ReadersBench.run,
    "readlog": ReadLogBench.run,
    "requests": RequestsBench.run,
    "store": StoreBench.run,
]

let args = Array(CommandLine.arguments.dropFirst())
guard let name = args.first, let suite = suites[name] else {
    FileHandle.standardError.write(Data("usage: coordfs-bench \(suites.keys.sorted().joined(separator: "|")) [options]\n".utf8))
    exit(2)
}
// The suite runs as a task while the main thread waits on a semaphore, instead of an async `main`:
// the latter parks the main thread in a way valgrind 3.19 does not survive, and the suites are
// measured under callgrind (docs/benchmarks.md, "How to reproduce"). No suite uses the main actor.
let finished = DispatchSemaphore(value: 0)
nonisolated(unsafe) var failure: (any Error)?
Task.detached {
    do { try await suite(Array(args.dropFirst())) } catch { failure = error }
    finished.signal()
}
finished.wait()
if let failure {
    // A bad option or a failed run is a message and a status, not a trap with a backtrace.
    FileHandle.standardError.write(Data("coordfs-bench \(name): \(failure)\n".utf8))
    exit(1)
}
