import Glibc

/// Whether a process still runs, by one rule for every command and the daemon.
public enum ProcessLife {
    /// True while `pid` names a process that runs (another user's too: `kill` says EPERM). False
    /// once it is gone, or a zombie whose threads have all ended: its descriptors, locks and its
    /// mounts' connections are let go by then, though its parent may reap it only later (a daemon's
    /// is init, which here takes 1 to 2 s). A thread-group leader shows `Z` as soon as its own
    /// thread exits while its other threads may still hold the files: that counts as running. A
    /// process whose state this user cannot read (procfs's `hidepid`) counts as running.
    ///
    /// `startedAt`: the process's start time as recorded (``startTime(_:)``): a process that now
    /// has `pid` but started at another time is another process (the kernel handed the pid out
    /// again), and the recorded one is gone. Nil: the pid alone decides.
    public static func isRunning(_ pid: pid_t, startedAt start: UInt64? = nil) -> Bool {
        guard pid > 0 else { return false }
        if kill(pid, 0) != 0 && errno == ESRCH { return false }
        guard let stat = readWholeFileBytes("/proc/\(pid)/stat") else { return kill(pid, 0) == 0 || errno == EPERM }
        if let start, let now = parseStartTime(stat), now != start { return false }
        guard let close = stat.lastIndex(of: UInt8(ascii: ")")), close + 2 < stat.count else { return true }
        let state = stat[close + 2]
        guard state == UInt8(ascii: "Z") || state == UInt8(ascii: "X") else { return true }
        return threadCount(pid) > 1
    }

    /// When process `pid` started: field 22 (`starttime`) of `/proc/PID/stat`, in clock ticks after
    /// boot; nil when there is no such process (or its stat cannot be read). With the pid it tells a
    /// process from any other that had or will have its pid in this boot.
    public static func startTime(_ pid: pid_t) -> UInt64? {
        withStatLine(of: pid) { parseStartTime($0) }
    }

    /// The start time in a `/proc/PID/stat` line: the 20th field after the command's last `)` (the
    /// command name, field 2, may hold spaces and parentheses).
    public static func parseStartTime<C: BidirectionalCollection>(_ line: C) -> UInt64? where C.Element == UInt8 {
        statField(22, of: line)
    }

    /// The parent in a `/proc/PID/stat` line: the 2nd field after the command's last `)` (the state
    /// comes first). Nil when the line has no such number.
    public static func parseParent<C: BidirectionalCollection>(_ line: C) -> pid_t? where C.Element == UInt8 {
        statField(4, of: line).flatMap { pid_t(exactly: $0) }
    }

    /// Numeric field `number` (counted from 1, as proc(5) does) of a `/proc/PID/stat` line, after the
    /// command's last `)`; nil when the line has no such field, or it is not a number that fits.
    static func statField<C: BidirectionalCollection>(_ number: Int, of line: C) -> UInt64? where C.Element == UInt8 {
        guard number > 2, let close = line.lastIndex(of: UInt8(ascii: ")")) else { return nil }
        var field = 2, value: UInt64 = 0, inField = false
        for byte in line[line.index(after: close)...] {
            if byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\n") {
                if inField {
                    if field == number { return value }
                    inField = false
                }
                continue
            }
            if !inField { inField = true; field += 1; value = 0 }
            if field == number {
                guard byte >= 48 && byte <= 57 else { return nil }
                let (times10, o1) = value.multipliedReportingOverflow(by: 10)
                let (sum, o2) = times10.addingReportingOverflow(UInt64(byte - 48))
                guard !o1 && !o2 else { return nil }
                value = sum
            }
        }
        return inField && field == number ? value : nil
    }

    /// The processes that started process `pid`, nearest first: its parent, the parent's parent, and
    /// so on, up to but not including init (pid 1) and the kernel's threads (pid 2 and their
    /// children); at most `limit` of them (a read of `/proc/PID/stat` each). Empty when `pid` is gone
    /// or its stat cannot be read. A process whose parent ended has init (or a subreaper) as its
    /// parent from then on.
    public static func ancestors(of pid: pid_t, limit: Int = 16) -> [pid_t] {
        var out: [pid_t] = []
        var current = pid
        while out.count < limit, current > 1, let parent = withStatLine(of: current, { parseParent($0) }), parent > 2 {
            if parent == pid || out.contains(parent) { break }  // never in a loop (a pid handed out again meanwhile)
            out.append(parent)
            current = parent
        }
        return out
    }

    /// `body` on `/proc/PID/stat`, read with one read(2) into a buffer on the stack (a line is some
    /// 300 bytes); nil when there is no such process or its stat cannot be read.
    static func withStatLine<T>(of pid: pid_t, _ body: (UnsafeBufferPointer<UInt8>) -> T?) -> T? {
        guard pid > 0 else { return nil }
        let fd = open("/proc/\(pid)/stat", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 1024) { buf -> T? in
            let n = read(fd, buf.baseAddress, 1024)
            guard n > 0 else { return nil }
            return body(UnsafeBufferPointer(rebasing: buf[0..<n]))
        }
    }

    /// This kernel's boot (`/proc/sys/kernel/random/boot_id`; empty when it cannot be read): a pid and
    /// start time recorded in another boot, or on another host, name no process here.
    public static func bootID() -> String {
        String(decoding: (readWholeFileBytes("/proc/sys/kernel/random/boot_id") ?? []).filter { $0 != 0x0A && $0 != 0x20 }, as: UTF8.self)
    }

    /// The threads `/proc/PID/task` lists (0 once the process is gone).
    public static func threadCount(_ pid: pid_t) -> Int {
        guard let dir = opendir("/proc/\(pid)/task") else { return 0 }
        defer { closedir(dir) }
        var n = 0
        while let e = readdir(dir) {
            if e.pointee.d_name.0 != 0x2E { n += 1 }  // not "." or ".."
        }
        return n
    }

    /// Whether a thread of process `pid` waits in the kernel uninterruptibly (state `D` in
    /// `/proc/PID/task/TID/stat`): for a lock, or for I/O. A thread waiting for a FUSE daemon's
    /// answer waits interruptibly (`S`) and does not count. False when nothing can be read.
    public static func waitsUninterruptibly(_ pid: pid_t) -> Bool {
        guard pid > 0, let dir = opendir("/proc/\(pid)/task") else { return false }
        defer { closedir(dir) }
        while let e = readdir(dir) {
            guard e.pointee.d_name.0 != 0x2E else { continue }  // not "." or ".."
            let tid = withUnsafeBytes(of: e.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            guard let stat = readWholeFileBytes("/proc/\(pid)/task/\(tid)/stat"),
                  let close = stat.lastIndex(of: UInt8(ascii: ")")), close + 2 < stat.count else { continue }
            if stat[close + 2] == UInt8(ascii: "D") { return true }
        }
        return false
    }
}
