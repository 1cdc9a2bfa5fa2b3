import HummingbirdCore
import NIOCore
import NIOHTTP1

/// What a client may send before a request head is whole, how long it has for a head and a body,
/// and the answer to one that is malformed or too slow (docs/web.md, "Security"). Hummingbird's
/// HTTP/1 channel with its WebSocket upgrade turns off NIO's own answer to a parse error and
/// leaves the error to a part of it that is not there before the first request head: a request
/// of garbage, an unknown method, header fields past the decoder's limit or a request line of
/// megabytes got no answer, and the connection stayed open until the client closed it, holding a
/// descriptor (and a share of its peer's bound). Nothing counted the bytes the decoder skips
/// before a request line either (empty lines, without end). Here every such request is answered
/// as HTTP says (400, 431, 501, 505) and the connection closed at once after the answer.
enum RequestBounds {
    /// The request line and the header fields together, and any one of them (the decoder's limits).
    static let maxHead = 64 << 10
    /// Header fields in one request.
    static let maxFields = 100
    /// Bytes a client may send while the decoder makes nothing of them (a head not yet whole,
    /// empty lines before one): past this the request is refused with 431. A little over
    /// `maxHead`, so that a head the decoder would refuse is refused by the decoder, naming why.
    static let maxUnparsed = maxHead + (4 << 10)
    /// Time a client has for a whole request head: from the accept, or from the end of the
    /// previous request and its response on a kept-alive connection (an idle one too). Past it the
    /// request is answered 408 and the connection closed, so a head sent a byte every few seconds
    /// (slowloris) holds no descriptor for long. A handler is not timed (an answer may take long),
    /// nor is a WebSocket (the live stream).
    static let headDeadline = TimeAmount.seconds(10)
    /// Time a request's body has for each `bodyProgress` of it, and for its end: from when its head
    /// is read (or when the answer to the request before it on the connection ended, if later),
    /// and again from each MiB of it read. Past it the request is answered 408 and the connection
    /// closed, and the handler waiting for the body sees it cut (`RequestBodyCut`), never a short
    /// body. So a body must keep coming at 1 MiB a minute at least: one of up to 1 MiB is whole
    /// within 60 s, the largest the server takes (`WebLimits.maxBody`, 16 MiB) may take 16
    /// minutes, and a stall of 60 s ends any (as does a trickle of a byte every few seconds, which
    /// held a connection, a descriptor and the bytes buffered for as long as the client liked).
    /// 1 MiB a minute is 140 kbit/s, where a deadline for the whole body would have asked 2.2
    /// Mbit/s of a 16 MiB one; the page's largest body, a merge preview's text, is at most the 8
    /// MiB a document is shown (`WebLimits.maxDocument`), and on loopback a browser sends it in
    /// milliseconds. A client holding a connection this way sends 1 MiB a minute all the while.
    ///
    /// The time runs until NIO has read and decoded the body, which it does only a little ahead
    /// of the handler reading it (Hummingbird's request body is a stream with back pressure): a
    /// handler that did slow work before reading its body would see an honest client's body stall
    /// and answer it 408. None does: every route with a body reads it first (`collectBody` in
    /// `WebServer.run`); a new one must too, or answer before its body (which ends the connection).
    static let bodyDeadline = TimeAmount.seconds(60)
    /// The body a request must send within each `bodyDeadline` (or its end).
    static let bodyProgress = 1 << 20

    /// The decoder's limits for `HTTP1Channel.Configuration`.
    static var decoder: HTTP1Channel.Configuration.DecoderConfiguration {
        .init(maxHeaderFieldSize: maxHead, maxHeaderListSize: maxHead, maxHeaderFieldCount: maxFields)
    }

