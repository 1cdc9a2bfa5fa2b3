// Messages about a coordinated access while it waits or is held (issue 20): cancelling a waiting
// `coordinate`, and announcing a move from inside the accessor, as Foundation's `cancel()`,
// `item(at:willMoveTo:)` and `item(at:didMoveTo:)` do.

/// `cancel`: end a `coordinate` of this connection that is still waiting; it is then replied to
/// with the error `cancelled`. Replied to with `ok` (also when the request was already granted or
/// failed: its reply was sent or is on its way).
package struct CancelRequest: Sendable, Hashable {
    package var id: RequestID
    /// The id of the `coordinate` request to cancel.
    package var request: RequestID
    package init(id: RequestID, request: RequestID) {
        self.id = id
        self.request = request
    }
}

extension CancelRequest: WireMessage {
    static let wireName = "cancel"
    static let direction = ControlMessage.Direction.toDaemon
    var requestID: RequestID? { id }
    var wrapped: ControlMessage { .cancel(self) }

    init(wire fields: inout Fields) throws(ProtocolError) {
        id = try fields.requestID()
        request = RequestID(try fields.uint("request"))
    }

    func encode(to o: inout JSONObject) {
        o.put(id: id)
        o["request"] = .int(Int64(request.rawValue))
    }
}

/// `willMove` / `didMove`: the accessor of a held access is about to move (or has moved) the item
/// at `path` to `newPath`. `didMove` takes effect at once (presenters follow the item; they are
/// told after the release), `willMove` is recorded. Replied to with `ok`.
package struct MoveAnnouncement: Sendable, Hashable {
    package var id: RequestID
    package var access: AccessID
    package var path: MountPath
    package var newPath: MountPath
    package init(id: RequestID, access: AccessID, path: MountPath, newPath: MountPath) {
        self.id = id
        self.access = access
        self.path = path
        self.newPath = newPath
    }

    init(fields: inout Fields) throws(ProtocolError) {
        id = try fields.requestID()
        access = AccessID(try fields.uint("access"))
        path = try fields.path("path")
        newPath = try fields.path("newPath")
    }

    func put(into o: inout JSONObject) {
        o.put(id: id)
        o["access"] = .int(Int64(access.rawValue))
        o["path"] = .string(path.wireValue)
        o["newPath"] = .string(newPath.wireValue)
    }
}

/// `willMove` (Foundation's `item(at:willMoveTo:)`).
package struct WillMove: Sendable, Hashable {
    package var move: MoveAnnouncement
    package init(_ move: MoveAnnouncement) { self.move = move }
}

extension WillMove: WireMessage {
    static let wireName = "willMove"
    static let direction = ControlMessage.Direction.toDaemon
    var requestID: RequestID? { move.id }
    var wrapped: ControlMessage { .willMove(self) }
    init(wire fields: inout Fields) throws(ProtocolError) { move = try MoveAnnouncement(fields: &fields) }
    func encode(to o: inout JSONObject) { move.put(into: &o) }
}

/// `didMove` (Foundation's `item(at:didMoveTo:)`).
package struct DidMove: Sendable, Hashable {
    package var move: MoveAnnouncement
    package init(_ move: MoveAnnouncement) { self.move = move }
}

extension DidMove: WireMessage {
    static let wireName = "didMove"
    static let direction = ControlMessage.Direction.toDaemon
    var requestID: RequestID? { move.id }
    var wrapped: ControlMessage { .didMove(self) }
    init(wire fields: inout Fields) throws(ProtocolError) { move = try MoveAnnouncement(fields: &fields) }
    func encode(to o: inout JSONObject) { move.put(into: &o) }
}
