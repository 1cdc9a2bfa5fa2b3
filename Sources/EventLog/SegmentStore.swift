import Glibc
import Linux
import LinuxGNU

/// The files of one log directory as the writer sees them: recovery at open, appending framed
/// records with rotation, and retention. Used only by the writer thread (and by the opening
/// thread before that thread starts), so it needs no lock.
final class SegmentStore {
    struct Info {
        var name: SegmentName
        var size: Int
        /// When the last record was written into it (ms since epoch), for age retention.
        var lastWriteMillis: Int64
    }

    /// What retention removed.
    struct Pruned: Equatable {
        var firstSeq: UInt64
        var lastSeq: UInt64
        var bytes: UInt64
        var segments: Int
    }

    static let lockFileName = "writer.lock"
    static let tempPrefix = ".segment-"
    static let tempSuffix = ".tmp"
    /// Bytes per `write()` at most: large enough to amortise the syscall, small enough to keep the
    /// page-cache copy cache-friendly.
    static let chunkBytes = 512 * 1024

    let directory: String
    let options: EventLogOptions
    private let dirFD: Int32
    private let lockFD: Int32
    private(set) var segments: [Info] = []
    /// The last segment, open for appending; -1 until the first record.
    private var activeFD: Int32 = -1
    private var rotateBeforeNext = false
    private(set) var segmentsCreated = 0
    private(set) var bytesWritten: UInt64 = 0
    /// The first seq the next record must have (continues the stored sequence).
    private(set) var nextSeq: UInt64 = 1
    /// Set when opening cut a torn or damaged tail.
    private(set) var recovery: EventLogWriter.Recovery?
    /// What the previous writer left in `writer.lock` (nil: nothing readable).
    private(set) var previousState: EventLogWriterState?
    /// The segments, the next seq and where records are, for readers in this process.
    let index = EventLogIndex()
    /// Where the last frame written to the active segment starts (nil: none yet), for `index`.
    private var lastFrameOffset: Int?

    /// Opens (creating if needed) the log directory, takes the writer lock and recovers the tail.
    init(directory: String, options: EventLogOptions) throws {
        guard !directory.isEmpty else { throw EventLogError.invalidArgument("event log directory path is empty") }
        self.directory = directory
        self.options = options
        // The log names items of every user: only the writer's user may read it (others read what
        // they may see through the daemon). A log made by an older version is closed up too.
        if mkdir(directory, 0o700) != 0 && errno != EEXIST {
            throw EventLogError.failed(operation: "mkdir", path: directory, errno: errno)
        }
        dirFD = try Sys.open(directory, O_RDONLY | O_DIRECTORY)
        _ = fchmod(dirFD, 0o700)
        for segment in (try? SegmentName.list(directory: directory)) ?? [] {
            _ = fchmodat(dirFD, segment.fileName, 0o600, 0)
        }
        do {
            lockFD = try Sys.openat(dirFD, SegmentStore.lockFileName, O_RDWR | O_CREAT, 0o600,
                                    path: directory + "/" + SegmentStore.lockFileName)
        } catch {
            Sys.close(dirFD)
            throw error
        }
        _ = fchmod(lockFD, 0o600)
        do {
            if let e = sys({ flock(lockFD, LOCK_EX | LOCK_NB) }) {
                if e.rawValue == EWOULDBLOCK { throw EventLogError.locked(path: HeldPath.shown(directory)) }
                throw EventLogError.failed(operation: "flock", path: directory, errno: e.rawValue)
            }
            previousState = EventLogWriterState.read(fd: lockFD)
            writeState(EventLogWriterState(phase: .writing))
            try recover()
        } catch {
            if activeFD >= 0 { Sys.close(activeFD) }
            Sys.close(lockFD)
            Sys.close(dirFD)
            throw error
        }
    }

    deinit { close() }

    private var closed = false

    func close() {
        guard !closed else { return }
        closed = true
        if activeFD >= 0 {
            if options.sync == .everyBatch { _ = fdatasync(activeFD) }
            Sys.close(activeFD)
            activeFD = -1
        }
        Sys.close(lockFD)
        Sys.close(dirFD)
    }

    private func path(_ name: String) -> String { directory + "/" + name }

    /// Rewrites `writer.lock` in place with `state` (best effort: what it says is for people and for
    /// the next writer; the file keeps its size, so this needs no new block on a full disk).
    func writeState(_ state: EventLogWriterState) {
        guard !closed else { return }
        let bytes = state.bytes
        _ = bytes.withUnsafeBytes { pwrite(lockFD, $0.baseAddress!, $0.count, 0) }
    }

