import ClusterKV
import Coordination
import Foundation

/// One access's changes in `c/<node>`: what the node's publisher sends and what other nodes read.
/// On the request thread an access's release only appends one of these to the publisher's queue
/// (its changes and origin as the coordinator gave them: nothing is converted or encoded there).
struct ChangeRecord: Sendable {
    var serial: UInt64
    var token: Revision
    var origin: WireOrigin
    var changes: [AccessChange]
    /// The nodes asked before the access (they release their proxies with these changes).
    var asked: [String]
}

/// The value of `c/<node>`: a batch of change records in a compact binary form (docs/cluster.md,
/// "Keys"). The first byte is ``version``; then the records, each with its serial, fencing token,
/// origin (pid, uid, gid, executable), changes (a kind byte and the path's components as bytes;
/// a move has both paths) and the nodes it asked. Integers are LEB128 varints, byte strings a
/// varint length and the bytes. A value that starts with `[` is the JSON array of nodes before
/// this form, still read.
enum ChangeRecords {
    static let version: UInt8 = 1

    /// The records to send for `records`, consecutive ones merged where nothing tells them apart
    /// on another node: the same origin and fencing token, and no node asked (a record with asked
    /// nodes ends their proxies by its serial, so it stays whole). A merged record keeps its
    /// changes in order; each change is still dropped from caches and told to presenters.
    static func merged(_ records: [ChangeRecord]) -> [ChangeRecord] {
        var out: [ChangeRecord] = []
        out.reserveCapacity(records.count)
        for r in records {
            if r.asked.isEmpty, let last = out.last, last.asked.isEmpty, last.token == r.token, last.origin == r.origin {
                out[out.count - 1].changes += r.changes
                out[out.count - 1].serial = r.serial
            } else {
                out.append(r)
            }
        }
        return out
    }

    /// The first of `records` whose encoded form (``encode(_:)``) stays within `maxBytes` (at
    /// least one record), and the rest. Sizes are counted from the records' names, a little over
    /// what `encode` makes of them.
    static func split(_ records: [ChangeRecord], maxBytes: Int) -> (first: [ChangeRecord], rest: [ChangeRecord]) {
        var size = 16
        for (i, r) in records.enumerated() {
            size += estimatedSize(r)
            if size > maxBytes && i > 0 { return (Array(records[..<i]), Array(records[i...])) }
        }
        return (records, [])
    }

    /// At least the bytes `encode` makes of `r`: ten for each integer and each name's length, and a
    /// name's UTF-8 bytes (a name's byte that is not UTF-8 is one byte in the value, fewer).
    static func estimatedSize(_ r: ChangeRecord) -> Int {
        func path(_ p: ItemPath) -> Int { p.components.reduce(10) { $0 + $1.utf8.count + 10 } }
        var size = 60 + r.origin.exe.utf8.count + r.asked.reduce(0) { $0 + $1.utf8.count + 10 }
        for c in r.changes { size += 1 + c.paths.reduce(0) { $0 + path($1) } }
        return size
    }

    static func encode(_ records: [ChangeRecord]) -> [UInt8] {
        var w = Writer()
        w.bytes.reserveCapacity(16 + records.count * 32)
        w.bytes.append(version)
        w.varint(UInt64(records.count))
        for r in records {
            w.varint(r.serial)
            w.varint(UInt64(bitPattern: r.token))
            w.varint(UInt64(UInt32(bitPattern: r.origin.pid)))
            w.varint(UInt64(r.origin.uid))
            w.varint(UInt64(r.origin.gid))
            w.name(r.origin.exe)
            w.varint(UInt64(r.changes.count))
            for c in r.changes {
                switch c {
                case .changed(let p):
                    w.bytes.append(Kind.changed.rawValue)
                    w.path(p)
                case .deleted(let p):
                    w.bytes.append(Kind.deleted.rawValue)
                    w.path(p)
                case .subitemAppeared(let p):
                    w.bytes.append(Kind.appeared.rawValue)
                    w.path(p)
                case .moved(let a, let b):
                    w.bytes.append(Kind.moved.rawValue)
                    w.path(a)
                    w.path(b)
                }
            }
            w.varint(UInt64(r.asked.count))
            for n in r.asked { w.name(n) }
        }
        return w.bytes
    }

