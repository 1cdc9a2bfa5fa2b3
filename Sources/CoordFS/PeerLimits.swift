import DocumentStore
import Dispatch
import Glibc
import Synchronization

/// Bounds on what the control socket's peers may hold, per user (uid) and in total
/// (docs/protocol.md, "Limits"; `-o` options in README.md). Root and the mount's owner (the
/// daemon's own uid) are exempt from the per-user bounds and may open `reservedConnections`
/// beyond `maxConnections`: other users cannot lock them out.
public struct PeerLimits: Sendable, Equatable {
    /// `max_connections`: connections of users other than root and the owner, in total.
    public var maxConnections = 8192
    /// `max_user_connections`: connections of one user.
    public var maxUserConnections = 256
    /// `max_user_presenters`: presenters registered by one user's connections.
    public var maxUserPresenters = 20_000
    /// `max_user_accesses`: coordinated accesses held or waited for by one user's connections.
    public var maxUserAccesses = 4096
    /// `max_user_asks`: asks sent to one user's presenters and not answered yet; beyond it, asks to
    /// that user's presenters are not sent (the daemon answers them itself at once).
    public var maxUserAsks = 4096
    /// `max_user_waits`: requests through the mount of one user waiting at once (parked for a
    /// presenter's answer or an access held elsewhere); beyond it, the request fails with EAGAIN.
    /// On io_uring each such request holds a ring entry (FuseKit's `RingTransport`).
    public var maxUserWaits = 1024
    /// `max_user_open_files`: files and directories one user holds open through the mount (each
    /// holds a descriptor in the daemon; an unnamed `O_TMPFILE` file counts two); beyond it the open
    /// fails with ENFILE, nothing done. All such users' opens together are bounded too, by the
    /// daemon's descriptor limit (`OpenFileBounds.pool`), so that root and the owner keep theirs.
    public var maxUserOpenFiles = 8192
    /// `max_user_pinned_versions`: versions the document store keeps beyond retention for one user
    /// (its presenters' bases, its open conflicts, versions held for its live readers); beyond it
    /// its presenters' registrations are refused and nothing more is pinned for it
    /// (docs/document-store.md, "Per-user budget").
    public var maxUserPinnedVersions = 1000
    /// `max_user_pinned_mb`: the logical size of those versions, in MiB.
    public var maxUserPinnedBytes: Int64 = 1 << 30
    /// `max_user_readers`: records of the lost-update readers table (a process that read a
    /// document, docs/semantics.md "Lost updates") one user's processes hold; beyond it that user's
    /// oldest record goes.
    public var maxUserReaders = 65_536
    /// `max_readers`: records of that table in all; beyond it the oldest record of the user
    /// holding the most goes.
    public var maxReaders = 262_144
    /// `idle_timeout`: seconds after which a connection that holds nothing (no presenter, access
    /// or waiting request) and sent nothing is closed.
    public var idleTimeout = 300.0
    /// `slow_timeout`: seconds after which a connection whose unsent messages made no progress
    /// (its client stopped reading) is closed.
    public var slowTimeout = 30.0
    /// Connections root and the owner may open beyond `maxConnections`.
    public static let reservedConnections = 64

    public init() {}

    /// The users the per-user bounds do not apply to: root and the daemon's own user.
    public static var exemptUsers: Set<UInt32> { [0, getuid()] }

    /// The bounds of the lost-update readers table these limits set.
    var readers: ImplicitReaders.Limits { ImplicitReaders.Limits(perUser: maxUserReaders, total: maxReaders) }

    /// The document store's per-user budget of pinned versions these limits set.
    public var userPins: UserPinBudget {
        UserPinBudget(maxVersions: maxUserPinnedVersions, maxBytes: maxUserPinnedBytes, exempt: Self.exemptUsers)
    }

    static let documentation = """
        limits: max_connections=N, max_user_connections=N, max_user_presenters=N, max_user_accesses=N, \
        max_user_asks=N, max_user_waits=N, max_user_open_files=N (8192), max_user_pinned_versions=N (1000), \
        max_user_pinned_mb=N (1024), max_user_readers=N (65536), max_readers=N (262144), idle_timeout=S, \
        slow_timeout=S
        """

