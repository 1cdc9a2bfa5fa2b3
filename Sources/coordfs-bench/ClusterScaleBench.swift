// Issue 19's "3 nodes × 1,000 presenters" row of `coordfs-bench cluster`: three real daemons (the
// `coordfs` binary beside `coordfs-bench`, or $COORDFS_BIN; each its own process, so its RSS is its
// own) mount one shared backing folder as nodes a, b and c of one cluster over the suite's etcd,
// with the backing watcher off as on network storage. This process registers the presenters
// through the client library over each mount's control socket, as an application would (one
// control session per mount), and watches the cluster's prefix in etcd: the revisions (etcd
// transactions) and key writes each phase cost, the keys under the prefix, each daemon's RSS, and
// how long until every node knows every presenter (`coordfs status --cluster --json`).
import ClusterKV
import ControlProtocol
import CoordFSClient
import EtcdKV
import Foundation
import Glibc
import Synchronization

enum ClusterScaleBench {
    /// A presenter of a file that answers every ask at once (an application with nothing unsaved);
    /// `moved` hears where it is told it moved.
    final class IdlePresenter: FilePresenter {
        let presentedItemPath: String?
        let moved: (@Sendable (String) -> Void)?
        init(_ path: String, moved: (@Sendable (String) -> Void)? = nil) {
            presentedItemPath = path
            self.moved = moved
        }
        var presentedItemKind: ItemKind { .file }
        func presentedItemDidMove(to newPath: String) async { moved?(newPath) }
    }

    /// The first component of a presenter's path in its `p/` key's value (`{"path":{"c":[[bytes]...]}}`).
    static func firstComponent(ofPresenterValue value: [UInt8]) -> String? {
        guard let o = try? JSONSerialization.jsonObject(with: Data(value)) as? [String: Any],
              let path = o["path"] as? [String: Any], let c = path["c"] as? [[Int]], let first = c.first else { return nil }
        return String(decoding: first.map { UInt8(truncatingIfNeeded: $0) }, as: UTF8.self)
    }

    struct BenchFailure: Error, CustomStringConvertible { var description: String }

    /// The `coordfs` binary: $COORDFS_BIN, else beside this executable.
    static func coordfsBinary() -> String? {
        if let env = ProcessInfo.processInfo.environment["COORDFS_BIN"], FileManager.default.isExecutableFile(atPath: env) { return env }
        let exe = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        let candidate = (exe as NSString).deletingLastPathComponent + "/coordfs"
        return FileManager.default.isExecutableFile(atPath: candidate) ? candidate : nil
    }

    static func rssKiB(_ pid: pid_t) -> Int {
        guard let s = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
              let line = s.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") }) else { return 0 }
        return Int(line.split(separator: " ").dropFirst().first ?? "") ?? 0
    }

    static func sh(_ command: String) -> (status: Int32, output: String) {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/bin/sh")
        p.arguments = ["-c", command]
        let pipe = Pipe()
        p.standardOutput = pipe
        p.standardError = pipe
        do { try p.run() } catch { return (127, "\(error)") }
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        return (p.terminationStatus, String(decoding: data, as: UTF8.self))
    }

    /// Counts the events and revisions of every change under the prefix, from a watch.
    final class Counter: Sendable {
        let state = Mutex<(events: Int, revisions: Set<Int64>, last: Double)>((0, [], 0))
        func snapshot() -> (events: Int, revisions: Int) { state.withLock { ($0.events, $0.revisions.count) } }
        /// Waits until nothing changed in etcd for `quiet` seconds (at most `limit`).
        func settle(quiet: Double = 0.5, limit: Double = 60) {
            let start = ClusterBench.now()
            while ClusterBench.now() - start < limit {
                let last = state.withLock { $0.last }
                if last > 0 && ClusterBench.now() - last >= quiet { return }
                if last == 0 && ClusterBench.now() - start >= quiet { return }
                usleep(50_000)
            }
        }
    }

