import Foundation
import GRDB
import Glibc

/// A change made to a document while no daemon watched it, after a gone presenter without unsaved
/// changes had loaded it: what its user's next presenter of it is told when it registers.
public struct ChangeWhileAway: Sendable, Hashable {
    public var document: DocumentID
    public var path: String
    public var kind: ChangeKind
    /// The file the gone presenter had.
    public var before: FileIdentity?
    /// The file now (nil: deleted).
    public var after: FileIdentity?
    /// What a running daemon would have told it: `.reload`, or `.close`.
    public var action: Resolution
}

/// What registering a presenter did.
public struct Registration: Sendable, Hashable {
    public var document: DocumentID
    public var base: BaseState
    /// The snapshot taken (or reused) for the base, when it was captured right away.
    public var snapshot: Snapshot?
}

extension DocumentStore {
    /// A presenter loaded the document at `path`: the store keeps that version (its base) until the
    /// presenter lets go (``unregister(_:path:)``) or moves on to a newer one (``rebase(_:path:)``).
    ///
    /// Where cloning is O(1) (reflink) the base is cloned right away. Elsewhere it is captured
    /// lazily by the first snapshot of the document: a link when the next mutation is a rename over
    /// it or its deletion, a copy before the first in-place write. Registering again rebases.
    ///
    /// `owner`: the presenter's user, recorded with its conflicts: besides root, the one user who
    /// may list and resolve them, also once the presenter is gone (nil: root alone).
    @discardableResult
    public func register(_ presenter: StorePresenterID, path: String, owner: UInt32? = nil) throws -> Registration {
        let (relative, absolute) = try resolve(path)
        return try write { db in try register(db, presenter, relative, absolute, owner) }
    }

    /// ``register(_:path:)`` for many presenters in one transaction (a burst of registrations costs
    /// one commit and one retention pass, not one each). Each result is that presenter's.
    public func registerAll(_ presenters: [(presenter: StorePresenterID, path: String, owner: UInt32?)]) -> [Result<Registration, any Error>] {
        var results: [Result<Registration, any Error>] = []
        results.reserveCapacity(presenters.count)
        do {
            try write { db in
                for (presenter, path, owner) in presenters {
                    results.append(Result { () throws -> Registration in
                        let (relative, absolute) = try resolve(path)
                        return try register(db, presenter, relative, absolute, owner)
                    })
                }
            }
        } catch {
            return presenters.map { _ in .failure(error) }
        }
        return results
    }

    private func register(_ db: Database, _ presenter: StorePresenterID, _ relative: String, _ absolute: String, _ owner: UInt32?) throws -> Registration {
        guard let st = try statDocument(absolute, relative) else { throw DocumentStoreError.fileNotFound(relative) }
        let identity = FileIdentity(st)
        let document = try documentID(db, relative) ?? createDocument(db, relative, identity)
        try setIdentity(db, document, identity)
        try db.cachedStatement(sql: """
            INSERT INTO interest (documentId, presenter, baseState, registeredAt, ownerUid) VALUES (?, ?, 'lost', ?, ?)
            ON CONFLICT (documentId, presenter) DO UPDATE SET ownerUid = coalesce(ownerUid, excluded.ownerUid)
            """).execute(arguments: [document.rawValue, presenter.rawValue, Self.now(), owner.map { Int64($0) }])
        let (base, snapshot) = try setBase(db, document, presenter, relative, absolute, st)
        return Registration(document: document, base: base, snapshot: snapshot)
    }

    /// The presenter now has the file as it is on disk (it saved, or it reloaded): its base moves to
    /// the current file and its unsaved-changes flag clears.
    @discardableResult
    public func rebase(_ presenter: StorePresenterID, path: String) throws -> Registration {
        let (relative, absolute) = try resolve(path)
        return try write { db in
            let document = try requireInterest(db, presenter, relative)
            guard let st = try statDocument(absolute, relative) else { throw DocumentStoreError.fileNotFound(relative) }
            try setIdentity(db, document, FileIdentity(st))
            let (base, snapshot) = try setBase(db, document, presenter, relative, absolute, st)
            return Registration(document: document, base: base, snapshot: snapshot)
        }
    }