    /// The records of a value, nil when it is neither form. A change whose path is not a valid
    /// item path is left out (as a record of the JSON form did).
    static func decode(_ bytes: [UInt8]) -> [ChangeRecord]? {
        guard let first = bytes.first else { return nil }
        if first == UInt8(ascii: "[") { return Wire.decode([JSONChangeRecord].self, bytes)?.map(\.record) }
        guard first == version else { return nil }
        var r = Reader(bytes: bytes, at: 1)
        guard let count = r.varint(), count <= UInt64(bytes.count) else { return nil }
        var out: [ChangeRecord] = []
        out.reserveCapacity(Int(count))
        for _ in 0..<count {
            guard let serial = r.varint(), let token = r.varint(), let pid = r.varint(), let uid = r.varint(),
                  let gid = r.varint(), let exe = r.name(), let n = r.varint(), n <= UInt64(bytes.count) else { return nil }
            var changes: [AccessChange] = []
            changes.reserveCapacity(Int(n))
            for _ in 0..<n {
                guard let k = r.byte(), let kind = Kind(rawValue: k), let p = r.path() else { return nil }
                switch kind {
                case .changed: if let p { changes.append(.changed(p)) }
                case .deleted: if let p { changes.append(.deleted(p)) }
                case .appeared: if let p { changes.append(.subitemAppeared(p)) }
                case .moved:
                    guard let to = r.path() else { return nil }
                    if let p, let to { changes.append(.moved(from: p, to: to)) }
                }
            }
            guard let askedCount = r.varint(), askedCount <= UInt64(bytes.count) else { return nil }
            var asked: [String] = []
            for _ in 0..<askedCount {
                guard let a = r.name() else { return nil }
                asked.append(a)
            }
            let origin = WireOrigin(pid: Int32(bitPattern: UInt32(truncatingIfNeeded: pid)), uid: UInt32(truncatingIfNeeded: uid),
                                    gid: UInt32(truncatingIfNeeded: gid), exe: exe)
            out.append(ChangeRecord(serial: serial, token: Int64(bitPattern: token), origin: origin, changes: changes, asked: asked))
        }
        return r.at == bytes.count ? out : nil
    }

    enum Kind: UInt8 {
        case changed = 0, deleted = 1, appeared = 2, moved = 3
    }

    struct Writer {
        var bytes: [UInt8] = []

        mutating func varint(_ v: UInt64) {
            var v = v
            while v >= 0x80 {
                bytes.append(UInt8(truncatingIfNeeded: v) | 0x80)
                v >>= 7
            }
            bytes.append(UInt8(v))
        }

        /// A name's bytes (a file name's as Linux has them: a name that is not UTF-8 keeps its bytes).
        mutating func name(_ s: String) {
            let b = LosslessBytes.of(s)
            varint(UInt64(b.count))
            bytes += b
        }

        mutating func path(_ p: ItemPath) {
            varint(UInt64(p.components.count))
            for c in p.components { name(c) }
        }
    }

    struct Reader {
        let bytes: [UInt8]
        var at: Int

        mutating func byte() -> UInt8? {
            guard at < bytes.count else { return nil }
            defer { at += 1 }
            return bytes[at]
        }

        mutating func varint() -> UInt64? {
            var v: UInt64 = 0
            var shift: UInt64 = 0
            while let b = byte() {
                guard shift < 64 else { return nil }
                v |= UInt64(b & 0x7f) << shift
                if b < 0x80 { return v }
                shift += 7
            }
            return nil
        }

        mutating func name() -> String? {
            guard let n = varint(), n <= UInt64(bytes.count - at) else { return nil }
            defer { at += Int(n) }
            return LosslessBytes.string(bytes[at..<at + Int(n)])
        }

        /// A path: nil when the value is cut short, `.some(nil)` when its components are no item path.
        mutating func path() -> ItemPath?? {
            guard let n = varint(), n <= UInt64(bytes.count) else { return nil }
            var components: [String] = []
            components.reserveCapacity(Int(n))
            for _ in 0..<n {
                guard let c = name() else { return nil }
                components.append(c)
            }
            return .some(try? ItemPath(components: components))
        }
    }
}

/// A change record as nodes wrote it before the binary form (a JSON array of these).
struct JSONChangeRecord: Codable, Sendable {
    var serial: UInt64
    var token: Revision
    var origin: WireOrigin
    var changes: [WireChange]
    var asked: [String]

    var record: ChangeRecord {
        ChangeRecord(serial: serial, token: token, origin: origin, changes: changes.compactMap(\.change), asked: asked)
    }
}
