import ClusterKV
import Foundation
import Coordination
#if canImport(Glibc)
import Glibc
#endif

/// What a node does with an access that needs the cluster while etcd cannot be reached.
public enum UnreachablePolicy: String, Sendable, CaseIterable {
    /// The access fails with EIO (the default: no node ever lets a write through that another node
    /// could not have arbitrated).
    case fail
    /// The access goes on with this node's own coordination only, and each such grant is recorded
    /// (a cluster step, the daemon's log, `coordfs status`).
    case local
}

/// A node's settings (the mount's `cluster_*` options).
public struct ClusterConfiguration: Sendable {
    /// This node's name, unique in the cluster (default: the host name).
    public var node: String
    /// Every key of this cluster starts with `<prefix>/`: several clusters share one etcd.
    public var prefix: String
    /// The node's lease in seconds: a node that stops renewing it is gone from the cluster (its
    /// presenters, rights and asks) this long after its last renewal.
    public var leaseTTL: Int64
    /// What an access that needs the cluster does while etcd is unreachable.
    public var unreachable: UnreachablePolicy
    /// Rights kept idle (delegations) at most; beyond, the least recently used are given back.
    public var maxIdleRights: Int
    /// Whether a node takes a right on a whole folder when nobody else holds or presents anything
    /// in it (one round trip for a folder's worth of new files), or only on items.
    public var folderRights: Bool
    /// How long, in seconds, an access retries etcd that cannot serve (a member lost, a leader
    /// being elected: a few seconds) before the unreachable policy applies: the access's wait
    /// deadline, and at least this. Each retry is guarded so no change is applied twice.
    public var failoverWait: Double
    /// Seconds a batch of change records waits after the previous one was sent, gathering the
    /// writes meanwhile (0: sent as soon as the previous batch is in etcd). Answers, rights given
    /// back and presenters are never held back by it.
    public var recordInterval: Double
    /// Seconds a batch of change records that concern no presenter of another node (none at or
    /// inside a changed item, at a folder above it, or at a move's destination) may wait after the
    /// previous batch was sent, instead of `recordInterval`: such records only make other nodes
    /// drop names and attributes their kernels cached without a right, and anything coordinated
    /// there (a right recalled, an ask, an answer) sends them at once. 0, or anything below
    /// `recordInterval`: `recordInterval` (every batch paced alike).
    public var unpresentedRecordInterval: Double
    /// The clock of session validity in seconds (monotonic by default; tests drive their own).
    public var clock: @Sendable () -> Double
    /// The most bytes of change records one transaction carries (etcd refuses a request over its
    /// `--max-request-bytes`, 1.5 MiB by default): a longer queue goes in several, one after the
    /// other.
    public var maxRecordBatchBytes = ClusterConfiguration.defaultMaxRecordBatchBytes

    /// The default of `maxRecordBatchBytes`: 512 KiB.
    public static let defaultMaxRecordBatchBytes = 512 * 1024

    public init(node: String = ClusterConfiguration.hostName(), prefix: String = "coordfs", leaseTTL: Int64 = 10,
                unreachable: UnreachablePolicy = .fail, maxIdleRights: Int = 4096, folderRights: Bool = true,
                failoverWait: Double = 5, recordInterval: Double = ClusterConfiguration.defaultRecordInterval,
                unpresentedRecordInterval: Double = ClusterConfiguration.defaultUnpresentedRecordInterval,
                clock: @escaping @Sendable () -> Double = ClusterConfiguration.monotonicSeconds) {
        self.failoverWait = failoverWait
        self.recordInterval = recordInterval
        self.unpresentedRecordInterval = unpresentedRecordInterval
        self.node = node
        self.prefix = prefix
        self.leaseTTL = leaseTTL
        self.unreachable = unreachable
        self.maxIdleRights = maxIdleRights
        self.folderRights = folderRights
        self.clock = clock
    }

    /// The default of `recordInterval`: 2 ms.
    public static let defaultRecordInterval = 0.002

    /// The default of `unpresentedRecordInterval`: 50 ms.
    public static let defaultUnpresentedRecordInterval = 0.05

    /// A node name is 1-64 bytes of letters, digits, `.`, `-` and `_` (it is a key component).
    public static func isValidNodeName(_ name: String) -> Bool {
        !name.isEmpty && name.utf8.count <= 64 && name != "." && name != ".." && name.utf8.allSatisfy { b in
            (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) || b == 0x2D || b == 0x2E || b == 0x5F
        }
    }

