import NameBytes
import ControlProtocol
import Foundation
import Glibc

/// `coordfs status MOUNT --cluster` and `coordfs watch MOUNT --cluster` (docs/cluster.md): what the
/// mount's node knows of its cluster, through its control socket.
enum ClusterViews {
    /// Connects to the mount's daemon and runs `body`; a failure ends the command with its status
    /// (a mount that is no node of a cluster: the daemon's message, status 66).
    static func withClient<T: Sendable>(_ location: ControlSocketLocator.Location, name: String,
                                        _ body: @escaping @Sendable (ControlClient) async throws -> T) -> T {
        let socketPath = location.socketPath
        do {
            return try runBlocking {
                let client = try ControlClient.connect(socketPath: socketPath, clientName: name)
                defer { client.close() }
                return try await body(client)
            }
        } catch ControlTransportError.protocolError(let e) {
            ControlCommandFailure(message: e.message, status: ControlExit.status(for: e.code)).exit()
        } catch {
            ControlCommandFailure(message: "cannot ask the daemon of \(location.mount.mountPoint) (\(socketPath)): \(error)",
                                  status: ControlExit.unavailable).exit()
        }
    }

    // MARK: status --cluster

    static func status(_ location: ControlSocketLocator.Location, json: Bool) {
        let report = withClient(location, name: "coordfs status --cluster") { try await $0.clusterStatus() }
        if json {
            Stdout.line(String(decoding: JSONWriter.write(.object(Self.json(report, mountPoint: location.mount.mountPoint))), as: UTF8.self))
        } else {
            for line in text(report, mountPoint: location.mount.mountPoint) { Stdout.line(line) }
        }
    }

    static func etcdLine(_ r: ClusterStatusReport) -> String {
        (r.etcdFull.map { "etcd: FULL, refusing every write (\($0))" }
            ?? (r.reachable ? "etcd: reachable"
            : "etcd: UNREACHABLE" + (r.unreachableSinceMs.map { " since " + since($0) } ?? "") + (r.lastError.map { " (\($0))" } ?? "")))
            + (r.sessionValid ? ", session valid" : ", NO valid session (this node grants nothing that needs the cluster)")
            + "; when unreachable: \(r.unreachable); granted locally: \(r.localGrants); revision \(r.revision)"
    }

    static func since(_ ms: UInt64) -> String {
        ms == 0 ? "?" : ISO8601DateFormatter().string(from: Date(timeIntervalSince1970: Double(ms) / 1000))
    }

    static func text(_ r: ClusterStatusReport, mountPoint: String) -> [String] {
        var lines = ["coordfs cluster \(r.prefix.displayEscaped): node \(r.node) on \(mountPoint.displayEscaped)", etcdLine(r)]
        StatusCommand.table("nodes", ["NODE", "ALIVE SINCE", "LEASE", "TTL", "PRESENTERS", "HOLDS"], r.nodes.map { n in
            [n.name + (n.name == r.node ? " (this)" : ""), since(n.sinceMs), n.lease == 0 ? "-" : String(n.lease, radix: 16),
             "\(n.ttl) s", String(n.presenters.count), String(n.holds.count)]
        }, into: &lines)
        StatusCommand.table("presenters", ["NODE", "PATH"], r.nodes.flatMap { n in n.presenters.map { [n.name, $0.description] } }, into: &lines)
        StatusCommand.table("holds", ["NODE", "MODE", "TOKEN", "PATH"], r.nodes.flatMap { n in
            n.holds.map { [n.name, $0.mode, String($0.token), $0.path.description] }
        }, into: &lines)
        return lines
    }

    static func json(_ r: ClusterStatusReport, mountPoint: String) -> JSONObject {
        var o = JSONObject()
        o["mountPoint"] = .string(mountPoint)
        o["node"] = .string(r.node)
        o["prefix"] = .string(r.prefix)
        o["etcd"] = .object(JSONObject([
            "reachable": .bool(r.reachable), "sessionValid": .bool(r.sessionValid), "unreachablePolicy": .string(r.unreachable),
            "localGrants": .int(Int64(r.localGrants)), "revision": .int(r.revision),
        ]))
        if case .object(var etcd) = o["etcd"]! {
            if let ms = r.unreachableSinceMs { etcd["unreachableSince"] = .string(since(ms)) }
            if let e = r.lastError { etcd["lastError"] = .string(e) }
            if let f = r.etcdFull { etcd["full"] = .string(f) }
            o["etcd"] = .object(etcd)
        }
        o["nodes"] = .array(r.nodes.map { n in
            .object(JSONObject([
                "name": .string(n.name), "since": .string(since(n.sinceMs)), "lease": .string(String(n.lease)), "ttl": .int(Int64(n.ttl)),
                "presenters": .array(n.presenters.map { .object(JSONObject(["path": .string($0.wireValue)])) }),
                "holds": .array(n.holds.map { .object(JSONObject(["path": .string($0.path.wireValue), "mode": .string($0.mode), "token": .int($0.token)])) }),
            ]))
        })
        return o
    }

    // MARK: watch --cluster

    /// Follows every node's steps, in the order etcd gave them, until a signal or `limit` lines.
    static func watch(_ location: ControlSocketLocator.Location, json: Bool, limit: Int?) {
        StopSignals.install()
        if isatty(STDERR_FILENO) == 1 {
            Stderr.print("coordfs: watching the cluster of \(location.mount.mountPoint.displayEscaped); Ctrl-C to stop")
        }
        let shown = withClient(location, name: "coordfs watch --cluster") { client -> Int in
            var cursor = try await client.clusterSteps(from: nil).next
            var count = 0
            while StopSignals.received == 0 {
                let list = try await client.clusterSteps(from: cursor)
                if list.oldest > cursor {
                    Stderr.print("coordfs: steps \(cursor) to \(list.oldest - 1) are no longer kept by the daemon (a gap)")
                }
                for s in list.steps {
                    guard Stdout.line(json ? line(json: s) : line(text: s)) else { return count }
                    count += 1
                    if let limit, count >= limit { return count }
                }
                cursor = list.next
                if list.steps.isEmpty { try? await Task.sleep(for: .milliseconds(100)) }
            }
            return count
        }
        _ = shown
    }

    static func line(text s: ClusterStepList.Step) -> String {
        "rev \(s.revision) \(s.node.displayEscaped): \(s.what.displayEscaped)" + (s.path.map { " \($0.description.displayEscaped)" } ?? "")
    }

    static func line(json s: ClusterStepList.Step) -> String {
        var o = JSONObject(["seq": .int(Int64(s.seq)), "revision": .int(s.revision), "node": .string(s.node), "what": .string(s.what)])
        if let p = s.path { o["path"] = .string(p.wireValue) }
        return String(decoding: JSONWriter.write(.object(o)), as: UTF8.self)
    }
}
