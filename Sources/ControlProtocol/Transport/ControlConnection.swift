import Dispatch
import Glibc
import Synchronization

/// One client connected to a `ControlServer`, as the daemon sees it. Thread-safe: `send`, `ask`
/// and `close` may be called from any thread at any time.
package final class ControlConnection: @unchecked Sendable, Hashable, CustomStringConvertible {
    /// Why a connection ended.
    package enum CloseReason: Sendable, Equatable {
        /// The client closed the socket, sent `close`, or its process died.
        case peerClosed
        /// The client broke the protocol; it was sent an `error` frame first.
        case protocolError(ProtocolError)
        /// The daemon closed it with `close(error:)` (or `close()` without an error).
        case closedByServer(ErrorBody?)
        /// The client did not read its messages and the outgoing buffer overflowed.
        case slowConsumer
        /// A socket error (errno).
        case ioError(Int32)
        /// The server stopped.
        case serverStopped
    }

    /// Unique for the server's lifetime.
    package let id: UInt64
    /// Who connected, from SO_PEERCRED.
    package let peer: PeerCredentials
    /// The serial queue all handler calls and ask completions for this connection run on.
    package let queue: DispatchQueue

    struct PendingAsk {
        let startNanoseconds: UInt64
        let completion: @Sendable (AskOutcome) -> Void
    }

    struct State {
        var fd: Int32
        var version: Int?
        var clientName: String?
        var outbound: [UInt8] = []
        var outboundOffset = 0
        /// Set once a close has been decided; nothing more is sent or delivered.
        var closing: CloseReason?
        /// Set once the transport has torn the connection down.
        var finished = false
        var pendingAsks: [AskID: PendingAsk] = [:]
        /// When bytes were last received (monotonic nanoseconds), for the idle timeout.
        var lastReceived = monotonicNanoseconds()
        /// Since when unsent bytes wait without the client taking any (nil: nothing waits), for
        /// the slow-client timeout.
        var pendingSince: UInt64?
        /// Frames of `sendInOrder` not yet moved to `outbound`, from `streamedHead` on.
        var streamed: [[UInt8]] = []
        var streamedHead = 0
        /// Frames made one at a time as the client reads them (a status report), after `streamed`;
        /// `producing` while its next frame is being made (off the lock and the I/O queue).
        var producer: StatusFrameStream?
        var producing = false
    }

    let state: Locked<State>
    /// Blocks given to `queue` by the I/O queue and not finished yet: while it is zero, nothing
    /// the client sent earlier is still waiting for the handler.
    let queued = Atomic<Int>(0)
    /// Weak: a server let go without `stop()` finishes its connections, which a handler may still hold.
    private weak let server: ControlServer?
    private let maxOutboundBytes: Int
    /// Watches `fd` from accept to `finish`, edge-triggered for reading and writing: bytes the
    /// socket could not take are written when it reports writability, with nothing to arm.
    private let readiness: Readiness
    /// Only touched by the server's I/O queue.
    nonisolated(unsafe) var decoder: FrameDecoder

    init(id: UInt64, fd: Int32, peer: PeerCredentials, server: ControlServer, readiness: Readiness, queue: DispatchQueue, maxFrameSize: Int) {
        self.id = id
        self.peer = peer
        self.server = server
        self.maxOutboundBytes = server.configuration.maxOutboundBytes
        self.readiness = readiness
        self.queue = queue
        self.decoder = FrameDecoder(maxFrameSize: maxFrameSize)
        self.state = Locked(State(fd: fd))
    }

    /// The negotiated protocol version (nil until `hello`).
    package var version: Int? { state.withLock { $0.version } }
    /// The name the client gave in `hello`.
    package var clientName: String? { state.withLock { $0.clientName } }
    /// Whether the connection is closed or closing.
    package var isClosed: Bool { state.withLock { $0.closing != nil } }

    package var description: String { "connection \(id) (\(peer))" }

    package static func == (a: ControlConnection, b: ControlConnection) -> Bool { a === b }
    package func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }

    /// Sends a message (a reply, a notification, or an ask you track yourself). Returns false if
    /// the connection is closed. Never blocks: bytes the socket cannot take yet are buffered and
    /// written by the server's I/O queue; a client that lets more than
    /// `Configuration.maxOutboundBytes` pile up is disconnected.
    @discardableResult
    package func send(_ message: ControlMessage) -> Bool {
        enqueue(message.encodedFrame())
    }

    /// Sends `frames` in order as the client reads them, with at most `streamWindow` bytes of
    /// them buffered at a time: a reply larger than `Configuration.maxOutboundBytes` (a status
    /// report of 100,000 presenters) reaches a client that reads, and one that does not read holds
    /// only the window until it is dropped as slow. Returns false if the connection is closed.
    @discardableResult
    package func sendInOrder(_ frames: [[UInt8]]) -> Bool {
        state.withLock { s in
            guard s.closing == nil else { return false }
            s.streamed += frames
            refill(&s)
            return true
        }
    }

    /// Whether frames of `sendInOrder` are still waiting to be sent.
    package var isSendingInOrder: Bool { state.withLock { $0.streamedHead < $0.streamed.count || $0.producer != nil || $0.producing } }

    /// Sends the frames of `stream` in order, each made only when the outbound buffer holds less
    /// than `streamWindow` (the client read what came before): a report of any size costs the
    /// daemon one frame at a time, and nothing more while its client does not read.
    @discardableResult
    package func sendInOrder(stream: StatusFrameStream) -> Bool {
        state.withLock { s in
            guard s.closing == nil, s.producer == nil, !s.producing else { return false }
            s.producer = stream
            refill(&s)
            return true
        }
    }

    /// Where frames of a `sendInOrder(stream:)` are made: not under the connection's lock, nor on
    /// the I/O queue all connections share (one user's large report must not hold up another's
    /// I/O while it is encoded).
    private static let producers = DispatchQueue(label: "coordfs.control.stream", attributes: .concurrent)

    /// Makes the producer's next frame on `producers`, then appends it and looks again. Lock held.
    private func produce(_ s: inout State) {
        guard let taken = s.producer else { return }
        s.producer = nil
        s.producing = true
        Self.producers.async { [self] in
            var stream = taken
            let frame = stream.next()
            state.withLock { s in
                s.producing = false
                guard s.closing == nil, !s.finished else { return }
                guard let frame else { return }
                s.producer = stream
                appendAndFlush(&s, frame)
                refill(&s)
            }
        }
    }

    /// Bytes of `sendInOrder` frames buffered at a time.
    static let streamWindow = 256 * 1024

    /// Moves `sendInOrder` frames to the outbound buffer while it holds less than the window. Lock held.
    private func refill(_ s: inout State) {
        while s.streamedHead < s.streamed.count && s.outbound.count - s.outboundOffset < Self.streamWindow && s.closing == nil {
            let frame = s.streamed[s.streamedHead]
            s.streamed[s.streamedHead] = []
            s.streamedHead += 1
            appendAndFlush(&s, frame)
        }
        if s.streamedHead == s.streamed.count {
            s.streamed = []
            s.streamedHead = 0
            if s.producer != nil && !s.producing && s.outbound.count - s.outboundOffset < Self.streamWindow && s.closing == nil {
                produce(&s)
            }
        }
    }

    /// Replies to request `id` with an `error` frame; the connection stays open.
    @discardableResult
    package func reply(to id: RequestID, error: ProtocolError) -> Bool {
        send(.error(ErrorMessage(id: id, error)))
    }

    /// Sends a notification to one of this connection's presenters.
    @discardableResult
    package func notify(_ presenter: PresenterID, _ event: PresenterEvent) -> Bool {
        send(.notification(PresenterNotification(presenter: presenter, event: event)))
    }

    /// Sends an ask and calls `completion` exactly once: with the answer, with `.timedOut` at the
    /// deadline, or with `.disconnected` as soon as the connection drops. It runs on `queue`, in
    /// order with the handler's calls for this connection; an answer that arrives while nothing
    /// this connection sent before it is still waiting for the handler completes at once on the
    /// server's I/O thread (one thread hop fewer per ask), so `completion` must not block.
    @discardableResult
    package func ask(
        _ kind: AskKind, presenter: PresenterID, path: MountPath, subitem: MountPath? = nil,
        deadline: Duration, completion: @escaping @Sendable (AskOutcome) -> Void
    ) -> AskID {
        guard let id = server?.nextAskID() else {  // the server is gone: so is the connection
            queue.async { completion(.disconnected) }
            return AskID(0)
        }
        let deadlineMs = Self.milliseconds(deadline)
        let frame = ControlMessage.ask(Ask(id: id, presenter: presenter, kind: kind, path: path, subitem: subitem, deadlineMs: deadlineMs)).encodedFrame()
        let registered = state.withLock { s -> Bool in
            guard s.closing == nil else { return false }
            s.pendingAsks[id] = PendingAsk(startNanoseconds: monotonicNanoseconds(), completion: completion)
            return true
        }
        guard registered else {
            queue.async { completion(.disconnected) }
            return id
        }
        if !enqueue(frame) {
            // Closed between the two steps: whoever closed it completes the pending ask.
            return id
        }
        queue.asyncAfter(deadline: .now() + .milliseconds(Int(deadlineMs))) { [weak self] in
            guard let self, let pending = self.state.withLock({ $0.pendingAsks.removeValue(forKey: id) }) else { return }
            pending.completion(.timedOut)
        }
        return id
    }

    /// `ask` for async callers.
    package func ask(_ kind: AskKind, presenter: PresenterID, path: MountPath, subitem: MountPath? = nil, deadline: Duration) async -> AskOutcome {
        await withCheckedContinuation { continuation in
            ask(kind, presenter: presenter, path: path, subitem: subitem, deadline: deadline) { continuation.resume(returning: $0) }
        }
    }

    /// Closes the connection, first sending an `error` frame (without id) if `error` is given.
    /// The handler's `didClose` follows with `.closedByServer`.
    package func close(error: ProtocolError? = nil) {
        beginClose(reason: .closedByServer(error.map(ErrorBody.init)), finalFrame: error.map { ControlMessage.error(ErrorMessage($0)).encodedFrame() })
    }

    static func milliseconds(_ duration: Duration) -> UInt32 {
        let (seconds, attoseconds) = duration.components
        if seconds < 0 { return 0 }
        let ms = seconds.multipliedReportingOverflow(by: 1000)
        if ms.overflow { return UInt32.max }
        let total = ms.partialValue + attoseconds / 1_000_000_000_000_000
        return total > Int64(UInt32.max) ? UInt32.max : UInt32(total)
    }

    // MARK: Transport internals

    /// Queues bytes for sending; false if closing.
    func enqueue(_ bytes: [UInt8]) -> Bool {
        var overflow = false
        let accepted = state.withLock { s -> Bool in
            guard s.closing == nil else { return false }
            appendAndFlush(&s, bytes)
            if s.outbound.count - s.outboundOffset > maxOutboundBytes {
                overflow = true
            }
            return true
        }
        if overflow { beginClose(reason: .slowConsumer, finalFrame: nil, discardOutbound: true) }
        return accepted
    }

    /// Appends to the outbound buffer and writes as much as the socket takes. Lock held.
    private func appendAndFlush(_ s: inout State, _ bytes: [UInt8]) {
        if s.outbound.count == s.outboundOffset {
            s.outbound.removeAll(keepingCapacity: s.outbound.capacity <= 64 * 1024)
            s.outboundOffset = 0
            // Common case: nothing queued, write straight from `bytes`.
            let written = bytes.withUnsafeBytes { Sys.send(s.fd, $0) }
            if written == bytes.count { return }
            let start = max(written, 0)
            if written < 0 && errno != EAGAIN && errno != EWOULDBLOCK {
                // Broken pipe and friends: the hangup is reported and the server tears down.
                return
            }
            // The socket is full (a short write or EAGAIN): it reports writability once the
            // client has read enough, and `flush` writes the rest then.
            s.outbound.append(contentsOf: bytes[start...])
            s.pendingSince = monotonicNanoseconds()
        } else {
            s.outbound.append(contentsOf: bytes)
        }
    }

    /// Writes buffered bytes (I/O queue, when the socket reports writability).
    func flush() {
        state.withLock { s in
            guard !s.finished else { return }
            while s.outboundOffset < s.outbound.count {
                let written = s.outbound.withUnsafeBytes { raw in
                    Sys.send(s.fd, UnsafeRawBufferPointer(rebasing: raw[s.outboundOffset...]))
                }
                if written <= 0 { break }
                s.outboundOffset += written
                s.pendingSince = monotonicNanoseconds()  // the client reads: not slow
            }
            refill(&s)
            if s.outboundOffset == s.outbound.count { s.pendingSince = nil }
            if s.outboundOffset == s.outbound.count {
                s.outbound = []
                s.outboundOffset = 0
                if s.closing != nil { _ = shutdown(s.fd, Int32(SHUT_RDWR)) }
            }
        }
    }

    /// Decides to close: remembers why, sends a last frame if given, and shuts the socket down
    /// once the outbound buffer is written. The hangup is then reported and the server finishes it.
    func beginClose(reason: CloseReason, finalFrame: [UInt8]?, discardOutbound: Bool = false) {
        state.withLock { s in
            guard s.closing == nil, !s.finished else { return }
            if discardOutbound {
                s.outbound = []
                s.outboundOffset = 0
                s.streamed = []
                s.streamedHead = 0
                s.producer = nil
            }
            if let finalFrame { appendAndFlush(&s, finalFrame) }
            s.closing = reason
            if s.outbound.count == s.outboundOffset {
                _ = shutdown(s.fd, Int32(SHUT_RDWR))
            }
        }
    }

    /// Marks the connection finished (I/O queue only), stops watching its descriptor and closes
    /// it (nothing uses it after `finished`; an event already on its way finds the connection
    /// gone from the server's table by its id). Returns the close reason (`reason` unless one was decided before) and the
    /// asks still pending, or nil if it was already finished.
    func finish(reason: CloseReason) -> (CloseReason, [PendingAsk])? {
        state.withLock { s -> (CloseReason, [PendingAsk])? in
            guard !s.finished else { return nil }
            s.finished = true
            let final = s.closing ?? reason
            s.closing = final
            let asks = Array(s.pendingAsks.values)
            s.pendingAsks = [:]
            s.outbound = []
            s.outboundOffset = 0
            s.streamed = []
            s.streamedHead = 0
            s.producer = nil
            readiness.unregister(s.fd)
            Glibc.close(s.fd)
            s.fd = -1
            return (final, asks)
        }
    }

    /// Completes a pending ask with the client's answer; false if it is unknown (late, or not
    /// sent through `ask`).
    func complete(_ answer: Answer) -> Bool {
        guard let pending = state.withLock({ $0.pendingAsks.removeValue(forKey: answer.id) }) else { return false }
        let latency = monotonicNanoseconds() &- pending.startNanoseconds
        let outcome: AskOutcome = answer.error.map { .failed($0, latencyNanoseconds: latency) } ?? .answered(latencyNanoseconds: latency)
        if queued.load(ordering: .acquiring) == 0 {
            pending.completion(outcome)
        } else {
            queue.async { pending.completion(outcome) }
        }
        return true
    }

    /// Runs `work` on `queue`, counted in `queued` (I/O queue only).
    func deliver(_ work: @escaping @Sendable () -> Void) {
        queued.add(1, ordering: .relaxed)
        queue.async { [self] in
            work()
            queued.subtract(1, ordering: .releasing)
        }
    }
}