    /// Whether the presenter has unsaved changes in the document (decides between a conflict and
    /// the default action when the file changes underneath it).
    ///
    /// A presenter that says it has unsaved changes takes over the open conflict its user's gone
    /// presenter left on the document (the newest, when several did): the editor that held those
    /// changes when the file changed underneath it, registered again after its daemon crashed or
    /// restarted, or after it reconnected. A gone presenter is one with no interest left in the store
    /// (dropped when its daemon stopped or at the next start, or let go); a lost update is no
    /// presenter's and stays its saver's. Returns the conflicts taken over (none or one), for the
    /// integrator to tell the presenter; one it has already keeps it from taking another.
    @discardableResult
    public func setUnsavedChanges(_ presenter: StorePresenterID, path: String, _ hasUnsavedChanges: Bool) throws -> [ConflictID] {
        let (relative, _) = try resolve(path)
        return try write { db in
            let document = try requireInterest(db, presenter, relative)
            try db.execute(
                sql: "UPDATE interest SET hasUnsavedChanges = ? WHERE documentId = ? AND presenter = ?",
                arguments: [hasUnsavedChanges, document.rawValue, presenter.rawValue])
            guard hasUnsavedChanges else { return [] }
            return try adoptConflict(db, document, presenter)
        }
    }

    /// The open conflict of a gone presenter of the same user on `document`, now `presenter`'s.
    private func adoptConflict(_ db: Database, _ document: DocumentID, _ presenter: StorePresenterID) throws -> [ConflictID] {
        guard let owner = try Int64.fetchOne(
            db, sql: "SELECT ownerUid FROM interest WHERE documentId = ? AND presenter = ?", arguments: [document.rawValue, presenter.rawValue]),
            try Bool.fetchOne(
                db, sql: "SELECT 1 FROM conflict WHERE documentId = ? AND presenter = ? AND state = 'open'",
                arguments: [document.rawValue, presenter.rawValue]) == nil,
            let id = try Int64.fetchOne(db, sql: """
                SELECT c.id FROM conflict c WHERE c.documentId = ? AND c.state = 'open' AND c.kind != 'lostUpdate' AND c.ownerUid = ?
                  AND c.presenter != ? AND NOT EXISTS (SELECT 1 FROM interest i WHERE i.presenter = c.presenter)
                ORDER BY c.id DESC LIMIT 1
                """, arguments: [document.rawValue, owner, presenter.rawValue])
        else { return [] }
        try db.execute(sql: "UPDATE conflict SET presenter = ? WHERE id = ?", arguments: [presenter.rawValue, id])
        return [ConflictID(rawValue: UInt64(id))]
    }

    /// The presenter lets go of the document: its base is released and retention may drop it.
    /// Its open conflicts stay (they can still be resolved, for example from the command line).
    public func unregister(_ presenter: StorePresenterID, path: String) throws {
        let (relative, _) = try resolve(path)
        try write { db in
            let document = try requireInterest(db, presenter, relative)
            try db.execute(sql: "DELETE FROM interest WHERE documentId = ? AND presenter = ?", arguments: [document.rawValue, presenter.rawValue])
        }
    }

    /// The presenter is gone (disconnected, or not reconnected after a restart): drops all its
    /// interests. Returns how many there were.
    @discardableResult
    public func unregisterAll(_ presenter: StorePresenterID) throws -> Int {
        try unregisterAll([presenter])
    }

    /// ``unregisterAll(_:)`` for many presenters in one transaction (a connection closing with
    /// 10,000 presenters costs one commit). Returns how many interests there were.
    @discardableResult
    public func unregisterAll(_ presenters: [StorePresenterID]) throws -> Int {
        guard !presenters.isEmpty else { return 0 }
        return try write { db in
            var removed = 0
            let statement = try db.cachedStatement(sql: "DELETE FROM interest WHERE presenter = ?")
            for presenter in presenters {
                try statement.execute(arguments: [presenter.rawValue])
                removed += db.changesCount
            }
            return removed
        }
    }

