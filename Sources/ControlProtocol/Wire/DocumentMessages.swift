// The document store's messages (docs/protocol.md, "The document store"): a presenter's unsaved
// flag, the "underlying file changed" event, conflicts and their resolution, kept versions.

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
    /// A conflict's kind only: a process saved over a version changed since it read it.
    case lostUpdate
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

extension DocumentChange {
    /// Writes the `documentChanged` notification's fields.
    func encode(to o: inout JSONObject) {
        o["document"] = .int(Int64(document.rawValue))
        o["path"] = .string(path.wireValue)
        o["kind"] = .string(kind.rawValue)
        if let before { o["before"] = before.wireValue }
        if let after { o["after"] = after.wireValue }
        o["action"] = .string(action.name)
        if case .conflict(let conflict) = action { o["conflict"] = .int(Int64(conflict.rawValue)) }
        if case .failed(let message) = action { o["message"] = .string(message) }
    }
}

/// `setUnsavedChanges`: whether a presenter has unsaved changes in its document; decides between
/// a conflict and the default action when the document changes underneath it. Replied to with `ok`.
package struct SetUnsavedChanges: Sendable, Hashable {
    package var id: RequestID
    package var presenter: PresenterID
    package var unsaved: Bool
    package init(id: RequestID, presenter: PresenterID, unsaved: Bool) {
        self.id = id
        self.presenter = presenter
        self.unsaved = unsaved
    }
}

extension SetUnsavedChanges: WireMessage {
    static let wireName = "setUnsavedChanges"
    static let direction = ControlMessage.Direction.toDaemon
    var requestID: RequestID? { id }
    var wrapped: ControlMessage { .setUnsavedChanges(self) }

    init(wire fields: inout Fields) throws(ProtocolError) {
        id = try fields.requestID()
        presenter = PresenterID(try fields.uint("presenter"))
        unsaved = try fields.bool("unsaved")
    }

    func encode(to o: inout JSONObject) {
        o.put(id: id)
        o["presenter"] = .int(Int64(presenter.rawValue))
        o["unsaved"] = .bool(unsaved)
    }
}

/// `conflicts`: the open conflicts of one presenter, or of every presenter of this connection
/// (every open conflict in the store, for root). Replied to with `conflictList`.
package struct ConflictsQuery: Sendable, Hashable {
    package var id: RequestID
    package var presenter: PresenterID?
    package init(id: RequestID, presenter: PresenterID? = nil) {
        self.id = id
        self.presenter = presenter
    }
}

extension ConflictsQuery: WireMessage {
    static let wireName = "conflicts"
    static let direction = ControlMessage.Direction.toDaemon
    var requestID: RequestID? { id }
    var wrapped: ControlMessage { .conflicts(self) }

    init(wire fields: inout Fields) throws(ProtocolError) {
        id = try fields.requestID()
        presenter = try fields.optionalUInt("presenter").map(PresenterID.init(rawValue:))
    }

    func encode(to o: inout JSONObject) {
        o.put(id: id)
        if let presenter { o["presenter"] = .int(Int64(presenter.rawValue)) }
    }
}

/// One open conflict, as `conflictList` reports it.
package struct ConflictInfo: Sendable, Hashable {
    package var conflict: ConflictID
    package var document: DocumentID
    package var path: MountPath
    /// The presenter the conflict belongs to, when it is one of this daemon's (nil for a presenter
    /// that is gone, for example one registered before a restart).
    package var presenter: PresenterID?
    /// The store's name of that presenter (as `coordfs conflicts` shows it).
    package var storePresenter: String
    package var kind: DocumentChangeKind
    /// When the conflict opened, in milliseconds since the epoch.
    package var createdMs: UInt64
    package var before: DocumentIdentity?
    package var after: DocumentIdentity?
    /// The presenter's base (what a merge uses), when it was kept.
    package var baseVersion: VersionID?
    /// A lost update's theirs: the kept version its late save went over (nil for a presenter's
    /// conflict, or when it was not kept).
    package var theirsVersion: VersionID?
    package init(conflict: ConflictID, document: DocumentID, path: MountPath, presenter: PresenterID?, storePresenter: String,
                kind: DocumentChangeKind, createdMs: UInt64, before: DocumentIdentity?, after: DocumentIdentity?, baseVersion: VersionID?,
                theirsVersion: VersionID? = nil) {
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
        self.theirsVersion = theirsVersion
    }
}