    /// Parses one option; false when `key` is not a limit.
    mutating func parse(_ key: String, _ value: String?, item: String) throws(MountError) -> Bool {
        func count(_ range: ClosedRange<Int>) throws(MountError) -> Int {
            guard let value, let n = Int(value), range.contains(n) else {
                throw .badOption(item, "expects a whole number from \(range.lowerBound) to \(range.upperBound)")
            }
            return n
        }
        func seconds() throws(MountError) -> Double {
            guard let value, let d = Double(value), d.isFinite, d >= 1, d <= 86_400 else {
                throw .badOption(item, "expects seconds, 1 to 86400")
            }
            return d
        }
        switch key {
        case "max_connections": maxConnections = try count(1...65_536)
        case "max_user_connections": maxUserConnections = try count(1...65_536)
        case "max_user_presenters": maxUserPresenters = try count(1...10_000_000)
        case "max_user_accesses": maxUserAccesses = try count(1...1_000_000)
        case "max_user_asks": maxUserAsks = try count(1...1_000_000)
        case "max_user_waits": maxUserWaits = try count(1...1_000_000)
        case "max_user_open_files": maxUserOpenFiles = try count(1...10_000_000)
        case "max_user_readers": maxUserReaders = try count(1...10_000_000)
        case "max_readers": maxReaders = try count(1...100_000_000)
        case "max_user_pinned_versions": maxUserPinnedVersions = try count(1...10_000_000)
        case "max_user_pinned_mb": maxUserPinnedBytes = Int64(try count(1...(1 << 30))) << 20
        case "idle_timeout": idleTimeout = try seconds()
        case "slow_timeout": slowTimeout = try seconds()
        default: return false
        }
        return true
    }
}

/// Counts per user that no single connection knows: asks pending on a user's presenters.
final class PeerQuotas: Sendable {
    let limits: PeerLimits
    let exempt: Set<UInt32>
    private let asks: UserCounts

    init(limits: PeerLimits, exempt: Set<UInt32> = PeerLimits.exemptUsers) {
        self.limits = limits
        self.exempt = exempt
        asks = UserCounts(limit: limits.maxUserAsks, exempt: exempt)
    }

    /// Reserves one pending ask for `uid`; false at `max_user_asks` (the ask is then not sent).
    func beginAsk(_ uid: UInt32) -> Bool { asks.begin(uid) }

    func endAsk(_ uid: UInt32) { asks.end(uid) }
}

/// Something each user may hold up to `limit` of at once (root and the mount's owner: unbounded).
/// `max_user_asks`, and `max_user_waits`: requests through the mount waiting at once, counted from
/// the park to the coordinator's completion, so one user's waiting requests stay bounded on either
/// transport.
final class UserCounts: Sendable {
    let limit: Int
    let exempt: Set<UInt32>
    private let counts = Mutex<[UInt32: Int]>([:])

    init(limit: Int, exempt: Set<UInt32> = PeerLimits.exemptUsers) {
        self.limit = limit
        self.exempt = exempt
    }

    /// Reserves one for `uid`; false at the limit.
    func begin(_ uid: UInt32) -> Bool {
        if exempt.contains(uid) { return true }
        return counts.withLock { table in
            let n = table[uid] ?? 0
            guard n < limit else { return false }
            table[uid] = n + 1
            return true
        }
    }

    func end(_ uid: UInt32) {
        if exempt.contains(uid) { return }
        counts.withLock { table in
            if let n = table[uid], n > 1 { table[uid] = n - 1 } else { table[uid] = nil }
        }
    }

    /// What `uid` holds.
    func count(_ uid: UInt32) -> Int { counts.withLock { $0[uid] ?? 0 } }
}

/// Gives freed memory back to the system: after 100,000 presenters leave, the allocator keeps
/// their pages unless asked (glibc's `malloc_trim`, looked up at run time: Swift's Glibc module
/// does not declare it). Runs at most once per second, off the caller's thread.
enum MemoryTrim {
    private typealias Trim = @convention(c) (Int) -> Int32
    private static let trim: Trim? = dlsym(nil, "malloc_trim").map { unsafeBitCast($0, to: Trim.self) }
    private static let pending = Mutex(false)

    /// Trims soon (one second from now, so that the teardown's other queues finish first).
    static func soon() {
        guard trim != nil, pending.withLock({ p -> Bool in defer { p = true }; return !p }) else { return }
        DispatchQueue.global(qos: .utility).asyncAfter(deadline: .now() + 1) {
            pending.withLock { $0 = false }
            _ = trim?(0)
        }
    }
}
