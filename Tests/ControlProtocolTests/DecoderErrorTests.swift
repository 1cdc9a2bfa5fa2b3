import XCTest
@testable import ControlProtocol

final class DecoderErrorTests: XCTestCase {
    private func decodeError(_ text: String, file: StaticString = #filePath, line: UInt = #line) -> ProtocolError? {
        do {
            let message = try ControlMessage.decode(payload: Array(text.utf8))
            XCTFail("decoded \(message) from \(text)", file: file, line: line)
            return nil
        } catch {
            XCTAssertFalse(error.message.isEmpty, file: file, line: line)
            return error
        }
    }

    func testMalformedJSON() {
        for text in ["", "{", "{\"type\":\"ok\",\"id\":1", "{\"type\":\"ok\",\"id\":1}}", "{type:\"ok\"}", "{'type':'ok'}",
                     "{\"type\":\"ok\",\"id\":01}", "{\"type\":\"ok\",\"id\":1.}", "{\"type\":\"ok\",\"id\":-}", "{\"a\":tru}",
                     "{\"type\":\"ok\",,\"id\":1}", "{\"type\":\"ok\" \"id\":1}", "{\"type\":\"o\u{01}k\"}", "{\"type\":\"\\x\"}",
                     "{\"type\":\"\\ud800\"}", "{\"type\":\"\\udc00x\"}", "{\"type\":\"\\u12\"}", "[1,]", "{\"a\":1,}", "nul",
                     String(repeating: "[", count: 40) + String(repeating: "]", count: 40)] {
            XCTAssertEqual(decodeError(text)?.code, .malformedJSON, text)
        }
        XCTAssertEqual(decodeError("{\"type\":\"ok\",\"type\":\"ok\",\"id\":1}")?.message.contains("duplicate key"), true)
    }

    func testInvalidUTF8() throws {
        for bytes: [UInt8] in [[0x22, 0xFF, 0x22], [0x22, 0xC0, 0x80, 0x22], [0x22, 0xED, 0xA0, 0x80, 0x22], [0x22, 0xE2, 0x82, 0x22], [0x22, 0xF5, 0x80, 0x80, 0x80, 0x22]] {
            XCTAssertThrowsError(try ControlMessage.decode(payload: bytes)) { error in
                XCTAssertEqual((error as? ProtocolError)?.code, .malformedFrame)
            }
        }
    }

    func testNotAMessage() {
        XCTAssertEqual(decodeError("[1]")?.code, .invalidMessage)
        XCTAssertEqual(decodeError("\"hello\"")?.code, .invalidMessage)
        XCTAssertEqual(decodeError("{}")?.code, .invalidMessage)
        XCTAssertEqual(decodeError("{\"type\":5}")?.code, .invalidMessage)
        let unknown = decodeError("{\"type\":\"explode\",\"id\":4}")
        XCTAssertEqual(unknown?.code, .unknownType)
        XCTAssertEqual(unknown?.requestID, 4)
        XCTAssertEqual(unknown?.closesConnection, true)
    }

