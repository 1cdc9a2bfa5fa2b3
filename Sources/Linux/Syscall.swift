import Glibc

// The one EINTR-retrying wrapper of the system calls (as swift-nio keeps one, `syscall`). Every
// module that makes a call returning -1 and errno goes through it, directly or through LinuxGNU's
// `sys`/`sysValue`, which give swift-system's `Errno`; each module turns that into its own error.

/// Runs a call that returns -1 and sets errno on failure, again while it fails with EINTR; returns
/// what the last call returned (-1 with errno set on any other failure).
@inlinable @inline(__always)
public func retryingEINTR<T: BinaryInteger>(_ call: () -> T) -> T {
    while true {
        let r = call()
        if r == -1 && errno == EINTR { continue }
        return r
    }
}
