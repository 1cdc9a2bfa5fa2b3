import Glibc
import Linux
import SystemPackage

/// Runs a system call that returns -1 and sets errno on failure, retrying EINTR.
/// Returns the errno, or nil on success. EFAULT can only mean a bad pointer in coordfs: it traps.
@inlinable @inline(__always)
public func sys(_ call: () -> Int32) -> Errno? {
    if retryingEINTR(call) != -1 { return nil }
    let e = errno
    precondition(e != EFAULT, "EFAULT from a system call: a bad pointer in coordfs")
    return Errno(rawValue: e)
}

/// As `sys`, for calls that return a value (a descriptor, a byte count).
@inlinable @inline(__always)
public func sysValue<T: BinaryInteger>(_ call: () -> T) -> Result<T, Errno> {
    let r = retryingEINTR(call)
    if r != -1 { return .success(r) }
    let e = errno
    precondition(e != EFAULT, "EFAULT from a system call: a bad pointer in coordfs")
    return .failure(Errno(rawValue: e))
}