    func testFieldErrorsNameTheField() {
        let cases: [(String, ErrorCode, String)] = [
            (#"{"type":"register","path":"a","kind":"file","asks":[]}"#, .missingField, "\"id\""),
            (#"{"type":"register","id":"1","path":"a","kind":"file","asks":[]}"#, .wrongFieldType, "\"id\""),
            (#"{"type":"register","id":-1,"path":"a","kind":"file","asks":[]}"#, .invalidValue, "\"id\""),
            (#"{"type":"register","id":9007199254740992,"path":"a","kind":"file","asks":[]}"#, .invalidValue, "\"id\""),
            (#"{"type":"register","id":1.5,"path":"a","kind":"file","asks":[]}"#, .wrongFieldType, "\"id\""),
            (#"{"type":"register","id":1,"path":"a","kind":"socket","asks":[]}"#, .invalidValue, "\"kind\""),
            (#"{"type":"register","id":1,"path":"a","kind":"file","asks":["dance"]}"#, .invalidValue, "asks[0]"),
            (#"{"type":"register","id":1,"path":"a","kind":"file","asks":"save"}"#, .wrongFieldType, "\"asks\""),
            (#"{"type":"register","id":1,"path":"/etc/passwd","kind":"file","asks":[]}"#, .invalidPath, "absolute"),
            (#"{"type":"register","id":1,"path":"a/../../etc","kind":"file","asks":[]}"#, .invalidPath, ".."),
            (#"{"type":"register","id":1,"path":"a\u0000b","kind":"file","asks":[]}"#, .invalidPath, "NUL"),
            (#"{"type":"register","id":1,"path":"","kind":"file","asks":[]}"#, .invalidPath, "empty"),
            (#"{"type":"register","id":1,"path":7,"kind":"file","asks":[]}"#, .wrongFieldType, "\"path\""),
            (#"{"type":"coordinate","id":2,"intents":[]}"#, .invalidValue, "intents"),
            (#"{"type":"coordinate","id":2,"intents":[{"intent":"peek","path":"a"}]}"#, .invalidValue, "intent"),
            (#"{"type":"coordinate","id":2,"intents":[{"intent":"read","path":"a","options":["forDeleting"]}]}"#, .invalidValue, "reading option"),
            (#"{"type":"coordinate","id":2,"intents":[{"intent":"write","path":"a","options":[1]}]}"#, .wrongFieldType, "options[0]"),
            (#"{"type":"coordinate","id":2,"intents":["a"]}"#, .wrongFieldType, "intents[0]"),
            (#"{"type":"coordinate","id":2,"intents":[{"intent":"read","path":"a"}],"timeoutMs":4294967296}"#, .invalidValue, "timeoutMs"),
            (#"{"type":"release","id":3,"access":1,"changes":[{"path":"a","change":"moved"}]}"#, .missingField, "newPath"),
            (#"{"type":"release","id":3,"access":1,"changes":[{"path":"a","change":"exploded"}]}"#, .invalidValue, "change"),
            (#"{"type":"hello","id":1,"versions":[]}"#, .invalidValue, "versions"),
            (#"{"type":"hello","id":1,"versions":["1"]}"#, .wrongFieldType, "versions[0]"),
            (#"{"type":"hello","id":1,"versions":[1],"client":false}"#, .wrongFieldType, "client"),
            (#"{"type":"answer","id":1,"error":"no"}"#, .wrongFieldType, "error"),
            (#"{"type":"answer","id":1,"error":{"code":"x"}}"#, .missingField, "message"),
            (#"{"type":"ask","id":1,"presenter":1,"ask":"save","path":"a","deadlineMs":-5}"#, .invalidValue, "deadlineMs"),
            (#"{"type":"notification","presenter":1,"event":"didMove"}"#, .missingField, "newPath"),
            (#"{"type":"notification","presenter":1,"event":"subitemDidAppear","subitem":"../x"}"#, .invalidPath, "subitem"),
        ]
        for (text, code, mention) in cases {
            guard let error = decodeError(text) else { continue }
            XCTAssertEqual(error.code, code, "\(text): \(error)")
            XCTAssertTrue(error.message.contains(mention), "\(text): \(error.message) should mention \(mention)")
        }
        // Once the id is known, a field error is answered and the connection survives.
        let pathError = decodeError(#"{"type":"register","id":9,"path":"/x","kind":"file","asks":[]}"#)
        XCTAssertEqual(pathError?.requestID, 9)
        XCTAssertEqual(pathError?.closesConnection, false)
        XCTAssertEqual(decodeError(#"{"type":"register","path":"/x"}"#)?.closesConnection, true)
    }

    func testFramingErrors() throws {
        var decoder = FrameDecoder(maxFrameSize: 1024)
        decoder.append([0, 0, 4, 1])
        XCTAssertThrowsError(try decoder.nextFrame()) { XCTAssertEqual(($0 as? ProtocolError)?.code, .frameTooLarge) }

        var huge = FrameDecoder()
        huge.append([0xFF, 0xFF, 0xFF, 0xFF])
        XCTAssertThrowsError(try huge.nextFrame()) { XCTAssertEqual(($0 as? ProtocolError)?.code, .frameTooLarge) }

        var empty = FrameDecoder()
        empty.append([0, 0, 0, 0])
        XCTAssertThrowsError(try empty.nextFrame()) { XCTAssertEqual(($0 as? ProtocolError)?.code, .malformedFrame) }

        var truncated = FrameDecoder()
        truncated.append(Array(ControlMessage.ok(OK(id: RequestID(1))).encodedFrame().dropLast()))
        XCTAssertNil(try truncated.nextFrame())
        XCTAssertThrowsError(try truncated.finish()) { XCTAssertEqual(($0 as? ProtocolError)?.code, .truncatedFrame) }

        var header = FrameDecoder()
        header.append([0, 0])
        XCTAssertNil(try header.nextFrame())
        XCTAssertThrowsError(try header.finish())
        XCTAssertNoThrow(try FrameDecoder().finish())
    }
}
