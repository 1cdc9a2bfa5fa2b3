import FuseKit
import Glibc
import LinuxGNU
import NameBytes

/// The reserved folder inside the backing folder where a mount keeps its state (the event log, the
/// document store, the control socket, the daemon's pid and log). It does not exist through the mount.
///
/// A mount on one host keeps it in `BACKING/.coordfs`. A node of a cluster (`-o cluster=`) keeps
/// its own in `BACKING/.coordfs/nodes/NODE`: several hosts mount one shared folder (NFS, SMB,
/// CephFS), and each node's log, store, socket and pid file are its own (docs/cluster.md, "State
/// folders"). A node's folder also holds its mount record (`mount`: this boot, the daemon's pid and
/// the mount point), by which the CLI finds the node mounted at a mount point.
public struct StateFolder: Sendable, Equatable {
    /// Its name in the backing folder's root.
    public static let name = ".coordfs"
    /// The folder of the nodes' state folders, inside `name`.
    public static let nodesName = "nodes"

    public let path: String
    /// The cluster node whose state this is; nil on one host.
    public let node: String?
    /// The backing folder's `.coordfs`.
    public let root: String
    /// The backing folder it is in.
    public let backing: String

    public init(backing: String) {
        self.backing = backing
        root = backing + "/" + StateFolder.name
        path = root
        node = nil
    }

    /// A cluster node's state folder (`node` is a valid node name: no `/`, never `.` or `..`).
    public init(backing: String, node: String) {
        self.backing = backing
        root = backing + "/" + StateFolder.name
        path = root + "/" + StateFolder.nodesName + "/" + node
        self.node = node
    }

    /// A mount's state folder: the node's when the options make it a cluster node.
    public init(backing: String, options: MountOptions) {
        if options.cluster.enabled { self.init(backing: backing, node: options.cluster.nodeName) } else { self.init(backing: backing) }
    }

    public var pidFile: String { path + "/daemon.pid" }
    public var daemonLog: String { path + "/daemon.log" }
    public var controlSocket: String { path + "/control.sock" }
    public var eventLog: String { path + "/log" }
    public var store: String { path + "/store" }
    /// A node's mount record (`writeMountRecord`).
    public var mountRecord: String { path + "/mount" }

    /// The folders from `.coordfs` down to this one.
    var chain: [String] { node == nil ? [root] : [root, root + "/" + StateFolder.nodesName, path] }

    /// Creates the folder (owner only) if missing, with `.coordfs/nodes` above a node's, and makes
    /// sure no other user can change what the daemon writes there: the daemon (root, on a shared
    /// mount) writes its pid file, its log, the event log, the store and the socket in it, by path.
    /// So each folder of the chain must be a folder (not a link) of this user's that nobody else may
    /// write, and the backing folder must not let another user move `.coordfs` away and put one of
    /// its own in its place (owned by this user or root, and not writable by others unless sticky).
    /// Otherwise the mount is refused, before anything is opened or written there
    /// (docs/protocol.md, "Threat model").
    public func create() throws(MountError) {
        let euid = geteuid()
        var backing = stat()
        let backingPath = self.backing
        if backingPath.withNameCString({ stat($0, &backing) }) == 0 {
            if backing.st_uid != euid && backing.st_uid != 0 {
                throw .system("the backing folder '\(backingPath)' belongs to uid \(backing.st_uid): that user could move '\(StateFolder.name)' away and put a folder of its own in its place, where this mount (uid \(euid)) writes its state; mount a folder owned by uid \(euid) or root")
            }
            if backing.st_mode & 0o022 != 0 && backing.st_mode & S_ISVTX == 0 {
                throw .system("the backing folder '\(backingPath)' is writable by other users and not sticky (mode \(String(backing.st_mode & 0o7777, radix: 8))): any of them could move '\(StateFolder.name)' away and put a folder of its own in its place; make it sticky (chmod +t) or take away their write permission")
            }
        }
        for folder in chain {
            if folder.withNameCString({ mkdir($0, 0o700) }) != 0 && errno != EEXIST {
                throw .system("cannot create the state folder '\(folder)': \(String(cString: strerror(errno)))")
            }
            var st = stat()
            guard folder.withNameCString({ lstat($0, &st) }) == 0, (st.st_mode & S_IFMT) == S_IFDIR else {
                throw .system("'\(folder)' is reserved for coordfs's state but is not a folder; move it away")
            }
            guard st.st_uid == euid else {
                throw .system("'\(folder)' is reserved for coordfs's state but belongs to uid \(st.st_uid), not to this mount's user (uid \(euid)): that user could read or redirect what the mount writes there; look at what it holds and remove it")
            }
            guard st.st_mode & 0o022 == 0 else {
                throw .system("'\(folder)' is reserved for coordfs's state but is writable by other users (mode \(String(st.st_mode & 0o7777, radix: 8))): they could read or redirect what the mount writes there; look at what it holds and remove it, or chmod go-w it")
            }
        }
    }

    /// Lets other users reach the control socket (search only, never list or change): every folder
    /// of the chain this user owns. `nodes` may be listed too, so that a client finds the node whose
    /// mount record names its mount point (the names of nodes are no secret: `status --cluster`).
    func openForSearch() {
        for folder in chain {
            var st = stat()
            guard folder.withNameCString({ lstat($0, &st) }) == 0, st.st_uid == geteuid() else { continue }
            _ = folder.withNameCString { chmod($0, node != nil && folder == chain[1] ? 0o755 : 0o711) }
        }
    }

    /// The pid written by a running daemon, if its process is still alive.
    public func runningDaemonPID() -> pid_t? {
        guard let text = readWholeFile(pidFile), let pid = pid_t(text.trimmingCharacters(in: " \n")), pid > 0 else { return nil }
        return kill(pid, 0) == 0 || errno == EPERM ? pid : nil
    }

    // MARK: Mount records (cluster nodes)

    /// Writes the node's mount record (after the mount, by the daemon; `NodeMountRecord`).
    func writeMountRecord(mountpoint: String) {
        if node != nil { NodeMountRecord.write(in: path, mountpoint: mountpoint) }
    }

    /// Removes the node's mount record (a clean end; a killed daemon leaves it, so that its stale
    /// mount is still found).
    func removeMountRecord() {
        if node != nil { NodeMountRecord.remove(in: path) }
    }

    /// The cluster nodes whose state folders are in `backing` (valid names only, sorted).
    public static func nodes(backing: String) -> [String] {
        NodeMountRecord.nodes(backing: backing).filter(ClusterOptions.isValidNodeName)
    }

    /// The state folder of the coordfs mount of `backing` at `mountpoint` on this host: the node
    /// whose mount record names this mount point in this boot (a live daemon first; for a stale
    /// mount, whose daemon died, the newest record), else the one-host folder.
    public static func of(backing: String, mountpoint: String, stale: Bool) -> StateFolder {
        let single = StateFolder(backing: backing)
        let deadCount = stale || single.runningDaemonPID() == nil
        guard let folder = NodeMountRecord.nodeStateFolder(backing: backing, mountpoint: mountpoint, deadDaemonsCount: deadCount),
              let node = folder.split(separator: "/").last.map(String.init), ClusterOptions.isValidNodeName(node) else { return single }
        return StateFolder(backing: backing, node: node)
    }
}

extension String {
    func trimmingCharacters(in set: String) -> String {
        let chars = Set(set)
        var s = Substring(self)
        while let f = s.first, chars.contains(f) { s = s.dropFirst() }
        while let l = s.last, chars.contains(l) { s = s.dropLast() }
        return String(s)
    }
}
