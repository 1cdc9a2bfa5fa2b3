/// The protocol versions this build speaks, oldest first.
public enum ProtocolVersion {
    public static let supported: [Int] = [1]
    /// The version `hello` negotiation picks: the highest both sides speak.
    public static func negotiate(_ offered: [Int]) -> Int? {
        offered.filter { supported.contains($0) }.max()
    }
}

/// Every frame on the control socket. `docs/protocol.md` documents each message's fields.
public enum ControlMessage: Sendable, Equatable {
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
    // Either way.
    case error(ErrorMessage)
    case close(Close)

    /// Which way a message may travel.
    public enum Direction: Sendable { case toDaemon, toClient, either }

    /// The message's `type` on the wire.
    public var typeName: String {
        switch self {
        case .hello: return "hello"
        case .register: return "register"
        case .unregister: return "unregister"
        case .coordinate: return "coordinate"
        case .release: return "release"
        case .status: return "status"
        case .answer: return "answer"
        case .welcome: return "welcome"
        case .registered: return "registered"
        case .granted: return "granted"
        case .ok: return "ok"
        case .statusReport: return "statusReport"
        case .ask: return "ask"
        case .notification: return "notification"
        case .setUnsavedChanges: return "setUnsavedChanges"
        case .conflicts: return "conflicts"
        case .resolve: return "resolve"
        case .versions: return "versions"
        case .readVersion: return "readVersion"
        case .restore: return "restore"
        case .conflictList: return "conflictList"
        case .resolved: return "resolved"
        case .versionList: return "versionList"
        case .versionData: return "versionData"
        case .restored: return "restored"
        case .readLog: return "readLog"
        case .logRecords: return "logRecords"
        case .error: return "error"
        case .close: return "close"
        }
    }

    public var direction: Direction {
        switch self {
        case .hello, .register, .unregister, .coordinate, .release, .status, .answer,
             .setUnsavedChanges, .conflicts, .resolve, .versions, .readVersion, .restore, .readLog:
            return .toDaemon
        case .welcome, .registered, .granted, .ok, .statusReport, .ask, .notification,
             .conflictList, .resolved, .versionList, .versionData, .restored, .logRecords:
            return .toClient
        case .error, .close: return .either
        }
    }

    /// The request id of a client request, or the id a reply echoes.
    public var requestID: RequestID? {
        switch self {
        case .hello(let m): return m.id
        case .register(let m): return m.id
        case .unregister(let m): return m.id
        case .coordinate(let m): return m.id
        case .release(let m): return m.id
        case .status(let m): return m.id
        case .welcome(let m): return m.id
        case .registered(let m): return m.id
        case .granted(let m): return m.id
        case .ok(let m): return m.id
        case .statusReport(let m): return m.id
        case .setUnsavedChanges(let m): return m.id
        case .conflicts(let m): return m.id
        case .resolve(let m): return m.id
        case .versions(let m): return m.id
        case .readVersion(let m): return m.id
        case .restore(let m): return m.id
        case .conflictList(let m): return m.id
        case .resolved(let m): return m.id
        case .versionList(let m): return m.id
        case .versionData(let m): return m.id
        case .restored(let m): return m.id
        case .readLog(let m): return m.id
        case .logRecords(let m): return m.id
        case .error(let m): return m.id
        case .answer, .ask, .notification, .close: return nil
        }
    }
}

/// `hello`: the first frame a client sends; offers protocol versions.
public struct Hello: Sendable, Hashable {
    public var id: RequestID
    public var versions: [Int]
    /// A free-form name for logs and `coordfs status` (at most 256 bytes).
    public var client: String?
    public init(id: RequestID, versions: [Int] = ProtocolVersion.supported, client: String? = nil) {
        self.id = id
        self.versions = versions
        self.client = client
    }
}

/// `welcome`: the reply to `hello` with the chosen version.
public struct Welcome: Sendable, Hashable {
    public var id: RequestID
    public var version: Int
    public var server: String
    /// Largest frame payload the daemon accepts.
    public var maxFrameSize: Int
    /// The mount point the socket serves, informational.
    public var mountPoint: String?
    public init(id: RequestID, version: Int, server: String, maxFrameSize: Int, mountPoint: String? = nil) {
        self.id = id
        self.version = version
        self.server = server
        self.maxFrameSize = maxFrameSize
        self.mountPoint = mountPoint
    }
}

/// `register`: present a file or directory and say which asks to receive. Notifications are
/// always sent.
public struct Register: Sendable, Hashable {
    public var id: RequestID
    public var path: MountPath
    public var kind: ItemKind
    public var asks: Set<AskKind>
    /// The presenter already has unsaved changes in the document (as `setUnsavedChanges` would
    /// say right after registering, without a window in between). Sent only when true.
    public var unsaved: Bool
    public init(id: RequestID, path: MountPath, kind: ItemKind, asks: Set<AskKind> = Set(AskKind.allCases), unsaved: Bool = false) {
        self.id = id
        self.path = path
        self.kind = kind
        self.asks = asks
        self.unsaved = unsaved
    }
}

/// `registered`: the reply to `register`.
public struct Registered: Sendable, Hashable {
    public var id: RequestID
    public var presenter: PresenterID
    public init(id: RequestID, presenter: PresenterID) {
        self.id = id
        self.presenter = presenter
    }
}

