// The cluster over the socket (docs/protocol.md, "The cluster"): `coordfs status --cluster` and
// `coordfs watch --cluster` ask a node's daemon what it knows of its cluster (docs/cluster.md). A
// mount that is no node of a cluster answers both with the error `notFound`.

/// `clusterStatus`: the cluster as this node sees it. Replied to with `clusterStatusReport`.
package struct ClusterStatusQuery: Sendable, Hashable {
    package var id: RequestID
    package init(id: RequestID) { self.id = id }
}

extension ClusterStatusQuery: IDOnlyRequest {
    static let wireName = "clusterStatus"
    static let direction = ControlMessage.Direction.toDaemon
    var wrapped: ControlMessage { .clusterStatus(self) }
}

/// `clusterStatusReport`: this node, etcd's reachability, and every node with its presenters and
/// holds (rights), those the peer may see.
package struct ClusterStatusReport: Sendable, Hashable {
    package struct Hold: Sendable, Hashable {
        package var path: MountPath
        /// `read`, `write` or `tree`.
        package var mode: String
        /// The fencing token (the etcd revision that granted the right).
        package var token: Int64
        package init(path: MountPath, mode: String, token: Int64) {
            self.path = path
            self.mode = mode
            self.token = token
        }
    }
    package struct Node: Sendable, Hashable {
        package var name: String
        /// When its session began, milliseconds since the epoch (0: not known yet).
        package var sinceMs: UInt64
        /// Its etcd lease (a 64-bit id, in decimal).
        package var lease: Int64
        package var ttl: UInt64
        package var presenters: [MountPath]
        package var holds: [Hold]
        package init(name: String, sinceMs: UInt64, lease: Int64, ttl: UInt64, presenters: [MountPath] = [], holds: [Hold] = []) {
            self.name = name
            self.sinceMs = sinceMs
            self.lease = lease
            self.ttl = ttl
            self.presenters = presenters
            self.holds = holds
        }
    }
    package var id: RequestID
    /// This node's name.
    package var node: String
    /// The cluster's key prefix in etcd.
    package var prefix: String
    /// Whether this node's last call to etcd succeeded.
    package var reachable: Bool
    /// Whether this node has a live session (its lease renewed within its TTL).
    package var sessionValid: Bool
    /// `fail` or `local`.
    package var unreachable: String
    /// Accesses granted by this node alone while etcd was unreachable.
    package var localGrants: UInt64
    /// The last etcd revision this node has seen.
    package var revision: Int64
    package var nodes: [Node]
    /// Since when etcd has been unreachable (ms since the epoch), absent while it answers.
    package var unreachableSinceMs: UInt64?
    /// The last error etcd's client gave (kept after etcd answers again).
    package var lastError: String?
    /// etcd's refusal while its space quota is used up and it takes no write, and what its
    /// operator should do (absent otherwise).
    package var etcdFull: String?

    package init(id: RequestID, node: String, prefix: String, reachable: Bool, sessionValid: Bool, unreachable: String,
                 localGrants: UInt64, revision: Int64, nodes: [Node], unreachableSinceMs: UInt64? = nil, lastError: String? = nil,
                 etcdFull: String? = nil) {
        self.etcdFull = etcdFull
        self.unreachableSinceMs = unreachableSinceMs
        self.lastError = lastError
        self.id = id
        self.node = node
        self.prefix = prefix
        self.reachable = reachable
        self.sessionValid = sessionValid
        self.unreachable = unreachable
        self.localGrants = localGrants
        self.revision = revision
        self.nodes = nodes
    }
}

extension ClusterStatusReport: WireMessage {
    static let wireName = "clusterStatusReport"
    static let direction = ControlMessage.Direction.toClient
    var requestID: RequestID? { id }
    var wrapped: ControlMessage { .clusterStatusReport(self) }

    init(wire fields: inout Fields) throws(ProtocolError) {
        id = try fields.requestID()
        node = try fields.string("node", maxBytes: 64)
        prefix = try fields.string("prefix", maxBytes: 128)
        reachable = try fields.bool("reachable")
        sessionValid = try fields.bool("sessionValid")
        unreachable = try fields.string("unreachable", maxBytes: 16)
        localGrants = try fields.uint("localGrants")
        revision = Int64(try fields.uint("revision"))
        nodes = []
        for (offset, value) in try fields.array("nodes").enumerated() {
            let item = try fields.nested(value, "nodes[\(offset)]")
            let (magnitude, negative) = try item.decimal("lease", signed: true)
            let lease = Int64(bitPattern: negative ? 0 &- magnitude : magnitude)
            var n = Node(name: try item.string("name", maxBytes: 64), sinceMs: try item.uint("sinceMs"), lease: lease, ttl: try item.uint("ttl"))
            for (i, p) in try item.array("presenters").enumerated() {
                guard case .string(let text) = p, let path = try? MountPath(validating: text) else {
                    throw item.fail(.invalidPath, "field \"presenters\"[\(i)] must be a path string")
                }
                n.presenters.append(path)
            }
            for (i, h) in try item.array("holds").enumerated() {
                let hold = try item.nested(h, "holds[\(i)]")
                n.holds.append(Hold(path: try hold.path("path"), mode: try hold.string("mode", maxBytes: 16), token: Int64(try hold.uint("token"))))
            }
            nodes.append(n)
        }
        unreachableSinceMs = try fields.optionalUInt("unreachableSinceMs")
        lastError = try fields.optionalString("lastError", maxBytes: 65536)
        etcdFull = try fields.optionalString("etcdFull", maxBytes: 65536)
    }

