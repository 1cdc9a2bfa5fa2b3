// Encoding and strict decoding of `ControlMessage`s. Unknown fields are ignored (so a minor
// addition needs no version bump); unknown message types, missing fields, wrong types and
// out-of-domain values are `ProtocolError`s naming the message and the field.

extension ControlMessage {
    /// The message as one frame: length prefix and JSON payload.
    public func encodedFrame() -> [UInt8] {
        Framing.frame(encodedPayload())
    }

    /// The message's JSON payload (without the length prefix).
    public func encodedPayload() -> [UInt8] {
        JSONWriter.write(.object(jsonObject))
    }

    /// Decodes one frame payload.
    public static func decode(payload: some Collection<UInt8>) throws(ProtocolError) -> ControlMessage {
        let value = try JSONParser.parse(payload)
        guard case .object(let object) = value else {
            throw ProtocolError(.invalidMessage, "a frame must hold a JSON object, not a \(value.typeName)")
        }
        return try decode(object)
    }

    /// Decodes a parsed JSON object.
    public static func decode(_ object: JSONObject) throws(ProtocolError) -> ControlMessage {
        guard let typeValue = object["type"] else {
            throw ProtocolError(.invalidMessage, "message has no \"type\" field")
        }
        guard case .string(let type) = typeValue else {
            throw ProtocolError(.invalidMessage, "field \"type\" must be a string, not a \(typeValue.typeName)")
        }
        var fields = Fields(object: object, context: type)
        switch type {
        case "hello":
            let id = try fields.requestID()
            let versions = try fields.array("versions").enumerated().map { (offset, value) throws(ProtocolError) -> Int in
                guard case .int(let version) = value, version >= 0, version <= Int64(Int32.max) else {
                    throw fields.fail(.wrongFieldType, "field \"versions[\(offset)]\" must be a non-negative integer")
                }
                return Int(version)
            }
            if versions.isEmpty { throw fields.fail(.invalidValue, "field \"versions\" must not be empty") }
            if versions.count > 64 { throw fields.fail(.invalidValue, "field \"versions\" lists more than 64 versions") }
            return .hello(Hello(id: id, versions: versions, client: try fields.optionalString("client", maxBytes: 256)))
        case "welcome":
            let id = try fields.requestID()
            return .welcome(Welcome(
                id: id, version: Int(try fields.uint("version", max: UInt64(Int32.max))),
                server: try fields.string("server", maxBytes: 256),
                maxFrameSize: Int(try fields.uint("maxFrameSize", max: UInt64(UInt32.max))),
                mountPoint: try fields.optionalString("mountPoint", maxBytes: 4096)))
        case "register":
            let id = try fields.requestID()
            let path = try fields.path("path")
            let kind: ItemKind = try fields.enumeration("kind")
            var asks = Set<AskKind>()
            for (offset, value) in try fields.array("asks").enumerated() {
                guard case .string(let name) = value else {
                    throw fields.fail(.wrongFieldType, "field \"asks[\(offset)]\" must be a string")
                }
                guard let ask = AskKind(rawValue: name) else {
                    throw fields.fail(.invalidValue, "field \"asks[\(offset)]\": unknown ask \(MountPath.quoted(name)); known: \(AskKind.allCases.map(\.rawValue).joined(separator: ", "))")
                }
                asks.insert(ask)
            }
            return .register(Register(id: id, path: path, kind: kind, asks: asks))
        case "registered":
            let id = try fields.requestID()
            return .registered(Registered(id: id, presenter: PresenterID(try fields.uint("presenter"))))
        case "unregister":
            let id = try fields.requestID()
            return .unregister(Unregister(id: id, presenter: PresenterID(try fields.uint("presenter"))))
        case "coordinate":
            let id = try fields.requestID()
            let intents = try fields.intents("intents")
            if intents.isEmpty { throw fields.fail(.invalidValue, "field \"intents\" must not be empty") }
            return .coordinate(Coordinate(
                id: id, intents: intents,
                presenter: try fields.optionalUInt("presenter").map(PresenterID.init(rawValue:)),
                timeoutMs: try fields.optionalUInt("timeoutMs", max: UInt64(UInt32.max)).map { UInt32($0) }))
        case "granted":
            let id = try fields.requestID()
            return .granted(Granted(id: id, access: AccessID(try fields.uint("access"))))
        case "release":
            let id = try fields.requestID()
            let access = AccessID(try fields.uint("access"))
            var changes: [ItemChange] = []
            if fields.has("changes") {
                let list = try fields.array("changes")
                if list.count > Coordinate.maxIntents {
                    throw fields.fail(.invalidValue, "field \"changes\" lists more than \(Coordinate.maxIntents) items")
                }
                for (offset, value) in list.enumerated() {
                    let item = try fields.nested(value, "changes[\(offset)]")
                    let path = try item.path("path")
                    switch try item.string("change", maxBytes: 64) {
                    case "changed": changes.append(.changed(path))
                    case "deleted": changes.append(.deleted(path))
                    case "moved": changes.append(.moved(path, to: try item.path("newPath")))
                    case let other:
                        throw item.fail(.invalidValue, "field \"change\": unknown change \(MountPath.quoted(other)); known: changed, moved, deleted")
                    }
                }
            }
            return .release(Release(id: id, access: access, changes: changes))
        case "ok":
            return .ok(OK(id: try fields.requestID()))
        case "status":
            return .status(StatusQuery(id: try fields.requestID()))
        case "statusReport":
            let id = try fields.requestID()
            var report = StatusReport(id: id)
            for (offset, value) in try fields.array("presenters").enumerated() {
                let item = try fields.nested(value, "presenters[\(offset)]")
                report.presenters.append(StatusReport.Presenter(
                    presenter: PresenterID(try item.uint("presenter")), path: try item.path("path"),
                    kind: try item.enumeration("kind"), pid: try item.pid(), uid: try item.uid()))
            }
            for (offset, value) in try fields.array("accesses").enumerated() {
                let item = try fields.nested(value, "accesses[\(offset)]")
                report.accesses.append(StatusReport.Access(
                    access: AccessID(try item.uint("access")), intents: try item.intents("intents"),
                    pid: try item.pid(), uid: try item.uid(), heldMs: try item.uint("heldMs")))
            }
            for (offset, value) in try fields.array("waiting").enumerated() {
                let item = try fields.nested(value, "waiting[\(offset)]")
                report.waiting.append(StatusReport.Waiting(
                    intents: try item.intents("intents"), pid: try item.pid(), uid: try item.uid(),
                    waitingMs: try item.uint("waitingMs")))
            }
            return .statusReport(report)
        case "ask":
            let id = AskID(try fields.uint("id"))
            let kind: AskKind = try fields.enumeration("ask")
            return .ask(Ask(
                id: id, presenter: PresenterID(try fields.uint("presenter")), kind: kind,
                path: try fields.path("path"), subitem: try fields.optionalPath("subitem"),
                deadlineMs: UInt32(try fields.uint("deadlineMs", max: UInt64(UInt32.max)))))
        case "answer":
            let id = AskID(try fields.uint("id"))
            var error: ErrorBody?
            if fields.has("error") {
                let body = try fields.nested(try fields.required("error"), "error")
                error = ErrorBody(code: ErrorCode(rawValue: try body.string("code", maxBytes: 64)),
                                  message: try body.string("message", maxBytes: 4096))
            }
            return .answer(Answer(id: id, error: error))
        case "notification":
            let presenter = PresenterID(try fields.uint("presenter"))
            let name = try fields.string("event", maxBytes: 64)
            let event: PresenterEvent
            switch name {
            case "didChange": event = .didChange
            case "didMove": event = .didMove(to: try fields.path("newPath"))
            case "didDelete": event = .didDelete
            case "subitemDidAppear": event = .subitemDidAppear(try fields.path("subitem"))
            case "subitemDidChange": event = .subitemDidChange(try fields.path("subitem"))
            case "subitemDidMove": event = .subitemDidMove(try fields.path("subitem"), to: try fields.path("newPath"))
            case "subitemDidDelete": event = .subitemDidDelete(try fields.path("subitem"))
            case "documentChanged":
                event = .documentChanged(documentID: try fields.string("documentID", maxBytes: 256),
                                         info: fields.remaining(except: ["type", "presenter", "event", "documentID"]))
            case "conflict":
                event = .conflict(documentID: try fields.string("documentID", maxBytes: 256),
                                  info: fields.remaining(except: ["type", "presenter", "event", "documentID"]))
            default:
                event = .unknown(event: name, fields: fields.remaining(except: ["type", "presenter", "event"]))
            }
            return .notification(PresenterNotification(presenter: presenter, event: event))
        case "error":
            let id = try fields.optionalUInt("id").map(RequestID.init(rawValue:))
            fields.requestIDValue = id?.rawValue
            return .error(ErrorMessage(
                id: id, code: ErrorCode(rawValue: try fields.string("code", maxBytes: 64)),
                message: try fields.string("message", maxBytes: 4096)))
        case "close":
            return .close(Close(reason: try fields.optionalString("reason", maxBytes: 4096)))
        default:
            let known = ["hello", "register", "unregister", "coordinate", "release", "status", "answer", "close", "error"]
            throw ProtocolError(.unknownType, "unknown message type \(MountPath.quoted(type)); a client may send: \(known.joined(separator: ", "))",
                                requestID: Fields.optionalID(object))
        }
    }

