import Glibc
import NameBytes

/// Where a live coordfs mount's backing folder is now. The mount table keeps the path given at
/// mount time; a backing folder renamed or moved while mounted goes on being served by its daemon,
/// which holds it (and its state folder: the control socket, the event log, the store) by
/// descriptor. Every command finds its mount through this one rule (`ControlSocketLocator` for the
/// control socket, `MountLocator` for the state folder), so each finds the daemon where the folder
/// is now, or says clearly that this user cannot.
public enum BackingWhereabouts: Equatable, Sendable {
    /// At the mount table's path, or it cannot be told (a dead mount, a mount this user may not
    /// enter whose path is still there, a mount hidden under another).
    case inPlace
    /// Renamed or moved while mounted: the folder the mount serves is now at this path.
    case moved(to: String)
    /// Renamed or moved while mounted, and this user cannot find where: only the daemon's user and
    /// root may look at its descriptors.
    case movedOutOfSight

    /// Where the backing folder `source` of the coordfs mount at `mountpoint` is now. The mount's
    /// root has the backing folder's inode number (the daemon answers with the backing folder's
    /// attributes); when the table's path is gone, or names a folder with another inode, the
    /// folder is looked for among the descriptors of the processes of the mount's user (`owner`,
    /// FUSE's `user_id=`) this user may inspect: the daemon's, held on the backing root. A found
    /// folder must be a folder with the root's inode whose `.coordfs` is the daemon's user's own
    /// (`whyStateFolderIsNotTheMounts`). `device` (mountinfo's `major:minor`) makes sure the path
    /// stat(2) reaches is that mount and not one mounted over it; nil: cannot tell.
    public static func of(mountpoint: String, source: String, owner: uid_t?, device: String?) -> BackingWhereabouts {
        var root = stat(), there = stat()
        let backingError = source.withNameCString { stat($0, &there) == 0 ? 0 : errno }
        let backingThere = backingError == 0, backingGone = backingError == ENOENT || backingError == ENOTDIR
        let rootError = mountpoint.withNameCString { stat($0, &root) == 0 ? 0 : errno }
        guard rootError == 0 else {
            // A mount this user may not enter: only a path that is gone says it moved. A dead
            // mount (ENOTCONN) has no daemon to find; its callers say so.
            return rootError == EACCES && backingGone ? .movedOutOfSight : .inPlace
        }
        guard let device, device == "\(major(root.st_dev)):\(minor(root.st_dev))" else { return .inPlace }
        if backingThere, there.st_ino == root.st_ino, there.st_mode & S_IFMT == S_IFDIR { return .inPlace }
        // A path still there that this user may not look into cannot be told from a moved one.
        if !backingThere && !backingGone { return .inPlace }
        return find(rootInode: root.st_ino, owner: owner).map { .moved(to: $0) } ?? .movedOutOfSight
    }

    /// What a command says when the folder moved out of this user's sight.
    public static func outOfSightMessage(mountpoint: String, source: String) -> String {
        "the backing folder of the coordfs mount on \(mountpoint), '\(source)', was renamed or moved while mounted: its daemon goes on serving it where it is now, which this user cannot find (only the user who mounted it and root may look at the daemon's descriptors); run this as one of them, or move the folder back to '\(source)'"
    }

    /// What a command says on stderr when it found the folder elsewhere.
    public static func movedNote(mountpoint: String, from source: String, to path: String) -> String {
        "the backing folder of the mount on \(mountpoint) was moved from '\(source)' to '\(path)' while mounted; using it there"
    }

    private static func major(_ dev: dev_t) -> UInt64 { (UInt64(dev) >> 8) & 0xfff | ((UInt64(dev) >> 32) & ~0xfff) }
    private static func minor(_ dev: dev_t) -> UInt64 { UInt64(dev) & 0xff | ((UInt64(dev) >> 12) & ~0xff) }

    /// The path of a folder with inode `rootInode` that a process of `owner` holds open and whose
    /// `.coordfs` is that user's own; nil when none this user may see.
    private static func find(rootInode: ino_t, owner: uid_t?) -> String? {
        guard let procs = opendir("/proc") else { return nil }
        defer { closedir(procs) }
        while let e = readdir(procs) {
            // Names read in place (`&`): a copy of `d_name` takes all 256 bytes, past the end of a
            // shorter last entry and, at the end of readdir's buffer, of the memory (SIGSEGV).
            let pid = withUnsafeBytes(of: &e.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            guard !pid.isEmpty, pid.utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }) else { continue }
            var process = stat()
            guard stat("/proc/\(pid)", &process) == 0, owner.map({ $0 == process.st_uid }) ?? true,
                  let fds = opendir("/proc/\(pid)/fd") else { continue }
            defer { closedir(fds) }
            while let f = readdir(fds) {
                let fd = withUnsafeBytes(of: &f.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
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
                let state = (path == "/" ? "" : path) + "/.coordfs"
                guard state.withNameCString({ lstat($0, &check) }) == 0, check.st_mode & S_IFMT == S_IFDIR,
                      whyStateFolderIsNotTheMounts(backing: path, folder: state, owner: process.st_uid) == nil else { continue }
                return path
            }
        }
        return nil
    }
}
