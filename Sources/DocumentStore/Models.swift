import Foundation

/// Why a version was kept.
public enum VersionReason: String, Sendable, Codable, CaseIterable {
    /// A presenter's loaded version, captured when it registered (where cloning is cheap).
    case base
    /// The document was replaced by a rename over it (atomic save); this is the old inode.
    case replaced
    /// The document was deleted; this is the old inode.
    case deleted
    /// Kept before the first in-place write to a document's base.
    case beforeWrite
    /// The current file, kept before a restore replaced it (so a restore is undoable).
    case restore
    /// The current file, kept before a conflict resolution (save, merge) replaced it.
    case resolution
}

/// One kept version of a document.
public struct Version: Sendable, Hashable, Codable {
    public var id: VersionID
    public var document: DocumentID
    /// The document's path (relative to the backing root) when the version was kept.
    public var path: String
    public var createdAt: Date
    /// Logical size in bytes.
    public var size: Int64
    public var reason: VersionReason
    public var method: SnapshotMethod
    /// The file's identity when it was kept.
    public var source: FileIdentity
    /// Whether a presenter's base or an open conflict holds on to it (retention never drops it).
    public var isPinned: Bool
    /// Who could read the file when it was kept; nil for a version an older store kept.
    public var sourceAccess: SourceAccess? = nil
}

/// The permissions of a version's file when it was kept: its mode, owner and group, and its POSIX
/// access ACL (the `system.posix_acl_access` value, nil when it had none). The bytes of a version
/// are for whoever could read that file then: a document made readable later (a `chmod`, a
/// readable file renamed over it) does not open its earlier versions to everyone.
public struct SourceAccess: Sendable, Hashable, Codable {
    public var mode: UInt32
    public var uid: UInt32
    public var gid: UInt32
    public var acl: [UInt8]?
}

/// A snapshot the store just took (or found it already had), for the event log.
public struct Snapshot: Sendable, Hashable {
    public var version: Version
    /// True when the bytes were already kept (same file identity) and nothing was done.
    public var reused: Bool
    /// Wall time spent taking it, in nanoseconds.
    public var elapsedNanoseconds: UInt64
}

/// What the mount saw happen to a document's path, from outside the document's presenters.
public enum ExternalChange: Sendable, Hashable {
    /// The file was written in place (or truncated).
    case changed(before: FileIdentity?, after: FileIdentity?)
    /// Another file was renamed over it, or it was deleted and re-created (atomic save styles).
    case replaced(before: FileIdentity?, after: FileIdentity?)
    /// The file is gone.
    case deleted(before: FileIdentity?)
}

/// The two kinds of "underlying file changed", as in the Nutrient guide.
public enum ChangeKind: String, Sendable, Codable {
    case change
    case deletion
    /// A process that presents nothing saved over the document after it changed since that process
    /// read it (only as a conflict's kind: "theirs" is kept, "mine" is the file the save left).
    case lostUpdate
}

/// A conflict's life cycle.
public enum ConflictState: String, Sendable, Codable {
    case open
    case resolved
}

/// A document changed or was deleted underneath a presenter with unsaved changes (or whose default
/// action is configured to ask).
public struct Conflict: Sendable, Hashable, Codable {
    public var id: ConflictID
    public var document: DocumentID
    public var path: String
    public var presenter: StorePresenterID
    public var kind: ChangeKind
    public var state: ConflictState
    public var resolution: Resolution?
    public var resolvedBy: String?
    public var createdAt: Date
    public var resolvedAt: Date?
    /// The file before the (first) change that caused the conflict.
    public var before: FileIdentity?
    /// The file after the latest change (nil for a deletion).
    public var after: FileIdentity?
    /// The presenter's base version, if it was kept (needed for merge).
    public var baseVersion: VersionID?
    /// The conflict copy written by keep both.
    public var conflictCopyPath: String?
    /// A lost update's kept version of theirs (the file the late save went over).
    public var theirsVersion: VersionID? = nil
    /// The user whose conflict it is (besides root, the one who may list and resolve it): the
    /// presenter's user as registered, or a lost update's saver's. Nil for a conflict recorded by
    /// an older store (or a presenter registered without one): root's alone.
    public var owner: UInt32? = nil
}