    private func recover() throws {
        // A crash between creating a segment and renaming it into place leaves a temp file.
        if let dir = opendir(directory) {
            while let entry = readdir(dir) {
                let name = withUnsafePointer(to: &entry.pointee.d_name) {
                    $0.withMemoryRebound(to: CChar.self, capacity: Int(NAME_MAX) + 1) { String(cString: $0) }
                }
                if name.hasPrefix(SegmentStore.tempPrefix) && name.hasSuffix(SegmentStore.tempSuffix) {
                    _ = unlinkat(dirFD, name, 0)
                }
            }
            closedir(dir)
        }
        for name in try SegmentName.list(directory: directory) {
            var st = stat()
            guard fstatat(dirFD, name.fileName, &st, 0) == 0 else {
                throw EventLogError.failed(operation: "stat", path: path(name.fileName), errno: errno)
            }
            let ms = Int64(st.st_mtim.tv_sec) * 1000 + Int64(st.st_mtim.tv_nsec) / 1_000_000
            segments.append(Info(name: name, size: Int(st.st_size), lastWriteMillis: ms))
            index.add(name)
        }
        defer { index.setNextSeq(nextSeq) }
        guard let last = segments.last else { return }
        let lastPath = path(last.name.fileName)
        let fd = try Sys.openat(dirFD, last.name.fileName, O_RDWR | O_APPEND, path: lastPath)
        activeFD = fd
        let size = try Sys.fileSize(fd, path: lastPath)
        if size < SegmentName.headerSize {
            // Only a power loss after the rename can leave this; the header is ours to rewrite.
            guard ftruncate(fd, 0) == 0 else { throw EventLogError.failed(operation: "truncate", path: lastPath, errno: errno) }
            let header = SegmentName.header(firstSeq: last.name.firstSeq)
            try header.withUnsafeBytes { (p) in try Sys.writeAll(fd, p, path: lastPath) }
            recovery = EventLogWriter.Recovery(segment: lastPath, bytesTruncated: size, lastSeq: last.name.firstSeq - 1)
            segments[segments.count - 1].size = SegmentName.headerSize
            nextSeq = last.name.firstSeq
            return
        }
        try last.name.validateHeader(fd: fd, path: lastPath)
        var scanner = FrameScanner(fd: fd, path: lastPath, bufferSize: 1 << 20)
        var lastSeq: UInt64?
        var entries: [EventLogIndex.Entry] = []
        scan: while true {
            switch try scanner.next() {
            case .frame(let payload):
                let seq = scanner.buffer.withUnsafeBytes {
                    RecordCodec.peekSeq(UnsafeRawBufferPointer(rebasing: $0[payload]))
                }
                // A sequence that goes backwards can only be damage; cut there.
                if let prev = lastSeq, seq <= prev { break scan }
                if lastSeq == nil && seq < last.name.firstSeq { break scan }
                lastSeq = seq
                if EventLogIndex.isEntry(offset: scanner.offset, previous: lastFrameOffset) {
                    entries.append(.init(seq: seq, offset: scanner.offset))
                }
                lastFrameOffset = scanner.offset
                scanner.advance()
            case .end, .damaged:
                break scan
            }
        }
        if scanner.offset < size {
            guard ftruncate(fd, off_t(scanner.offset)) == 0 else {
                throw EventLogError.failed(operation: "truncate", path: lastPath, errno: errno)
            }
            recovery = EventLogWriter.Recovery(
                segment: lastPath, bytesTruncated: size - scanner.offset,
                lastSeq: lastSeq ?? (last.name.firstSeq - 1))
        }
        segments[segments.count - 1].size = scanner.offset
        index.note(entries, in: last.name)
        nextSeq = (lastSeq.map { $0 + 1 }) ?? last.name.firstSeq
        if scanner.offset >= options.segmentBytes { rotateBeforeNext = true }
    }

    /// Starts a new segment whose first record will have `firstSeq`.
    private func startSegment(firstSeq: UInt64) throws {
        let name = SegmentName(firstSeq: firstSeq)
        let temp = SegmentStore.tempPrefix + String(firstSeq) + SegmentStore.tempSuffix
        let fd = try Sys.openat(dirFD, temp, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0o600, path: path(temp))
        do {
            let header = SegmentName.header(firstSeq: firstSeq)
            try header.withUnsafeBytes { (p) in try Sys.writeAll(fd, p, path: path(temp)) }
            if options.sync == .everyBatch && fdatasync(fd) != 0 {
                throw EventLogError.failed(operation: "fdatasync", path: path(temp), errno: errno)
            }
            // Renamed into place with its header written, so readers never see a headerless segment.
            guard renameat(dirFD, temp, dirFD, name.fileName) == 0 else {
                throw EventLogError.failed(operation: "rename", path: path(name.fileName), errno: errno)
            }
        } catch {
            Sys.close(fd)
            _ = unlinkat(dirFD, temp, 0)
            throw error
        }
        if options.sync == .everyBatch { _ = fsync(dirFD) }
        if activeFD >= 0 {
            if options.sync == .everyBatch { _ = fdatasync(activeFD) }
            Sys.close(activeFD)
        }
        activeFD = fd
        segments.append(Info(name: name, size: SegmentName.headerSize, lastWriteMillis: EventTime.now().millisecondsSinceEpoch))
        index.add(name)
        lastFrameOffset = nil
        segmentsCreated += 1
        rotateBeforeNext = false
    }

