import Glibc
import SystemPackage
import Synchronization
import FuseKit
import LinuxGNU

let O_PATH = LinuxCalls.O_PATH
let O_DIRECT = LinuxCalls.O_DIRECT
let AT_EMPTY_PATH = LinuxCalls.AT_EMPTY_PATH
let UTIME_NOW = LinuxCalls.UTIME_NOW
let UTIME_OMIT = LinuxCalls.UTIME_OMIT

/// Walks through `/proc/self/fd` so far (`Loopback.procPathWalks`).
let procPathWalkCount = Atomic<Int>(0)

/// False once `fchmodat2` proved missing (before Linux 6.6): chmod then walks `/proc/self/fd`.
private let emptyPathChmod = Atomic<Bool>(true)

/// chmod(2) of what an O_PATH descriptor refers to: `fchmodat2(fd, "", mode, AT_EMPTY_PATH)`, no path
/// walked (tar sets a mode on nearly every file it makes); through `/proc/self/fd/N` before Linux 6.6
/// or where a filter refuses the call (its error then is the walk's: a chmod refused is refused
/// either way, and changes nothing).
func chmod(pathDescriptor fd: Int32, _ mode: mode_t) -> Errno? {
    if emptyPathChmod.load(ordering: .relaxed) {
        guard let e = sys({ LinuxCalls.chmod(pathDescriptor: fd, mode) }) else { return nil }
        guard e == .noFunction || e == .invalidArgument || e == .notPermitted else { return e }
        if e == .noFunction { emptyPathChmod.store(false, ordering: .relaxed) }
    }
    return withProcPath(fd) { p in sys { Glibc.chmod(p, mode) } }
}

/// utimensat(2) of what an O_PATH descriptor of anything but a symlink refers to:
/// `utimensat(fd, "", times, AT_EMPTY_PATH)`, no path walked (tar sets the times of every file it
/// makes); through `/proc/self/fd/N` where the kernel refuses AT_EMPTY_PATH here.
func setTimes(pathDescriptor fd: Int32, _ times: UnsafePointer<timespec>) -> Errno? {
    guard let e = sys({ utimensat(fd, "", times, AT_EMPTY_PATH) }) else { return nil }
    guard e == .invalidArgument || e == .noFunction else { return e }
    return withProcPath(fd) { p in sys { utimensat(AT_FDCWD, p, times, 0) } }
}

/// "/proc/self/fd/N": reopens an O_PATH descriptor, or names it for calls without an fd variant.
/// Each use is a walk through procfs, which makes a new dentry and inode for the descriptor every
/// time (measured here: 20-40 µs, against 2 µs for `open_by_handle_at`): not for hot paths.
@inline(__always)
func withProcPath<R>(_ fd: Int32, _ body: (UnsafePointer<CChar>) -> R) -> R {
    procPathWalkCount.add(1, ordering: .relaxed)
    return withProcPathName(fd, body)
}

/// `withProcPath`'s path, not counted in `procPathWalks`: for the registration of a new file's
/// read-only passthrough backing file (`readOnlyDescriptor`), which that count never included.
@inline(__always)
func withProcPathName<R>(_ fd: Int32, _ body: (UnsafePointer<CChar>) -> R) -> R {
    // Formatted by hand into a stack buffer: this is on every open.
    withUnsafeTemporaryAllocation(of: CChar.self, capacity: 32) { buf in
        let prefix: StaticString = "/proc/self/fd/"
        var i = 0
        prefix.withUTF8Buffer { for b in $0 { buf[i] = CChar(bitPattern: b); i += 1 } }
        var digits: (CChar, CChar, CChar, CChar, CChar, CChar, CChar, CChar, CChar, CChar, CChar, CChar) = (0,0,0,0,0,0,0,0,0,0,0,0)
        // Never -1 from a node (`BackingNode.withFD` fails first); "/proc/self/fd/-1" would be ENOENT.
        if fd < 0 { buf[i] = 45; i += 1 }
        var n = abs(Int(fd)), count = 0
        withUnsafeMutableBytes(of: &digits) { d in
            repeat { d[count] = UInt8(48 + n % 10); n /= 10; count += 1 } while n > 0
            while count > 0 { count -= 1; buf[i] = CChar(bitPattern: d[count]); i += 1 }
        }
        buf[i] = 0
        return body(buf.baseAddress!)
    }
}
