import XCTest
import NIOCore
import NIOEmbedded
import NIOHTTP1
@testable import CoordFSWeb

/// `MalformedRequestAnswer`'s time for a request's body (`RequestBounds.bodyDeadline`, docs/web.md
/// "Security") on an `EmbeddedChannel`, whose clock the test drives: a request's parts go in as
/// the HTTP decoder gives them, the answer goes out as Hummingbird writes it, and minutes pass at
/// once. `WebPageTests.testASlowRequestBodyIsAnswered408AndARefusedOneIsNotDrained` checks the
/// same bound through the real `coordfs web` in real time.
final class RequestBodyDeadlineTests: XCTestCase {
    /// The end of the pipeline, where Hummingbird reads the request: its ends, and the errors a
    /// handler reading the body would see.
    private final class Reader: ChannelInboundHandler {
        typealias InboundIn = HTTPServerRequestPart
        var ends = 0
        var errors: [any Error] = []
        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            if case .end = Self.unwrapInboundIn(data) { ends += 1 }
        }
        func errorCaught(context: ChannelHandlerContext, error: any Error) { errors.append(error) }
        var cut: Bool { errors.contains { $0 is RequestBodyCut } }
    }

    /// A connection whose request head, a POST of `length` bytes, was read.
    private func post(length: Int) throws -> (EmbeddedChannel, Reader) {
        let reader = Reader()
        let channel = EmbeddedChannel()
        try channel.pipeline.syncOperations.addHandlers([MalformedRequestAnswer(), reader])
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
        var head = HTTPRequestHead(version: .http1_1, method: .POST, uri: "/api/versions")
        head.headers.add(name: "Content-Length", value: "\(length)")
        try channel.writeInbound(HTTPServerRequestPart.head(head))
        return (channel, reader)
    }

    private func send(_ count: Int, on channel: EmbeddedChannel) throws {
        try channel.writeInbound(HTTPServerRequestPart.body(ByteBuffer(repeating: UInt8(ascii: " "), count: count)))
    }

    private func wait(_ time: TimeAmount, on channel: EmbeddedChannel) {
        channel.embeddedEventLoop.advanceTime(by: time)
    }

    /// The heads of the responses written since the last call.
    private func answers(_ channel: EmbeddedChannel) throws -> [HTTPResponseHead] {
        var heads: [HTTPResponseHead] = []
        while let part = try channel.readOutbound(as: HTTPServerResponsePart.self) {
            if case .head(let head) = part { heads.append(head) }
        }
        return heads
    }

    func testABodyThatKeepsComingAMiBAMinuteIsNotCut() throws {
        // 3 MiB in pieces of 64 KiB, a MiB every 55 s, then its end 59 s after the last MiB: 224 s
        // in all (before, 408 at 60 s: the body had to be whole by then).
        let (channel, reader) = try post(length: 3 << 20)
        defer { _ = try? channel.finish() }
        for _ in 0..<3 {
            for _ in 0..<16 {
                wait(.milliseconds(55_000 / 16), on: channel)
                try send(64 << 10, on: channel)
            }
        }
        wait(.seconds(59), on: channel)
        try channel.writeInbound(HTTPServerRequestPart.end(nil))
        XCTAssertEqual(try answers(channel).map(\.status), [], "not cut while it kept coming")
        XCTAssertEqual(reader.ends, 1, "the whole body reached the handler")
        XCTAssertFalse(reader.cut, "\(reader.errors)")
    }

    func testABodyThatStallsForAMinuteOrTricklesIsAnswered408() throws {
        // A trickle from the head, a byte a second: 408 at 60 s, as before.
        do {
            let (channel, reader) = try post(length: 1_000_000)
            defer { _ = try? channel.finish() }
            for _ in 0..<59 {
                wait(.seconds(1), on: channel)
                try send(1, on: channel)
            }
            XCTAssertEqual(try answers(channel).map(\.status), [], "not before 60 s")
            wait(.seconds(1), on: channel)
            let heads = try answers(channel)
            XCTAssertEqual(heads.map(\.status), [.requestTimeout], "a trickle")
            XCTAssertEqual(heads.first?.headers["Connection"], ["close"])
            XCTAssertTrue(reader.cut, "the handler sees the body cut: \(reader.errors)")
            XCTAssertEqual(reader.ends, 0)
        }
        // 2 MiB at once 10 s and 30 s after the head, then nothing: 408 60 s after the last MiB,
        // at 90 s (before: at 60 s, while it came at 2 MiB in 30 s).
        do {
            let (channel, reader) = try post(length: 3 << 20)
            defer { _ = try? channel.finish() }
            wait(.seconds(10), on: channel)
            try send(1 << 20, on: channel)
            wait(.seconds(20), on: channel)
            try send((1 << 20) + 100, on: channel)
            wait(.milliseconds(59_900), on: channel)
            XCTAssertEqual(try answers(channel).map(\.status), [], "not before 60 s after its last MiB")
            XCTAssertFalse(reader.cut, "\(reader.errors)")
            wait(.milliseconds(100), on: channel)
            XCTAssertEqual(try answers(channel).map(\.status), [.requestTimeout], "a stall of 60 s")
            XCTAssertTrue(reader.cut, "the handler sees the body cut: \(reader.errors)")
        }
    }

    func testAnAnswerUnderWayBeforeItsBodyIsNotCutByTheBodysDeadline() throws {
        // Answered before its body was read (a refusal, or a route that does not read it) with an
        // answer that takes longer than the body's 60 s, while the body trickles on: the answer
        // ends the connection; before, the body's deadline also ran and, at 60 s, cut the body
        // under the answer (a `RequestBodyCut` into Hummingbird's reading of the connection).
        let (channel, reader) = try post(length: 1_000_000)
        defer { _ = try? channel.finish() }
        try send(1, on: channel)
        try channel.writeOutbound(HTTPServerResponsePart.head(HTTPResponseHead(version: .http1_1, status: .ok)))
        XCTAssertEqual(try answers(channel).first?.headers["Connection"], ["close"], "the connection's last answer")
        for _ in 0..<90 {
            wait(.seconds(1), on: channel)
            try send(1, on: channel)
            try channel.writeOutbound(HTTPServerResponsePart.body(.byteBuffer(ByteBuffer(string: "x"))))
        }
        XCTAssertFalse(reader.cut, "the body cut under the answer: \(reader.errors)")
        try channel.writeOutbound(HTTPServerResponsePart.end(nil))
        XCTAssertEqual(try answers(channel).map(\.status), [], "no 408 after the answer")
        XCTAssertFalse(reader.cut, "\(reader.errors)")
    }
}
