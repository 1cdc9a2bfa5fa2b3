import Dispatch
import Glibc

/// Receives what the daemon sends a `ControlClient` unasked. Calls arrive in order, on one serial
/// queue per client (so replies keep flowing while a delegate works), or, for a delegate whose
/// calls never block (`receivesOnReaderThread`), on the socket's reader thread itself.
package protocol ControlClientDelegate: AnyObject, Sendable {
    /// Whether calls may arrive on the reader thread: one thread hop fewer per ask, for a delegate
    /// that only hands the work on (or answers at once). Default false.
    var receivesOnReaderThread: Bool { get }
    /// An ask for one of this client's presenters; answer it with `client.answer(_:error:)`
    /// before its deadline.
    func controlClient(_ client: ControlClient, didReceive ask: Ask)
    /// A notification for one of this client's presenters.
    func controlClient(_ client: ControlClient, didReceive notification: PresenterNotification)
    /// The connection ended; `error` says why if it was not a plain close.
    func controlClient(_ client: ControlClient, didCloseWith error: ControlTransportError?)
}

extension ControlClientDelegate {
    package var receivesOnReaderThread: Bool { false }
}

/// A connection to a coordfs daemon's control socket: handshake, request/reply matching by id,
/// asks and notifications to a delegate. Thread-safe; requests may be issued concurrently.
package final class ControlClient: @unchecked Sendable {
    /// The daemon's `welcome`.
    package let welcome: Welcome
    private let fd: Int32
    private let delegate: (any ControlClientDelegate)?
    private let deliveryQueue = DispatchQueue(label: "coordfs.control.client")
    private let writeLock = Locked(())

    private struct Pending {
        let continuation: CheckedContinuation<ControlMessage, any Error>
        let onReply: (@Sendable (ControlMessage) -> Void)?
    }
    private struct State {
        var nextID: UInt64 = 2  // 1 was hello
        var pending: [RequestID: Pending] = [:]
        /// Status reports arriving in parts (`more`), until their last part.
        var partialReports: [RequestID: StatusReport] = [:]
        var closed = false
        var closeError: ControlTransportError?
    }
    private let state = Locked(State())

    /// Connects to the socket at `path`, says `hello` and waits (up to `timeout`) for `welcome`.
    package static func connect(
        socketPath path: String, clientName: String? = nil, delegate: (any ControlClientDelegate)? = nil,
        timeout: Duration = .seconds(5)
    ) throws(ControlTransportError) -> ControlClient {
        let fd = try connectUnixSocket(path)
        do {
            let (welcome, decoder) = try handshake(fd: fd, clientName: clientName, timeout: timeout)
            return ControlClient(fd: fd, welcome: welcome, decoder: decoder, delegate: delegate)
        } catch {
            Glibc.close(fd)
            throw error
        }
    }

    private static func handshake(fd: Int32, clientName: String?, timeout: Duration) throws(ControlTransportError) -> (Welcome, FrameDecoder) {
        try Sys.sendAll(fd, ControlMessage.hello(Hello(id: RequestID(1), client: clientName)).encodedFrame())
        var decoder = FrameDecoder()
        let deadline = monotonicNanoseconds() + UInt64(ControlConnection.milliseconds(timeout)) * 1_000_000
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let message: ControlMessage?
            do {
                message = try decoder.nextFrame().map { (payload) throws(ProtocolError) in try ControlMessage.decode(payload: payload) }
            } catch {
                throw .protocolError(error)
            }
            if let message {
                switch message {
                case .welcome(let welcome):
                    // The daemon says nothing after `welcome` until asked, so the decoder holds
                    // no further frames; it is handed to the reader thread all the same.
                    return (welcome, decoder)
                case .error(let error):
                    throw .protocolError(ProtocolError(error.code, error.message))
                default:
                    throw .unexpectedReply(message.typeName)
                }
            }
            let now = monotonicNanoseconds()
            if now >= deadline { throw .timedOut }
            var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let ready = poll(&poller, 1, Int32((deadline - now) / 1_000_000) + 1)
            if ready < 0 && errno == EINTR { continue }  // the deadline is computed again
            if ready <= 0 { throw .timedOut }
            let n = buffer.withUnsafeMutableBytes { Sys.read(fd, $0) }
            if n == 0 { throw .disconnected }
            if n < 0 { throw .system(operation: "read", errno: errno) }
            decoder.append(buffer[0..<n])
        }
    }

    private init(fd: Int32, welcome: Welcome, decoder: FrameDecoder, delegate: (any ControlClientDelegate)?) {
        self.fd = fd
        self.welcome = welcome
        self.delegate = delegate
        let initialDecoder = decoder
        do {
            _ = try startThread(name: "coordfs-client") { [self] in readLoop(decoder: initialDecoder) }
        } catch {
            state.withLock { $0.closed = true; $0.closeError = error }
            Glibc.close(fd)
        }
    }

    /// Whether the connection is still open.
    package var isConnected: Bool { state.withLock { !$0.closed } }

    /// Sends a request built around a fresh id and waits for the reply that echoes it. An
    /// `error` reply throws `.protocolError`. `onReply` runs on the reader thread before any
    /// later frame is handled (so state it installs is visible to later asks).
    package func request(
        onReply: (@Sendable (ControlMessage) -> Void)? = nil, onSent: (@Sendable (RequestID) -> Void)? = nil,
        _ build: (RequestID) -> ControlMessage
    ) async throws(ControlTransportError) -> ControlMessage {
        let id = state.withLock { s -> RequestID in
            defer { s.nextID += 1 }
            return RequestID(s.nextID)
        }
        let frame = build(id).encodedFrame()
        do {
            let reply = try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<ControlMessage, any Error>) in
                let registered = state.withLock { s -> ControlTransportError? in
                    if s.closed { return s.closeError ?? .disconnected }
                    s.pending[id] = Pending(continuation: continuation, onReply: onReply)
                    return nil
                }
                if let error = registered {
                    continuation.resume(throwing: error)
                    return
                }
                if let error = writeLocked({ () throws(ControlTransportError) in try Sys.sendAll(fd, frame) }) {
                    if let pending = state.withLock({ $0.pending.removeValue(forKey: id) }) { pending.continuation.resume(throwing: error) }
                } else {
                    onSent?(id)
                }
            }
            if case .error(let error) = reply {
                throw ControlTransportError.protocolError(ProtocolError(error.code, error.message, requestID: id.rawValue))
            }
            return reply
        } catch let error as ControlTransportError {
            throw error
        } catch {
            throw .disconnected
        }
    }

    /// Registers a presenter; `onRegistered` runs before any ask for it can be delivered.
    /// `unsaved`: the presenter has unsaved changes from the start (see `setUnsavedChanges`).
    package func register(
        _ path: MountPath, kind: ItemKind, asks: Set<AskKind> = Set(AskKind.allCases), unsaved: Bool = false,
        onRegistered: (@Sendable (PresenterID) -> Void)? = nil
    ) async throws(ControlTransportError) -> PresenterID {
        let reply = try await request(onReply: { reply in
            if case .registered(let r) = reply { onRegistered?(r.presenter) }
        }) { .register(Register(id: $0, path: path, kind: kind, asks: asks, unsaved: unsaved)) }
        guard case .registered(let registered) = reply else { throw .unexpectedReply(reply.typeName) }
        return registered.presenter
    }

    /// Unregisters a presenter.
    package func unregister(_ presenter: PresenterID) async throws(ControlTransportError) {
        let reply = try await request { .unregister(Unregister(id: $0, presenter: presenter)) }
        guard case .ok = reply else { throw .unexpectedReply(reply.typeName) }
    }

    /// Waits for a coordinated access; returns its id once granted.
    /// Task cancellation sends `cancel`: the wait then ends with the error `cancelled` (or, when
    /// the grant crossed it, with the grant: the caller releases it).
    package func coordinate(_ intents: [Intent], presenter: PresenterID? = nil, timeoutMs: UInt32? = nil,
                           purpose: String? = nil) async throws(ControlTransportError) -> AccessID {
        // The request's id once sent, and whether the task was cancelled: whichever comes second
        // sends `cancel`.
        let sent = Locked<(id: RequestID?, cancelled: Bool)>((nil, false))
        let reply: ControlMessage
        do {
            reply = try await withTaskCancellationHandler {
                try await request(onSent: { [self] id in
                    if sent.withLock({ $0.id = id; return $0.cancelled }) { post { .cancel(CancelRequest(id: $0, request: id)) } }
                }) { .coordinate(Coordinate(id: $0, intents: intents, presenter: presenter, timeoutMs: timeoutMs, purpose: purpose)) }
            } onCancel: { [self] in
                if let id = sent.withLock({ $0.cancelled = true; return $0.id }) { post { .cancel(CancelRequest(id: $0, request: id)) } }
            }
        } catch let error as ControlTransportError {
            throw error
        } catch {
            throw .disconnected
        }
        guard case .granted(let granted) = reply else { throw .unexpectedReply(reply.typeName) }
        return granted.access
    }

    /// Says the accessor of `access` is about to move (`done` false) or has moved `path` to `newPath`.
    /// Sent at once without waiting for the reply: it reaches the daemon before a later `release`.
    package func announceMove(_ access: AccessID, from path: MountPath, to newPath: MountPath, done: Bool) {
        post { id in
            let move = MoveAnnouncement(id: id, access: access, path: path, newPath: newPath)
            return done ? .didMove(DidMove(move)) : .willMove(WillMove(move))
        }
    }

    /// Sends a request with a fresh id without waiting for its reply (which is ignored).
    @discardableResult
    package func post(_ build: (RequestID) -> ControlMessage) -> Bool {
        let id = state.withLock { s -> RequestID in
            defer { s.nextID += 1 }
            return RequestID(s.nextID)
        }
        return send(build(id))
    }

    /// Ends a coordinated access, saying what the writer did.
    package func release(_ access: AccessID, changes: [ItemChange] = []) async throws(ControlTransportError) {
        let reply = try await request { .release(Release(id: $0, access: access, changes: changes)) }
        guard case .ok = reply else { throw .unexpectedReply(reply.typeName) }
    }

    /// The daemon's presenters, accesses and waiting requests.
    package func status() async throws(ControlTransportError) -> StatusReport {
        let reply = try await request { .status(StatusQuery(id: $0)) }
        guard case .statusReport(let report) = reply else { throw .unexpectedReply(reply.typeName) }
        return report
    }

    // MARK: The document store

    /// Tells the store whether the presenter has unsaved changes in its document (a change
    /// underneath it is then a conflict instead of a reload or close).
    package func setUnsavedChanges(_ presenter: PresenterID, _ unsaved: Bool) async throws(ControlTransportError) {
        let reply = try await request { .setUnsavedChanges(SetUnsavedChanges(id: $0, presenter: presenter, unsaved: unsaved)) }
        guard case .ok = reply else { throw .unexpectedReply(reply.typeName) }
    }

    /// Open conflicts: one presenter's, or those of every presenter of this connection (all of
    /// them for root).
    package func conflicts(presenter: PresenterID? = nil) async throws(ControlTransportError) -> [ConflictInfo] {
        let reply = try await request { .conflicts(ConflictsQuery(id: $0, presenter: presenter)) }
        guard case .conflictList(let list) = reply else { throw .unexpectedReply(reply.typeName) }
        return list.conflicts
    }

    /// Resolves a conflict of one of this connection's presenters (any conflict, for root).
    package func resolve(_ conflict: ConflictID, with resolution: Resolution, mine: ResolutionContents? = nil) async throws(ControlTransportError) -> Resolved {
        let reply = try await request { .resolve(Resolve(id: $0, conflict: conflict, resolution: resolution, mine: mine)) }
        guard case .resolved(let resolved) = reply else { throw .unexpectedReply(reply.typeName) }
        return resolved
    }

    /// The kept versions of the document at `path`, newest first.
    package func versions(_ path: MountPath) async throws(ControlTransportError) -> [VersionInfo] {
        let reply = try await request { .versions(VersionsQuery(id: $0, path: path)) }
        guard case .versionList(let list) = reply else { throw .unexpectedReply(reply.typeName) }
        return list.versions
    }

    /// Forgets the kept versions of the document at `path` that nothing holds on to.
    package func removeVersions(_ path: MountPath) async throws(ControlTransportError) {
        let reply = try await request { .removeVersions(RemoveVersions(id: $0, path: path)) }
        guard case .ok = reply else { throw .unexpectedReply(reply.typeName) }
    }

    /// One chunk of a kept version's bytes.
    package func readVersion(_ version: VersionID, offset: UInt64 = 0, length: UInt32? = nil) async throws(ControlTransportError) -> VersionData {
        let reply = try await request { .readVersion(ReadVersion(id: $0, version: version, offset: offset, length: length)) }
        guard case .versionData(let data) = reply else { throw .unexpectedReply(reply.typeName) }
        return data
    }

    /// All of a kept version's bytes (read chunk by chunk).
    package func contents(ofVersion version: VersionID) async throws(ControlTransportError) -> [UInt8] {
        var bytes: [UInt8] = []
        while true {
            let chunk = try await readVersion(version, offset: UInt64(bytes.count))
            bytes += chunk.data
            if chunk.eof { return bytes }
            if chunk.data.isEmpty { throw .unexpectedReply("an empty versionData before the end") }
        }
    }

    /// A kept version's size and its bytes when it is at most `limit` bytes long (nil beyond it:
    /// nothing past the first reply is read), for a reader that shows or merges versions up to a
    /// size and must not hold a larger one in memory to find out.
    package func contents(ofVersion version: VersionID, atMost limit: Int) async throws(ControlTransportError) -> (bytes: [UInt8]?, size: UInt64) {
        var bytes: [UInt8] = []
        while true {
            let chunk = try await readVersion(version, offset: UInt64(bytes.count))
            if chunk.size > UInt64(max(0, limit)) { return (nil, chunk.size) }
            bytes += chunk.data
            if chunk.eof { return (bytes, chunk.size) }
            if chunk.data.isEmpty { throw .unexpectedReply("an empty versionData before the end") }
            // A version that grew past the limit while it was read (a reused one) is no longer small.
            if bytes.count > limit { return (nil, UInt64(bytes.count)) }
        }
    }

    /// Writes kept version `version` back over the document at `path`, as a coordinated write the
    /// daemon makes for this peer (which must be allowed to replace the document).
    package func restore(_ version: VersionID, to path: MountPath) async throws(ControlTransportError) -> Restored {
        let reply = try await request { .restore(Restore(id: $0, version: version, path: path)) }
        guard case .restored(let restored) = reply else { throw .unexpectedReply(reply.typeName) }
        return restored
    }

    /// Event-log records from `from` (nil: from the end) that this peer may see.
    package func readLog(from: UInt64?, limit: UInt32? = nil) async throws(ControlTransportError) -> LogRecords {
        let reply = try await request { .readLog(ReadLog(id: $0, from: from, limit: limit)) }
        guard case .logRecords(let records) = reply else { throw .unexpectedReply(reply.typeName) }
        return records
    }

    /// Answers an ask: done (`error == nil`) or failed.
    package func answer(_ ask: AskID, error: ErrorBody? = nil) {
        send(.answer(Answer(id: ask, error: error)))
    }

    /// Sends a message without waiting for anything. Returns false if the connection is closed.
    @discardableResult
    package func send(_ message: ControlMessage) -> Bool {
        let frame = message.encodedFrame()
        return writeLocked { () throws(ControlTransportError) in try Sys.sendAll(fd, frame) } == nil
    }

    /// Runs `body` under the write lock if the connection is open; returns its error. The
    /// reader thread marks the connection closed before it closes the descriptor under this
    /// lock, so `fd` is never a reused number here.
    @discardableResult
    private func writeLocked(_ body: () throws(ControlTransportError) -> Void) -> ControlTransportError? {
        writeLock.withLock { _ -> ControlTransportError? in
            if state.withLock({ $0.closed }) { return .disconnected }
            do throws(ControlTransportError) { try body() } catch { return error }
            return nil
        }
    }

    /// Says `close` and closes the connection; pending requests fail with `.disconnected`.
    package func close() {
        let frame = ControlMessage.close(Close()).encodedFrame()
        writeLocked { () throws(ControlTransportError) in
            try? Sys.sendAll(fd, frame)
            _ = shutdown(fd, Int32(SHUT_RDWR))
        }
    }

    // MARK: Reader thread

    private func readLoop(decoder initial: FrameDecoder) {
        var decoder = initial
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        var failure: ControlTransportError?
        // Sessions' presenter tasks made ready by a frame run here before the next read.
        let executor = ReaderThreadExecutor.shared
        executor.beginReaderThread()
        defer { executor.endReaderThread() }
        reading: while true {
            do {
                while let payload = try decoder.nextFrame() {
                    handle(try ControlMessage.decode(payload: payload))
                    executor.runReadyJobs()
                }
            } catch {
                failure = .protocolError(error)
                break reading
            }
            let n = buffer.withUnsafeMutableBytes { Sys.read(fd, $0) }
            if n > 0 {
                decoder.append(buffer[0..<n])
            } else {
                if n < 0 && errno != ECONNRESET { failure = .system(operation: "read", errno: errno) }
                if n == 0 || errno == ECONNRESET {
                    do { try decoder.finish() } catch { failure = .protocolError(error) }
                }
                break
            }
        }
        let pending = state.withLock { s -> [Pending] in
            s.closed = true
            if s.closeError == nil { s.closeError = failure }
            failure = s.closeError
            defer { s.pending = [:] }
            return Array(s.pending.values)
        }
        _ = shutdown(fd, Int32(SHUT_RDWR))
        writeLock.withLock { _ in _ = Glibc.close(fd) }
        for request in pending { request.continuation.resume(throwing: failure ?? .disconnected) }
        if let delegate {
            let error = failure
            deliver(to: delegate) { $0.controlClient(self, didCloseWith: error) }
        }
    }

    /// Calls the delegate on the reader thread or on the delivery queue, as it wants (reader thread only).
    private func deliver(to delegate: any ControlClientDelegate, _ call: @escaping @Sendable (any ControlClientDelegate) -> Void) {
        if delegate.receivesOnReaderThread {
            call(delegate)
        } else {
            deliveryQueue.async { call(delegate) }
        }
    }

    private func handle(_ message: ControlMessage) {
        switch message {
        case .ask(let ask):
            if let delegate {
                deliver(to: delegate) { $0.controlClient(self, didReceive: ask) }
            } else {
                answer(ask.id, error: ErrorBody(code: .failed, message: "this client presents nothing"))
            }
        case .notification(let notification):
            if let delegate { deliver(to: delegate) { $0.controlClient(self, didReceive: notification) } }
        case .error(let error) where error.id == nil:
            // The daemon is about to close the connection; remember why.
            state.withLock { $0.closeError = .protocolError(ProtocolError(error.code, error.message)) }
        case .close(let close):
            state.withLock { s in
                if s.closeError == nil, let reason = close.reason {
                    s.closeError = .protocolError(ProtocolError(.shuttingDown, reason))
                }
            }
        default:
            guard let id = message.requestID else { return }
            var message = message
            if case .statusReport(let part) = message {
                // A report in parts is one reply: collected until the part without `more`.
                let whole = state.withLock { s -> StatusReport? in
                    guard s.pending[id] != nil else { return nil }
                    var report = s.partialReports.removeValue(forKey: id) ?? StatusReport(id: id)
                    report.append(part)
                    if report.more { s.partialReports[id] = report; return nil }
                    return report
                }
                guard let whole else { return }
                message = .statusReport(whole)
            }
            guard let pending = state.withLock({ s -> Pending? in
                s.partialReports[id] = nil  // an error ending a report in parts
                return s.pending.removeValue(forKey: id)
            }) else { return }
            pending.onReply?(message)
            pending.continuation.resume(returning: message)
        }
    }
}