    func encode(to o: inout JSONObject) {
        o.put(id: id)
        o["node"] = .string(node)
        o["prefix"] = .string(prefix)
        o["reachable"] = .bool(reachable)
        o["sessionValid"] = .bool(sessionValid)
        o["unreachable"] = .string(unreachable)
        o["localGrants"] = .int(Int64(localGrants))
        o["revision"] = .int(revision)
        o["nodes"] = .array(nodes.map { n in
            .object(JSONObject([
                "name": .string(n.name), "sinceMs": .int(Int64(n.sinceMs)), "lease": .string(String(n.lease)), "ttl": .int(Int64(n.ttl)),
                "presenters": .array(n.presenters.map { .string($0.wireValue) }),
                "holds": .array(n.holds.map { h in
                    .object(JSONObject(["path": .string(h.path.wireValue), "mode": .string(h.mode), "token": .int(h.token)]))
                }),
            ]))
        })
        if let unreachableSinceMs { o["unreachableSinceMs"] = .int(Int64(unreachableSinceMs)) }
        if let lastError { o["lastError"] = .string(lastError) }
        if let etcdFull { o["etcdFull"] = .string(etcdFull) }
    }
}

/// `clusterSteps`: the coordination steps of every node this node has seen (etcd's revision
/// order), from a cursor. Replied to with `clusterStepList`.
package struct ClusterStepsQuery: Sendable, Hashable {
    package var id: RequestID
    /// The first step wanted (its `seq`); nil: from now on (none of those seen before).
    package var from: UInt64?
    package init(id: RequestID, from: UInt64? = nil) {
        self.id = id
        self.from = from
    }
}

extension ClusterStepsQuery: WireMessage {
    static let wireName = "clusterSteps"
    static let direction = ControlMessage.Direction.toDaemon
    var requestID: RequestID? { id }
    var wrapped: ControlMessage { .clusterSteps(self) }
    init(wire fields: inout Fields) throws(ProtocolError) {
        id = try fields.requestID()
        from = try fields.optionalUInt("from")
    }
    func encode(to o: inout JSONObject) {
        o.put(id: id)
        if let from { o["from"] = .int(Int64(from)) }
    }
}

/// `clusterStepList`: steps, oldest first, those the peer may see.
package struct ClusterStepList: Sendable, Hashable {
    package struct Step: Sendable, Hashable {
        /// The daemon's number of the step (a cursor, as `next`).
        package var seq: UInt64
        /// The etcd revision: one order for every node.
        package var revision: Int64
        package var node: String
        package var what: String
        package var path: MountPath?
        package init(seq: UInt64, revision: Int64, node: String, what: String, path: MountPath? = nil) {
            self.seq = seq
            self.revision = revision
            self.node = node
            self.what = what
            self.path = path
        }
    }
    package var id: RequestID
    package var steps: [Step]
    /// `from` of the next `clusterSteps`.
    package var next: UInt64
    /// The oldest step the daemon still keeps (steps before it are gone: a gap).
    package var oldest: UInt64
    package init(id: RequestID, steps: [Step], next: UInt64, oldest: UInt64) {
        self.id = id
        self.steps = steps
        self.next = next
        self.oldest = oldest
    }
}

extension ClusterStepList: WireMessage {
    static let wireName = "clusterStepList"
    static let direction = ControlMessage.Direction.toClient
    var requestID: RequestID? { id }
    var wrapped: ControlMessage { .clusterStepList(self) }

    init(wire fields: inout Fields) throws(ProtocolError) {
        id = try fields.requestID()
        steps = []
        for (offset, value) in try fields.array("steps").enumerated() {
            let item = try fields.nested(value, "steps[\(offset)]")
            steps.append(Step(seq: try item.uint("seq"), revision: Int64(try item.uint("revision")), node: try item.string("node", maxBytes: 64),
                              what: try item.string("what", maxBytes: 65536), path: try item.optionalPath("path")))
        }
        next = try fields.uint("next")
        oldest = try fields.uint("oldest")
    }

    func encode(to o: inout JSONObject) {
        o.put(id: id)
        o["steps"] = .array(steps.map { s in
            var step = JSONObject(["seq": .int(Int64(s.seq)), "revision": .int(s.revision), "node": .string(s.node), "what": .string(s.what)])
            if let path = s.path { step["path"] = .string(path.wireValue) }
            return .object(step)
        })
        o["next"] = .int(Int64(next))
        o["oldest"] = .int(Int64(oldest))
    }
}
