import NameBytes
import Foundation
import GRDB
import Glibc

extension DocumentStore {
    /// The mount saw `path` change, get replaced or get deleted (after the operation, with the
    /// matching `preserveBefore…` call made before it). Produces the single "underlying file
    /// changed" event for the document, with its before/after identity, and for every presenter
    /// other than `writer`: a conflict when it has unsaved changes (or no default action is
    /// configured), else the default action applied (reload or close).
    ///
    /// Identities left nil are filled in: before from the store's records, after from the disk.
    /// Returns nil when `path` is not a document anybody presents or has an open conflict on.
    @discardableResult
    /// `onlyIfNotAsKnown`: nothing is recorded when the file on disk is the one the store knew (a
    /// change that may have happened unseen). `beside`: the change was made where the store was not
    /// asked first (directly in the backing folder, another host): a base that is a prefix of the
    /// file (``BaseState/prefix(_:)``) cannot be trusted any more and is lost, as a pending one.
    public func noteExternalChange(_ path: String, _ change: ExternalChange, by writer: StorePresenterID? = nil,
                                   onlyIfNotAsKnown: Bool = false, beside: Bool = false) throws -> UnderlyingFileChanged? {
        let (relative, absolute) = try resolve(path)
        // Not a document: nothing to record, and no need for the writer lock.
        if try read({ db in try documentID(db, relative) }) == nil { return nil }
        return try write { db -> UnderlyingFileChanged? in
            guard let document = try documentID(db, relative) else { return nil }
            let known = try Row.fetchOne(db, sql: "SELECT * FROM document WHERE id = ?", arguments: [document.rawValue]).flatMap { Schema.identity($0, "") }
            // Something else at its name (a folder, a link, a FIFO): the document is gone.
            let onDisk = try documentFileIfPresent(absolute).map(FileIdentity.init)
            if onlyIfNotAsKnown && known == onDisk { return nil }
            let before: FileIdentity?
            var after: FileIdentity?
            var kind: ChangeKind
            switch change {
            case let .changed(b, a), let .replaced(b, a):
                before = b ?? known
                after = a ?? onDisk
                kind = .change
            case let .deleted(b):
                before = b ?? known
                after = nil
                kind = .deletion
            }
            // A change whose file is already gone again is a deletion by the time anyone reacts.
            if kind == .change && onDisk == nil { kind = .deletion; after = nil }
            return try announce(db, document, relative, absolute, kind, before: before, after: after, writer: writer,
                                beside: beside || onlyIfNotAsKnown)
        }
    }

    /// Records the change and decides, per presenter, between a conflict and the default action.
    func announce(
        _ db: Database, _ document: DocumentID, _ relative: String, _ absolute: String, _ kind: ChangeKind,
        before: FileIdentity?, after: FileIdentity?, writer: StorePresenterID?, beside: Bool = false
    ) throws -> UnderlyingFileChanged? {
        try setIdentity(db, document, after)
        let preset = kind == .change ? configuration.defaultActions.whenChanged : configuration.defaultActions.whenDeleted
        // Only actions that need nothing from the presenter can be applied for it.
        let automatic: Resolution? = switch preset {
        case .reload? where kind == .change: .reload
        case .close?: .close
        default: nil
        }
        // Bases that are a prefix of the file: after appends through the mount still its first
        // bytes, copied now for a presenter that gets a conflict (its base pinned is a version);
        // a reload drops them without a copy. A change beside the mount may have changed any byte.
        if beside {
            try db.execute(sql: "UPDATE interest SET baseState = 'lost' WHERE documentId = ? AND baseState = 'prefix'", arguments: [document.rawValue])
        } else if try Bool.fetchOne(
            db, sql: "SELECT 1 FROM interest WHERE documentId = ? AND baseState = 'prefix' AND presenter IS NOT ? AND (hasUnsavedChanges OR ?) LIMIT 1",
            arguments: [document.rawValue, writer?.rawValue, automatic == nil]) == true
        {
            try keepPrefixBases(db, document, relative, absolute, try documentFileIfPresent(absolute))
        }
        // Bases still pending are not this file any more and were never captured.
        try db.execute(
            sql: """
                UPDATE interest SET baseState = 'lost' WHERE documentId = ? AND baseState = 'pending'
                  AND NOT (baseDev IS ? AND baseIno IS ? AND baseSize IS ? AND baseMtimeNs IS ?)
                """,
            arguments: StatementArguments([document.rawValue.databaseValue] + Schema.identityValues(after)))
        let interests = try Row.fetchAll(db, sql: "SELECT * FROM interest WHERE documentId = ? ORDER BY registeredAt, presenter", arguments: [document.rawValue])
            .map { ($0, Schema.interest($0)) }
            .filter { $0.1.presenter != writer }
        let openConflicts = try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM conflict WHERE documentId = ? AND state = 'open'", arguments: [document.rawValue]) ?? 0
        if interests.isEmpty && openConflicts == 0 { return nil }

        var outcomes: [PresenterOutcome] = []
        outcomes.reserveCapacity(interests.count)
        // The file is the same for every presenter: looked at once, not once per presenter.
        var current: stat??
        func currentFile() throws -> stat? {
            if let current { return current }
            let st = try documentFileIfPresent(absolute)
            current = .some(st)
            return st
        }
        var reloads: [StorePresenterID] = []
        for (row, interest) in interests {
            if interest.hasUnsavedChanges || automatic == nil {
                let conflict = try openConflict(db, document, interest.presenter, kind, before: before, after: after,
                                                base: row["baseState"] == "kept" ? row["baseVersionId"] as Int64? : nil,
                                                owner: row["ownerUid"])
                outcomes.append(PresenterOutcome(presenter: interest.presenter, action: .conflict(conflict)))
            } else if automatic == .reload, try currentFile() != nil {
                reloads.append(interest.presenter)
                outcomes.append(PresenterOutcome(presenter: interest.presenter, action: .applied(.reload)))
            } else {
                try db.cachedStatement(sql: "DELETE FROM interest WHERE documentId = ? AND presenter = ?")
                    .execute(arguments: [document.rawValue, interest.presenter.rawValue])
                outcomes.append(PresenterOutcome(presenter: interest.presenter, action: .applied(.close)))
            }
        }
        if !reloads.isEmpty, let st = try currentFile() {
            try setBases(db, document, reloads, relative, absolute, st)
        }
        return UnderlyingFileChanged(document: document, path: relative, kind: kind, before: before, after: after, outcomes: outcomes)
    }

