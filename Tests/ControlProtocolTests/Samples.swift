@testable import ControlProtocol

/// One or more instances of every message, with every optional field both present and absent.
enum Samples {
    static func path(_ text: String) -> MountPath { try! MountPath(validating: text) }

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
            .notification(PresenterNotification(presenter: PresenterID(17), event: .documentChanged(documentID: "d-1", info: JSONObject(["version": .int(3)])))),
            .notification(PresenterNotification(presenter: PresenterID(17), event: .conflict(documentID: "d-1", info: JSONObject()))),
            .notification(PresenterNotification(presenter: PresenterID(17), event: .unknown(event: "futureThing", fields: JSONObject(["x": .array([.null, .bool(true), .double(1.5)])])))),
            .error(ErrorMessage(id: RequestID(7), code: .permissionDenied, message: "uid 1000 may not write docs/a.txt")),
            .error(ErrorMessage(code: .malformedJSON, message: "bad")),
            .close(Close(reason: "shutting down")),
            .close(Close()),
        ]
    }
}
