import FuseKit
import Glibc
import Linux
import Synchronization
import LinuxGNU

/// Who a FUSE caller is: the kernel reports the calling *thread*; coordination is per process
/// (`Tgid` in `/proc/TID/status`), and every record names the executable (`/proc/TID/comm`).
final class ProcessNames: Sendable {
    struct Identity: Sendable {
        let pid: pid_t
        let name: String
    }

    /// A known thread: its process, and `/proc/TID/comm` kept open. The name is read afresh for each
    /// operation (`exec` changes it under the same pid: a shell running `mv` as its last command),
    /// but with one `pread`. Once the thread is gone the read fails (ESRCH), even if its id was
    /// recycled: the descriptor belongs to the old task, so a new thread is never taken for it.
    private final class KnownThread: Sendable {
        let pid: pid_t
        let comm: Int32
        init(pid: pid_t, comm: Int32) { self.pid = pid; self.comm = comm }
        deinit { if comm >= 0 { close(comm) } }

        func name() -> String? {
            guard comm >= 0 else { return nil }
            return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 64) { buf -> String? in
                let n = pread(comm, buf.baseAddress, 64, 0)
                guard n > 0 else { return nil }
                let end = buf[n - 1] == 10 ? n - 1 : n
                return String(decoding: UnsafeBufferPointer(rebasing: buf[0..<end]), as: UTF8.self)
            }
        }
    }

    private let threads = Mutex<[pid_t: KnownThread]>([:])
    /// Bounds the table and the descriptors it keeps open (`DescriptorShares.callerNames`: 512, or a
    /// 16th of the descriptor limit in force when that is less; at 1,024 descriptors, half are the
    /// nodes' and the rest serve open files).
    private let limit: Int

    init(limit: Int) { self.limit = max(1, limit) }

    /// The caller's process and executable.
    func identity(of tid: pid_t) -> Identity {
        if tid <= 0 { return Identity(pid: tid, name: "kernel") }
        if let known = threads.withLock({ $0[tid] }) {
            if let name = known.name() { return Identity(pid: known.pid, name: name) }
            threads.withLock { if $0[tid] === known { $0[tid] = nil } }
        }
        return learn(tid)
    }

    /// The caller's process only: `identity(of:)`, whose read of the name is also the look that the
    /// known thread is still that thread. Without that look, a thread id the kernel gave out again, to
    /// a thread of another process (another user's, on a shared mount), was taken for the old
    /// thread's process: a truncate, an attribute change or a flush of that other process counted as
    /// covered by the old process's open for writing (no ask, no lost-update check).
    func process(of tid: pid_t) -> pid_t { identity(of: tid).pid }

    private func learn(_ tid: pid_t) -> Identity {
        // The descriptor first: if the thread is replaced between the two reads, the name read
        // through it fails next time and the thread is learned again.
        var comm = open("/proc/\(tid)/comm", O_RDONLY | O_CLOEXEC)
        // Not kept at a number the daemon keeps for its own files (`DescriptorReserve`): the
        // thread is then learned again at its next request.
        if comm >= 0, !DescriptorReserve.admits(comm) { close(comm); comm = -1 }
        let id = Self.read(tid)
        let known = KnownThread(pid: id.pid, comm: comm)
        guard comm >= 0 else { return id }
        threads.withLock { table in
            if table.count >= limit { table.removeAll(keepingCapacity: true) }
            table[tid] = known
        }
        return id
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
