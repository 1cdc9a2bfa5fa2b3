import FuseKit
import Glibc
import LinuxGNU

/// Group membership of a calling process, for the VFS rules that depend on it.
enum ProcessGroups {
    /// True when `gid` is the caller's group or one of its supplementary groups (the `Groups:` line
    /// of /proc/PID/status). A process that is gone is in no group.
    static func contains(_ gid: gid_t, caller: RequestContext) -> Bool {
        if caller.gid == gid { return true }
        guard let status = readWholeFile("/proc/\(caller.pid)/status"),
              let line = status.split(separator: "\n").first(where: { $0.hasPrefix("Groups:") }) else { return false }
        return supplementary(String(line.dropFirst(7))).contains(gid)
    }

    /// The group ids of a `Groups:` line's value (" 4 24 27\n").
    static func supplementary(_ value: String) -> [gid_t] {
        value.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\n" }).compactMap { gid_t($0) }
    }
}
