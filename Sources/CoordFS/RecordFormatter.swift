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
    private var requestItems = RequestTable()
    /// Requests that went ahead without exclusion at their wait deadline, with what they went past:
    /// their `granted` record says so.
    private var unexcluded: [UInt64: String] = [:]
    /// Fencing tokens of requests a cluster admitted, until their `granted` record.
    private var fences: [UInt64: Int64] = [:]
    /// Records formatted and not yet handed to the log.
    var formatted = EncodedRecords()
    /// An empty ring of steps the recorder trades with its backlog (`EventRecorder`), kept for
    /// its capacity.
    var spareSteps = Backlog()
    /// The actor fields of the last origin formatted, encoded (`RecordFields.actor`): every record
    /// names its actor, and a request's records (and a process's requests) name the same one, so
    /// they copy these bytes instead of encoding the executable's name again.
    /// (Kept field by field: read through an optional tuple, it was copied, its string and buffer
    /// retained and released, at every record.)
    private var lastActor = LastActor()
    /// Each user's share of the log (`-o log_user_share`): records of a user over it are summarised.
    var share: UserLogShare?

    private struct LastActor {
        var valid = false
        var pid: Int32 = 0
        var uid: UInt32 = 0
        var executable = ""
        var fields = RecordFields()
    }

    /// The intents of a request as they appear in records, in stored form: for each, its path field,
    /// then its intent and option fields.
    struct Items {
        var fields = RecordFields()
        /// For each intent: where its path field ends and where its other fields end. (The first
        /// intent's apart: most requests have one, and it then costs no array.)
        private var first = (pathEnd: 0, end: 0)
        private var more: [(pathEnd: Int, end: Int)] = []
        /// The intents, whose paths the request's did* records usually name again.
        let intents: [FileAccessIntent]

        init(_ intents: [FileAccessIntent]) {
            self.intents = intents
            for (i, intent) in intents.enumerated() {
                fields.path(intent.path.components)
                let pathEnd = fields.count
                RecordFormatter.encodeIntent(intent, into: &fields)
                if i == 0 { first = (pathEnd, fields.count) } else { more.append((pathEnd, fields.count)) }
            }
        }

        var count: Int { intents.count }

        /// Where intent `i`'s fields end and its path field ends; they start where intent `i - 1`'s end.
        func bounds(_ i: Int) -> (pathEnd: Int, end: Int) { i == 0 ? first : more[i - 1] }

        /// Appends the path field of the intent whose path is `path`, byte for byte (two names
        /// Swift calls equal, such as a precomposed and a decomposed accent, are different
        /// paths), copied from the encoded intents; false, appending nothing, if no intent has it.
        func appendPath(_ path: ItemPath, to out: inout RecordFields) -> Bool {
            var start = 0
            for i in 0..<count {
                let b = bounds(i)
                if RecordFormatter.sameBytes(intents[i].path.components, path.components) {
                    out.append(fields, start..<b.pathEnd)
                    return true
                }
                start = b.end
            }
            return false
        }
    }

    /// The items of the requests in flight, by request id: the last ones in a short array searched
    /// from its end (a few requests are in flight at a time, and a request's records follow each
    /// other closely; hashing the id with SipHash for each of a request's five look-ups cost about
    /// 200 instructions a record), the rest, past `arrayLimit`, in a dictionary.
    struct RequestTable {
        private var recent: [(id: UInt64, items: Items)] = []
        private var more: [UInt64: Items] = [:]
        static let arrayLimit = 32

        var count: Int { recent.count + more.count }

        private func index(_ id: UInt64) -> Int? {
            var i = recent.count
            while i > 0 {
                i -= 1
                if recent[i].id == id { return i }
            }
            return nil
        }

        subscript(id: UInt64) -> Items? {
            if let i = index(id) { return recent[i].items }
            return more.isEmpty ? nil : more[id]
        }

        /// Sets the items of `id` (replacing any it had).
        mutating func insert(_ id: UInt64, _ items: Items) {
            if let i = index(id) {
                recent[i].items = items
            } else if !more.isEmpty && more[id] != nil || recent.count >= Self.arrayLimit {
                more[id] = items
            } else {
                recent.append((id, items))
            }
        }

        mutating func remove(_ id: UInt64) -> Items? {
            guard let i = index(id) else { return more.isEmpty ? nil : more.removeValue(forKey: id) }
            let last = recent.count - 1
            if i != last { recent.swapAt(i, last) }
            return recent.removeLast().items
        }
    }

    /// Formats `steps` into `formatted`, in order.
    mutating func format(_ steps: [PendingStep]) {
        var steps = Backlog(steps)
        format(&steps)
    }

    /// Formats the steps of `steps` into `formatted`, in order, moving each out (so none is
    /// copied), and leaves it empty.
    mutating func format(_ steps: inout Backlog) {
        // Wall-clock time = monotonic time + the clocks' difference, read once for the batch (the
        // steps are milliseconds old at most, unless the writer fell behind).
        let offset = Self.wallMinusMonotonicNanos()
        while let step = steps.popFirst() { format(consume step, offset: offset) }
        emitDueSummaries()
    }

    /// Writes the summaries of users over their share that are due (`UserLogShare.emitDue`), all
    /// of them when `force` (the log is closing).
    mutating func emitDueSummaries(force: Bool = false) {
        guard share?.hasPending == true else { return }
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        let now = EventTime(millisecondsSinceEpoch: Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec) / 1_000_000)
        share!.emitDue(now: now, into: &formatted, force: force)
    }

    /// After the formatted records were handed to `log`: what retention deleted stops counting
    /// against its users' shares.
    mutating func settleShare(_ log: EventLogWriter) {
        guard share?.wantsSettle == true else { return }
        share!.settle(lastSeq: log.lastAssignedSeq, oldestSeq: log.index.bounds.oldestSeq)
    }

    /// Formats one step into `formatted`; `offset` is `wallMinusMonotonicNanos()` read for its batch.
    mutating func format(_ step: consuming PendingStep, offset: Int64) {
        func wall(_ monotonic: UInt64) -> EventTime {
            EventTime(millisecondsSinceEpoch: (Int64(bitPattern: monotonic) &+ offset) / 1_000_000)
        }
        switch consume step {
        case .event(let e): format(e, at: wall(e.time))
        case .record(let r, let time):
            formatted.append(r, at: wall(time))
            if share != nil, let uid = r.actor?.uid { share!.admit(uid: uid, into: &formatted) }
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
            if share != nil, let o = event.origin { share!.admit(uid: o.uid, into: &formatted) }
        }
        // One record per item: its path and intent, the event's fields, and the latency if any.
        func finish(_ kind: EventKind, _ items: Items, latencyMicros: UInt64? = nil, note: String? = nil, fence: Int64? = nil) {
            var start = 0
            for i in 0..<items.count {
                let b = items.bounds(i)
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
            if share != nil, let uid = actor?.uid { share!.admit(uid: uid, into: &formatted) }
        }
        switch event.kind {
        case .requested(let intents, _):
            let items = Items(intents)
            if let request { requestItems.insert(request, items) }
            finish(.intentRequested, items)
        case .waiting:
            break // visible as the gap between intentRequested and granted
        case .presenterAsked(let p, let ask, let path):
            presenterPaths[p] = Self.logPath(path)
            append(.presenterAsked, Self.logPath(path), EventDetails(presenterID: p.description, ask: Self.ask(ask)))
        case .presenterNotAsked(let p, let reads, let path):
            let message = reads == 1
                ? "not asked: this user's turn at the presenter is taken (its ask chain or reacquire is queued there); the read goes on, the presenter is told after"
                : "\(reads) more reads of this user not asked while its turn at the presenter was taken"
            append(.presenterNotAsked, Self.logPath(path), EventDetails(presenterID: p.description, reason: "otherUserTurn", message: message))
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
            // (Both are usually empty: not hashed then.)
            let note = unexcluded.isEmpty ? nil : request.flatMap { unexcluded.removeValue(forKey: $0) }
            let fence = fences.isEmpty ? nil : request.flatMap { fences.removeValue(forKey: $0) }
            finish(.granted, request.flatMap { requestItems[$0] } ?? Items(intents), latencyMicros: waited / 1000, note: note, fence: fence)
        case .fenced(let token):
            if let request { fences[request] = token }
        case .wentAheadWithoutExclusion(let blocker, let deadline):
            if let request {
                unexcluded[request] = "went ahead without exclusion after \(deadline)" + (blocker.map { " past \($0)" } ?? "")
            }
        case .failed(let error):
            if let request {
                if !unexcluded.isEmpty { unexcluded[request] = nil }
                if !fences.isEmpty { fences[request] = nil }
            }
            let items = request.flatMap { requestItems.remove($0) }
            let first = items.flatMap { $0.count > 0 ? $0.bounds(0) : nil }
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
            if let items = request.flatMap({ requestItems.remove($0) }), items.count > 0 {
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
                appendPath(p, of: request)
                finish(.didChange)
            case .moved(let from, let to):
                formatted.fields.path(to.components)
                formatted.fields.oldPath(from.components)
                finish(.didMove)
            case .deleted(let p):
                appendPath(p, of: request)
                finish(.didDelete)
            case .subitemAppeared(let p):
                appendPath(p, of: request)
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

    /// Appends the path field of `p`, the path of a did* record of `request`: copied from the
    /// request's encoded items when one of its intents has that path (a file's change, deletion or
    /// appearance is usually announced by the access to that very path), else encoded.
    private mutating func appendPath(_ p: ItemPath, of request: UInt64?) {
        if let request, requestItems[request]?.appendPath(p, to: &formatted.fields) == true { return }
        formatted.fields.path(p.components)
    }

    /// Whether `a` and `b` are the same names byte for byte (`String`'s `==` is canonical
    /// equivalence: "\u{E9}" equals "e\u{301}", which are different names on disk).
    static func sameBytes(_ a: [String], _ b: [String]) -> Bool {
        guard a.count == b.count else { return false }
        // The same array (a path handed from the access to its announcement): the same names.
        if a.withUnsafeBufferPointer({ x in b.withUnsafeBufferPointer { x.baseAddress == $0.baseAddress } }) { return true }
        for i in a.indices where !sameBytes(a[i], b[i]) { return false }
        return true
    }

    static func sameBytes(_ a: String, _ b: String) -> Bool {
        // Copies of one string (an origin's executable, a path's component handed on) share their
        // storage, or are the same small string: the same 16 bytes, so the same name.
        if unsafeBitCast(a, to: (UInt64, UInt64).self) == unsafeBitCast(b, to: (UInt64, UInt64).self) { return true }
        let n = a.utf8.count
        guard n == b.utf8.count else { return false }
        if n == 0 { return true }
        // memcmp: the generic `elementsEqual` walked the bytes one by one through iterators
        // (about 230 instructions for a short name).
        return a.utf8.withContiguousStorageIfAvailable { x in
            b.utf8.withContiguousStorageIfAvailable { y in memcmp(x.baseAddress!, y.baseAddress!, n) == 0 }
        }.flatMap { $0 } ?? a.utf8.elementsEqual(b.utf8)
    }

    /// Appends the actor fields of `o`: the same bytes as `formatted.fields.actor`.
    /// The executable's name is compared byte for byte (two names Swift calls equal are different
    /// executables).
    private mutating func appendActor(_ o: AccessOrigin) {
        if !lastActor.valid || lastActor.pid != o.pid || lastActor.uid != o.uid || !Self.sameBytes(lastActor.executable, o.executable) {
            lastActor.fields.removeAll()
            lastActor.fields.actor(pid: o.pid, uid: o.uid, executable: o.executable)
            lastActor.pid = o.pid
            lastActor.uid = o.uid
            lastActor.executable = o.executable
            lastActor.valid = true
        }
        formatted.fields.append(lastActor.fields, 0..<lastActor.fields.count)
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
            fields.intent(write: false)
            // Most intents have no option: the names are not walked for them.
            if !o.isEmpty { for (name, option) in ReadingOptions.names where o.contains(option) { fields.option(name) } }
        case .writing(let o):
            fields.intent(write: true)
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
