import Cluster
import ControlProtocol
import Coordination
import Foundation

/// What the control socket shows of the cluster (`coordfs status --cluster`, `coordfs watch
/// --cluster`): the node's status, and every node's steps numbered for cursors. The steps are
/// kept from the first `clusterSteps` request on (a node nobody watches builds none), the last
/// `kept` of them.
final class ClusterView: @unchecked Sendable {
    let node: ClusterNode
    static let kept = 10_000
    private let lock = NSLock()
    private var steps: [(seq: UInt64, step: ClusterStep)] = []
    private var first = 0   // index of the oldest kept step in `steps` (a ring grown to `kept`)
    private var nextSeq: UInt64 = 1
    private var task: Task<Void, Never>?

    init(node: ClusterNode) { self.node = node }

    /// Steps from `from` (nil: none yet, only the cursor), at most `limit`; the cursor to go on
    /// from, and the oldest step kept (a cursor below it lost the steps between).
    func read(from: UInt64?, limit: Int = 1000) -> (steps: [(seq: UInt64, step: ClusterStep)], next: UInt64, oldest: UInt64) {
        lock.withLock {
            if task == nil {
                let stream = node.steps()  // subscribed now: nothing after this answer is missed
                task = Task.detached { [weak self] in
                    for await s in stream { self?.append(s) }
                }
            }
            let ordered = Array(steps[first...]) + Array(steps[..<first])
            let oldest = ordered.first?.seq ?? nextSeq
            guard let from else { return ([], nextSeq, oldest) }
            let start = max(from, oldest)
            let wanted = ordered.drop { $0.seq < start }.prefix(limit)
            return (Array(wanted), wanted.last.map { $0.seq + 1 } ?? min(start, nextSeq), oldest)
        }
    }

    private func append(_ step: ClusterStep) {
        lock.withLock {
            if steps.count < Self.kept {
                steps.append((nextSeq, step))
            } else {
                steps[first] = (nextSeq, step)
                first = (first + 1) % Self.kept
            }
            nextSeq += 1
        }
    }

    func stop() {
        lock.withLock { task?.cancel(); task = nil }
    }
}

extension ControlRequestHandler {
    /// The error of a cluster request on a mount that is no node of a cluster.
    static func notACluster(_ mountpoint: String) -> ProtocolError {
        ProtocolError(.notFound, "the mount on \(mountpoint) is not a node of a cluster (it was mounted without -o cluster=ETCD_ENDPOINTS)")
    }

    /// At most this many presenters and holds per node in one report (a frame is at most 1 MiB).
    static let clusterReportLimit = 5_000

    func clusterStatus(_ request: ClusterStatusQuery, _ client: ControlClientState) {
        guard let view = clusterView.withLock({ $0 }) else {
            client.connection.reply(to: request.id, error: Self.notACluster(resolver.mountpoint))
            return
        }
        let s = view.node.status()
        let visible = visibility(for: client.peer)
        let nodes = s.nodes.map { n in
            ClusterStatusReport.Node(
                name: n.name, sinceMs: UInt64(max(0, n.since * 1000)), lease: n.lease, ttl: UInt64(max(0, n.ttl)),
                presenters: Array(n.presenters.lazy.compactMap(visible).prefix(Self.clusterReportLimit)),
                holds: Array(n.holds.lazy.compactMap { h in visible(h.path).map { .init(path: $0, mode: h.mode, token: h.token) } }.prefix(Self.clusterReportLimit)))
        }
        client.connection.send(.clusterStatusReport(ClusterStatusReport(
            id: request.id, node: s.node, prefix: s.prefix, reachable: s.reachable, sessionValid: s.sessionValid,
            unreachable: s.unreachablePolicy.rawValue, localGrants: UInt64(max(0, s.localGrants)), revision: s.revision, nodes: nodes,
            unreachableSinceMs: s.unreachableSince.map { UInt64(max(0, $0 * 1000)) }, lastError: s.lastError, etcdFull: s.full.map { "\($0): " + ClusterNode.fullAdvice })))
    }

    func clusterSteps(_ request: ClusterStepsQuery, _ client: ControlClientState) {
        guard let view = clusterView.withLock({ $0 }) else {
            client.connection.reply(to: request.id, error: Self.notACluster(resolver.mountpoint))
            return
        }
        let (steps, next, oldest) = view.read(from: request.from)
        let visible = visibility(for: client.peer)
        let root = client.peer.credentials.uid == 0
        // A step is shown when the peer may see every item it concerns (Visibility.swift); another
        // node's message (a refusal's reason, which may name items) only to root.
        let shown = steps.compactMap { entry -> ClusterStepList.Step? in
            let s = entry.step
            var paths: [MountPath] = []
            for p in s.paths {
                guard let m = visible(p) else { return nil }
                paths.append(m)
            }
            let what = root ? s.what + (s.detail.map { ": " + $0 } ?? "") : s.what
            return ClusterStepList.Step(seq: entry.seq, revision: s.revision, node: s.node, what: what,
                                        path: s.path.flatMap { MountPath.of($0) })
        }
        client.connection.send(.clusterStepList(ClusterStepList(id: request.id, steps: shown, next: next, oldest: oldest)))
    }

    /// The peer's view of an item: its mount path if the peer may see it, else nil (judged once
    /// per folder for one report).
    private func visibility(for peer: ControlPathResolver.Peer) -> (ItemPath) -> MountPath? {
        var memo = VisibilityMemo(resolver: resolver, peer: peer)
        return { path in
            guard let m = MountPath.of(path) else { return nil }
            return memo.maySee(m) ? m : nil
        }
    }
}