/// `conflictList`: the reply to `conflicts`, oldest first.
package struct ConflictList: Sendable, Hashable {
    package var id: RequestID
    package var conflicts: [ConflictInfo]
    package init(id: RequestID, conflicts: [ConflictInfo]) {
        self.id = id
        self.conflicts = conflicts
    }
}

extension ConflictList: WireMessage {
    static let wireName = "conflictList"
    static let direction = ControlMessage.Direction.toClient
    var requestID: RequestID? { id }
    var wrapped: ControlMessage { .conflictList(self) }

    init(wire fields: inout Fields) throws(ProtocolError) {
        id = try fields.requestID()
        conflicts = []
        for (offset, value) in try fields.array("conflicts").enumerated() {
            let item = try fields.nested(value, "conflicts[\(offset)]")
            conflicts.append(ConflictInfo(
                conflict: ConflictID(try item.uint("conflict")), document: DocumentID(try item.uint("document")),
                path: try item.path("path"), presenter: try item.optionalUInt("presenter").map(PresenterID.init(rawValue:)),
                storePresenter: try item.string("storePresenter", maxBytes: 512), kind: try item.enumeration("kind"),
                createdMs: try item.uint("createdMs"), before: try item.optionalIdentity("before"),
                after: try item.optionalIdentity("after"), baseVersion: try item.optionalUInt("baseVersion").map(VersionID.init(rawValue:)),
                theirsVersion: try item.optionalUInt("theirsVersion").map(VersionID.init(rawValue:))))
        }
    }

    func encode(to o: inout JSONObject) {
        o.put(id: id)
        o["conflicts"] = .array(conflicts.map { c in
            var item = JSONObject()
            item["conflict"] = .int(Int64(c.conflict.rawValue))
            item["document"] = .int(Int64(c.document.rawValue))
            item["path"] = .string(c.path.wireValue)
            if let presenter = c.presenter { item["presenter"] = .int(Int64(presenter.rawValue)) }
            item["storePresenter"] = .string(c.storePresenter)
            item["kind"] = .string(c.kind.rawValue)
            item["createdMs"] = .int(Int64(c.createdMs))
            if let before = c.before { item["before"] = before.wireValue }
            if let after = c.after { item["after"] = after.wireValue }
            if let base = c.baseVersion { item["baseVersion"] = .int(Int64(base.rawValue)) }
            if let theirs = c.theirsVersion { item["theirsVersion"] = .int(Int64(theirs.rawValue)) }
            return .object(item)
        })
    }
}

/// The ways out of a conflict (docs/document-store.md, "Resolutions").
/// The presenter's bytes for save, keep both and merge.
package enum ResolutionContents: Sendable, Hashable {
    /// The bytes themselves (`mine`, base64; they must fit in one frame).
    case bytes([UInt8])
    /// A file inside the mount that the peer may read (`minePath`).
    case path(MountPath)
}

/// `resolve`: resolves an open conflict. Replied to with `resolved`.
package struct Resolve: Sendable, Hashable {
    package var id: RequestID
    package var conflict: ConflictID
    package var resolution: Resolution
    package var mine: ResolutionContents?
    package init(id: RequestID, conflict: ConflictID, resolution: Resolution, mine: ResolutionContents? = nil) {
        self.id = id
        self.conflict = conflict
        self.resolution = resolution
        self.mine = mine
    }
}

