/// One coordination step, as stored in the log and printed by `coordfs watch` / `coordfs log`.
///
/// `seq` is assigned by `EventLogWriter.append` and is strictly increasing and continuous: a
/// reader sees 1, 2, 3, ... with every missing range replaced by one `gap` record whose `seq` is
/// the last number of the range. JSON form: one object per line with keys in the order `seq`,
/// `time`, `kind`, `path`, `oldPath`, `documentID`, `actor`, `details` (absent fields omitted); see
/// docs/event-log.md.
public struct EventRecord: Sendable, Hashable, Codable {
    public var seq: UInt64
    public var time: EventTime
    public var kind: EventKind
    /// The item's path relative to the mount root, starting with `/` (for moves: the destination).
    public var path: String
    /// The source path of a move (`didMove`, `subitemMoved`, a rename's intent).
    public var oldPath: String?
    /// The document store's stable id for the document, which survives saves by rename.
    public var documentID: String?
    public var actor: EventActor?
    public var details: EventDetails

    public init(
        seq: UInt64 = 0, time: EventTime = EventTime(millisecondsSinceEpoch: 0), kind: EventKind,
        path: String, oldPath: String? = nil, documentID: String? = nil, actor: EventActor? = nil,
        details: EventDetails = EventDetails()
    ) {
        self.seq = seq
        self.time = time
        self.kind = kind
        self.path = path
        self.oldPath = oldPath
        self.documentID = documentID
        self.actor = actor
        self.details = details
    }

    /// For a `gap` record, the range of sequence numbers it stands in for.
    public var gapRange: ClosedRange<UInt64>? {
        guard kind == .gap, let from = details.gapFrom, let to = details.gapTo, from <= to else { return nil }
        return from...to
    }

    enum CodingKeys: String, CodingKey {
        case seq, time, kind, path, oldPath, documentID, actor, details
    }

    public init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        seq = try c.decode(UInt64.self, forKey: .seq)
        time = try c.decode(EventTime.self, forKey: .time)
        kind = try c.decode(EventKind.self, forKey: .kind)
        path = try c.decode(String.self, forKey: .path)
        oldPath = try c.decodeIfPresent(String.self, forKey: .oldPath)
        documentID = try c.decodeIfPresent(String.self, forKey: .documentID)
        actor = try c.decodeIfPresent(EventActor.self, forKey: .actor)
        details = try c.decodeIfPresent(EventDetails.self, forKey: .details) ?? EventDetails()
    }

    public func encode(to encoder: Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(seq, forKey: .seq)
        try c.encode(time, forKey: .time)
        try c.encode(kind, forKey: .kind)
        try c.encode(path, forKey: .path)
        try c.encodeIfPresent(oldPath, forKey: .oldPath)
        try c.encodeIfPresent(documentID, forKey: .documentID)
        try c.encodeIfPresent(actor, forKey: .actor)
        if !details.isEmpty { try c.encode(details, forKey: .details) }
    }
}
