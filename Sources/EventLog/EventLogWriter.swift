import Glibc
import Linux
import Synchronization

/// The durable, sequenced event log of one mount: cheap appends from any thread, written to an
/// append-only, segmented, checksummed file format by a background thread.
///
/// Durability policy (docs/event-log.md): `append` assigns the sequence number and queues the
/// record without touching the disk; the writer thread wakes at once and writes everything queued
/// in one batch, so a record reaches the file (the page cache) within a few milliseconds and
/// survives a SIGKILL or crash of the daemon from then on. `writtenSeq` tells how far that is;
/// `flush()` waits for it. With `EventLogOptions.SyncPolicy.everyBatch` every batch is also
/// `fdatasync`ed, which survives a power loss. Nothing is dropped silently: if the queue
/// overflows (the disk stalls), the dropped range becomes one `gap` record.
///
/// One writer per log directory (an exclusive `flock` on `writer.lock`); any number of
/// `EventLogReader`s, in any process, may read the directory at the same time.
public final class EventLogWriter: Sendable {
    /// What opening found and repaired at the tail of the log.
    public struct Recovery: Sendable, Equatable {
        /// The segment whose tail was cut.
        public var segment: String
        /// Bytes of torn or damaged frames removed.
        public var bytesTruncated: Int
        /// The last intact record's seq (the sequence continues after it).
        public var lastSeq: UInt64
    }

    /// Counters since the writer was opened.
    public struct Statistics: Sendable, Equatable {
        public var appended: UInt64 = 0
        /// Records in the file (the page cache), gap records included.
        public var written: UInt64 = 0
        /// Records dropped under memory pressure (each range is covered by a gap record).
        public var dropped: UInt64 = 0
        public var batches: UInt64 = 0
        public var bytesWritten: UInt64 = 0
        public var segmentsCreated: UInt64 = 0
        public var segmentsDeleted: UInt64 = 0
        /// Failed write attempts (retried; see `lastError`).
        public var writeErrors: UInt64 = 0
    }

    /// The log directory on the backing filesystem.
    public let directory: String
    public let options: EventLogOptions
    /// Non-nil when opening cut a torn tail (a crash mid-write); a `logRecovered` record is the
    /// first record appended after it.
    public let recovery: Recovery?
    /// The previous writer's state when it did not close the log (it was killed, or the machine
    /// went down): also said by the first record, `logRecovered` with reason `uncleanShutdown`.
    public let previousWriter: EventLogWriterState?

    /// The one `logRecovered` record that says what opening found: a torn tail cut, a previous
    /// writer that ended without closing (and whether it was stuck then). Nil when neither.
    static func recoveryRecord(tornTail r: Recovery?, previous: EventLogWriterState?, nextSeq: UInt64) -> EventRecord? {
        guard r != nil || previous != nil else { return nil }
        var parts: [String] = []
        // The segment by its name in the log's folder: the daemon opens the log through a held
        // descriptor (`/proc/self/fd/N/log`), a path that means nothing to whoever reads this.
        if let r {
            let name = r.segment.split(separator: "/").last.map(String.init) ?? r.segment
            parts.append("cut \(r.bytesTruncated) bytes of unfinished records after seq \(r.lastSeq) at the end of \(name)")
        }
        if let p = previous {
            var s = "the previous writer (pid \(p.pid)) ended without closing the log"
            if p.phase == .stuck {
                s += ", stuck"
                if let since = p.since { s += " since \(since.iso8601)" }
                if let e = p.error { s += " (\(e))" }
                if let w = p.waiting { s += " with \(w) record(s) waiting" }
            }
            s += ": records it held in memory, never in the log and never shown, are lost; the log continues at seq \(nextSeq)"
            parts.append(s)
        }
        return EventRecord(
            kind: .logRecovered, path: "/",
            details: EventDetails(bytes: r.map { UInt64($0.bytesTruncated) }, reason: r != nil ? "tornTail" : "uncleanShutdown",
                                  message: parts.joined(separator: "; ")))
    }

