import ControlProtocol
import FoundationEssentials

/// A version of a document in a coordfs mount, as Foundation's `NSFileVersion`: a version the
/// mount's document store kept (`otherVersionsOfItem(at:)`), or an unresolved conflict of one of
/// this process's presenters (`unresolvedConflictVersionsOfItem(at:)`).
public struct FileVersion: Sendable, Hashable {
    /// What the version is in the store.
    public enum Identifier: Sendable, Hashable {
        /// A kept version (restorable).
        case version(VersionID)
        /// An open (or, once resolved, a closed) conflict.
        case conflict(ConflictID)
    }

    /// Foundation's `persistentIdentifier`.
    public var persistentIdentifier: Identifier
    /// The document's absolute path (the name it had when the version was kept).
    public var path: String
    /// When it was kept, or when the conflict opened, in milliseconds since the epoch.
    public var createdMs: UInt64
    /// Foundation's `isConflict`.
    public var isConflict: Bool
    /// Foundation's `isResolved`: false for an open conflict; set it with ``markResolved()``.
    public var isResolved: Bool

    /// The document as a file URL.
    public var url: URL { URL(fileURLWithPath: path) }
    /// Foundation's `modificationDate`.
    public var modificationDate: Date { Date(timeIntervalSince1970: Double(createdMs) / 1000) }

    /// Foundation's `otherVersionsOfItem(at:)`: the versions the store kept of the document at
    /// `path` (absolute, inside a coordfs mount), newest first. Needs read permission on it.
    public static func otherVersionsOfItem(at path: String, locator: ControlSocketLocator = ControlSocketLocator()) async throws(CoordFSClientError) -> [FileVersion] {
        let (mount, relative) = try CoordFSMount.containing(path, locator: locator)
        return try await mount.versions(of: relative).map {
            FileVersion(persistentIdentifier: .version($0.version), path: mount.absolutePath($0.path), createdMs: $0.createdMs,
                        isConflict: false, isResolved: true)
        }
    }

    /// Foundation's `unresolvedConflictVersionsOfItem(at:)`: the open conflicts of this process's
    /// presenters of the document at `path` (every presenter's, for root), oldest first.
    public static func unresolvedConflictVersionsOfItem(at path: String, locator: ControlSocketLocator = ControlSocketLocator()) async throws(CoordFSClientError) -> [FileVersion] {
        let (mount, relative) = try CoordFSMount.containing(path, locator: locator)
        let all: [ConflictInfo]
        do { all = try await mount.session.conflicts() } catch { throw CoordFSClientError(error) }
        return all.filter { $0.path == relative }.map {
            FileVersion(persistentIdentifier: .conflict($0.conflict), path: mount.absolutePath($0.path), createdMs: $0.createdMs,
                        isConflict: true, isResolved: false)
        }
    }

    /// Foundation's `removeOtherVersionsOfItem(at:)`: forgets the kept versions of the document at
    /// `path` that no presenter's base nor open conflict holds on to. Needs the permission to
    /// replace the document (`permissionDenied` otherwise).
    public static func removeOtherVersionsOfItem(at path: String, locator: ControlSocketLocator = ControlSocketLocator()) async throws(CoordFSClientError) {
        let (mount, relative) = try CoordFSMount.containing(path, locator: locator)
        do { try await mount.session.removeVersions(relative) } catch { throw CoordFSClientError(error) }
    }

    public static func removeOtherVersionsOfItem(at url: URL) async throws(CoordFSClientError) {
        try await removeOtherVersionsOfItem(at: url.path)
    }

    public static func otherVersionsOfItem(at url: URL) async throws(CoordFSClientError) -> [FileVersion] {
        try await otherVersionsOfItem(at: url.path)
    }

    public static func unresolvedConflictVersionsOfItem(at url: URL) async throws(CoordFSClientError) -> [FileVersion] {
        try await unresolvedConflictVersionsOfItem(at: url.path)
    }

    /// Foundation's `replaceItem(at:options:)`: writes this kept version back over the document at
    /// `path` as a coordinated write the daemon makes (presenters asked first and told after; what
    /// it replaces is kept as a version). A conflict is not a version to write back: resolve it.
    @discardableResult
    public func replaceItem(at path: String, locator: ControlSocketLocator = ControlSocketLocator()) async throws(CoordFSClientError) -> DocumentRestoreResult {
        guard case .version(let version) = persistentIdentifier else {
            throw .refused(ProtocolError(.notApplicable, "a conflict is resolved, not written back: use markResolved() or FilePresenter.resolve"))
        }
        let (mount, relative) = try CoordFSMount.containing(path, locator: locator)
        return try await mount.restore(version, to: relative)
    }

    /// The version's bytes (a kept version only).
    public func contents(locator: ControlSocketLocator = ControlSocketLocator()) async throws(CoordFSClientError) -> [UInt8] {
        guard case .version(let version) = persistentIdentifier else {
            throw .refused(ProtocolError(.notApplicable, "a conflict has no bytes of its own: the document on disk is theirs"))
        }
        let (mount, _) = try CoordFSMount.containing(path, locator: locator)
        return try await mount.contents(ofVersion: version)
    }

    /// Foundation's `isResolved = true` for a conflict: the document on disk stays as it is (the
    /// store's `reload`; `close` for a deleted document) and the conflict is closed. Its presenter
    /// is told `presentedItemDidResolveConflictVersion(_:)`.
    @discardableResult
    public func markResolved(locator: ControlSocketLocator = ControlSocketLocator()) async throws(CoordFSClientError) -> FileVersion {
        guard case .conflict(let conflict) = persistentIdentifier else { return self }
        let (mount, _) = try CoordFSMount.containing(path, locator: locator)
        do {
            try await mount.resolve(conflict, with: .reload)
        } catch where error.code == .notApplicable {
            try await mount.resolve(conflict, with: .close)  // a deletion: nothing to reload
        }
        var resolved = self
        resolved.isResolved = true
        return resolved
    }
}
