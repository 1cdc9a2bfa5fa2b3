// Open-ended, string-backed names for detail values. They are structs rather than enums so the
// coordinator can log a value this module has not heard of yet without a schema change; the
// well-known values are static constants.

/// What a presenter was asked to do (`presenterAsked`, `presenterAnswered`, `presenterTimedOut`).
public struct AskKind: RawRepresentable, Sendable, Hashable, Codable, ExpressibleByStringLiteral {
    public var rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
    public init(stringLiteral value: String) { rawValue = value }

    /// `relinquishPresentedItem(toReader:)`.
    public static let relinquishToReader: AskKind = "relinquishToReader"
    /// `relinquishPresentedItem(toWriter:)`.
    public static let relinquishToWriter: AskKind = "relinquishToWriter"
    /// `savePresentedItemChanges(completionHandler:)`.
    public static let saveChanges: AskKind = "saveChanges"
    /// `accommodatePresentedItemDeletion(completionHandler:)`.
    public static let accommodateDeletion: AskKind = "accommodateDeletion"
    /// `accommodatePresentedSubitemDeletion(at:completionHandler:)`.
    public static let accommodateSubitemDeletion: AskKind = "accommodateSubitemDeletion"
}

/// The direction of a coordinated access.
public struct IntentKind: RawRepresentable, Sendable, Hashable, Codable, ExpressibleByStringLiteral {
    public var rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
    public init(stringLiteral value: String) { rawValue = value }

    public static let read: IntentKind = "read"
    public static let write: IntentKind = "write"
}

/// How the document store kept a version (`snapshotTaken`).
public struct SnapshotMethod: RawRepresentable, Sendable, Hashable, Codable, ExpressibleByStringLiteral {
    public var rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
    public init(stringLiteral value: String) { rawValue = value }

    /// `link()` of the old inode into the store (rename over or deletion; no copy).
    public static let link: SnapshotMethod = "link"
    /// `FICLONE` copy-on-write clone (XFS reflink, btrfs).
    public static let reflink: SnapshotMethod = "reflink"
    /// A byte copy before the first in-place write (ext4 and others).
    public static let copy: SnapshotMethod = "copy"
}

/// How a conflict was resolved (`conflictResolved`).
public struct Resolution: RawRepresentable, Sendable, Hashable, Codable, ExpressibleByStringLiteral {
    public var rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
    public init(stringLiteral value: String) { rawValue = value }

    public static let close: Resolution = "close"
    /// Mine over theirs (restores a deleted file).
    public static let save: Resolution = "save"
    /// Theirs.
    public static let reload: Resolution = "reload"
    /// A named conflict copy next to the document.
    public static let keepBoth: Resolution = "keepBoth"
    /// A three-way text merge using the base.
    public static let merge: Resolution = "merge"
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
