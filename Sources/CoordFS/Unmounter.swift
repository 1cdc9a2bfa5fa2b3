import FuseKit
import Glibc
import Linux
import LinuxGNU
import NameBytes

/// `coordfs unmount`: unmounts and waits for the daemon to end.
public enum Unmounter {
    public static func unmount(_ mountpoint: String, lazy: Bool, waitSeconds: Double = 10) throws(MountError) {
        let m = MountPreflight.absolute(mountpoint)
        guard let entry = MountTable.coordfsMount(at: m) else { throw .notMounted(m) }
        let stale = MountPreflight.isDeadMount(m)
        // A backing folder renamed while mounted: its daemon's pid file is where it is now.
        let backing = (try? MountLocator.currentBacking(entry, stale: stale))?.backing ?? entry.source
        let state = StateFolder.of(backing: backing, mountpoint: entry.mountpoint, stale: stale)
        // The daemon by its pid and start: a killed daemon's pid file, its pid another process's now, names none.
        let daemon = state.runningDaemon()
        if MountPreflight.isDeadMount(m) {
            try MountPreflight.cleanStaleMount(m)
            return
        }
        if let e = unmountRetryingBriefly(m, lazy: lazy) {
            if e == EBUSY { throw .system("'\(m)' is busy (files are open or a process is inside it); close them, or use --lazy") }
            if e == EPERM {
                // Not root: fusermount3 unmounts a user's own mount, and refuses another user's
                // (with a message about /etc/mtab): said here instead.
                if let owner = entry.owner, owner != getuid() {
                    throw .system("cannot unmount '\(m)': it was mounted by uid \(owner), and only that user or root may unmount it")
                }
                if runFusermount(["-u"] + (lazy ? ["-z"] : []) + [m]) { return try waitForExit(daemon, waitSeconds, lazy: lazy, log: state.daemonLog) }
            }
            throw .system("cannot unmount '\(m)': \(String(cString: strerror(e)))")
        }
        try waitForExit(daemon, waitSeconds, lazy: lazy, log: state.daemonLog)
    }

    /// umount2, tried again for half a second while it says EBUSY: a path walk or a stat of another
    /// process passing through the mountpoint (a `df`, a file manager) holds the mount for a moment,
    /// which is not "busy"; a file kept open or a working directory inside still is after that.
    /// nil once unmounted, else the errno.
    static func unmountRetryingBriefly(_ m: String, lazy: Bool, seconds: Double = 0.5) -> Int32? {
        var waited = 0.0
        while true {
            if m.withNameCString({ umount2($0, lazy ? Int32(MNT_DETACH) : 0) }) == 0 { return nil }
            let e = errno
            guard e == EBUSY, waited < seconds else { return e }
            usleep(20_000); waited += 0.02
        }
    }

    /// Waits for the daemon to finish (`ProcessLife.isRunning`: a zombie init has not reaped yet
    /// has ended), so that its files are closed and BACKING's file system can be unmounted.
    /// A daemon still running after `seconds` is said (not with --lazy, where open files keep it).
    private static func waitForExit(_ daemon: DaemonPIDFile?, _ seconds: Double, lazy: Bool, log: String) throws(MountError) {
        guard let daemon else { return }
        var waited = 0.0
        while waited < seconds, daemon.isRunning {
            usleep(5_000); waited += 0.005
        }
        if !lazy, daemon.isRunning {
            throw .system("unmounted, but the daemon (pid \(daemon.pid)) has not ended after \(Int(seconds)) s; its log is \(log)")
        }
    }

    static func runFusermount(_ args: [String]) -> Bool {
        var pid: pid_t = 0
        // Each argument's bytes (a mount point's name need not be UTF-8).
        var cargs = (["fusermount3"] + args).map { $0.withNameCString { strdup($0) } } + [nil]
        defer { for a in cargs { free(a) } }
        guard posix_spawnp(&pid, "fusermount3", nil, nil, &cargs, environ) == 0 else { return false }
        var status: Int32 = 0
        waitpid(pid, &status, 0)
        return status == 0
    }
}
