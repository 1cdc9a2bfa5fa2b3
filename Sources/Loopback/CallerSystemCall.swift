// Which system call a request's caller is in, for the one request whose meaning the kernel leaves
// ambiguous: a SETATTR with nothing to set. The kernel sends it for chown(f, -1, -1) and for a
// write's (truncate's, fallocate's) removal of privileges alike (`file_remove_privs`), and Linux
// treats the two differently: chown drops set-ID bits for anyone it permits and refuses a caller
// who neither owns the file nor has CAP_FOWNER (EPERM), a write drops them without a check and only
// for a caller without CAP_FSETID. The caller's thread is blocked in its system call while the
// daemon answers, so /proc/TID/syscall (the request's pid is the calling thread's id) names it.
import FuseKit
import Glibc
import LinuxGNU

public enum CallerSystemCall {
    /// The chown family on this architecture: chown, fchown, lchown, fchownat.
    #if arch(x86_64)
    static let chownCalls: Set<Int> = [92, 93, 94, 260]
    #elseif arch(arm64)
    static let chownCalls: Set<Int> = [54, 55]
    #else
    static let chownCalls: Set<Int> = []
    #endif

    /// The extended-attribute changes on this architecture: setxattr, lsetxattr, fsetxattr,
    /// removexattr, lremovexattr, fremovexattr, setxattrat, removexattrat.
    #if arch(x86_64)
    static let xattrChangeCalls: Set<Int> = [188, 189, 190, 197, 198, 199, 463, 466]
    #elseif arch(arm64)
    static let xattrChangeCalls: Set<Int> = [5, 6, 7, 14, 15, 16, 463, 466]
    #else
    static let xattrChangeCalls: Set<Int> = []
    #endif

    /// True when the thread `tid` is in a system call that sets or removes an extended attribute,
    /// false when it is in another one (a chown, whose capability removal the kernel makes
    /// itself; a write, a truncate) or in none, nil when that cannot be read.
    public static func isExtendedAttributeChange(_ tid: pid_t) -> Bool? {
        guard !xattrChangeCalls.isEmpty, let number = blockedCall(tid) else { return nil }
        return xattrChangeCalls.contains(number)
    }

    /// True when the thread `tid` is in a chown-family system call, false when it is in another
    /// one (a write, io_uring_enter, ...) or in none, nil when that cannot be read (a caller outside
    /// the daemon's pid namespace has pid 0, a thread that is gone, an architecture not listed).
    static func isChown(_ tid: pid_t) -> Bool? {
        guard !chownCalls.isEmpty, let number = blockedCall(tid) else { return nil }
        return chownCalls.contains(number)
    }

    /// The number of the system call the thread `tid` is blocked in (-1: blocked outside one), nil
    /// when that cannot be read. The kernel answers "running" for a thread on a processor, and a
    /// caller is one for a moment after its request is sent: the daemon may read the request (at
    /// once on the io_uring transport, from another processor) before the caller is asleep waiting
    /// for the answer. It cannot go on without that answer (a signal only makes the kernel send an
    /// INTERRUPT, and it waits on), so it is asleep as soon as it gets a processor: asked again,
    /// yielding the processor and then sleeping 1 ms between tries, for at most about 200 ms (a
    /// machine that busy cannot be told from a thread that never sleeps).
    static func blockedCall(_ tid: pid_t) -> Int? {
        guard tid > 0 else { return nil }
        for attempt in 0..<settleAttempts {
            guard let text = readWholeFile("/proc/\(tid)/syscall"),
                  let first = text.split(whereSeparator: { $0 == " " || $0 == "\n" }).first else { return nil }
            if let number = Int(first) { return number }
            if attempt < 8 { sched_yield() } else { usleep(1000) }
        }
        return nil
    }

    /// How often `blockedCall` asks a running thread: 8 yields, then 200 sleeps of 1 ms.
    static let settleAttempts = 208

    /// chown(f, -1, -1) of a file with attributes `st` by `caller` is refused by Linux (EPERM): it
    /// would drop set-user-ID, or set-group-ID (group-executable, or of a group the caller is not
    /// in), which is a mode change only the owner or CAP_FOWNER may make (`setattr_prepare`).
    /// Root stands for CAP_FOWNER, as elsewhere in the Loopback.
    static func chownIsRefused(_ st: stat, caller: RequestContext) -> Bool {
        guard caller.uid != 0, caller.uid != st.st_uid, st.st_mode & S_IFMT != S_IFDIR else { return false }
        if st.st_mode & S_ISUID != 0 { return true }
        guard st.st_mode & S_ISGID != 0 else { return false }
        return st.st_mode & S_IXGRP != 0 || !ProcessGroups.contains(st.st_gid, caller: caller)
    }
}
