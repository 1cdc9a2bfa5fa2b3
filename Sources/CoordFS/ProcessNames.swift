import Glibc
import Synchronization

/// The executable name of a calling process (`/proc/PID/comm`), cached: every coordinated operation
/// records its actor, and reading /proc each time would cost a few microseconds.
final class ProcessNames: Sendable {
    private let cache = Mutex<[pid_t: String]>([:])
    private let limit = 4096

    func name(of pid: pid_t) -> String {
        if pid <= 0 { return "kernel" }
        if let n = cache.withLock({ $0[pid] }) { return n }
        let n = Self.read(pid)
        cache.withLock { c in
            if c.count >= limit { c.removeAll(keepingCapacity: true) }
            c[pid] = n
        }
        return n
    }

    /// Forget a pid (its process may have exec'd another program).
    func forget(_ pid: pid_t) { _ = cache.withLock { $0.removeValue(forKey: pid) } }

    static func read(_ pid: pid_t) -> String {
        guard let text = readWholeFile("/proc/\(pid)/comm") else { return "pid\(pid)" }
        return text.trimmingCharacters(in: "\n")
    }
}
