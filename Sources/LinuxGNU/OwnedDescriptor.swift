import Glibc

/// A descriptor owned by whoever holds this object: closed when the last holder lets go (-1: none).
/// Not before, or its number could name another file; not later, or what it names stays in use (a
/// backing folder's file system could not be unmounted, another FUSE mount could not end).
public final class OwnedDescriptor: Sendable {
    public let fd: Int32
    public init(_ fd: Int32) { self.fd = fd }
    deinit { if fd >= 0 { close(fd) } }
}
