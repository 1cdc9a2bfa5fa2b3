import CLinux
import Glibc

/// The blocks a file system keeps for root (ext4's reserved blocks, 5% by default: `tune2fs -m`).
/// ext4 lets a write into them when the writer's fsuid is the reserve's user (root, unless
/// `tune2fs -u` named another) or it has CAP_SYS_RESOURCE (which also lets it past the disk
/// quotas' hard limits). A daemon running as root that writes for other users must not lend them
/// either, or one user fills the last blocks kept for root and its daemons (the mount's own event
/// log and document store among them), where its native writes would have ended with ENOSPC.
public enum RootReserve {
    /// The fsuid a write is made with when it is no one user's (a passthrough registration, which
    /// serves every later open of its file): the overflow uid, `nobody`.
    public static let anyUser: uid_t = 65534

    /// Runs `body` with the calling thread's fsuid `uid` and CAP_SYS_RESOURCE out of its
    /// effective set, every other capability as it was, and puts both back after: `body`'s writes
    /// stop where `uid`'s own writes stop, and are otherwise made as before. The kernel keeps the
    /// credentials a file is registered with for FUSE passthrough, so the writes through a
    /// registration made in `body` stop there for as long as it lasts. Five system calls, this
    /// thread's credentials alone; nothing when the daemon does not run as root.
    @inline(__always)
    public static func withheld<T>(as uid: uid_t, _ body: () throws -> T) rethrows -> T {
        guard runningAsRoot, uid != 0 else { return try body() }
        var saved = clinux_thread_credentials()
        clinux_withhold_root_reserve(uid, &saved)
        defer { clinux_restore_root_reserve(&saved) }
        return try body()
    }

    private static let runningAsRoot = geteuid() == 0
}
