import CLinux
import Glibc

/// File-system access made as another user's, for the kernel to judge: a daemon running as root
/// that opens an existing item for a caller asks the kernel, as the caller, rather than reading
/// mode bits itself (which misses POSIX ACLs and supplementary groups).
public enum ActingAsUser {
    /// Runs `body` with the calling thread's fsuid `uid`, fsgid `gid` and supplementary groups
    /// `groups`, and without the file-system capabilities when `uid` is not 0 (setfsuid takes
    /// them out), then puts all of it back: the permission checks of `body`'s system calls are the
    /// user's own, modes, ACLs and groups as natively. This thread's credentials alone (the raw
    /// setgroups system call, never glibc's, which changes every thread's). nil, `body` not run,
    /// when they could not be changed: a caller treats that as refused.
    public static func run<T>(uid: uid_t, gid: gid_t, groups: [gid_t], _ body: () -> T) -> T? {
        var saved = clinux_acting_credentials()
        let changed = groups.withUnsafeBufferPointer { clinux_act_as(uid, gid, $0.baseAddress, Int32($0.count), &saved) }
        defer { clinux_stop_acting(&saved) }
        guard changed == 0 else { return nil }
        return body()
    }
}