    /// Puts the two handlers in a connection's pipeline, which `HTTP1WebSocketUpgradeChannel`
    /// has set up: the count of raw bytes right before the HTTP decoder, the answer right after it.
    static func install(in channel: any Channel) throws {
        let pipeline = channel.pipeline.syncOperations
        let decoder = try pipeline.handler(type: ByteToMessageHandler<HTTPRequestDecoder>.self)
        let answer = MalformedRequestAnswer()
        try pipeline.addHandler(answer, position: .after(decoder))
        try pipeline.addHandler(UnparsedBytesBound(answer: answer), position: .before(decoder))
    }

    /// The status a parse error is answered with, and why, in words.
    static func refusal(_ error: HTTPParserError) -> (HTTPResponseStatus, String) {
        switch error {
        case .headerOverflow:
            return (.requestHeaderFieldsTooLarge, "the request line and header fields are larger than \(maxHead >> 10) KiB or more than \(maxFields)")
        case .invalidMethod:
            return (.notImplemented, "an unknown request method")
        case .invalidVersion:
            return (.httpVersionNotSupported, "only HTTP/1.x is spoken here")
        default:
            return (.badRequest, "a malformed request (\(error))")
        }
    }
}

/// Counts the bytes read since the HTTP decoder last made a request part of them, and has the
/// request refused once they pass `RequestBounds.maxUnparsed`. After a refusal, or an answer that
/// ends the connection, nothing more is read into the pipeline; after an upgrade to a WebSocket it
/// counts nothing (frames are bounded by the WebSocket handler).
final class UnparsedBytesBound: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    private let answer: MalformedRequestAnswer

    init(answer: MalformedRequestAnswer) { self.answer = answer }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if answer.upgraded { return context.fireChannelRead(data) }
        if answer.closing { return }
        answer.unparsed += Self.unwrapInboundIn(data).readableBytes
        context.fireChannelRead(data)
        if answer.unparsed > RequestBounds.maxUnparsed {
            answer.refuse(.requestHeaderFieldsTooLarge, "more than \(RequestBounds.maxUnparsed >> 10) KiB sent before a whole request head")
        }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        // A client that has read the last answer and closed its end: done.
        if answer.isAnswered, let e = event as? ChannelEvent, e == .inputClosed {
            answer.finish()
            return
        }
        context.fireUserInboundEventTriggered(event)
    }
}

