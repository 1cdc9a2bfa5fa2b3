import NameBytes
import Foundation
import GRDB
import Glibc

extension DocumentStore {
    /// The kept versions of the document at `path`, newest first.
    public func versions(ofPath path: String) throws -> [Version] {
        let (relative, _) = try resolve(path)
        return try read { db in
            guard let document = try documentID(db, relative) else { return [] }
            return try Row.fetchAll(db, sql: "SELECT \(Schema.versionColumns) FROM version v WHERE v.documentId = ? ORDER BY v.id DESC",
                                    arguments: [document.rawValue]).map(Schema.version)
        }
    }

    /// Foundation's `removeOtherVersionsOfItem(at:)`: forgets every kept version of the document
    /// at `path` that no presenter's base, open conflict nor live reader holds on to (those stay
    /// until they are let go). Returns how many were removed.
    @discardableResult
    public func removeOtherVersions(ofPath path: String) throws -> Int {
        let (relative, _) = try resolve(path)
        var dropped: [String] = []
        do {
            try database.write { db in
                guard let document = try documentID(db, relative) else { return }
                let held = Set(heldVersions.map { Int64(bitPattern: $0.rawValue) })
                let rows = try Row.fetchAll(db, sql: "SELECT v.id, v.storedName FROM version v WHERE v.documentId = ? AND NOT \(Self.pinnedVersion)",
                                            arguments: [document.rawValue]).filter { !held.contains($0["id"]) }
                for row in rows { try db.execute(sql: "DELETE FROM version WHERE id = ?", arguments: [row["id"] as Int64]) }
                dropped = rows.map { $0["storedName"] as String }
            }
        } catch let error as DatabaseError {
            throw DocumentStoreError.database(error.description)
        }
        for name in dropped { FileSystem.unlinkIfPresent(storedPath(name)) }
        return dropped.count
    }

    /// All kept versions, newest first.
    public func allVersions() throws -> [Version] {
        try read { db in try Row.fetchAll(db, sql: "SELECT \(Schema.versionColumns) FROM version v ORDER BY v.id DESC").map(Schema.version) }
    }

    /// One kept version.
    public func version(_ id: VersionID) throws -> Version {
        try read { db in
            guard let row = try Row.fetchOne(db, sql: "SELECT \(Schema.versionColumns) FROM version v WHERE v.id = ?", arguments: [id.rawValue]) else {
                throw DocumentStoreError.unknownVersion(id.rawValue)
            }
            return try Schema.version(row)
        }
    }

    /// The absolute path of a version's kept file, for streaming it (read only: writing through it
    /// would change the version).
    public func storedFile(of id: VersionID) throws -> String {
        try read { db in
            guard let name = try String.fetchOne(db, sql: "SELECT storedName FROM version WHERE id = ?", arguments: [id.rawValue]) else {
                throw DocumentStoreError.unknownVersion(id.rawValue)
            }
            return storedPath(name)
        }
    }

    /// A version's bytes.
    public func contents(of id: VersionID) throws -> [UInt8] {
        try FileSystem.readAll(storedFile(of: id))
    }

    /// A unified diff (3 lines of context) from a version to the current file at `path` (the
    /// version's document's current path by default); empty when they are equal, and
    /// "Binary files ... differ" for binary contents. A missing current file diffs as empty.
    public func diff(_ id: VersionID, againstCurrentOf path: String? = nil) throws -> String {
        let version = try version(id)
        let target = try path ?? document(version.document)?.path ?? version.path
        let (relative, absolute) = try resolve(target)
        let old = try contents(of: id)
        let new = try statDocument(absolute, relative) == nil ? [] : try FileSystem.readAll(absolute)
        return TextMerge.unifiedDiff(
            // The labels show the name escaped (`displayEscaped`): it cannot drive the terminal.
            old: old, new: new, oldLabel: "a/\(relative.displayEscaped) (version \(id.rawValue))", newLabel: "b/\(relative.displayEscaped) (current)")
    }

    /// Writes a kept version back over the file at `path` (its document's current path by
    /// default), atomically. The current file is kept first (reason `restore`), so a restore is
    /// undoable; the document's presenters other than `presenter` get the change event. A file the
    /// restore re-creates (its document was deleted) belongs to `owner` (nil: the store's user),
    /// with the permission bits the file had when the version was kept (0644 for a version kept
    /// by an older store); a file written over keeps its owner and mode.
    @discardableResult
    public func restore(_ id: VersionID, to path: String? = nil, by presenter: StorePresenterID? = nil, owner: FileOwner? = nil) throws -> RestoreOutcome {
        let version = try version(id)
        let target = try path ?? document(version.document)?.path ?? version.path
        let (relative, absolute) = try resolve(target)
        let stored = try storedFile(of: id)
        return try write { db in
            let st = try statDocument(absolute, relative)
            let document = try documentID(db, relative) ?? createDocument(db, relative, st.map(FileIdentity.init))
            var preserved: Snapshot?
            if let st { preserved = try takeSnapshot(db, document, relative, absolute, st, reason: .restore) }
            // Clone or copy, never link: a later write to the restored file must not alter the version.
            // A re-created file gets the permission bits the file had when the version was kept.
            try writeFile(.file(absolutePath: stored), to: relative, permissionsFrom: st, owner: st == nil ? owner : nil,
                          newMode: version.sourceAccess.map { mode_t($0.mode) })
            guard let now = try statDocument(absolute, relative) else { throw DocumentStoreError.fileNotFound(relative) }
            let after = FileIdentity(now)
            let event = try announce(db, document, relative, absolute, .change, before: st.map(FileIdentity.init), after: after, writer: presenter)
            return RestoreOutcome(preserved: preserved, after: after, presentersNotified: event, recreated: st == nil)
        }
    }
}
