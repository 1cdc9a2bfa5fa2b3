import Foundation
import XCTest
@testable import ControlProtocol

/// Feeds the frame decoder and the message decoder random and mutated frames. The properties:
/// nothing traps; every failure is a `ProtocolError` with a message; anything that decodes
/// re-encodes to a frame that decodes to the same message. Every message of
/// `ControlMessage.catalog` is fuzzed as often as any other (its samples, mutated), and each must
/// have had mutated frames that still decode, so the round trip is checked for every message.
/// `COORDFS_FUZZ_CASES` sets the number of cases (default 100,000), `COORDFS_FUZZ_SEED` the seed.
final class FuzzTests: XCTestCase {
    func testRandomAndMutatedFrames() throws {
        let environment = ProcessInfo.processInfo.environment
        let cases = environment["COORDFS_FUZZ_CASES"].flatMap(Int.init) ?? 100_000
        let seed = environment["COORDFS_FUZZ_SEED"].flatMap(UInt64.init) ?? 0xC00D_F5
        var rng = SplitMix64(seed: seed)
        let types = ControlMessage.catalog.map { $0.wireName }
        let corpus = Dictionary(grouping: Samples.all, by: \.typeName).mapValues { $0.map { $0.encodedPayload() } }
        for type in types where corpus[type] == nil { XCTFail("\(type) has no sample in Samples.all to fuzz") }
        var decodedTypes: [String: Int] = [:]
        let dictionary: [[UInt8]] = ["{", "}", "[", "]", ",", ":", "\"", "\\u", "\\ud800", "null", "true", "-0", "1e999",
                                     "\"type\"", "\"id\"", "\"path\"", "\"/etc\"", "\"..\"", "\"a/../..\"", "\"\\u0000\"",
                                     "9007199254740993", "-1", "\"hello\"", "\"ask\"", "\"notification\"", "[[[[[[[[", "\u{FF}",
                                     "\"mine\"", "\"minePath\"", "\"AAAA\"", "\"AB==\"", "\"A===\"", "\"-0\"", "\"00\"", "\"18446744073709551616\"",
                                     "\"documentChanged\"", "\"resolve\"", "false"]
            .map { Array($0.utf8) }
        var decoded = 0, rejected = 0
        var codes: [ErrorCode: Int] = [:]
        let start = Date()

        for index in 0..<cases {
            var payload: [UInt8]
            switch rng.next() % 10 {
            case 0:
                payload = (0..<Int(rng.next() % 64)).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
            case 1:
                payload = generateMessage(&rng).encodedPayload()
            default:
                let samples = corpus[types[Int(rng.next() % UInt64(types.count))]] ?? [[]]
                payload = samples[Int(rng.next() % UInt64(samples.count))]
                for _ in 0..<(1 + Int(rng.next() % 4)) { mutate(&payload, &rng, dictionary) }
            }
            // Frame it (sometimes with a lying length prefix) and feed it in random chunks.
            var stream = Framing.frame(payload)
            if rng.next() % 16 == 0 {
                let bogus = UInt32(truncatingIfNeeded: rng.next())
                stream.replaceSubrange(0..<4, with: [UInt8(bogus >> 24), UInt8(bogus >> 16 & 0xFF), UInt8(bogus >> 8 & 0xFF), UInt8(bogus & 0xFF)])
            }
            if rng.next() % 16 == 0 { stream.removeLast(Int(rng.next() % UInt64(stream.count))) }
            var decoder = FrameDecoder(maxFrameSize: 4096)
            var offset = 0
            var messages: [ControlMessage] = []
            do {
                while offset < stream.count {
                    let chunk = 1 + Int(rng.next() % 97)
                    decoder.append(stream[offset..<min(offset + chunk, stream.count)])
                    offset += chunk
                    while let frame = try decoder.nextFrame() { messages.append(try ControlMessage.decode(payload: frame)) }
                }
                try decoder.finish()
                decoded += messages.count
            } catch {
                XCTAssertFalse(error.message.isEmpty)
                codes[error.code, default: 0] += 1
                rejected += 1
            }
            for message in messages {
                decodedTypes[message.typeName, default: 0] += 1
                let again = try ControlMessage.decode(payload: message.encodedPayload())
                if again != message {
                    XCTFail("case \(index) (seed \(seed)): \(message) re-decoded as \(again)")
                    return
                }
            }
        }
        let seconds = Date().timeIntervalSince(start)
        print("fuzz: \(cases) cases in \(String(format: "%.1f", seconds)) s (seed \(seed)): \(decoded) decoded, \(rejected) rejected; \(codes.sorted { $0.value > $1.value }.map { "\($0.key)=\($0.value)" }.joined(separator: " "))")
        XCTAssertGreaterThan(decoded, cases / 50, "the generator should produce valid messages too")
        XCTAssertGreaterThan(rejected, cases / 4)
        if cases >= 10_000 {
            for type in types { XCTAssertGreaterThan(decodedTypes[type] ?? 0, 0, "no fuzzed \(type) frame decoded: its round trip went unchecked") }
        }
    }