/// Right after the HTTP decoder: answers a request the decoder cannot parse, one that is too
/// long in coming (`UnparsedBytesBound`), or one whose head is not whole within
/// `RequestBounds.headDeadline` or whose body stalls (`RequestBounds.bodyDeadline`: neither its
/// end nor another MiB of it within 60 s) (408), with a status and a line saying why, `Connection: close`, and closes the connection
/// once the answer is written. A response already under way (to an earlier request on the
/// connection) ends first. The parse error is not passed on: nothing after this handler answers
/// it again. A response that ends before its request's body was read whole (a refusal before the
/// body: 401, 403, 404, 413) is the connection's last too: it says `Connection: close` and the
/// connection is closed as after a refusal, not drained for as long as the client sends (which
/// Hummingbird does after a response, without a limit). Once the connection is a WebSocket,
/// everything passes as it is.
final class MalformedRequestAnswer: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias InboundOut = HTTPServerRequestPart
    typealias OutboundIn = HTTPServerResponsePart
    typealias OutboundOut = HTTPServerResponsePart

    /// Bytes read since the decoder last made a request part (`UnparsedBytesBound` adds, this resets).
    var unparsed = 0
    /// The connection is a WebSocket now.
    private(set) var upgraded = false
    /// The request is refused: nothing more is read, and the answer is sent once no response is under way.
    var refused: Bool { refusal != nil }
    /// Nothing more is read into the pipeline: the request is refused, or the last answer is written.
    var closing: Bool { refused || answered }
    /// The response under way answers a request whose body is not read whole: it is the last.
    private var last = false
    private var refusal: (status: HTTPResponseStatus, message: String)?
    /// A response's head is written and not its end.
    private var responding = false
    /// The refusal is written: what else would be written is dropped.
    private var answered = false
    private var context: ChannelHandlerContext?
    /// Request heads read, request ends read and responses ended on this connection: with all
    /// three equal the connection waits for a request head, under `RequestBounds.headDeadline`;
    /// with more heads than ends and every earlier request answered, for the body of the request
    /// being handled, under `RequestBounds.bodyDeadline`.
    private var heads = 0, requestEnds = 0, responseEnds = 0
    private var deadline: Scheduled<Void>?
    /// Body bytes read since the deadline was armed: another `RequestBounds.bodyProgress` of them
    /// arms it again.
    private var bodyRead = 0

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        armDeadline(context)
    }
    func handlerRemoved(context: ChannelHandlerContext) {
        cancelDeadline()
        self.context = nil
    }
    func channelInactive(context: ChannelHandlerContext) {
        cancelDeadline()
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if upgraded { return context.fireChannelRead(data) }
        unparsed = 0
        if refused { return }
        switch Self.unwrapInboundIn(data) {
        case .head:
            heads += 1
            cancelDeadline()
        case .end:
            requestEnds += 1
            cancelDeadline()
        case .body(let bytes):
            bodyRead += bytes.readableBytes
            // Another MiB of the body: the next has its own time (armed again below).
            if bodyRead >= RequestBounds.bodyProgress { cancelDeadline() }
        }
        context.fireChannelRead(data)
        armDeadline(context)
    }

    /// Waiting for a request head (none under way, every response ended), or for the body of the
    /// request being handled (its head read, every earlier response ended, and no answer to it
    /// begun: one answered before its body is the connection's last, which closes when the answer
    /// ends, however long that takes; a deadline then would cut the body under the answer): its
    /// deadline runs.
    private func armDeadline(_ context: ChannelHandlerContext) {
        guard deadline == nil, !upgraded, !closing, !last, requestEnds == responseEnds else { return }
        let seconds = { (timeout: TimeAmount) in timeout.nanoseconds / 1_000_000_000 }
        let (timeout, why) = heads == requestEnds
            ? (RequestBounds.headDeadline, "no whole request head within \(seconds(RequestBounds.headDeadline)) s")
            : (RequestBounds.bodyDeadline, "the request body stalled: neither its end nor \(RequestBounds.bodyProgress >> 20) MiB more of it within \(seconds(RequestBounds.bodyDeadline)) s")
        bodyRead = 0
        let this = NIOLoopBound(self, eventLoop: context.eventLoop)
        deadline = context.eventLoop.scheduleTask(in: timeout) {
            this.value.deadline = nil
            this.value.refuse(.requestTimeout, why)
        }
    }

    private func cancelDeadline() {
        deadline?.cancel()
        deadline = nil
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if !upgraded, let parse = error as? HTTPParserError {
            let (status, message) = RequestBounds.refusal(parse)
            return refuse(status, message)
        }
        // The decoder, once it failed, says so again for each later read: the refusal is on its way.
        if refused, error is ByteToMessageDecoderError { return }
        context.fireErrorCaught(error)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        // Upgraded to a WebSocket: its frames pass as they are (this is not removed: a handler
        // leaving the pipeline in the middle of the upgrade's write kept the 101 from the client).
        if upgraded { return context.write(data, promise: promise) }
        if answered {
            promise?.fail(ChannelError.ioOnClosedChannel)
            return
        }
        switch Self.unwrapOutboundIn(data) {
        case .head(let head) where head.status == .switchingProtocols:
            // The WebSocket's handlers take over; nothing HTTP passes here any more.
            upgraded = true
            cancelDeadline()
            context.write(data, promise: promise)
            return
        case .head(var head):
            guard head.status.code >= 200 else { return context.write(data, promise: promise) }
            responding = true
            // Answered before its body was read whole: the last answer on this connection.
            if requestEnds == responseEnds, heads > requestEnds, !refused {
                last = true
                cancelDeadline()
                head.headers.replaceOrAdd(name: "Connection", value: "close")
                return context.write(Self.wrapOutboundOut(.head(head)), promise: promise)
            }
            context.write(data, promise: promise)
        case .body:
            context.write(data, promise: promise)
        case .end:
            responding = false
            responseEnds += 1
            if last {
                let written = context.eventLoop.makePromise(of: Void.self)
                written.futureResult.cascade(to: promise)
                context.write(data, promise: written)
                closeOnceWritten(written.futureResult, context)
                return
            }
            context.write(data, promise: promise)
            if refused { sendRefusal(context) } else { armDeadline(context) }
        }
    }

    /// Refuses the request: answered now, or once the response under way has ended.
    func refuse(_ status: HTTPResponseStatus, _ message: String) {
        guard refusal == nil, !upgraded, !answered else { return }
        refusal = (status, message)
        // A handler reading the body of the request under way sees it cut, never a short body
        // (Hummingbird ends a body whose stream ends early as if it were whole).
        if heads > requestEnds, let context { context.fireErrorCaught(RequestBodyCut(reason: message)) }
        if !responding, let context { sendRefusal(context) }
    }

    private func sendRefusal(_ context: ChannelHandlerContext) {
        guard let refusal, !answered else { return }
        let body = context.channel.allocator.buffer(string: "\(refusal.status.code) \(refusal.status.reasonPhrase): \(refusal.message)\n")
        let head = HTTPResponseHead(version: .http1_1, status: refusal.status, headers: [
            "Connection": "close", "Content-Length": "\(body.readableBytes)", "Content-Type": "text/plain; charset=utf-8",
            "Cache-Control": "no-store", "X-Content-Type-Options": "nosniff",
        ])
        context.write(Self.wrapOutboundOut(.head(head)), promise: nil)
        context.write(Self.wrapOutboundOut(.body(.byteBuffer(body))), promise: nil)
        let written = context.eventLoop.makePromise(of: Void.self)
        context.writeAndFlush(Self.wrapOutboundOut(.end(nil)), promise: written)
        closeOnceWritten(written.futureResult, context)
    }

    /// The last answer is on its way: nothing more is written or read into the pipeline.
    /// Closed for writing once the answer is out; what the client still sends is read and
    /// dropped until it closes its end (`UnparsedBytesBound`), for at most `lingering`. A close
    /// with unread bytes would make the kernel reset the connection, and a client still sending
    /// (a head of megabytes, a body) could lose the answer.
    private func closeOnceWritten(_ written: EventLoopFuture<Void>, _ context: ChannelHandlerContext) {
        answered = true
        cancelDeadline()
        let channel = context.channel
        let this = NIOLoopBound(self, eventLoop: context.eventLoop)
        written.whenComplete { _ in
            channel.close(mode: .output, promise: nil)
            channel.eventLoop.scheduleTask(in: Self.lingering) { this.value.finish() }
        }
    }

    /// Ends a refused (or last answered) connection: what follows this handler hears that the
    /// input ended (before the first request head, NIO's upgrade handler then fails its wait as
    /// for a client that went, which Hummingbird takes quietly; a close alone fails it as an
    /// error, which it logs), and the connection is closed.
    func finish() {
        guard let context else { return }
        context.fireUserInboundEventTriggered(ChannelEvent.inputClosed)
        self.context?.close(promise: nil)
    }

    /// How long a connection is read (and dropped) after its last answer, at most.
    static let lingering = TimeAmount.seconds(2)

    /// Whether the answer is written: the client's end closing then closes the connection.
    var isAnswered: Bool { answered }
}

/// What a handler reading a request's body gets when the body is cut: it stalled
/// (`RequestBounds.bodyDeadline`), or the request was refused in the middle of it (408, 400, 431).
struct RequestBodyCut: Error, CustomStringConvertible {
    let reason: String
    var description: String { "the request body was cut: \(reason)" }
}
