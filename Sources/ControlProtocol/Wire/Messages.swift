// The coordination messages (docs/protocol.md, "Handshake and versions", "Client to daemon",
// "Daemon to client", "Either way"): each struct with its wire name, direction and codec.

/// `hello`: the first frame a client sends; offers protocol versions.
package struct Hello: Sendable, Hashable {
    package var id: RequestID
    package var versions: [Int]
    /// A free-form name for logs and `coordfs status` (at most 256 bytes).
    package var client: String?
    package init(id: RequestID, versions: [Int] = ProtocolVersion.supported, client: String? = nil) {
        self.id = id
        self.versions = versions
        self.client = client
    }
}

extension Hello: WireMessage {
    static let wireName = "hello"
    static let direction = ControlMessage.Direction.toDaemon
    var requestID: RequestID? { id }
    var wrapped: ControlMessage { .hello(self) }

    init(wire fields: inout Fields) throws(ProtocolError) {
        id = try fields.requestID()
        versions = try fields.array("versions").enumerated().map { (offset, value) throws(ProtocolError) -> Int in
            guard case .int(let version) = value, version >= 0, version <= Int64(Int32.max) else {
                throw fields.fail(.wrongFieldType, "field \"versions[\(offset)]\" must be a non-negative integer")
            }
            return Int(version)
        }
        if versions.isEmpty { throw fields.fail(.invalidValue, "field \"versions\" must not be empty") }
        if versions.count > 64 { throw fields.fail(.invalidValue, "field \"versions\" lists more than 64 versions") }
        client = try fields.optionalString("client", maxBytes: 256)
    }

    func encode(to o: inout JSONObject) {
        o.put(id: id)
        o["versions"] = .array(versions.map { .int(Int64($0)) })
        if let client { o["client"] = .string(client) }
    }
}

/// `welcome`: the reply to `hello` with the chosen version.
package struct Welcome: Sendable, Hashable {
    package var id: RequestID
    package var version: Int
    package var server: String
    /// Largest frame payload the daemon accepts.
    package var maxFrameSize: Int
    /// The mount point the socket serves, informational.
    package var mountPoint: String?
    package init(id: RequestID, version: Int, server: String, maxFrameSize: Int, mountPoint: String? = nil) {
        self.id = id
        self.version = version
        self.server = server
        self.maxFrameSize = maxFrameSize
        self.mountPoint = mountPoint
    }
}

extension Welcome: WireMessage {
    static let wireName = "welcome"
    static let direction = ControlMessage.Direction.toClient
    var requestID: RequestID? { id }
    var wrapped: ControlMessage { .welcome(self) }

    init(wire fields: inout Fields) throws(ProtocolError) {
        id = try fields.requestID()
        version = Int(try fields.uint("version", max: UInt64(Int32.max)))
        server = try fields.string("server", maxBytes: 256)
        maxFrameSize = Int(try fields.uint("maxFrameSize", max: UInt64(UInt32.max)))
        mountPoint = try fields.optionalString("mountPoint", maxBytes: 4096)
    }

    func encode(to o: inout JSONObject) {
        o.put(id: id)
        o["version"] = .int(Int64(version))
        o["server"] = .string(server)
        o["maxFrameSize"] = .int(Int64(maxFrameSize))
        if let mountPoint { o["mountPoint"] = .string(mountPoint) }
    }
}

/// `register`: present a file or directory and say which asks to receive. Notifications are
/// always sent.
package struct Register: Sendable, Hashable {
    package var id: RequestID
    package var path: MountPath
    package var kind: ItemKind
    package var asks: Set<AskKind>
    /// The presenter already has unsaved changes in the document (as `setUnsavedChanges` would
    /// say right after registering, without a window in between). Sent only when true.
    package var unsaved: Bool
    package init(id: RequestID, path: MountPath, kind: ItemKind, asks: Set<AskKind> = Set(AskKind.allCases), unsaved: Bool = false) {
        self.id = id
        self.path = path
        self.kind = kind
        self.asks = asks
        self.unsaved = unsaved
    }
}

