import Glibc

/// A descriptor another thread makes readable, once and for good, to wake a thread asleep in
/// poll(2) (an event stream's reader, asleep on the log: `EventStream`; the /dev/fuse reader when
/// its session is told to end: `DeviceReader`). A pipe: Swift's Glibc module does not show eventfd.
public final class WakeUp: Sendable {
    /// Readable once `signal()` ran; nothing reads it, so it stays readable (-1: no pipe could be made).
    public let descriptor: Int32
    private let writeEnd: Int32

    public init() {
        var ends: [Int32] = [-1, -1]
        if pipe(&ends) == 0 {
            for fd in ends {
                _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
                _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
            }
        }
        descriptor = ends[0]
        writeEnd = ends[1]
    }

    /// Makes `descriptor` readable (again a no-op once it is).
    public func signal() {
        guard writeEnd >= 0 else { return }
        var byte: UInt8 = 1
        _ = write(writeEnd, &byte, 1)
    }

    deinit {
        if descriptor >= 0 { close(descriptor) }
        if writeEnd >= 0 { close(writeEnd) }
    }
}