    /// A prefix is 1-128 bytes of the node name's characters and `/`.
    public static func isValidPrefix(_ prefix: String) -> Bool {
        !prefix.isEmpty && prefix.utf8.count <= 128
            && prefix.split(separator: "/").allSatisfy { isValidNodeName(String($0)) }
    }

    /// The host name (gethostname), or "localhost".
    public static func hostName() -> String {
        var buffer = [CChar](repeating: 0, count: 256)
        guard gethostname(&buffer, buffer.count) == 0 else { return "localhost" }
        let name = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return name.isEmpty ? "localhost" : name
    }

    @Sendable public static func monotonicSeconds() -> Double {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
    }
}

/// A node's join refused: another node of the cluster has this node's name and lives (its session
/// outlived its TTL while this one waited for it to go).
public struct ClusterNodeNameInUse: Error, CustomStringConvertible, Sendable {
    public var node: String
    public var since: Double?
    public var lease: Int64
    public var ttl: Int64?
    public var waited: Double

    public var description: String {
        let began = since.map { " since " + Date(timeIntervalSince1970: $0).formatted(.iso8601) } ?? ""
        return "node name \(node) is in use: a node of this name is in the cluster (lease \(lease)\(ttl.map { ", ttl \($0) s" } ?? "")\(began)) "
            + "and renewed its session while this one waited \(Int(waited.rounded())) s for it to go, so it is alive (another host mounted with node=\(node)?): "
            + "give every host a node name of its own (node=NAME; by default the host name). Nothing of that node was changed"
    }
}

/// What the node needs from the mount it serves (the daemon; tests implement it to watch order).
public protocol ClusterHost: AnyObject, Sendable {
    /// Another node's access was granted here after this node's presenters were asked, and is about
    /// to change `intents`' items: keep the versions presenters loaded (the store's method).
    func clusterWillLetChangeThrough(_ intents: [FileAccessIntent], origin: AccessOrigin)
    /// Another node changed, moved or deleted these items: drop the kernel's cached names,
    /// attributes and pages for them. Called before this node's presenters hear of the changes.
    func clusterDropCaches(_ changes: [AccessChange])
    /// After the caches were dropped and before the presenters are told: what the store does for a
    /// local change (conflicts, reloads, following a move). `asked`: presenters here were asked for
    /// the access (a proxy ran here; they hear the changes from its release). Returns the changes
    /// presenters here heard already, before the record came (the mount's backing watcher told
    /// them, seeing the writes in a folder this node shares): the node does not tell them again.
    func clusterDidChange(_ changes: [AccessChange], origin: AccessOrigin, asked: Bool) -> [AccessChange]
    /// etcd compacted change records this node had not read: these items, presented here, may
    /// have been changed by another node meanwhile. Drop the kernel's caches of them and tell the
    /// store of each whose file is not the one it knew (a conflict for unsaved changes, a reload);
    /// returns those, whose presenters the node then tells (didChange).
    func clusterChangesMissed(at paths: [ItemPath], origin: AccessOrigin) -> [ItemPath]
    /// Another node's right to change `path` (with `inside`, everything in it too) recalled a right
    /// of this node's: true when a process here read a version there that its late save would go
    /// over (the base of a lost update, docs/semantics.md "Lost updates"), which must be kept
    /// before this node gives its right back. Called with the node's lock held: it only looks.
    func clusterKeepsReadVersions(at path: ItemPath, inside: Bool) -> Bool
    /// Keeps those versions (returns once they are kept); the node gives its right back, and so
    /// lets `node`'s change through, only then. Called off the node's lock and off its watch.
    func clusterWillYield(_ path: ItemPath, inside: Bool, to node: String)
    /// Another node's access to `intents` runs here from now on (its proxy was granted), until
    /// `clusterChangeEnded`: what this node's backing watcher sees of its writes meanwhile is that
    /// node's change, which its record tells (docs/cluster.md, "Every save one change").
    func clusterChangeBegins(_ intents: [FileAccessIntent])
    /// That access ended; `told`: its change record told changes here (before this).
    func clusterChangeEnded(_ intents: [FileAccessIntent], told: Bool)
    /// An access of this node changed these items (its presenters heard; its record goes to the
    /// other nodes).
    func clusterChangedHere(_ changes: [AccessChange])
    /// These paths, presented on another node, may name another file now (a presenter came, went
    /// or moved, or the item changed): a file with several names finds its presented names by
    /// what the presented paths name (`PresentedInodes`). May be called with the node's lock held:
    /// takes note only.
    func clusterPresentedItemsMayHaveChanged(_ paths: [ItemPath])
}

