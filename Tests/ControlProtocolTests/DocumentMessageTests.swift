import XCTest
@testable import ControlProtocol

/// The document store's messages: their documented wire form, strict decoding of every field,
/// and the base64 they carry bytes in.
final class DocumentMessageTests: XCTestCase {
    private func text(_ message: ControlMessage) -> String { String(decoding: message.encodedPayload(), as: UTF8.self) }

    private func decodeError(_ json: String, file: StaticString = #filePath, line: UInt = #line) -> ProtocolError? {
        do {
            let message = try ControlMessage.decode(payload: Array(json.utf8))
            XCTFail("decoded \(message) from \(json)", file: file, line: line)
            return nil
        } catch {
            XCTAssertFalse(error.message.isEmpty, file: file, line: line)
            return error
        }
    }

    func testWireFormatIsTheDocumentedOne() throws {
        let a = Samples.path("docs/a.txt")
        let change = ControlMessage.notification(PresenterNotification(presenter: PresenterID(17), event: .documentChanged(DocumentChange(
            document: DocumentID(3), path: a, kind: .change,
            before: DocumentIdentity(device: 2049, inode: 131_074, size: 12, modificationTimeNanoseconds: 1_763_759_351_114_000_123),
            after: DocumentIdentity(device: 2049, inode: 131_080, size: 17, modificationTimeNanoseconds: 1_763_759_360_000_000_000),
            action: .conflict(ConflictID(5))))))
        XCTAssertEqual(text(change), #"{"type":"notification","presenter":17,"event":"documentChanged","document":3,"path":"docs/a.txt","kind":"change","before":{"device":"2049","inode":"131074","size":12,"mtimeNs":"1763759351114000123"},"after":{"device":"2049","inode":"131080","size":17,"mtimeNs":"1763759360000000000"},"action":"conflict","conflict":5}"#)
        // The store could not record the change: `failed` with its message, and back.
        let failed = ControlMessage.notification(PresenterNotification(presenter: PresenterID(17), event: .documentChanged(DocumentChange(
            document: DocumentID(3), path: a, kind: .change, before: nil, after: nil,
            action: .failed(message: "No space left on device")))))
        XCTAssertEqual(text(failed), #"{"type":"notification","presenter":17,"event":"documentChanged","document":3,"path":"docs/a.txt","kind":"change","action":"failed","message":"No space left on device"}"#)
        XCTAssertEqual(try ControlMessage.decode(payload: Array(text(failed).utf8)), failed)
        XCTAssertEqual(text(.setUnsavedChanges(SetUnsavedChanges(id: RequestID(3), presenter: PresenterID(17), unsaved: true))),
                       #"{"type":"setUnsavedChanges","id":3,"presenter":17,"unsaved":true}"#)
        XCTAssertEqual(text(.register(Register(id: RequestID(2), path: a, kind: .file, asks: [.save], unsaved: true))),
                       #"{"type":"register","id":2,"path":"docs/a.txt","kind":"file","asks":["save"],"unsaved":true}"#)
        XCTAssertEqual(text(.resolve(Resolve(id: RequestID(4), conflict: ConflictID(5), resolution: .keepBoth, mine: .bytes(Array("mine\n".utf8))))),
                       #"{"type":"resolve","id":4,"conflict":5,"resolution":"keepBoth","mine":"bWluZQo="}"#)
        XCTAssertEqual(text(.resolve(Resolve(id: RequestID(4), conflict: ConflictID(5), resolution: .merge, mine: .path(a)))),
                       #"{"type":"resolve","id":4,"conflict":5,"resolution":"merge","minePath":"docs/a.txt"}"#)
        XCTAssertEqual(text(.readVersion(ReadVersion(id: RequestID(6), version: VersionID(9), offset: 0, length: 10))),
                       #"{"type":"readVersion","id":6,"version":9,"offset":0,"length":10}"#)
        XCTAssertEqual(text(.restore(Restore(id: RequestID(8), version: VersionID(9), path: a))),
                       #"{"type":"restore","id":8,"version":9,"path":"docs/a.txt"}"#)
        XCTAssertEqual(text(.restored(Restored(id: RequestID(8), version: VersionID(9), path: a, preservedVersion: VersionID(12)))),
                       #"{"type":"restored","id":8,"version":9,"path":"docs/a.txt","preservedVersion":12}"#)
        XCTAssertEqual(text(.readLog(ReadLog(id: RequestID(7), from: 1200, limit: 10))), #"{"type":"readLog","id":7,"from":1200,"limit":10}"#)
        XCTAssertEqual(text(.logRecords(LogRecords(id: RequestID(7), records: Array("mine\n".utf8), next: 1210, end: 2000, oldest: 900))),
                       #"{"type":"logRecords","id":7,"records":"bWluZQo=","next":1210,"end":2000,"oldest":900}"#)
        // Without `unsaved`, `register` is what it always was.
        XCTAssertEqual(try ControlMessage.decode(payload: Array(#"{"type":"register","id":2,"path":"a","kind":"file","asks":[]}"#.utf8)),
                       .register(Register(id: RequestID(2), path: Samples.path("a"), kind: .file, asks: [])))
    }

    func testFieldErrorsNameTheField() {
        let identity = #"{"device":"1","inode":"2","size":3,"mtimeNs":"4"}"#
        let cases: [(String, ErrorCode, String)] = [
            (#"{"type":"setUnsavedChanges","id":1,"presenter":2}"#, .missingField, "\"unsaved\""),
            (#"{"type":"setUnsavedChanges","id":1,"presenter":2,"unsaved":1}"#, .wrongFieldType, "\"unsaved\""),
            (#"{"type":"register","id":1,"path":"a","kind":"file","asks":[],"unsaved":"yes"}"#, .wrongFieldType, "\"unsaved\""),
            (#"{"type":"conflicts","id":1,"presenter":-3}"#, .invalidValue, "\"presenter\""),
            (#"{"type":"resolve","id":1,"resolution":"save"}"#, .missingField, "\"conflict\""),
            (#"{"type":"resolve","id":1,"conflict":2,"resolution":"overwrite"}"#, .invalidValue, "\"resolution\""),
            (#"{"type":"resolve","id":1,"conflict":2,"resolution":"save","mine":"bWluZQo"}"#, .invalidValue, "base64"),
            (#"{"type":"resolve","id":1,"conflict":2,"resolution":"save","mine":"bWl uZQo="}"#, .invalidValue, "base64"),
            (#"{"type":"resolve","id":1,"conflict":2,"resolution":"save","mine":"bWluZR=="}"#, .invalidValue, "base64"),
            (#"{"type":"resolve","id":1,"conflict":2,"resolution":"save","mine":[1,2]}"#, .wrongFieldType, "\"mine\""),
            (#"{"type":"resolve","id":1,"conflict":2,"resolution":"save","mine":"","minePath":"a"}"#, .invalidValue, "not both"),
            (#"{"type":"resolve","id":1,"conflict":2,"resolution":"save","minePath":"../etc/passwd"}"#, .invalidPath, "minePath"),
            (#"{"type":"resolve","id":1,"conflict":2,"resolution":"save","minePath":"/etc/passwd"}"#, .invalidPath, "minePath"),
            (#"{"type":"versions","id":1}"#, .missingField, "\"path\""),
            (#"{"type":"readVersion","id":1,"version":2,"length":0}"#, .invalidValue, "\"length\""),
            (#"{"type":"readVersion","id":1,"version":2,"length":524289}"#, .invalidValue, "\"length\""),
            (#"{"type":"readVersion","id":1,"version":"2"}"#, .wrongFieldType, "\"version\""),
            (#"{"type":"versionData","id":1,"version":2,"offset":0,"size":1,"eof":true}"#, .missingField, "\"data\""),
            (#"{"type":"readLog","id":1,"limit":0}"#, .invalidValue, "\"limit\""),
            (#"{"type":"readLog","id":1,"limit":4097}"#, .invalidValue, "\"limit\""),
            (#"{"type":"logRecords","id":1,"next":1,"end":1}"#, .missingField, "\"records\""),
            (#"{"type":"notification","presenter":1,"event":"documentChanged","document":3,"path":"a","kind":"edit","action":"reload"}"#, .invalidValue, "\"kind\""),
            (#"{"type":"notification","presenter":1,"event":"documentChanged","document":3,"path":"a","kind":"change","action":"explode"}"#, .invalidValue, "\"action\""),
            (#"{"type":"notification","presenter":1,"event":"documentChanged","document":3,"path":"a","kind":"change","action":"conflict"}"#, .missingField, "\"conflict\""),
            (#"{"type":"notification","presenter":1,"event":"documentChanged","document":3,"path":"a","kind":"change","action":"failed"}"#, .missingField, "\"message\""),
            (#"{"type":"notification","presenter":1,"event":"documentChanged","document":3,"path":"a","kind":"change","action":"reload","before":{"device":1,"inode":"2","size":3,"mtimeNs":"4"}}"#, .wrongFieldType, "\"device\""),
            (#"{"type":"notification","presenter":1,"event":"documentChanged","document":3,"path":"a","kind":"change","action":"reload","before":{"device":"01","inode":"2","size":3,"mtimeNs":"4"}}"#, .invalidValue, "\"device\""),
            (#"{"type":"notification","presenter":1,"event":"documentChanged","document":3,"path":"a","kind":"change","action":"reload","before":{"device":"18446744073709551616","inode":"2","size":3,"mtimeNs":"4"}}"#, .invalidValue, "\"device\""),
            (#"{"type":"notification","presenter":1,"event":"documentChanged","document":3,"path":"a","kind":"change","action":"reload","before":{"device":"1","inode":"2","size":3,"mtimeNs":"-0"}}"#, .invalidValue, "\"mtimeNs\""),
            (#"{"type":"notification","presenter":1,"event":"documentChanged","document":3,"path":"a","kind":"change","action":"reload","before":{"device":"1","inode":"2","size":3,"mtimeNs":"9223372036854775808"}}"#, .invalidValue, "\"mtimeNs\""),
            (#"{"type":"notification","presenter":1,"event":"documentChanged","document":3,"path":"a","kind":"change","action":"reload","after":"\#(identity.count)"}"#, .wrongFieldType, "\"after\""),
        ]
        for (json, code, needle) in cases {
            let error = decodeError(json)
            XCTAssertEqual(error?.code, code, json)
            XCTAssertTrue(error?.message.contains(needle) == true, "\(error?.message ?? "") should name \(needle)")
        }
        // The request's id was read: the daemon answers the error and keeps the connection.
        XCTAssertEqual(decodeError(#"{"type":"resolve","id":7,"conflict":2,"resolution":"save","mine":"!"}"#)?.closesConnection, false)
        XCTAssertEqual(decodeError(#"{"type":"resolve","id":7,"conflict":2,"resolution":"save","mine":"!"}"#)?.requestID, 7)
        // The most negative time is representable, one below is not.
        let earliest = #"{"type":"notification","presenter":1,"event":"documentChanged","document":3,"path":"a","kind":"change","action":"reload","before":{"device":"1","inode":"2","size":3,"mtimeNs":"-9223372036854775808"}}"#
        guard case .notification(let n)? = try? ControlMessage.decode(payload: Array(earliest.utf8)), case .documentChanged(let change) = n.event else {
            return XCTFail("Int64.min mtime refused")
        }
        XCTAssertEqual(change.before?.modificationTimeNanoseconds, Int64.min)
        XCTAssertEqual(decodeError(earliest.replacingOccurrences(of: "9223372036854775808", with: "9223372036854775809"))?.code, .invalidValue)
    }

    func testBase64IsCanonicalAndRoundTrips() {
        XCTAssertEqual(Base64.encode(Array("".utf8)), "")
        XCTAssertEqual(Base64.encode(Array("f".utf8)), "Zg==")
        XCTAssertEqual(Base64.encode(Array("fo".utf8)), "Zm8=")
        XCTAssertEqual(Base64.encode(Array("foo".utf8)), "Zm9v")
        XCTAssertEqual(Base64.encode(Array("foobar".utf8)), "Zm9vYmFy")
        XCTAssertEqual(Base64.encode([0xFB, 0xFF]), "+/8=")
        var rng = SplitMix64(seed: 5)
        for length in 0..<300 {
            let bytes = (0..<length).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
            let text = Base64.encode(bytes)
            XCTAssertEqual(text.utf8.count, Base64.encodedLength(length))
            XCTAssertEqual(Base64.decode(text), bytes)
        }
        for bad in ["Z", "Zg=", "Zg", "Zh==", "Zm9=", "=Zm9", "Zm=v", "Zg==Zg==", "Zm9v\n", "Zm-v", "Zm_v", "Zg=\u{0}"] {
            XCTAssertNil(Base64.decode(bad), bad)
        }
    }
}