    private func mutate(_ bytes: inout [UInt8], _ rng: inout SplitMix64, _ dictionary: [[UInt8]]) {
        let position = bytes.isEmpty ? 0 : Int(rng.next() % UInt64(bytes.count))
        switch rng.next() % 7 {
        case 0 where !bytes.isEmpty: bytes[position] ^= UInt8(1 << (rng.next() % 8))
        case 1 where !bytes.isEmpty: bytes[position] = UInt8(truncatingIfNeeded: rng.next())
        case 2 where !bytes.isEmpty: bytes.remove(at: position)
        case 3: bytes.insert(UInt8(truncatingIfNeeded: rng.next()), at: position)
        case 4: bytes.insert(contentsOf: dictionary[Int(rng.next() % UInt64(dictionary.count))], at: position)
        case 5 where !bytes.isEmpty:
            let end = min(bytes.count, position + 1 + Int(rng.next() % 12))
            bytes.removeSubrange(position..<end)
        default:
            bytes = Array(bytes.prefix(position))
        }
    }

    private func generateMessage(_ rng: inout SplitMix64) -> ControlMessage {
        func id() -> UInt64 { rng.next() % 2 == 0 ? rng.next() % 100 : rng.next() & maxWireInteger }
        func path() -> MountPath {
            let names = ["a", "b.txt", "dir", "é", "x y", "..a", ".hidden", "😀"]
            let depth = Int(rng.next() % 4)
            if depth == 0 { return .root }
            return try! MountPath(validating: (0..<depth).map { _ in names[Int(rng.next() % UInt64(names.count))] }.joined(separator: "/"))
        }
        func text() -> String {
            let pieces = ["", "x", "\"", "\\", "\n", "\u{01}", "é", "😀", "\u{7F}", "/"]
            return (0..<Int(rng.next() % 5)).map { _ in pieces[Int(rng.next() % UInt64(pieces.count))] }.joined()
        }
        func intent() -> Intent {
            rng.next() % 2 == 0
                ? .reading(path(), options: ReadingOptions(rawValue: UInt(rng.next() % 16)))
                : .writing(path(), options: WritingOptions(rawValue: UInt(rng.next() % 32)))
        }
        func identity() -> DocumentIdentity {
            DocumentIdentity(device: rng.next(), inode: rng.next() % 2 == 0 ? rng.next() % 1000 : rng.next(), size: id(),
                             modificationTimeNanoseconds: Int64(bitPattern: rng.next()))
        }
        func bytes() -> [UInt8] { (0..<Int(rng.next() % 8)).map { _ in UInt8(truncatingIfNeeded: rng.next()) } }
        switch rng.next() % 21 {
        case 0: return .hello(Hello(id: RequestID(id()), versions: [Int(rng.next() % 4)], client: rng.next() % 2 == 0 ? text() : nil))
        case 1: return .register(Register(id: RequestID(id()), path: path(), kind: rng.next() % 2 == 0 ? .file : .directory,
                                          asks: Set(AskKind.allCases.filter { _ in rng.next() % 2 == 0 })))
        case 2: return .coordinate(Coordinate(id: RequestID(id()), intents: (0...Int(rng.next() % 3)).map { _ in intent() },
                                              presenter: rng.next() % 2 == 0 ? PresenterID(id()) : nil,
                                              timeoutMs: rng.next() % 2 == 0 ? UInt32(truncatingIfNeeded: rng.next()) : nil))
        case 3: return .release(Release(id: RequestID(id()), access: AccessID(id()),
                                        changes: [.changed(path()), .moved(path(), to: path()), .deleted(path())].filter { _ in rng.next() % 2 == 0 }))
        case 4: return .ask(Ask(id: AskID(id()), presenter: PresenterID(id()), kind: AskKind.allCases[Int(rng.next() % 6)],
                                path: path(), subitem: rng.next() % 2 == 0 ? path() : nil, deadlineMs: UInt32(truncatingIfNeeded: rng.next())))
        case 5: return .answer(Answer(id: AskID(id()), error: rng.next() % 2 == 0 ? ErrorBody(code: ErrorCode(rawValue: text()), message: text()) : nil))
        case 6:
            let events: [PresenterEvent] = [.didChange, .didMove(to: path()), .didDelete, .subitemDidAppear(path()), .subitemDidChange(path()),
                                            .subitemDidMove(path(), to: path()), .subitemDidDelete(path()),
                                            .documentChanged(DocumentChange(
                                                document: DocumentID(id()), path: path(), kind: rng.next() % 2 == 0 ? .change : .deletion,
                                                before: rng.next() % 2 == 0 ? identity() : nil, after: rng.next() % 2 == 0 ? identity() : nil,
                                                action: [DocumentAction.reload, .close, .conflict(ConflictID(id()))][Int(rng.next() % 3)])),
                                            .unknown(event: "later" + text(), fields: JSONObject(["s": .string(text())]))]
            return .notification(PresenterNotification(presenter: PresenterID(id()), event: events[Int(rng.next() % UInt64(events.count))]))
        case 7: return .error(ErrorMessage(id: rng.next() % 2 == 0 ? RequestID(id()) : nil, code: ErrorCode(rawValue: text()), message: text()))
        case 8: return .statusReport(StatusReport(id: RequestID(id()),
                                                  presenters: [.init(presenter: PresenterID(id()), path: path(), kind: .file, pid: Int32(rng.next() % 99999), uid: UInt32(rng.next() % 70000))],
                                                  accesses: [.init(access: AccessID(id()), intents: [intent()], pid: 1, uid: 2, heldMs: id())],
                                                  waiting: [.init(intents: [intent(), intent()], pid: 3, uid: 4, waitingMs: id())]))
        case 9: return .close(Close(reason: rng.next() % 2 == 0 ? text() : nil))
        case 10: return .granted(Granted(id: RequestID(id()), access: AccessID(id())))
        case 11: return .setUnsavedChanges(SetUnsavedChanges(id: RequestID(id()), presenter: PresenterID(id()), unsaved: rng.next() % 2 == 0))
        case 12: return .conflicts(ConflictsQuery(id: RequestID(id()), presenter: rng.next() % 2 == 0 ? PresenterID(id()) : nil))
        case 13: return .conflictList(ConflictList(id: RequestID(id()), conflicts: (0..<Int(rng.next() % 3)).map { _ in
            ConflictInfo(conflict: ConflictID(id()), document: DocumentID(id()), path: path(), presenter: rng.next() % 2 == 0 ? PresenterID(id()) : nil,
                         storePresenter: text(), kind: .change, createdMs: id(), before: identity(), after: rng.next() % 2 == 0 ? identity() : nil,
                         baseVersion: rng.next() % 2 == 0 ? VersionID(id()) : nil, theirsVersion: rng.next() % 2 == 0 ? VersionID(id()) : nil)
        }))
        case 14:
            let mine: ResolutionContents? = [nil, .bytes(bytes()), .path(path())][Int(rng.next() % 3)]
            return .resolve(Resolve(id: RequestID(id()), conflict: ConflictID(id()), resolution: Resolution.allCases[Int(rng.next() % 5)], mine: mine))
        case 15: return .resolved(Resolved(id: RequestID(id()), conflict: ConflictID(id()), resolution: Resolution.allCases[Int(rng.next() % 5)],
                                           path: path(), writtenPath: rng.next() % 2 == 0 ? path() : nil,
                                           preservedVersion: rng.next() % 2 == 0 ? VersionID(id()) : nil, mergeConflicts: Int(rng.next() % 9),
                                           after: rng.next() % 2 == 0 ? identity() : nil))
        case 16:
            if rng.next() % 2 == 0 { return .versions(VersionsQuery(id: RequestID(id()), path: path())) }
            return .versionList(VersionList(id: RequestID(id()), versions: [VersionInfo(version: VersionID(id()), document: DocumentID(id()), path: path(),
                                                                                      createdMs: id(), size: id(), reason: text(), method: text(), pinned: true)]))
        case 17:
            if rng.next() % 2 == 0 {
                return .readVersion(ReadVersion(id: RequestID(id()), version: VersionID(id()), offset: id(),
                                                length: rng.next() % 2 == 0 ? UInt32(1 + rng.next() % UInt64(ReadVersion.maxLength)) : nil))
            }
            return .versionData(VersionData(id: RequestID(id()), version: VersionID(id()), offset: id(), size: id(), data: bytes(), eof: rng.next() % 2 == 0))
        case 18:
            if rng.next() % 2 == 0 {
                return .readLog(ReadLog(id: RequestID(id()), from: rng.next() % 2 == 0 ? id() : nil,
                                        limit: rng.next() % 2 == 0 ? UInt32(1 + rng.next() % UInt64(ReadLog.maxLimit)) : nil))
            }
            return .logRecords(LogRecords(id: RequestID(id()), records: bytes(), next: id(), end: id(), oldest: rng.next() % 2 == 0 ? id() : nil))
        case 19:
            if rng.next() % 2 == 0 { return .restore(Restore(id: RequestID(id()), version: VersionID(id()), path: path())) }
            return .restored(Restored(id: RequestID(id()), version: VersionID(id()), path: path(),
                                      preservedVersion: rng.next() % 2 == 0 ? VersionID(id()) : nil, after: rng.next() % 2 == 0 ? identity() : nil))
        default: return .welcome(Welcome(id: RequestID(id()), version: 1, server: text(), maxFrameSize: Int(rng.next() % 100000), mountPoint: rng.next() % 2 == 0 ? text() : nil))
        }
    }
}

/// A small, fast, seedable generator (Steele, Lea, Flood 2014).
struct SplitMix64: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
