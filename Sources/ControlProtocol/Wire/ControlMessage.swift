// The control protocol's messages. Each message is defined in one place: its struct conforms to
// `WireMessage`, which carries its wire name, the way it travels and its codec (encoding and
// strict decoding), next to its fields; `ControlMessage.catalog` lists them all, and everything
// else (the `type` table of the decoder, the names a client may send, the round-trip and fuzz
// tests) is derived from that list. Unknown fields are ignored (so a minor addition needs no
// version bump); unknown message types, missing fields, wrong types and out-of-domain values are
// `ProtocolError`s naming the message and the field.
//
// Adding a message: its struct with a `WireMessage` conformance (docs/protocol.md describes it),
// a case below, a line in `body` (the compiler asks for it), an entry in `catalog`, and a
// sample in Tests/ControlProtocolTests/Samples.swift (WireTests fails without one).

/// The protocol versions this build speaks, oldest first.
package enum ProtocolVersion {
    package static let supported: [Int] = [1]
    /// The version `hello` negotiation picks: the highest both sides speak.
    package static func negotiate(_ offered: [Int]) -> Int? {
        offered.filter { supported.contains($0) }.max()
    }
}

/// One message of the protocol, defined in one place: its `type` on the wire, which way it
/// travels, and how it is written and read.
protocol WireMessage: Sendable, Equatable {
    /// The message's `type` on the wire.
    static var wireName: String { get }
    /// Which way the message may travel.
    static var direction: ControlMessage.Direction { get }
    /// The request id of a client request, or the id a reply echoes (nil for asks, answers,
    /// notifications and `close`).
    var requestID: RequestID? { get }
    /// The message as the enum's case.
    var wrapped: ControlMessage { get }
    /// Reads the message's fields (all but `type`), strictly.
    init(wire fields: inout Fields) throws(ProtocolError)
    /// Writes the message's fields after `type`, in their documented order.
    func encode(to object: inout JSONObject)
}

extension WireMessage {
    static func decode(_ fields: inout Fields) throws(ProtocolError) -> ControlMessage {
        try Self(wire: &fields).wrapped
    }
}

/// A message of a request id and a presenter (`registered`, `unregister`): one codec for all.
protocol PresenterMessage: WireMessage {
    var id: RequestID { get }
    var presenter: PresenterID { get }
    init(id: RequestID, presenter: PresenterID)
}

extension PresenterMessage {
    var requestID: RequestID? { id }
    init(wire fields: inout Fields) throws(ProtocolError) {
        let id = try fields.requestID()
        self.init(id: id, presenter: PresenterID(try fields.uint("presenter")))
    }
    func encode(to o: inout JSONObject) {
        o.put(id: id)
        o["presenter"] = .int(Int64(presenter.rawValue))
    }
}

/// A request of a request id and nothing else (`status`, `clusterStatus`): one codec for all.
protocol IDOnlyRequest: WireMessage {
    var id: RequestID { get }
    init(id: RequestID)
}

extension IDOnlyRequest {
    var requestID: RequestID? { id }
    init(wire fields: inout Fields) throws(ProtocolError) { self.init(id: try fields.requestID()) }
    func encode(to o: inout JSONObject) { o.put(id: id) }
}

/// A request that names one item and nothing else (`versions`, `removeVersions`): one codec for all.
protocol PathRequest: WireMessage {
    var id: RequestID { get }
    var path: MountPath { get }
    init(id: RequestID, path: MountPath)
}

extension PathRequest {
    var requestID: RequestID? { id }
    init(wire fields: inout Fields) throws(ProtocolError) {
        let id = try fields.requestID()
        self.init(id: id, path: try fields.path("path"))
    }
    func encode(to o: inout JSONObject) {
        o.put(id: id)
        o["path"] = .string(path.wireValue)
    }
}

