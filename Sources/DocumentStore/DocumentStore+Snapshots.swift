import Foundation
import GRDB
import Glibc

extension DocumentStore {
    // MARK: Preserving before mutations (called by the mount before it lets the operation through)

    /// Keeps the file at `path` before something is renamed over it: a clone (FICLONE) where the
    /// filesystem supports it, else a copy; never a hard link, since the old inode may live on
    /// (another name, a backup rename, an open descriptor) and be written. Returns nil when there
    /// is nothing to keep (no file, or an unpresented file the policy does not keep).
    @discardableResult
    public func preserveBeforeReplace(_ path: String) throws -> Snapshot? {
        try preserveBeforeReplacement(path, reason: .replaced)
    }

    /// Keeps the file at `path` before it is deleted: a clone or a copy, as for a replace.
    @discardableResult
    public func preserveBeforeDelete(_ path: String) throws -> Snapshot? {
        try preserveBeforeReplacement(path, reason: .deleted)
    }

    /// Keeps the file at `path` before it is written in place (opened for writing, truncated):
    /// a FICLONE clone where the filesystem supports it, else a full copy, and only when a
    /// presenter's base has not been captured yet: later writes to the same base pay nothing.
    /// Unpresented files follow ``StoreConfiguration/unpresentedFiles``.
    @discardableResult
    public func preserveBeforeInPlaceWrite(_ path: String) throws -> Snapshot? {
        let (relative, absolute) = try resolve(path)
        // Most files opened for writing are no document, or a document whose bases are already
        // kept: decide that with a read, which neither waits for nor holds the writer lock.
        if try read({ db in try nothingToKeepBeforeWrite(db, relative, absolute) }) { return nil }
        return try write { db -> Snapshot? in
            guard let st = try statDocument(absolute, relative) else { return nil }
            let identity = FileIdentity(st)
            let document = try documentID(db, relative)
            let interests = try document.map { try Row.fetchAll(db, sql: "SELECT * FROM interest WHERE documentId = ?", arguments: [$0.rawValue]) } ?? []
            if !interests.isEmpty {
                // Bases that are a prefix of this file (an append is open or was) are copied first.
                let prefixes = try keepPrefixBases(db, document!, relative, absolute, st)
                let pending = interests.map(Schema.interest).filter { if case .pending = $0.base { return true } else { return false } }
                let matching = pending.filter { $0.base == .pending(identity) }
                if matching.isEmpty {
                    try markPendingBasesLost(db, document!)
                    return prefixes.first
                }
                return try takeSnapshot(db, document!, relative, absolute, st, reason: .beforeWrite)
            }
            guard keepsUnpresentedFiles else { return nil }
            return try takeSnapshot(db, document ?? createDocument(db, relative, identity), relative, absolute, st, reason: .beforeWrite)
        }
    }

    /// What ``preserveBeforeAppend(_:)`` did.
    public struct AppendPreservation: Sendable, Hashable {
        /// A version kept as ``preserveBeforeInPlaceWrite(_:)`` would have (a pending base of an
        /// empty file, a file nobody presents that the policy keeps); nil when nothing was copied.
        public var snapshot: Snapshot?
        /// The end of the longest base that is a prefix of this file: while the append is open,
        /// anything that may change bytes below it (a write at a lower offset, a truncate,
        /// `fallocate`) must call ``preserveBeforeInPlaceWrite(_:)`` first, which copies the prefix.
        /// nil: no base is a prefix of this file (nothing to watch).
        public var prefixEnd: Int64?
        public init(snapshot: Snapshot? = nil, prefixEnd: Int64? = nil) { self.snapshot = snapshot; self.prefixEnd = prefixEnd }
    }

