// The document store's messages (docs/protocol.md, "The document store"): a presenter's unsaved
// flag, the "underlying file changed" event, conflicts and their resolution, kept versions.

/// A document's stable id in the mount's document store (`document` on the wire).
public struct DocumentID: RawRepresentable, Hashable, Comparable, Sendable, CustomStringConvertible {
    public var rawValue: UInt64
    public init(rawValue: UInt64) { self.rawValue = rawValue }
    public init(_ rawValue: UInt64) { self.rawValue = rawValue }
    public var description: String { "doc#\(rawValue)" }
    public static func < (a: Self, b: Self) -> Bool { a.rawValue < b.rawValue }
}

/// A conflict's id in the document store; never reused (`coordfs conflicts` shows the same number).
public struct ConflictID: RawRepresentable, Hashable, Comparable, Sendable, CustomStringConvertible {
    public var rawValue: UInt64
    public init(rawValue: UInt64) { self.rawValue = rawValue }
    public init(_ rawValue: UInt64) { self.rawValue = rawValue }
    public var description: String { "conflict#\(rawValue)" }
    public static func < (a: Self, b: Self) -> Bool { a.rawValue < b.rawValue }
}

/// A kept version's id in the document store (`coordfs versions` shows the same number).
public struct VersionID: RawRepresentable, Hashable, Comparable, Sendable, CustomStringConvertible {
    public var rawValue: UInt64
    public init(rawValue: UInt64) { self.rawValue = rawValue }
    public init(_ rawValue: UInt64) { self.rawValue = rawValue }
    public var description: String { "version#\(rawValue)" }
    public static func < (a: Self, b: Self) -> Bool { a.rawValue < b.rawValue }
}

/// One state of a file: its inode (device, inode number), size and modification time. Two equal
/// identities are the same bytes as far as the store can tell.
///
/// On the wire `device`, `inode` and `mtimeNs` are decimal strings: they are 64-bit and may
/// exceed 2^53 − 1, which JSON numbers do not carry exactly in every language.
public struct DocumentIdentity: Sendable, Hashable, CustomStringConvertible {
    /// `st_dev`.
    public var device: UInt64
    /// `st_ino`.
    public var inode: UInt64
    /// `st_size`, in bytes.
    public var size: UInt64
    /// `st_mtim` in nanoseconds since the epoch.
    public var modificationTimeNanoseconds: Int64
    public init(device: UInt64, inode: UInt64, size: UInt64, modificationTimeNanoseconds: Int64) {
        self.device = device
        self.inode = inode
        self.size = size
        self.modificationTimeNanoseconds = modificationTimeNanoseconds
    }
    public var description: String { "dev \(device) ino \(inode) size \(size) mtime \(modificationTimeNanoseconds)ns" }
}

/// What happened to a presented document: changed (written, or replaced by a save) or deleted.
public enum DocumentChangeKind: String, Sendable, Hashable, CaseIterable {
    case change
    case deletion
}

/// What the store did for a presenter whose document changed underneath it, or asks it to do.
public enum DocumentAction: Sendable, Hashable {
    /// No unsaved changes: the store took the new file as the presenter's base; reload it.
    case reload
    /// Deleted and nothing unsaved: the store dropped the presenter's interest; close it.
    case close
    /// Unsaved changes (or a mount configured to ask): resolve this conflict.
    case conflict(ConflictID)
    /// The store could not record the change (a full disk, an I/O error: `message` says which):
    /// it decided neither a reload nor a conflict, and may not have kept the version the presenter
    /// loaded. The file changed; the presenter must look at it itself.
    case failed(message: String)

    /// The wire name (`action`).
    public var name: String {
        switch self {
        case .reload: return "reload"
        case .close: return "close"
        case .conflict: return "conflict"
        case .failed: return "failed"
        }
    }
}

/// The one "underlying file changed" event a presenter gets for one external change or deletion
/// of its document (the `documentChanged` notification).
public struct DocumentChange: Sendable, Hashable {
    public var document: DocumentID
    /// The document's path.
    public var path: MountPath
    public var kind: DocumentChangeKind
    /// The file before the change.
    public var before: DocumentIdentity?
    /// The file after it (nil for a deletion).
    public var after: DocumentIdentity?
    public var action: DocumentAction
    public init(document: DocumentID, path: MountPath, kind: DocumentChangeKind, before: DocumentIdentity?,
                after: DocumentIdentity?, action: DocumentAction) {
        self.document = document
        self.path = path
        self.kind = kind
        self.before = before
        self.after = after
        self.action = action
    }
}

