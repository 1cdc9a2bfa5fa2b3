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

    /// The caller's supplementary groups (the `Groups:` line of /proc/PID/status; FUSE's request
    /// pid is the calling thread's), while that thread still is the caller's: its file-system uid
    /// and gid those of the request. None when it is gone, another's, or outside the daemon's pid
    /// namespace (pid 0): in doubt, fewer groups, so refused rather than granted.
    static func supplementary(of caller: RequestContext) -> [gid_t] {
        guard let status = ProcessStatus.read(pid: caller.pid), status.uids?.filesystem == caller.uid,
              status.gids?.filesystem == caller.gid else { return [] }
        return status.groups ?? []
    }
}