    /// The message as a JSON object, `type` first.
    public var jsonObject: JSONObject {
        var o = JSONObject()
        o["type"] = .string(typeName)
        func id(_ value: UInt64) { o["id"] = .int(Int64(value)) }
        func path(_ key: String, _ value: MountPath) { o[key] = .string(value.wireValue) }
        switch self {
        case .hello(let m):
            id(m.id.rawValue)
            o["versions"] = .array(m.versions.map { .int(Int64($0)) })
            if let client = m.client { o["client"] = .string(client) }
        case .welcome(let m):
            id(m.id.rawValue)
            o["version"] = .int(Int64(m.version))
            o["server"] = .string(m.server)
            o["maxFrameSize"] = .int(Int64(m.maxFrameSize))
            if let mountPoint = m.mountPoint { o["mountPoint"] = .string(mountPoint) }
        case .register(let m):
            id(m.id.rawValue)
            path("path", m.path)
            o["kind"] = .string(m.kind.rawValue)
            o["asks"] = .array(m.asks.sorted().map { .string($0.rawValue) })
        case .registered(let m):
            id(m.id.rawValue)
            o["presenter"] = .int(Int64(m.presenter.rawValue))
        case .unregister(let m):
            id(m.id.rawValue)
            o["presenter"] = .int(Int64(m.presenter.rawValue))
        case .coordinate(let m):
            id(m.id.rawValue)
            o["intents"] = .array(m.intents.map(Self.encode(intent:)))
            if let presenter = m.presenter { o["presenter"] = .int(Int64(presenter.rawValue)) }
            if let timeout = m.timeoutMs { o["timeoutMs"] = .int(Int64(timeout)) }
        case .granted(let m):
            id(m.id.rawValue)
            o["access"] = .int(Int64(m.access.rawValue))
        case .release(let m):
            id(m.id.rawValue)
            o["access"] = .int(Int64(m.access.rawValue))
            o["changes"] = .array(m.changes.map { change in
                var item = JSONObject()
                item["path"] = .string(change.path.wireValue)
                switch change {
                case .changed: item["change"] = .string("changed")
                case .deleted: item["change"] = .string("deleted")
                case .moved(_, let to):
                    item["change"] = .string("moved")
                    item["newPath"] = .string(to.wireValue)
                }
                return .object(item)
            })
        case .ok(let m):
            id(m.id.rawValue)
        case .status(let m):
            id(m.id.rawValue)
        case .statusReport(let m):
            id(m.id.rawValue)
            o["presenters"] = .array(m.presenters.map { p in
                .object(JSONObject([
                    "presenter": .int(Int64(p.presenter.rawValue)), "path": .string(p.path.wireValue),
                    "kind": .string(p.kind.rawValue), "pid": .int(Int64(p.pid)), "uid": .int(Int64(p.uid)),
                ]))
            })
            o["accesses"] = .array(m.accesses.map { a in
                .object(JSONObject([
                    "access": .int(Int64(a.access.rawValue)), "intents": .array(a.intents.map(Self.encode(intent:))),
                    "pid": .int(Int64(a.pid)), "uid": .int(Int64(a.uid)), "heldMs": .int(Int64(a.heldMs)),
                ]))
            })
            o["waiting"] = .array(m.waiting.map { w in
                .object(JSONObject([
                    "intents": .array(w.intents.map(Self.encode(intent:))), "pid": .int(Int64(w.pid)),
                    "uid": .int(Int64(w.uid)), "waitingMs": .int(Int64(w.waitingMs)),
                ]))
            })
        case .ask(let m):
            id(m.id.rawValue)
            o["presenter"] = .int(Int64(m.presenter.rawValue))
            o["ask"] = .string(m.kind.rawValue)
            path("path", m.path)
            if let subitem = m.subitem { path("subitem", subitem) }
            o["deadlineMs"] = .int(Int64(m.deadlineMs))
        case .answer(let m):
            id(m.id.rawValue)
            if let error = m.error {
                o["error"] = .object(JSONObject(["code": .string(error.code.rawValue), "message": .string(error.message)]))
            }
        case .notification(let m):
            o["presenter"] = .int(Int64(m.presenter.rawValue))
            o["event"] = .string(m.event.name)
            switch m.event {
            case .didChange, .didDelete: break
            case .didMove(let to): path("newPath", to)
            case .subitemDidAppear(let p), .subitemDidChange(let p), .subitemDidDelete(let p): path("subitem", p)
            case .subitemDidMove(let from, let to):
                path("subitem", from)
                path("newPath", to)
            case .documentChanged(let documentID, let info), .conflict(let documentID, let info):
                o["documentID"] = .string(documentID)
                for (key, value) in info where o[key] == nil { o[key] = value }
            case .unknown(_, let fields):
                for (key, value) in fields where o[key] == nil { o[key] = value }
            }
        case .error(let m):
            if let requestID = m.id { id(requestID.rawValue) }
            o["code"] = .string(m.code.rawValue)
            o["message"] = .string(m.message)
        case .close(let m):
            if let reason = m.reason { o["reason"] = .string(reason) }
        }
        return o
    }

