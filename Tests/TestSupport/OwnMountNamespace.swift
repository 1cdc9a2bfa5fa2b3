/// Commands run in a mount namespace of their own (`unshare --mount`), which begins as a copy of
/// every mount of the moment: a copy of another test's FUSE mount would keep that mount's daemon
/// alive after its own unmount until the namespace ends (the kernel ends a FUSE connection with its
/// last mount; / has private propagation here, so the unmount does not reach the copy), which
/// disturbs tests running alongside.
public enum OwnMountNamespace {
    /// What `unshare --mount ... --` runs so that every FUSE mount but `mountpoint` is detached in
    /// the new namespace before `executable` starts (with the same pid: it is exec'd).
    public static func detachingOtherFUSEMounts(keeping mountpoint: String, _ executable: String, _ arguments: [String]) -> [String] {
        ["/usr/bin/python3", "-c", script, mountpoint, executable] + arguments
    }

    /// argv: the mount to keep, then the command to run. Mount points in mountinfo are bytes with
    /// space, tab, newline and backslash as octal escapes (proc(5)). A FUSE mount above the kept one
    /// stays (detaching it would take the kept one along).
    private static let script = #"""
import ctypes, os, re, sys
keep = os.fsencode(os.path.realpath(sys.argv[1]))
libc = ctypes.CDLL(None, use_errno=True)
for line in open("/proc/self/mountinfo", "rb"):
    fields, kind = line.split(b" - ", 1)
    point = re.sub(rb"\\([0-7]{3})", lambda m: bytes([int(m.group(1), 8)]), fields.split(b" ")[4])
    if not kind.startswith(b"fuse") or point == keep or keep.startswith(point.rstrip(b"/") + b"/"):
        continue
    if libc.umount2(point, 2) != 0 and ctypes.get_errno() != 22:  # MNT_DETACH; EINVAL: gone with its parent
        print("cannot detach", point, os.strerror(ctypes.get_errno()), file=sys.stderr)
os.execv(sys.argv[2], sys.argv[2:])
"""#
}
