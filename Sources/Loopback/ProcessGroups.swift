import FuseKit
import Glibc
import Linux

/// Group membership of a calling process, for the VFS rules that depend on it.
enum ProcessGroups {
    /// True when `gid` is the caller's group or one of its supplementary groups (the `Groups:` line
    /// of /proc/PID/status). A process that is gone is in no group.
    static func contains(_ gid: gid_t, caller: RequestContext) -> Bool {
        if caller.gid == gid { return true }
        return ProcessStatus.read(pid: caller.pid)?.groups?.contains(gid) ?? false
    }
}
