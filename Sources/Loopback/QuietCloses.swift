import Glibc
import FuseKit
import Synchronization

/// Which backing file systems never report an error from close(2).
///
/// close(2) through the mount sends a FLUSH, a round trip on every close, so that the daemon can pass
/// on what closing the backing file reports: delayed write errors on NFS, CIFS or another FUSE file
/// system. Local disk and memory file systems have no flush operation, so their close never fails,
/// and opens of their files are answered with FOPEN_NOFLUSH: close(2) then returns without asking the
/// daemon. Anything not known to be quiet keeps the FLUSH.
final class QuietCloses: Sendable {
    /// By device: every file of one file system answers alike, and a backing folder may hold mounts
    /// of others.
    private let byDevice = Mutex<[dev_t: Bool]>([:])

    /// True when close(2) of files on `device` (the file system of `fd`) never reports an error.
    func neverReportErrors(_ fd: Int32, device: dev_t) -> Bool {
        if let known = byDevice.withLock({ $0[device] }) { return known }
        let quiet = LocalFileSystems.contains(fd)
        byDevice.withLock { $0[device] = quiet }
        return quiet
    }
}
