import Glibc
import Linux

/// Where a reader starts.
public enum EventLogPosition: Sendable, Hashable {
    /// The oldest record still stored (after a `gap` if retention has deleted the beginning).
    case start
    /// Only records appended after the reader opened (`coordfs watch` without `--since`).
    case end
    /// Records with `seq >= n` (`--since n`). If `n` is older than the oldest kept record, the
    /// first record returned is a `gap` with reason `retention` covering the deleted range.
    case from(UInt64)
    /// Records with `seq > n`: resume after the last seq a consumer processed.
    case after(UInt64)
}

/// Reads an event log directory, possibly while a writer in another process appends to it.
///
/// `next()` returns stored records in sequence order, from the position it was opened at,
/// filtered by `filter`; it returns nil once it has caught up with what is on disk, and later calls
/// continue from there, so a slow or paused reader never misses anything that is still stored.
/// Missing ranges (retention, a damaged segment, records the writer had to drop) come out as one
/// `gap` record each, so the seqs a reader sees are continuous. Segment rotation and retention
/// deleting segments while reading are handled: an open segment stays readable after unlink.
///
/// Opens nothing for writing and takes no lock. Not thread-safe: use one reader per thread.
public final class EventLogReader {
    public let directory: String
    public let filter: EventFilter

    /// The seq of the last record consumed (returned or filtered out); a resume cursor for
    /// `.after(cursor)`. 0 before anything was read.
    public private(set) var cursor: UInt64

    /// Frames read from the files so far: shown, filtered out, or passed on the way to the
    /// position (the reader's work, which tests and benchmarks count).
    public private(set) var framesRead: UInt64 = 0
    /// When set, `next()` reads at most this many more frames (opening a segment counts as one)
    /// and then returns nil, as when caught up; it goes on from there once given more. Bounds the
    /// work of one call, such as one `readLog` request to the daemon.
    public var frameBudget: Int?

    /// The writer's index when the reader runs in the writer's process (nil: the files alone).
    private let index: EventLogIndex?
    /// Where the last frame read from the current segment starts (nil: none since it was opened).
    private var previousFrameOffset: Int?
    private var expected: UInt64
    private var segments: [SegmentName] = []
    private var current: (name: SegmentName, fd: Int32, scanner: FrameScanner)?
    private var recheckedAfterNewer = false
    private var held: EventRecord?
    private var inotifyFD: Int32 = -1
    private var watching = false

    /// Opens `directory` for reading at `position`. The directory must exist (it may be empty).
    /// With `index` (`EventLogWriter.index`, in the writer's process) the reader takes the list of
    /// segments and the end from it and seeks to its position instead of scanning the segment
    /// from its start: what it reads is the same.
    public init(
        directory: String, position: EventLogPosition = .start, filter: EventFilter = EventFilter(), index: EventLogIndex? = nil
    ) throws {
        guard !directory.isEmpty else { throw EventLogError.invalidArgument("event log directory path is empty") }
        self.directory = directory
        self.filter = filter
        self.index = index
        var st = stat()
        guard stat(directory, &st) == 0 else { throw EventLogError.failed(operation: "stat", path: directory, errno: errno) }
        guard st.st_mode & S_IFMT == S_IFDIR else {
            throw EventLogError.failed(operation: "open", path: directory, errno: ENOTDIR)
        }
        // Watch before the first read, so nothing written after that read can be missed. A reader
        // in the writer's process (the daemon's, for one request) watches only once it waits:
        // setting up and closing a watch costs milliseconds.
        if index == nil {
            watching = true
            inotifyFD = Self.watch(directory)
        }
        switch position {
        case .start: expected = 1
        case .from(let n): expected = max(1, n)
        case .after(let n): expected = n == UInt64.max ? n : n + 1
        case .end: expected = try index?.bounds.nextSeq ?? EventLogReader.bounds(directory: directory).nextSeq
        }
        cursor = expected - 1
    }

    deinit {
        if let c = current { Sys.close(c.fd) }
        if inotifyFD >= 0 { Sys.close(inotifyFD) }
    }