/// `setUnsavedChanges`: whether a presenter has unsaved changes in its document; decides between
/// a conflict and the default action when the document changes underneath it. Replied to with `ok`.
public struct SetUnsavedChanges: Sendable, Hashable {
    public var id: RequestID
    public var presenter: PresenterID
    public var unsaved: Bool
    public init(id: RequestID, presenter: PresenterID, unsaved: Bool) {
        self.id = id
        self.presenter = presenter
        self.unsaved = unsaved
    }
}

/// `conflicts`: the open conflicts of one presenter, or of every presenter of this connection
/// (every open conflict in the store, for root). Replied to with `conflictList`.
public struct ConflictsQuery: Sendable, Hashable {
    public var id: RequestID
    public var presenter: PresenterID?
    public init(id: RequestID, presenter: PresenterID? = nil) {
        self.id = id
        self.presenter = presenter
    }
}

/// One open conflict, as `conflictList` reports it.
public struct ConflictInfo: Sendable, Hashable {
    public var conflict: ConflictID
    public var document: DocumentID
    public var path: MountPath
    /// The presenter the conflict belongs to, when it is one of this daemon's (nil for a presenter
    /// that is gone, for example one registered before a restart).
    public var presenter: PresenterID?
    /// The store's name of that presenter (as `coordfs conflicts` shows it).
    public var storePresenter: String
    public var kind: DocumentChangeKind
    /// When the conflict opened, in milliseconds since the epoch.
    public var createdMs: UInt64
    public var before: DocumentIdentity?
    public var after: DocumentIdentity?
    /// The presenter's base (what a merge uses), when it was kept.
    public var baseVersion: VersionID?
    public init(conflict: ConflictID, document: DocumentID, path: MountPath, presenter: PresenterID?, storePresenter: String,
                kind: DocumentChangeKind, createdMs: UInt64, before: DocumentIdentity?, after: DocumentIdentity?, baseVersion: VersionID?) {
        self.conflict = conflict
        self.document = document
        self.path = path
        self.presenter = presenter
        self.storePresenter = storePresenter
        self.kind = kind
        self.createdMs = createdMs
        self.before = before
        self.after = after
        self.baseVersion = baseVersion
    }
}

/// `conflictList`: the reply to `conflicts`, oldest first.
public struct ConflictList: Sendable, Hashable {
    public var id: RequestID
    public var conflicts: [ConflictInfo]
    public init(id: RequestID, conflicts: [ConflictInfo]) {
        self.id = id
        self.conflicts = conflicts
    }
}

/// The ways out of a conflict (docs/document-store.md, "Resolutions").
public enum ConflictResolution: String, Sendable, Hashable, CaseIterable {
    /// Drop the document and "mine"; the file is left as it is.
    case close
    /// Write "mine" over the file (restores a deleted file).
    case save
    /// Take "theirs"; refused for a deletion.
    case reload
    /// Write "mine" as a named conflict copy beside the file.
    case keepBoth
    /// Three-way merge of "mine" and the file against the base, for text; refused for a deletion.
    case merge

    /// Whether the resolution needs the presenter's bytes.
    public var needsContents: Bool { self == .save || self == .keepBoth || self == .merge }
}

/// The presenter's bytes for save, keep both and merge.
public enum ResolutionContents: Sendable, Hashable {
    /// The bytes themselves (`mine`, base64; they must fit in one frame).
    case bytes([UInt8])
    /// A file inside the mount that the peer may read (`minePath`).
    case path(MountPath)
}

/// `resolve`: resolves an open conflict. Replied to with `resolved`.
public struct Resolve: Sendable, Hashable {
    public var id: RequestID
    public var conflict: ConflictID
    public var resolution: ConflictResolution
    public var mine: ResolutionContents?
    public init(id: RequestID, conflict: ConflictID, resolution: ConflictResolution, mine: ResolutionContents? = nil) {
        self.id = id
        self.conflict = conflict
        self.resolution = resolution
        self.mine = mine
    }
}

/// `resolved`: what a resolution did.
public struct Resolved: Sendable, Hashable {
    public var id: RequestID
    public var conflict: ConflictID
    public var resolution: ConflictResolution
    /// The document's path.
    public var path: MountPath
    /// The file written: the document (save, merge) or the conflict copy (keep both).
    public var writtenPath: MountPath?
    /// The version keeping the file the resolution wrote over (restore it to undo).
    public var preservedVersion: VersionID?
    /// Merge: how many hunks conflicted (marked in the file as `git merge-file` marks them).
    public var mergeConflicts: Int
    /// The document afterwards (nil when it does not exist).
    public var after: DocumentIdentity?
    public init(id: RequestID, conflict: ConflictID, resolution: ConflictResolution, path: MountPath, writtenPath: MountPath? = nil,
                preservedVersion: VersionID? = nil, mergeConflicts: Int = 0, after: DocumentIdentity? = nil) {
        self.id = id
        self.conflict = conflict
        self.resolution = resolution
        self.path = path
        self.writtenPath = writtenPath
        self.preservedVersion = preservedVersion
        self.mergeConflicts = mergeConflicts
        self.after = after
    }
}