    /// Opens a conflict for (document, presenter), or folds this change into the open one: one
    /// conflict per presenter however many changes land before it is resolved.
    func openConflict(
        _ db: Database, _ document: DocumentID, _ presenter: StorePresenterID, _ kind: ChangeKind,
        before: FileIdentity?, after: FileIdentity?, base: Int64?, owner: Int64?
    ) throws -> Conflict {
        if let id = try UInt64.fetchOne(
            db, sql: "SELECT id FROM conflict WHERE documentId = ? AND presenter = ? AND state = 'open'",
            arguments: [document.rawValue, presenter.rawValue])
        {
            try db.execute(
                sql: "UPDATE conflict SET kind = ?, afterDev = ?, afterIno = ?, afterSize = ?, afterMtimeNs = ? WHERE id = ?",
                arguments: StatementArguments([kind.rawValue.databaseValue] + Schema.identityValues(after) + [id.databaseValue]))
            return try fetchConflict(db, ConflictID(rawValue: id))
        }
        // The base stays pinned for the conflict only within its user's budget (else merge is refused).
        var base = base
        if let kept = base, try !mayPin(db, owner.flatMap { UInt32(exactly: $0) }, version: kept) { base = nil }
        try db.execute(
            sql: """
                INSERT INTO conflict (documentId, presenter, kind, state, createdAt, baseVersionId, ownerUid,
                  beforeDev, beforeIno, beforeSize, beforeMtimeNs, afterDev, afterIno, afterSize, afterMtimeNs)
                VALUES (?, ?, ?, 'open', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """,
            arguments: StatementArguments(
                [document.rawValue.databaseValue, presenter.rawValue.databaseValue, kind.rawValue.databaseValue,
                 Self.now().databaseValue, base.databaseValue, owner.databaseValue] + Schema.identityValues(before) + Schema.identityValues(after)))
        return try fetchConflict(db, ConflictID(rawValue: UInt64(db.lastInsertedRowID)))
    }

    func fetchConflict(_ db: Database, _ id: ConflictID) throws -> Conflict {
        guard let row = try Row.fetchOne(
            db, sql: "SELECT \(Schema.conflictColumns) FROM conflict c JOIN document d ON d.id = c.documentId WHERE c.id = ?",
            arguments: [id.rawValue])
        else { throw DocumentStoreError.unknownConflict(id.rawValue) }
        return try Schema.conflict(row)
    }

    // MARK: Queries

    /// Conflicts, oldest first: open ones by default, all with `state: nil`.
    public func conflicts(state: ConflictState? = .open) throws -> [Conflict] {
        try read { db in
            try Row.fetchAll(
                db, sql: "SELECT \(Schema.conflictColumns) FROM conflict c JOIN document d ON d.id = c.documentId WHERE (? IS NULL OR c.state = ?) ORDER BY c.id",
                arguments: [state?.rawValue, state?.rawValue]
            ).map(Schema.conflict)
        }
    }

    /// The conflicts a user other than root may list, oldest first (open ones by default): those
    /// `uid` owns, and those an older store recorded with no owner (for the caller to judge: a lost
    /// update's saver is in its presenter's name). Found through the owner index, so the cost
    /// follows this user's conflicts, not every user's.
    public func conflicts(ownedBy uid: UInt32, state: ConflictState? = .open) throws -> [Conflict] {
        try read { db in
            try Row.fetchAll(db, sql: Self.ownedConflictsQuery, arguments: [Int64(uid), state?.rawValue, state?.rawValue]).map(Schema.conflict)
        }
    }

    static let ownedConflictsQuery = """
        SELECT \(Schema.conflictColumns) FROM conflict c JOIN document d ON d.id = c.documentId
        WHERE (c.ownerUid = ? OR c.ownerUid IS NULL) AND (? IS NULL OR c.state = ?) ORDER BY c.id
        """

    /// The conflicts of the document at `path`, oldest first (open ones by default).
    public func conflicts(atPath path: String, state: ConflictState? = .open) throws -> [Conflict] {
        let (relative, _) = try resolve(path)
        return try conflicts(state: state).filter { ExactName.same($0.path, relative) }
    }

    /// One conflict.
    public func conflict(_ id: ConflictID) throws -> Conflict {
        try read { db in try fetchConflict(db, id) }
    }
}
