import Glibc
import Linux

/// How the daemon shares out its descriptors, every part cut from one number: RLIMIT_NOFILE as in
/// force once the daemon has raised it (docs/architecture.md, "The daemon's descriptors"). The
/// daemon raises the limit first and reads it once (`Daemon.init`); the node budget, the callers'
/// names tables and the share of users other than root and the owner all come from that reading.
/// (Before, the node budget was taken from the soft limit before the raise: 512 node descriptors
/// on a machine whose daemon then ran with 4,096 or a million.)
///
/// With L the limit:
/// - `nodes`: O_PATH descriptors of nodes the kernel knows, L/2 (at least 256); beyond it a node
///   keeps its file handle (`DescriptorBudget`).
/// - `callerNames`: `/proc/TID/comm` descriptors each of the daemon's two tables of callers' names
///   keeps (the mount's callers, the backing watcher's), L/16 within 16...512 (`ProcessNames`).
/// - `others`: what users other than root and the owner hold together, of what those two leave
///   (R = L - nodes - 2 callerNames): R less a quarter of it (at least 64). Their opens through the
///   mount (one each, an unnamed file two), their control-socket connections (two each: the socket
///   and the log segment its log reader keeps open) and the files their waiting resolutions keep
///   open all draw from it (`OpenFileBounds`).
/// - `kept`: the rest, for root's and the owner's opens and connections and the daemon's own files
///   (the store, the event log, the watcher, the FUSE session, sockets, what a request opens for the
///   moment).
/// - `reserve`: of all L, the top numbers no client's request may leave the daemon holding, root's
///   and the owner's included: L/16 within 32...256 (`DescriptorReserve`, kept by the daemon at
///   start), so its own opens and the runtime's always find one.
public struct DescriptorShares: Sendable, Equatable, CustomStringConvertible {
    /// The limit they are cut from.
    public let limit: Int
    /// Node descriptors the inode table may hold.
    public let nodes: Int
    /// Descriptors each table of callers' names may keep open.
    public let callerNames: Int
    /// How many such tables the daemon has.
    public static let callerNameTables = 2
    /// What users other than root and the owner may hold together.
    public let others: Int
    /// What no other user can take.
    public var kept: Int { max(0, limit - nodes - Self.callerNameTables * callerNames - others) }
    /// The top descriptor numbers kept for the daemon's own opens (`DescriptorReserve`).
    public var reserve: Int { DescriptorReserve.size(forLimit: limit) }

    public init(limit: Int) {
        let l = max(0, limit)
        self.limit = l
        nodes = max(256, l / 2)
        callerNames = max(16, min(512, l / 16))
        let rest = max(0, l - nodes - Self.callerNameTables * callerNames)
        others = max(0, rest - max(64, rest / 4))
    }

    /// Cut from RLIMIT_NOFILE's soft limit as in force now (1,024 when it cannot be read).
    public static func inForce() -> DescriptorShares {
        var r = rlimit()
        let soft = getrlimit(Int32(RLIMIT_NOFILE.rawValue), &r) == 0 ? Int(min(r.rlim_cur, 1 << 30)) : 1024
        return DescriptorShares(limit: soft)
    }

    /// The daemon's log line at start.
    public var description: String {
        "\(limit) (RLIMIT_NOFILE in force): \(nodes) for nodes, \(Self.callerNameTables * callerNames) for callers' names, "
            + "\(others) for users other than root and the owner (their opens through the mount, two per control-socket connection), "
            + "\(kept) kept for root, the owner and the daemon's own files; the top \(reserve) numbers only for the daemon's own "
            + "(no connection or open of any user's may hold one)"
    }
}
