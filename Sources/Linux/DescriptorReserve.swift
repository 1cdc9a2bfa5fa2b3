import Glibc
import Synchronization

/// The descriptors no client of the daemon can take: the top `size(forLimit:)` numbers under its
/// RLIMIT_NOFILE (docs/architecture.md, "The daemon's descriptors"). Whatever a client's request
/// leaves the daemon holding (a control-socket connection, an open through the mount, a node's
/// descriptor, a log reader's segment, a caller's kept name) is given back when its number is at or
/// above the reserve's floor: the request is refused (ENFILE, `limitExceeded`) or the node keeps its
/// file handle instead. So, whatever root or the owner open or connect, the daemon's own opens (the
/// store, the event log, what a request opens for the moment, and the runtime's: libdispatch's
/// workqueue monitor opens `/proc/TID/stat` of its workers about once a second and crashes the process
/// when it cannot, `DISPATCH_CLIENT_CRASH`) always find a descriptor.
///
/// Why a number and not a count: the kernel gives out the lowest free number, so a client's
/// descriptor below the floor leaves every number from the floor up to non-client uses, however
/// the numbers below were freed and taken again; and reading the number costs nothing. The floor is
/// process-wide, as the descriptor table is; until `keep(limit:)` is called nothing is kept (the CLI,
/// tests of the parts on their own).
public enum DescriptorReserve {
    private static let floorValue = Atomic<Int32>(.max)
    private static let keptValue = Atomic<Int>(0)

    /// How many descriptors a limit keeps: L/16 within 32...256 (more than the daemon's threads,
    /// each of which may open a descriptor for the moment).
    public static func size(forLimit limit: Int) -> Int { min(256, max(32, limit / 16)) }

    /// Keeps the top `size(forLimit: limit)` numbers from now on (the daemon, at start).
    public static func keep(limit: Int) {
        let l = max(0, limit), n = min(l, size(forLimit: l))
        keptValue.store(n, ordering: .relaxed)
        floorValue.store(Int32(clamping: l - n), ordering: .relaxed)
    }

    /// Keeps nothing (tests that kept a reserve, at their end).
    public static func keepNothing() {
        floorValue.store(.max, ordering: .relaxed)
        keptValue.store(0, ordering: .relaxed)
    }

    /// How many numbers are kept (0: none).
    public static var kept: Int { keptValue.load(ordering: .relaxed) }

    /// The lowest number kept (`Int32.max`: nothing kept).
    public static var floor: Int32 { floorValue.load(ordering: .relaxed) }

    /// Why a client's request was refused at the floor, for its answer: `what` is what it asked for.
    public static func refusal(for what: String) -> String {
        "the daemon has no descriptor left for \(what) (the last ones are kept for its own files)"
    }

    /// Whether a descriptor taken for a client's request may be kept for it: below the floor.
    @inline(__always)
    public static func admits(_ fd: Int32) -> Bool { fd < floorValue.load(ordering: .relaxed) }

    /// Whether a client's request may take one more descriptor now, asked before a call that would
    /// change something as it opens (an `O_TRUNC` open, which cannot be refused after the fact): the
    /// lowest free number is below the floor. One `fcntl(F_DUPFD_CLOEXEC)` of `probe` (any descriptor
    /// the caller holds) and its close; true at once when nothing is kept.
    public static func hasRoom(probing probe: Int32) -> Bool {
        let floor = floorValue.load(ordering: .relaxed)
        if floor == .max { return true }
        let lowest = fcntl(probe, F_DUPFD_CLOEXEC, 0)
        guard lowest >= 0 else { return errno != EMFILE && errno != ENFILE }
        close(lowest)
        return lowest < floor
    }
}
