import Coordination
import EventLog
import Glibc

/// A step waiting in `EventRecorder`'s backlog: a coordination event (which carries the monotonic
/// time the coordinator read for it), or a record of the daemon's own and the monotonic time it
/// was made. The wall-clock time of both is worked out when they are formatted, so queueing a step
/// on a FUSE thread reads no clock.
enum PendingStep {
    case event(CoordinationEvent)
    // Boxed: the daemon's own records are rare, and unboxed they would make every step as large as a
    // record (320 bytes) in the backlog.
    indirect case record(EventRecord, at: UInt64)
}

/// Turns coordination events into records, for `EventRecorder`, which keeps it under its formatter
/// lock (one formatter at a time, so records keep the order of their steps). A value type so that
/// its state is reached without the exclusivity checks a class's stored properties get on every
/// access (measured: a sixth of the formatting time).
///
/// The frequent records (a request's intents, grant and release, did change / delete, subitem
/// appeared) are written straight into their stored form (`RecordFields`); the rare ones go through
/// `EventRecord`.
struct RecordFormatter {
    /// Where each presenter is, for records about answers (which carry only the presenter id).
    private var presenterPaths: [PresenterID: String] = [:]
    /// The items of each request between its request and its end, encoded once: `granted` reuses
    /// them, and `released` and `denied` (whose coordinator events carry only the request id) name
    /// the items through them. Holds only requests in flight: entries go at release or failure.
    private var requestItems: [UInt64: Items] = [:]
    /// Requests that went ahead without exclusion at their wait deadline, with what they went past:
    /// their `granted` record says so.
    private var unexcluded: [UInt64: String] = [:]
    /// Fencing tokens of requests a cluster admitted, until their `granted` record.
    private var fences: [UInt64: Int64] = [:]
    /// Records formatted and not yet handed to the log.
    var formatted = EncodedRecords()
    /// The actor fields of the last origin formatted, encoded (`RecordFields.actor`): every record
    /// names its actor, and a request's records (and a process's requests) name the same one, so
    /// they copy these bytes instead of encoding the executable's name again.
    private var lastActor: (pid: Int32, uid: UInt32, executable: String, fields: RecordFields)?
    /// Steps taken from the backlog a few at a time (`EventRecorder.help`), for `formatSteps`.
    var steps: [PendingStep] = []

    /// The intents of a request as they appear in records, in stored form: for each, its path field,
    /// then its intent and option fields.
    struct Items {
        var fields = RecordFields()
        /// For each intent: where its path field ends and where its other fields end.
        var bounds: [(pathEnd: Int, end: Int)] = []

        init(_ intents: [FileAccessIntent]) {
            bounds.reserveCapacity(intents.count)
            for intent in intents {
                fields.path(intent.path.components)
                let pathEnd = fields.count
                RecordFormatter.encodeIntent(intent, into: &fields)
                bounds.append((pathEnd, fields.count))
            }
        }
    }

    /// Formats `self.steps` into `formatted` and empties it, keeping its buffer.
    mutating func formatSteps() {
        var taken: [PendingStep] = []
        swap(&taken, &steps)
        format(taken)
        taken.removeAll(keepingCapacity: true)
        swap(&taken, &steps)
    }

    /// Formats `steps` into `formatted`, in order.
    mutating func format(_ steps: [PendingStep]) {
        // Wall-clock time = monotonic time + the clocks' difference, read once for the batch (the
        // steps are milliseconds old at most, unless the writer fell behind).
        let offset = Self.wallMinusMonotonicNanos()
        func wall(_ monotonic: UInt64) -> EventTime {
            EventTime(millisecondsSinceEpoch: (Int64(bitPattern: monotonic) &+ offset) / 1_000_000)
        }
        for step in steps {
            switch step {
            case .event(let e): format(e, at: wall(e.time))
            case .record(let r, let time): formatted.append(r, at: wall(time))
            }
        }
    }

