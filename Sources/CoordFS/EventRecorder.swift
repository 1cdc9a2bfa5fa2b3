import Coordination
import EventLog
import Synchronization

/// Turns the coordinator's typed events into event-log records, and is the one way the daemon's
/// records reach the log (the store's and the mount's own go through `append`), so they keep the
/// order they happened in.
///
/// The coordinator calls `record` under its lock, on the thread of the operation (a FUSE worker):
/// that call only stamps the time and queues the event. Formatting (paths, details, the items of each
/// request) happens on the log writer's thread, in batches after its coalescing delay, right before
/// the write. So logging costs an operation one short lock and an array append.
final class EventRecorder: CoordinationEventSink, @unchecked Sendable {
    let log: EventLogWriter
    /// Where each presenter is, for records about answers (which carry only the presenter id).
    /// Only under `formatter`.
    private var presenterPaths: [PresenterID: String] = [:]
    /// The items of each request between its request and its end, formatted once: `granted`
    /// reuses them, and `released` and `denied` (whose coordinator events carry only the request
    /// id) name the items through them. Holds only requests in flight: entries go at release or
    /// failure. Only under `formatter`.
    private var requestItems: [UInt64: [Item]] = [:]
    /// Records formatted from the backlog (each with the time its step happened), handed to the log
    /// together. Only under `formatter`.
    private var formatted: [EventRecord] = []

    /// One intent of a request as it appears in records.
    struct Item {
        var path: String
        var details: EventDetails
    }

    private enum Pending {
        case event(CoordinationEvent)
        case record(EventRecord)
    }
    /// Steps not yet formatted, in order, each with the time it happened.
    private let backlog = Mutex<[(Pending, EventTime)]>([])
    /// Held while formatting: one formatter at a time, so records keep the backlog's order.
    private let formatter = Mutex<Void>(())
    /// Past this many unformatted steps the caller formats them itself (the log writer's own
    /// queue bound, with gap records, applies after that).
    static let backlogLimit = 65_536

    init(log: EventLogWriter) {
        self.log = log
        log.setSource { [weak self] in self?.drain() }
    }

    /// Ends the hand-over to the log writer (after a last `drain`).
    func detach() {
        drain()
        log.setSource(nil)
    }

    func record(_ event: CoordinationEvent) { enqueue(.event(event)) }

    /// Appends a record of the daemon's own (mount, unmount, the store's), in order with the rest.
    func append(
        _ kind: EventKind, path: String, oldPath: String? = nil, documentID: String? = nil,
        actor: EventActor? = nil, details: EventDetails = EventDetails()
    ) {
        enqueue(.record(EventRecord(kind: kind, path: path, oldPath: oldPath, documentID: documentID, actor: actor, details: details)))
    }

    /// Formats everything queued so far and hands it to the log writer. The writer thread calls this
    /// (after its coalescing delay); `flush` and a full backlog call it on their own thread.
    func drain() {
        formatter.withLock { _ in drainFormatting() }
    }

    /// Formats the oldest few steps queued (`helpSlice`), if only a few are queued and no one else is
    /// formatting; never waits. Returns whether more are queued for it. The FUSE worker that holds
    /// /dev/fuse calls this while it polls the empty device between requests
    /// (`FuseSession.setIdleWork`), on a core that would otherwise only poll: the records of the
    /// requests it just served are formatted and encoded there, and the log writer's thread is left
    /// only the write(2).
    func help() -> Bool {
        let queued = backlog.withLock { $0.count }
        if queued == 0 || queued > Self.helpLimit { return false }
        return formatter.withLockIfAvailable { _ -> Bool in
            let more = backlog.withLock { b -> Bool in
                let k = min(Self.helpSlice, b.count)
                helpBatch.append(contentsOf: b[..<k])
                b.removeSubrange(..<k)
                return !b.isEmpty
            }
            helped.add(helpBatch.count, ordering: .relaxed)
            formatAndAppend(helpBatch)
            helpBatch.removeAll(keepingCapacity: true)
            return more
        } ?? false
    }

    /// Steps formatted by `help` so far (tests, benchmarks).
    let helped = Atomic<Int>(0)
    /// `help`'s steps in hand. Only under `formatter`.
    private var helpBatch: [(Pending, EventTime)] = []