    /// Called before `path` is opened for appending only (`O_APPEND` without `O_TRUNC`), when no
    /// other open may write it otherwise: a pending base that is this file becomes a *prefix* base
    /// (its inode and size, ``BaseState/prefix(_:)``) instead of being copied, since an append
    /// leaves the old bytes where they are. The caller must then see every change the open makes
    /// below ``AppendPreservation/prefixEnd`` and call ``preserveBeforeInPlaceWrite(_:)`` before it.
    /// A reload after the append drops the prefix without a copy; a conflict, a rename over, a
    /// deletion or any other write copies it first. Pending bases that are no longer this file
    /// are lost, as before an in-place write; an empty file is kept as then (nothing to copy).
    public func preserveBeforeAppend(_ path: String) throws -> AppendPreservation {
        let (relative, absolute) = try resolve(path)
        if try read({ db in try nothingToKeepBeforeWrite(db, relative, absolute) }) { return AppendPreservation() }
        return try write { db -> AppendPreservation in
            guard let st = try statDocument(absolute, relative) else { return AppendPreservation() }
            let identity = FileIdentity(st)
            guard let document = try documentID(db, relative),
                  try Bool.fetchOne(db, sql: "SELECT 1 FROM interest WHERE documentId = ? LIMIT 1", arguments: [document.rawValue]) == true
            else {
                // Nobody presents it: as before any write.
                guard keepsUnpresentedFiles else { return AppendPreservation() }
                let document = try documentID(db, relative) ?? createDocument(db, relative, identity)
                return AppendPreservation(snapshot: try takeSnapshot(db, document, relative, absolute, st, reason: .beforeWrite))
            }
            // A prefix of another file, or longer than this one, is not this file's any more.
            try db.execute(
                sql: """
                    UPDATE interest SET baseState = 'lost' WHERE documentId = ? AND baseState = 'prefix'
                      AND NOT (baseDev = ? AND baseIno = ? AND baseSize <= ?)
                    """,
                arguments: [document.rawValue, Int64(bitPattern: identity.device), Int64(bitPattern: identity.inode), identity.size])
            try db.execute(
                sql: """
                    UPDATE interest SET baseState = 'lost' WHERE documentId = ? AND baseState = 'pending'
                      AND NOT (baseDev = ? AND baseIno = ? AND baseSize = ? AND baseMtimeNs = ?)
                    """,
                arguments: StatementArguments([document.rawValue.databaseValue] + Schema.identityValues(identity)))
            var snapshot: Snapshot?
            if identity.size == 0 {
                // Nothing to copy: kept as any pending base (an empty version).
                if try Bool.fetchOne(db, sql: "SELECT 1 FROM interest WHERE documentId = ? AND baseState = 'pending' LIMIT 1",
                                     arguments: [document.rawValue]) == true {
                    snapshot = try takeSnapshot(db, document, relative, absolute, st, reason: .beforeWrite)
                }
            } else {
                try db.execute(sql: "UPDATE interest SET baseState = 'prefix' WHERE documentId = ? AND baseState = 'pending'", arguments: [document.rawValue])
            }
            let end = try Int64.fetchOne(
                db, sql: "SELECT MAX(baseSize) FROM interest WHERE documentId = ? AND baseState = 'prefix' AND baseSize > 0", arguments: [document.rawValue])
            return AppendPreservation(snapshot: snapshot, prefixEnd: end)
        }
    }

    /// Copies the bases of `document` that are a prefix of its file (``BaseState/prefix(_:)``):
    /// their first bytes, from the file `st` describes, once per prefix; each becomes a kept base
    /// (or reuses a version of that very file state). A prefix of another inode, or longer than the
    /// file now, is lost. `st` nil: the file is gone, every prefix is lost.
    @discardableResult
    func keepPrefixBases(_ db: Database, _ document: DocumentID, _ relative: String, _ absolute: String, _ st: stat?) throws -> [Snapshot] {
        let rows = try Row.fetchAll(
            db, sql: "SELECT DISTINCT baseDev, baseIno, baseSize, baseMtimeNs FROM interest WHERE documentId = ? AND baseState = 'prefix'",
            arguments: [document.rawValue])
        var kept: [Snapshot] = []
        for row in rows {
            guard let prefix = Schema.identity(row, "base") else { continue }
            let these = StatementArguments([document.rawValue.databaseValue] + Schema.identityValues(prefix))
            let matches = "documentId = ? AND baseState = 'prefix' AND baseDev = ? AND baseIno = ? AND baseSize = ? AND baseMtimeNs = ?"
            guard let st, UInt64(st.st_dev) == prefix.device, UInt64(st.st_ino) == prefix.inode, Int64(st.st_size) >= prefix.size else {
                try db.execute(sql: "UPDATE interest SET baseState = 'lost' WHERE \(matches)", arguments: these)
                continue
            }
            let snapshot = try keepPrefix(db, document, relative, absolute, st, prefix)
            for (presenter, uid) in try boundOwners(db, document, pendingFor: prefix, state: "prefix")
            where try !mayPin(db, uid, version: Int64(bitPattern: snapshot.version.id.rawValue), size: snapshot.version.size) {
                try db.execute(sql: "UPDATE interest SET baseState = 'lost' WHERE documentId = ? AND presenter = ?", arguments: [document.rawValue, presenter])
            }
            try db.execute(sql: "UPDATE interest SET baseState = 'kept', baseVersionId = ? WHERE \(matches)",
                           arguments: StatementArguments([snapshot.version.id.rawValue.databaseValue]) + these)
            kept.append(snapshot)
        }
        return kept
    }