    /// CLOCK_REALTIME minus CLOCK_MONOTONIC, in nanoseconds.
    static func wallMinusMonotonicNanos() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        let wall = Int64(ts.tv_sec) &* 1_000_000_000 &+ Int64(ts.tv_nsec)
        return wall &- Int64(bitPattern: CoordinationEvent.now())
    }

    private mutating func format(_ event: CoordinationEvent, at time: EventTime) {
        let request = event.requestID?.rawValue
        // The fields every record of the event has, then the end of the record.
        func finish(_ kind: EventKind) {
            if let o = event.origin { appendActor(o) }
            if let request { formatted.fields.requestID(request) }
            formatted.finish(kind, at: time)
        }
        // One record per item: its path and intent, the event's fields, and the latency if any.
        func finish(_ kind: EventKind, _ items: Items, latencyMicros: UInt64? = nil, note: String? = nil, fence: Int64? = nil) {
            var start = 0
            for b in items.bounds {
                formatted.fields.append(items.fields, start..<b.end)
                start = b.end
                if let latencyMicros { formatted.fields.latencyMicros(latencyMicros) }
                if let note {
                    formatted.fields.note(reason: "waitDeadline", message: note + (fence.map { "; fencing token \($0)" } ?? ""))
                } else if let fence {
                    formatted.fields.note(reason: "fencingToken", message: String(fence))
                }
                finish(kind)
            }
        }
        // The rare records, through `EventRecord`.
        func append(_ kind: EventKind, _ path: consuming String, old: consuming String? = nil, _ details: consuming EventDetails = EventDetails()) {
            let actor = event.origin.map { EventActor(pid: $0.pid, uid: $0.uid, executable: $0.executable) }
            if details.requestID == nil { details.requestID = request }
            formatted.append(EventRecord(kind: kind, path: path, oldPath: old, actor: actor, details: details), at: time)
        }
        switch event.kind {
        case .requested(let intents, _):
            let items = Items(intents)
            if let request { requestItems[request] = items }
            finish(.intentRequested, items)
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
            let note = request.flatMap { unexcluded.removeValue(forKey: $0) }
            let fence = request.flatMap { fences.removeValue(forKey: $0) }
            finish(.granted, request.flatMap { requestItems[$0] } ?? Items(intents), latencyMicros: waited / 1000, note: note, fence: fence)
        case .fenced(let token):
            if let request { fences[request] = token }
        case .wentAheadWithoutExclusion(let blocker, let deadline):
            if let request {
                unexcluded[request] = "went ahead without exclusion after \(deadline)" + (blocker.map { " past \($0)" } ?? "")
            }
        case .failed(let error):
            if let request {
                unexcluded[request] = nil
                fences[request] = nil
            }
            let items = request.flatMap { requestItems.removeValue(forKey: $0) }
            let first = items?.bounds.first
            if let path = Self.path(of: error) {
                formatted.fields.path(path.components)
            } else if let items, let first {
                formatted.fields.append(items.fields, 0..<first.pathEnd)
            } else {
                formatted.fields.path([])
            }
            if let items, let first { formatted.fields.append(items.fields, first.pathEnd..<first.end) }
            formatted.fields.failure(errno: error.posixErrorCode, reason: Self.reason(of: error), message: error.description)
            finish(.denied)
        case .released(let held):
            // How long the access was held.
            let micros = held / 1000
            if let items = request.flatMap({ requestItems.removeValue(forKey: $0) }), !items.bounds.isEmpty {
                finish(.released, items, latencyMicros: micros)
            } else {
                formatted.fields.path([])
                formatted.fields.latencyMicros(micros)
                finish(.released)
            }
        case .willMove:
            break // the didMove after it says where it went
        case .announced(let change):
            switch change {
            case .changed(let p):
                formatted.fields.path(p.components)
                finish(.didChange)
            case .moved(let from, let to):
                formatted.fields.path(to.components)
                formatted.fields.oldPath(from.components)
                finish(.didMove)
            case .deleted(let p):
                formatted.fields.path(p.components)
                finish(.didDelete)
            case .subitemAppeared(let p):
                formatted.fields.path(p.components)
                finish(.subitemAppeared)
            }
        case .notified(let p, let note):
            let d = EventDetails(presenterID: p.description)
            switch note {
            case .subitemDidChange(let path): append(.subitemChanged, Self.logPath(path), d)
            case .subitemDidMove(let from, let to): append(.subitemMoved, Self.logPath(to), old: Self.logPath(from), d)
            case .subitemDeleted(let path): append(.subitemDeleted, Self.logPath(path), d)
            case .itemDidChange, .itemDidMove, .subitemDidAppear, .itemDidDelete:
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

    /// Appends the actor fields of `o`: the same bytes as `formatted.fields.actor`.
    private mutating func appendActor(_ o: AccessOrigin) {
        if let a = lastActor, a.pid == o.pid, a.uid == o.uid, a.executable == o.executable {
            formatted.fields.append(a.fields, 0..<a.fields.count)
            return
        }
        var fields = RecordFields()
        fields.actor(pid: o.pid, uid: o.uid, executable: o.executable)
        formatted.fields.append(fields, 0..<fields.count)
        lastActor = (o.pid, o.uid, o.executable, fields)
    }

    private func path(of presenter: PresenterID) -> String {
        presenterPaths[presenter] ?? "/"
    }

    /// Log paths are relative to the mount root and start with `/` (the root itself is `/`).
    static func logPath(_ p: ItemPath) -> String {
        // One allocation (the frequent records write their paths as bytes: RecordFields.path).
        var s = "/"
        s.reserveCapacity(p.components.reduce(p.components.count) { $0 + $1.utf8.count })
        for (i, c) in p.components.enumerated() {
            if i > 0 { s += "/" }
            s += c
        }
        return s
    }

    /// The intent and option fields of `intent`.
    static func encodeIntent(_ intent: FileAccessIntent, into fields: inout RecordFields) {
        switch intent.kind {
        case .reading(let o):
            fields.intent(.read)
            // Most intents have no option: the names are not walked for them.
            if !o.isEmpty { for (name, option) in ReadingOptions.names where o.contains(option) { fields.option(name) } }
        case .writing(let o):
            fields.intent(.write)
            if !o.isEmpty { for (name, option) in WritingOptions.names where o.contains(option) { fields.option(name) } }
        }
    }

    static func ask(_ a: PresenterAsk) -> LoggedAsk {
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
        case .busy: return "busy"
        case .deadlock: return "deadlock"
        case .cluster: return "cluster"
        case .invalidRequest, .presenterAlreadyRegistered, .presenterHasNoPath: return "invalid"
        }
    }

    static func path(of error: CoordinationError) -> ItemPath? {
        switch error {
        case .waitTimedOut(_, let path, _, _), .busy(_, let path, _, _): return path
        default: return nil
        }
    }
}