    /// What the writer tells its owner (the daemon writes it to its log): a write failed and the
    /// writer is stuck retrying, or it writes again.
    public enum Notice: Sendable, Equatable {
        /// Writing failed with `error` (and is retried every 100 ms, nothing dropped until the queue
        /// bound): `waiting` records are in memory only.
        case stuck(since: EventTime, error: EventLogError, waiting: Int)
        /// Writing again after being stuck since `since`: every record that waited is in the log,
        /// followed by a `logStalled` record saying so.
        case writingAgain(since: EventTime, error: EventLogError, firstWaitingSeq: UInt64)
    }

    /// Installs (or removes) the receiver of `Notice`s; called on the writer thread.
    public func setNoticeHandler(_ handler: (@Sendable (Notice) -> Void)?) { core.setNoticeHandler(handler) }

    /// Since when writes fail, or nil while they succeed.
    public var stuckSince: EventTime? { core.stuckSince }

    /// Tests only: `hook` runs on the writer thread after a write failed, before the failure counts.
    func setAfterFailedWrite(_ hook: (@Sendable () -> Void)?) { core.setAfterFailedWrite(hook) }
    /// Tests only: a flush waits.
    var flushWaiting: Bool { core.flushWaiting }
    private let core: WriterCore

    /// Opens the log in `directory` (created if missing, one level), recovers a torn tail, and
    /// starts the writer thread. Throws `EventLogError.locked` if another writer has it open.
    public init(directory: String, options: EventLogOptions = EventLogOptions()) throws {
        try options.validate()
        let store = try SegmentStore(directory: directory, options: options)
        self.directory = directory
        self.options = options
        recovery = store.recovery
        previousWriter = store.previousState.flatMap { $0.phase == .closed ? nil : $0 }
        core = WriterCore(store: store, options: options)
        if let record = Self.recoveryRecord(tornTail: store.recovery, previous: previousWriter, nextSeq: store.nextSeq) {
            _ = core.append(record)
        }
        try core.start()
    }

    deinit { try? core.close() }

    /// Appends one record and returns its sequence number. Never blocks on disk I/O: it takes a
    /// short lock, assigns the next seq and the current time, and queues the record. Returns 0
    /// once `close()` has begun (the log is shutting down and the record is not kept).
    @discardableResult
    public func append(
        _ kind: EventKind, path: consuming String, oldPath: consuming String? = nil, documentID: consuming String? = nil,
        actor: consuming EventActor? = nil, details: consuming EventDetails = EventDetails()
    ) -> UInt64 {
        core.append(EventRecord(
            kind: kind, path: path, oldPath: oldPath, documentID: documentID, actor: actor, details: details))
    }

    /// Appends `record`; its `seq` and `time` are replaced by the writer's.
    @discardableResult
    public func append(_ record: consuming EventRecord) -> UInt64 { core.append(record) }

    /// Appends `record` as having happened at `time` (a caller that formats records later than the
    /// step they describe). The seq is the writer's; times still never go backwards in the log.
    @discardableResult
    public func append(_ record: consuming EventRecord, at time: EventTime) -> UInt64 { core.append(record, at: time) }

    /// Appends `records`, each as having happened at its `time`, in order and under one lock (a
    /// source's batch), encoding them there, and leaves `records` empty with its capacity kept. Seqs
    /// are the writer's; times still never go backwards.
    public func append(contentsOf records: inout [EventRecord]) { core.append(contentsOf: &records) }

    /// Appends records whose fields are already encoded, each as having happened at its time, in
    /// order and under one lock, and leaves `records` empty with its buffers kept. The lock is held
    /// only to give each record its seq and time and copy its bytes into the queue.
    package func append(encoded records: inout EncodedRecords) { core.append(encoded: &records) }

    /// Installs (or removes, with nil) a source of records: the writer thread calls `pull` after
    /// `sourceHasRecords()`, once the coalescing delay has let a batch build up, and also when an
    /// idle writer wakes for its retention check (`retentionCheckInterval`; no wake-up of its own),
    /// so a source may write what it holds back until a time; `pull` appends
    /// what it has (formatting records there keeps that work off the appenders' threads).
    public func setSource(_ pull: (@Sendable () -> Void)?) { core.setSource(pull) }

