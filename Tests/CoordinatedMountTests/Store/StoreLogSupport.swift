import EventLog
@testable import CoordFS

/// One event-log record as the store tests look at it (this file alone imports EventLog, whose
/// `Resolution` and `SnapshotMethod` names clash with DocumentStore's).
struct StoreLogRecord: Sendable {
    var kind: String
    var path: String
    var documentID: String?
    var snapshotMethod: String?
    var bytes: UInt64?
    var versionID: String?
    var resolution: String?
    var reason: String?
    var presenterID: String?
    /// Who the record says acted (pid, uid, executable), when it says.
    var actorPID: Int32? = nil
    var actorUID: UInt32? = nil
    var actorExecutable: String? = nil
}

extension Daemon {
    /// Every record in the mount's event log so far (flushed first).
    func storeLogRecords() throws -> [StoreLogRecord] {
        try flushEventLog()
        let reader = try EventLogReader(directory: plan.state.eventLog)
        var out: [StoreLogRecord] = []
        while let r = try reader.next() {
            out.append(StoreLogRecord(
                kind: r.kind.rawValue, path: r.path, documentID: r.documentID,
                snapshotMethod: r.details.snapshotMethod?.rawValue, bytes: r.details.bytes, versionID: r.details.versionID,
                resolution: r.details.resolution?.rawValue, reason: r.details.reason, presenterID: r.details.presenterID,
                actorPID: r.actor?.pid, actorUID: r.actor?.uid, actorExecutable: r.actor?.executable))
        }
        return out
    }
}
