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
    /// The mount table's path of a backing folder renamed or moved while mounted, now at `backing`
    /// (`BackingWhereabouts`); nil when it is where the table says.
    public var backingMovedFrom: String?

    public init(mountpoint: String?, backing: String, pathInMount: String, stale: Bool, state: StateFolder? = nil, backingMovedFrom: String? = nil) {
        self.mountpoint = mountpoint
        self.backing = backing
        self.pathInMount = pathInMount
        self.stale = stale
        self.state = state ?? StateFolder(backing: backing)
        self.backingMovedFrom = backingMovedFrom
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
            let (backing, movedFrom) = try currentBacking(entry, stale: stale)
            let state = StateFolder.of(backing: backing, mountpoint: entry.mountpoint, stale: stale)
            // A state folder another user put where the mount's was is not read or talked to.
            if let owner = entry.owner, let why = whyStateFolderIsNotTheMounts(backing: backing, folder: state.path, owner: owner) {
                throw .system("the coordfs mount at '\(entry.mountpoint)': \(why)")
            }
            return LocatedMount(mountpoint: entry.mountpoint, backing: backing, pathInMount: inner, stale: stale, state: state,
                                backingMovedFrom: movedFrom)
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
        // A mount of it whose daemon is gone is stale, as when it is located by its mount point.
        let mounted = MountTable.entries().filter { $0.fsType == "fuse.coordfs" && $0.source == b }
            .map { ($0, MountPreflight.isDeadMount($0.mountpoint)) }
            .last { StateFolder.of(backing: b, mountpoint: $0.0.mountpoint, stale: $0.1) == state }
        return LocatedMount(mountpoint: mounted?.0.mountpoint, backing: b, pathInMount: "/", stale: mounted?.1 ?? false, state: state)
    }

    /// Where the backing folder of the mount `entry` is now, and the table's path when that is not
    /// where (renamed or moved while mounted: `BackingWhereabouts`, the one rule every command
    /// finds its daemon by). Throws `backingOutOfSight` when this user cannot find it.
    public static func currentBacking(_ entry: MountEntry, stale: Bool) throws(MountError) -> (backing: String, movedFrom: String?) {
        guard !stale else { return (entry.source, nil) }
        switch BackingWhereabouts.of(mountpoint: entry.mountpoint, source: entry.source, owner: entry.owner, device: entry.device) {
        case .inPlace: return (entry.source, nil)
        case .moved(let to): return (to, entry.source)
        case .movedOutOfSight: throw .backingOutOfSight(mountpoint: entry.mountpoint, backing: entry.source)
        }
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
