@testable import ControlProtocol

/// One or more instances of every message, with every optional field both present and absent.
enum Samples {
    static func path(_ text: String) -> MountPath { try! MountPath(validating: text) }

    static let identity = DocumentIdentity(device: 2049, inode: 131_074, size: 4301, modificationTimeNanoseconds: 1_763_759_351_114_000_123)
    /// Values beyond 2^53 and a time before the epoch: they travel as decimal strings.
    static let identity2 = DocumentIdentity(device: UInt64.max, inode: 1 << 63, size: 0, modificationTimeNanoseconds: Int64.min)

    static var all: [ControlMessage] {
        let a = path("docs/a.txt"), b = path("docs/b.txt"), dir = path("docs")
        return [
            .hello(Hello(id: RequestID(1), versions: [1], client: "editor")),
            .hello(Hello(id: RequestID(2), versions: [2, 1])),
            .welcome(Welcome(id: RequestID(1), version: 1, server: "coordfs", maxFrameSize: 1 << 20, mountPoint: "/mnt/docs")),
            .welcome(Welcome(id: RequestID(1), version: 1, server: "coordfs", maxFrameSize: 4096)),
            .register(Register(id: RequestID(3), path: a, kind: .file, asks: [.save, .relinquishToWriter])),
            .register(Register(id: RequestID(4), path: .root, kind: .directory, asks: [])),
            .register(Register(id: RequestID(5), path: dir, kind: .directory)),
            .registered(Registered(id: RequestID(3), presenter: PresenterID(17))),
            .unregister(Unregister(id: RequestID(6), presenter: PresenterID(17))),
            .coordinate(Coordinate(id: RequestID(7), intents: [.reading(a, options: [.withoutChanges, .resolvesSymbolicLink])])),
            .coordinate(Coordinate(id: RequestID(8), intents: [.reading(a), .writing(b, options: [.forReplacing, .forMerging])], presenter: PresenterID(17), timeoutMs: 2500)),
            .coordinate(Coordinate(id: RequestID(9), intents: [.writing(dir, options: [.forDeleting, .forMoving, .contentIndependentMetadataOnly]), .reading(b, options: [.immediatelyAvailableMetadataOnly, .forUploading])])),
            .granted(Granted(id: RequestID(7), access: AccessID(99))),
            .release(Release(id: RequestID(10), access: AccessID(99))),
            .release(Release(id: RequestID(11), access: AccessID(99), changes: [.changed(a), .moved(a, to: b), .deleted(b)])),
            .ok(OK(id: RequestID(10))),
            .status(StatusQuery(id: RequestID(12))),
            .statusReport(StatusReport(id: RequestID(12))),
            .statusReport(StatusReport(
                id: RequestID(13),
                presenters: [.init(presenter: PresenterID(1), path: a, kind: .file, pid: 4242, uid: 1000)],
                accesses: [.init(access: AccessID(5), intents: [.writing(a, options: [.forDeleting])], pid: 1, uid: 0, heldMs: 12)],
                waiting: [.init(intents: [.reading(b)], pid: 77, uid: 1000, waitingMs: 3)])),
            .ask(Ask(id: AskID(1), presenter: PresenterID(17), kind: .save, path: a, deadlineMs: 5000)),
            .ask(Ask(id: AskID(2), presenter: PresenterID(18), kind: .accommodateSubitemDeletion, path: dir, subitem: a, deadlineMs: 0)),
            .answer(Answer(id: AskID(1))),
            .answer(Answer(id: AskID(2), error: ErrorBody(code: .failed, message: "disk full"))),
            .notification(PresenterNotification(presenter: PresenterID(17), event: .didChange)),
            .notification(PresenterNotification(presenter: PresenterID(17), event: .didMove(to: b))),
            .notification(PresenterNotification(presenter: PresenterID(17), event: .didDelete)),
            .notification(PresenterNotification(presenter: PresenterID(18), event: .subitemDidAppear(a))),
            .notification(PresenterNotification(presenter: PresenterID(18), event: .subitemDidChange(a))),
            .notification(PresenterNotification(presenter: PresenterID(18), event: .subitemDidMove(a, to: b))),
            .notification(PresenterNotification(presenter: PresenterID(18), event: .subitemDidDelete(b))),
            .notification(PresenterNotification(presenter: PresenterID(17), event: .documentChanged(DocumentChange(
                document: DocumentID(3), path: a, kind: .change, before: identity, after: identity2, action: .conflict(ConflictID(5)))))),
            .notification(PresenterNotification(presenter: PresenterID(17), event: .documentChanged(DocumentChange(
                document: DocumentID(3), path: a, kind: .deletion, before: identity, after: nil, action: .close)))),
            .notification(PresenterNotification(presenter: PresenterID(17), event: .documentChanged(DocumentChange(
                document: DocumentID(4), path: b, kind: .change, before: nil, after: nil, action: .reload)))),
            .notification(PresenterNotification(presenter: PresenterID(17), event: .unknown(event: "futureThing", fields: JSONObject(["x": .array([.null, .bool(true), .double(1.5)])])))),
            .register(Register(id: RequestID(14), path: a, kind: .file, asks: [.save], unsaved: true)),
            .setUnsavedChanges(SetUnsavedChanges(id: RequestID(15), presenter: PresenterID(17), unsaved: true)),
            .setUnsavedChanges(SetUnsavedChanges(id: RequestID(16), presenter: PresenterID(17), unsaved: false)),
            .conflicts(ConflictsQuery(id: RequestID(17))),
            .conflicts(ConflictsQuery(id: RequestID(18), presenter: PresenterID(17))),
            .conflictList(ConflictList(id: RequestID(17), conflicts: [])),
            .conflictList(ConflictList(id: RequestID(18), conflicts: [
                ConflictInfo(conflict: ConflictID(5), document: DocumentID(3), path: a, presenter: PresenterID(17),
                             storePresenter: "coordfs-42-7/presenter#17", kind: .change, createdMs: 1_763_759_351_114,
                             before: identity, after: identity2, baseVersion: VersionID(9)),
                ConflictInfo(conflict: ConflictID(6), document: DocumentID(4), path: b, presenter: nil,
                             storePresenter: "coordfs-41-7/presenter#2", kind: .deletion, createdMs: 0,
                             before: nil, after: nil, baseVersion: nil),
            ])),
            .resolve(Resolve(id: RequestID(19), conflict: ConflictID(5), resolution: .close)),
            .resolve(Resolve(id: RequestID(20), conflict: ConflictID(5), resolution: .save, mine: .bytes(Array("mine\n".utf8)))),
            .resolve(Resolve(id: RequestID(21), conflict: ConflictID(5), resolution: .merge, mine: .path(b))),
            .resolve(Resolve(id: RequestID(22), conflict: ConflictID(5), resolution: .keepBoth, mine: .bytes([]))),
            .resolve(Resolve(id: RequestID(23), conflict: ConflictID(5), resolution: .reload)),
            .resolved(Resolved(id: RequestID(19), conflict: ConflictID(5), resolution: .close, path: a)),
            .resolved(Resolved(id: RequestID(21), conflict: ConflictID(5), resolution: .merge, path: a, writtenPath: a,
                               preservedVersion: VersionID(12), mergeConflicts: 2, after: identity2)),
            .versions(VersionsQuery(id: RequestID(24), path: a)),
            .versionList(VersionList(id: RequestID(24), versions: [])),
            .versionList(VersionList(id: RequestID(24), versions: [
                VersionInfo(version: VersionID(9), document: DocumentID(3), path: a, createdMs: 1_763_759_351_114, size: 4301,
                            reason: "beforeWrite", method: "copy", pinned: true),
                VersionInfo(version: VersionID(8), document: DocumentID(3), path: b, createdMs: 1, size: 0,
                            reason: "replaced", method: "link", pinned: false),
            ])),
            .readVersion(ReadVersion(id: RequestID(25), version: VersionID(9))),
            .readVersion(ReadVersion(id: RequestID(26), version: VersionID(9), offset: 4096, length: 100)),
            .versionData(VersionData(id: RequestID(25), version: VersionID(9), offset: 0, size: 3, data: [0, 0xFF, 10], eof: true)),
            .versionData(VersionData(id: RequestID(26), version: VersionID(9), offset: 4096, size: 1 << 20, data: [], eof: false)),
            .restore(Restore(id: RequestID(29), version: VersionID(9), path: a)),
            .restored(Restored(id: RequestID(29), version: VersionID(9), path: a)),
            .restored(Restored(id: RequestID(30), version: VersionID(8), path: b, preservedVersion: VersionID(13), after: identity2)),
            .readLog(ReadLog(id: RequestID(27))),
            .readLog(ReadLog(id: RequestID(28), from: 1200, limit: 10)),
            .logRecords(LogRecords(id: RequestID(27), records: [], next: 41, end: 41)),
            .logRecords(LogRecords(id: RequestID(28), records: [1, 2, 0xFF], next: 1210, end: 2000, oldest: 900)),
            .error(ErrorMessage(id: RequestID(7), code: .permissionDenied, message: "uid 1000 may not write docs/a.txt")),
            .error(ErrorMessage(code: .malformedJSON, message: "bad")),
            .close(Close(reason: "shutting down")),
            .close(Close()),
            // Added after the catalog (appended, as RecordedPayloads is).
            .coordinate(Coordinate(id: RequestID(31), intents: [.writing(a)], purpose: "fc-3")),
            .cancel(CancelRequest(id: RequestID(32), request: RequestID(31))),
            .willMove(WillMove(MoveAnnouncement(id: RequestID(33), access: AccessID(99), path: a, newPath: b))),
            .didMove(DidMove(MoveAnnouncement(id: RequestID(34), access: AccessID(99), path: a, newPath: b))),
            .notification(PresenterNotification(presenter: PresenterID(17), event: .didGainConflict(ConflictID(5)))),
            .notification(PresenterNotification(presenter: PresenterID(17), event: .didResolveConflict(ConflictID(5), resolution: .keepBoth))),
            .removeVersions(RemoveVersions(id: RequestID(35), path: a)),
            .clusterStatus(ClusterStatusQuery(id: RequestID(36))),
            .clusterStatusReport(ClusterStatusReport(
                id: RequestID(36), node: "a", prefix: "coordfs", reachable: true, sessionValid: true, unreachable: "fail",
                localGrants: 0, revision: 57, nodes: [
                    .init(name: "a", sinceMs: 1_764_115_200_000, lease: 7_587_870_373_546_463_500, ttl: 10, presenters: [a],
                          holds: [.init(path: a, mode: "write", token: 42)]),
                    .init(name: "b", sinceMs: 0, lease: 0, ttl: 0),
                ], lastError: "etcd at http://10.0.0.5:2379: connection refused")),
            .clusterSteps(ClusterStepsQuery(id: RequestID(37))),
            .clusterSteps(ClusterStepsQuery(id: RequestID(38), from: 12)),
            .clusterStepList(ClusterStepList(id: RequestID(38), steps: [
                .init(seq: 12, revision: 57, node: "b", what: "holds write (token 57)", path: a),
                .init(seq: 13, revision: 58, node: "a", what: "joined (lease 1, ttl 10 s)"),
            ], next: 14, oldest: 1)),
            .conflictList(ConflictList(id: RequestID(39), conflicts: [
                ConflictInfo(conflict: ConflictID(7), document: DocumentID(4), path: b, presenter: nil,
                             storePresenter: "process:4242:81234:uid:1000", kind: .lostUpdate, createdMs: 1_763_759_351_114,
                             before: identity, after: nil, baseVersion: VersionID(10), theirsVersion: VersionID(11)),
            ])),
            .statusReport(StatusReport(
                id: RequestID(40),
                accesses: [.init(access: AccessID(6), intents: [.writing(a)], pid: 2, uid: 1000, heldMs: 1300,
                                 asking: [.init(presenter: PresenterID(1), ask: .relinquishToWriter, askingMs: 1299),
                                          .init(presenter: PresenterID(2), ask: .save, askingMs: 7)])])),
        ]
    }
}
