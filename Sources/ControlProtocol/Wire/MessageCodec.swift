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
            return .register(Register(id: id, path: path, kind: kind, asks: asks, unsaved: try fields.optionalBool("unsaved") ?? false))
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
            report.more = try fields.optionalBool("more") ?? false
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
                event = .documentChanged(try fields.documentChange())
            default:
                event = .unknown(event: name, fields: fields.remaining(except: ["type", "presenter", "event"]))
            }
            return .notification(PresenterNotification(presenter: presenter, event: event))
        case "setUnsavedChanges":
            let id = try fields.requestID()
            return .setUnsavedChanges(SetUnsavedChanges(id: id, presenter: PresenterID(try fields.uint("presenter")),
                                                        unsaved: try fields.bool("unsaved")))
        case "conflicts":
            let id = try fields.requestID()
            return .conflicts(ConflictsQuery(id: id, presenter: try fields.optionalUInt("presenter").map(PresenterID.init(rawValue:))))
        case "conflictList":
            let id = try fields.requestID()
            var conflicts: [ConflictInfo] = []
            for (offset, value) in try fields.array("conflicts").enumerated() {
                let item = try fields.nested(value, "conflicts[\(offset)]")
                conflicts.append(ConflictInfo(
                    conflict: ConflictID(try item.uint("conflict")), document: DocumentID(try item.uint("document")),
                    path: try item.path("path"), presenter: try item.optionalUInt("presenter").map(PresenterID.init(rawValue:)),
                    storePresenter: try item.string("storePresenter", maxBytes: 512), kind: try item.enumeration("kind"),
                    createdMs: try item.uint("createdMs"), before: try item.optionalIdentity("before"),
                    after: try item.optionalIdentity("after"), baseVersion: try item.optionalUInt("baseVersion").map(VersionID.init(rawValue:))))
            }
            return .conflictList(ConflictList(id: id, conflicts: conflicts))
        case "resolve":
            let id = try fields.requestID()
            let conflict = ConflictID(try fields.uint("conflict"))
            let resolution: ConflictResolution = try fields.enumeration("resolution")
            var mine: ResolutionContents?
            if let bytes = try fields.optionalBase64("mine") { mine = .bytes(bytes) }
            if let path = try fields.optionalPath("minePath") {
                if mine != nil { throw fields.fail(.invalidValue, "give either \"mine\" or \"minePath\", not both") }
                mine = .path(path)
            }
            return .resolve(Resolve(id: id, conflict: conflict, resolution: resolution, mine: mine))
        case "resolved":
            let id = try fields.requestID()
            return .resolved(Resolved(
                id: id, conflict: ConflictID(try fields.uint("conflict")), resolution: try fields.enumeration("resolution"),
                path: try fields.path("path"), writtenPath: try fields.optionalPath("writtenPath"),
                preservedVersion: try fields.optionalUInt("preservedVersion").map(VersionID.init(rawValue:)),
                mergeConflicts: Int(try fields.uint("mergeConflicts", max: UInt64(Int32.max))),
                after: try fields.optionalIdentity("after")))
        case "versions":
            let id = try fields.requestID()
            return .versions(VersionsQuery(id: id, path: try fields.path("path")))
        case "versionList":
            let id = try fields.requestID()
            var versions: [VersionInfo] = []
            for (offset, value) in try fields.array("versions").enumerated() {
                let item = try fields.nested(value, "versions[\(offset)]")
                versions.append(VersionInfo(
                    version: VersionID(try item.uint("version")), document: DocumentID(try item.uint("document")),
                    path: try item.path("path"), createdMs: try item.uint("createdMs"), size: try item.uint("size"),
                    reason: try item.string("reason", maxBytes: 64), method: try item.string("method", maxBytes: 64),
                    pinned: try item.bool("pinned")))
            }
            return .versionList(VersionList(id: id, versions: versions))
        case "readVersion":
            let id = try fields.requestID()
            let version = VersionID(try fields.uint("version"))
            let offset = try fields.optionalUInt("offset") ?? 0
            var length: UInt32?
            if let value = try fields.optionalUInt("length", max: UInt64(ReadVersion.maxLength)) {
                if value == 0 { throw fields.fail(.invalidValue, "field \"length\" must be between 1 and \(ReadVersion.maxLength)") }
                length = UInt32(value)
            }
            return .readVersion(ReadVersion(id: id, version: version, offset: offset, length: length))
        case "versionData":
            let id = try fields.requestID()
            guard let data = try fields.optionalBase64("data") else { throw fields.fail(.missingField, "missing field \"data\"") }
            return .versionData(VersionData(
                id: id, version: VersionID(try fields.uint("version")), offset: try fields.uint("offset"),
                size: try fields.uint("size"), data: data, eof: try fields.bool("eof")))
        case "restore":
            let id = try fields.requestID()
            return .restore(Restore(id: id, version: VersionID(try fields.uint("version")), path: try fields.path("path")))
        case "restored":
            let id = try fields.requestID()
            return .restored(Restored(
                id: id, version: VersionID(try fields.uint("version")), path: try fields.path("path"),
                preservedVersion: try fields.optionalUInt("preservedVersion").map(VersionID.init(rawValue:)),
                after: try fields.optionalIdentity("after")))
        case "readLog":
            let id = try fields.requestID()
            var limit: UInt32?
            if let value = try fields.optionalUInt("limit", max: UInt64(ReadLog.maxLimit)) {
                if value == 0 { throw fields.fail(.invalidValue, "field \"limit\" must be between 1 and \(ReadLog.maxLimit)") }
                limit = UInt32(value)
            }
            return .readLog(ReadLog(id: id, from: try fields.optionalUInt("from"), limit: limit))
        case "logRecords":
            let id = try fields.requestID()
            guard let records = try fields.optionalBase64("records") else { throw fields.fail(.missingField, "missing field \"records\"") }
            return .logRecords(LogRecords(id: id, records: records, next: try fields.uint("next"), end: try fields.uint("end"),
                                          oldest: try fields.optionalUInt("oldest")))
        case "error":
            let id = try fields.optionalUInt("id").map(RequestID.init(rawValue:))
            fields.requestIDValue = id?.rawValue
            return .error(ErrorMessage(
                id: id, code: ErrorCode(rawValue: try fields.string("code", maxBytes: 64)),
                message: try fields.string("message", maxBytes: 4096)))
        case "close":
            return .close(Close(reason: try fields.optionalString("reason", maxBytes: 4096)))
        default:
            let known = ["hello", "register", "unregister", "coordinate", "release", "status", "answer", "setUnsavedChanges",
                         "conflicts", "resolve", "versions", "readVersion", "restore", "readLog", "close", "error"]
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
            if m.unsaved { o["unsaved"] = .bool(true) }
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
            o["presenters"] = .array(m.presenters.map(Self.encode(presenter:)))
            o["accesses"] = .array(m.accesses.map(Self.encode(access:)))
            o["waiting"] = .array(m.waiting.map(Self.encode(waiting:)))
            if m.more { o["more"] = .bool(true) }
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
            case .documentChanged(let change):
                o["document"] = .int(Int64(change.document.rawValue))
                path("path", change.path)
                o["kind"] = .string(change.kind.rawValue)
                if let before = change.before { o["before"] = Self.encode(identity: before) }
                if let after = change.after { o["after"] = Self.encode(identity: after) }
                o["action"] = .string(change.action.name)
                if case .conflict(let conflict) = change.action { o["conflict"] = .int(Int64(conflict.rawValue)) }
                if case .failed(let message) = change.action { o["message"] = .string(message) }
            case .unknown(_, let fields):
                for (key, value) in fields where o[key] == nil { o[key] = value }
            }
        case .setUnsavedChanges(let m):
            id(m.id.rawValue)
            o["presenter"] = .int(Int64(m.presenter.rawValue))
            o["unsaved"] = .bool(m.unsaved)
        case .conflicts(let m):
            id(m.id.rawValue)
            if let presenter = m.presenter { o["presenter"] = .int(Int64(presenter.rawValue)) }
        case .conflictList(let m):
            id(m.id.rawValue)
            o["conflicts"] = .array(m.conflicts.map { c in
                var item = JSONObject()
                item["conflict"] = .int(Int64(c.conflict.rawValue))
                item["document"] = .int(Int64(c.document.rawValue))
                item["path"] = .string(c.path.wireValue)
                if let presenter = c.presenter { item["presenter"] = .int(Int64(presenter.rawValue)) }
                item["storePresenter"] = .string(c.storePresenter)
                item["kind"] = .string(c.kind.rawValue)
                item["createdMs"] = .int(Int64(c.createdMs))
                if let before = c.before { item["before"] = Self.encode(identity: before) }
                if let after = c.after { item["after"] = Self.encode(identity: after) }
                if let base = c.baseVersion { item["baseVersion"] = .int(Int64(base.rawValue)) }
                return .object(item)
            })
        case .resolve(let m):
            id(m.id.rawValue)
            o["conflict"] = .int(Int64(m.conflict.rawValue))
            o["resolution"] = .string(m.resolution.rawValue)
            switch m.mine {
            case .bytes(let bytes)?: o["mine"] = .string(Base64.encode(bytes))
            case .path(let mine)?: path("minePath", mine)
            case nil: break
            }
        case .resolved(let m):
            id(m.id.rawValue)
            o["conflict"] = .int(Int64(m.conflict.rawValue))
            o["resolution"] = .string(m.resolution.rawValue)
            path("path", m.path)
            if let written = m.writtenPath { path("writtenPath", written) }
            if let preserved = m.preservedVersion { o["preservedVersion"] = .int(Int64(preserved.rawValue)) }
            o["mergeConflicts"] = .int(Int64(m.mergeConflicts))
            if let after = m.after { o["after"] = Self.encode(identity: after) }
        case .versions(let m):
            id(m.id.rawValue)
            path("path", m.path)
        case .versionList(let m):
            id(m.id.rawValue)
            o["versions"] = .array(m.versions.map { v in
                .object(JSONObject([
                    "version": .int(Int64(v.version.rawValue)), "document": .int(Int64(v.document.rawValue)),
                    "path": .string(v.path.wireValue), "createdMs": .int(Int64(v.createdMs)), "size": .int(Int64(v.size)),
                    "reason": .string(v.reason), "method": .string(v.method), "pinned": .bool(v.pinned),
                ]))
            })
        case .readVersion(let m):
            id(m.id.rawValue)
            o["version"] = .int(Int64(m.version.rawValue))
            o["offset"] = .int(Int64(m.offset))
            if let length = m.length { o["length"] = .int(Int64(length)) }
        case .versionData(let m):
            id(m.id.rawValue)
            o["version"] = .int(Int64(m.version.rawValue))
            o["offset"] = .int(Int64(m.offset))
            o["size"] = .int(Int64(m.size))
            o["data"] = .string(Base64.encode(m.data))
            o["eof"] = .bool(m.eof)
        case .restore(let m):
            id(m.id.rawValue)
            o["version"] = .int(Int64(m.version.rawValue))
            path("path", m.path)
        case .restored(let m):
            id(m.id.rawValue)
            o["version"] = .int(Int64(m.version.rawValue))
            path("path", m.path)
            if let preserved = m.preservedVersion { o["preservedVersion"] = .int(Int64(preserved.rawValue)) }
            if let after = m.after { o["after"] = Self.encode(identity: after) }
        case .readLog(let m):
            id(m.id.rawValue)
            if let from = m.from { o["from"] = .int(Int64(from)) }
            if let limit = m.limit { o["limit"] = .int(Int64(limit)) }
        case .logRecords(let m):
            id(m.id.rawValue)
            o["records"] = .string(Base64.encode(m.records))
            o["next"] = .int(Int64(m.next))
            o["end"] = .int(Int64(m.end))
            if let oldest = m.oldest { o["oldest"] = .int(Int64(oldest)) }
        case .error(let m):
            if let requestID = m.id { id(requestID.rawValue) }
            o["code"] = .string(m.code.rawValue)
            o["message"] = .string(m.message)
        case .close(let m):
            if let reason = m.reason { o["reason"] = .string(reason) }
        }
        return o
    }

    static func encode(identity: DocumentIdentity) -> JSONValue {
        .object(JSONObject([
            "device": .string(String(identity.device)), "inode": .string(String(identity.inode)),
            "size": .int(Int64(identity.size)), "mtimeNs": .string(String(identity.modificationTimeNanoseconds)),
        ]))
    }

    static func encode(presenter p: StatusReport.Presenter) -> JSONValue {
        .object(JSONObject([
            "presenter": .int(Int64(p.presenter.rawValue)), "path": .string(p.path.wireValue),
            "kind": .string(p.kind.rawValue), "pid": .int(Int64(p.pid)), "uid": .int(Int64(p.uid)),
        ]))
    }

    static func encode(access a: StatusReport.Access) -> JSONValue {
        .object(JSONObject([
            "access": .int(Int64(a.access.rawValue)), "intents": .array(a.intents.map(Self.encode(intent:))),
            "pid": .int(Int64(a.pid)), "uid": .int(Int64(a.uid)), "heldMs": .int(Int64(a.heldMs)),
        ]))
    }

    static func encode(waiting w: StatusReport.Waiting) -> JSONValue {
        .object(JSONObject([
            "intents": .array(w.intents.map(Self.encode(intent:))), "pid": .int(Int64(w.pid)),
            "uid": .int(Int64(w.uid)), "waitingMs": .int(Int64(w.waitingMs)),
        ]))
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

    func bool(_ key: String) throws(ProtocolError) -> Bool {
        let value = try required(key)
        guard case .bool(let flag) = value else {
            throw fail(.wrongFieldType, "field \"\(key)\" must be true or false, not a \(value.typeName)")
        }
        return flag
    }

    func optionalBool(_ key: String) throws(ProtocolError) -> Bool? {
        if object[key] == nil || object[key] == .null { return nil }
        return try bool(key)
    }

    func optionalBase64(_ key: String) throws(ProtocolError) -> [UInt8]? {
        if object[key] == nil || object[key] == .null { return nil }
        let value = object[key]!
        guard case .string(let text) = value else {
            throw fail(.wrongFieldType, "field \"\(key)\" must be a base64 string, not a \(value.typeName)")
        }
        guard let bytes = Base64.decode(text) else {
            throw fail(.invalidValue, "field \"\(key)\" is not canonical base64 (RFC 4648, standard alphabet, padded)")
        }
        return bytes
    }

    /// A 64-bit integer spelled in decimal (`device`, `inode`, `mtimeNs`): canonical digits only.
    func decimal(_ key: String, signed: Bool) throws(ProtocolError) -> (UInt64, negative: Bool) {
        let text = try string(key, maxBytes: 21)
        var digits = Substring(text)
        let negative = signed && digits.first == "-"
        if negative { digits = digits.dropFirst() }
        guard !digits.isEmpty, digits.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }),
              digits == "0" || digits.first != "0", !(negative && digits == "0"),
              let magnitude = UInt64(digits)
        else {
            throw fail(.invalidValue, "field \"\(key)\" must be a decimal integer in a string, not \(MountPath.quoted(text))")
        }
        return (magnitude, negative)
    }

    func identity() throws(ProtocolError) -> DocumentIdentity {
        let device = try decimal("device", signed: false).0
        let inode = try decimal("inode", signed: false).0
        let (magnitude, negative) = try decimal("mtimeNs", signed: true)
        guard magnitude <= (negative ? UInt64(Int64.max) + 1 : UInt64(Int64.max)) else {
            throw fail(.invalidValue, "field \"mtimeNs\" does not fit in 64 bits")
        }
        let mtime = negative ? Int64(truncatingIfNeeded: 0 &- magnitude) : Int64(magnitude)
        return DocumentIdentity(device: device, inode: inode, size: try uint("size"), modificationTimeNanoseconds: mtime)
    }

    func optionalIdentity(_ key: String) throws(ProtocolError) -> DocumentIdentity? {
        if object[key] == nil || object[key] == .null { return nil }
        return try nested(object[key]!, key).identity()
    }

    func documentChange() throws(ProtocolError) -> DocumentChange {
        let document = DocumentID(try uint("document"))
        let path = try path("path")
        let kind: DocumentChangeKind = try enumeration("kind")
        let before = try optionalIdentity("before")
        let after = try optionalIdentity("after")
        let action: DocumentAction
        switch try string("action", maxBytes: 64) {
        case "reload": action = .reload
        case "close": action = .close
        case "conflict": action = .conflict(ConflictID(try uint("conflict")))
        case "failed": action = .failed(message: try string("message", maxBytes: 4096))
        case let other:
            throw fail(.invalidValue, "field \"action\": unknown action \(MountPath.quoted(other)); known: reload, close, conflict, failed")
        }
        return DocumentChange(document: document, path: path, kind: kind, before: before, after: after, action: action)
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
