import Coordination
import EventLog
import Foundation
import NameBytes
import XCTest

@testable import CoordFS

/// The bytes the formatter stores for a varied set of steps, pinned: each record's kind, its
/// fields' length and their CRC-32, as main's formatter at 7375a0d wrote them (before issue 23's
/// session 25 changes to the encoder). A faster encoder must write the same bytes: the log's files,
/// what `coordfs log` and the control socket pass on, are the documented format (docs/event-log.md).
/// The steps cover every kind the formatter makes, odd names (bytes that are not UTF-8, newlines,
/// quotes, escapes, a decomposed accent), a path of 60,000 bytes and one past the 64 KiB cut,
/// several intents with options, notes and fencing tokens, requests unknown to the formatter, no
/// actor and actors that change.
final class RecordBytesTests: XCTestCase {
    static func steps() throws -> [PendingStep] {
        let python = AccessOrigin(pid: 4242, uid: 1000, gid: 1000, executable: "/usr/bin/python3")
        let odd = AccessOrigin(pid: -7, uid: UInt32.max, gid: 0, executable: "tool \"q\"\n" + LosslessName.string([0xC3, 0x28]))
        let cafe = AccessOrigin(pid: 4242, uid: 1000, gid: 1000, executable: "cafe\u{301}")
        func e(_ r: UInt64?, _ o: AccessOrigin?, _ kind: CoordinationEvent.Kind) -> PendingStep {
            .event(CoordinationEvent(time: 1_000_000 * (r ?? 0), requestID: r.map { RequestID(rawValue: $0) }, origin: o, kind: kind))
        }
        let plain = try ItemPath("projects/w4242/f1")
        let folder = try ItemPath("projects/w4242")
        let quoted = try ItemPath("we\"ird/new\nline/tab\there/\u{1b}[31mred/back\\slash")
        let bytes = try ItemPath("bytes/" + LosslessName.string([0x61, 0xFF, 0xFE, 0x80]) + "/x")
        let accent = try ItemPath("d/cafe\u{301}")
        let composed = try ItemPath("d/caf\u{E9}")
        let long = try ItemPath(components: (0..<240).map { "c\($0)-" + String(repeating: "\u{E9}", count: 120) })
        let tooLong = try ItemPath(components: (0..<300).map { "k\($0)-" + String(repeating: "x", count: 250) })
        let moved = try ItemPath("dst/y")
        let src = try ItemPath("src/x")
        let p3 = PresenterID(3), p9 = PresenterID(9)
        let w = FileAccessIntent.writingIntent(with: plain)
        let parent = FileAccessIntent.writingIntent(with: folder)
        let readOpts = FileAccessIntent.readingIntent(with: quoted, options: [.withoutChanges, .resolvesSymbolicLink])
        let moveA = FileAccessIntent.writingIntent(with: src, options: .forMoving)
        let moveB = FileAccessIntent.writingIntent(with: moved, options: [.forReplacing, .forMerging])
        let del = FileAccessIntent.writingIntent(with: bytes, options: .forDeleting)
        return [
            .record(EventRecord(kind: .mount, path: "/", details: EventDetails(message: "mounted \"x\"\n")), at: 5),
            e(1, python, .requested(intents: [w], purpose: "pid:4242")),
            e(1, python, .waiting(blockedBy: RequestID(rawValue: 0))),
            e(1, python, .granted(intents: [w], waitedNanos: 1_500)),
            e(2, python, .requested(intents: [parent], purpose: nil)),
            e(2, python, .granted(intents: [parent], waitedNanos: 0)),
            e(2, python, .announced(.subitemAppeared(plain))),
            e(2, python, .released(heldNanos: 20_000)),
            e(1, python, .announced(.changed(plain))),
            e(1, python, .released(heldNanos: 70_000)),
            e(3, odd, .requested(intents: [readOpts], purpose: nil)),
            e(3, odd, .granted(intents: [readOpts], waitedNanos: 300_000_000)),
            e(3, odd, .announced(.changed(quoted))),
            e(3, odd, .released(heldNanos: 1)),
            e(4, cafe, .requested(intents: [moveA, moveB], purpose: nil)),
            e(4, cafe, .wentAheadWithoutExclusion(blockedBy: RequestID(rawValue: 3), deadline: .seconds(2))),
            e(4, cafe, .fenced(token: 77)),
            e(4, cafe, .granted(intents: [moveA, moveB], waitedNanos: 2_000_000_000)),
            e(4, cafe, .willMove(from: src, to: moved)),
            e(4, cafe, .announced(.moved(from: src, to: moved))),
            e(4, cafe, .announced(.subitemAppeared(try ItemPath("dst")))),
            e(4, cafe, .released(heldNanos: 5)),
            e(5, nil, .requested(intents: [del], purpose: nil)),
            e(5, nil, .fenced(token: -3)),
            e(5, nil, .granted(intents: [del], waitedNanos: 0)),
            e(5, nil, .announced(.deleted(bytes))),
            e(5, nil, .announced(.changed(accent))),
            e(5, nil, .released(heldNanos: 9)),
            e(6, python, .requested(intents: [.writingIntent(with: composed)], purpose: nil)),
            e(6, python, .announced(.changed(accent))),
            e(6, python, .failed(.busy(RequestID(rawValue: 6), path: composed, heldBy: RequestID(rawValue: 5), deadline: .milliseconds(250)))),
            e(7, python, .requested(intents: [.readingIntent(with: .root)], purpose: nil)),
            e(7, python, .failed(.cancelled(RequestID(rawValue: 7)))),
            e(8, odd, .requested(intents: [.writingIntent(with: long)], purpose: nil)),
            e(8, odd, .granted(intents: [.writingIntent(with: long)], waitedNanos: 10)),
            e(8, odd, .announced(.changed(long))),
            e(8, odd, .released(heldNanos: 11)),
            e(9, python, .requested(intents: [.writingIntent(with: tooLong)], purpose: nil)),
            e(9, python, .announced(.deleted(tooLong))),
            e(9, python, .failed(.waitTimedOut(RequestID(rawValue: 9), path: tooLong, blockedBy: nil, deadline: .seconds(1)))),
            e(10, python, .wentAheadWithoutExclusion(blockedBy: nil, deadline: .milliseconds(1500))),
            e(10, python, .granted(intents: [.writingIntent(with: folder)], waitedNanos: 7)),
            e(11, python, .released(heldNanos: 3)),
            e(12, python, .failed(.cluster(RequestID(rawValue: 12), errno: EIO, reason: "etcd \"down\""))),
            e(nil, python, .announced(.changed(plain))),
            e(nil, nil, .presenterRegistered(p3, path: quoted, owner: python)),
            e(13, python, .presenterAsked(p3, ask: .saveChanges, presenterPath: quoted)),
            e(13, python, .presenterAnswered(p3, ask: .saveChanges, latencyNanos: 1_234_567)),
            e(13, python, .presenterAsked(p9, ask: .accommodateSubitemDeletion(bytes), presenterPath: bytes)),
            e(13, python, .presenterTimedOut(p9, ask: .accommodateSubitemDeletion(bytes), deadline: .milliseconds(1500))),
            e(13, python, .presenterGone(p9, ask: .relinquishToReader)),
            e(13, python, .presenterFailed(p3, ask: .relinquishToWriter, error: "no\nway")),
            e(13, python, .notified(p3, .subitemDidChange(bytes))),
            e(13, python, .notified(p3, .subitemDidMove(from: src, to: moved))),
            e(13, python, .notified(p3, .subitemDeleted(accent))),
            e(13, python, .notified(p3, .itemDidChange(quoted))),
            e(13, python, .reacquireScheduled(p3)),
            e(nil, odd, .presenterUnregistered(p3, path: quoted)),
            e(14, odd, .requested(intents: [.writingIntent(with: try ItemPath("a")), .readingIntent(with: plain, options: .immediatelyAvailableMetadataOnly)], purpose: nil)),
            e(14, odd, .granted(intents: [], waitedNanos: 1)),
            e(14, odd, .announced(.changed(plain))),
            e(14, odd, .released(heldNanos: 2)),
            .record(EventRecord(kind: .unmount, path: "/"), at: 6),
        ]
    }