    /// Presenters gone with their daemon (killed, crashed): their interests are dropped as by
    /// ``unregisterAll(_:)``, in one transaction, after the store looked once more at each document
    /// one of them held with unsaved changes. Where the file is no longer that presenter's base
    /// (changed or deleted while no daemon watched it: beside the mount, by another node, or by a
    /// write whose change its daemon died before recording), the conflict a running daemon would have
    /// opened for it is opened now (or the change is folded into its open one): the base it had as
    /// its base version when the store kept one (none when it was still pending, as for any change
    /// made beside the mount), its user as owner. Its editor, registered again with unsaved changes,
    /// takes that conflict over (``setUnsavedChanges(_:path:_:)``), where before it silently had
    /// the changed file as its new base. A presenter that never comes back leaves an open conflict
    /// like any other: it pins its base until resolved, within its user's pin budget. Returns the
    /// conflicts opened (not those folded into).
    @discardableResult
    public func dropGonePresenters(_ presenters: [StorePresenterID]) throws -> [Conflict] {
        guard !presenters.isEmpty else { return [] }
        return try write { db in
            var opened: [Conflict] = []
            let held = try db.cachedStatement(sql: """
                SELECT i.*, d.path AS documentPath FROM interest i JOIN document d ON d.id = i.documentId
                WHERE i.presenter = ? AND (i.hasUnsavedChanges OR i.ownerUid IS NOT NULL) AND d.path IS NOT NULL
                """)
            for presenter in presenters {
                for row in try Row.fetchAll(held, arguments: [presenter.rawValue]) {
                    guard let absolute = try? resolve(row["documentPath"] as String).absolute else { continue }
                    let document = DocumentID(rawValue: row["documentId"])
                    guard let base = Schema.identity(row, "base") else { continue }
                    // A file it cannot look at now is left as it is (no conflict guessed).
                    let onDisk: FileIdentity?
                    do { onDisk = try documentFileIfPresent(absolute).map(FileIdentity.init) } catch { continue }
                    if base == onDisk { continue }
                    guard row["hasUnsavedChanges"] as Bool else {
                        try noteChangeWhileAway(db, document, owner: row["ownerUid"], before: base, after: onDisk)
                        continue
                    }
                    let folded = try Bool.fetchOne(
                        db, sql: "SELECT 1 FROM conflict WHERE documentId = ? AND presenter = ? AND state = 'open'",
                        arguments: [document.rawValue, presenter.rawValue]) == true
                    try setIdentity(db, document, onDisk)
                    let conflict = try openConflict(db, document, presenter, onDisk == nil ? .deletion : .change, before: base, after: onDisk,
                                                    base: row["baseState"] == "kept" ? row["baseVersionId"] as Int64? : nil,
                                                    owner: row["ownerUid"])
                    if !folded { opened.append(conflict) }
                }
            }
            let drop = try db.cachedStatement(sql: "DELETE FROM interest WHERE presenter = ?")
            for presenter in presenters { try drop.execute(arguments: [presenter.rawValue]) }
            // Bounded: the newest ones are kept; an older one is forgotten (its editor is then not told).
            try db.execute(sql: """
                DELETE FROM changeWhileAway WHERE rowid NOT IN
                  (SELECT rowid FROM changeWhileAway ORDER BY createdAt DESC, rowid DESC LIMIT ?)
                """, arguments: [Self.maxChangesWhileAway])
            return opened
        }
    }

    /// How many changes made while away (``dropGonePresenters(_:)``) the store remembers at most.
    public static let maxChangesWhileAway = 4096

    /// A gone presenter without unsaved changes had `document` as `before`, and the file is now
    /// `after` (nil: deleted): remembered for its user (one row per document and user, the first
    /// `before` kept) until a presenter of that user registers on it (``takeChangesWhileAway(_:)``).
    private func noteChangeWhileAway(_ db: Database, _ document: DocumentID, owner: Int64, before: FileIdentity, after: FileIdentity?) throws {
        try setIdentity(db, document, after)
        let kind: ChangeKind = after == nil ? .deletion : .change
        // What a running daemon tells a presenter without unsaved changes by default (`announce`):
        // reload, or close when the file is gone. (With on_change/on_delete=ask it would have had a
        // conflict, which nobody takes over without unsaved changes: told as by default instead.)
        let action: Resolution = after != nil ? .reload : .close
        try db.execute(sql: """
            INSERT INTO changeWhileAway (documentId, ownerUid, kind, action, beforeDev, beforeIno, beforeSize, beforeMtimeNs,
                                         afterDev, afterIno, afterSize, afterMtimeNs, createdAt)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            ON CONFLICT (documentId, ownerUid) DO UPDATE SET kind = excluded.kind, action = excluded.action,
              afterDev = excluded.afterDev, afterIno = excluded.afterIno, afterSize = excluded.afterSize,
              afterMtimeNs = excluded.afterMtimeNs, createdAt = excluded.createdAt
            """, arguments: StatementArguments([document.rawValue.databaseValue, owner.databaseValue, kind.rawValue.databaseValue,
                                                 action.rawValue.databaseValue] + Schema.identityValues(before) + Schema.identityValues(after)
                                                + [Self.now().databaseValue]))
    }

