import CFuse3

/// The FUSE requests a session was sent, by operation: one relaxed atomic add per request (no
/// lock, no allocation), read by the daemon's metrics endpoint.
public enum FuseOperation: Int, CaseIterable, Sendable {
    case lookup, forget, getattr, setattr, readlink, mknod, mkdir, unlink, rmdir, symlink, rename, link
    case open, read, write, flush, release, fsync, opendir, readdir, readdirplus, releasedir, fsyncdir
    case statfs, setxattr, getxattr, listxattr, removexattr, access, create, fallocate, copyFileRange, lseek
    case tmpfile

    /// The name metrics use (the libfuse callback's name).
    public var name: String {
        switch self {
        case .copyFileRange: "copy_file_range"
        default: "\(self)"
        }
    }
}

/// One counter per `FuseOperation`, each on its own cache line (workers counting different
/// operations do not share one).
public final class FuseRequestCounters: @unchecked Sendable {
    private static let stride = 8  // 8 × 8 bytes: a cache line per counter
    private let slots: UnsafeMutablePointer<UInt64>

    public init() {
        let n = FuseOperation.allCases.count * Self.stride
        slots = .allocate(capacity: n)
        slots.initialize(repeating: 0, count: n)
    }

    deinit { slots.deallocate() }

    @inline(__always)
    public func count(_ operation: FuseOperation) {
        (slots + operation.rawValue * Self.stride).withMemoryRebound(to: CUnsignedLongLong.self, capacity: 1) { cfuse_counter_add($0, 1) }
    }

    /// Requests of `operation` so far.
    public func value(_ operation: FuseOperation) -> UInt64 {
        (slots + operation.rawValue * Self.stride).withMemoryRebound(to: CUnsignedLongLong.self, capacity: 1) { UInt64(cfuse_counter_load($0)) }
    }
}
