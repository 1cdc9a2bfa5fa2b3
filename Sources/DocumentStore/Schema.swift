import Foundation
import GRDB

/// The metadata schema (SQLite through GRDB, WAL mode). See docs/document-store.md.
enum Schema {
    static func migrator() -> DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            try db.execute(sql: """
                CREATE TABLE document (
                    id INTEGER PRIMARY KEY AUTOINCREMENT,
                    path TEXT UNIQUE,                -- relative to the backing root; NULL once detached
                    dev INTEGER, ino INTEGER, size INTEGER, mtimeNs INTEGER, -- last identity seen; NULL when deleted
                    createdAt DOUBLE NOT NULL
                );
                CREATE TABLE version (
                    id INTEGER PRIMARY KEY AUTOINCREMENT,
                    documentId INTEGER NOT NULL REFERENCES document(id) ON DELETE CASCADE,
                    path TEXT NOT NULL,
                    createdAt DOUBLE NOT NULL,
                    size INTEGER NOT NULL,
                    reason TEXT NOT NULL,
                    method TEXT NOT NULL,
                    storedName TEXT NOT NULL,
                    srcDev INTEGER NOT NULL, srcIno INTEGER NOT NULL, srcSize INTEGER NOT NULL, srcMtimeNs INTEGER NOT NULL
                );
                CREATE INDEX version_document ON version(documentId);
                CREATE TABLE interest (
                    documentId INTEGER NOT NULL REFERENCES document(id) ON DELETE CASCADE,
                    presenter TEXT NOT NULL,
                    baseState TEXT NOT NULL,         -- pending | kept | lost
                    baseVersionId INTEGER REFERENCES version(id) ON DELETE SET NULL,
                    baseDev INTEGER, baseIno INTEGER, baseSize INTEGER, baseMtimeNs INTEGER,
                    hasUnsavedChanges BOOLEAN NOT NULL DEFAULT 0,
                    registeredAt DOUBLE NOT NULL,
                    PRIMARY KEY (documentId, presenter)
                );
                CREATE INDEX interest_presenter ON interest(presenter);
                CREATE TABLE conflict (
                    id INTEGER PRIMARY KEY AUTOINCREMENT,
                    documentId INTEGER NOT NULL REFERENCES document(id) ON DELETE CASCADE,
                    presenter TEXT NOT NULL,
                    kind TEXT NOT NULL,              -- change | deletion
                    state TEXT NOT NULL,             -- open | resolved
                    resolution TEXT,
                    resolvedBy TEXT,
                    createdAt DOUBLE NOT NULL,
                    resolvedAt DOUBLE,
                    baseVersionId INTEGER REFERENCES version(id) ON DELETE SET NULL,
                    beforeDev INTEGER, beforeIno INTEGER, beforeSize INTEGER, beforeMtimeNs INTEGER,
                    afterDev INTEGER, afterIno INTEGER, afterSize INTEGER, afterMtimeNs INTEGER,
                    conflictCopyPath TEXT
                );
                CREATE INDEX conflict_document ON conflict(documentId, state);
                CREATE TABLE setting (key TEXT PRIMARY KEY, value TEXT NOT NULL);
                """)
        }
        // A lost update's kept "theirs" (docs/document-store.md, "Lost updates").
        migrator.registerMigration("v2") { db in
            try db.execute(sql: "ALTER TABLE conflict ADD COLUMN theirsVersionId INTEGER REFERENCES version(id) ON DELETE SET NULL")
        }
        // Whose a conflict is (the uid that may resolve it besides root): the presenter's user,
        // recorded with its interest, or a lost update's saver. Rows of older stores stay NULL:
        // nobody's but root's (docs/document-store.md, "Conflicts").
        migrator.registerMigration("v3") { db in
            try db.execute(sql: "ALTER TABLE interest ADD COLUMN ownerUid INTEGER")
            try db.execute(sql: "ALTER TABLE conflict ADD COLUMN ownerUid INTEGER")
        }
        // Who could read a version's file when it was kept (its mode, owner, group and access
        // ACL): a version is for those who could read it then, not only those who may read its
        // document now. NULL in versions of older stores.
        migrator.registerMigration("v4") { db in
            for column in ["srcMode INTEGER", "srcUid INTEGER", "srcGid INTEGER", "srcAcl BLOB"] {
                try db.execute(sql: "ALTER TABLE version ADD COLUMN \(column)")
            }
        }
        // A user's conflicts found without reading everyone's (the control socket's `conflicts`
        // for a user other than root).
        migrator.registerMigration("conflictOwnerIndex") { db in
            try db.execute(sql: "CREATE INDEX conflict_owner ON conflict(ownerUid, state)")
        }
        // What one user pins is looked up by its uid (``UserPinBudget``; its conflicts by the
        // index above).
        migrator.registerMigration("interestOwnerIndex") { db in
            try db.execute(sql: "CREATE INDEX interest_owner ON interest(ownerUid)")
        }
        // A change made while no daemon watched to a document a gone presenter without unsaved
        // changes had: told to the next presenter of its user registering on it (docs/document-store.md,
        // "Presenters"). One row per document and user.
        migrator.registerMigration("changeWhileAway") { db in
            try db.execute(sql: """
                CREATE TABLE changeWhileAway (
                    documentId INTEGER NOT NULL REFERENCES document(id) ON DELETE CASCADE,
                    ownerUid INTEGER NOT NULL,
                    kind TEXT NOT NULL,              -- change | deletion
                    action TEXT NOT NULL,            -- reload | close
                    beforeDev INTEGER, beforeIno INTEGER, beforeSize INTEGER, beforeMtimeNs INTEGER,
                    afterDev INTEGER, afterIno INTEGER, afterSize INTEGER, afterMtimeNs INTEGER,
                    createdAt DOUBLE NOT NULL,
                    PRIMARY KEY (documentId, ownerUid)
                )
                """)
        }
        return migrator
    }

    // MARK: Row mapping

    static func identity(_ row: Row, _ prefix: String) -> FileIdentity? {
        let keys = prefix.isEmpty ? ["dev", "ino", "size", "mtimeNs"]
            : ["\(prefix)Dev", "\(prefix)Ino", "\(prefix)Size", "\(prefix)MtimeNs"]
        guard let dev: Int64 = row[keys[0]], let ino: Int64 = row[keys[1]],
              let size: Int64 = row[keys[2]], let mtime: Int64 = row[keys[3]]
        else { return nil }
        return FileIdentity(device: UInt64(bitPattern: dev), inode: UInt64(bitPattern: ino), size: size,
                            modificationTimeNanoseconds: mtime)
    }

    /// SQL arguments for the four identity columns (NULLs for nil).
    static func identityValues(_ identity: FileIdentity?) -> [DatabaseValue] {
        guard let identity else { return [.null, .null, .null, .null] }
        return [Int64(bitPattern: identity.device).databaseValue, Int64(bitPattern: identity.inode).databaseValue,
                identity.size.databaseValue, identity.modificationTimeNanoseconds.databaseValue]
    }

    static let versionColumns = """
        v.id, v.documentId, v.path, v.createdAt, v.size, v.reason, v.method, v.storedName,
        v.srcDev, v.srcIno, v.srcSize, v.srcMtimeNs, v.srcMode, v.srcUid, v.srcGid, v.srcAcl,
        (EXISTS (SELECT 1 FROM interest i WHERE i.baseVersionId = v.id)
         OR EXISTS (SELECT 1 FROM conflict c WHERE (c.baseVersionId = v.id OR c.theirsVersionId = v.id) AND c.state = 'open')) AS pinned
        """

    static func version(_ row: Row) throws -> Version {
        guard let reason = VersionReason(rawValue: row["reason"]),
              let method = SnapshotMethod(rawValue: row["method"]),
              let source = identity(row, "src")
        else { throw DocumentStoreError.database("unreadable version row \(row)") }
        return Version(
            id: VersionID(rawValue: row["id"]), document: DocumentID(rawValue: row["documentId"]),
            path: row["path"], createdAt: Date(timeIntervalSince1970: row["createdAt"]), size: row["size"],
            reason: reason, method: method, source: source, isPinned: row["pinned"], sourceAccess: sourceAccess(row))
    }

    /// Who could read a version's file when it was kept (nil in versions of older stores).
    static func sourceAccess(_ row: Row) -> SourceAccess? {
        guard let mode: Int64 = row["srcMode"], let uid: Int64 = row["srcUid"], let gid: Int64 = row["srcGid"] else { return nil }
        let acl: [UInt8]? = (row["srcAcl"] as Data?).map { Array($0) }
        return SourceAccess(mode: UInt32(truncatingIfNeeded: mode), uid: UInt32(truncatingIfNeeded: uid), gid: UInt32(truncatingIfNeeded: gid), acl: acl)
    }

    static let conflictColumns = "c.*, d.path AS docPath"

    static func conflict(_ row: Row) throws -> Conflict {
        guard let kind = ChangeKind(rawValue: row["kind"]), let state = ConflictState(rawValue: row["state"])
        else { throw DocumentStoreError.database("unreadable conflict row \(row)") }
        let resolution: String? = row["resolution"]
        let resolvedAt: Double? = row["resolvedAt"]
        let baseVersion: UInt64? = row["baseVersionId"]
        let theirsVersion: UInt64? = row["theirsVersionId"]
        let owner: Int64? = row["ownerUid"]
        return Conflict(
            id: ConflictID(rawValue: row["id"]), document: DocumentID(rawValue: row["documentId"]),
            path: row["docPath"] ?? "", presenter: StorePresenterID(rawValue: row["presenter"]), kind: kind,
            state: state, resolution: resolution.flatMap(Resolution.init(rawValue:)),
            resolvedBy: row["resolvedBy"], createdAt: Date(timeIntervalSince1970: row["createdAt"]),
            resolvedAt: resolvedAt.map(Date.init(timeIntervalSince1970:)),
            before: identity(row, "before"), after: identity(row, "after"),
            baseVersion: baseVersion.map(VersionID.init(rawValue:)), conflictCopyPath: row["conflictCopyPath"],
            theirsVersion: theirsVersion.map(VersionID.init(rawValue:)),
            owner: owner.flatMap { UInt32(exactly: $0) })
    }

    static func interest(_ row: Row) -> PresenterInterest {
        let state: String = row["baseState"]
        let base: BaseState
        if state == "kept", let id: UInt64 = row["baseVersionId"] {
            base = .kept(VersionID(rawValue: id))
        } else if state == "pending", let identity = identity(row, "base") {
            base = .pending(identity)
        } else if state == "prefix", let identity = identity(row, "base") {
            base = .prefix(identity)
        } else {
            base = .lost
        }
        return PresenterInterest(
            presenter: StorePresenterID(rawValue: row["presenter"]), base: base,
            hasUnsavedChanges: row["hasUnsavedChanges"], registeredAt: Date(timeIntervalSince1970: row["registeredAt"]))
    }
}
