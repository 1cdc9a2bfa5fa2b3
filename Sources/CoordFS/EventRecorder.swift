import Coordination
import EventLog
import Synchronization

/// Turns the coordinator's typed events into event-log records, and is the one way the daemon's
/// records reach the log (the store's and the mount's own go through `append`), so they keep the
/// order they happened in.
///
/// The coordinator calls `record` under its lock, on the thread of the operation (a FUSE worker):
/// that call only queues the event, with the monotonic time the coordinator gave it. Formatting
/// happens later, in batches: between requests on the worker that holds /dev/fuse (`help`), or on
/// the log writer's thread. So logging costs an operation one short lock and an array append.
/// `RecordFormatter` does the formatting.
package final class EventRecorder: CoordinationEventSink, @unchecked Sendable {
    let log: EventLogWriter
    /// Steps not yet formatted, in order.
    private let backlog = Mutex(Backlog())
    /// Formats; held while formatting, so records keep the backlog's order.
    private let formatter = Mutex(RecordFormatter())
    /// Past this many unformatted steps the caller formats them itself (the log writer's own
    /// queue bound, with gap records, applies after that).
    static let backlogLimit = 65_536

    package init(log: EventLogWriter, share: UserLogShare? = nil) {
        self.log = log
        if let share, !share.isOff { formatter.withLock { $0.share = share } }
        log.setSource { [weak self] in self?.drain() }
    }

    /// Ends the hand-over to the log writer (after a last `drain`).
    func detach() {
        drain()
        // What is gathered for users over their share is said before the log closes.
        formatter.withLock { f in
            f.emitDueSummaries(force: true)
            log.append(encoded: &f.formatted)
        }
        log.setSource(nil)
    }

    package func record(_ event: CoordinationEvent) { enqueue(.event(event)) }

    /// Each user's share of the log now (`-o log_user_share`): the users whose records are
    /// summarised, the share in bytes, and the records summarised since the mount; nil when off.
    package var shareState: (users: [UserLogShare.Summarised], limitBytes: UInt64, summarisedRecords: UInt64)? {
        formatter.withLock { f in
            f.share.map { (users: $0.summarisedUsers, limitBytes: $0.limitBytes, summarisedRecords: $0.summarisedRecords) }
        }
    }

    /// Appends a record of the daemon's own (mount, unmount, the store's), in order with the rest.
    func append(
        _ kind: EventKind, path: String, oldPath: String? = nil, documentID: String? = nil,
        actor: EventActor? = nil, details: EventDetails = EventDetails()
    ) {
        let record = EventRecord(kind: kind, path: path, oldPath: oldPath, documentID: documentID, actor: actor, details: details)
        enqueue(.record(record, at: CoordinationEvent.now()))
    }

    /// Formats everything queued so far and hands it to the log writer. The writer thread calls this
    /// (after its coalescing delay); `flush` and a full backlog call it on their own thread.
    func drain() {
        formatter.withLock { drainFormatting(&$0) }
    }

    /// Formats the oldest few steps queued (`helpSlice`), if only a few are queued and no one else is
    /// formatting; never waits. Returns whether more are queued for it. The FUSE worker that holds
    /// /dev/fuse calls this while it polls the empty device between requests
    /// (`FuseSession.setIdleWork`), on a core that would otherwise only poll: the records of the
    /// requests it just served are formatted and encoded there, and the log writer's thread is left
    /// only the write(2).
    package func help() -> Bool {
        let queued = backlog.withLock { $0.count }
        if queued == 0 || queued > Self.helpLimit { return false }
        return formatter.withLockIfAvailable { f -> Bool in
            // Each step is taken out of the backlog and formatted where it lands (a step is moved,
            // never copied: copying one retains its arrays and strings).
            let offset = RecordFormatter.wallMinusMonotonicNanos()
            var more = false
            var taken = 0
            while taken < Self.helpSlice, let step = backlog.withLock({ b -> PendingStep? in
                more = b.count > 1
                return b.popFirst()
            }) {
                f.format(consume step, offset: offset)
                taken += 1
            }
            helped.add(taken, ordering: .relaxed)
            f.emitDueSummaries()
            log.append(encoded: &f.formatted)
            f.settleShare(log)
            return more
        } ?? false
    }

    /// Steps formatted by `help` so far (tests, benchmarks).
    package let helped = Atomic<Int>(0)

    /// Past this many steps queued, `help` leaves them to the writer thread (a burst, or a writer
    /// that fell behind).
    static let helpLimit = 32
    /// Steps per `help` call: one slice, well under the time a request waits for it.
    static let helpSlice = 2

    /// Formats the whole backlog and appends the records to the log, a batch under one lock on it.
    /// Under `formatter`.
    private func drainFormatting(_ f: inout RecordFormatter) {
        // The backlog trades rings with the formatter's spare one, so both keep their capacity
        // (a fresh ring would grow again, its steps moved, while steps queue during the batch).
        var batch = Backlog()
        swap(&batch, &f.spareSteps)
        defer { swap(&batch, &f.spareSteps) }
        while true {
            backlog.withLock { b in swap(&batch, &b) }
            if batch.count == 0 {
                // Nothing queued (the writer's retention check pulls an idle recorder too): the
                // summaries of users over their share that went quiet, once due.
                f.emitDueSummaries()
                if !f.formatted.isEmpty {
                    log.append(encoded: &f.formatted)
                    f.settleShare(log)
                }
                return
            }
            f.format(&batch)
            log.append(encoded: &f.formatted)
            f.settleShare(log)
            // Keep the buffers, but give back the memory of a rare huge burst.
            batch.shrinkIfLarge()
        }
    }

    /// Waits until everything queued so far is in the log file.
    package func flush() throws {
        drain()
        try log.flush()
    }

    private func enqueue(_ step: consuming PendingStep) {
        var step: PendingStep? = consume step
        let count = backlog.withLock { b -> Int in
            b.append(step.take()!)
            return b.count
        }
        if count == 1 { log.sourceHasRecords() }
        if count >= Self.backlogLimit { drain() }
    }
}

/// Steps in order, as `EventRecorder` queues them: a ring, so that taking the oldest few neither
/// copies a step (its arrays and strings retained and released again: each is moved out with
/// `Optional.take`) nor shifts the ones behind it, and the slots are used again.
struct Backlog {
    /// The ring: `count` steps from `head` on, wrapping; the other slots are nil. Its size is 0 or
    /// a power of two.
    private var slots: [PendingStep?] = []
    private var head = 0
    private(set) var count = 0

    init() {}

    init(_ steps: [PendingStep]) {
        for s in steps { append(s) }
    }

    mutating func append(_ step: consuming PendingStep) {
        if count == slots.count { grow() }
        slots[(head &+ count) & (slots.count &- 1)] = consume step
        count += 1
    }

    /// Takes the oldest step out.
    mutating func popFirst() -> PendingStep? {
        guard count > 0 else { return nil }
        let step = slots[head].take()
        head = (head &+ 1) & (slots.count &- 1)
        count -= 1
        return step
    }

    private mutating func grow() {
        var wider = [PendingStep?](repeating: nil, count: max(64, slots.count * 2))
        for i in 0..<count { wider[i] = slots[(head &+ i) & (slots.count &- 1)].take() }
        slots = wider
        head = 0
    }

    /// Gives back the memory of a rare huge burst, once empty.
    mutating func shrinkIfLarge() {
        if count == 0 && slots.count > 1 << 14 { self = Backlog() }
    }
}
