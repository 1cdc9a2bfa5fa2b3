import Glibc
import NameBytes

/// What coordfs reads of a process's `/proc/PID/status`: its user ids, group ids and supplementary
/// groups. The one reader of that file's `Uid:`, `Gid:` and `Groups:` lines (the permissions screen's
/// credentials of an access, the control socket's peer, the loopback's group rules).
///
/// The file is read with one read(2) into a buffer on the stack (a status is about 1.5 KiB); only a
/// status that fills it (a huge group list: up to 65,536 groups, some 700 KiB) is read on to its end.
/// The bytes are parsed in place: numbers are decimal digits, a line counts only when it ends with a
/// newline (a file cut short never gives a number cut short), and a line that is not what the kernel
/// writes gives nothing rather than part of itself.
public struct ProcessStatus: Sendable, Equatable {
    /// The four ids of a `Uid:` or `Gid:` line, in the kernel's order.
    public struct IDs: Sendable, Equatable {
        public var real: UInt32
        public var effective: UInt32
        public var saved: UInt32
        /// The file-system id: the one FUSE reports as the caller's.
        public var filesystem: UInt32
        public init(real: UInt32, effective: UInt32, saved: UInt32, filesystem: UInt32) {
            self.real = real
            self.effective = effective
            self.saved = saved
            self.filesystem = filesystem
        }
    }

    /// The `Uid:` line; nil when it is missing or not four numbers.
    public var uids: IDs?
    /// The `Gid:` line; nil when it is missing or not four numbers.
    public var gids: IDs?
    /// The `Groups:` line's ids (none when the process has no supplementary groups); nil when the line
    /// is missing or holds anything but numbers.
    public var groups: [UInt32]?

    public init(uids: IDs? = nil, gids: IDs? = nil, groups: [UInt32]? = nil) {
        self.uids = uids
        self.gids = gids
        self.groups = groups
    }

    /// The size of the first (usually only) read.
    static let firstRead = 16 * 1024

    /// The status of process (or thread) `pid`, or nil when there is none (gone, never was, or its
    /// status cannot be read).
    public static func read(pid: pid_t) -> ProcessStatus? {
        guard pid > 0 else { return nil }
        return read(path: "/proc/\(pid)/status")
    }

    /// The status in the file at `path` (for tests: any file in the format of `/proc/PID/status`).
    public static func read(path: String) -> ProcessStatus? {
        let fd = path.withNameCString { Glibc.open($0, O_RDONLY | O_CLOEXEC) }
        guard fd >= 0 else { return nil }
        defer { Glibc.close(fd) }
        return withUnsafeTemporaryAllocation(byteCount: firstRead, alignment: 1) { buffer -> ProcessStatus? in
            let n = retryingEINTR { Glibc.read(fd, buffer.baseAddress, buffer.count) }
            // A process that ended between the open and the read: ESRCH.
            guard n >= 0 else { return nil }
            if n < buffer.count { return ProcessStatus(parsing: UnsafeRawBufferPointer(rebasing: buffer[0..<n])) }
            // Filled: the rest is read too (a seq_file's later reads continue the same text).
            var all = [UInt8](UnsafeRawBufferPointer(buffer))
            var chunk = [UInt8](repeating: 0, count: 256 * 1024)
            while true {
                let m = retryingEINTR { Glibc.read(fd, &chunk, chunk.count) }
                guard m >= 0 else { return nil }
                if m == 0 { break }
                all.append(contentsOf: chunk[0..<m])
            }
            return all.withUnsafeBytes { ProcessStatus(parsing: $0) }
        }
    }

    /// Parses the bytes of a status file. Lines other than `Uid:`, `Gid:` and `Groups:` are skipped;
    /// of a line given twice, the first counts.
    public init(parsing bytes: UnsafeRawBufferPointer) {
        var lineStart = 0
        var i = 0
        var sawUid = false, sawGid = false, sawGroups = false
        while i < bytes.count {
            if bytes[i] != 0x0A {
                i += 1
                continue
            }
            let line = UnsafeRawBufferPointer(rebasing: bytes[lineStart..<i])
            if !sawUid, let value = Self.value(of: line, named: "Uid:") {
                sawUid = true
                uids = Self.ids(value)
            } else if !sawGid, let value = Self.value(of: line, named: "Gid:") {
                sawGid = true
                gids = Self.ids(value)
            } else if !sawGroups, let value = Self.value(of: line, named: "Groups:") {
                sawGroups = true
                groups = Self.numbers(value)
            }
            i += 1
            lineStart = i
        }
        // A last line without its newline is cut short: it counts for nothing.
    }

    /// Parses a status held in an array (tests, and any caller with the bytes at hand).
    public init(parsing bytes: [UInt8]) {
        self = bytes.withUnsafeBytes { ProcessStatus(parsing: $0) }
    }

    /// What follows `name` at the start of `line`.
    static func value(of line: UnsafeRawBufferPointer, named name: StaticString) -> UnsafeRawBufferPointer? {
        let count = name.utf8CodeUnitCount
        guard line.count >= count else { return nil }
        let prefix = UnsafeRawBufferPointer(start: name.utf8Start, count: count)
        for k in 0..<count where line[k] != prefix[k] { return nil }
        return UnsafeRawBufferPointer(rebasing: line[count...])
    }

    /// Four numbers, or nil.
    static func ids(_ value: UnsafeRawBufferPointer) -> IDs? {
        guard let n = numbers(value), n.count == 4 else { return nil }
        return IDs(real: n[0], effective: n[1], saved: n[2], filesystem: n[3])
    }

    /// Decimal numbers separated by spaces and tabs (any number of them, before, between and after),
    /// or nil when anything else is there or a number does not fit 32 bits.
    static func numbers(_ value: UnsafeRawBufferPointer) -> [UInt32]? {
        var out: [UInt32] = []
        var current: UInt64 = 0
        var inNumber = false
        for byte in value {
            switch byte {
            case 0x30...0x39:
                current = current * 10 + UInt64(byte - 0x30)
                if current > UInt64(UInt32.max) { return nil }
                inNumber = true
            case 0x20, 0x09:
                if inNumber { out.append(UInt32(current)) }
                current = 0
                inNumber = false
            default:
                return nil
            }
        }
        if inNumber { out.append(UInt32(current)) }
        return out
    }
}