    /// Tells the writer that its source has records for it (wakes the writer if it sleeps).
    public func sourceHasRecords() { core.sourceHasRecords() }

    /// Waits until every record appended before the call is in the file. Throws the write error
    /// if the disk refused them (the writer keeps retrying in the background): the error of a write
    /// begun after the call, never that of an attempt already under way, so a caller that made room
    /// and then flushes sees the writer try again.
    public func flush() throws { try core.flush() }

    /// Flushes, stops the writer thread and releases the directory. Further appends return 0.
    /// Throws if records could not be written.
    public func close() throws { try core.close() }

    /// Applies the retention limits now (normally done after each segment rotation and every
    /// `retentionCheckInterval`) and waits for it.
    public func enforceRetention() throws { try core.enforceRetention() }

    /// The highest seq assigned so far (0 before the first append).
    public var lastAssignedSeq: UInt64 { core.lastAssignedSeq }
    /// The log's segments, its bounds and where its records are, for readers in this process
    /// (`EventLogReader(directory:position:filter:index:)`): a reader given it seeks, and needs
    /// no scan for the bounds.
    public var index: EventLogIndex { core.index }
    /// Every record with a seq up to this is in the file (page cache) or covered by a gap record.
    public var writtenSeq: UInt64 { core.writtenSeq }
    /// The most recent write error, if the writer has had one.
    public var lastError: EventLogError? { core.lastError }
    public var statistics: Statistics { core.statistics }
}

/// The shared state of a writer, retained by its thread (so the public object can be released
/// and close the log from `deinit`).
private final class WriterCore: @unchecked Sendable {
    /// A batch this large is written at once, without waiting out the coalescing delay.
    static let coalescingCutoff = 8192
    /// After a batch, the writer looks for more this many times, a coalescing delay apart, before it
    /// goes idle (and producers must wake it). During a burst no FUSE thread makes a futex call for
    /// the log: measured, a wake-up per millisecond of a metadata workload otherwise.
    static let lingerRounds = 10

    private enum Condition {
        static let work = 0
        static let progress = 1
    }

    // Guarded by `sync`. The ones every append touches skip the run-time exclusivity check (a
    // lookup in a per-thread table at each access, measured at 120 instructions a record): the
    // lock already keeps their accesses apart.
    private let sync = ConditionLock(conditions: 2)
    /// Encoded on append (`FrameQueue`), so the writer thread only writes.
    @exclusivity(unchecked) private var queue = FrameQueue()
    @exclusivity(unchecked) private var nextSeq: UInt64
    @exclusivity(unchecked) private var lastTime = EventTime(millisecondsSinceEpoch: 0)
    @exclusivity(unchecked) private var pendingDrop: ClosedRange<UInt64>?
    /// The writer waits for work. Written under `sync`; read without it by `sourceHasRecords`.
    private let writerIdle = Atomic<Bool>(false)
    /// The writer is letting a batch build up (`EventLogOptions.coalescing`).
    private var writerCoalescing = false
    private var flushWaiters = 0
    private var source: (@Sendable () -> Void)?
    /// The source has records the writer has not pulled. Set without `sync` (`sourceHasRecords`,
    /// on FUSE threads: no lock on their path while the writer works), cleared under it.
    private let sourcePending = Atomic<Bool>(false)
    private var closing = false
    private var finished = false
    private var written: UInt64
    private var error: EventLogError?
    /// Write attempts begun (counted under `sync` as the writer takes what to write), and the one
    /// whose failure `error` is: a flush throws only the error of an attempt begun after it.
    private var attemptsBegun: UInt64 = 0
    private var errorAttempt: UInt64 = 0
    /// Tests only: called on the writer thread after a write failed, before the failure is recorded.
    private var afterFailedWrite: (@Sendable () -> Void)?
    private var unwrittenAtClose = 0
    private var retentionRequests: UInt64 = 0
    private var retentionRuns: UInt64 = 0
    @exclusivity(unchecked) private var stats = EventLogWriter.Statistics()
    /// Since when writes fail (nil while they succeed), the error, and the first seq that waited.
    private var stuck: (since: EventTime, error: EventLogError, firstSeq: UInt64)?
    private var notice: (@Sendable (EventLogWriter.Notice) -> Void)?

