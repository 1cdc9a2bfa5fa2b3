import Glibc
import NameBytes

/// A cluster node's mount record, `BACKING/.coordfs/nodes/NODE/mount` (docs/cluster.md, "State
/// folders"): the boot it was written in, the daemon's pid and start time, and the mount point. Several hosts (or
/// several nodes on one host) mount one shared folder, each with its own state folder; the mount
/// table names only the backing folder, and the record tells which node's state folder belongs to
/// a mount point. The daemon writes it after mounting and removes it when it ends cleanly.
public struct NodeMountRecord: Equatable, Sendable {
    public var bootID: String
    public var pid: pid_t
    /// The daemon's start time (`ProcessLife.startTime`; nil in a record of an older daemon): its pid
    /// held by a process that started at another time is not the daemon.
    public var start: UInt64?
    public var mountpoint: String
    /// The record's modification time (seconds): the newest wins among dead daemons' records.
    public var modified: Int

    /// The record's name in a node's state folder.
    public static let fileName = "mount"
    /// `.coordfs/nodes`, the nodes' state folders inside the backing folder.
    public static let nodesFolder = ".coordfs/nodes"

    /// Its daemon runs (on this host, in this boot: a record of another host, or of this one before a
    /// reboot, never names a mount here).
    public var isAlive: Bool { bootID == ProcessLife.bootID() && ProcessLife.isRunning(pid, startedAt: start) }

    /// Writes the record of this process's mount at `mountpoint` into the state folder `folder`.
    public static func write(in folder: String, mountpoint: String) {
        let me = getpid()
        let start = ProcessLife.startTime(me).map { " \($0)" } ?? ""
        let bytes = Array("\(ProcessLife.bootID())\n\(me)\(start)\n".utf8) + mountpoint.nameBytes
        let path = folder + "/" + fileName, temporary = path + ".new"
        let fd = temporary.withNameCString { open($0, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644) }
        guard fd >= 0 else { return }
        var written = 0
        while written < bytes.count {
            let n = bytes[written...].withUnsafeBytes { b in retryingEINTR { Glibc.write(fd, b.baseAddress, b.count) } }
            if n <= 0 { break }
            written += n
        }
        close(fd)
        _ = temporary.withNameCString { t in path.withNameCString { rename(t, $0) } }
    }

    public static func remove(in folder: String) {
        _ = (folder + "/" + fileName).withNameCString { unlink($0) }
    }

    /// The record in the state folder `folder`, if any.
    public static func read(in folder: String) -> NodeMountRecord? {
        let path = folder + "/" + fileName
        // Read before the CLI knows whose folder it is: a regular file only, a boot, a pid and a path.
        guard let bytes = readSmallRegularFile(path, limit: 256 + Int(PATH_MAX)) else { return nil }
        let lines = bytes.split(separator: 0x0A, maxSplits: 2, omittingEmptySubsequences: false)
        // "PID START" (an older daemon's record: "PID").
        let process = lines.count == 3 ? lines[1].split(separator: 0x20, maxSplits: 1).map { String(decoding: $0, as: UTF8.self) } : []
        guard process.count >= 1, let pid = pid_t(process[0]), pid > 0 else { return nil }
        let start = process.count == 2 ? UInt64(process[1]) : nil
        var st = stat()
        _ = path.withNameCString { stat($0, &st) }
        return NodeMountRecord(bootID: String(decoding: lines[0], as: UTF8.self), pid: pid, start: start,
                               mountpoint: String(nameBytes: lines[2]), modified: Int(st.st_mtim.tv_sec))
    }

    /// The names of the folders in `BACKING/.coordfs/nodes` (sorted; `.` and `..` left out).
    public static func nodes(backing: String) -> [String] {
        let folder = backing + "/" + nodesFolder
        guard let dir = folder.withNameCString({ opendir($0) }) else { return [] }
        defer { closedir(dir) }
        var names: [String] = []
        while let e = readdir(dir) {
            let n = withUnsafePointer(to: &e.pointee.d_name) { $0.withMemoryRebound(to: CChar.self, capacity: 256) { String(nameCString: $0) } }
            if n != "." && n != ".." && (e.pointee.d_type == UInt8(DT_DIR) || e.pointee.d_type == UInt8(DT_UNKNOWN)) { names.append(n) }
        }
        return names.sorted()
    }

    /// The state folder of the node mounted at `mountpoint` over `backing` on this host: the node
    /// whose record names this mount point in this boot, a live daemon's first; when none is alive,
    /// the newest record if `deadDaemonsCount` (the mount is stale, or no one-host daemon runs). Nil:
    /// no node's (the mount keeps its state in `BACKING/.coordfs`).
    public static func nodeStateFolder(backing: String, mountpoint: String, deadDaemonsCount: Bool) -> String? {
        let boot = ProcessLife.bootID()
        var found: [(String, NodeMountRecord)] = []
        for n in nodes(backing: backing) {
            let folder = backing + "/" + nodesFolder + "/" + n
            if let r = read(in: folder), r.bootID == boot, ExactName.same(r.mountpoint, mountpoint) { found.append((folder, r)) }
        }
        if let live = found.filter({ $0.1.isAlive }).max(by: { $0.1.modified < $1.1.modified }) { return live.0 }
        guard deadDaemonsCount else { return nil }
        return found.max(by: { $0.1.modified < $1.1.modified })?.0
    }
}
