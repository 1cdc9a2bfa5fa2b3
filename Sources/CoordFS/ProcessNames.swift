import Glibc
import Synchronization

/// Who a FUSE caller is: the kernel reports the calling *thread*; coordination is per process. Read
/// from `/proc/TID/status` (process id `Tgid` and the executable `Name`) and cached: every coordinated
/// operation records its actor, and reading /proc each time would cost a few microseconds.
final class ProcessNames: Sendable {
    struct Identity: Sendable {
        let pid: pid_t
        let name: String
        /// The purpose identifier all of this process's accesses share ("pid:N").
        let purpose: String
        init(pid: pid_t, name: String) { self.pid = pid; self.name = name; purpose = "pid:\(pid)" }
    }
    private let cache = Mutex<[pid_t: Identity]>([:])
    private let limit = 4096

    func identity(of tid: pid_t) -> Identity {
        if tid <= 0 { return Identity(pid: tid, name: "kernel") }
        if let n = cache.withLock({ $0[tid] }) { return n }
        let n = Self.read(tid)
        cache.withLock { c in
            if c.count >= limit { c.removeAll(keepingCapacity: true) }
            c[tid] = n
        }
        return n
    }

    func name(of tid: pid_t) -> String { identity(of: tid).name }

    static func read(_ tid: pid_t) -> Identity {
        guard let text = readWholeFile("/proc/\(tid)/status") else { return Identity(pid: tid, name: "pid\(tid)") }
        var pid = tid, name = "pid\(tid)"
        for line in text.split(separator: "\n", maxSplits: 12) {
            if line.hasPrefix("Name:") { name = String(line.dropFirst(5)).trimmingCharacters(in: " \t") }
            else if line.hasPrefix("Tgid:"), let t = pid_t(String(line.dropFirst(5)).trimmingCharacters(in: " \t")) { pid = t }
        }
        return Identity(pid: pid, name: name)
    }
}