    static func encode(intent: Intent) -> JSONValue {
        var item = JSONObject()
        switch intent {
        case .reading(let path, let options):
            item["intent"] = .string("read")
            item["path"] = .string(path.wireValue)
            item["options"] = .array(ReadingOptions.names.filter { options.contains($0.1) }.map { .string($0.0) })
        case .writing(let path, let options):
            item["intent"] = .string("write")
            item["path"] = .string(path.wireValue)
            item["options"] = .array(WritingOptions.names.filter { options.contains($0.1) }.map { .string($0.0) })
        }
        return .object(item)
    }
}

/// Typed, strict access to one message's (or one nested object's) fields; every error names the
/// message type and the field, and carries the request id once it is known.
struct Fields {
    let object: JSONObject
    let context: String
    var requestIDValue: UInt64?

    init(object: JSONObject, context: String, requestIDValue: UInt64? = nil) {
        self.object = object
        self.context = context
        self.requestIDValue = requestIDValue
    }

    static func optionalID(_ object: JSONObject) -> UInt64? {
        if case .int(let value)? = object["id"], value >= 0, UInt64(value) <= maxWireInteger { return UInt64(value) }
        return nil
    }

    func fail(_ code: ErrorCode, _ message: String) -> ProtocolError {
        ProtocolError(code, "\(context): \(message)", requestID: requestIDValue)
    }