    /// An inotify descriptor watching `directory`, or -1 where there is none.
    private static func watch(_ directory: String) -> Int32 {
        let fd = inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC))
        guard fd >= 0 else { return -1 }
        let mask = UInt32(IN_MODIFY | IN_CREATE | IN_MOVED_TO | IN_DELETE | IN_CLOSE_WRITE)
        if inotify_add_watch(fd, directory, mask) < 0 {
            Sys.close(fd)
            return -1
        }
        return fd
    }

    /// What a log directory holds right now.
    public struct Bounds: Sendable, Equatable {
        /// The first seq still stored (nil when the log is empty).
        public var oldestSeq: UInt64?
        /// The seq the next record will get (1 for an empty log).
        public var nextSeq: UInt64
        public var segments: Int
        public var bytes: UInt64

        public init(oldestSeq: UInt64?, nextSeq: UInt64, segments: Int, bytes: UInt64) {
            self.oldestSeq = oldestSeq
            self.nextSeq = nextSeq
            self.segments = segments
            self.bytes = bytes
        }
    }

    /// Scans the segment list and the tail of the newest segment.
    public static func bounds(directory: String) throws -> Bounds {
        let names = try SegmentName.list(directory: directory)
        var bytes: UInt64 = 0
        for n in names {
            var st = stat()
            if stat(directory + "/" + n.fileName, &st) == 0 { bytes += UInt64(st.st_size) }
        }
        guard let last = names.last else { return Bounds(oldestSeq: nil, nextSeq: 1, segments: 0, bytes: 0) }
        let path = directory + "/" + last.fileName
        let fd = try Sys.open(path, O_RDONLY)
        defer { Sys.close(fd) }
        try last.validateHeader(fd: fd, path: path)
        var scanner = FrameScanner(fd: fd, path: path)
        var next = last.firstSeq
        scan: while true {
            switch try scanner.next() {
            case .frame(let payload):
                next = scanner.buffer.withUnsafeBytes {
                    RecordCodec.peekSeq(UnsafeRawBufferPointer(rebasing: $0[payload]))
                } + 1
                scanner.advance()
            case .end, .damaged: break scan
            }
        }
        return Bounds(oldestSeq: names[0].firstSeq, nextSeq: next, segments: names.count, bytes: bytes)
    }

    /// The next record matching the filter, or nil when everything stored has been read.
    public func next() throws -> EventRecord? {
        while true {
            let r: EventRecord
            if let h = held {
                held = nil
                r = h
            } else {
                guard let stored = try nextStored() else { return nil }
                // A gap record stands in for gapFrom...seq; anything before that is missing.
                let start = stored.gapRange?.lowerBound ?? stored.seq
                if start > expected {
                    held = stored
                    let gap = synthesizedGap(expected...(start - 1))
                    expected = start
                    cursor = start - 1
                    return gap
                }
                r = stored
            }
            expected = r.seq &+ 1
            cursor = r.seq
            if filter.matches(r) { return r }
        }
    }

    /// Up to `limit` matching records; fewer (possibly none) when caught up.
    public func read(limit: Int) throws -> [EventRecord] {
        var out: [EventRecord] = []
        while out.count < limit, let r = try next() { out.append(r) }
        return out
    }

    /// Blocks until the log directory changes (a write, a new or deleted segment) or `timeout`
    /// passes. Uses inotify; falls back to sleeping a few milliseconds where it is unavailable.
    /// Returns false on timeout. A reader opened with an index starts watching at its first call,
    /// which returns at once.
    @discardableResult
    public func waitForChanges(timeout: Duration) -> Bool { waitForChanges(timeout: timeout, orReadable: []) }

    /// `waitForChanges(timeout:)` that also returns as soon as one of `others` is readable (a
    /// descriptor another thread makes readable to wake this one: an eventfd), so a follower may
    /// sleep for long and still end or react at once. Without inotify it sleeps a few
    /// milliseconds, as `waitForChanges(timeout:)`.
    @discardableResult
    public func waitForChanges(timeout: Duration, orReadable others: [Int32]) -> Bool {
        if !watching {
            // Not watched before (a reader with an index): watch from now, and have the caller
            // read again, since something may have been written since its last read.
            watching = true
            inotifyFD = Self.watch(directory)
            return true
        }
        let ms = Int32(clamping: Int64(timeout.nanoseconds / 1_000_000))
        guard inotifyFD >= 0 else {
            usleep(UInt32(min(max(ms, 0), 5)) * 1000)
            return true
        }
        var fds = [pollfd(fd: inotifyFD, events: Int16(POLLIN), revents: 0)] + others.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
        let rc = poll(&fds, nfds_t(fds.count), ms)
        guard rc > 0 else { return false }
        guard fds[0].revents != 0 else { return true }
        // Drain the queued events; their content does not matter, only that something changed.
        var buf = [UInt8](repeating: 0, count: 4096)
        while buf.withUnsafeMutableBytes({ Glibc.read(inotifyFD, $0.baseAddress!, $0.count) }) > 0 {}
        return true
    }

    /// Calls `body` for every matching record, then keeps tailing the log until `shouldContinue`
    /// returns false (checked after each record and at least every `checkInterval`).
    public func follow(
        checkInterval: Duration = .milliseconds(200), shouldContinue: () -> Bool,
        _ body: (EventRecord) throws -> Void
    ) throws {
        while shouldContinue() {
            while let r = try next() {
                try body(r)
                if !shouldContinue() { return }
            }
            waitForChanges(timeout: checkInterval)
        }
    }

    // MARK: Storage walk

    private func synthesizedGap(_ range: ClosedRange<UInt64>) -> EventRecord {
        let oldest = segments.first?.firstSeq ?? range.upperBound + 1
        let retention = range.lowerBound < oldest && range.upperBound < oldest
        let reason: GapReason = retention ? .retention : .missing
        let message = retention
            ? "cursor older than retention: records \(range.lowerBound)-\(range.upperBound) were deleted"
            : "records \(range.lowerBound)-\(range.upperBound) are missing from storage"
        let time = held?.time ?? EventTime.now()
        return EventRecord(
            seq: range.upperBound, time: time, kind: .gap, path: "/",
            details: EventDetails(
                reason: reason.rawValue, message: message, gapFrom: range.lowerBound, gapTo: range.upperBound))
    }

    private func refreshSegments() throws { segments = try index?.segmentNames ?? SegmentName.list(directory: directory) }

    /// Takes one frame (or segment opening) off `frameBudget`; false when none was left.
    private func spend() -> Bool {
        guard let left = frameBudget else { return true }
        guard left > 0 else { return false }
        frameBudget = left - 1
        return true
    }

    private func open(_ name: SegmentName) throws -> Bool {
        let path = directory + "/" + name.fileName
        let fd = Glibc.open(path, O_RDONLY | O_CLOEXEC)
        if fd < 0 {
            if errno == ENOENT { return false }  // deleted by retention meanwhile
            throw EventLogError.failed(operation: "open", path: path, errno: errno)
        }
        // A reader keeps its segment open between reads: in the daemon, for a client (`readLog`),
        // never at a number the daemon keeps for its own files (`DescriptorReserve`).
        guard DescriptorReserve.admits(fd) else {
            Sys.close(fd)
            throw EventLogError.failed(operation: "open (\(DescriptorReserve.refusal(for: "a log reader's segment")))", path: path, errno: ENFILE)
        }
        do {
            try name.validateHeader(fd: fd, path: path)
        } catch {
            Sys.close(fd)
            throw error
        }
        if let c = current { Sys.close(c.fd) }
        // Seek: the last indexed frame at or before the record wanted (one is a frame boundary).
        let start = index?.entry(atOrBefore: expected, in: name)?.offset ?? SegmentName.headerSize
        current = (name, fd, FrameScanner(fd: fd, path: path, offset: start))
        previousFrameOffset = nil
        recheckedAfterNewer = false
        return true
    }

    /// The next stored record with `seq >= expected` (a gap record counts if it ends there).
    private func nextStored() throws -> EventRecord? {
        while true {
            guard spend() else { return nil }
            if current == nil {
                try refreshSegments()
                guard !segments.isEmpty else { return nil }
                let index = segments.lastIndex(where: { $0.firstSeq <= expected }) ?? 0
                if try !open(segments[index]) { continue }
            }
            let step = try current!.scanner.next()
            switch step {
            case .frame(let payload):
                recheckedAfterNewer = false
                framesRead += 1
                let (seq, record): (UInt64, EventRecord?) = try current!.scanner.buffer.withUnsafeBytes {
                    let p = UnsafeRawBufferPointer(rebasing: $0[payload])
                    let seq = RecordCodec.peekSeq(p)
                    if seq < expected { return (seq, nil) }
                    return (seq, try RecordCodec.decode(p))
                }
                if let index {
                    // Passing through a segment the index lacks (a previous writer's) fills it in.
                    let offset = current!.scanner.offset
                    if EventLogIndex.isEntry(offset: offset, previous: previousFrameOffset) {
                        index.note(.init(seq: seq, offset: offset), in: current!.name)
                    }
                    previousFrameOffset = offset
                }
                current!.scanner.advance()
                if let record { return record }
            case .end, .damaged:
                // Move on only once a newer segment exists: the writer finished this one before
                // creating it. Look once more after seeing it, in case the last batch landed in
                // between; what is still unreadable then is damage, reported as a gap.
                try refreshSegments()
                guard let newer = segments.first(where: { $0.firstSeq > current!.name.firstSeq }) else {
                    return nil
                }
                if !recheckedAfterNewer {
                    recheckedAfterNewer = true
                    continue
                }
                if try !open(newer) {
                    Sys.close(current!.fd)
                    current = nil
                }
            }
        }
    }
}