    /// Past this many steps queued, `help` leaves them to the writer thread (a burst, or a writer
    /// that fell behind).
    static let helpLimit = 32
    /// Steps per `help` call: one slice, well under the time a request waits for it.
    static let helpSlice = 2

    /// Under `formatter`.
    private func drainFormatting() {
        var batch: [(Pending, EventTime)] = []
        while true {
            backlog.withLock { b in
                swap(&batch, &b)
                if b.capacity > 1 << 14 { b = [] }
            }
            if batch.isEmpty { return }
            formatAndAppend(batch)
            // Keep the buffers, but give back the memory of a rare huge burst.
            if batch.capacity > 1 << 14 { batch = [] } else { batch.removeAll(keepingCapacity: true) }
            if formatted.capacity > 1 << 14 { formatted = [] }
        }
    }

    /// Formats `steps` and appends their records to the log, under one lock on it (which encodes
    /// them). Under `formatter`.
    private func formatAndAppend(_ steps: [(Pending, EventTime)]) {
        for (item, time) in steps {
            switch item {
            case .event(let e): format(e, at: time)
            case .record(var r):
                r.time = time
                formatted.append(r)
            }
        }
        log.append(contentsOf: &formatted)
    }

    /// Waits until everything queued so far is in the log file.
    func flush() throws {
        drain()
        try log.flush()
    }

    private func enqueue(_ item: Pending) {
        let now = EventTime.now()
        let count = backlog.withLock { b -> Int in
            b.append((item, now))
            return b.count
        }
        if count == 1 { log.sourceHasRecords() }
        if count >= Self.backlogLimit { drain() }
    }

    private func format(_ event: CoordinationEvent, at time: EventTime) {
        let actor = event.origin.map { EventActor(pid: $0.pid, uid: $0.uid, executable: $0.executable) }
        let request = event.requestID?.rawValue
        func append(_ kind: EventKind, _ path: consuming String, old: consuming String? = nil, _ details: consuming EventDetails = EventDetails()) {
            if details.requestID == nil { details.requestID = request }
            formatted.append(EventRecord(time: time, kind: kind, path: path, oldPath: old, actor: actor, details: details))
        }
        switch event.kind {
        case .requested(let intents, _):
            let items = intents.map { Item(path: Self.logPath($0.path), details: Self.details($0)) }
            if let request { requestItems[request] = items }
            for i in items { append(.intentRequested, i.path, i.details) }
        case .waiting:
            break // visible as the gap between intentRequested and granted
        case .presenterAsked(let p, let ask, let path):
            presenterPaths[p] = Self.logPath(path)
            append(.presenterAsked, Self.logPath(path), EventDetails(presenterID: p.description, ask: Self.ask(ask)))
        case .presenterAnswered(let p, let ask, let nanos):
            append(.presenterAnswered, path(of: p), EventDetails(presenterID: p.description, ask: Self.ask(ask), latencyMicros: nanos / 1000))
        case .presenterTimedOut(let p, let ask, let deadline):
            append(.presenterTimedOut, path(of: p), EventDetails(presenterID: p.description, ask: Self.ask(ask),
                                                                latencyMicros: Self.micros(deadline), reason: "deadline"))
        case .presenterGone(let p, let ask):
            append(.presenterGone, path(of: p), EventDetails(presenterID: p.description, ask: Self.ask(ask)))
        case .presenterFailed(let p, let ask, let error):
            append(.presenterAnswered, path(of: p), EventDetails(presenterID: p.description, ask: Self.ask(ask), reason: "refused", message: error))
        case .granted(let intents, let waited):
            let known = request.flatMap { requestItems[$0] }
            let items = known ?? intents.map { Item(path: Self.logPath($0.path), details: Self.details($0)) }
            for var i in items {
                i.details.latencyMicros = waited / 1000
                append(.granted, i.path, i.details)
            }
        case .failed(let error):
            let items = request.flatMap { requestItems.removeValue(forKey: $0) } ?? []
            var d = items.first?.details ?? EventDetails()
            d.errno = error.posixErrorCode
            d.reason = Self.reason(of: error)
            d.message = error.description
            append(.denied, Self.path(of: error) ?? items.first?.path ?? "/", d)
        case .released(let held):
            let items = request.flatMap { requestItems.removeValue(forKey: $0) } ?? []
            if items.isEmpty { append(.released, "/", EventDetails(latencyMicros: held / 1000)) }
            for var i in items {
                // How long the access was held.
                i.details.latencyMicros = held / 1000
                append(.released, i.path, i.details)
            }
        case .willMove:
            break // the didMove after it says where it went
        case .announced(let change):
            switch change {
            case .changed(let p): append(.didChange, Self.logPath(p))
            case .moved(let from, let to): append(.didMove, Self.logPath(to), old: Self.logPath(from))
            case .deleted(let p): append(.didDelete, Self.logPath(p))
            case .subitemAppeared(let p): append(.subitemAppeared, Self.logPath(p))
            }
        case .notified(let p, let note):
            let d = EventDetails(presenterID: p.description)
            switch note {
            case .subitemDidChange(let path): append(.subitemChanged, Self.logPath(path), d)
            case .subitemDidMove(let from, let to): append(.subitemMoved, Self.logPath(to), old: Self.logPath(from), d)
            case .subitemDeleted(let path): append(.subitemDeleted, Self.logPath(path), d)
            case .itemDidChange, .itemDidMove, .subitemDidAppear:
                break // recorded once, as the did* record of the access
            }
        case .reacquireScheduled:
            break
        case .presenterRegistered(let p, let path, _):
            presenterPaths[p] = Self.logPath(path)
            append(.presenterAdded, Self.logPath(path), EventDetails(presenterID: p.description))
        case .presenterUnregistered(let p, let path):
            presenterPaths[p] = nil
            append(.presenterRemoved, Self.logPath(path), EventDetails(presenterID: p.description))
        }
    }

