import Foundation
import GRDB
import Glibc

/// Lost updates between processes that present nothing (docs/document-store.md, "Lost updates"):
/// a process read a version of a document, another changed it, and the first saves over it. The
/// mount keeps the version being overwritten ("theirs") and, while a reader of it is alive, the
/// version that reader read (its base) before they go, then records one `lostUpdate` conflict whose
/// "mine" is the file the late save left.
extension DocumentStore {
    /// Keeps the file at `path` as a version, whatever ``StoreConfiguration/unpresentedFiles`` says
    /// (a live reader of it needs it), as a clone or a copy (never a link: a write by another name
    /// would change it). Returns nil when there is no regular file there; a snapshot with `reused`
    /// when the bytes were kept already.
    ///
    /// Each of `holders` (a live reader, named by the integrator) holds the version until
    /// ``releaseHolds(of:atPath:)``: retention and ``removeOtherVersions(ofPath:)`` never drop a
    /// held version, so the base of a lost update that is not detected yet stays available
    /// whatever the limits. The hold is taken in the same transaction as the snapshot.
    @discardableResult
    ///
    /// `users`: the user of each holder that has one; a holder whose user is at its
    /// ``UserPinBudget`` holds nothing (the version is kept, under retention).
    public func keepForReaders(_ path: String, reason: VersionReason, holders: [String] = [], users: [String: UInt32] = [:]) throws -> Snapshot? {
        let (relative, absolute) = try resolve(path)
        return try write { db -> Snapshot? in
            guard let st = try statDocument(absolute, relative) else { return nil }
            let identity = FileIdentity(st)
            let document = try documentID(db, relative) ?? createDocument(db, relative, identity)
            let snapshot = try takeSnapshot(db, document, relative, absolute, st, reason: reason)
            let id = Int64(bitPattern: snapshot.version.id.rawValue)
            let holding = try holders.filter { try mayPin(db, users[$0], version: id, size: snapshot.version.size) }
            if !holding.isEmpty {
                readerHolds.withLock { holds in
                    for holder in holding { holds[holder, default: [:]][relative, default: []].insert(snapshot.version.id) }
                }
                holderUsers.withLock { known in
                    for holder in holding { if let uid = users[holder] { known[holder] = uid } }
                }
            }
            return snapshot
        }
    }

    /// `holder` no longer needs what it held at `path` (nil: anywhere): it read the document again,
    /// its late save was recorded (the conflict pins what it needs), or it exited. The versions
    /// go back to retention (applied at the next change of the store).
    public func releaseHolds(of holder: String, atPath path: String? = nil) {
        let relative = path.flatMap { try? resolve($0).relative }
        let gone = readerHolds.withLock { holds -> Bool in
            guard let relative else { holds[holder] = nil; return true }
            holds[holder]?[relative] = nil
            if holds[holder]?.isEmpty == true { holds[holder] = nil }
            return holds[holder] == nil
        }
        if gone { holderUsers.withLock { _ = $0.removeValue(forKey: holder) } }
    }

    /// Takes over what live readers hold in `other` (the same store, opened before with another
    /// configuration).
    public func adoptHolds(of other: DocumentStore) {
        let theirs = other.readerHolds.withLock { $0 }
        readerHolds.withLock { mine in mine.merge(theirs) { a, b in a.merging(b) { $0.union($1) } } }
        let users = other.holderUsers.withLock { $0 }
        holderUsers.withLock { $0.merge(users) { a, _ in a } }
    }

    /// The versions the holders of `uid` hold.
    func heldVersions(ofUser uid: UInt32) -> Set<VersionID> {
        let mine = holderUsers.withLock { users in Set(users.filter { $0.value == uid }.keys) }
        guard !mine.isEmpty else { return [] }
        return readerHolds.withLock { holds in
            mine.reduce(into: Set<VersionID>()) { all, holder in holds[holder]?.values.forEach { all.formUnion($0) } }
        }
    }

