import Glibc
import Synchronization

/// Who a FUSE caller is: the kernel reports the calling *thread*; coordination is per process
/// (`Tgid` in `/proc/TID/status`), and every record names the executable (`/proc/TID/comm`).
final class ProcessNames: Sendable {
    struct Identity: Sendable {
        let pid: pid_t
        let name: String
    }
    /// Thread id -> process id: fixed for a thread's life (only a recycled id could change it, and
    /// the table is bounded). The name is not cached: `exec` changes it under the same pid (a shell
    /// running `mv` as its last command), and one small read of /proc per coordinated operation is
    /// what an accurate actor costs.
    private let processOfThread = Mutex<[pid_t: pid_t]>([:])
    private let limit = 4096

    /// The caller's process and executable.
    func identity(of tid: pid_t) -> Identity {
        if tid <= 0 { return Identity(pid: tid, name: "kernel") }
        if let pid = processOfThread.withLock({ $0[tid] }) {
            return Identity(pid: pid, name: Self.name(tid) ?? "pid\(pid)")
        }
        let id = Self.read(tid)
        remember(tid, id.pid)
        return id
    }

    /// The caller's process only (no read of /proc once the thread is known).
    func process(of tid: pid_t) -> pid_t {
        if tid <= 0 { return tid }
        if let pid = processOfThread.withLock({ $0[tid] }) { return pid }
        let id = Self.read(tid)
        remember(tid, id.pid)
        return id.pid
    }

    private func remember(_ tid: pid_t, _ pid: pid_t) {
        processOfThread.withLock { c in
            if c.count >= limit { c.removeAll(keepingCapacity: true) }
            c[tid] = pid
        }
    }

    /// `/proc/TID/comm`, the executable's name (at most 15 bytes and a newline: a small read).
    static func name(_ tid: pid_t) -> String? {
        let fd = open("/proc/\(tid)/comm", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 64) { buf -> String? in
            let n = Glibc.read(fd, buf.baseAddress, 64)
            guard n > 0 else { return nil }
            let end = buf[n - 1] == 10 ? n - 1 : n
            return String(decoding: UnsafeBufferPointer(rebasing: buf[0..<end]), as: UTF8.self)
        }
    }

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