    /// Keeps the first `prefix.size` bytes of the file `st` describes as a version whose source is
    /// `prefix` (the file as the presenters loaded it), or finds that version kept already.
    private func keepPrefix(_ db: Database, _ document: DocumentID, _ relative: String, _ absolute: String, _ st: stat,
                            _ prefix: FileIdentity) throws -> Snapshot {
        try version(db, document, relative, absolute, st, source: prefix, reason: .beforeWrite, reusingLinks: false) { source, stored in
            if inPlaceMethod == .reflink, (try? FileSystem.reflink(fd: source, sourcePath: absolute, to: stored)) != nil {
                // A clone of the whole file, cut to the prefix: no bytes copied.
                do { try FileSystem.truncate(stored, to: prefix.size) } catch {
                    FileSystem.unlinkIfPresent(stored)
                    throw error
                }
                return .reflink
            }
            try FileSystem.copyPrefix(fd: source, sourcePath: absolute, length: prefix.size, toNew: stored,
                                      leavingRootReserve: configuration.copiesLeaveRootReserve)
            return .copy
        }
    }

    /// The version of `document` whose source is `identity` (the file `st` describes, as it is
    /// now or, for a prefix, as it was), found kept already (a `link` version only when
    /// `reusingLinks`), or else recorded with `st`'s access and its bytes kept by `keepBytes` (the
    /// file opened once, and the stored file's path).
    private func version(_ db: Database, _ document: DocumentID, _ relative: String, _ absolute: String, _ st: stat,
                         source identity: FileIdentity, reason: VersionReason, reusingLinks: Bool,
                         keepBytes: (Int32, String) throws -> SnapshotMethod) throws -> Snapshot {
        let started = Self.monotonicNanoseconds()
        if let existing = try Row.fetchOne(
            db, sql: "SELECT \(Schema.versionColumns) FROM version v WHERE v.documentId = ? AND v.srcDev = ? AND v.srcIno = ? AND v.srcSize = ? AND v.srcMtimeNs = ?"
                + (reusingLinks ? "" : " AND v.method != 'link'") + " ORDER BY v.id DESC LIMIT 1",
            arguments: StatementArguments([document.rawValue.databaseValue] + Schema.identityValues(identity)))
        {
            return Snapshot(version: try Schema.version(existing), reused: true, elapsedNanoseconds: Self.monotonicNanoseconds() - started)
        }
        // The bytes kept and the access recorded with them (who may read the version) are one
        // file's: the one `st` describes, opened once, whatever happens to its name meanwhile.
        let source = try FileSystem.openSame(absolute, as: st)
        defer { FileSystem.close(source) }
        try db.execute(
            sql: """
                INSERT INTO version (documentId, path, createdAt, size, reason, method, storedName, srcDev, srcIno, srcSize, srcMtimeNs,
                  srcMode, srcUid, srcGid, srcAcl)
                VALUES (?, ?, ?, ?, ?, '', '', ?, ?, ?, ?, ?, ?, ?, ?)
                """,
            arguments: StatementArguments(
                [document.rawValue.databaseValue, relative.databaseValue, Self.now().databaseValue,
                 identity.size.databaseValue, reason.rawValue.databaseValue] + Schema.identityValues(identity)
                    + [Int64(st.st_mode).databaseValue, Int64(st.st_uid).databaseValue, Int64(st.st_gid).databaseValue,
                       FileSystem.accessACL(source).map { Data($0) }.databaseValue]))
        let id = db.lastInsertedRowID
        let name = "\(id)"
        // A file by this name is left from a transaction that failed after keeping it (a
        // resolution whose write was refused) and rolled its row back: this row's number is
        // used again, so the file is nobody's.
        FileSystem.unlinkIfPresent(storedPath(name))
        let method = try keepBytes(source, storedPath(name))
        try db.execute(sql: "UPDATE version SET method = ?, storedName = ? WHERE id = ?", arguments: [method.rawValue, name, id])
        let row = try Row.fetchOne(db, sql: "SELECT \(Schema.versionColumns) FROM version v WHERE v.id = ?", arguments: [id])!
        return Snapshot(version: try Schema.version(row), reused: false, elapsedNanoseconds: Self.monotonicNanoseconds() - started)
    }

