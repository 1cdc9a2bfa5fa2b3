import GRDB

/// What one user pins now (``UserPinBudget``): the versions, and their logical bytes.
struct PinUsage: Sendable {
    var versions: Set<Int64> = []
    var bytes: Int64 = 0
}

/// The per-user budget of pinned versions (docs/document-store.md, "Per-user budget").
///
/// A user pins a version while it is the kept base of one of its presenters (`interest.ownerUid`),
/// the base or theirs of one of its open conflicts (`conflict.ownerUid`), or held for one of its
/// live readers (``keepForReaders(_:reason:holders:users:)``). Every place that pins asks
/// ``mayPin(_:_:version:size:)`` first, inside the write transaction: a version that would take the
/// user past the budget is not pinned for it. The usage of a user is read once per transaction and
/// then kept up to date in memory, so a burst of registrations costs one query per user.
extension DocumentStore {
    var userPins: UserPinBudget { configuration.userPins }

    /// What `uid` pins, as of this (write) transaction.
    private func usage(_ db: Database, _ uid: UInt32) throws -> PinUsage {
        if let known = pinLedger.withLock({ $0[uid] }) { return known }
        let usage = try loadUsage(db, uid)
        pinLedger.withLock { $0[uid] = usage }
        return usage
    }

    /// What `uid` pins, read from the database and the holds.
    private func loadUsage(_ db: Database, _ uid: UInt32) throws -> PinUsage {
        var usage = PinUsage()
        let owner = Int64(uid)
        for row in try Row.fetchAll(db, sql: """
            SELECT v.id, v.size FROM version v WHERE
              v.id IN (SELECT baseVersionId FROM interest WHERE ownerUid = ? AND baseVersionId IS NOT NULL)
              OR v.id IN (SELECT baseVersionId FROM conflict WHERE ownerUid = ? AND state = 'open' AND baseVersionId IS NOT NULL)
              OR v.id IN (SELECT theirsVersionId FROM conflict WHERE ownerUid = ? AND state = 'open' AND theirsVersionId IS NOT NULL)
            """, arguments: [owner, owner, owner]) {
            usage.versions.insert(row["id"])
            usage.bytes += row["size"] as Int64
        }
        let held = heldVersions(ofUser: uid).map { Int64(bitPattern: $0.rawValue) }.filter { !usage.versions.contains($0) }
        for id in held {
            guard let size = try Int64.fetchOne(db, sql: "SELECT size FROM version WHERE id = ?", arguments: [id]) else { continue }
            usage.versions.insert(id)
            usage.bytes += size
        }
        return usage
    }

    /// Whether `uid` may pin one more version of `size` bytes (its usage is under both bounds).
    func hasRoom(_ db: Database, _ uid: UInt32?, size: Int64) throws -> Bool {
        guard userPins.binds(uid), let uid else { return true }
        let now = try usage(db, uid)
        return now.versions.count < userPins.maxVersions && now.bytes + size <= userPins.maxBytes
    }

    /// True when `uid` may pin `version` (it pins it already, or it stays within the budget with
    /// it); the version is then counted as `uid`'s for the rest of the transaction.
    func mayPin(_ db: Database, _ uid: UInt32?, version: Int64, size: Int64) throws -> Bool {
        guard userPins.binds(uid), let uid else { return true }
        var now = try usage(db, uid)
        if now.versions.contains(version) { return true }
        guard now.versions.count < userPins.maxVersions && now.bytes + size <= userPins.maxBytes else {
            pinLedger.withLock { $0[uid] = now }
            return false
        }
        now.versions.insert(version)
        now.bytes += size
        pinLedger.withLock { $0[uid] = now }
        return true
    }

    /// ``mayPin(_:_:version:size:)`` for a version known by id.
    func mayPin(_ db: Database, _ uid: UInt32?, version: Int64) throws -> Bool {
        guard userPins.binds(uid) else { return true }
        let size = try Int64.fetchOne(db, sql: "SELECT size FROM version WHERE id = ?", arguments: [version]) ?? 0
        return try mayPin(db, uid, version: version, size: size)
    }

    /// What `uid` pins now: distinct versions and their logical bytes (``UserPinBudget``).
    public func pinnedUsage(of uid: UInt32) throws -> (versions: Int, bytes: Int64) {
        try read { db in
            let now = try loadUsage(db, uid)
            return (now.versions.count, now.bytes)
        }
    }

    /// Refuses with ``DocumentStoreError/userPinsExceeded(uid:versions:bytes:)`` when `uid` has no
    /// room for the base of the file at `path` (its size); nothing is changed either way. The
    /// control socket asks before it registers a presenter of a bound user.
    public func checkRoomForBase(of uid: UInt32, path: String) throws {
        guard userPins.binds(uid) else { return }
        let (relative, absolute) = try resolve(path)
        let size = try statDocument(absolute, relative).map { Int64($0.st_size) } ?? 0
        try read { db in
            let now = try loadUsage(db, uid)
            guard now.versions.count >= userPins.maxVersions || now.bytes + size > userPins.maxBytes else { return }
            throw DocumentStoreError.userPinsExceeded(uid: uid, versions: now.versions.count, bytes: now.bytes)
        }
    }

    /// The owners (bound by the budget) of the given presenters' interests in `document`.
    func boundOwners(_ db: Database, _ document: DocumentID, pendingFor identity: FileIdentity? = nil,
                     state: String = "pending") throws -> [(presenter: String, uid: UInt32)] {
        guard userPins.isBounded else { return [] }
        let rows: [Row]
        if let identity {
            rows = try Row.fetchAll(db, sql: """
                SELECT presenter, ownerUid FROM interest WHERE documentId = ? AND ownerUid IS NOT NULL AND baseState = ?
                  AND baseDev = ? AND baseIno = ? AND baseSize = ? AND baseMtimeNs = ?
                """, arguments: StatementArguments([document.rawValue.databaseValue, state.databaseValue] + Schema.identityValues(identity)))
        } else {
            rows = try Row.fetchAll(db, sql: "SELECT presenter, ownerUid FROM interest WHERE documentId = ? AND ownerUid IS NOT NULL",
                                    arguments: [document.rawValue])
        }
        return rows.compactMap { row in
            guard let uid = UInt32(exactly: row["ownerUid"] as Int64), userPins.binds(uid) else { return nil }
            return (row["presenter"], uid)
        }
    }
}
