/// The user a presenter belongs to, as the daemon learned it (uid, gid and supplementary groups).
/// Presenters registered with credentials are screened by the coordinator's
/// ``PresenterPermissions``: they hear only of items their user could see, and are asked before an
/// access only when their user could make that access itself.
public struct PresenterCredentials: Hashable, Sendable, CustomStringConvertible {
    public var uid: UInt32
    public var gid: UInt32
    /// Supplementary groups.
    public var groups: [UInt32]

    public init(uid: UInt32, gid: UInt32, groups: [UInt32] = []) {
        self.uid = uid
        self.gid = gid
        self.groups = groups
    }

    public var description: String { "uid=\(uid) gid=\(gid)" }
}

/// Decides what a presenter's user may learn and delay (docs/protocol.md, "Threat model").
///
/// The coordinator consults it only for presenters registered with ``PresenterCredentials`` whose
/// uid is neither 0 nor the accessor's (a user may learn and delay what it does itself), under its
/// lock, at most once per credentials and path (or intent) per request. Implementations judge
/// against the real file system and must not block on anything but it.
public protocol PresenterPermissions: Sendable {
    /// Whether `credentials` could learn that `path` exists (and so hear what happens to it).
    func maySee(_ path: ItemPath, as credentials: PresenterCredentials) -> Bool
    /// Whether `credentials` could make `intent` itself, and so may delay or refuse it.
    func mayMake(_ intent: FileAccessIntent, as credentials: PresenterCredentials) -> Bool
    /// The credentials the user of an access is judged with when its read would hold up another
    /// user's write (it may only when that user could make the write itself). By default the
    /// origin's uid and gid, no supplementary groups.
    func credentials(of origin: AccessOrigin) -> PresenterCredentials
}

extension PresenterPermissions {
    public func credentials(of origin: AccessOrigin) -> PresenterCredentials {
        PresenterCredentials(uid: origin.uid, gid: origin.gid)
    }
}

/// Who may hold up whose write by reading (docs/protocol.md, "Who may delay or refuse what": a read
/// counts as a write): the one rule, applied by the coordinator to a held or queued read of its own
/// mount (``Coordinator/mayHoldUp(_:_:)``) and by a cluster node to another node's read right, whose
/// node recorded its user. Only with a permissions screen (the daemon); without one, every hold holds.
public enum HoldUpRule {
    /// Whether a hold of user `holderUID` in the way of a request of user `requesterUID` is judged at
    /// all: root's holds and the requester's own user's hold it up as ever.
    @inline(__always)
    public static func judges(holderUID: UInt32, requesterUID: UInt32) -> Bool {
        holderUID != 0 && holderUID != requesterUID
    }

    /// Whether a hold of another user (``judges(holderUID:requesterUID:)``) holds up a request of
    /// `intents`, its user's `credentials` asked for only when needed:
    /// - a reading hold only when its user could make one of the request's writes itself (a request
    ///   that writes nothing it holds up as ever). A user who may read a document but not write it (a
    ///   world-readable file of someone else's, kept open by `tail -f` or a `sleep < doc`) does not
    ///   make every save of it wait;
    /// - a writing hold only when its user could write or replace one of the request's items itself:
    ///   only there can the request meet the hold's work half done. So a user's write hold of a
    ///   sticky folder it does not own (a `coordinate --write` of a 1777 drop folder) holds up none
    ///   of another user's creates of new names there, nor accesses to that user's own items in it,
    ///   which natively it can neither prevent nor touch.
    public static func mayHoldUp(holderWrites: Bool, intents: [FileAccessIntent], permissions: any PresenterPermissions,
                                 credentials: () -> PresenterCredentials) -> Bool {
        if holderWrites {
            let holder = credentials()
            return intents.contains { intent in
                guard permissions.maySee(intent.path, as: holder) else { return false }
                let write = intent.isWriting ? intent : .writingIntent(with: intent.path)
                return permissions.mayMake(write, as: holder)
                    || permissions.mayMake(.writingIntent(with: intent.path, options: .forReplacing), as: holder)
            }
        }
        let writes = intents.filter(\.isWriting)
        if writes.isEmpty { return true }
        let holder = credentials()
        return writes.contains { permissions.maySee($0.path, as: holder) && permissions.mayMake($0, as: holder) }
    }
}

/// One request's (or one delivery's) memo of ``PresenterPermissions`` answers: a thousand
/// presenters of one user cost one evaluation.
struct PresenterScreen {
    let permissions: (any PresenterPermissions)?
    /// The accessor's uid: its own presenters and root's are never screened.
    let accessorUID: UInt32
    private var seen: [Key: Bool] = [:]
    private var made: [Key: Bool] = [:]

    private struct Key: Hashable {
        var credentials: PresenterCredentials
        var path: ItemPath
        var intent: Int
    }

    init(_ permissions: (any PresenterPermissions)?, accessor: AccessOrigin) {
        self.permissions = permissions
        self.accessorUID = accessor.uid
    }

    /// The credentials `record` is screened with, or nil when it is not screened.
    @inline(__always)
    private func screened(_ record: PresenterRecord) -> PresenterCredentials? {
        guard permissions != nil, let c = record.credentials, c.uid != 0, c.uid != accessorUID else { return nil }
        return c
    }

    /// Whether `record` may hear of `path`.
    @inline(__always)
    mutating func maySee(_ record: PresenterRecord, _ path: ItemPath) -> Bool {
        guard let c = screened(record), let permissions else { return true }
        let key = Key(credentials: c, path: path, intent: -1)
        if let known = seen[key] { return known }
        let answer = permissions.maySee(path, as: c)
        seen[key] = answer
        return answer
    }

    /// Whether `record` may be asked before `intent` (the `index`th of its request).
    @inline(__always)
    mutating func mayAsk(_ record: PresenterRecord, _ intent: FileAccessIntent, index: Int) -> Bool {
        guard let c = screened(record), let permissions else { return true }
        let key = Key(credentials: c, path: intent.path, intent: index)
        if let known = made[key] { return known }
        let answer = permissions.maySee(intent.path, as: c) && permissions.mayMake(intent, as: c)
        made[key] = answer
        return answer
    }
}
