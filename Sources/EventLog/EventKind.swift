/// What happened in one coordination step. Every kind has a stable name (its raw value, used in
/// JSON and on the command line) and a stable one-byte code (used on disk); neither ever changes
/// meaning once released, so old logs stay readable.
public enum EventKind: String, Sendable, CaseIterable, Codable, Hashable {
    /// The filesystem was mounted; the first record a daemon writes.
    case mount
    /// The filesystem is being unmounted; the last record a daemon writes.
    case unmount
    /// A reader or writer asked for coordinated access (an open, rename, unlink, ... or a client
    /// `coordinate(...)` call). Details: intent, options, request id.
    case intentRequested
    /// A presenter was asked to do something before an access (relinquish, save, accommodate
    /// deletion). Details: ask kind, presenter id, request id.
    case presenterAsked
    /// A presenter answered an ask. Details: ask kind, latency, presenter id, errno if it refused.
    case presenterAnswered
    /// A presenter did not answer within its deadline; the access went ahead (or was denied in
    /// strict mode). Details: ask kind, latency (the time waited), presenter id.
    case presenterTimedOut
    /// A presenter disappeared (its process exited or its connection closed) while being asked.
    case presenterGone
    /// A presenter registered for an item.
    case presenterAdded
    /// A presenter unregistered.
    case presenterRemoved
    /// Coordinated access was granted. Details: intent, latency (from request to grant).
    case granted
    /// Access was refused (strict mode, permission, or a presenter error). Details: errno, message.
    case denied
    /// Coordinated access ended (the handle was closed, the rename finished, ...).
    case released
    /// Presenters were told that the item's contents changed.
    case didChange
    /// Presenters were told that the item moved; `oldPath` is the source, `path` the destination.
    case didMove
    /// Presenters were told that the item was deleted.
    case didDelete
    /// Presenters of a directory were told that an item appeared inside it.
    case subitemAppeared
    /// Presenters of a directory were told that an item inside it changed.
    case subitemChanged
    /// Presenters of a directory were told that an item inside it moved.
    case subitemMoved
    /// Presenters of a directory were told that an item inside it was deleted.
    case subitemDeleted
    /// The document store kept a version. Details: snapshot method, bytes, version id.
    case snapshotTaken
    /// The document store detected a conflict between a presenter's base and the file on disk.
    case conflictDetected
    /// A conflict was resolved. Details: resolution; the actor is whoever resolved it.
    case conflictResolved
    /// Records were lost or deleted: `details.gapFrom ... details.gapTo` (inclusive). A gap record
    /// carries the sequence number `gapTo`, standing in for the range it replaces, so sequence
    /// numbers a reader sees stay strictly increasing and continuous. Details: reason, message.
    case gap
    /// Retention deleted old segments. Details: gapFrom/gapTo (the deleted range), bytes freed.
    /// Informational: a reader whose cursor falls into that range gets a `gap` record instead.
    case retention
    /// Opening the log found that the previous writer did not close it: it cut a torn tail (a crash
    /// mid-write; reason `tornTail`, bytes cut) and/or the previous writer ended without closing
    /// (reason `uncleanShutdown`: records it still held in memory, never in the file, are lost).
    /// Details: reason, bytes, message.
    case logRecovered
    /// The writer could not write for a while (a full disk, an I/O error) and now writes again; the
    /// records that waited are in the log before this one, none lost. Details: errno, message,
    /// latencyMicros (how long it was stuck).
    case logStalled
    /// The document store failed to keep a version or to record a change (a full disk, an I/O
    /// error): the presenters of that document were not given their base or conflict. Details:
    /// errno (when the failure had one), reason (what the store was doing), message.
    case storeFailed
    /// A process saved over a document that changed since it read it (an implicit reader, no
    /// presenter): the version it went over was kept and a conflict of kind `lostUpdate` opened (or,
    /// with `lost_updates=refuse`, the save was refused). The actor is the saver. Details:
    /// versionID (theirs, kept), reason (`kept` or `refused`), errno (refused), message (the
    /// conflict id, the base version or why there is none).
    case lostUpdate
    /// Records of one user (not root, not the mount's owner) over its share of the log
    /// (`-o log_user_share`), summarised instead of stored one by one: the actor is that user,
    /// `path` the first item of the summarised records, `oldPath` the last. Details: reason
    /// (`userShare`), bytes (what the records would have taken), message (how many of each kind, from
    /// when to when, and the share). The first one is written when the user reaches its share.
    case coalesced
    /// A read of a user other than root and the presenter's own went on without asking a presenter,
    /// because that user's turn at the presenter was taken (one of its ask chains or reacquires
    /// queued there or being answered): the presenter is told after, as ever. One record for the
    /// first such read of a turn (its request; the actor is its process), and one when the turn
    /// passes counting the others (the actor the last of them). `path` is the presenter's item.
    /// Details: presenter id, reason (`otherUserTurn`), message (how many reads).
    case presenterNotAsked

    /// The stable on-disk code. Append new kinds with new codes; never reuse a code.
    public var code: UInt8 {
        switch self {
        case .mount: 1
        case .unmount: 2
        case .intentRequested: 3
        case .presenterAsked: 4
        case .presenterAnswered: 5
        case .presenterTimedOut: 6
        case .presenterGone: 7
        case .granted: 8
        case .released: 9
        case .didChange: 10
        case .didMove: 11
        case .didDelete: 12
        case .subitemAppeared: 13
        case .subitemChanged: 14
        case .subitemMoved: 15
        case .subitemDeleted: 16
        case .snapshotTaken: 17
        case .conflictDetected: 18
        case .conflictResolved: 19
        case .gap: 20
        case .presenterAdded: 21
        case .presenterRemoved: 22
        case .denied: 23
        case .retention: 24
        case .logRecovered: 25
        case .logStalled: 26
        case .storeFailed: 27
        case .lostUpdate: 28
        case .coalesced: 29
        case .presenterNotAsked: 30
        }
    }

    /// The kind with on-disk code `code`, or nil for a code this build does not know.
    public init?(code: UInt8) {
        guard Int(code) < EventKind.byCode.count, let kind = EventKind.byCode[Int(code)] else { return nil }
        self = kind
    }

    private static let byCode: [EventKind?] = {
        var table = [EventKind?](repeating: nil, count: 256)
        for kind in EventKind.allCases { table[Int(kind.code)] = kind }
        return table
    }()

    /// Parses a kind name as typed on the command line: the exact raw value, or the same name in
    /// any letter case and with `-`/`_` separators (`presenter-timed-out`, `PRESENTER_TIMED_OUT`).
    public init?(name: String) {
        if let exact = EventKind(rawValue: name) {
            self = exact
            return
        }
        let folded = EventKind.fold(name)
        guard let match = EventKind.allCases.first(where: { EventKind.fold($0.rawValue) == folded }) else {
            return nil
        }
        self = match
    }

    private static func fold(_ s: String) -> String {
        String(s.lowercased().filter { $0 != "-" && $0 != "_" })
    }
}