    /// Appends the frames of `queue` (in seq order). Returns how many were written before an error,
    /// if any; a failed chunk is cut back off the file so the segment never holds a partial frame.
    func write(_ queue: FrameQueue) -> (written: Int, error: EventLogError?) {
        var chunkFrame = 0   // the first frame not yet written
        var chunkByte = 0    // where it starts
        var i = 0

        /// Writes the frames from `chunkFrame` up to (not including) frame `i`. When the file takes
        /// only part of them (a full disk), the whole frames it took stay, and count as written:
        /// a reader may have shown them already, so they are never taken back (the log never shows
        /// a record a crash could take back, nor gives its seq again). Only the partial frame after
        /// them is cut; if even that fails, the next frames go to a fresh segment, and readers
        /// pass the unfinished tail as the end of that segment.
        func flushChunk() -> EventLogError? {
            let end = queue.start(of: i)
            guard end > chunkByte else { return nil }
            let active = segments.count - 1
            let firstFrame = chunkFrame
            let fd = activeFD
            let name = segments[active].name
            let (done, error) = queue.buffer.withUnsafeBytes { b in
                Sys.write(fd, UnsafeRawBufferPointer(rebasing: b[chunkByte..<end]), path: path(name.fileName))
            }
            var kept = done
            if error != nil {
                var whole = chunkFrame
                while whole < i && queue.frames[whole].end - chunkByte <= done { whole += 1 }
                kept = queue.start(of: whole) - chunkByte
                if kept < done && ftruncate(fd, off_t(segments[active].size + kept)) != 0 { rotateBeforeNext = true }
                chunkFrame = whole
            } else {
                chunkFrame = i
            }
            if kept > 0 {
                noteEntries(of: queue, firstFrame..<chunkFrame, at: segments[active].size - chunkByte, in: segments[active].name)
                segments[active].size += kept
                segments[active].lastWriteMillis = EventTime.now().millisecondsSinceEpoch
                bytesWritten += UInt64(kept)
            }
            chunkByte += kept
            if segments[active].size >= options.segmentBytes { rotateBeforeNext = true }
            return error
        }

        while i < queue.count {
            if activeFD < 0 || rotateBeforeNext {
                if let e = flushChunk() { return (chunkFrame, e) }
                do { try startSegment(firstSeq: queue.frames[i].seq) } catch { return (i, EventLogError(error)) }
            }
            let pending = queue.frames[i].end - chunkByte
            i += 1
            if pending >= SegmentStore.chunkBytes || segments[segments.count - 1].size + pending >= options.segmentBytes {
                if let e = flushChunk() { return (chunkFrame, e) }
            }
        }
        if let e = flushChunk() { return (chunkFrame, e) }
        if options.sync == .everyBatch && activeFD >= 0 && fdatasync(activeFD) != 0 {
            // The bytes are in the page cache; report that the power-loss guarantee failed.
            return (queue.count, .failed(operation: "fdatasync", path: directory, errno: errno))
        }
        return (queue.count, nil)
    }

    /// Tells `index` where the whole frames `frames` of `queue` are, written at `base` plus their
    /// offset in the queue.
    private func noteEntries(of queue: FrameQueue, _ frames: Range<Int>, at base: Int, in segment: SegmentName) {
        var entries: [EventLogIndex.Entry] = []
        for j in frames {
            let offset = base + queue.start(of: j)
            if EventLogIndex.isEntry(offset: offset, previous: lastFrameOffset) {
                entries.append(.init(seq: queue.frames[j].seq, offset: offset))
            }
            lastFrameOffset = offset
        }
        index.note(entries, in: segment)
    }

    /// Deletes whole old segments beyond the size or age limit; never the active (last) one.
    func enforceRetention(nowMillis: Int64) -> Pruned? {
        guard options.maxTotalBytes != nil || options.maxAge != nil else { return nil }
        var total = segments.reduce(UInt64(0)) { $0 + UInt64($1.size) }
        let maxAgeMillis = options.maxAge.map { Int64($0.nanoseconds / 1_000_000) }
        var pruned: Pruned?
        while segments.count > 1 {
            let oldest = segments[0]
            let tooBig = options.maxTotalBytes.map { total > $0 } ?? false
            let tooOld = maxAgeMillis.map { nowMillis - oldest.lastWriteMillis > $0 } ?? false
            guard tooBig || tooOld else { break }
            if unlinkat(dirFD, oldest.name.fileName, 0) != 0 && errno != ENOENT { break }
            segments.removeFirst()
            index.remove(oldest.name)
            total -= UInt64(oldest.size)
            let last = segments[0].name.firstSeq - 1
            if pruned == nil {
                pruned = Pruned(firstSeq: oldest.name.firstSeq, lastSeq: last, bytes: 0, segments: 0)
            }
            pruned!.lastSeq = last
            pruned!.bytes += UInt64(oldest.size)
            pruned!.segments += 1
        }
        return pruned
    }

    var totalBytes: UInt64 { segments.reduce(0) { $0 + UInt64($1.size) } }
}
