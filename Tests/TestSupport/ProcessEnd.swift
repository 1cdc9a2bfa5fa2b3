import Glibc
import Linux

/// Whether a process the tests did not start (a background daemon: its parent is init) has ended.
public enum ProcessEnd {
    /// True once `pid` is gone, or a zombie whose threads have all ended (`ProcessLife.isRunning`,
    /// the rule `coordfs unmount` and the daemon use). The daemon's new parent, init, may reap it
    /// only seconds later (1 to 2 s on the CI machine), so waiting for `kill(pid, 0)` to fail waits
    /// for init, not for the daemon. `startedAt`: the start its pid file recorded (`DaemonPIDFile`):
    /// a process that got the pid after it is not waited for.
    public static func hasEnded(_ pid: pid_t, startedAt start: UInt64? = nil) -> Bool { !ProcessLife.isRunning(pid, startedAt: start) }

    /// Waits up to `timeout` seconds for `hasEnded`; returns whether it did.
    @discardableResult
    public static func wait(_ pid: pid_t, startedAt start: UInt64? = nil, timeout: Double) -> Bool {
        var waited = 0.0
        while !hasEnded(pid, startedAt: start) {
            if waited >= timeout { return false }
            usleep(10_000); waited += 0.01
        }
        return true
    }
}
