import Glibc

/// Whether a process the tests did not start (a background daemon: its parent is init) has ended.
public enum ProcessEnd {
    /// True once `pid` is gone, or a zombie whose threads have all ended (its descriptors, locks and
    /// mounts' connections are let go by then). The daemon's new parent, init, may reap it only
    /// seconds later (1 to 2 s on the CI machine), so waiting for `kill(pid, 0)` to fail waits for
    /// init, not for the daemon. A thread-group leader shows `Z` as soon as its own thread exits,
    /// while its other threads may still hold the open files: those count as running (as
    /// `Unmounter` waits in `coordfs unmount`).
    public static func hasEnded(_ pid: pid_t) -> Bool {
        if kill(pid, 0) != 0 && errno == ESRCH { return true }
        guard let stat = readSmallFile("/proc/\(pid)/stat"), let close = stat.lastIndex(of: UInt8(ascii: ")")),
              close + 2 < stat.count else { return true }
        guard stat[close + 2] == UInt8(ascii: "Z") || stat[close + 2] == UInt8(ascii: "X") else { return false }
        return threads(pid) <= 1
    }

    /// Waits up to `timeout` seconds for `hasEnded`; returns whether it did.
    @discardableResult
    public static func wait(_ pid: pid_t, timeout: Double) -> Bool {
        var waited = 0.0
        while !hasEnded(pid) {
            if waited >= timeout { return false }
            usleep(10_000); waited += 0.01
        }
        return true
    }

    /// The threads `/proc/PID/task` lists (0 once the process is gone).
    static func threads(_ pid: pid_t) -> Int {
        guard let dir = opendir("/proc/\(pid)/task") else { return 0 }
        defer { closedir(dir) }
        var n = 0
        while let e = readdir(dir) {
            if e.pointee.d_name.0 != 0x2E { n += 1 }  // not "." or ".."
        }
        return n
    }

    static func readSmallFile(_ path: String) -> [UInt8]? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var buf = [UInt8](repeating: 0, count: 4096)
        let n = read(fd, &buf, buf.count)
        return n > 0 ? Array(buf[..<n]) : nil
    }
}