/// `versions`: the kept versions of the document at a path. Replied to with `versionList`.
public struct VersionsQuery: Sendable, Hashable {
    public var id: RequestID
    public var path: MountPath
    public init(id: RequestID, path: MountPath) {
        self.id = id
        self.path = path
    }
}

/// One kept version, as `versionList` reports it.
public struct VersionInfo: Sendable, Hashable {
    public var version: VersionID
    public var document: DocumentID
    /// The document's path when the version was kept.
    public var path: MountPath
    /// When it was kept, in milliseconds since the epoch.
    public var createdMs: UInt64
    public var size: UInt64
    /// Why it was kept: `base`, `replaced`, `deleted`, `beforeWrite`, `restore`, `resolution`
    /// (an open set).
    public var reason: String
    /// How it is stored: `link`, `reflink`, `copy` (an open set).
    public var method: String
    /// Whether a presenter's base or an open conflict holds on to it.
    public var pinned: Bool
    public init(version: VersionID, document: DocumentID, path: MountPath, createdMs: UInt64, size: UInt64,
                reason: String, method: String, pinned: Bool) {
        self.version = version
        self.document = document
        self.path = path
        self.createdMs = createdMs
        self.size = size
        self.reason = reason
        self.method = method
        self.pinned = pinned
    }
}

/// `versionList`: the reply to `versions`, newest first (empty when the store keeps nothing there).
public struct VersionList: Sendable, Hashable {
    public var id: RequestID
    public var versions: [VersionInfo]
    public init(id: RequestID, versions: [VersionInfo]) {
        self.id = id
        self.versions = versions
    }
}

/// `readVersion`: reads bytes of a kept version. Replied to with `versionData`.
public struct ReadVersion: Sendable, Hashable {
    public var id: RequestID
    public var version: VersionID
    public var offset: UInt64
    /// At most this many bytes (default and maximum: `maxLength`).
    public var length: UInt32?
    /// The most one `versionData` carries (512 KiB: its base64 fits in a 1 MiB frame).
    public static let maxLength: UInt32 = 512 * 1024
    public init(id: RequestID, version: VersionID, offset: UInt64 = 0, length: UInt32? = nil) {
        self.id = id
        self.version = version
        self.offset = offset
        self.length = length
    }
}

/// `versionData`: bytes of a kept version from `offset`; `eof` once the last byte was sent.
public struct VersionData: Sendable, Hashable {
    public var id: RequestID
    public var version: VersionID
    public var offset: UInt64
    /// The version's total size.
    public var size: UInt64
    public var data: [UInt8]
    public var eof: Bool
    public init(id: RequestID, version: VersionID, offset: UInt64, size: UInt64, data: [UInt8], eof: Bool) {
        self.id = id
        self.version = version
        self.offset = offset
        self.size = size
        self.data = data
        self.eof = eof
    }
}

/// `restore`: writes a kept version back over the document at `path` (re-creating it when it
/// was deleted), as a coordinated write made by the daemon for the peer: the current file is
/// kept first as a version (so the restore is undoable), presenters are asked first and told
/// after. The peer must be allowed to write (replace) the document, and `version` must be one
/// of that document's. Replied to with `restored`.
public struct Restore: Sendable, Hashable {
    public var id: RequestID
    public var version: VersionID
    /// The document the version is restored to.
    public var path: MountPath
    public init(id: RequestID, version: VersionID, path: MountPath) {
        self.id = id
        self.version = version
        self.path = path
    }
}

/// `restored`: what a restore did.
public struct Restored: Sendable, Hashable {
    public var id: RequestID
    public var version: VersionID
    /// The document written.
    public var path: MountPath
    /// The version keeping the file the restore wrote over (restore it to undo); nil when there was none.
    public var preservedVersion: VersionID?
    /// The document afterwards.
    public var after: DocumentIdentity?
    public init(id: RequestID, version: VersionID, path: MountPath, preservedVersion: VersionID? = nil, after: DocumentIdentity? = nil) {
        self.id = id
        self.version = version
        self.path = path
        self.preservedVersion = preservedVersion
        self.after = after
    }
}