    /// How many changes made while away the store remembers (``dropGonePresenters(_:)``).
    public func changesWhileAwayCount() throws -> Int {
        try read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM changeWhileAway") ?? 0 }
    }

    /// For each (path, user) of a presenter that just registered: the change made to that document
    /// while no daemon watched it, after a gone presenter of the same user had loaded it
    /// (``dropGonePresenters(_:)``), taken (told once), or nil. One transaction for all.
    public func takeChangesWhileAway(_ registrations: [(path: String, owner: UInt32)]) throws -> [ChangeWhileAway?] {
        guard !registrations.isEmpty else { return [] }
        return try write { db in
            let find = try db.cachedStatement(sql: """
                SELECT rowid, * FROM changeWhileAway WHERE ownerUid = ? AND documentId = (SELECT id FROM document WHERE path = ?)
                """)
            let take = try db.cachedStatement(sql: "DELETE FROM changeWhileAway WHERE rowid = ?")
            return try registrations.map { path, owner -> ChangeWhileAway? in
                guard let relative = try? resolve(path).relative,
                      let row = try Row.fetchOne(find, arguments: [Int64(owner), relative]) else { return nil }
                try take.execute(arguments: [row["rowid"] as Int64])
                guard let kind = ChangeKind(rawValue: row["kind"]), let action = Resolution(rawValue: row["action"])
                else { return nil }
                return ChangeWhileAway(document: DocumentID(rawValue: row["documentId"]), path: relative, kind: kind,
                                       before: Schema.identity(row, "before"), after: Schema.identity(row, "after"), action: action)
            }
        }
    }

    /// Every presenter with an interest recorded (they survive a restart; the integrator drops the
    /// ones that do not come back with ``dropGonePresenters(_:)``).
    public func presenters() throws -> [StorePresenterID] {
        try read { db in
            try String.fetchAll(db, sql: "SELECT DISTINCT presenter FROM interest ORDER BY presenter").map(StorePresenterID.init(rawValue:))
        }
    }

    /// The document at `path`, if the store knows one.
    public func document(atPath path: String) throws -> DocumentInfo? {
        let (relative, _) = try resolve(path)
        return try read { db in
            guard let id = try documentID(db, relative) else { return nil }
            return try documentInfo(db, id)
        }
    }

    /// The document with this id, if the store still knows it.
    public func document(_ id: DocumentID) throws -> DocumentInfo? {
        try read { db in try documentInfo(db, id) }
    }

    /// A path moved (rename without replacing a presented document's contents): the document at
    /// `from` now lives at `to`. A document that was at `to` is detached (keeps its id and versions,
    /// loses its path), unless presenters of it are still there (a rename over a presented document
    /// is a save of it: its presenters stay): then the moved document joins it, its versions,
    /// presenters (with the bases they loaded) and conflicts now the document's at `to`, so that
    /// both documents' presenters hear of the next change there. When `from` is not a document,
    /// the documents inside it as a folder follow it. Returns the moved document (the one at `to`
    /// it joined), or nil when `from` is not a document.
    @discardableResult
    public func noteMoved(from: String, to: String) throws -> DocumentID? {
        let (source, _) = try resolve(from)
        let (destination, destinationAbsolute) = try resolve(to)
        return try write { db -> DocumentID? in
            guard let document = try documentID(db, source) else {
                try noteFolderMoved(db, from: source, to: destination)
                return nil
            }
            if source == destination { return document }
            if let staying = try documentID(db, destination),
               try Bool.fetchOne(db, sql: "SELECT 1 FROM interest WHERE documentId = ? LIMIT 1", arguments: [staying.rawValue]) == true {
                // (A presenter has one interest per document: one already there keeps it.)
                for table in ["version", "OR IGNORE interest", "conflict"] {
                    try db.execute(sql: "UPDATE \(table) SET documentId = ? WHERE documentId = ?", arguments: [staying.rawValue, document.rawValue])
                }
                try db.execute(sql: "DELETE FROM document WHERE id = ?", arguments: [document.rawValue])
                if let st = try? statDocument(destinationAbsolute, destination) {
                    try setIdentity(db, staying, FileIdentity(st))
                }
                return staying
            }
            try db.execute(sql: "UPDATE document SET path = NULL WHERE path = ?", arguments: [destination])
            try db.execute(sql: "UPDATE document SET path = ? WHERE id = ?", arguments: [destination, document.rawValue])
            if let st = try? statDocument(destinationAbsolute, destination) {
                try setIdentity(db, document, FileIdentity(st))
            }
            return document
        }
    }

