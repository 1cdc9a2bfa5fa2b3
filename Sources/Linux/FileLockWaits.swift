import Glibc

/// Which processes wait for a file lock, and whose lock each waits for: `/proc/locks`, which every
/// user may read. Each held lock is a line (`1: FLOCK  ADVISORY  WRITE 8295 00:27:6728336 0 EOF`:
/// its number, kind, mode, type, owner's pid, device:inode, range) and each request waiting for it
/// a line of the same number marked `->` below it (nested requests waiting behind another waiting
/// one are indented further: they too wait for the held lock). flock(2) and POSIX record locks
/// (`fcntl(F_SETLKW)`, `lockf`) name their process; an open file description's lock (`OFDLCK`)
/// names none (-1), so its waiters and owners are not known here.
public struct FileLockWaits: Sendable, Equatable {
    /// For each waiting process, the owners of the held locks it waits for.
    public private(set) var owners: [pid_t: Set<pid_t>]

    /// No process waits.
    public var isEmpty: Bool { owners.isEmpty }

    public init(owners: [pid_t: Set<pid_t>] = [:]) {
        self.owners = owners
    }

    /// The waits in text in the format of `/proc/locks`. A line that is not in that format counts
    /// for nothing (and a waiting line whose held lock was not understood neither).
    public init<C: Collection>(parsing text: C) where C.Element == UInt8 {
        owners = [:]
        var heldNumber: ArraySlice<UInt8>?
        var heldOwner: pid_t?
        var line: [UInt8] = []
        line.reserveCapacity(128)
        func take(_ line: [UInt8]) {
            var fields = line.split(separator: UInt8(ascii: " "), omittingEmptySubsequences: true)[...]
            guard let number = fields.popFirst(), number.last == UInt8(ascii: ":") else { return }
            let waits = fields.first.map { $0.elementsEqual("->".utf8) } ?? false
            if waits { fields = fields.dropFirst() }
            // kind, mode, type, pid
            guard fields.count >= 4 else {
                if !waits { heldNumber = nil; heldOwner = nil }
                return
            }
            let pid = Self.parsePid(fields[fields.startIndex + 3])
            if !waits {
                heldNumber = number
                heldOwner = pid.flatMap { $0 > 0 ? $0 : nil }
                return
            }
            guard let heldNumber, heldNumber.elementsEqual(number), let heldOwner, let pid, pid > 0 else { return }
            owners[pid, default: []].insert(heldOwner)
        }
        for byte in text {
            if byte == UInt8(ascii: "\n") {
                take(line)
                line.removeAll(keepingCapacity: true)
            } else {
                line.append(byte)
            }
        }
        if !line.isEmpty { take(line) }
    }

    /// A decimal pid (`-1` for none); nil when the field is not a number.
    static func parsePid(_ field: ArraySlice<UInt8>) -> pid_t? {
        var digits = field[...]
        let negative = digits.first == UInt8(ascii: "-")
        if negative { digits = digits.dropFirst() }
        guard !digits.isEmpty, digits.count <= 10 else { return nil }
        var value: Int64 = 0
        for d in digits {
            guard d >= 48 && d <= 57 else { return nil }
            value = value * 10 + Int64(d - 48)
        }
        return pid_t(exactly: negative ? -value : value)
    }

    /// This system's waits now, from the first `limit` bytes of `/proc/locks` (none when it cannot be
    /// read). Any user can make the file long (a lock on every other byte of a file is a line each):
    /// beyond `limit` its waits are not seen, and reading it costs no more.
    public static func read(limit: Int = 256 * 1024) -> FileLockWaits {
        let fd = open("/proc/locks", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return FileLockWaits() }
        defer { close(fd) }
        var bytes: [UInt8] = []
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 16 * 1024) { chunk in
            while bytes.count < limit {
                let got = retryingEINTR { Glibc.read(fd, chunk.baseAddress, min(chunk.count, limit - bytes.count)) }
                if got <= 0 { break }
                bytes.append(contentsOf: chunk[0..<got])
            }
        }
        // A line cut at the limit counts for nothing.
        if bytes.count >= limit, let lastNewline = bytes.lastIndex(of: UInt8(ascii: "\n")) { bytes.removeSubrange((lastNewline + 1)...) }
        return FileLockWaits(parsing: bytes)
    }

    /// Whether process `pid` waits for a lock held by one of `owners`.
    public func waits(_ pid: pid_t, forAnyOf owners: Set<pid_t>) -> Bool {
        guard let held = self.owners[pid] else { return false }
        return !held.isDisjoint(with: owners)
    }
}
