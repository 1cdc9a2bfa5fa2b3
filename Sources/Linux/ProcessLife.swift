import Glibc

/// Whether a process still runs, by one rule for every command and the daemon.
public enum ProcessLife {
    /// True while `pid` names a process that runs (another user's too: `kill` says EPERM). False
    /// once it is gone, or a zombie whose threads have all ended: its descriptors, locks and its
    /// mounts' connections are let go by then, though its parent may reap it only later (a daemon's
    /// is init, which here takes 1 to 2 s). A thread-group leader shows `Z` as soon as its own
    /// thread exits while its other threads may still hold the files: that counts as running. A
    /// process whose state this user cannot read (procfs's `hidepid`) counts as running.
    public static func isRunning(_ pid: pid_t) -> Bool {
        guard pid > 0 else { return false }
        if kill(pid, 0) != 0 && errno == ESRCH { return false }
        guard let stat = readWholeFileBytes("/proc/\(pid)/stat") else { return kill(pid, 0) == 0 || errno == EPERM }
        guard let close = stat.lastIndex(of: UInt8(ascii: ")")), close + 2 < stat.count else { return true }
        let state = stat[close + 2]
        guard state == UInt8(ascii: "Z") || state == UInt8(ascii: "X") else { return true }
        return threadCount(pid) > 1
    }

    /// The threads `/proc/PID/task` lists (0 once the process is gone).
    public static func threadCount(_ pid: pid_t) -> Int {
        guard let dir = opendir("/proc/\(pid)/task") else { return 0 }
        defer { closedir(dir) }
        var n = 0
        while let e = readdir(dir) {
            if e.pointee.d_name.0 != 0x2E { n += 1 }  // not "." or ".."
        }
        return n
    }
}