    /// A folder moved: the documents inside it follow (their versions and conflicts are theirs by
    /// document, so `versions` by the new path finds them).
    private func noteFolderMoved(_ db: Database, from source: String, to destination: String) throws {
        guard !source.isEmpty, source != destination else { return }
        let prefix = source + "/"
        let inside = try Row.fetchAll(db, sql: "SELECT id, path FROM document WHERE instr(path, ?) = 1", arguments: [prefix])
        for row in inside {
            let id: Int64 = row["id"], old: String = row["path"]
            guard old.utf8.starts(with: prefix.utf8) else { continue }
            let moved = destination + "/" + String(decoding: old.utf8.dropFirst(prefix.utf8.count), as: UTF8.self)
            try db.execute(sql: "UPDATE document SET path = NULL WHERE path = ?", arguments: [moved])
            try db.execute(sql: "UPDATE document SET path = ? WHERE id = ?", arguments: [moved, id])
        }
    }

    // MARK: Internals

    func requireInterest(_ db: Database, _ presenter: StorePresenterID, _ relative: String) throws -> DocumentID {
        guard let document = try documentID(db, relative),
              try Bool.fetchOne(db, sql: "SELECT 1 FROM interest WHERE documentId = ? AND presenter = ?", arguments: [document.rawValue, presenter.rawValue]) != nil
        else { throw DocumentStoreError.unknownPresenter(presenter: presenter.rawValue, path: relative) }
        return document
    }

    /// Makes the file as it is now the presenter's base: cloned when cheap, otherwise pending
    /// (or reusing a version that already holds exactly this file).
    func setBase(
        _ db: Database, _ document: DocumentID, _ presenter: StorePresenterID, _ relative: String, _ absolute: String, _ st: stat
    ) throws -> (BaseState, Snapshot?) {
        let identity = FileIdentity(st)
        let owner = try ownerOfInterest(db, document, presenter)
        let released = try owner.map { _ in
            try Int64.fetchOne(db.cachedStatement(sql: "SELECT baseVersionId FROM interest WHERE documentId = ? AND presenter = ?"),
                               arguments: [document.rawValue, presenter.rawValue])
        } ?? nil
        // Cached statements: this runs once per presenter of a document at every change of it.
        try db.cachedStatement(sql: """
            UPDATE interest SET baseState = 'pending', baseVersionId = NULL, baseDev = ?, baseIno = ?, baseSize = ?, baseMtimeNs = ?,
              hasUnsavedChanges = 0 WHERE documentId = ? AND presenter = ?
            """).execute(arguments: StatementArguments(Schema.identityValues(identity) + [document.rawValue.databaseValue, presenter.rawValue.databaseValue]))
        if let owner {
            // The base it lets go of frees its room (what the user pins is read again).
            if released != nil { pinLedger.withLock { $0[owner] = nil } }
            // A user at its budget of pinned versions gets no base kept (nothing copied for it).
            if try !hasRoom(db, owner, size: identity.size) {
                try db.cachedStatement(sql: "UPDATE interest SET baseState = 'lost' WHERE documentId = ? AND presenter = ?")
                    .execute(arguments: [document.rawValue, presenter.rawValue])
                return (.lost, nil)
            }
        }
        var snapshot: Snapshot?
        if inPlaceMethod == .reflink && configuration.eagerBaseWhenCloneable {
            snapshot = try takeSnapshot(db, document, relative, absolute, st, reason: .base)
        } else if let existing = try Int64.fetchOne(
            db.cachedStatement(sql: "SELECT id FROM version WHERE documentId = ? AND srcDev = ? AND srcIno = ? AND srcSize = ? AND srcMtimeNs = ? AND method != 'link' ORDER BY id DESC LIMIT 1"),
            arguments: StatementArguments([document.rawValue.databaseValue] + Schema.identityValues(identity)))
        {
            let allowed = try mayPin(db, owner, version: existing)
            try db.cachedStatement(sql: "UPDATE interest SET baseState = ?, baseVersionId = ? WHERE documentId = ? AND presenter = ?")
                .execute(arguments: [allowed ? "kept" : "lost", allowed ? existing : nil, document.rawValue, presenter.rawValue])
        }
        let row = try Row.fetchOne(db.cachedStatement(sql: "SELECT * FROM interest WHERE documentId = ? AND presenter = ?"),
                                   arguments: [document.rawValue, presenter.rawValue])!
        return (Schema.interest(row).base, snapshot)
    }

