import DocumentStore
import EventLog
import Glibc

/// Writes the document store's records to the mount's event log: `snapshotTaken`,
/// `conflictDetected`, `conflictResolved` (docs/event-log.md). Appending never blocks on disk.
struct StoreEventRecorder: Sendable {
    let log: EventRecorder

    /// A version kept before a mutation (nothing is recorded when the bytes were already kept).
    func snapshotTaken(_ snapshot: Snapshot, actor origin: (pid: Int32, uid: UInt32, executable: String)? = nil) {
        guard !snapshot.reused else { return }
        let version = snapshot.version
        log.append(
            .snapshotTaken, path: Self.logPath(version.path), documentID: Self.documentID(version.document),
            actor: origin.map { EventActor(pid: $0.pid, uid: $0.uid, executable: $0.executable) },
            details: EventDetails(
                latencyMicros: snapshot.elapsedNanoseconds / 1000,
                snapshotMethod: Recorded(version.method),
                bytes: UInt64(max(0, version.size)), versionID: String(version.id.rawValue),
                reason: version.reason.rawValue))
    }

    /// A conflict opened (or a further change folded into an open one).
    /// `actor`: who made the change, when known.
    func conflictDetected(_ conflict: Conflict, presenter: String, actor origin: (pid: Int32, uid: UInt32, executable: String)? = nil) {
        log.append(
            .conflictDetected, path: Self.logPath(conflict.path), documentID: Self.documentID(conflict.document),
            actor: origin.map { EventActor(pid: $0.pid, uid: $0.uid, executable: $0.executable) },
            details: EventDetails(
                presenterID: presenter, versionID: conflict.baseVersion.map { String($0.rawValue) },
                reason: conflict.kind.rawValue, message: "\(conflict.id)"))
    }

    /// A conflict resolved; `actor` is who chose (a presenter, or `cli:UID`).
    func conflictResolved(_ outcome: ResolutionOutcome, actor: String, origin: (pid: Int32, uid: UInt32, executable: String)?) {
        let conflict = outcome.conflict
        var message = "\(conflict.id) by \(actor)"
        if let written = outcome.writtenPath { message += ", wrote /\(written)" }
        if outcome.mergeConflicts > 0 { message += ", \(outcome.mergeConflicts) conflicting hunk(s) marked" }
        log.append(
            .conflictResolved, path: Self.logPath(conflict.path), documentID: Self.documentID(conflict.document),
            actor: origin.map { EventActor(pid: $0.pid, uid: $0.uid, executable: $0.executable) },
            details: EventDetails(
                presenterID: conflict.presenter.rawValue,
                versionID: outcome.preserved.map { String($0.version.id.rawValue) },
                resolution: conflict.resolution.map(Recorded.init),
                reason: conflict.kind.rawValue, message: message))
    }

    /// A process saved over a document changed since it read it: `conflict` opened (kept), or the
    /// save was refused (`conflict` nil, `errno` the caller's).
    func lostUpdate(path: String, conflict: Conflict?, errno code: Int32? = nil, saver origin: (pid: Int32, uid: UInt32, executable: String)) {
        var message: String
        if let conflict {
            message = "conflict \(conflict.id) of \(conflict.presenter.rawValue)"
            message += conflict.baseVersion.map { ", base version \($0.rawValue)" } ?? ", base not kept (changed where coordfs could not keep it)"
        } else {
            message = "a save over a version changed since the saver read it, refused"
        }
        log.append(
            .lostUpdate, path: Self.logPath(path), documentID: conflict.map { Self.documentID($0.document) },
            actor: EventActor(pid: origin.pid, uid: origin.uid, executable: origin.executable),
            details: EventDetails(
                presenterID: conflict?.presenter.rawValue, versionID: conflict?.theirsVersion.map { String($0.rawValue) },
                errno: code, reason: conflict == nil ? "refused" : "kept", message: message))
    }

    /// The store failed to keep a version of, or record a change to, the document at `path`.
    func storeFailed(path: String, reason: String, error: any Error) {
        var code: Int32?
        if case DocumentStoreError.system(_, _, let e) = error { code = e }
        let text = "\(error)"
        if code == nil, text.contains("SQLITE_FULL") || text.contains("database or disk is full") { code = ENOSPC }
        log.append(.storeFailed, path: Self.logPath(path), details: EventDetails(errno: code, reason: reason, message: text))
    }

    static func logPath(_ relative: String) -> String { "/" + relative }
    static func documentID(_ id: DocumentID) -> String { String(id.rawValue) }
}
