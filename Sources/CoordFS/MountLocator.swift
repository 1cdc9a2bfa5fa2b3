import NameBytes
import Linux
import Glibc

/// A coordfs mount found from a path the user gave (`coordfs watch /mnt/docs`), or a backing folder
/// given directly (`--backing`, for a mount that is no longer mounted).
public struct LocatedMount: Sendable, Equatable {
    /// The mountpoint, nil when located from a backing folder.
    public var mountpoint: String?
    /// The backing folder (the mount table's source).
    public var backing: String
    /// The path the user named, relative to the mount root (`/` for the mountpoint itself, or when
    /// located from a backing folder).
    public var pathInMount: String
    /// True when the kernel no longer reaches the daemon (`ENOTCONN`: it crashed or was killed).
    public var stale: Bool

    /// Its state folder: `BACKING/.coordfs`, or a cluster node's `BACKING/.coordfs/nodes/NODE`.
    public var state: StateFolder
    /// The event log directory, `BACKING/.coordfs/log` (a node's: `.../nodes/NODE/log`).
    public var eventLog: String { state.eventLog }

    public init(mountpoint: String?, backing: String, pathInMount: String, stale: Bool, state: StateFolder? = nil) {
        self.mountpoint = mountpoint
        self.backing = backing
        self.pathInMount = pathInMount
        self.stale = stale
        self.state = state ?? StateFolder(backing: backing)
    }
}

/// Finds the coordfs mount a path belongs to, through the kernel's mount table.
///
/// Works for a crashed mount too (the table still lists it, every access gives `ENOTCONN`): the
/// log sits on the backing side, so its history stays readable without the daemon.
public enum MountLocator {
    /// The coordfs mount containing `path` (the mountpoint or anything inside it).
    ///
    /// The innermost mount containing the path decides: a path on another filesystem mounted
    /// inside a coordfs mount is not in the coordfs mount.
    public static func locate(_ path: String, in entries: [MountEntry] = MountTable.entries()) throws(MountError) -> LocatedMount {
        guard !path.isEmpty else { throw .system("no mountpoint given") }
        // The lexical form works on a dead mount (where realpath fails with ENOTCONN); the resolved
        // form follows symlinks leading into the mount. Either may name it.
        let lexical = MountPreflight.absolute(path)
        var candidates = [lexical]
        if let resolved = resolvedPath(path), !ExactName.same(resolved, lexical) { candidates.insert(resolved, at: 0) }
        var innermostOther: MountEntry?
        for candidate in candidates {
            guard let (entry, inner) = innermostMount(containing: candidate, in: entries) else { continue }
            guard entry.fsType == "fuse.coordfs" else {
                if innermostOther == nil { innermostOther = entry }
                continue
            }
            let stale = MountPreflight.isDeadMount(entry.mountpoint)
            let state = StateFolder.of(backing: entry.source, mountpoint: entry.mountpoint, stale: stale)
            // A state folder another user put where the mount's was is not read or talked to.
            if let owner = entry.owner, let why = whyStateFolderIsNotTheMounts(backing: entry.source, folder: state.path, owner: owner) {
                throw .system("the coordfs mount at '\(entry.mountpoint)': \(why)")
            }
            return LocatedMount(mountpoint: entry.mountpoint, backing: entry.source, pathInMount: inner, stale: stale, state: state)
        }
        var message = "'\(path)' is not in a coordfs mount"
        if let other = innermostOther, other.mountpoint != "/" {
            message += " (it is on a \(other.fsType) mount at \(other.mountpoint))"
        }
        if isBackingFolder(lexical) {
            message += "; it looks like a coordfs backing folder: use --backing \(path)"
        } else {
            message += "; for a mount that is no longer mounted, give its backing folder with --backing DIR"
        }
        throw .system(message)
    }

    /// A backing folder given directly: it must hold a coordfs state folder with an event log. In a
    /// cluster's shared folder, `node` names the node's (`--node`); without it, the one-host state
    /// folder, else the only node's.
    public static func locate(backing: String, node: String? = nil) throws(MountError) -> LocatedMount {
        let b = try MountPreflight.resolveFolder(backing, role: "backing")
        let state = try stateFolder(backing: b, given: backing, node: node)
        let log = state.eventLog
        var st = stat()
        if stat(log, &st) != 0 {
            let e = errno
            if e == ENOENT {
                throw .system("'\(backing)' has no coordfs event log (\(log) does not exist): is it the backing folder of a coordfs mount?")
            }
            throw .system("cannot read the event log \(log): \(String(cString: strerror(e)))"
                + (e == EACCES ? " (the state folder belongs to the user who mounted; run as that user)" : ""))
        }
        guard (st.st_mode & S_IFMT) == S_IFDIR else { throw .system("'\(log)' is not a folder") }
        let mounted = MountTable.entries().last {
            $0.fsType == "fuse.coordfs" && $0.source == b && StateFolder.of(backing: b, mountpoint: $0.mountpoint, stale: false) == state
        }
        return LocatedMount(mountpoint: mounted?.mountpoint, backing: b, pathInMount: "/", stale: false, state: state)
    }

