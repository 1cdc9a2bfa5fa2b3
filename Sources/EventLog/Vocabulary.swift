// Open-ended, string-backed names for detail values. They are structs rather than enums so the
// coordinator can log a value this module has not heard of yet without a schema change, and a
// reader keeps a value a newer writer logged: the values the log alone has are static constants
// here; the snapshot method and the resolution are Vocabulary's enums, held as `Recorded`.
@_exported import Vocabulary

/// A value of one of Vocabulary's string enums (`SnapshotMethod`, `Resolution`) as a record holds
/// it: open, so a value this build does not know is kept as it was logged.
public struct Recorded<Known: RawRepresentable & Sendable & Hashable>: RawRepresentable, Sendable, Hashable, Codable,
    ExpressibleByStringLiteral where Known.RawValue == String
{
    public var rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
    public init(stringLiteral value: String) { rawValue = value }
    public init(_ known: Known) { rawValue = known.rawValue }

    /// The value, when this build knows it.
    public var known: Known? { Known(rawValue: rawValue) }
}

/// What a presenter was asked to do (`presenterAsked`, `presenterAnswered`, `presenterTimedOut`), by
/// the coordinator's names. Not the protocol's `AskKind`: the wire says `save` where the log says
/// `saveChanges`, and has `reacquire`, which is no ask of the coordinator's.
public struct LoggedAsk: RawRepresentable, Sendable, Hashable, Codable, ExpressibleByStringLiteral {
    public var rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
    public init(stringLiteral value: String) { rawValue = value }

    /// `relinquishPresentedItem(toReader:)`.
    public static let relinquishToReader: LoggedAsk = "relinquishToReader"
    /// `relinquishPresentedItem(toWriter:)`.
    public static let relinquishToWriter: LoggedAsk = "relinquishToWriter"
    /// `savePresentedItemChanges(completionHandler:)`.
    public static let saveChanges: LoggedAsk = "saveChanges"
    /// `accommodatePresentedItemDeletion(completionHandler:)`.
    public static let accommodateDeletion: LoggedAsk = "accommodateDeletion"
    /// `accommodatePresentedSubitemDeletion(at:completionHandler:)`.
    public static let accommodateSubitemDeletion: LoggedAsk = "accommodateSubitemDeletion"
}

/// The direction of a coordinated access.
public struct IntentKind: RawRepresentable, Sendable, Hashable, Codable, ExpressibleByStringLiteral {
    public var rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
    public init(stringLiteral value: String) { rawValue = value }

    public static let read: IntentKind = "read"
    public static let write: IntentKind = "write"
}

/// Why a `gap` record exists.
public struct GapReason: RawRepresentable, Sendable, Hashable, Codable, ExpressibleByStringLiteral {
    public var rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
    public init(stringLiteral value: String) { rawValue = value }

    /// Retention deleted the range (the reader's cursor is older than the oldest kept record).
    public static let retention: GapReason = "retention"
    /// The writer's queue was full (memory pressure) and these records were never written.
    public static let dropped: GapReason = "dropped"
    /// Records are missing from storage for another reason (a damaged or deleted segment).
    public static let missing: GapReason = "missing"
}