extension Register: WireMessage {
    static let wireName = "register"
    static let direction = ControlMessage.Direction.toDaemon
    var requestID: RequestID? { id }
    var wrapped: ControlMessage { .register(self) }

    init(wire fields: inout Fields) throws(ProtocolError) {
        id = try fields.requestID()
        path = try fields.path("path")
        kind = try fields.enumeration("kind")
        asks = []
        for (offset, value) in try fields.array("asks").enumerated() {
            guard case .string(let name) = value else {
                throw fields.fail(.wrongFieldType, "field \"asks[\(offset)]\" must be a string")
            }
            guard let ask = AskKind(rawValue: name) else {
                throw fields.fail(.invalidValue, "field \"asks[\(offset)]\": unknown ask \(MountPath.quoted(name)); known: \(AskKind.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            asks.insert(ask)
        }
        unsaved = try fields.optionalBool("unsaved") ?? false
    }

    func encode(to o: inout JSONObject) {
        o.put(id: id)
        o["path"] = .string(path.wireValue)
        o["kind"] = .string(kind.rawValue)
        o["asks"] = .array(asks.sorted().map { .string($0.rawValue) })
        if unsaved { o["unsaved"] = .bool(true) }
    }
}

/// `registered`: the reply to `register`.
package struct Registered: Sendable, Hashable {
    package var id: RequestID
    package var presenter: PresenterID
    package init(id: RequestID, presenter: PresenterID) {
        self.id = id
        self.presenter = presenter
    }
}

extension Registered: PresenterMessage {
    static let wireName = "registered"
    static let direction = ControlMessage.Direction.toClient
    var wrapped: ControlMessage { .registered(self) }
}

/// `unregister`: stop presenting; replied to with `ok`.
package struct Unregister: Sendable, Hashable {
    package var id: RequestID
    package var presenter: PresenterID
    package init(id: RequestID, presenter: PresenterID) {
        self.id = id
        self.presenter = presenter
    }
}

extension Unregister: PresenterMessage {
    static let wireName = "unregister"
    static let direction = ControlMessage.Direction.toDaemon
    var wrapped: ControlMessage { .unregister(self) }
}

/// `coordinate`: ask for a coordinated access to one or more items; replied to with `granted`
/// once presenters have answered and no conflicting access is held, or with `error`.
package struct Coordinate: Sendable, Hashable {
    package var id: RequestID
    package var intents: [Intent]
    /// The presenter on whose behalf the client accesses (it is not asked, nor notified).
    package var presenter: PresenterID?
    /// The longest the client will wait for the grant, in milliseconds.
    package var timeoutMs: UInt32?
    /// The client coordinator's purpose: accesses with the same purpose from one process never
    /// block each other; those of different purposes do (nil: the process's own purpose, shared
    /// with its reads and writes through the mount).
    package var purpose: String?
    /// Most intents in one request.
    package static let maxIntents = 64
    /// The longest purpose, in bytes.
    package static let maxPurposeBytes = 256
    package init(id: RequestID, intents: [Intent], presenter: PresenterID? = nil, timeoutMs: UInt32? = nil, purpose: String? = nil) {
        self.id = id
        self.intents = intents
        self.presenter = presenter
        self.timeoutMs = timeoutMs
        self.purpose = purpose
    }
}

extension Coordinate: WireMessage {
    static let wireName = "coordinate"
    static let direction = ControlMessage.Direction.toDaemon
    var requestID: RequestID? { id }
    var wrapped: ControlMessage { .coordinate(self) }

    init(wire fields: inout Fields) throws(ProtocolError) {
        id = try fields.requestID()
        intents = try fields.intents("intents")
        if intents.isEmpty { throw fields.fail(.invalidValue, "field \"intents\" must not be empty") }
        presenter = try fields.optionalUInt("presenter").map(PresenterID.init(rawValue:))
        timeoutMs = try fields.optionalUInt("timeoutMs", max: UInt64(UInt32.max)).map { UInt32($0) }
        purpose = try fields.optionalString("purpose", maxBytes: Self.maxPurposeBytes)
    }

    func encode(to o: inout JSONObject) {
        o.put(id: id)
        o["intents"] = .array(intents.map(\.wireValue))
        if let presenter { o["presenter"] = .int(Int64(presenter.rawValue)) }
        if let timeoutMs { o["timeoutMs"] = .int(Int64(timeoutMs)) }
        if let purpose { o["purpose"] = .string(purpose) }
    }
}

/// `granted`: the access is held until `release`.
package struct Granted: Sendable, Hashable {
    package var id: RequestID
    package var access: AccessID
    package init(id: RequestID, access: AccessID) {
        self.id = id
        self.access = access
    }
}

extension Granted: WireMessage {
    static let wireName = "granted"
    static let direction = ControlMessage.Direction.toClient
    var requestID: RequestID? { id }
    var wrapped: ControlMessage { .granted(self) }

    init(wire fields: inout Fields) throws(ProtocolError) {
        id = try fields.requestID()
        access = AccessID(try fields.uint("access"))
    }

    func encode(to o: inout JSONObject) {
        o.put(id: id)
        o["access"] = .int(Int64(access.rawValue))
    }
}

/// `release`: end an access and say what the writer did; replied to with `ok`.
package struct Release: Sendable, Hashable {
    package var id: RequestID
    package var access: AccessID
    package var changes: [ItemChange]
    package init(id: RequestID, access: AccessID, changes: [ItemChange] = []) {
        self.id = id
        self.access = access
        self.changes = changes
    }
}

extension Release: WireMessage {
    static let wireName = "release"
    static let direction = ControlMessage.Direction.toDaemon
    var requestID: RequestID? { id }
    var wrapped: ControlMessage { .release(self) }

    init(wire fields: inout Fields) throws(ProtocolError) {
        id = try fields.requestID()
        access = AccessID(try fields.uint("access"))
        changes = []
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
    }

    func encode(to o: inout JSONObject) {
        o.put(id: id)
        o["access"] = .int(Int64(access.rawValue))
        o["changes"] = .array(changes.map { change in
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
    }
}

/// `ok`: a request without a result succeeded.
package struct OK: Sendable, Hashable {
    package var id: RequestID
    package init(id: RequestID) { self.id = id }
}

extension OK: WireMessage {
    static let wireName = "ok"
    static let direction = ControlMessage.Direction.toClient
    var requestID: RequestID? { id }
    var wrapped: ControlMessage { .ok(self) }
    init(wire fields: inout Fields) throws(ProtocolError) { id = try fields.requestID() }
    func encode(to o: inout JSONObject) { o.put(id: id) }
}

/// `status`: ask for the daemon's current presenters, accesses and waiting requests.
package struct StatusQuery: Sendable, Hashable {
    package var id: RequestID
    package init(id: RequestID) { self.id = id }
}

extension StatusQuery: IDOnlyRequest {
    static let wireName = "status"
    static let direction = ControlMessage.Direction.toDaemon
    var wrapped: ControlMessage { .status(self) }
}

/// `statusReport`: the reply to `status`.
public struct StatusReport: Sendable, Hashable {
    public struct Presenter: Sendable, Hashable {
        public var presenter: PresenterID
        public var path: MountPath
        public var kind: ItemKind
        public var pid: Int32
        public var uid: UInt32
        public init(presenter: PresenterID, path: MountPath, kind: ItemKind, pid: Int32, uid: UInt32) {
            self.presenter = presenter
            self.path = path
            self.kind = kind
            self.pid = pid
            self.uid = uid
        }
    }
    public struct Access: Sendable, Hashable {
        public var access: AccessID
        public var intents: [Intent]
        public var pid: Int32
        public var uid: UInt32
        /// Milliseconds held so far (for an access still asking presenters: since it was requested).
        public var heldMs: UInt64
        /// The asks of presenters this access is waiting for the answers of: it is not granted
        /// yet, its place held (those presenters the peer may see; empty once granted).
        public var asking: [Asking] = []
        /// On the wire only: this entry's intents go on in the next entry of the list (an access
        /// too large for one frame is sent in several entries; decoding joins them).
        package var continues = false
        public init(access: AccessID, intents: [Intent], pid: Int32, uid: UInt32, heldMs: UInt64, asking: [Asking] = []) {
            self.access = access
            self.intents = intents
            self.pid = pid
            self.uid = uid
            self.heldMs = heldMs
            self.asking = asking
        }
    }
    /// An ask an access waits on: which presenter, which ask, for how long so far.
    public struct Asking: Sendable, Hashable {
        public var presenter: PresenterID
        public var ask: AskKind
        public var askingMs: UInt64
        public init(presenter: PresenterID, ask: AskKind, askingMs: UInt64) {
            self.presenter = presenter
            self.ask = ask
            self.askingMs = askingMs
        }
    }
    public struct Waiting: Sendable, Hashable {
        public var intents: [Intent]
        public var pid: Int32
        public var uid: UInt32
        /// Milliseconds waited so far.
        public var waitingMs: UInt64
        /// On the wire only, as `Access.continues`.
        package var continues = false
        public init(intents: [Intent], pid: Int32, uid: UInt32, waitingMs: UInt64) {
            self.intents = intents
            self.pid = pid
            self.uid = uid
            self.waitingMs = waitingMs
        }
    }
    /// A user whose event log records are summarised now, over its share of the log
    /// (`-o log_user_share`, docs/event-log.md, "Each user's share").
    public struct LogShareUser: Sendable, Hashable {
        public var uid: UInt32
        /// When it reached its share (milliseconds since the epoch).
        public var sinceMs: Int64
        /// Its records summarised in `coalesced` records since then (and gathered for the next).
        public var records: UInt64
        /// Bytes its records take in the stored log, and the share's bound.
        public var bytes: UInt64
        public var limitBytes: UInt64
        public init(uid: UInt32, sinceMs: Int64, records: UInt64, bytes: UInt64, limitBytes: UInt64) {
            self.uid = uid
            self.sinceMs = sinceMs
            self.records = records
            self.bytes = bytes
            self.limitBytes = limitBytes
        }
    }
    package var id: RequestID
    public var presenters: [Presenter]
    public var accesses: [Access]
    public var waiting: [Waiting]
    /// The users over their share of the log (root and the mount's owner see all, another user
    /// only itself); sent in the first part.
    public var logShare: [LogShareUser] = []
    /// True on every part of a report sent in several frames but the last (docs/protocol.md,
    /// `status`): the lists of all parts together are the report.
    package var more: Bool
    package init(id: RequestID, presenters: [Presenter] = [], accesses: [Access] = [], waiting: [Waiting] = [], more: Bool = false) {
        self.id = id
        self.presenters = presenters
        self.accesses = accesses
        self.waiting = waiting
        self.more = more
    }

    /// Appends the lists of a later part.
    package mutating func append(_ part: StatusReport) {
        presenters += part.presenters
        accesses += part.accesses
        waiting += part.waiting
        logShare += part.logShare
        more = part.more
        joinContinued()
    }

    /// Joins the entries an access (or a waiting request) too large for one frame was sent in:
    /// each entry marked `continues` takes the next one's intents.
    mutating func joinContinued() {
        accesses = Self.joined(accesses)
        waiting = Self.joined(waiting)
    }

    private static func joined<Entry: IntentsEntry>(_ list: [Entry]) -> [Entry] {
        guard list.contains(where: \.continues) else { return list }
        var out: [Entry] = []
        for entry in list {
            if var last = out.last, last.continues {
                last.intents += entry.intents
                last.continues = entry.continues
                out[out.count - 1] = last
            } else {
                out.append(entry)
            }
        }
        return out
    }
}

extension StatusReport: WireMessage {
    static let wireName = "statusReport"
    static let direction = ControlMessage.Direction.toClient
    var requestID: RequestID? { id }
    var wrapped: ControlMessage { .statusReport(self) }

    init(wire fields: inout Fields) throws(ProtocolError) {
        self.init(id: try fields.requestID())
        for (offset, value) in try fields.array("presenters").enumerated() {
            let item = try fields.nested(value, "presenters[\(offset)]")
            presenters.append(Presenter(
                presenter: PresenterID(try item.uint("presenter")), path: try item.path("path"),
                kind: try item.enumeration("kind"), pid: try item.pid(), uid: try item.uid()))
        }
        for (offset, value) in try fields.array("accesses").enumerated() {
            let item = try fields.nested(value, "accesses[\(offset)]")
            var access = Access(
                access: AccessID(try item.uint("access")), intents: try item.intents("intents"),
                pid: try item.pid(), uid: try item.uid(), heldMs: try item.uint("heldMs"))
            access.continues = try item.optionalBool("continues") ?? false
            if item.has("asking") {
                for (n, value) in try item.array("asking").enumerated() {
                    let ask = try item.nested(value, "accesses[\(offset)].asking[\(n)]")
                    // An ask this build does not know is left out, not an error.
                    guard let kind = AskKind(rawValue: try ask.string("ask", maxBytes: 64)) else { continue }
                    access.asking.append(StatusReport.Asking(
                        presenter: PresenterID(try ask.uint("presenter")), ask: kind, askingMs: try ask.uint("askingMs")))
                }
            }
            accesses.append(access)
        }
        for (offset, value) in try fields.array("waiting").enumerated() {
            let item = try fields.nested(value, "waiting[\(offset)]")
            var entry = Waiting(
                intents: try item.intents("intents"), pid: try item.pid(), uid: try item.uid(),
                waitingMs: try item.uint("waitingMs"))
            entry.continues = try item.optionalBool("continues") ?? false
            waiting.append(entry)
        }
        if fields.has("logShare") {
            for (offset, value) in try fields.array("logShare").enumerated() {
                let item = try fields.nested(value, "logShare[\(offset)]")
                logShare.append(LogShareUser(
                    uid: try item.uid(), sinceMs: Int64(try item.uint("sinceMs")), records: try item.uint("records"),
                    bytes: try item.uint("bytes"), limitBytes: try item.uint("limitBytes")))
            }
        }
        more = try fields.optionalBool("more") ?? false
        joinContinued()
    }

    func encode(to o: inout JSONObject) {
        o.put(id: id)
        o["presenters"] = .array(presenters.map(\.wireValue))
        o["accesses"] = .array(accesses.map(\.wireValue))
        o["waiting"] = .array(waiting.map(\.wireValue))
        if !logShare.isEmpty { o["logShare"] = .array(logShare.map(\.wireValue)) }
        if more { o["more"] = .bool(true) }
    }
}

extension StatusReport.LogShareUser {
    var wireValue: JSONValue {
        .object(JSONObject([
            "uid": .int(Int64(uid)), "sinceMs": .int(max(0, sinceMs)), "records": .int(Int64(clamping: records)),
            "bytes": .int(Int64(clamping: bytes)), "limitBytes": .int(Int64(clamping: limitBytes)),
        ]))
    }
}

extension StatusReport.Presenter {
    var wireValue: JSONValue {
        .object(JSONObject([
            "presenter": .int(Int64(presenter.rawValue)), "path": .string(path.wireValue),
            "kind": .string(kind.rawValue), "pid": .int(Int64(pid)), "uid": .int(Int64(uid)),
        ]))
    }
}

extension StatusReport.Access {
    var wireValue: JSONValue {
        var o = JSONObject([
            "access": .int(Int64(access.rawValue)), "intents": .array(intents.map(\.wireValue)),
            "pid": .int(Int64(pid)), "uid": .int(Int64(uid)), "heldMs": .int(Int64(heldMs)),
        ])
        if !asking.isEmpty { o["asking"] = .array(asking.map(\.wireValue)) }
        if continues { o["continues"] = .bool(true) }
        return .object(o)
    }
}

extension StatusReport.Asking {
    /// Also what `coordfs status --json` shows of it.
    package var wireValue: JSONValue {
        .object(JSONObject([
            "presenter": .int(Int64(presenter.rawValue)), "ask": .string(ask.rawValue), "askingMs": .int(Int64(clamping: askingMs)),
        ]))
    }
}

extension StatusReport.Waiting {
    var wireValue: JSONValue {
        var o = JSONObject([
            "intents": .array(intents.map(\.wireValue)), "pid": .int(Int64(pid)),
            "uid": .int(Int64(uid)), "waitingMs": .int(Int64(waitingMs)),
        ])
        if continues { o["continues"] = .bool(true) }
        return .object(o)
    }
}

/// `ask`: the daemon asks a presenter to do something before an access; the client must send
/// an `answer` with the same id before `deadlineMs` milliseconds have passed.
package struct Ask: Sendable, Hashable {
    package var id: AskID
    package var presenter: PresenterID
    package var kind: AskKind
    /// The presented item's path.
    package var path: MountPath
    /// The item inside a presented directory the ask is about (`accommodateSubitemDeletion`).
    package var subitem: MountPath?
    package var deadlineMs: UInt32
    package init(id: AskID, presenter: PresenterID, kind: AskKind, path: MountPath, subitem: MountPath? = nil, deadlineMs: UInt32) {
        self.id = id
        self.presenter = presenter
        self.kind = kind
        self.path = path
        self.subitem = subitem
        self.deadlineMs = deadlineMs
    }
}

extension Ask: WireMessage {
    static let wireName = "ask"
    static let direction = ControlMessage.Direction.toClient
    var requestID: RequestID? { nil }
    var wrapped: ControlMessage { .ask(self) }

    init(wire fields: inout Fields) throws(ProtocolError) {
        id = AskID(try fields.uint("id"))
        kind = try fields.enumeration("ask")
        presenter = PresenterID(try fields.uint("presenter"))
        path = try fields.path("path")
        subitem = try fields.optionalPath("subitem")
        deadlineMs = UInt32(try fields.uint("deadlineMs", max: UInt64(UInt32.max)))
    }

    func encode(to o: inout JSONObject) {
        o["id"] = .int(Int64(id.rawValue))
        o["presenter"] = .int(Int64(presenter.rawValue))
        o["ask"] = .string(kind.rawValue)
        o["path"] = .string(path.wireValue)
        if let subitem { o["subitem"] = .string(subitem.wireValue) }
        o["deadlineMs"] = .int(Int64(deadlineMs))
    }
}

/// `answer`: the presenter's reply to an ask: done, or failed with an error.
package struct Answer: Sendable, Hashable {
    package var id: AskID
    package var error: ErrorBody?
    package init(id: AskID, error: ErrorBody? = nil) {
        self.id = id
        self.error = error
    }
}

extension Answer: WireMessage {
    static let wireName = "answer"
    static let direction = ControlMessage.Direction.toDaemon
    var requestID: RequestID? { nil }
    var wrapped: ControlMessage { .answer(self) }

    init(wire fields: inout Fields) throws(ProtocolError) {
        id = AskID(try fields.uint("id"))
        error = nil
        if fields.has("error") {
            let body = try fields.nested(try fields.required("error"), "error")
            error = ErrorBody(code: ErrorCode(rawValue: try body.string("code", maxBytes: 64)),
                              message: try body.string("message", maxBytes: 4096))
        }
    }

    func encode(to o: inout JSONObject) {
        o["id"] = .int(Int64(id.rawValue))
        if let error {
            o["error"] = .object(JSONObject(["code": .string(error.code.rawValue), "message": .string(error.message)]))
        }
    }
}

/// `notification`: something happened to a presented item.
package struct PresenterNotification: Sendable, Equatable {
    package var presenter: PresenterID
    package var event: PresenterEvent
    package init(presenter: PresenterID, event: PresenterEvent) {
        self.presenter = presenter
        self.event = event
    }
}

extension PresenterNotification: WireMessage {
    static let wireName = "notification"
    static let direction = ControlMessage.Direction.toClient
    var requestID: RequestID? { nil }
    var wrapped: ControlMessage { .notification(self) }

    init(wire fields: inout Fields) throws(ProtocolError) {
        presenter = PresenterID(try fields.uint("presenter"))
        let name = try fields.string("event", maxBytes: 64)
        switch name {
        case "didChange": event = .didChange
        case "didMove": event = .didMove(to: try fields.path("newPath"))
        case "didDelete": event = .didDelete
        case "subitemDidAppear": event = .subitemDidAppear(try fields.path("subitem"))
        case "subitemDidChange": event = .subitemDidChange(try fields.path("subitem"))
        case "subitemDidMove": event = .subitemDidMove(try fields.path("subitem"), to: try fields.path("newPath"))
        case "subitemDidDelete": event = .subitemDidDelete(try fields.path("subitem"))
        case "documentChanged": event = .documentChanged(try fields.documentChange())
        case "didGainConflict": event = .didGainConflict(ConflictID(try fields.uint("conflict")))
        case "didResolveConflict":
            event = .didResolveConflict(ConflictID(try fields.uint("conflict")), resolution: try fields.enumeration("resolution"))
        default: event = .unknown(event: name, fields: fields.remaining(except: ["type", "presenter", "event"]))
        }
    }

    func encode(to o: inout JSONObject) {
        o["presenter"] = .int(Int64(presenter.rawValue))
        o["event"] = .string(event.name)
        switch event {
        case .didChange, .didDelete: break
        case .didMove(let to): o["newPath"] = .string(to.wireValue)
        case .subitemDidAppear(let p), .subitemDidChange(let p), .subitemDidDelete(let p): o["subitem"] = .string(p.wireValue)
        case .subitemDidMove(let from, let to):
            o["subitem"] = .string(from.wireValue)
            o["newPath"] = .string(to.wireValue)
        case .documentChanged(let change): change.encode(to: &o)
        case .didGainConflict(let conflict): o["conflict"] = .int(Int64(conflict.rawValue))
        case .didResolveConflict(let conflict, let resolution):
            o["conflict"] = .int(Int64(conflict.rawValue))
            o["resolution"] = .string(resolution.rawValue)
        case .unknown(_, let fields):
            for (key, value) in fields where o[key] == nil { o[key] = value }
        }
    }
}

/// `error`: a request failed (with its `id`), or the connection is about to close (no `id`).
package struct ErrorMessage: Sendable, Hashable {
    package var id: RequestID?
    package var code: ErrorCode
    package var message: String
    package init(id: RequestID? = nil, code: ErrorCode, message: String) {
        self.id = id
        self.code = code
        self.message = message
    }
    package init(id: RequestID? = nil, _ error: ProtocolError) {
        self.init(id: id, code: error.code, message: error.message)
    }
}

extension ErrorMessage: WireMessage {
    static let wireName = "error"
    static let direction = ControlMessage.Direction.either
    var requestID: RequestID? { id }
    var wrapped: ControlMessage { .error(self) }

    init(wire fields: inout Fields) throws(ProtocolError) {
        id = try fields.optionalUInt("id").map(RequestID.init(rawValue:))
        fields.requestIDValue = id?.rawValue
        code = ErrorCode(rawValue: try fields.string("code", maxBytes: 64))
        message = try fields.string("message", maxBytes: 4096)
    }

    func encode(to o: inout JSONObject) {
        if let id { o.put(id: id) }
        o["code"] = .string(code.rawValue)
        o["message"] = .string(message)
    }
}

/// `close`: the sender is about to close the connection.
package struct Close: Sendable, Hashable {
    package var reason: String?
    package init(reason: String? = nil) { self.reason = reason }
}

extension Close: WireMessage {
    static let wireName = "close"
    static let direction = ControlMessage.Direction.either
    var requestID: RequestID? { nil }
    var wrapped: ControlMessage { .close(self) }
    init(wire fields: inout Fields) throws(ProtocolError) { reason = try fields.optionalString("reason", maxBytes: 4096) }
    func encode(to o: inout JSONObject) { if let reason { o["reason"] = .string(reason) } }
}
