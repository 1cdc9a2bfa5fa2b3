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

    /// Where it is, as users and messages name it (`BACKING/.coordfs`, or a node's folder there).
    public private(set) var path: String
    /// The cluster node whose state this is; nil on one host.
    public let node: String?
    /// The backing folder's `.coordfs`.
    public private(set) var root: String
    /// The backing folder it is in.
    public private(set) var backing: String
    /// The descriptors of the chain's folders, `.coordfs` first, while this process holds them
    /// (`hold()`); kept open for the process's life.
    private var held: [Int32] = []
    /// The backing folder's descriptor, held with them (`hold()`); -1 before.
    private var heldBacking: Int32 = -1

    /// The same folder: held or not (`hold()`) makes no difference.
    public static func == (a: StateFolder, b: StateFolder) -> Bool {
        a.path == b.path && a.node == b.node && a.root == b.root && a.backing == b.backing
    }

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

    /// The folders from `.coordfs` down to this one, by name.
    var chain: [String] { node == nil ? [root] : [root, root + "/" + StateFolder.nodesName, path] }
    /// Their names, each in the one before (the first in the backing folder).
    private var chainNames: [String] { node.map { [StateFolder.name, StateFolder.nodesName, $0] } ?? [StateFolder.name] }

    /// The same state folder for this process's own reads and writes. Once `hold()` ran its paths
    /// go through the held descriptor (`/proc/self/fd/N/...`), so they reach the folder that was
    /// checked even if another user moves `.coordfs` away and puts a folder of its own in its place
    /// (possible where others may write the backing folder and it is not sticky). Never shown to
    /// users and never handed to another process: `/proc/self` is this process.
    ///
    /// Its `backing` and `root` go through the descriptors held on the backing folder and on
    /// `.coordfs` too: the daemon reads and writes the backing folder it mounted (the document
    /// store, the lost-update readers, conflict copies) by `io.backing`, so a backing folder
    /// renamed or moved while mounted is still the one served, and nothing of the mount's lands in
    /// another folder put at its old path.
    public var io: StateFolder {
        guard let fd = held.last else { return self }
        var copy = self
        copy.path = "/proc/self/fd/\(fd)"
        copy.root = "/proc/self/fd/\(held[0])"
        if heldBacking >= 0 { copy.backing = "/proc/self/fd/\(heldBacking)" }
        return copy
    }

    /// Creates the folder (owner only) if missing, with `.coordfs/nodes` above a node's, makes sure
    /// no other user can change what this process writes there, and holds it open (`io`): the
    /// daemon (root, on a shared mount) writes its pid file, its log, the event log, the store and
    /// the socket in it. Each folder of the chain is made and opened relative to the one before,
    /// never following a link, and must be a folder of this user's that nobody else may write;
    /// otherwise the mount is refused before anything is opened or written there (docs/protocol.md,
    /// "Threat model").
    ///
    /// Returns a warning when another user could move `.coordfs` away (the backing folder is
    /// theirs, or others may write it and it is not sticky): the mount goes on with the folder it
    /// holds, but commands that look for it by name would not find it until it is back.
    @discardableResult
    public mutating func hold() throws(MountError) -> String? {
        let euid = geteuid()
        let backingFD = backing.withNameCString { open($0, O_RDONLY | O_DIRECTORY | O_CLOEXEC) }
        guard backingFD >= 0 else {
            throw .system("cannot open the backing folder '\(backing)': \(String(cString: strerror(errno)))")
        }
        var keepBacking = false
        defer { if !keepBacking { close(backingFD) } }
        var warning: String?
        var info = stat()
        if fstat(backingFD, &info) == 0 {
            if info.st_uid != euid && info.st_uid != 0 {
                warning = "the backing folder '\(backing)' belongs to uid \(info.st_uid), who can move '\(StateFolder.name)' away: the mount keeps using its own, but coordfs commands look for it by name and will not find it until it is back"
            } else if info.st_mode & 0o022 != 0 && info.st_mode & S_ISVTX == 0 {
                warning = "the backing folder '\(backing)' may be written by other users and is not sticky (mode \(String(info.st_mode & 0o7777, radix: 8))): they can move '\(StateFolder.name)' away; the mount keeps using its own, but coordfs commands look for it by name and will not find it until it is back (chmod +t prevents it)"
            }
        }
        var opened: [Int32] = []
        func fail(_ message: String) -> MountError {
            opened.forEach { close($0) }
            return .system(message)
        }
        var parent = backingFD
        let onNFS = LinuxCalls.fileSystemType(backingFD) == StateFolder.nfsType
        for (name, folder) in zip(chainNames, chain) {
            let made = name.withNameCString({ mkdirat(parent, $0, 0o700) }) == 0
            if !made && errno != EEXIST {
                throw fail("cannot create the state folder '\(folder)': \(String(cString: strerror(errno)))")
            }
            let fd = name.withNameCString { openat(parent, $0, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) }
            guard fd >= 0 else {
                let error = errno
                if error == ENOTDIR || error == ELOOP {
                    throw fail("'\(folder)' is reserved for coordfs's state but is not a folder; move it away")
                }
                throw fail("cannot open the state folder '\(folder)': \(String(cString: strerror(error)))")
            }
            opened.append(fd)
            var st = stat()
            guard fstat(fd, &st) == 0 else { throw fail("cannot read the state folder '\(folder)': \(String(cString: strerror(errno)))") }
            guard st.st_uid == euid else {
                throw fail(StateFolder.notOwnedMessage(folder: folder, owner: st.st_uid, user: euid, madeNow: made, onNFS: onNFS))
            }
            guard st.st_mode & 0o022 == 0 else {
                throw fail("'\(folder)' is reserved for coordfs's state but is writable by other users (mode \(String(st.st_mode & 0o7777, radix: 8))): they could read or redirect what the mount writes there; look at what it holds and remove it, or chmod go-w it")
            }
            parent = fd
        }
        held.forEach { close($0) }
        if heldBacking >= 0 { close(heldBacking) }
        held = opened
        heldBacking = backingFD
        keepBacking = true
        return warning
    }

    /// statfs f_type of NFS (linux/magic.h NFS_SUPER_MAGIC).
    static let nfsType = 0x6969

    /// Why a state folder of another user's is refused (`hold()`). A folder this process has just
    /// made that the file system gives to another uid is a squashing export (NFS `root_squash` for
    /// root, `all_squash`/`anonuid` for anyone): say so, with the fix docs/cluster.md gives, rather
    /// than suspect another user. A folder found there on NFS, by root, may be one a squashing
    /// export made on an earlier try: the message says that too.
    static func notOwnedMessage(folder: String, owner: uid_t, user: uid_t, madeNow: Bool, onNFS: Bool) -> String {
        let squashed = "the export squashes " + (user == 0 ? "root (NFS root_squash, the default)" : "this user (NFS all_squash or anonuid)")
        let fix = user == 0
            ? "export the backing folder with no_root_squash to the hosts that mount it, then remove '\(folder)' and mount again (docs/cluster.md, \"State folders\")"
            : "export it without all_squash or anonuid for this user, or mount as the user the export maps it to (uid \(owner)), then remove '\(folder)' (docs/cluster.md, \"State folders\")"
        if madeNow {
            return "'\(folder)' was just made by this mount's user (uid \(user)) but belongs to uid \(owner): \(squashed), so what the mount makes there is uid \(owner)'s, and coordfs keeps its state only in a folder of its own user's; \(fix)"
        }
        var message = "'\(folder)' is reserved for coordfs's state but belongs to uid \(owner), not to this mount's user (uid \(user)): that user could read or redirect what the mount writes there; look at what it holds and remove it"
        if onNFS && user == 0 {
            message += ". If the NFS export squashes root (root_squash, the default), whatever root makes there belongs to the squashed uid, as this folder may from an earlier mount: \(fix)"
        }
        return message
    }

    /// Closes the held descriptors (`hold()`), once nothing uses `io` any more: the daemon's last
    /// step, after its services stopped. A daemon in a process that goes on (tests, embedding) would
    /// otherwise keep a file of the backing folder's file system open, which keeps a backing folder
    /// on another FUSE mount from ending.
    func letGo() {
        held.forEach { close($0) }
        if heldBacking >= 0 { close(heldBacking) }
    }

    /// Lets other users reach the control socket (search only, never list or change): every folder
    /// of the chain this process holds (`hold()`) and owns. `nodes` may be listed too, so that a
    /// client finds the node whose mount record names its mount point (the names of nodes are no
    /// secret: `status --cluster`).
    func openForSearch() {
        for (index, fd) in held.enumerated() {
            var st = stat()
            guard fstat(fd, &st) == 0, st.st_uid == geteuid() else { continue }
            _ = fchmod(fd, node != nil && index == 1 ? 0o755 : 0o711)
        }
    }

    /// The daemon that wrote the pid file, if it still runs: its pid and start (`DaemonPIDFile`), nil
    /// when its pid is now another process's.
    public func runningDaemon() -> DaemonPIDFile? {
        guard let file = DaemonPIDFile.read(pidFile), file.isRunning else { return nil }
        return file
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
        let deadCount = stale || single.runningDaemon() == nil
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