    /// Every version a live reader holds.
    public var heldVersions: Set<VersionID> {
        readerHolds.withLock { holds in holds.values.reduce(into: Set<VersionID>()) { all, paths in paths.values.forEach { all.formUnion($0) } } }
    }

    /// The newest kept version of the document at `path` that was the file `identity`, if any.
    public func version(atPath path: String, identity: FileIdentity) throws -> VersionID? {
        let (relative, _) = try resolve(path)
        return try read { db in try keptVersion(db, relative, identity) }
    }

    private func keptVersion(_ db: Database, _ relative: String, _ identity: FileIdentity) throws -> VersionID? {
        guard let document = try documentID(db, relative) else { return nil }
        return try UInt64.fetchOne(
            db, sql: "SELECT id FROM version WHERE documentId = ? AND srcDev = ? AND srcIno = ? AND srcSize = ? AND srcMtimeNs = ? ORDER BY id DESC LIMIT 1",
            arguments: StatementArguments([document.rawValue.databaseValue] + Schema.identityValues(identity))
        ).map(VersionID.init(rawValue:))
    }

    /// Records a lost update at `path`: `saver` (a process, named by the integrator) had read the
    /// file `read` and saved over `theirs` (kept before, by ``keepForReaders(_:reason:)``);
    /// the file now at `path` is "mine". The base is the kept version of `read`, when one was kept
    /// while the saver was alive (nil: merge is refused with `baseUnavailable`). Both versions are
    /// pinned while the conflict is open. `owner`: the saver's user, whose conflict it is (besides
    /// root, the one who may list and resolve it; nil: root alone).
    public func recordLostUpdate(_ path: String, saver: StorePresenterID, owner: UInt32? = nil, read: FileIdentity, theirs: FileIdentity) throws -> Conflict {
        let (relative, absolute) = try resolve(path)
        return try write { db -> Conflict in
            let after = try statDocument(absolute, relative).map(FileIdentity.init)
            let document = try documentID(db, relative) ?? createDocument(db, relative, after)
            try setIdentity(db, document, after)
            // Pinned for the conflict only within the saver's budget (``UserPinBudget``); beyond it
            // they stay ordinary versions under retention.
            var base = try keptVersion(db, relative, read)
            var kept = try keptVersion(db, relative, theirs)
            if let id = kept, try !mayPin(db, owner, version: Int64(bitPattern: id.rawValue)) { kept = nil }
            if let id = base, try !mayPin(db, owner, version: Int64(bitPattern: id.rawValue)) { base = nil }
            try db.execute(
                sql: """
                    INSERT INTO conflict (documentId, presenter, kind, state, createdAt, baseVersionId, theirsVersionId, ownerUid,
                      beforeDev, beforeIno, beforeSize, beforeMtimeNs, afterDev, afterIno, afterSize, afterMtimeNs)
                    VALUES (?, ?, 'lostUpdate', 'open', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                    """,
                arguments: StatementArguments(
                    [document.rawValue.databaseValue, saver.rawValue.databaseValue, Self.now().databaseValue,
                     base?.rawValue.databaseValue ?? .null, kept?.rawValue.databaseValue ?? .null, owner.map { Int64($0) }.databaseValue]
                        + Schema.identityValues(theirs) + Schema.identityValues(after)))
            return try fetchConflict(db, ConflictID(rawValue: UInt64(db.lastInsertedRowID)))
        }
    }

    /// The bytes of a lost update's kept version of theirs, or a refusal naming what is missing.
    func theirsOfLostUpdate(_ db: Database, _ conflict: Conflict, _ relative: String) throws -> String {
        guard let theirs = conflict.theirsVersion,
              let name = try String.fetchOne(db, sql: "SELECT storedName FROM version WHERE id = ?", arguments: [theirs.rawValue])
        else { throw DocumentStoreError.unknownVersion(conflict.theirsVersion?.rawValue ?? 0) }
        return storedPath(name)
    }
}