    // Writer thread only (after `start`).
    private let store: SegmentStore
    private let options: EventLogOptions
    private var thread: pthread_t?

    init(store: SegmentStore, options: EventLogOptions) {
        self.store = store
        self.options = options
        nextSeq = store.nextSeq
        written = store.nextSeq - 1
    }

    func start() throws {
        var tid = pthread_t()
        let box = Unmanaged.passRetained(self)
        let rc = pthread_create(&tid, nil, { raw in
            let core = Unmanaged<WriterCore>.fromOpaque(raw!).takeRetainedValue()
            core.run()
            return nil
        }, box.toOpaque())
        guard rc == 0 else {
            box.release()
            store.close()
            sync.withLock { finished = true }
            throw EventLogError.failed(operation: "pthread_create", path: store.directory, errno: rc)
        }
        thread = tid
    }

    func append(_ r: consuming EventRecord, at time: EventTime? = nil) -> UInt64 {
        let now = time ?? EventTime.now()
        sync.lock()
        defer { sync.unlock() }
        if closing { return 0 }
        var r = r
        let seq = enqueue(&r, at: now)
        wakeWriterIfWanted()
        return seq
    }

    /// Appends `records` in order under one lock (a source's batch: the lock is taken once, not once
    /// per record, so appending threads rarely meet the writer on it).
    func append(contentsOf records: inout [EventRecord]) {
        guard !records.isEmpty else { return }
        sync.lock()
        defer { sync.unlock() }
        if !closing {
            for i in records.indices { _ = enqueue(&records[i], at: records[i].time) }
            wakeWriterIfWanted()
        }
        records.removeAll(keepingCapacity: true)
    }

    func append(encoded records: inout EncodedRecords) {
        guard !records.isEmpty else { return }
        sync.lock()
        defer { sync.unlock() }
        if !closing {
            records.forEach { kind, time, fields in
                let (seq, time, fits) = admit(at: time)
                if fits { queue.append(kind: kind, seq: seq, time: time, fields: fields) }
            }
            wakeWriterIfWanted()
        }
        records.removeAll()
    }

    /// Gives `r` the next seq and its time and queues its frame (or counts it dropped past the
    /// queue's bound). Under `sync`.
    private func enqueue(_ r: inout EventRecord, at now: EventTime) -> UInt64 {
        let fits: Bool
        (r.seq, r.time, fits) = admit(at: now)
        if fits { queue.append(r) }
        return r.seq
    }

    /// The next seq and the record's time (never before the previous record's), and whether its frame
    /// fits the queue; if not, it is counted dropped, to be covered by a gap record. Under `sync`.
    private func admit(at now: EventTime) -> (seq: UInt64, time: EventTime, fits: Bool) {
        let seq = nextSeq
        nextSeq += 1
        // Times never go backwards within one log, even if the wall clock does.
        let time = now < lastTime ? lastTime : now
        lastTime = time
        stats.appended += 1
        if queue.count >= options.maxQueuedRecords {
            pendingDrop = (pendingDrop?.lowerBound ?? seq)...seq
            stats.dropped += 1
            return (seq, time, false)
        }
        return (seq, time, true)
    }

    /// Wakes an idle writer, or a coalescing one once the batch is big enough. Under `sync`.
    private func wakeWriterIfWanted() {
        if writerIdle.load(ordering: .relaxed) || (writerCoalescing && queue.count >= WriterCore.coalescingCutoff) {
            writerIdle.store(false, ordering: .relaxed)
            writerCoalescing = false
            sync.signal(Condition.work)
        }
    }

    func setSource(_ pull: (@Sendable () -> Void)?) {
        sync.withLock {
            source = pull
            if pull == nil { sourcePending.store(false, ordering: .sequentiallyConsistent) }
        }
    }