    /// The markdown of the row, or a line saying why it was not measured.
    static func run(etcd endpoints: [String], dir: String, presenters count: Int) async throws -> String {
        guard let coordfs = coordfsBinary() else {
            return "3 nodes × \(count) presenters: not measured (no `coordfs` beside coordfs-bench; build it, or set COORDFS_BIN)\n"
        }
        let root = dir + "/coordfs-bench-scale-\(getpid())"
        let backing = root + "/shared"
        let nodes = ["a", "b", "c"]
        let prefix = "scale\(getpid())"
        for n in nodes {
            try FileManager.default.createDirectory(atPath: "\(root)/mnt-\(n)", withIntermediateDirectories: true)
            try FileManager.default.createDirectory(atPath: "\(backing)/docs-\(n)", withIntermediateDirectories: true)
            for i in 0..<count { FileManager.default.createFile(atPath: "\(backing)/docs-\(n)/d\(i).txt", contents: Data("x".utf8)) }
        }
        var daemons: [String: Process] = [:]
        defer {
            for n in nodes where daemons[n] != nil {
                _ = sh("'\(coordfs)' unmount '\(root)/mnt-\(n)' >/dev/null 2>&1 || '\(coordfs)' unmount --lazy '\(root)/mnt-\(n)' >/dev/null 2>&1")
            }
            for (_, p) in daemons {
                let deadline = ClusterBench.now() + 10
                while p.isRunning && ClusterBench.now() < deadline { usleep(20_000) }
                if p.isRunning { kill(p.processIdentifier, SIGKILL) }
            }
            try? FileManager.default.removeItem(atPath: root)
        }
        for n in nodes {
            let p = Process()
            p.executableURL = URL(fileURLWithPath: coordfs)
            p.arguments = ["mount", backing, "\(root)/mnt-\(n)", "-f", "-o",
                           "cluster=\(endpoints.joined(separator: ",")),node=\(n),cluster_prefix=\(prefix),backing_watcher=off"]
            p.standardOutput = FileHandle.nullDevice
            p.standardError = FileHandle(forWritingAtPath: "/dev/null")
            try p.run()
            daemons[n] = p
            let deadline = ClusterBench.now() + 30
            while !((try? String(contentsOfFile: "/proc/mounts", encoding: .utf8))?.contains(" \(root)/mnt-\(n) ") ?? false) {
                guard p.isRunning, ClusterBench.now() < deadline else { throw BenchFailure(description: "node \(n) did not mount") }
                usleep(20_000)
            }
        }

        let store = try EtcdClusterStore(EtcdConfiguration(endpoints: endpoints))
        let base = Array((prefix + "/").utf8)
        let counter = Counter()
        let (_, startRevision) = try await store.range(base, prefix: true)
        let watcher = Task.detached {
            do {
                for try await batch in store.watch(base, prefix: true, fromRevision: startRevision + 1) {
                    counter.state.withLock {
                        $0.events += batch.events.count
                        for e in batch.events {
                            switch e {
                            case .put(let kv): $0.revisions.insert(kv.modRevision)
                            case .delete(_, let r): $0.revisions.insert(r)
                            }
                        }
                        $0.last = ClusterBench.now()
                    }
                }
            } catch {}
        }
        defer { watcher.cancel() }

        func keys() async throws -> (all: Int, presenters: Int) {
            let (values, _) = try await store.range(base, prefix: true)
            return (values.count, values.filter { $0.key.starts(with: base + Array("p/".utf8)) }.count)
        }
        func rss() -> [Int] { nodes.map { rssKiB(daemons[$0]!.processIdentifier) } }
        /// Seconds from `start` until every node's status lists `expected` presenters in all (and,
        /// with `under`, node b's presenters all in that folder).
        func everyNodeKnows(_ expected: Int, since start: Double, under folder: String? = nil) throws -> Double {
            let deadline = ClusterBench.now() + 120
            var pending = Set(nodes)
            while !pending.isEmpty {
                for n in pending.sorted() {
                    let r = sh("'\(coordfs)' status '\(root)/mnt-\(n)' --cluster --json")
                    guard let o = try? JSONSerialization.jsonObject(with: Data(r.output.utf8)) as? [String: Any],
                          let list = o["nodes"] as? [[String: Any]] else { continue }
                    let known = list.reduce(0) { $0 + (($1["presenters"] as? [Any])?.count ?? 0) }
                    let ofB = (list.first { $0["name"] as? String == "b" }?["presenters"] as? [Any]) ?? []
                    let moved = folder.map { f in ofB.allSatisfy { "\($0)".contains(f + "/") } } ?? true
                    if known == expected && moved { pending.remove(n) }
                }
                guard ClusterBench.now() < deadline else { throw BenchFailure(description: "nodes \(pending.sorted()) never listed \(expected) presenters") }
                if !pending.isEmpty { usleep(50_000) }
            }
            return ClusterBench.now() - start
        }
        struct Phase { var name: String; var seconds: Double; var known: Double?; var events: Int; var revisions: Int; var changes: Int }
        var phases: [Phase] = []
        func measure(_ name: String, changes: Int, expected: Int?, under folder: String? = nil,
                     _ body: @escaping @Sendable () async throws -> Void) async throws {
            counter.settle()
            let before = counter.snapshot()
            let start = ClusterBench.now()
            FileHandle.standardError.write(Data("bench: cluster: \(name)\n".utf8))
            // A phase that does not end within 120 s ends the row (with what it measured so far).
            // (A task group would wait for a call that never returns: the first of two tasks wins.)
            let outcome = await withCheckedContinuation { (c: CheckedContinuation<Result<Bool, Error>, Never>) in
                let once = Mutex<CheckedContinuation<Result<Bool, Error>, Never>?>(c)
                let finish = { @Sendable (r: Result<Bool, Error>) in once.withLock { $0.take() }?.resume(returning: r) }
                Task.detached { do { try await body(); finish(.success(true)) } catch { finish(.failure(error)) } }
                Task.detached { try? await Task.sleep(for: .seconds(120)); finish(.success(false)) }
            }
            guard try outcome.get() else { throw BenchFailure(description: "\(name): not done within 120 s") }
            let seconds = ClusterBench.now() - start
            let known = try expected.map { try everyNodeKnows($0, since: start, under: folder) }
            counter.settle()
            let after = counter.snapshot()
            phases.append(Phase(name: name, seconds: seconds, known: known, events: after.events - before.events,
                                revisions: after.revisions - before.revisions, changes: changes))
        }

        counter.settle()
        var states: [(name: String, keys: (all: Int, presenters: Int), rss: [Int])] = []
        states.append(("mounted, no presenters", try await keys(), rss()))
        var failure: String?
        // The rename below: when rename(2) returned, when every presenter of b had heard it moved,
        // when b's keys were at the new path in etcd (seconds after the rename began).
        let move = Mutex<(renamed: Double, told: Double, inEtcd: Double)>((0, 0, 0))
        do {
        // Each node's presenters, registered from this process through its mount, concurrently.
        var registered: [String: [IdlePresenter]] = [:]
        // When each of node b's presenters heard it moved into docs-b2 (the rename below).
        let heard = Mutex<[Double]>([])
        let movedInto = "\(root)/mnt-b/docs-b2/"
        let noteMove: @Sendable (String) -> Void = { to in
            if to.hasPrefix(movedInto) { heard.withLock { $0.append(ClusterBench.now()) } }
        }
        for n in nodes {
            let moved: (@Sendable (String) -> Void)? = n == "b" ? noteMove : nil
            registered[n] = (0..<count).map { i in IdlePresenter("\(root)/mnt-\(n)/docs-\(n)/d\(i).txt", moved: moved) }
        }
        let all = registered
        try await measure("register \(count) presenters on each node (3 nodes at once)", changes: 3 * count, expected: 3 * count) {
            try await withThrowingTaskGroup(of: Void.self) { group in
                for n in nodes {
                    group.addTask { for p in all[n]! { try await FileCoordinator.addFilePresenter(p) } }
                }
                try await group.waitForAll()
            }
        }
        states.append(("\(count) presenters on each node", try await keys(), rss()))
        // One presenter more, and gone again, on node a.
        FileManager.default.createFile(atPath: "\(backing)/docs-a/extra.txt", contents: Data("x".utf8))
        let one = IdlePresenter("\(root)/mnt-a/docs-a/extra.txt")
        try await measure("register one presenter more", changes: 1, expected: 3 * count + 1) {
            try await FileCoordinator.addFilePresenter(one)
        }
        try await measure("unregister it", changes: 1, expected: 3 * count) {
            await FileCoordinator.removeFilePresenter(one)
        }
        // A folder with node b's presenters renamed through node a: b's presenters follow the move
        // (asked first through etcd, then told, their keys put again by node b, every node's table).
        try await measure("rename node b's folder through node a (its \(count) presenters move)", changes: count, expected: 3 * count,
                          under: "docs-b2") {
            let start = ClusterBench.now()
            guard rename("\(root)/mnt-a/docs-b", "\(root)/mnt-a/docs-b2") == 0 else { throw BenchFailure(description: "rename failed: \(errno)") }
            move.withLock { $0.renamed = ClusterBench.now() - start }
            // Until every presenter of b heard it moved, and b's keys in etcd are at the new path.
            let deadline = ClusterBench.now() + 60
            var told = false, inEtcd = false
            while !(told && inEtcd) {
                guard ClusterBench.now() < deadline else {
                    throw BenchFailure(description: "60 s after the rename: \(heard.withLock { $0.count }) of b's \(count) presenters told they moved, b's keys at docs-b2 in etcd: \(inEtcd)")
                }
                if !told, heard.withLock({ $0.count }) >= count {
                    told = true
                    move.withLock { $0.told = (heard.withLock { $0.max() } ?? 0) - start }
                }
                if !inEtcd {
                    let (values, _) = try await store.range(base + Array("p/b/".utf8), prefix: true)
                    if values.count == count && values.allSatisfy({ firstComponent(ofPresenterValue: $0.value) == "docs-b2" }) {
                        inEtcd = true
                        move.withLock { $0.inEtcd = ClusterBench.now() - start }
                    }
                }
                usleep(5_000)
            }
        }
        try await measure("unregister every presenter (3 nodes at once)", changes: 3 * count, expected: 0) {
            await withTaskGroup(of: Void.self) { group in
                for n in nodes { group.addTask { for p in all[n]! { await FileCoordinator.removeFilePresenter(p) } } }
            }
        }
        states.append(("every presenter unregistered", try await keys(), rss()))
        } catch {
            failure = "\(error)"
        }

        func kib(_ k: [Int]) -> String { k.map { String(format: "%.1f", Double($0) / 1024) }.joined(separator: " / ") + " MiB" }
        var out = "### 3 nodes × \(count) presenters\n\n"
        out += "Three `coordfs mount` daemons (nodes a, b, c; separate processes) over one shared folder, backing watcher off; "
        out += "this process registers each node's presenters through the client library (one control session per mount). "
        out += "etcd writes are counted by a watch of the cluster's prefix: revisions are etcd transactions, key writes the puts "
        out += "and deletions they carry; \"every node knows\" is until each node's `coordfs status --cluster --json` lists them all.\n\n"
        out += "| state | keys under the prefix (presenter keys) | daemon RSS a / b / c |\n|---|---|---|\n"
        for st in states { out += "| \(st.name) | \(st.keys.all) (\(st.keys.presenters)) | \(kib(st.rss)) |\n" }
        out += "\n"
        out += "| presenter change | time | every node knows | etcd revisions (per presenter) | key writes (per presenter) |\n|---|---|---|---|---|\n"
        for p in phases {
            let known = p.known.map { String(format: "%.2f s", $0) } ?? "-"
            out += "| \(p.name) | " + String(format: "%.2f s", p.seconds) + " | \(known) | "
            out += String(format: "%d (%.3f) | %d (%.2f) |\n", p.revisions, Double(p.revisions) / Double(max(1, p.changes)),
                          p.events, Double(p.events) / Double(max(1, p.changes)))
        }
        let m = move.withLock { $0 }
        if m.told > 0 {
            out += "\nThe rename of node b's folder through node a: rename(2) returned after " + String(format: "%.3f s", m.renamed)
            out += " (node b's \(count) presenters asked through etcd first); every one of them had heard presentedItemDidMove "
            out += String(format: "%.3f s", m.told) + " after the rename began, and node b's \(count) keys were at the new path in etcd after "
            out += String(format: "%.3f s", m.inEtcd) + " (the phase's \"every node knows\": until each node's status lists them there).\n"
        }
        if let failure { out += "\n**The row stopped there**: \(failure).\n" }
        return out + "\n"
    }
}