extension Resolve: WireMessage {
    static let wireName = "resolve"
    static let direction = ControlMessage.Direction.toDaemon
    var requestID: RequestID? { id }
    var wrapped: ControlMessage { .resolve(self) }

    init(wire fields: inout Fields) throws(ProtocolError) {
        id = try fields.requestID()
        conflict = ConflictID(try fields.uint("conflict"))
        resolution = try fields.enumeration("resolution")
        mine = nil
        if let bytes = try fields.optionalBase64("mine") { mine = .bytes(bytes) }
        if let path = try fields.optionalPath("minePath") {
            if mine != nil { throw fields.fail(.invalidValue, "give either \"mine\" or \"minePath\", not both") }
            mine = .path(path)
        }
    }

    func encode(to o: inout JSONObject) {
        o.put(id: id)
        o["conflict"] = .int(Int64(conflict.rawValue))
        o["resolution"] = .string(resolution.rawValue)
        switch mine {
        case .bytes(let bytes)?: o["mine"] = .string(Base64.encode(bytes))
        case .path(let path)?: o["minePath"] = .string(path.wireValue)
        case nil: break
        }
    }
}

/// `resolved`: what a resolution did.
package struct Resolved: Sendable, Hashable {
    package var id: RequestID
    package var conflict: ConflictID
    package var resolution: Resolution
    /// The document's path.
    package var path: MountPath
    /// The file written: the document (save, merge) or the conflict copy (keep both).
    package var writtenPath: MountPath?
    /// The version keeping the file the resolution wrote over (restore it to undo).
    package var preservedVersion: VersionID?
    /// Merge: how many hunks conflicted (marked in the file as `git merge-file` marks them).
    package var mergeConflicts: Int
    /// The document afterwards (nil when it does not exist).
    package var after: DocumentIdentity?
    package init(id: RequestID, conflict: ConflictID, resolution: Resolution, path: MountPath, writtenPath: MountPath? = nil,
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

extension Resolved: WireMessage {
    static let wireName = "resolved"
    static let direction = ControlMessage.Direction.toClient
    var requestID: RequestID? { id }
    var wrapped: ControlMessage { .resolved(self) }

    init(wire fields: inout Fields) throws(ProtocolError) {
        id = try fields.requestID()
        conflict = ConflictID(try fields.uint("conflict"))
        resolution = try fields.enumeration("resolution")
        path = try fields.path("path")
        writtenPath = try fields.optionalPath("writtenPath")
        preservedVersion = try fields.optionalUInt("preservedVersion").map(VersionID.init(rawValue:))
        mergeConflicts = Int(try fields.uint("mergeConflicts", max: UInt64(Int32.max)))
        after = try fields.optionalIdentity("after")
    }

    func encode(to o: inout JSONObject) {
        o.put(id: id)
        o["conflict"] = .int(Int64(conflict.rawValue))
        o["resolution"] = .string(resolution.rawValue)
        o["path"] = .string(path.wireValue)
        if let writtenPath { o["writtenPath"] = .string(writtenPath.wireValue) }
        if let preservedVersion { o["preservedVersion"] = .int(Int64(preservedVersion.rawValue)) }
        o["mergeConflicts"] = .int(Int64(mergeConflicts))
        if let after { o["after"] = after.wireValue }
    }
}

/// `versions`: the kept versions of the document at a path. Replied to with `versionList`.
package struct VersionsQuery: Sendable, Hashable {
    package var id: RequestID
    package var path: MountPath
    package init(id: RequestID, path: MountPath) {
        self.id = id
        self.path = path
    }
}

extension VersionsQuery: PathRequest {
    static let wireName = "versions"
    static let direction = ControlMessage.Direction.toDaemon
    var wrapped: ControlMessage { .versions(self) }
}

/// `removeVersions`: forget the kept versions of the document at a path that nothing holds on to
/// (Foundation's `removeOtherVersionsOfItem(at:)`). Replied to with `ok`.
package struct RemoveVersions: Sendable, Hashable {
    package var id: RequestID
    package var path: MountPath
    package init(id: RequestID, path: MountPath) {
        self.id = id
        self.path = path
    }
}

extension RemoveVersions: PathRequest {
    static let wireName = "removeVersions"
    static let direction = ControlMessage.Direction.toDaemon
    var wrapped: ControlMessage { .removeVersions(self) }
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
package struct VersionList: Sendable, Hashable {
    package var id: RequestID
    package var versions: [VersionInfo]
    package init(id: RequestID, versions: [VersionInfo]) {
        self.id = id
        self.versions = versions
    }
}

extension VersionList: WireMessage {
    static let wireName = "versionList"
    static let direction = ControlMessage.Direction.toClient
    var requestID: RequestID? { id }
    var wrapped: ControlMessage { .versionList(self) }

    init(wire fields: inout Fields) throws(ProtocolError) {
        id = try fields.requestID()
        versions = []
        for (offset, value) in try fields.array("versions").enumerated() {
            let item = try fields.nested(value, "versions[\(offset)]")
            versions.append(VersionInfo(
                version: VersionID(try item.uint("version")), document: DocumentID(try item.uint("document")),
                path: try item.path("path"), createdMs: try item.uint("createdMs"), size: try item.uint("size"),
                reason: try item.string("reason", maxBytes: 64), method: try item.string("method", maxBytes: 64),
                pinned: try item.bool("pinned")))
        }
    }

    func encode(to o: inout JSONObject) {
        o.put(id: id)
        o["versions"] = .array(versions.map { v in
            .object(JSONObject([
                "version": .int(Int64(v.version.rawValue)), "document": .int(Int64(v.document.rawValue)),
                "path": .string(v.path.wireValue), "createdMs": .int(Int64(v.createdMs)), "size": .int(Int64(v.size)),
                "reason": .string(v.reason), "method": .string(v.method), "pinned": .bool(v.pinned),
            ]))
        })
    }
}

/// `readVersion`: reads bytes of a kept version. Replied to with `versionData`.
package struct ReadVersion: Sendable, Hashable {
    package var id: RequestID
    package var version: VersionID
    package var offset: UInt64
    /// At most this many bytes (default and maximum: `maxLength`).
    package var length: UInt32?
    /// The most one `versionData` carries (512 KiB: its base64 fits in a 1 MiB frame).
    package static let maxLength: UInt32 = 512 * 1024
    package init(id: RequestID, version: VersionID, offset: UInt64 = 0, length: UInt32? = nil) {
        self.id = id
        self.version = version
        self.offset = offset
        self.length = length
    }
}

extension ReadVersion: WireMessage {
    static let wireName = "readVersion"
    static let direction = ControlMessage.Direction.toDaemon
    var requestID: RequestID? { id }
    var wrapped: ControlMessage { .readVersion(self) }

    init(wire fields: inout Fields) throws(ProtocolError) {
        id = try fields.requestID()
        version = VersionID(try fields.uint("version"))
        offset = try fields.optionalUInt("offset") ?? 0
        length = nil
        if let value = try fields.optionalUInt("length", max: UInt64(Self.maxLength)) {
            if value == 0 { throw fields.fail(.invalidValue, "field \"length\" must be between 1 and \(Self.maxLength)") }
            length = UInt32(value)
        }
    }

    func encode(to o: inout JSONObject) {
        o.put(id: id)
        o["version"] = .int(Int64(version.rawValue))
        o["offset"] = .int(Int64(offset))
        if let length { o["length"] = .int(Int64(length)) }
    }
}

/// `versionData`: bytes of a kept version from `offset`; `eof` once the last byte was sent.
package struct VersionData: Sendable, Hashable {
    package var id: RequestID
    package var version: VersionID
    package var offset: UInt64
    /// The version's total size.
    package var size: UInt64
    package var data: [UInt8]
    package var eof: Bool
    package init(id: RequestID, version: VersionID, offset: UInt64, size: UInt64, data: [UInt8], eof: Bool) {
        self.id = id
        self.version = version
        self.offset = offset
        self.size = size
        self.data = data
        self.eof = eof
    }
}

extension VersionData: WireMessage {
    static let wireName = "versionData"
    static let direction = ControlMessage.Direction.toClient
    var requestID: RequestID? { id }
    var wrapped: ControlMessage { .versionData(self) }

    init(wire fields: inout Fields) throws(ProtocolError) {
        id = try fields.requestID()
        guard let data = try fields.optionalBase64("data") else { throw fields.fail(.missingField, "missing field \"data\"") }
        self.data = data
        version = VersionID(try fields.uint("version"))
        offset = try fields.uint("offset")
        size = try fields.uint("size")
        eof = try fields.bool("eof")
    }

    func encode(to o: inout JSONObject) {
        o.put(id: id)
        o["version"] = .int(Int64(version.rawValue))
        o["offset"] = .int(Int64(offset))
        o["size"] = .int(Int64(size))
        o["data"] = .string(Base64.encode(data))
        o["eof"] = .bool(eof)
    }
}

/// `restore`: writes a kept version back over the document at `path` (re-creating it when it
/// was deleted), as a coordinated write made by the daemon for the peer: the current file is
/// kept first as a version (so the restore is undoable), presenters are asked first and told
/// after. The peer must be allowed to write (replace) the document, and `version` must be one
/// of that document's. Replied to with `restored`.
package struct Restore: Sendable, Hashable {
    package var id: RequestID
    package var version: VersionID
    /// The document the version is restored to.
    package var path: MountPath
    package init(id: RequestID, version: VersionID, path: MountPath) {
        self.id = id
        self.version = version
        self.path = path
    }
}

extension Restore: WireMessage {
    static let wireName = "restore"
    static let direction = ControlMessage.Direction.toDaemon
    var requestID: RequestID? { id }
    var wrapped: ControlMessage { .restore(self) }

    init(wire fields: inout Fields) throws(ProtocolError) {
        id = try fields.requestID()
        version = VersionID(try fields.uint("version"))
        path = try fields.path("path")
    }

    func encode(to o: inout JSONObject) {
        o.put(id: id)
        o["version"] = .int(Int64(version.rawValue))
        o["path"] = .string(path.wireValue)
    }
}

/// `restored`: what a restore did.
package struct Restored: Sendable, Hashable {
    package var id: RequestID
    package var version: VersionID
    /// The document written.
    package var path: MountPath
    /// The version keeping the file the restore wrote over (restore it to undo); nil when there was none.
    package var preservedVersion: VersionID?
    /// The document afterwards.
    package var after: DocumentIdentity?
    package init(id: RequestID, version: VersionID, path: MountPath, preservedVersion: VersionID? = nil, after: DocumentIdentity? = nil) {
        self.id = id
        self.version = version
        self.path = path
        self.preservedVersion = preservedVersion
        self.after = after
    }
}

extension Restored: WireMessage {
    static let wireName = "restored"
    static let direction = ControlMessage.Direction.toClient
    var requestID: RequestID? { id }
    var wrapped: ControlMessage { .restored(self) }

    init(wire fields: inout Fields) throws(ProtocolError) {
        id = try fields.requestID()
        version = VersionID(try fields.uint("version"))
        path = try fields.path("path")
        preservedVersion = try fields.optionalUInt("preservedVersion").map(VersionID.init(rawValue:))
        after = try fields.optionalIdentity("after")
    }

    func encode(to o: inout JSONObject) {
        o.put(id: id)
        o["version"] = .int(Int64(version.rawValue))
        o["path"] = .string(path.wireValue)
        if let preservedVersion { o["preservedVersion"] = .int(Int64(preservedVersion.rawValue)) }
        if let after { o["after"] = after.wireValue }
    }
}