    /// Whether ``StoreConfiguration/unpresentedFiles`` keeps a file nobody presents before an
    /// in-place write on this filesystem: `.whenCheap` only where it clones.
    var keepsUnpresentedFiles: Bool {
        switch configuration.unpresentedFiles {
        case .never: false
        case .whenCheap: inPlaceMethod == .reflink
        case .always: true
        }
    }

    /// True when `preserveBeforeInPlaceWrite` would certainly keep and change nothing.
    private func nothingToKeepBeforeWrite(_ db: Database, _ relative: String, _ absolute: String) throws -> Bool {
        guard try statDocument(absolute, relative) != nil else { return true }
        guard let document = try documentID(db, relative) else { return !keepsUnpresentedFiles }
        let states = try String.fetchAll(db, sql: "SELECT baseState FROM interest WHERE documentId = ?", arguments: [document.rawValue])
        if states.isEmpty { return !keepsUnpresentedFiles }
        return !states.contains("pending") && !states.contains("prefix")
    }

    private func preserveBeforeReplacement(_ path: String, reason: VersionReason) throws -> Snapshot? {
        let (relative, absolute) = try resolve(path)
        return try write { db -> Snapshot? in
            guard let st = try statDocument(absolute, relative) else { return nil }
            var document = try documentID(db, relative)
            if document == nil {
                // Asked to keep what a replace or a deletion would lose: kept unless `.never`.
                guard configuration.unpresentedFiles != .never else { return nil }
                document = try createDocument(db, relative, FileIdentity(st))
            }
            return try takeSnapshot(db, document!, relative, absolute, st, reason: reason)
        }
    }

    // MARK: Taking snapshots

    /// Keeps the file's current bytes as a version of `document` (or finds them already kept), and
    /// captures every pending base that is this very file.
    func takeSnapshot(
        _ db: Database, _ document: DocumentID, _ relative: String, _ absolute: String, _ st: stat,
        reason: VersionReason
    ) throws -> Snapshot {
        // Bases that are a prefix of this file: their bytes first (what this snapshot is taken
        // before may change them).
        try keepPrefixBases(db, document, relative, absolute, st)
        let identity = FileIdentity(st)
        let snapshot = try version(db, document, relative, absolute, st, source: identity, reason: reason, reusingLinks: true) { source, stored in
            try keep(fd: source, absolute, as: stored)
        }
        // Pending bases whose user has no room for this version keep none (``UserPinBudget``).
        for (presenter, uid) in try boundOwners(db, document, pendingFor: identity)
        where try !mayPin(db, uid, version: Int64(bitPattern: snapshot.version.id.rawValue), size: snapshot.version.size) {
            try db.execute(sql: "UPDATE interest SET baseState = 'lost' WHERE documentId = ? AND presenter = ?", arguments: [document.rawValue, presenter])
        }
        try db.execute(
            sql: """
                UPDATE interest SET baseState = 'kept', baseVersionId = ?
                WHERE documentId = ? AND baseState = 'pending' AND baseDev = ? AND baseIno = ? AND baseSize = ? AND baseMtimeNs = ?
                """,
            arguments: StatementArguments(
                [snapshot.version.id.rawValue.databaseValue, document.rawValue.databaseValue] + Schema.identityValues(identity)))
        // A pending base that is not this file changed without the store seeing it.
        try markPendingBasesLost(db, document)
        return snapshot
    }

    func markPendingBasesLost(_ db: Database, _ document: DocumentID) throws {
        try db.execute(sql: "UPDATE interest SET baseState = 'lost' WHERE documentId = ? AND baseState = 'pending'", arguments: [document.rawValue])
    }

