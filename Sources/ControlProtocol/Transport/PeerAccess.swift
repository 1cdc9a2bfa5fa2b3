import Glibc
import Linux

extension PeerCredentials {
    /// The peer's supplementary groups, from `/proc/<pid>/status` (empty if the process is gone).
    /// Read it when the connection opens: a pid can be reused after the peer exits.
    package func supplementaryGroups() -> [UInt32] {
        ProcessStatus.read(pid: pid)?.groups ?? []
    }

    /// Whether this peer may read (or write) an item with the given owner and permission bits,
    /// by POSIX rules: root may do anything (execute aside), then the owner's, the group's (the
    /// primary group or one of `groups`) or the others' bits decide. ACLs are not consulted.
    package func mayAccess(mode: UInt32, ownerUID: UInt32, ownerGID: UInt32, write: Bool, groups: [UInt32] = []) -> Bool {
        if uid == 0 { return true }
        let bit: UInt32 = write ? 0o2 : 0o4
        if uid == ownerUID { return mode & (bit << 6) != 0 }
        if gid == ownerGID || groups.contains(ownerGID) { return mode & (bit << 3) != 0 }
        return mode & bit != 0
    }
}