    /// Called by the source's producers (FUSE threads) when records became available. Takes the lock
    /// only to wake an idle writer: the flag is published first and `writerIdle` read after it, while
    /// the writer publishes `writerIdle` before it reads the flag (both sequentially consistent), so
    /// either the writer sees the flag and does not sleep, or this sees it idle and wakes it.
    func sourceHasRecords() {
        if sourcePending.exchange(true, ordering: .sequentiallyConsistent) { return } // said already
        guard writerIdle.load(ordering: .sequentiallyConsistent) else { return }
        sync.lock()
        if writerIdle.load(ordering: .relaxed) {
            writerIdle.store(false, ordering: .relaxed)
            sync.signal(Condition.work)
        }
        sync.unlock()
    }

    func setNoticeHandler(_ handler: (@Sendable (EventLogWriter.Notice) -> Void)?) { sync.withLock { notice = handler } }
    func setAfterFailedWrite(_ hook: (@Sendable () -> Void)?) { sync.withLock { afterFailedWrite = hook } }
    var flushWaiting: Bool { sync.withLock { flushWaiters > 0 } }
    var stuckSince: EventTime? { sync.withLock { stuck?.since } }

    var lastAssignedSeq: UInt64 { sync.withLock { nextSeq - 1 } }
    var index: EventLogIndex { store.index }
    var writtenSeq: UInt64 { sync.withLock { written } }
    var lastError: EventLogError? { sync.withLock { error } }
    var statistics: EventLogWriter.Statistics { sync.withLock { stats } }

    func flush() throws {
        sync.lock()
        defer { sync.unlock() }
        let target = nextSeq - 1
        // An attempt under way now may fail for a reason the caller has just removed (a disk it
        // made room on): only the attempts after this one answer the flush.
        let attemptsBefore = attemptsBegun
        flushWaiters += 1
        defer { flushWaiters -= 1 }
        // Wake the writer whether idle or coalescing: a flush should not wait out the delay.
        sync.signal(Condition.work)
        while written < target {
            if errorAttempt > attemptsBefore, let e = error { throw e }
            if finished { throw EventLogError.closed }
            sync.wait(Condition.progress)
        }
    }

    func enforceRetention() throws {
        sync.lock()
        defer { sync.unlock() }
        guard !finished && !closing else { throw EventLogError.closed }
        retentionRequests += 1
        let ticket = retentionRequests
        writerIdle.store(false, ordering: .relaxed)
        sync.signal(Condition.work)
        while retentionRuns < ticket && !finished { sync.wait(Condition.progress) }
    }

    func close() throws {
        sync.lock()
        let alreadyClosing = closing
        closing = true
        writerIdle.store(false, ordering: .relaxed)
        sync.signal(Condition.work)
        let tid = thread
        thread = nil
        sync.unlock()
        if !alreadyClosing, let tid { pthread_join(tid, nil) }
        sync.lock()
        while !finished { sync.wait(Condition.progress) }
        let lost = unwrittenAtClose
        let e = error
        sync.unlock()
        if lost > 0, let e { throw e }
    }

    // MARK: Writer thread

    private func gapRecord(for range: ClosedRange<UInt64>) -> EventRecord {
        EventRecord(
            seq: range.upperBound, time: lastTime, kind: .gap, path: "/",
            details: EventDetails(
                reason: GapReason.dropped.rawValue,
                message: "\(range.count) records dropped: the writer queue was full (disk stalled?)",
                gapFrom: range.lowerBound, gapTo: range.upperBound))
    }

    /// The writer thread's name (`top -H`, `perf`, /proc/PID/task/TID/comm): at most 15 bytes.
    static let threadName = "eventlog-writer"

    private func run() {
        nameCurrentThread(WriterCore.threadName)
        if options.writerNiceness > 0 {
            // On Linux the nice value is per thread: who = 0 is the calling thread only.
            _ = setpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0, options.writerNiceness)
        }
        var batch = FrameQueue()
        var stalled = FrameQueue()
        let checksRetention = options.maxAge != nil || options.maxTotalBytes != nil
        let interval = options.retentionCheckInterval.nanoseconds
        let coalescingNanos = options.coalescing.nanoseconds
        var nextRetentionCheck = ConditionLock.monotonicNanos() + interval
        var lastSegmentCount = store.segmentsCreated
        var lingerRounds = 0