    func has(_ key: String) -> Bool { object[key] != nil }

    func remaining(except keys: Set<String>) -> JSONObject {
        var rest = JSONObject()
        for (key, value) in object where !keys.contains(key) { rest[key] = value }
        return rest
    }

    func required(_ key: String) throws(ProtocolError) -> JSONValue {
        guard let value = object[key] else { throw fail(.missingField, "missing field \"\(key)\"") }
        return value
    }

    mutating func requestID() throws(ProtocolError) -> RequestID {
        let value = try uint("id")
        requestIDValue = value
        return RequestID(value)
    }

    func uint(_ key: String, max: UInt64 = maxWireInteger) throws(ProtocolError) -> UInt64 {
        let value = try required(key)
        guard case .int(let number) = value else {
            throw fail(.wrongFieldType, "field \"\(key)\" must be a non-negative integer, not a \(value.typeName)")
        }
        guard number >= 0, UInt64(number) <= max else {
            throw fail(.invalidValue, "field \"\(key)\" is \(number); it must be between 0 and \(max)")
        }
        return UInt64(number)
    }

    func optionalUInt(_ key: String, max: UInt64 = maxWireInteger) throws(ProtocolError) -> UInt64? {
        if object[key] == nil || object[key] == .null { return nil }
        return try uint(key, max: max)
    }