    private func path(of presenter: PresenterID) -> String {
        presenterPaths[presenter] ?? "/"
    }

    /// Log paths are relative to the mount root and start with `/` (the root itself is `/`).
    static func logPath(_ p: ItemPath) -> String {
        // One allocation: this runs for nearly every record.
        var s = "/"
        s.reserveCapacity(p.components.reduce(p.components.count) { $0 + $1.utf8.count })
        for (i, c) in p.components.enumerated() {
            if i > 0 { s += "/" }
            s += c
        }
        return s
    }

    static func details(_ intent: FileAccessIntent) -> EventDetails {
        switch intent.kind {
        case .reading(let o):
            var names: [String] = []
            if o.contains(.withoutChanges) { names.append("withoutChanges") }
            if o.contains(.resolvesSymbolicLink) { names.append("resolvesSymbolicLink") }
            if o.contains(.immediatelyAvailableMetadataOnly) { names.append("immediatelyAvailableMetadataOnly") }
            if o.contains(.forUploading) { names.append("forUploading") }
            return EventDetails(intent: .read, options: names)
        case .writing(let o):
            var names: [String] = []
            if o.contains(.forDeleting) { names.append("forDeleting") }
            if o.contains(.forMoving) { names.append("forMoving") }
            if o.contains(.forMerging) { names.append("forMerging") }
            if o.contains(.forReplacing) { names.append("forReplacing") }
            if o.contains(.contentIndependentMetadataOnly) { names.append("contentIndependentMetadataOnly") }
            return EventDetails(intent: .write, options: names)
        }
    }

    static func ask(_ a: PresenterAsk) -> AskKind {
        switch a {
        case .relinquishToReader: return .relinquishToReader
        case .relinquishToWriter: return .relinquishToWriter
        case .saveChanges: return .saveChanges
        case .accommodateDeletion: return .accommodateDeletion
        case .accommodateSubitemDeletion: return .accommodateSubitemDeletion
        }
    }

    static func micros(_ d: Duration) -> UInt64 {
        let c = d.components
        return UInt64(max(0, c.seconds)) * 1_000_000 + UInt64(max(0, c.attoseconds)) / 1_000_000_000_000
    }

    /// A short machine-readable reason for `denied` (the message has the details).
    static func reason(of error: CoordinationError) -> String {
        switch error {
        case .cancelled: return "cancelled"
        case .presenterTimedOut: return "presenterTimedOut"
        case .presenterFailed: return "presenterRefused"
        case .waitTimedOut: return "waitTimedOut"
        case .deadlock: return "deadlock"
        case .invalidRequest, .presenterAlreadyRegistered, .presenterHasNoPath: return "invalid"
        }
    }

    static func path(of error: CoordinationError) -> String? {
        if case .waitTimedOut(_, let path, _, _) = error { return logPath(path) }
        return nil
    }
}
