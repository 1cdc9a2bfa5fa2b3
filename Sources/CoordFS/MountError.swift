import Linux
/// Why a mount or unmount was refused. Each message says what is wrong and what to do.
public enum MountError: Error, CustomStringConvertible, Equatable {
    case unknownOption(String)
    case badOption(String, String)
    case missingFolder(role: String, path: String)
    case notADirectory(role: String, path: String)
    case mountpointInsideBacking(mountpoint: String, backing: String)
    case backingInsideMountpoint(mountpoint: String, backing: String)
    case alreadyMounted(String)
    /// A cluster node of this name is mounted already over this backing folder on this host (its
    /// mount record names a live daemon): two mounts of one node name would share its state folder
    /// and its keys in etcd.
    case nodeInUse(node: String, pid: Int32, mountpoint: String)
    case notMounted(String)
    /// The mount's backing folder was renamed or moved while mounted, and this user cannot find
    /// where (`BackingWhereabouts.movedOutOfSight`).
    case backingOutOfSight(mountpoint: String, backing: String)
    case system(String)

    public var description: String {
        switch self {
        case .unknownOption(let o):
            return "unknown mount option '\(o)' (see `coordfs mount --help` for the options coordfs accepts)"
        case .badOption(let o, let why):
            return "bad mount option '\(o)': \(why)"
        case .missingFolder(let role, let path):
            return "\(role) folder '\(path)' does not exist"
        case .notADirectory(let role, let path):
            return "\(role) '\(path)' is not a folder"
        case .mountpointInsideBacking(let m, let b):
            return "the mountpoint '\(m)' is inside the backing folder '\(b)': the mount would contain itself; choose a mountpoint outside it"
        case .backingInsideMountpoint(let m, let b):
            return "the backing folder '\(b)' is inside the mountpoint '\(m)': the mount would hide it; choose a mountpoint outside it"
        case .alreadyMounted(let m):
            return "'\(m)' is already a coordfs mount (unmount it first: coordfs unmount \(m))"
        case .nodeInUse(let node, let pid, let m):
            return "node=\(node) is mounted already over this folder on this host (on '\(m)', daemon pid \(pid)): every mount of a cluster needs a node name of its own (node=NAME; by default the host name), or it would share that node's state folder and its presenters, rights and asks in etcd. Nothing was changed"
        case .notMounted(let m):
            return "'\(m)' is not a coordfs mount"
        case .backingOutOfSight(let m, let b):
            return BackingWhereabouts.outOfSightMessage(mountpoint: m, source: b)
        case .system(let s):
            return s
        }
    }
}