/// `unregister`: stop presenting; replied to with `ok`.
public struct Unregister: Sendable, Hashable {
    public var id: RequestID
    public var presenter: PresenterID
    public init(id: RequestID, presenter: PresenterID) {
        self.id = id
        self.presenter = presenter
    }
}

/// `coordinate`: ask for a coordinated access to one or more items; replied to with `granted`
/// once presenters have answered and no conflicting access is held, or with `error`.
public struct Coordinate: Sendable, Hashable {
    public var id: RequestID
    public var intents: [Intent]
    /// The presenter on whose behalf the client accesses (it is not asked, nor notified).
    public var presenter: PresenterID?
    /// The longest the client will wait for the grant, in milliseconds.
    public var timeoutMs: UInt32?
    /// Most intents in one request.
    public static let maxIntents = 64
    public init(id: RequestID, intents: [Intent], presenter: PresenterID? = nil, timeoutMs: UInt32? = nil) {
        self.id = id
        self.intents = intents
        self.presenter = presenter
        self.timeoutMs = timeoutMs
    }
}

/// `granted`: the access is held until `release`.
public struct Granted: Sendable, Hashable {
    public var id: RequestID
    public var access: AccessID
    public init(id: RequestID, access: AccessID) {
        self.id = id
        self.access = access
    }
}

/// `release`: end an access and say what the writer did; replied to with `ok`.
public struct Release: Sendable, Hashable {
    public var id: RequestID
    public var access: AccessID
    public var changes: [ItemChange]
    public init(id: RequestID, access: AccessID, changes: [ItemChange] = []) {
        self.id = id
        self.access = access
        self.changes = changes
    }
}

/// `ok`: a request without a result succeeded.
public struct OK: Sendable, Hashable {
    public var id: RequestID
    public init(id: RequestID) { self.id = id }
}

/// `status`: ask for the daemon's current presenters, accesses and waiting requests.
public struct StatusQuery: Sendable, Hashable {
    public var id: RequestID
    public init(id: RequestID) { self.id = id }
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
        /// Milliseconds held so far.
        public var heldMs: UInt64
        public init(access: AccessID, intents: [Intent], pid: Int32, uid: UInt32, heldMs: UInt64) {
            self.access = access
            self.intents = intents
            self.pid = pid
            self.uid = uid
            self.heldMs = heldMs
        }
    }
    public struct Waiting: Sendable, Hashable {
        public var intents: [Intent]
        public var pid: Int32
        public var uid: UInt32
        /// Milliseconds waited so far.
        public var waitingMs: UInt64
        public init(intents: [Intent], pid: Int32, uid: UInt32, waitingMs: UInt64) {
            self.intents = intents
            self.pid = pid
            self.uid = uid
            self.waitingMs = waitingMs
        }
    }
    public var id: RequestID
    public var presenters: [Presenter]
    public var accesses: [Access]
    public var waiting: [Waiting]
    /// True on every part of a report sent in several frames but the last (docs/protocol.md,
    /// `status`): the lists of all parts together are the report.
    public var more: Bool
    public init(id: RequestID, presenters: [Presenter] = [], accesses: [Access] = [], waiting: [Waiting] = [], more: Bool = false) {
        self.id = id
        self.presenters = presenters
        self.accesses = accesses
        self.waiting = waiting
        self.more = more
    }

    /// Appends the lists of a later part.
    public mutating func append(_ part: StatusReport) {
        presenters += part.presenters
        accesses += part.accesses
        waiting += part.waiting
        more = part.more
    }
}

/// `ask`: the daemon asks a presenter to do something before an access; the client must send
/// an `answer` with the same id before `deadlineMs` milliseconds have passed.
public struct Ask: Sendable, Hashable {
    public var id: AskID
    public var presenter: PresenterID
    public var kind: AskKind
    /// The presented item's path.
    public var path: MountPath
    /// The item inside a presented directory the ask is about (`accommodateSubitemDeletion`).
    public var subitem: MountPath?
    public var deadlineMs: UInt32
    public init(id: AskID, presenter: PresenterID, kind: AskKind, path: MountPath, subitem: MountPath? = nil, deadlineMs: UInt32) {
        self.id = id
        self.presenter = presenter
        self.kind = kind
        self.path = path
        self.subitem = subitem
        self.deadlineMs = deadlineMs
    }
}

/// `answer`: the presenter's reply to an ask: done, or failed with an error.
public struct Answer: Sendable, Hashable {
    public var id: AskID
    public var error: ErrorBody?
    public init(id: AskID, error: ErrorBody? = nil) {
        self.id = id
        self.error = error
    }
}

/// `notification`: something happened to a presented item.
public struct PresenterNotification: Sendable, Equatable {
    public var presenter: PresenterID
    public var event: PresenterEvent
    public init(presenter: PresenterID, event: PresenterEvent) {
        self.presenter = presenter
        self.event = event
    }
}

/// `error`: a request failed (with its `id`), or the connection is about to close (no `id`).
public struct ErrorMessage: Sendable, Hashable {
    public var id: RequestID?
    public var code: ErrorCode
    public var message: String
    public init(id: RequestID? = nil, code: ErrorCode, message: String) {
        self.id = id
        self.code = code
        self.message = message
    }
    public init(id: RequestID? = nil, _ error: ProtocolError) {
        self.init(id: id, code: error.code, message: error.message)
    }
}

/// `close`: the sender is about to close the connection.
public struct Close: Sendable, Hashable {
    public var reason: String?
    public init(reason: String? = nil) { self.reason = reason }
}
