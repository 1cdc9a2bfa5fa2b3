// The primitives the cluster is built on: etcd v3's key-value store, leases, transactions and
// watches, and nothing of our own (no consensus, locking or membership protocol). The cluster logic
// (module Cluster) speaks only this interface; `MemoryClusterStore` implements it in memory for unit
// tests, and the etcd client implements it against a real etcd. Keys and values are bytes, as in
// etcd (a key holds a path, and Linux names are bytes).

/// An etcd revision: the store's logical clock, increased by every change. A grant's fencing token.
public typealias Revision = Int64

/// An etcd lease: keys put with it are deleted when it expires or is revoked.
public typealias LeaseID = Int64

/// One key and its value with etcd's metadata.
public struct KeyValue: Sendable, Hashable {
    public var key: [UInt8]
    public var value: [UInt8]
    /// The revision of the put that created the key (since its last deletion).
    public var createRevision: Revision
    /// The revision of the last put of the key.
    public var modRevision: Revision
    /// How many times the key was put since it was created (1 after the first put).
    public var version: Int64
    /// The lease the key is attached to; 0 for none.
    public var lease: LeaseID

    public init(key: [UInt8], value: [UInt8], createRevision: Revision, modRevision: Revision, version: Int64, lease: LeaseID) {
        self.key = key
        self.value = value
        self.createRevision = createRevision
        self.modRevision = modRevision
        self.version = version
        self.lease = lease
    }
}

/// A condition of a transaction (etcd's `Compare`). A key that does not exist has version 0,
/// create and mod revision 0 and lease 0; a comparison of its value is false whatever the operator
/// (etcd cannot tell a missing value from an empty one, so it fails them all). A transaction that
/// puts a key twice, or puts a key it also deletes, in either branch, is refused (`failed`).
public struct Compare: Sendable, Hashable {
    public enum Target: Sendable, Hashable {
        case version(Int64)
        case createRevision(Revision)
        case modRevision(Revision)
        case value([UInt8])
        case lease(LeaseID)
    }

    public enum Result: Sendable, Hashable {
        case equal, notEqual, greater, less
    }

    public var key: [UInt8]
    public var result: Result
    public var target: Target

    public init(key: [UInt8], _ result: Result, _ target: Target) {
        self.key = key
        self.result = result
        self.target = target
    }
}

/// One operation of a transaction.
public enum ClusterOperation: Sendable, Hashable {
    /// Puts `value` at `key`, attached to `lease` (0: none).
    case put(key: [UInt8], value: [UInt8], lease: LeaseID)
    /// Deletes `key`, or every key starting with `key` when `prefix` is set.
    case delete(key: [UInt8], prefix: Bool)
    /// Reads `key`, or every key starting with `key` when `prefix` is set.
    case range(key: [UInt8], prefix: Bool)
}

/// The outcome of a transaction.
public struct TransactionResult: Sendable, Hashable {
    /// Whether every comparison held (the success branch ran) or not (the failure branch ran).
    public var succeeded: Bool
    /// The store's revision after the transaction.
    public var revision: Revision
    /// For each `.range` operation of the branch that ran, in order, the keys it read.
    public var ranges: [[KeyValue]]

    public init(succeeded: Bool, revision: Revision, ranges: [[KeyValue]]) {
        self.succeeded = succeeded
        self.revision = revision
        self.ranges = ranges
    }
}

/// One change seen by a watch.
public enum WatchEvent: Sendable, Hashable {
    case put(KeyValue)
    /// The key's last value is not carried; `modRevision` is the deletion's revision.
    case delete(key: [UInt8], modRevision: Revision)
}

/// The changes of one or more revisions, delivered in revision order.
public struct WatchBatch: Sendable, Hashable {
    /// The store's revision when the batch was sent (at least that of its last event).
    public var revision: Revision
    public var events: [WatchEvent]

    public init(revision: Revision, events: [WatchEvent]) {
        self.revision = revision
        self.events = events
    }
}

public enum ClusterStoreError: Error, Sendable, Hashable {
    /// No endpoint could be reached, or the store has no quorum.
    case unavailable(String)
    /// The lease expired or was revoked.
    case leaseNotFound(LeaseID)
    /// A watch asked for revisions the store has compacted away; the oldest it still has (the
    /// revision compacted to: a watch from it works).
    case compacted(oldestAvailable: Revision)
    /// A watch asked to go on from a revision the store has not reached, although an earlier
    /// answer showed it: the store lost its history (etcd started again on an empty or older data
    /// folder at the same address) and is now at `current`. Its revisions count again from there, so
    /// a watch from the revision after the last one seen would stay silent until the store passed
    /// it: read everything again and watch from `current + 1`.
    case historyLost(current: Revision)
    /// Authentication failed or is missing.
    case unauthenticated(String)
    /// The store answers but refuses every write: its space quota is used up (etcd's NOSPACE
    /// alarm, "database space exceeded") until its operator frees space and disarms the alarm.
    case full(String)
    /// Any other refusal by the store, with its message.
    case failed(String)
}

/// etcd v3's primitives. Every call may throw `ClusterStoreError`.
public protocol ClusterStore: Sendable {
    /// Reads `key`, or every key starting with `key` when `prefix` is set, with the store's revision.
    func range(_ key: [UInt8], prefix: Bool) async throws -> (values: [KeyValue], revision: Revision)

    /// Puts `value` at `key` attached to `lease` (0: none) and returns the new revision.
    @discardableResult
    func put(_ key: [UInt8], _ value: [UInt8], lease: LeaseID) async throws -> Revision

    /// Deletes `key` (or the keys under it) and returns the new revision and how many were deleted.
    @discardableResult
    func delete(_ key: [UInt8], prefix: Bool) async throws -> (revision: Revision, deleted: Int)

    /// Runs `success` if every comparison holds, else `failure`, atomically.
    func transaction(_ compare: [Compare], success: [ClusterOperation], failure: [ClusterOperation]) async throws -> TransactionResult

    /// Grants a lease of `ttl` seconds and returns its id and the TTL granted.
    func grantLease(ttl: Int64) async throws -> (id: LeaseID, ttl: Int64)

    /// Renews the lease once; returns the TTL left after renewal. Throws `leaseNotFound` if it expired.
    func keepAlive(_ lease: LeaseID) async throws -> Int64

    /// Revokes the lease, deleting its keys.
    func revokeLease(_ lease: LeaseID) async throws

    /// Every change to `key` (or under it with `prefix`) from `fromRevision` on, in order, until the
    /// stream's consumer stops or the store fails (the stream then throws).
    func watch(_ key: [UInt8], prefix: Bool, fromRevision: Revision) -> AsyncThrowingStream<WatchBatch, Error>
}
