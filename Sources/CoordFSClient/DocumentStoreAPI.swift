import ControlProtocol
import Glibc

/// The one "underlying file changed" event a presenter gets for one change or deletion of its
/// document by someone else (`FilePresenter.presentedItemDidChangeUnderneath(_:)`).
public struct UnderlyingFileChange: Sendable, Hashable {
    /// The document's absolute path.
    public var path: String
    /// The document's stable id in the mount's store.
    public var document: DocumentID
    /// `.change` (written, or replaced by an atomic save) or `.deletion`.
    public var kind: DocumentChangeKind
    /// The file before the change (device, inode, size, modification time).
    public var before: DocumentIdentity?
    /// The file after it (nil for a deletion).
    public var after: DocumentIdentity?
    /// What the store did (`.reload`, `.close`), asks (`.conflict(id)`), or could not do (`.failed`).
    public var action: DocumentAction

    init(_ change: DocumentChange, path: String) {
        self.path = path
        document = change.document
        kind = change.kind
        before = change.before
        after = change.after
        action = change.action
    }
}

/// "Mine": the presenter's version of the document, for save, keep both and merge.
public enum DocumentContents: Sendable, Hashable {
    /// The bytes (sent in one message: at most about 750 KiB).
    case bytes([UInt8])
    /// A file: inside the same mount it is named to the daemon (which reads it if this process's
    /// user may); elsewhere this process reads it and sends its bytes.
    case file(String)
}

/// An open conflict of a presenter.
public struct DocumentConflict: Sendable, Hashable {
    public var id: ConflictID
    /// The document's absolute path.
    public var path: String
    public var document: DocumentID
    /// `.change` or `.deletion` (the latest).
    public var kind: DocumentChangeKind
    /// When it opened, in milliseconds since the epoch.
    public var createdMs: UInt64
    public var before: DocumentIdentity?
    public var after: DocumentIdentity?
    /// The presenter's base (what merge uses), when it was kept.
    public var baseVersion: VersionID?
    /// The daemon's id of the presenter it belongs to (nil once that presenter is gone).
    public var presenter: PresenterID?
}

/// What a resolution did.
public struct DocumentResolutionResult: Sendable, Hashable {
    public var conflict: ConflictID
    public var resolution: Resolution
    /// The file written (absolute): the document for save and merge, the conflict copy for keep both.
    public var writtenPath: String?
    /// The version keeping what the resolution wrote over.
    public var preservedVersion: VersionID?
    /// Merge: the number of conflicting hunks marked in the file (0: merged cleanly).
    public var mergeConflicts: Int
    /// The document afterwards (nil when it does not exist).
    public var after: DocumentIdentity?
}

/// What a restore did.
public struct DocumentRestoreResult: Sendable, Hashable {
    /// The version written back.
    public var version: VersionID
    /// The document written (absolute).
    public var path: String
    /// The version keeping what the restore wrote over (restore it to undo); nil when the document
    /// did not exist.
    public var preservedVersion: VersionID?
    /// The document afterwards.
    public var after: DocumentIdentity?
}

extension FilePresenter {
    /// Tells the mount's document store whether this presenter has unsaved changes: when its
    /// document then changes or is deleted underneath it, it gets a conflict to resolve instead
    /// of a reload or a close. Remembered across daemon restarts (said again on re-registration).
    public func setHasUnsavedChanges(_ hasUnsavedChanges: Bool) async throws(CoordFSClientError) {
        let (mount, handle) = try registered()
        do { try await mount.session.setUnsavedChanges(handle, hasUnsavedChanges) } catch { throw CoordFSClientError(error) }
    }

    /// This presenter's open conflicts, oldest first.
    public func conflicts() async throws(CoordFSClientError) -> [DocumentConflict] {
        let (mount, handle) = try registered()
        do {
            return try await mount.session.conflicts(of: handle).map { c in
                DocumentConflict(id: c.conflict, path: mount.absolutePath(c.path), document: c.document, kind: c.kind,
                                 createdMs: c.createdMs, before: c.before, after: c.after, baseVersion: c.baseVersion, presenter: c.presenter)
            }
        } catch {
            throw CoordFSClientError(error)
        }
    }

    /// Resolves one of this presenter's conflicts: `.close`, `.save` (mine over theirs; restores a
    /// deleted file), `.reload` (theirs; refused for a deletion), `.keepBoth` (mine as a named
    /// conflict copy beside the file) or `.merge` (three-way, text only, with the base). Save,
    /// keep both and merge need `mine`. A refusal (`notApplicable`, `binaryContents`,
    /// `baseUnavailable`, ...) changes nothing; the conflict stays open.
    @discardableResult
    public func resolve(_ conflict: ConflictID, with resolution: Resolution, mine: DocumentContents? = nil) async throws(CoordFSClientError) -> DocumentResolutionResult {
        let (mount, _) = try registered()
        return try await mount.resolve(conflict, with: resolution, mine: mine)
    }

