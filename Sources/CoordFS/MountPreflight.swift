import Linux
import NameBytes
import Glibc

/// A mount that passed every check: absolute, resolved paths and validated options.
public struct MountPlan: Sendable {
    public var backing: String
    public var mountpoint: String
    public var options: MountOptions
    public var state: StateFolder
}

/// The checks before a mount: folders exist, neither contains the other, the mountpoint is not
/// already a live coordfs mount; a stale mount left by a crashed daemon is cleaned up.
public enum MountPreflight {
    public static func plan(backing: String, mountpoint: String, options: MountOptions) throws(MountError) -> MountPlan {
        let b = try resolveFolder(backing, role: "backing")
        let m = try resolveMountpoint(mountpoint)
        // Bytes, not characters: a name is its bytes (NFC and NFD spellings are two folders).
        if m.utf8.starts(with: (b + "/").utf8) || ExactName.same(m, b) { throw .mountpointInsideBacking(mountpoint: m, backing: b) }
        if b.utf8.starts(with: (m + "/").utf8) { throw .backingInsideMountpoint(mountpoint: m, backing: b) }
        if MountTable.coordfsMount(at: m) != nil { throw .alreadyMounted(m) }
        let state = StateFolder(backing: b, options: options)
        try checkNodeNameFree(state)
        return MountPlan(backing: b, mountpoint: m, options: options, state: state)
    }

    /// On a mount other users may use (`allow_other`), the first folder on the way to its control
    /// socket (the backing folder or one above it; `.coordfs` coordfs makes searchable) that users
    /// other than its owner and group may not search: their `coordfs` commands cannot connect to the
    /// socket (EACCES) while the mount itself serves them. Nil when there is none, or when only the
    /// mounting user (and root) may use the mount.
    public static func socketOutOfOtherUsersReach(_ plan: MountPlan) -> (folder: String, mode: mode_t)? {
        guard plan.options.allowOther else { return nil }
        var folder = plan.backing
        while true {
            var st = stat()
            if stat(folder, &st) == 0, st.st_mode & S_IXOTH == 0 { return (folder, st.st_mode & 0o7777) }
            guard folder != "/", let slash = folder.lastIndex(of: "/") else { return nil }
            folder = slash == folder.startIndex ? "/" : String(folder[..<slash])
        }
    }

    /// A cluster node's name must not be mounted already over this backing folder on this host: its
    /// mount record (`nodes/NODE/mount`, this boot, a running daemon that is not this process)
    /// says it is. Checked before anything is mounted or written (a second daemon of the node would
    /// first write that record over the first's, then share its log, store, socket and etcd keys).
    /// Another host's node of the same name is found in etcd when the node joins
    /// (`ClusterNode.start`).
    static func checkNodeNameFree(_ state: StateFolder) throws(MountError) {
        guard let node = state.node, let record = NodeMountRecord.read(in: state.path),
              record.pid != getpid(), record.isAlive else { return }
        throw .nodeInUse(node: node, pid: record.pid, mountpoint: record.mountpoint)
    }

    static func resolveFolder(_ path: String, role: String) throws(MountError) -> String {
        guard let r = path.withNameCString({ realpath($0, nil) }) else {
            if errno == ENOENT { throw .missingFolder(role: role, path: path) }
            throw .system("cannot use \(role) folder '\(path)': \(String(cString: strerror(errno)))")
        }
        defer { free(r) }
        var st = stat()
        guard stat(r, &st) == 0, (st.st_mode & S_IFMT) == S_IFDIR else { throw .notADirectory(role: role, path: path) }
        // The resolved path's bytes, as `LosslessName` keeps them (a byte that is not UTF-8 stays that byte).
        return String(nameCString: r)
    }

    /// The mountpoint, resolved; a stale FUSE mount there ("Transport endpoint is not connected", or
    /// "Software caused connection abort" once the kernel aborted it) is detached first.
    static func resolveMountpoint(_ path: String) throws(MountError) -> String {
        if isDeadMount(path) {
            let abs = absolute(path)
            try cleanStaleMount(abs)
        }
        return try resolveFolder(path, role: "mountpoint")
    }

    /// A FUSE mount at `path` whose daemon is gone. statvfs(3) (statfs(2)), not stat(2): the kernel answers a stat
    /// from attributes it still caches (for a second after the daemon died, the mountpoint looked
    /// alive), while every statfs is a request, which a dead connection fails at once. Through
    /// io_uring (`-o transport`) the kernel ends a dead daemon's connection a moment later, when its
    /// ring is torn down: a statfs that came in meanwhile is given to one of the ring's cancelled
    /// entries and fails with ECANCELED.
    public static func isDeadMount(_ path: String) -> Bool {
        var fs = statvfs()
        return path.withNameCString({ statvfs($0, &fs) }) != 0 && (errno == ENOTCONN || errno == ECONNABORTED || errno == ECANCELED)
    }

    /// Detaches a dead FUSE mount at `path`.
    public static func cleanStaleMount(_ path: String) throws(MountError) {
        if path.withNameCString({ umount2($0, Int32(MNT_DETACH)) }) == 0 { return }
        let e = errno
        // Not root: fusermount3 can detach a user's own FUSE mount.
        if Unmounter.runFusermount(["-uz", path]) { return }
        throw .system("'\(path)' is a stale mount (its daemon died) and could not be detached: \(String(cString: strerror(e)))")
    }

    /// Absolute and lexically normalised, without touching the filesystem (for dead mountpoints).
    public static func absolute(_ path: String) -> String {
        var parts: [Substring] = []
        var base = path
        if path.utf8.first != UInt8(ascii: "/") {
            var buf = [CChar](repeating: 0, count: Int(PATH_MAX))
            if getcwd(&buf, buf.count) != nil { base = String(nameCString: buf) + "/" + path }
        }
        // Names are bytes (`LosslessName`): split at the byte '/'.
        for c in base.utf8.split(separator: UInt8(ascii: "/")).map(Substring.init) {
            if c.utf8.elementsEqual(".".utf8) { continue }
            if c.utf8.elementsEqual("..".utf8) { _ = parts.popLast(); continue }
            parts.append(c)
        }
        return "/" + parts.joined(separator: "/")
    }
}