/// Every frame on the control socket. `docs/protocol.md` documents each message's fields.
package enum ControlMessage: Sendable, Equatable {
    // Client to daemon.
    case hello(Hello)
    case register(Register)
    case unregister(Unregister)
    case coordinate(Coordinate)
    case release(Release)
    case status(StatusQuery)
    case answer(Answer)
    case setUnsavedChanges(SetUnsavedChanges)
    case conflicts(ConflictsQuery)
    case resolve(Resolve)
    case versions(VersionsQuery)
    case readVersion(ReadVersion)
    case restore(Restore)
    case readLog(ReadLog)
    case cancel(CancelRequest)
    case willMove(WillMove)
    case didMove(DidMove)
    case removeVersions(RemoveVersions)
    case clusterStatus(ClusterStatusQuery)
    case clusterSteps(ClusterStepsQuery)
    // Daemon to client.
    case welcome(Welcome)
    case registered(Registered)
    case granted(Granted)
    case ok(OK)
    case statusReport(StatusReport)
    case ask(Ask)
    case notification(PresenterNotification)
    case conflictList(ConflictList)
    case resolved(Resolved)
    case versionList(VersionList)
    case versionData(VersionData)
    case restored(Restored)
    case logRecords(LogRecords)
    case clusterStatusReport(ClusterStatusReport)
    case clusterStepList(ClusterStepList)
    // Either way.
    case error(ErrorMessage)
    case close(Close)

    /// Which way a message may travel.
    package enum Direction: Sendable { case toDaemon, toClient, either }

    /// Every message type, once. Decoding finds a message's type here; the names a client may
    /// send are listed in this order.
    static let catalog: [any WireMessage.Type] = [
        Hello.self, Register.self, Unregister.self, Coordinate.self, Release.self, StatusQuery.self, Answer.self,
        SetUnsavedChanges.self, ConflictsQuery.self, Resolve.self, VersionsQuery.self, ReadVersion.self, Restore.self,
        ReadLog.self, CancelRequest.self, WillMove.self, DidMove.self, RemoveVersions.self,
        Welcome.self, Registered.self, Granted.self, OK.self, StatusReport.self, Ask.self, PresenterNotification.self,
        ConflictList.self, Resolved.self, VersionList.self, VersionData.self, Restored.self, LogRecords.self,
        Close.self, ErrorMessage.self,
        ClusterStatusQuery.self, ClusterStatusReport.self, ClusterStepsQuery.self, ClusterStepList.self,
    ]

    private static let byName: [String: any WireMessage.Type] =
        Dictionary(uniqueKeysWithValues: catalog.map { ($0.wireName, $0) })

    /// The names of the messages a client may send, for the `unknownType` error.
    private static let clientNames = catalog.filter { $0.direction != .toClient }.map { $0.wireName }.joined(separator: ", ")

    /// The message itself.
    var body: any WireMessage {
        switch self {
        case .hello(let m): return m
        case .register(let m): return m
        case .unregister(let m): return m
        case .coordinate(let m): return m
        case .release(let m): return m
        case .status(let m): return m
        case .answer(let m): return m
        case .setUnsavedChanges(let m): return m
        case .conflicts(let m): return m
        case .resolve(let m): return m
        case .versions(let m): return m
        case .readVersion(let m): return m
        case .restore(let m): return m
        case .readLog(let m): return m
        case .cancel(let m): return m
        case .willMove(let m): return m
        case .didMove(let m): return m
        case .removeVersions(let m): return m
        case .clusterStatus(let m): return m
        case .clusterSteps(let m): return m
        case .clusterStatusReport(let m): return m
        case .clusterStepList(let m): return m
        case .welcome(let m): return m
        case .registered(let m): return m
        case .granted(let m): return m
        case .ok(let m): return m
        case .statusReport(let m): return m
        case .ask(let m): return m
        case .notification(let m): return m
        case .conflictList(let m): return m
        case .resolved(let m): return m
        case .versionList(let m): return m
        case .versionData(let m): return m
        case .restored(let m): return m
        case .logRecords(let m): return m
        case .error(let m): return m
        case .close(let m): return m
        }
    }

    /// The message's `type` on the wire.
    package var typeName: String { type(of: body).wireName }

    package var direction: Direction { type(of: body).direction }

    /// The request id of a client request, or the id a reply echoes.
    package var requestID: RequestID? { body.requestID }

    /// The message as one frame: length prefix and JSON payload.
    package func encodedFrame() -> [UInt8] {
        Framing.frame(encodedPayload())
    }

    /// The message's JSON payload (without the length prefix).
    package func encodedPayload() -> [UInt8] {
        JSONWriter.write(.object(jsonObject))
    }

    /// The message as a JSON object, `type` first.
    package var jsonObject: JSONObject {
        let body = self.body
        var object = JSONObject()
        object["type"] = .string(type(of: body).wireName)
        body.encode(to: &object)
        return object
    }

    /// Decodes one frame payload.
    package static func decode(payload: some Collection<UInt8>) throws(ProtocolError) -> ControlMessage {
        let value = try JSONParser.parse(payload)
        guard case .object(let object) = value else {
            throw ProtocolError(.invalidMessage, "a frame must hold a JSON object, not a \(value.typeName)")
        }
        return try decode(object)
    }

    /// Decodes a parsed JSON object.
    package static func decode(_ object: JSONObject) throws(ProtocolError) -> ControlMessage {
        guard let typeValue = object["type"] else {
            throw ProtocolError(.invalidMessage, "message has no \"type\" field")
        }
        guard case .string(let type) = typeValue else {
            throw ProtocolError(.invalidMessage, "field \"type\" must be a string, not a \(typeValue.typeName)")
        }
        guard let kind = byName[type] else {
            throw ProtocolError(.unknownType, "unknown message type \(MountPath.quoted(type)); a client may send: \(clientNames)",
                                requestID: Fields.optionalID(object))
        }
        var fields = Fields(object: object, context: type)
        return try kind.decode(&fields)
    }
}