    private func registered() throws(CoordFSClientError) -> (CoordFSMount, SessionPresenter) {
        guard let registration = FileCoordinator.registration(of: self) else { throw .notRegistered }
        return registration
    }
}

extension CoordFSMount {
    /// Resolves a conflict of a presenter of this process (any conflict, for root).
    public func resolve(_ conflict: ConflictID, with resolution: Resolution, mine: DocumentContents? = nil) async throws(CoordFSClientError) -> DocumentResolutionResult {
        do {
            let contents = try await wireContents(mine)
            let r = try await session.resolve(conflict, with: resolution, mine: contents)
            return DocumentResolutionResult(conflict: r.conflict, resolution: r.resolution, writtenPath: r.writtenPath.map(absolutePath),
                                            preservedVersion: r.preservedVersion, mergeConflicts: r.mergeConflicts, after: r.after)
        } catch let error as CoordFSClientError {
            throw error
        } catch let error as ControlTransportError {
            throw CoordFSClientError(error)
        } catch {
            throw .transport(.disconnected)
        }
    }

    /// The kept versions of the document at `path` (inside this mount), newest first.
    public func versions(of path: MountPath) async throws(CoordFSClientError) -> [VersionInfo] {
        do { return try await session.versions(path) } catch { throw CoordFSClientError(error) }
    }

    /// The bytes of a kept version.
    public func contents(ofVersion version: VersionID) async throws(CoordFSClientError) -> [UInt8] {
        do { return try await session.contents(ofVersion: version) } catch { throw CoordFSClientError(error) }
    }

    /// Writes kept version `version` back over the document at `path` (inside this mount; a deleted
    /// document is re-created). The daemon makes it a coordinated write for this process's user,
    /// who must be allowed to replace the document: its presenters are asked first and told after,
    /// and what it replaces is kept as a version first. `version` must be one of the document's
    /// (`unknownVersion` otherwise); `permissionDenied` when the user may not write it.
    @discardableResult
    public func restore(_ version: VersionID, to path: MountPath) async throws(CoordFSClientError) -> DocumentRestoreResult {
        do {
            let r = try await session.restore(version, to: path)
            return DocumentRestoreResult(version: r.version, path: absolutePath(r.path), preservedVersion: r.preservedVersion, after: r.after)
        } catch {
            throw CoordFSClientError(error)
        }
    }

    /// "Mine" as the protocol carries it: a path when the file is in this mount, bytes otherwise.
    private func wireContents(_ mine: DocumentContents?) async throws -> ResolutionContents? {
        var bytes: [UInt8]
        switch mine {
        case nil: return nil
        case .bytes(let b): bytes = b
        case .file(let path):
            if let (fileMount, relative) = try? CoordFSMount.containing(path), fileMount === self { return .path(relative) }
            bytes = try LocalFileSystem.read(path)
        }
        // The frame holds the base64 and a little JSON around it.
        let limit = (try await session.maxFrameSize() - 256) / 4 * 3
        if bytes.count > limit { throw CoordFSClientError.tooLarge(bytes: bytes.count, limit: limit) }
        return .bytes(bytes)
    }
}

extension FileCoordinator {
    /// The kept versions of the document at `path` (absolute, inside a coordfs mount), newest first.
    public static func versions(ofItemAt path: String, locator: ControlSocketLocator = ControlSocketLocator()) async throws(CoordFSClientError) -> [VersionInfo] {
        let (mount, relative) = try CoordFSMount.containing(path, locator: locator)
        return try await mount.versions(of: relative)
    }

    /// Writes kept version `version` back over the document at `path` (absolute, inside a coordfs
    /// mount); see ``CoordFSMount/restore(_:to:)``.
    @discardableResult
    public static func restore(_ version: VersionID, toItemAt path: String,
                               locator: ControlSocketLocator = ControlSocketLocator()) async throws(CoordFSClientError) -> DocumentRestoreResult {
        let (mount, relative) = try CoordFSMount.containing(path, locator: locator)
        return try await mount.restore(version, to: relative)
    }

    /// The bytes of a kept version of the document at `path`.
    public static func contents(ofVersion version: VersionID, ofItemAt path: String,
                                locator: ControlSocketLocator = ControlSocketLocator()) async throws(CoordFSClientError) -> [UInt8] {
        let (mount, _) = try CoordFSMount.containing(path, locator: locator)
        return try await mount.contents(ofVersion: version)
    }
}
