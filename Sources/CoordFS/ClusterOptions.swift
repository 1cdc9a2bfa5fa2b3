import Cluster

/// The cluster's `-o` options (docs/cluster.md, "Mount options"). Without `cluster=` the mount is
/// a single host's, as before: no etcd, nothing paid.
///
/// | option | default | meaning |
/// |---|---|---|
/// | `cluster=URL[,URL...]` | none | etcd's client endpoints (`http://` or `https://`); further URLs may follow as items of their own |
/// | `node=NAME` | the host name | this node's name in the cluster (1 to 64 letters, digits, `.`, `-`, `_`; not `.` or `..`); its state folder is `BACKING/.coordfs/nodes/NAME`; a name another live mount of the cluster has is refused |
/// | `cluster_prefix=P` | `coordfs` | every key under `P/`: several clusters on one etcd |
/// | `cluster_ttl=S` | 10 | the node's lease, in seconds (2 to 3600) |
/// | `cluster_ca=FILE`, `cluster_cert=FILE`, `cluster_key=FILE` | none | TLS: the members' CA, this node's client certificate and key (PEM) |
/// | `cluster_user=U`, `cluster_password_file=FILE` | none | etcd authentication (the password is the file's first line, never logged) |
/// | `cluster_unreachable=fail\|local` | fail | an access that needs the cluster while etcd is unreachable fails (EIO), or goes on locally and is recorded |
/// | `cluster_record_interval=MS` | 2 | change records wait at most this long after the node's previous batch, to go to etcd together (0: as soon as it is in etcd) |
/// | `cluster_unpresented_interval=MS` | 50 | the same for records that concern no presenter of another node (0: `cluster_record_interval`); other nodes' kernels may keep names and attributes cached without a right that much longer after a change here (docs/cluster.md, "Coherence") |
public struct ClusterOptions: Sendable, Equatable {
    public var endpoints: [String] = []
    public var node: String?
    public var prefix = "coordfs"
    public var leaseTTL: Int64 = 10
    public var caFile: String?
    public var certificateFile: String?
    public var keyFile: String?
    public var user: String?
    public var passwordFile: String?
    public var unreachable: UnreachablePolicy = .fail
    /// Seconds change records wait to be sent together (`ClusterConfiguration.recordInterval`).
    public var recordInterval = ClusterConfiguration.defaultRecordInterval
    /// Seconds records that concern no presenter of another node may wait instead
    /// (`ClusterConfiguration.unpresentedRecordInterval`; 0: `recordInterval`).
    public var unpresentedRecordInterval = ClusterConfiguration.defaultUnpresentedRecordInterval

    public init() {}

    /// Whether the mount is a node of a cluster.
    public var enabled: Bool { !endpoints.isEmpty }

    public static let ttlRange: ClosedRange<Int64> = 2...3600
    /// The record intervals' range, in milliseconds.
    public static let intervalRange: ClosedRange<Double> = 0...1000

    public static let documentation = "cluster: cluster=URL,URL... (etcd endpoints), node=NAME (one mount's: a name in use is refused), cluster_prefix=P, cluster_ttl=S (2 to 3600), "
        + "cluster_ca=FILE, cluster_cert=FILE, cluster_key=FILE, cluster_user=U, cluster_password_file=FILE, cluster_unreachable=fail|local, "
        + "cluster_record_interval=MS (0 to 1000, default 2), cluster_unpresented_interval=MS (0 to 1000, default 50)"

    /// A node name: 1 to 64 letters, digits, `.`, `-`, `_`, never `.` or `..` (it names the node's
    /// state folder, `BACKING/.coordfs/nodes/NODE`, and its keys in etcd).
    public static func isValidNodeName(_ name: String) -> Bool { ClusterConfiguration.isValidNodeName(name) }

    /// This node's name: `node=`, else the host name with every character a name may not hold
    /// replaced by `_` (at most 64; `localhost` when nothing is left).
    public var nodeName: String {
        if let node { return node }
        let host = String(ClusterConfiguration.hostName().unicodeScalars.map { ClusterConfiguration.isValidNodeName("a" + String($0)) ? Character($0) : "_" }.prefix(64))
        return Self.isValidNodeName(host) ? host : "localhost"
    }

    static func isEndpoint(_ s: String) -> Bool { s.hasPrefix("http://") || s.hasPrefix("https://") }

    /// Applies one `-o` item if it is a cluster option (false otherwise). `previousWasEndpoint`: the
    /// item before was an endpoint, so a bare URL continues the list.
    public mutating func parse(_ key: String, _ value: String?, item: String, previousWasEndpoint: Bool) throws(MountError) -> Bool {
        if value == nil || !key.hasPrefix("cluster") && key != "node" {
            // `cluster=a,b`: the comma split `b` off.
            guard previousWasEndpoint, Self.isEndpoint(item) else { return false }
            endpoints.append(item)
            return true
        }
        guard let value else { return false }
        func file() throws(MountError) -> String {
            guard value.hasPrefix("/") else { throw .badOption(item, "expects an absolute path") }
            return value
        }
        switch key {
        case "cluster":
            guard Self.isEndpoint(value) else { throw .badOption(item, "expects etcd endpoints, http://HOST:PORT or https://HOST:PORT") }
            endpoints.append(value)
        case "node":
            guard Self.isValidNodeName(value) else { throw .badOption(item, "expects 1 to 64 letters, digits, '.', '-' or '_' (not '.' or '..')") }
            node = value
        case "cluster_prefix":
            guard ClusterConfiguration.isValidPrefix(value) else { throw .badOption(item, "expects 1 to 128 bytes of letters, digits, '.', '-', '_' and '/'") }
            prefix = value
        case "cluster_ttl":
            guard let n = Int64(value), Self.ttlRange.contains(n) else { throw .badOption(item, "expects 2 to 3600 seconds") }
            leaseTTL = n
        case "cluster_ca": caFile = try file()
        case "cluster_cert": certificateFile = try file()
        case "cluster_key": keyFile = try file()
        case "cluster_user":
            guard !value.isEmpty else { throw .badOption(item, "expects a user name") }
            user = value
        case "cluster_password_file": passwordFile = try file()
        case "cluster_unreachable":
            guard let p = UnreachablePolicy(rawValue: value) else { throw .badOption(item, "expects fail or local") }
            unreachable = p
        case "cluster_record_interval", "cluster_unpresented_interval":
            guard let ms = Double(value), ms.isFinite, Self.intervalRange.contains(ms) else {
                throw .badOption(item, "expects 0 to 1000 milliseconds")
            }
            if key == "cluster_record_interval" { recordInterval = ms / 1e3 } else { unpresentedRecordInterval = ms / 1e3 }
        default:
            return false
        }
        return true
    }

    /// Options that make sense only together.
    func check() throws(MountError) {
        guard enabled else {
            if node != nil || caFile != nil || user != nil || passwordFile != nil {
                throw .badOption("cluster", "node=, cluster_* options need cluster=ENDPOINTS")
            }
            return
        }
        if (certificateFile == nil) != (keyFile == nil) { throw .badOption("cluster_cert", "cluster_cert and cluster_key go together") }
        if (user == nil) != (passwordFile == nil) { throw .badOption("cluster_user", "cluster_user and cluster_password_file go together") }
    }
}
