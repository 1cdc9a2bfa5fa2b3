import ClusterKV
import Coordination
import NameBytes

/// Where the cluster keeps what in etcd. Everything sits under one prefix (`<prefix>/`), so several
/// clusters share one etcd and a node reads and watches nothing outside its own cluster:
///
/// | key | value | lease |
/// |---|---|---|
/// | `n/<node>` | the node: alive since, lease, TTL | the node's |
/// | `p/<node>/<presenter id>` | a presenter: path, uid | the node's |
/// | `h<item>\0<node>\0<serial>` | a right: mode, order, the user whose accesses use it (uid, gid, groups) | the node's |
/// | `a/<to node>/<from node>/<serial>` | an ask: intents, origin, fencing token | the asker's |
/// | `r/<from node>/<serial>/<to node>` | the answer to an ask | the answerer's |
/// | `c/<node>` | the node's latest change records (every put is seen by the watches) | the node's |
///
/// `<item>` is the path with a `/` before each component (the root is empty), so the keys of the
/// items inside `x` are exactly those starting with `h/x/`, and those of `x` itself start with `h/x\0`
/// (a name holds neither `/` nor NUL).
struct ClusterKeys: Sendable {
    let base: [UInt8]
    let node: String

    init(prefix: String, node: String) {
        var p = Array(prefix.utf8)
        while p.last == UInt8(ascii: "/") { p.removeLast() }
        base = p + [UInt8(ascii: "/")]
        self.node = node
    }

    func key(_ parts: String...) -> [UInt8] { base + Array(parts.joined(separator: "/").utf8) }

    var nodes: [UInt8] { key("n/") }
    func nodeKey(_ name: String) -> [UInt8] { key("n", name) }
    var presenters: [UInt8] { key("p/") }
    func presenterKey(_ id: UInt64) -> [UInt8] { key("p", node, String(id)) }
    func askKey(to: String, serial: UInt64) -> [UInt8] { key("a", to, node, String(serial)) }
    func answerKey(from: String, serial: UInt64) -> [UInt8] { key("r", from, String(serial), node) }
    var changeKey: [UInt8] { key("c", node) }

    /// `h` and the item's components, each after a `/`.
    func itemBytes(_ path: ItemPath) -> [UInt8] {
        var out = base + [UInt8(ascii: "h")]
        for c in path.components {
            out.append(UInt8(ascii: "/"))
            out.append(contentsOf: LosslessBytes.of(c))
        }
        return out
    }
    /// Every right on `path` itself.
    func rightsOn(_ path: ItemPath) -> [UInt8] { itemBytes(path) + [0] }
    /// Every right on an item inside `path`.
    func rightsInside(_ path: ItemPath) -> [UInt8] { itemBytes(path) + [UInt8(ascii: "/")] }
    func rightKey(_ path: ItemPath, serial: UInt64) -> [UInt8] {
        rightsOn(path) + Array(node.utf8) + [0] + Array(String(serial).utf8)
    }

    enum Parsed {
        case node(String)
        case presenter(node: String, id: UInt64)
        case right(path: ItemPath, node: String)
        case ask(to: String, from: String, serial: UInt64)
        case answer(from: String, serial: UInt64, to: String)
        case change(node: String)
    }

    func parse(_ key: [UInt8]) -> Parsed? {
        guard key.starts(with: base), key.count > base.count else { return nil }
        let rest = Array(key[base.count...])
        if rest[0] == UInt8(ascii: "h") {
            let parts = rest.split(separator: 0, omittingEmptySubsequences: false)
            guard parts.count == 3 else { return nil }
            let comps = parts[0].dropFirst().split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false).dropFirst()
            guard let path = try? ItemPath(components: comps.map { LosslessBytes.string($0) }) else { return nil }
            return .right(path: path, node: String(decoding: parts[1], as: UTF8.self))
        }
        let parts = rest.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false).map { String(decoding: $0, as: UTF8.self) }
        switch (parts.first, parts.count) {
        case ("n", 2): return .node(parts[1])
        case ("p", 3): return UInt64(parts[2]).map { .presenter(node: parts[1], id: $0) }
        case ("a", 4): return UInt64(parts[3]).map { .ask(to: parts[1], from: parts[2], serial: $0) }
        case ("r", 4): return UInt64(parts[2]).map { .answer(from: parts[1], serial: $0, to: parts[3]) }
        case ("c", 2): return .change(node: parts[1])
        default: return nil
        }
    }
}

/// A name's bytes and back (names are bytes: never re-encoded).
enum LosslessBytes {
    static func of(_ name: String) -> [UInt8] { LosslessName.bytes(name) }
    static func string<C: RandomAccessCollection>(_ bytes: C) -> String where C.Element == UInt8 { LosslessName.string(bytes) }
}