    /// Puts the bytes of `source` in the new file `destination`, a clone where the filesystem
    /// supports it, else a copy, and says how. Never a hard link: `destination` gets its own inode,
    /// so no later write to `source` (by any name or descriptor) can change it.
    func keep(_ source: String, as destination: String) throws -> SnapshotMethod {
        let fd = try FileSystem.open(source, O_RDONLY)
        defer { FileSystem.close(fd) }
        return try keep(fd: fd, source, as: destination)
    }

    /// `keep(_:as:)` from the open file `fd` (whose path is `source`).
    func keep(fd: Int32, _ source: String, as destination: String) throws -> SnapshotMethod {
        if inPlaceMethod == .reflink {
            do {
                try FileSystem.reflink(fd: fd, sourcePath: source, to: destination)
                return .reflink
            } catch DocumentStoreError.system(_, _, let code) where [EXDEV, EOPNOTSUPP, EINVAL, ENOTTY, ENOSYS].contains(code) {
                // This file cannot be cloned (another filesystem below a bind mount): copy.
            }
        }
        try FileSystem.copy(fd: fd, sourcePath: source, toNew: destination, leavingRootReserve: configuration.copiesLeaveRootReserve)
        return .copy
    }

    /// Gives every `link` version (made by older builds: a name for an inode that may still be a
    /// live file, or open for writing) its own clone or copy of the bytes it holds now. Run at open.
    func detachLinkVersions(_ db: Database) throws {
        for row in try Row.fetchAll(db, sql: "SELECT id, storedName FROM version WHERE method = 'link'") {
            let stored = storedPath(row["storedName"])
            let scratch = temporaryPath("detach")
            let method = try keep(stored, as: scratch)
            do {
                try FileSystem.rename(scratch, stored)
            } catch {
                FileSystem.unlinkIfPresent(scratch)
                throw error
            }
            try db.execute(sql: "UPDATE version SET method = ? WHERE id = ?", arguments: [method.rawValue, row["id"] as Int64])
        }
    }

    // MARK: Documents

    func documentID(_ db: Database, _ relative: String) throws -> DocumentID? {
        try UInt64.fetchOne(db.cachedStatement(sql: "SELECT id FROM document WHERE path = ?"), arguments: [relative]).map(DocumentID.init(rawValue:))
    }

    func createDocument(_ db: Database, _ relative: String, _ identity: FileIdentity?) throws -> DocumentID {
        try db.execute(
            sql: "INSERT INTO document (path, dev, ino, size, mtimeNs, createdAt) VALUES (?, ?, ?, ?, ?, ?)",
            arguments: StatementArguments([relative.databaseValue] + Schema.identityValues(identity) + [Self.now().databaseValue]))
        return DocumentID(rawValue: UInt64(db.lastInsertedRowID))
    }

    func setIdentity(_ db: Database, _ document: DocumentID, _ identity: FileIdentity?) throws {
        try db.cachedStatement(sql: "UPDATE document SET dev = ?, ino = ?, size = ?, mtimeNs = ? WHERE id = ?")
            .execute(arguments: StatementArguments(Schema.identityValues(identity) + [document.rawValue.databaseValue]))
    }

    // MARK: Retention

    /// SQL true for a version `v` that a presenter's base or an open conflict holds on to. (Versions
    /// live readers hold, ``heldVersions``, are kept as well; they are in memory, not in SQL.)
    static let pinnedVersion = "(v.id IN (SELECT baseVersionId FROM interest WHERE baseVersionId IS NOT NULL) OR v.id IN (SELECT baseVersionId FROM conflict WHERE state = 'open' AND baseVersionId IS NOT NULL) OR v.id IN (SELECT theirsVersionId FROM conflict WHERE state = 'open' AND theirsVersionId IS NOT NULL))"