extension ClusterHost {
    public func clusterChangesMissed(at paths: [ItemPath], origin: AccessOrigin) -> [ItemPath] { [] }
    public func clusterKeepsReadVersions(at path: ItemPath, inside: Bool) -> Bool { false }
    public func clusterWillYield(_ path: ItemPath, inside: Bool, to node: String) {}
    public func clusterChangeBegins(_ intents: [FileAccessIntent]) {}
    public func clusterChangeEnded(_ intents: [FileAccessIntent], told: Bool) {}
    public func clusterChangedHere(_ changes: [AccessChange]) {}
    public func clusterPresentedItemsMayHaveChanged(_ paths: [ItemPath]) {}
}

/// One step of the cluster's coordination, as etcd ordered it (`coordfs watch --cluster`).
public struct ClusterStep: Sendable, CustomStringConvertible {
    /// The etcd revision of the step: one order for every node.
    public var revision: Revision
    /// The node that took the step.
    public var node: String
    /// What happened, in words.
    public var what: String
    /// The item, when there is one.
    public var path: ItemPath?
    /// Every item the step concerns (`path` among them): the control socket shows a step to a user
    /// only if the user may see them all (docs/protocol.md, "Threat model").
    public var paths: [ItemPath]
    /// What another node said with it (a refusal's reason), which may name items.
    public var detail: String?

    public init(revision: Revision, node: String, what: String, path: ItemPath?, paths: [ItemPath]? = nil, detail: String? = nil) {
        self.revision = revision
        self.node = node
        self.what = what
        self.path = path
        self.paths = paths ?? path.map { [$0] } ?? []
        self.detail = detail
    }

    public var description: String { "rev \(revision) \(node): \(what)" + (detail.map { ": \($0)" } ?? "") + (path.map { " \($0)" } ?? "") }

    /// A step that says how the cluster stands rather than what one access did (the daemon logs
    /// these): a node joined or left, this node's session lost or begun, etcd unreachable or back,
    /// an access granted locally or past another node's right, an ask no node answered in time, a change
    /// another node made here that no change record told (``ClusterNode`` looked at the file).
    public var isNotable: Bool {
        what.hasPrefix("joined") || what.hasPrefix("left") || what.hasPrefix("session")
            || what.hasPrefix("etcd") || what.hasPrefix("went ahead") || what.hasPrefix("no answer")
            || what.hasPrefix("untold change")
    }
}

/// The cluster as one node sees it (`coordfs status --cluster`).
public struct ClusterStatus: Sendable {
    public struct Hold: Sendable, Hashable {
        public var path: ItemPath
        /// `read`, `write` or `tree` (the item and everything inside it).
        public var mode: String
        /// The fencing token of the right (the etcd revision that granted it).
        public var token: Revision
    }
    public struct Node: Sendable {
        public var name: String
        /// Wall-clock seconds since the epoch when its session began.
        public var since: Double
        public var lease: LeaseID
        public var ttl: Int64
        public var presenters: [ItemPath]
        public var holds: [Hold]
    }
    public var node: String
    public var prefix: String
    /// Whether this node's last call to etcd succeeded.
    public var reachable: Bool
    /// Whether this node has a live session (its lease renewed within its TTL).
    public var sessionValid: Bool
    public var unreachablePolicy: UnreachablePolicy
    /// Accesses granted locally while etcd was unreachable (policy `local`).
    public var localGrants: Int
    /// The last etcd revision this node has seen.
    public var revision: Revision
    public var nodes: [Node]
    /// Since when (wall-clock seconds) etcd has been unreachable, nil while it answers.
    public var unreachableSince: Double? = nil
    /// The last error etcd's client gave (kept after etcd answers again).
    public var lastError: String? = nil
    /// etcd's refusal while it refuses every write because its space quota is used up (NOSPACE),
    /// nil once a write of this node goes through again.
    public var full: String? = nil
}
