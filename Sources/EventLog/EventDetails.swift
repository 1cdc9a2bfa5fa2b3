/// Kind-specific details of a record. Every field is optional; a kind uses the few that apply
/// (see `EventKind` and docs/event-log.md). Empty fields are neither stored nor printed.
public struct EventDetails: Sendable, Hashable, Codable {
    /// Read or write, for `intentRequested`, `granted`, `denied`, `released`.
    public var intent: IntentKind?
    /// Reading/writing options by their Foundation names (`forDeleting`, `withoutChanges`, ...).
    public var options: [String]
    /// The coordinator's id for the access this record belongs to; ties a request to its asks,
    /// grant and release.
    public var requestID: UInt64?
    /// The presenter concerned.
    public var presenterID: String?
    /// What a presenter was asked.
    public var ask: LoggedAsk?
    /// Microseconds: presenter answer time, time waited before a timeout, or request-to-grant time.
    public var latencyMicros: UInt64?
    /// How a snapshot was taken.
    public var snapshotMethod: Recorded<SnapshotMethod>?
    /// A byte count: snapshot size, bytes freed by retention, bytes cut from a torn tail.
    public var bytes: UInt64?
    /// The document store's id of a kept version.
    public var versionID: String?
    /// How a conflict was resolved.
    public var resolution: Recorded<Resolution>?
    /// The errno an access failed with or a presenter answered with.
    public var errno: Int32?
    /// A short machine-friendly reason (`GapReason` for gaps, `strict`, `deadline`, ...).
    public var reason: String?
    /// A human-readable message.
    public var message: String?
    /// First sequence number of a dropped range (`gap`, `retention`).
    public var gapFrom: UInt64?
    /// Last sequence number (inclusive) of a dropped range (`gap`, `retention`).
    public var gapTo: UInt64?

    public init(
        intent: IntentKind? = nil, options: [String] = [], requestID: UInt64? = nil,
        presenterID: String? = nil, ask: LoggedAsk? = nil, latencyMicros: UInt64? = nil,
        snapshotMethod: Recorded<SnapshotMethod>? = nil, bytes: UInt64? = nil, versionID: String? = nil,
        resolution: Recorded<Resolution>? = nil, errno: Int32? = nil, reason: String? = nil,
        message: String? = nil, gapFrom: UInt64? = nil, gapTo: UInt64? = nil
    ) {
        self.intent = intent
        self.options = options
        self.requestID = requestID
        self.presenterID = presenterID
        self.ask = ask
        self.latencyMicros = latencyMicros
        self.snapshotMethod = snapshotMethod
        self.bytes = bytes
        self.versionID = versionID
        self.resolution = resolution
        self.errno = errno
        self.reason = reason
        self.message = message
        self.gapFrom = gapFrom
        self.gapTo = gapTo
    }

    /// True when no field is set.
    public var isEmpty: Bool { self == EventDetails() }

    enum CodingKeys: String, CodingKey {
        case intent, options, requestID, presenterID, ask, latencyMicros, snapshotMethod, bytes
        case versionID, resolution, errno, reason, message, gapFrom, gapTo
    }

    public init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        intent = try c.decodeIfPresent(IntentKind.self, forKey: .intent)
        options = try c.decodeIfPresent([String].self, forKey: .options) ?? []
        requestID = try c.decodeIfPresent(UInt64.self, forKey: .requestID)
        presenterID = try c.decodeIfPresent(String.self, forKey: .presenterID)
        ask = try c.decodeIfPresent(LoggedAsk.self, forKey: .ask)
        latencyMicros = try c.decodeIfPresent(UInt64.self, forKey: .latencyMicros)
        snapshotMethod = try c.decodeIfPresent(Recorded<SnapshotMethod>.self, forKey: .snapshotMethod)
        bytes = try c.decodeIfPresent(UInt64.self, forKey: .bytes)
        versionID = try c.decodeIfPresent(String.self, forKey: .versionID)
        resolution = try c.decodeIfPresent(Recorded<Resolution>.self, forKey: .resolution)
        errno = try c.decodeIfPresent(Int32.self, forKey: .errno)
        reason = try c.decodeIfPresent(String.self, forKey: .reason)
        message = try c.decodeIfPresent(String.self, forKey: .message)
        gapFrom = try c.decodeIfPresent(UInt64.self, forKey: .gapFrom)
        gapTo = try c.decodeIfPresent(UInt64.self, forKey: .gapTo)
    }

    public func encode(to encoder: Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encodeIfPresent(intent, forKey: .intent)
        if !options.isEmpty { try c.encode(options, forKey: .options) }
        try c.encodeIfPresent(requestID, forKey: .requestID)
        try c.encodeIfPresent(presenterID, forKey: .presenterID)
        try c.encodeIfPresent(ask, forKey: .ask)
        try c.encodeIfPresent(latencyMicros, forKey: .latencyMicros)
        try c.encodeIfPresent(snapshotMethod, forKey: .snapshotMethod)
        try c.encodeIfPresent(bytes, forKey: .bytes)
        try c.encodeIfPresent(versionID, forKey: .versionID)
        try c.encodeIfPresent(resolution, forKey: .resolution)
        try c.encodeIfPresent(errno, forKey: .errno)
        try c.encodeIfPresent(reason, forKey: .reason)
        try c.encodeIfPresent(message, forKey: .message)
        try c.encodeIfPresent(gapFrom, forKey: .gapFrom)
        try c.encodeIfPresent(gapTo, forKey: .gapTo)
    }
}