    func pid() throws(ProtocolError) -> Int32 { Int32(try uint("pid", max: UInt64(Int32.max))) }
    func uid() throws(ProtocolError) -> UInt32 { UInt32(try uint("uid", max: UInt64(UInt32.max))) }

    func string(_ key: String, maxBytes: Int) throws(ProtocolError) -> String {
        let value = try required(key)
        guard case .string(let text) = value else {
            throw fail(.wrongFieldType, "field \"\(key)\" must be a string, not a \(value.typeName)")
        }
        if text.utf8.count > maxBytes {
            throw fail(.invalidValue, "field \"\(key)\" is longer than \(maxBytes) bytes")
        }
        return text
    }

    func optionalString(_ key: String, maxBytes: Int) throws(ProtocolError) -> String? {
        if object[key] == nil || object[key] == .null { return nil }
        return try string(key, maxBytes: maxBytes)
    }

    func path(_ key: String) throws(ProtocolError) -> MountPath {
        let value = try required(key)
        guard case .string(let text) = value else {
            throw fail(.wrongFieldType, "field \"\(key)\" must be a path string, not a \(value.typeName)")
        }
        do {
            return try MountPath(validating: text)
        } catch {
            throw fail(.invalidPath, "field \"\(key)\": \(error.message)")
        }
    }

    func optionalPath(_ key: String) throws(ProtocolError) -> MountPath? {
        if object[key] == nil || object[key] == .null { return nil }
        return try path(key)
    }

    func array(_ key: String) throws(ProtocolError) -> [JSONValue] {
        let value = try required(key)
        guard case .array(let elements) = value else {
            throw fail(.wrongFieldType, "field \"\(key)\" must be an array, not a \(value.typeName)")
        }
        return elements
    }

    func enumeration<E: RawRepresentable & CaseIterable>(_ key: String) throws(ProtocolError) -> E where E.RawValue == String {
        let name = try string(key, maxBytes: 64)
        guard let value = E(rawValue: name) else {
            throw fail(.invalidValue, "field \"\(key)\": unknown value \(MountPath.quoted(name)); known: \(E.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        return value
    }

    func nested(_ value: JSONValue, _ name: String) throws(ProtocolError) -> Fields {
        guard case .object(let inner) = value else {
            throw fail(.wrongFieldType, "field \"\(name)\" must be an object, not a \(value.typeName)")
        }
        return Fields(object: inner, context: "\(context).\(name)", requestIDValue: requestIDValue)
    }

    func intents(_ key: String) throws(ProtocolError) -> [Intent] {
        let list = try array(key)
        if list.count > Coordinate.maxIntents {
            throw fail(.invalidValue, "field \"\(key)\" lists more than \(Coordinate.maxIntents) intents")
        }
        var intents: [Intent] = []
        for (offset, value) in list.enumerated() {
            let item = try nested(value, "\(key)[\(offset)]")
            let path = try item.path("path")
            var names: [String] = []
            if item.has("options") {
                for (index, option) in try item.array("options").enumerated() {
                    guard case .string(let name) = option else {
                        throw item.fail(.wrongFieldType, "field \"options[\(index)]\" must be a string")
                    }
                    names.append(name)
                }
            }
            switch try item.string("intent", maxBytes: 16) {
            case "read":
                var options: ReadingOptions = []
                for name in names {
                    guard let option = ReadingOptions.names.first(where: { $0.0 == name }) else {
                        throw item.fail(.invalidValue, "unknown reading option \(MountPath.quoted(name)); known: \(ReadingOptions.names.map(\.0).joined(separator: ", "))")
                    }
                    options.insert(option.1)
                }
                intents.append(.reading(path, options: options))
            case "write":
                var options: WritingOptions = []
                for name in names {
                    guard let option = WritingOptions.names.first(where: { $0.0 == name }) else {
                        throw item.fail(.invalidValue, "unknown writing option \(MountPath.quoted(name)); known: \(WritingOptions.names.map(\.0).joined(separator: ", "))")
                    }
                    options.insert(option.1)
                }
                intents.append(.writing(path, options: options))
            case let other:
                throw item.fail(.invalidValue, "field \"intent\" is \(MountPath.quoted(other)); it must be \"read\" or \"write\"")
            }
        }
        return intents
    }
}
