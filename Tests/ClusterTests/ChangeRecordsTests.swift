@testable import Cluster
import ClusterKV
import Coordination
import Foundation
import Testing

/// The value of `c/<node>` (ChangeRecords): a compact binary batch that keeps every change, its
/// order, its origin and fencing token, and the nodes an access asked; names that are not UTF-8
/// keep their bytes; earlier nodes' JSON values are still read; consecutive records are merged
/// only where no other node could tell them apart.
@Suite struct ChangeRecordsTests {
    let python = WireOrigin(pid: 4242, uid: 1000, gid: 100, exe: "python3")

    func record(_ serial: UInt64, _ changes: [AccessChange], token: Revision = 77, origin: WireOrigin? = nil,
                asked: [String] = []) -> ChangeRecord {
        ChangeRecord(serial: serial, token: token, origin: origin ?? python, changes: changes, asked: asked)
    }

    /// A record as text, to compare decoded batches with what was encoded.
    func text(_ records: [ChangeRecord]) -> [String] {
        records.map { r in
            "\(r.serial) \(r.token) \(r.origin.pid)/\(r.origin.uid)/\(r.origin.gid)/\(r.origin.exe) \(r.changes.map(\.description)) \(r.asked)"
        }
    }

    @Test func aBatchComesBackAsItWasSentNamesThatAreNotUTF8Included() throws {
        // A name of bytes that are no UTF-8 (0xff, 0xfe), as Linux allows, held losslessly.
        let odd = LosslessBytes.string([0x61, 0xff, 0xfe, 0x62])
        let records = [
            record(1, [.subitemAppeared(path("docs/new.txt")), .changed(path("docs/new.txt"))]),
            record(2, [.moved(from: path("docs/a"), to: path("other/\(odd)"))], token: 1 << 40,
                   origin: WireOrigin(pid: -1, uid: .max, gid: 0, exe: "säve \(odd)"), asked: ["b", "node-c"]),
            record(UInt64.max, [.deleted(path("x")), .changed(path("y/z/\(odd)"))], token: 0),
            record(9, []),
        ]
        let bytes = ChangeRecords.encode(records)
        let back = try #require(ChangeRecords.decode(bytes))
        #expect(text(back) == text(records))
        // The odd name's bytes are kept.
        guard case .moved(_, let to) = back[1].changes[0] else { Issue.record("not a move"); return }
        #expect(LosslessBytes.of(to.components[1]) == [0x61, 0xff, 0xfe, 0x62])
    }

    @Test func theJSONValuesOfEarlierNodesAreStillRead() throws {
        let old = [JSONChangeRecord(serial: 5, token: 12, origin: python,
                                    changes: [WireChange(.changed(path("a/b"))), WireChange(.moved(from: path("a/b"), to: path("c")))],
                                    asked: ["b"])]
        let bytes = Array(try JSONEncoder().encode(old))
        let back = try #require(ChangeRecords.decode(bytes))
        #expect(text(back) == text([record(5, [.changed(path("a/b")), .moved(from: path("a/b"), to: path("c"))], token: 12, asked: ["b"])]))
    }

    @Test func aValueCutShortOrOfNoKnownFormIsNoRecords() {
        let bytes = ChangeRecords.encode([record(1, [.changed(path("docs/new.txt"))], asked: ["b"])])
        for n in 0..<bytes.count { #expect(ChangeRecords.decode(Array(bytes.prefix(n))) == nil, "cut at \(n)") }
        #expect(ChangeRecords.decode(bytes + [0]) == nil)
        #expect(ChangeRecords.decode([2] + bytes.dropFirst()) == nil)
        // A count far beyond the value's size is refused before anything is reserved for it.
        #expect(ChangeRecords.decode([1, 0xff, 0xff, 0xff, 0xff, 0x0f]) == nil)
    }

    @Test func recordsAreMergedOnlyWhereNoOtherNodeCouldTellThemApart() {
        let other = WireOrigin(pid: 7, uid: 0, gid: 0, exe: "tar")
        let records = [
            record(1, [.subitemAppeared(path("f1"))]),
            record(2, [.changed(path("f1"))]),
            record(3, [.deleted(path("f1"))]),
            record(4, [.changed(path("f2"))], token: 78),      // another grant's token
            record(5, [.changed(path("f3"))], token: 78, origin: other),  // another process
            record(6, [.changed(path("p"))], token: 78, origin: other, asked: ["b"]),  // ends b's proxy 6
            record(7, [.changed(path("f4"))], token: 78, origin: other),
            record(8, [.deleted(path("f4"))], token: 78, origin: other),
        ]
        let merged = ChangeRecords.merged(records)
        #expect(merged.map(\.changes.count) == [3, 1, 1, 1, 2])
        #expect(merged.map(\.serial) == [3, 4, 5, 6, 8])
        #expect(merged[4].asked.isEmpty && merged[3].asked == ["b"])
        // Every change, in order.
        #expect(merged.flatMap(\.changes).map(\.description) == records.flatMap(\.changes).map(\.description))
    }

    /// The cost of a stream of local creates in etcd's value: a few bytes a change (its JSON form
    /// took some 130 bytes a change: every record with its origin's field names, every name's
    /// bytes as decimal numbers).
    @Test func aStreamOfCreatesCostsAFewBytesAChange() {
        var records: [ChangeRecord] = []
        for i in 0..<300 {
            records.append(record(UInt64(3 * i + 1), [.subitemAppeared(path("work/f\(i)"))]))
            records.append(record(UInt64(3 * i + 2), [.changed(path("work/f\(i)"))]))
            records.append(record(UInt64(3 * i + 3), [.deleted(path("work/f\(i)"))]))
        }
        let bytes = ChangeRecords.encode(ChangeRecords.merged(records))
        #expect(bytes.count < 900 * 14, "\(bytes.count) bytes for 900 changes")
    }
}