    /// Where the backing folder of `mount` is now, when it is no longer at the path the mount
    /// table names (renamed or moved while mounted: the table keeps the path given at mount time,
    /// and the daemon goes on serving the folder, and writing its log, by descriptor). Nil when
    /// the path still names the folder the mount serves (the mount root's inode), or the mount is
    /// not live; for a mount this user may not enter, only when the path is gone. `.moved(to: nil)` when it moved but this user cannot see where: the
    /// new path is found among the descriptors of processes this user may inspect (the daemon's
    /// own, held on the backing folder's root), a folder with the mount root's inode holding a
    /// state folder that passes `whyStateFolderIsNotTheMounts` for the process's user.
    public static func backingMoved(_ mount: LocatedMount) -> BackingMove? {
        guard let mountpoint = mount.mountpoint, !mount.stale else { return nil }
        var root = stat(), there = stat()
        let backingThere = mount.backing.withNameCString { stat($0, &there) } == 0
        guard mountpoint.withNameCString({ stat($0, &root) }) == 0 else {
            // A mount this user may not enter: only a path that is gone says it moved.
            return backingThere ? nil : .moved(to: nil)
        }
        if backingThere, there.st_ino == root.st_ino, there.st_mode & S_IFMT == S_IFDIR { return nil }
        return .moved(to: findMovedBacking(rootInode: root.st_ino, node: mount.state.node))
    }

    /// What `backingMoved` found.
    public enum BackingMove: Equatable, Sendable {
        /// The folder is no longer at the mount table's path: it is at `to`, if known.
        case moved(to: String?)
    }

    private static func findMovedBacking(rootInode: ino_t, node: String?) -> String? {
        guard let procs = opendir("/proc") else { return nil }
        defer { closedir(procs) }
        while let e = readdir(procs) {
            let pid = withUnsafeBytes(of: e.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            guard !pid.isEmpty, pid.utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }) else { continue }
            var owner = stat()
            guard stat("/proc/\(pid)", &owner) == 0, let fds = opendir("/proc/\(pid)/fd") else { continue }
            defer { closedir(fds) }
            while let f = readdir(fds) {
                let fd = withUnsafeBytes(of: f.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
                guard fd.first != "." else { continue }
                let link = "/proc/\(pid)/fd/\(fd)"
                var st = stat()
                guard stat(link, &st) == 0, st.st_ino == rootInode, st.st_mode & S_IFMT == S_IFDIR else { continue }
                var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
                let n = readlink(link, &buffer, Int(PATH_MAX))
                guard n > 0, buffer[0] == CChar(UInt8(ascii: "/")) else { continue }
                let path = String(nameBytes: buffer[0..<n].map { UInt8(bitPattern: $0) })
                var check = stat()
                guard path.withNameCString({ stat($0, &check) }) == 0, check.st_ino == st.st_ino, check.st_dev == st.st_dev else { continue }
                let state = node.map { StateFolder(backing: path, node: $0) } ?? StateFolder(backing: path)
                guard state.eventLog.withNameCString({ stat($0, &check) }) == 0,
                      whyStateFolderIsNotTheMounts(backing: path, folder: state.path, owner: owner.st_uid) == nil else { continue }
                return path
            }
        }
        return nil
    }

    /// The state folder `--backing` (and `--node`) name.
    static func stateFolder(backing b: String, given: String, node: String?) throws(MountError) -> StateFolder {
        let nodes = StateFolder.nodes(backing: b)
        if let node {
            guard ClusterOptions.isValidNodeName(node) else { throw .system("--node \(node): expects 1 to 64 letters, digits, '.', '-' or '_' (not '.' or '..')") }
            guard nodes.contains(node) else {
                throw .system("'\(given)' has no state of cluster node \(node)"
                    + (nodes.isEmpty ? " (it holds no cluster node's state)" : " (its nodes: \(nodes.joined(separator: ", ")))"))
            }
            return StateFolder(backing: b, node: node)
        }
        let single = StateFolder(backing: b)
        var st = stat()
        if stat(single.eventLog, &st) == 0 || nodes.isEmpty { return single }
        guard nodes.count == 1 else {
            throw .system("'\(given)' holds the state of several cluster nodes (\(nodes.joined(separator: ", "))): give --node NAME")
        }
        return StateFolder(backing: b, node: nodes[0])
    }

    /// The mount whose mountpoint is the longest prefix of `path` (the last one when stacked), and
    /// the rest of the path relative to it.
    static func innermostMount(containing path: String, in entries: [MountEntry]) -> (MountEntry, String)? {
        var best: MountEntry?
        for e in entries where contains(e.mountpoint, path) {
            if best == nil || e.mountpoint.utf8.count >= best!.mountpoint.utf8.count { best = e }
        }
        guard let best else { return nil }
        let rest = best.mountpoint == "/" ? path : String(decoding: path.utf8.dropFirst(best.mountpoint.utf8.count), as: UTF8.self)
        return (best, rest.isEmpty ? "/" : rest)
    }

    private static func contains(_ mountpoint: String, _ path: String) -> Bool {
        mountpoint == "/" || ExactName.same(path, mountpoint) || path.utf8.starts(with: (mountpoint + "/").utf8)
    }

    private static func resolvedPath(_ path: String) -> String? {
        guard let r = path.withNameCString({ realpath($0, nil) }) else { return nil }
        defer { free(r) }
        return String(nameCString: r)
    }

    private static func isBackingFolder(_ path: String) -> Bool {
        var st = stat()
        return stat(StateFolder(backing: path).eventLog, &st) == 0 || !StateFolder.nodes(backing: path).isEmpty
    }
}
