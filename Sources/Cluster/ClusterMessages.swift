import ClusterKV
import Coordination
import Foundation

/// A path on the wire: its components' bytes.
struct WirePath: Codable, Hashable, Sendable {
    var c: [[UInt8]]
    init(_ path: ItemPath) { c = path.components.map(LosslessBytes.of) }
    var path: ItemPath? { try? ItemPath(components: c.map { LosslessBytes.string($0) }) }
}

struct WireIntent: Codable, Sendable {
    var path: WirePath
    var write: Bool
    var options: UInt
    init(_ i: FileAccessIntent) {
        path = WirePath(i.path)
        switch i.kind {
        case .reading(let o): write = false; options = o.rawValue
        case .writing(let o): write = true; options = o.rawValue
        }
    }
    var intent: FileAccessIntent? {
        guard let p = path.path else { return nil }
        return write ? .writingIntent(with: p, options: .init(rawValue: options)) : .readingIntent(with: p, options: .init(rawValue: options))
    }
}

struct WireOrigin: Codable, Sendable, Equatable {
    var pid: Int32, uid: UInt32, gid: UInt32, exe: String
    init(_ o: AccessOrigin) { pid = o.pid; uid = o.uid; gid = o.gid; exe = o.executable }
    init(pid: Int32, uid: UInt32, gid: UInt32, exe: String) {
        self.pid = pid
        self.uid = uid
        self.gid = gid
        self.exe = exe
    }
    /// The origin as the node that receives it records it: the executable named with its node.
    func origin(node: String) -> AccessOrigin { AccessOrigin(pid: pid, uid: uid, gid: gid, executable: "\(exe)@\(node)") }
}

struct WireChange: Codable, Sendable {
    var kind: String // changed, deleted, appeared, moved
    var path: WirePath
    var to: WirePath?
    init(_ c: AccessChange) {
        switch c {
        case .changed(let p): kind = "changed"; path = WirePath(p)
        case .deleted(let p): kind = "deleted"; path = WirePath(p)
        case .subitemAppeared(let p): kind = "appeared"; path = WirePath(p)
        case .moved(let a, let b): kind = "moved"; path = WirePath(a); to = WirePath(b)
        }
    }
    var change: AccessChange? {
        guard let p = path.path else { return nil }
        switch kind {
        case "changed": return .changed(p)
        case "deleted": return .deleted(p)
        case "appeared": return .subitemAppeared(p)
        case "moved": return to?.path.map { .moved(from: p, to: $0) }
        default: return nil
        }
    }
}

/// `n/<node>`.
struct NodeValue: Codable, Sendable {
    /// Wall-clock seconds since the epoch when this session began.
    var since: Double
    var lease: Int64
    var ttl: Int64
}

/// `p/<node>/<id>`.
struct PresenterValue: Codable, Sendable {
    var path: WirePath
    var uid: UInt32
}

/// `h...`: a right. `order` is set on rights split off a wider one: they keep its place. `uid`,
/// `gid` and `groups` are the user whose accesses use it (a node takes a right for one user's
/// accesses): another node judges a read right of another user in the way of its write as it judges
/// its own readers (``HoldUpRule``). A right of an older node has none of them, and holds as before.
/// `y` (true or absent): a write right another node waits for, put again once every access using
/// it is an unmodified program's open file (``ClusterNode/accessYields(_:appending:)``): that node's write
/// goes ahead past it at its wait deadline, as past an open file on one host.
/// `i` (true or absent, only with `y`): put again so while every access using it is an open file
/// held a second through which nothing was written (``ClusterNode/accessMayIdle(_:probe:appendingAWhile:changedPast:)``), and
/// again without it when one is no longer so: a request of the mount waiting for it goes ahead
/// past it at once, as past such open files on one host.
/// `a` (true or absent, only with `y`): every access using it is an open file that only appends (a
/// log being written): a read of the mount on another node goes ahead past it at once.
/// `l` (true or absent, only with `a`): each of those open files was made a second ago or more (a
/// service's log): an append or a change of names of the mount on another node goes ahead past it
/// at once too.
struct RightValue: Codable, Sendable, Equatable {
    var mode: UInt8
    var order: Revision?
    var uid: UInt32?
    var gid: UInt32?
    var groups: [UInt32]?
    var y: Bool?
    var i: Bool?
    /// Besides `y`: every access using it is an open file that only appends (a log being written).
    var a: Bool?
    /// Besides `a`: each of those open files was made a second ago or more.
    var l: Bool?

    init(mode: UInt8, order: Revision?, holder: PresenterCredentials? = nil, yields: Bool = false, idle: Bool = false,
         appends: Bool = false, appendingAWhile: Bool = false) {
        self.mode = mode
        self.order = order
        uid = holder?.uid
        gid = holder?.gid
        groups = holder?.groups
        y = yields ? true : nil
        i = yields && idle ? true : nil
        a = yields && appends ? true : nil
        l = yields && appends && appendingAWhile ? true : nil
    }

    /// The user it records, or nil (a right of an older node, or one cut short).
    var holder: PresenterCredentials? {
        guard let uid, let gid else { return nil }
        return PresenterCredentials(uid: uid, gid: gid, groups: groups ?? [])
    }
}

/// `a/<to>/<from>/<serial>`.
struct AskValue: Codable, Sendable {
    var intents: [WireIntent]
    var origin: WireOrigin
    var token: Revision
}

/// `r/<from>/<serial>/<to>`: 0 for granted, else the errno the access fails with.
struct AnswerValue: Codable, Sendable {
    var errno: Int32
    var message: String
}

enum Wire {
    static func encode<T: Encodable>(_ value: T) -> [UInt8] {
        (try? Array(JSONEncoder().encode(value))) ?? []
    }
    static func decode<T: Decodable>(_ type: T.Type, _ bytes: [UInt8]) -> T? {
        try? JSONDecoder().decode(type, from: Data(bytes))
    }
}