    /// Applies retention and forgets documents nothing refers to; returns the stored files to
    /// unlink once the transaction committed.
    func collectGarbage(_ db: Database) throws -> [String] {
        let retention = configuration.retention
        let pinned = Self.pinnedVersion
        // Only documents over the limit are looked at version by version.
        // Versions a live reader holds (the base of a lost update not detected yet) stay too.
        let held = Set(heldVersions.map { Int64(bitPattern: $0.rawValue) })
        var doomed = try Row.fetchAll(db, sql: """
            SELECT v.id, v.storedName FROM version v
            WHERE v.documentId IN (SELECT documentId FROM version GROUP BY documentId HAVING COUNT(*) > ?)
              AND NOT \(pinned)
              AND (SELECT COUNT(*) FROM version w WHERE w.documentId = v.documentId AND w.id > v.id) >= ?
            """, arguments: [retention.maxVersionsPerDocument, retention.maxVersionsPerDocument]
        ).filter { !held.contains($0["id"]) }
        let doomedIDs = Set(doomed.map { $0["id"] as Int64 })
        var total = try Int64.fetchOne(db, sql: "SELECT COALESCE(SUM(size), 0) FROM version") ?? 0
        for row in doomed {
            total -= try Int64.fetchOne(db, sql: "SELECT size FROM version WHERE id = ?", arguments: [row["id"] as Int64]) ?? 0
        }
        if total > retention.maxTotalBytes {
            // Fair between users: the oldest unpinned version of the user holding the most
            // unpinned bytes goes first, so one user's churn evicts its own versions before
            // another's (docs/document-store.md, "Retention and garbage collection").
            let candidates = try Row.fetchAll(db, sql: "SELECT v.id, v.storedName, v.size, v.srcUid FROM version v WHERE NOT \(pinned) ORDER BY v.id")
                .filter { !doomedIDs.contains($0["id"]) && !held.contains($0["id"]) }
            var byHolder = FairEviction()
            for (i, row) in candidates.enumerated() { byHolder.add(i, holder: row["srcUid"] as Int64?, size: row["size"]) }
            while total > retention.maxTotalBytes, let i = byHolder.next() {
                doomed.append(candidates[i])
                total -= candidates[i]["size"] as Int64
            }
        }
        for row in doomed {
            try db.execute(sql: "DELETE FROM version WHERE id = ?", arguments: [row["id"] as Int64])
        }
        try db.execute(sql: """
            DELETE FROM document WHERE
              NOT EXISTS (SELECT 1 FROM version WHERE documentId = document.id)
              AND NOT EXISTS (SELECT 1 FROM interest WHERE documentId = document.id)
              AND NOT EXISTS (SELECT 1 FROM conflict WHERE documentId = document.id AND state = 'open')
              AND NOT EXISTS (SELECT 1 FROM changeWhileAway WHERE documentId = document.id)
            """)
        return doomed.map { $0["storedName"] as String }
    }

    /// Applies retention now (it also runs after every change of the store's state).
    public func collectGarbage() throws {
        var dropped: [String] = []
        do {
            try database.write { db in dropped = try collectGarbage(db) }
        } catch let error as DatabaseError {
            throw DocumentStoreError.database(error.description)
        }
        for name in dropped { FileSystem.unlinkIfPresent(storedPath(name)) }
    }
}

/// The order in which retention's size rule drops unpinned versions: always the oldest of the
/// holder (the user who owned the kept file, `srcUid`; versions of older stores, without one, are
/// one holder of their own) that holds the most unpinned bytes still kept, ties going to the
/// holder with the older version. With one holder this is oldest first.
struct FairEviction {
    private var queues: [Int64?: (items: [(index: Int, size: Int64)], next: Int, bytes: Int64)] = [:]

    /// Adds candidate `index` (given oldest first) of `holder`, of `size` logical bytes.
    mutating func add(_ index: Int, holder: Int64?, size: Int64) {
        queues[holder, default: ([], 0, 0)].items.append((index, size))
        queues[holder]!.bytes += size
    }

    /// The next candidate to drop, or nil when none is left.
    mutating func next() -> Int? {
        var best: (holder: Int64?, bytes: Int64, oldest: Int)?
        for (holder, q) in queues where q.next < q.items.count {
            let oldest = q.items[q.next].index
            if best == nil || q.bytes > best!.bytes || (q.bytes == best!.bytes && oldest < best!.oldest) {
                best = (holder, q.bytes, oldest)
            }
        }
        guard let chosen = best else { return nil }
        return take(chosen.holder)
    }

    private mutating func take(_ holder: Int64?) -> Int {
        let item = queues[holder]!.items[queues[holder]!.next]
        queues[holder]!.next += 1
        queues[holder]!.bytes -= item.size
        return item.index
    }
}