    /// ``setBase(_:_:_:_:_:_:)`` for every presenter of a document that reloads the same file: the
    /// kept version that may hold it is looked up once, then one update per presenter.
    func setBases(
        _ db: Database, _ document: DocumentID, _ presenters: [StorePresenterID], _ relative: String, _ absolute: String, _ st: stat
    ) throws {
        if inPlaceMethod == .reflink && configuration.eagerBaseWhenCloneable {
            for presenter in presenters { _ = try setBase(db, document, presenter, relative, absolute, st) }
            return
        }
        let identity = FileIdentity(st)
        let existing = try Int64.fetchOne(
            db.cachedStatement(sql: "SELECT id FROM version WHERE documentId = ? AND srcDev = ? AND srcIno = ? AND srcSize = ? AND srcMtimeNs = ? AND method != 'link' ORDER BY id DESC LIMIT 1"),
            arguments: StatementArguments([document.rawValue.databaseValue] + Schema.identityValues(identity)))
        let update = try db.cachedStatement(sql: """
            UPDATE interest SET baseState = ?, baseVersionId = ?, baseDev = ?, baseIno = ?, baseSize = ?, baseMtimeNs = ?,
              hasUnsavedChanges = 0 WHERE documentId = ? AND presenter = ?
            """)
        let values: [DatabaseValue] = [(existing == nil ? "pending" : "kept").databaseValue, existing.databaseValue] + Schema.identityValues(identity)
        for presenter in presenters {
            try update.execute(arguments: StatementArguments(values + [document.rawValue.databaseValue, presenter.rawValue.databaseValue]))
        }
        // Those whose user has no room for this base keep none (see ``UserPinBudget``).
        let reloading = Set(presenters.map(\.rawValue))
        for (presenter, uid) in try boundOwners(db, document) where reloading.contains(presenter) {
            let allowed = try existing.map { try mayPin(db, uid, version: $0) } ?? hasRoom(db, uid, size: identity.size)
            if !allowed {
                try db.cachedStatement(sql: "UPDATE interest SET baseState = 'lost', baseVersionId = NULL WHERE documentId = ? AND presenter = ?")
                    .execute(arguments: [document.rawValue, presenter])
            }
        }
    }

    /// The user an interest was registered with, when the budget binds it (else nil).
    func ownerOfInterest(_ db: Database, _ document: DocumentID, _ presenter: StorePresenterID) throws -> UInt32? {
        guard userPins.isBounded,
              let owner = try Int64.fetchOne(db.cachedStatement(sql: "SELECT ownerUid FROM interest WHERE documentId = ? AND presenter = ?"),
                                             arguments: [document.rawValue, presenter.rawValue]),
              let uid = UInt32(exactly: owner), userPins.binds(uid)
        else { return nil }
        return uid
    }

    func documentInfo(_ db: Database, _ id: DocumentID) throws -> DocumentInfo? {
        guard let row = try Row.fetchOne(db, sql: "SELECT * FROM document WHERE id = ?", arguments: [id.rawValue]) else { return nil }
        let interests = try Row.fetchAll(db, sql: "SELECT * FROM interest WHERE documentId = ? ORDER BY registeredAt, presenter", arguments: [id.rawValue])
        return DocumentInfo(id: id, path: row["path"], identity: Schema.identity(row, ""), presenters: interests.map(Schema.interest))
    }
}
