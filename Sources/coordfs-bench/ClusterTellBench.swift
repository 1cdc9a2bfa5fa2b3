// Issue 19's "didChange at A ≤ 10 ms after B's close" row of `coordfs-bench cluster`, measured on
// its own: two nodes served in this process over one backing folder and the suite's etcd, a
// presenter on node a, and a program on node b that opens the presented file for writing (node a's
// presenter is asked through etcd: ask → answer), writes a byte and closes it; the time from the
// close's return until node a's presenter hears presentedItemDidChange (node b's change record
// through etcd, node a's watch, its kernel caches dropped, its presenter told).
import Coordination
import CoordFS
import Foundation
import Glibc
import Synchronization

enum ClusterTellBench {
    /// A presenter that answers every ask at once and notes when it is told of a change.
    final class TimingPresenter: FilePresenter, @unchecked Sendable {
        let path: ItemPath
        let told = Mutex<[Double]>([])
        let signal = DispatchSemaphore(value: 0)
        init(_ path: ItemPath) { self.path = path }
        var presentedItemPath: ItemPath? { path }
        func presentedItemDidChange() async {
            told.withLock { $0.append(ClusterBench.now()) }
            signal.signal()
        }
    }

    /// A node of the cluster `prefix` over `endpoints`, served in this process: `root`/backing on
    /// `root`/mnt-`name`, its state in `root`/state-`name`, the backing watcher off.
    static func node(_ root: String, _ name: String, endpoints: [String], prefix: String) throws -> Daemon {
        for sub in ["/backing", "/mnt-\(name)", "/state-\(name)"] {
            try FileManager.default.createDirectory(atPath: root + sub, withIntermediateDirectories: true)
        }
        var options = MountOptions()
        options.eventLog.enabled = false
        options.backingWatcher = false
        options.cluster.endpoints = endpoints
        options.cluster.node = name
        options.cluster.prefix = prefix
        var plan = try MountPreflight.plan(backing: root + "/backing", mountpoint: root + "/mnt-\(name)", options: options)
        plan.state = StateFolder(backing: root + "/state-\(name)")
        let daemon = try Daemon(plan: plan)
        try daemon.startInProcess()
        return daemon
    }

    /// (ask → answer: node b's open for writing; didChange at a after b's close), `count` times each.
    /// ... and the etcd transactions (revisions) per write in the loop: the ask, the answer, the change record.
    static func run(endpoints: [String], dir: String, count: Int) throws -> (asked: ClusterBench.Stats, told: ClusterBench.Stats, missed: Int, transactions: Double) {
        let root = dir + "/coordfs-bench-tell-\(getpid())"
        defer { try? FileManager.default.removeItem(atPath: root) }
        let a = try node(root, "a", endpoints: endpoints, prefix: "tell\(getpid())")
        defer { a.stopAndWait() }
        let b = try node(root, "b", endpoints: endpoints, prefix: "tell\(getpid())")
        defer { b.stopAndWait() }
        try FileManager.default.createDirectory(atPath: root + "/backing/told", withIntermediateDirectories: true)
        FileManager.default.createFile(atPath: root + "/backing/told/doc.txt", contents: Data("x".utf8))
        let presenter = TimingPresenter(try ItemPath("told/doc.txt"))
        _ = try a.coordinator.addFilePresenter(presenter)
        let deadline = ClusterBench.now() + 10
        while ClusterBench.now() < deadline, b.cluster?.status().nodes.first(where: { $0.name == "a" })?.presenters.isEmpty != false {
            usleep(10_000)
        }
        let file = root + "/mnt-b/told/doc.txt"
        var asked: [Double] = [], told: [Double] = [], missed = 0
        var firstRevision: Int64 = 0
        for i in 0..<(count + 10) {
            if i == 10 {
                usleep(200_000)
                firstRevision = a.cluster?.status().revision ?? 0
            }
            let t0 = ClusterBench.now()
            let fd = open(file, O_WRONLY)
            let t1 = ClusterBench.now()
            guard fd >= 0 else { throw ClusterScaleBench.BenchFailure(description: "open on node b failed: \(errno)") }
            var byte = UInt8(ascii: "y")
            _ = write(fd, &byte, 1)
            close(fd)
            let closed = ClusterBench.now()
            // The first didChange after the open (told no sooner than the access ended).
            var heard: Double?
            while heard == nil, presenter.signal.wait(timeout: .now() + 2) == .success {
                heard = presenter.told.withLock { $0.first { $0 > t1 } }
            }
            // The first rounds warm both nodes (their rights, the kernel's caches) and count for nothing.
            guard i >= 10 else { continue }
            asked.append(t1 - t0)
            if let heard { told.append(heard - closed) } else { missed += 1 }
            // Anything else it is told of this write, before the next.
            usleep(5_000)
            while presenter.signal.wait(timeout: .now()) == .success {}
            presenter.told.withLock { $0.removeAll() }
        }
        usleep(200_000)
        let transactions = Double((a.cluster?.status().revision ?? 0) - firstRevision) / Double(max(1, count))
        return (ClusterBench.Stats(asked), ClusterBench.Stats(told), missed, transactions)
    }
}
