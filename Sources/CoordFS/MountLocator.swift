import NameBytes
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

    public var state: StateFolder { StateFolder(backing: backing) }
    /// The event log directory, `BACKING/.coordfs/log`.
    public var eventLog: String { state.eventLog }
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
            return LocatedMount(mountpoint: entry.mountpoint, backing: entry.source, pathInMount: inner,
                                stale: MountPreflight.isDeadMount(entry.mountpoint))
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

    /// A backing folder given directly: it must hold a coordfs state folder with an event log.
    public static func locate(backing: String) throws(MountError) -> LocatedMount {
        let b = try MountPreflight.resolveFolder(backing, role: "backing")
        let log = StateFolder(backing: b).eventLog
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
        let mounted = MountTable.entries().last { $0.fsType == "fuse.coordfs" && $0.source == b }
        return LocatedMount(mountpoint: mounted?.mountpoint, backing: b, pathInMount: "/", stale: false)
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
        return stat(StateFolder(backing: path).eventLog, &st) == 0
    }
}