    /// Each record of `formatter.formatted`: its kind code, its fields' length and their CRC-32.
    static func digest(_ records: EncodedRecords) -> [String] {
        var out: [String] = []
        records.forEach { kind, _, fields in
            out.append("\(kind.code):\(fields.count):\(String(crc32(fields), radix: 16))")
        }
        return out
    }

    static func crc32(_ bytes: UnsafeRawBufferPointer) -> UInt32 {
        var crc: UInt32 = 0xFFFF_FFFF
        for b in bytes {
            crc ^= UInt32(b)
            for _ in 0..<8 { crc = (crc & 1) != 0 ? (0xEDB8_8320 ^ (crc >> 1)) : (crc >> 1) }
        }
        return crc ^ 0xFFFF_FFFF
    }

    /// main's formatter at 7375a0d, for `steps()`.
    static let expected: [String] = [
        "1:17:32f4b055", "3:53:9d027115", "8:55:94f64595", "3:50:6a18ce00", "8:52:d5e0e24",
        "13:46:79f642b9", "9:52:326bce34", "10:46:e0ff1303", "9:55:e480a806", "3:114:8b53ee8d",
        "8:118:4f88c7e9", "10:70:8532ff58", "9:116:2584ad59", "3:42:dacab833", "3:57:e2d177a8",
        "8:141:4b423053", "8:156:d5cfa2c7", "11:32:a2c7edcf", "13:22:c1ad0d60", "9:44:d815b3f9",
        "9:59:417b0712", "3:37:ca245d4b", "8:57:2845bc50", "12:17:6a616ad4", "10:13:1e0343e7",
        "9:39:2018c3ad", "3:43:ebf3e20f", "10:37:29b4bd37", "23:126:969a51bc", "3:35:e221bde8",
        "23:83:30faadf4", "3:58964:a23696db", "8:58966:c3cb189", "10:58957:c74bbe3f", "9:58966:c3cb189",
        "3:65573:1aa51896", "12:65566:76a6ed8d", "23:131130:1a2ad730", "8:114:aff34e5a",
        "9:31:8d04b51e", "23:74:8bd83607", "10:44:f0d5fdb0", "21:60:8ab73869", "4:99:214ee2ab",
        "5:102:28484a44", "4:82:4e5dd529", "6:96:96f2dc79", "7:74:6b9162f7", "5:123:ab1520c3",
        "14:54:e3cd7205", "15:55:822f39c5", "16:50:b6e1b17b", "22:81:6d049092", "3:34:96d8bd0e",
        "3:83:b1c3e332", "8:36:b12194fa", "8:85:4e01b6ed", "10:43:a17f5fe7", "9:36:b12194fa",
        "9:85:4e01b6ed", "2:3:4fcd6b53",
    ]

    func testTheFormatterWritesTheSameBytesAsBefore() throws {
        var formatter = RecordFormatter()
        formatter.format(try Self.steps())
        let got = Self.digest(formatter.formatted)
        if ProcessInfo.processInfo.environment["RECORD_BYTES_PRINT"] != nil {
            print("RECORD_BYTES " + got.map { "\"\($0)\"" }.joined(separator: ", "))
        }
        XCTAssertEqual(got.count, Self.expected.count)
        for (i, (g, x)) in zip(got, Self.expected).enumerated() where g != x {
            XCTFail("record \(i): \(g), expected \(x)")
        }
    }
}