/// What the store did, or asks to be done, for one presenter of a changed document.
public enum PresenterAction: Sendable, Hashable {
    /// Unsaved changes (or no default action configured): a conflict to resolve.
    case conflict(Conflict)
    /// A default action the store applied to its own records: `.reload` (the presenter's base is
    /// now the new file; tell it to reload) or `.close` (its interest was dropped; tell it to close).
    case applied(Resolution)
}

/// One presenter's share of an underlying-file-changed event.
public struct PresenterOutcome: Sendable, Hashable {
    public var presenter: StorePresenterID
    public var action: PresenterAction
}

/// The single "underlying file changed" event for one external change of a presented document.
public struct UnderlyingFileChanged: Sendable, Hashable {
    public var document: DocumentID
    public var path: String
    public var kind: ChangeKind
    public var before: FileIdentity?
    public var after: FileIdentity?
    /// One entry per presenter of the document other than the writer.
    public var outcomes: [PresenterOutcome]
}

/// The presenter's bytes for save, keep both and merge.
public enum Contents: Sendable, Hashable {
    case bytes([UInt8])
    /// An absolute path to a file holding them (read, or cloned where possible).
    case file(absolutePath: String)
}

/// What a resolution did.
public struct ResolutionOutcome: Sendable, Hashable {
    public var conflict: Conflict
    /// The file written: the document for save and merge, the conflict copy for keep both.
    public var writtenPath: String?
    /// The document's file as it was before the resolution wrote over it.
    public var preserved: Snapshot?
    /// Merge only: how many hunks conflicted (marked in the written file).
    public var mergeConflicts: Int
    /// The document's identity afterwards (nil when it does not exist).
    public var after: FileIdentity?
    /// When save or merge wrote the document: the event for its other presenters.
    public var othersNotified: UnderlyingFileChanged?
    /// The resolution wrote the document anew: it did not exist (it was deleted), so it is a new
    /// item for the presenters of its folder, not a change.
    public var recreated = false
}

/// What a restore did.
public struct RestoreOutcome: Sendable, Hashable {
    /// The file as it was before the restore (restore it to undo).
    public var preserved: Snapshot?
    public var after: FileIdentity
    /// The event for the document's presenters (other than the restorer).
    public var presentersNotified: UnderlyingFileChanged?
    /// The restore wrote the document anew: it did not exist (it was deleted), so it is a new item
    /// for the presenters of its folder, not a change.
    public var recreated = false
}

/// A presenter's standing with a document.
public enum BaseState: Sendable, Hashable {
    /// Not captured yet: the loaded version is still the file itself (identity recorded); it will
    /// be captured by the first snapshot of the document.
    case pending(FileIdentity)
    /// Not copied: the loaded version is the first `size` bytes of this file (its device and
    /// inode), which has only been appended to since (an open for appending found the base
    /// pending: ``DocumentStore/preserveBeforeAppend(_:)``). Those bytes are copied before
    /// anything may change them (any other write, a truncate, a rename over, a deletion, a
    /// conflict that pins the base); a reload drops it without a copy.
    case prefix(FileIdentity)
    /// Kept as this version.
    case kept(VersionID)
    /// The file changed before the base could be captured (outside the store's view), or the
    /// presenter registered a file that did not exist.
    case lost
}

/// One presenter's interest in a document.
public struct PresenterInterest: Sendable, Hashable {
    public var presenter: StorePresenterID
    public var base: BaseState
    public var hasUnsavedChanges: Bool
    public var registeredAt: Date
}

/// A document as the store knows it.
public struct DocumentInfo: Sendable, Hashable {
    public var id: DocumentID
    /// Current path relative to the backing root; nil once another document took its path.
    public var path: String?
    /// Last identity the store saw; nil when deleted.
    public var identity: FileIdentity?
    public var presenters: [PresenterInterest]
}