        while true {
            sync.lock()
            if !stalled.isEmpty {
                // Back off before retrying a failed write; the queue keeps its bound meanwhile.
                if !closing { _ = sync.wait(Condition.work, untilMonotonicNanos: ConditionLock.monotonicNanos() + 100_000_000) }
            } else {
                var lingered = false
                // The retention check's wake-up of an idle writer: the source is pulled then too,
                // for what it holds back until a time (a user's summary, `UserLogShare`).
                var ticked = false
                while queue.isEmpty && pendingDrop == nil && !closing && retentionRuns == retentionRequests {
                    if lingerRounds > 0 {
                        // Busy lately: look again after the coalescing delay, still not idle, so
                        // producers only set their flag and no FUSE thread makes a wake-up call.
                        lingerRounds -= 1
                        if sourcePending.load(ordering: .sequentiallyConsistent) || flushWaiters > 0 { break }
                        _ = sync.wait(Condition.work, untilMonotonicNanos: ConditionLock.monotonicNanos() + coalescingNanos)
                        lingered = true
                        if sourcePending.load(ordering: .sequentiallyConsistent) { break }
                        continue
                    }
                    // Idle first, then the flag (see `sourceHasRecords`).
                    writerIdle.store(true, ordering: .sequentiallyConsistent)
                    if sourcePending.load(ordering: .sequentiallyConsistent) { break }
                    lingered = false
                    if checksRetention {
                        if !sync.wait(Condition.work, untilMonotonicNanos: nextRetentionCheck) {
                            ticked = true
                            break
                        }
                    } else {
                        sync.wait(Condition.work)
                    }
                }
                writerIdle.store(false, ordering: .relaxed)
                // Let more records join the batch: fewer write() calls per record when busy. A batch
                // found while lingering has had its delay already.
                if coalescingNanos > 0 && !lingered && (!queue.isEmpty || sourcePending.load(ordering: .relaxed)) {
                    let until = ConditionLock.monotonicNanos() + coalescingNanos
                    writerCoalescing = true
                    while !closing && flushWaiters == 0 && queue.count < WriterCore.coalescingCutoff
                        && retentionRuns == retentionRequests
                    {
                        if !sync.wait(Condition.work, untilMonotonicNanos: until) { break }
                    }
                    writerCoalescing = false
                }
                // Cleared even without a source (one said after `setSource(nil)`), or the writer
                // would find it set again each round and never go idle.
                if sourcePending.exchange(false, ordering: .sequentiallyConsistent) || ticked, let pull = source {
                    sync.unlock()
                    pull() // appends (taking this lock) what the source has
                    sync.lock()
                }
                swap(&batch, &queue)
                if let drop = pendingDrop {
                    batch.append(gapRecord(for: drop))
                    pendingDrop = nil
                }
            }
            let stopping = closing
            let retentionTicket = retentionRequests
            attemptsBegun += 1
            let attempt = attemptsBegun
            let failureHook = afterFailedWrite
            sync.unlock()

            var lastWritten: UInt64?
            var writeError: EventLogError?
            if !batch.isEmpty && coalescingNanos > 0 { lingerRounds = WriterCore.lingerRounds }
            // What to write is in `stalled`: the frames a failed write left, or else this batch (the
            // two trade buffers, so both keep their capacity and nothing is copied).
            if stalled.isEmpty { swap(&stalled, &batch) }
            let attempted = stalled.count
            if attempted > 0 {
                let (n, e) = store.write(stalled)
                if n > 0 { lastWritten = stalled.frames[n - 1].seq }
                writeError = e
                if e == nil { stalled.removeAll() } else { stalled = stalled.suffix(from: n) }
                if e != nil { failureHook?() }
            }

            var pruned: SegmentStore.Pruned?
            let now = ConditionLock.monotonicNanos()
            if !stopping && retentionTicket != retentionRuns
                || !stopping && (checksRetention && (store.segmentsCreated != lastSegmentCount || now >= nextRetentionCheck))
            {
                pruned = store.enforceRetention(nowMillis: EventTime.now().millisecondsSinceEpoch)
                lastSegmentCount = store.segmentsCreated
                nextRetentionCheck = now + interval
            }

            sync.lock()
            if let lastWritten {
                written = max(written, lastWritten)
                store.index.setNextSeq(written + 1)
                stats.written += UInt64(attempted - stalled.count)
                stats.batches += 1
            }
            stats.bytesWritten = store.bytesWritten
            stats.segmentsCreated = UInt64(store.segmentsCreated)
            if let writeError {
                error = writeError
                errorAttempt = attempt
                stats.writeErrors += 1
            }
            // Stuck, or writing again: said in writer.lock, to the owner, and once writing again
            // by a logStalled record after the records that waited.
            var told: EventLogWriter.Notice?
            var state: EventLogWriterState?
            var stalledRecord: EventRecord?
            let waiting = stalled.count + queue.count + (pendingDrop?.count ?? 0)
            if let writeError {
                if stuck == nil {
                    let since = EventTime.now()
                    stuck = (since, writeError, stalled.frames.first?.seq ?? nextSeq)
                    told = .stuck(since: since, error: writeError, waiting: waiting)
                }
                if let s = stuck { state = EventLogWriterState(phase: .stuck, since: s.since, error: writeError.description, waiting: waiting) }
            } else if attempted > 0 && stalled.isEmpty, let s = stuck {
                stuck = nil
                told = .writingAgain(since: s.since, error: s.error, firstWaitingSeq: s.firstSeq)
                state = EventLogWriterState(phase: .writing)
                let millis = max(0, EventTime.now().millisecondsSinceEpoch - s.since.millisecondsSinceEpoch)
                stalledRecord = EventRecord(
                    kind: .logStalled, path: "/",
                    details: EventDetails(
                        latencyMicros: UInt64(millis) * 1000, errno: s.error.errno, reason: "writeFailed",
                        message: "the log could not be written from \(s.since.iso8601) for \(Double(millis) / 1000) s (\(s.error)); "
                            + "the records from seq \(s.firstSeq) on waited in memory and are written, none lost"))
            }
            let tell = told.flatMap { t in notice.map { n in { n(t) } } }
            retentionRuns = retentionTicket
            if let pruned { stats.segmentsDeleted += UInt64(pruned.segments) }
            // The writer's own records are queued here, under the lock and before `done` is decided:
            // appended after it (as before), a close() that came meanwhile refused them, so a log
            // closed right after it could write again lost its logStalled record.
            if var stalledRecord { _ = enqueue(&stalledRecord, at: EventTime.now()) }
            if let pruned {
                var record = EventRecord(
                    kind: .retention, path: "/",
                    details: EventDetails(
                        bytes: pruned.bytes, reason: GapReason.retention.rawValue,
                        message: "retention deleted \(pruned.segments) segment(s), records \(pruned.firstSeq)-\(pruned.lastSeq)",
                        gapFrom: pruned.firstSeq, gapTo: pruned.lastSeq))
                _ = enqueue(&record, at: EventTime.now())
            }
            // Closing: stop once everything is written, or after one more failed attempt on a
            // failing disk, counting what could not be written (close() reports it).
            let done = stopping && ((queue.isEmpty && pendingDrop == nil && stalled.isEmpty) || writeError != nil)
            if done {
                unwrittenAtClose = stalled.count + queue.count + (pendingDrop?.count ?? 0)
                finished = true
            }
            sync.broadcast(Condition.progress)
            sync.unlock()

            if let state { store.writeState(state) }
            tell?()
            if done { break }
        }
        // Closed with nothing left unwritten: the next writer finds a clean log. Otherwise
        // writer.lock keeps saying what was lost (the next writer's logRecovered record says it).
        if sync.withLock({ unwrittenAtClose == 0 }) { store.writeState(EventLogWriterState(phase: .closed)) }
        store.close()
    }
}
