import Dispatch
import Glibc
import Synchronization
import Linux

/// The daemon's end of the control socket: a Unix-domain stream socket. Readiness comes from the
/// server's own epoll instance and thread (`Readiness`, not Dispatch sources: libdispatch's epoll
/// backend crashes under connections that come and go while sends wait for writability) and is
/// handled on one serial I/O queue, where frames are read, decoded and buffered bytes written;
/// decoded requests go to the `ControlServerHandler` on each connection's serial queue. A
/// connection costs a descriptor, an epoll registration, a small state object and an idle
/// dispatch queue, so thousands are cheap.
///
/// Lock order: `table` before a connection's `state`; never the reverse.
package final class ControlServer: @unchecked Sendable {
    package struct Configuration: Sendable {
        /// Where to bind. Any stale socket there (no daemon answering) is replaced.
        package var socketPath: String
        /// Permission bits of the socket file: 0o600 (owner only) by default, 0o666 for a mount
        /// with `allow_other`.
        package var permissions: UInt32
        /// Largest frame payload accepted (and announced in `welcome`).
        package var maxFrameSize: Int
        /// Name sent in `welcome`.
        package var serverName: String
        /// Mount point sent in `welcome`.
        package var mountPoint: String?
        /// A client with more unsent bytes than this is disconnected.
        package var maxOutboundBytes: Int
        /// Connections beyond this are told `limitExceeded` and closed (those of `exemptUsers`
        /// only beyond `maxConnections + reservedConnections`).
        package var maxConnections: Int
        /// Connections of one user (uid) beyond this are told `limitExceeded` and closed
        /// (`exemptUsers` are not counted).
        package var maxConnectionsPerUser: Int
        /// Users no other user can lock out (root and the daemon's owner): no per-user bound, and
        /// `reservedConnections` beyond `maxConnections`.
        package var exemptUsers: Set<UInt32>
        package var reservedConnections: Int
        /// A client that has not sent `hello` within this time is disconnected.
        package var helloTimeout: Duration
        /// A negotiated client that sent nothing for this long and holds nothing (the handler's
        /// `holdsNothing`) is disconnected; nil: never.
        package var idleTimeout: Duration?
        /// A client whose unsent messages made no progress for this long (it stopped reading) is
        /// disconnected; nil: only `maxOutboundBytes` bounds it.
        package var slowTimeout: Duration?
        /// When accept finds no descriptor (EMFILE, ENFILE), how long the listening socket goes
        /// unwatched before accepting is tried again (sooner when a connection closes).
        package var acceptBackoff: Duration
        /// Where the server says what an operator should know (that it ran out of descriptors);
        /// nil: nowhere.
        package var notice: (@Sendable (String) -> Void)?
        /// A share of the process's descriptors that connections of users not in `exemptUsers` draw
        /// from, with other things than this server (the daemon's share for other users, which their
        /// opens through the mount draw from too): `take` is asked for each such connection once it
        /// passed the counts above and answers why not (nil: taken); `give` gets it back when the
        /// connection is torn down. Nil: no such share.
        package var share: (take: @Sendable (UInt32) -> String?, give: @Sendable (UInt32) -> Void)?

        package init(
            socketPath: String, permissions: UInt32 = 0o600, maxFrameSize: Int = Framing.defaultMaxFrameSize,
            serverName: String = "coordfs", mountPoint: String? = nil, maxOutboundBytes: Int = 8 << 20,
            maxConnections: Int = 8192, maxConnectionsPerUser: Int = .max, exemptUsers: Set<UInt32> = [0],
            reservedConnections: Int = 64, helloTimeout: Duration = .seconds(10), idleTimeout: Duration? = nil,
            slowTimeout: Duration? = nil, acceptBackoff: Duration = .milliseconds(250), notice: (@Sendable (String) -> Void)? = nil,
            share: (take: @Sendable (UInt32) -> String?, give: @Sendable (UInt32) -> Void)? = nil
        ) {
            self.socketPath = socketPath
            self.permissions = permissions
            self.maxFrameSize = maxFrameSize
            self.serverName = serverName
            self.mountPoint = mountPoint
            self.maxOutboundBytes = maxOutboundBytes
            self.maxConnections = maxConnections
            self.maxConnectionsPerUser = maxConnectionsPerUser
            self.exemptUsers = exemptUsers
            self.reservedConnections = reservedConnections
            self.helloTimeout = helloTimeout
            self.idleTimeout = idleTimeout
            self.slowTimeout = slowTimeout
            self.acceptBackoff = acceptBackoff
            self.notice = notice
            self.share = share
        }
    }

    package let configuration: Configuration
    private let handler: any ControlServerHandler
    private let delivery = DispatchQueue(label: "coordfs.control.delivery", attributes: .concurrent)

    /// Where sockets are read, written and torn down.
    let ioQueue = DispatchQueue(label: "coordfs.control.io")
    private static let ioQueueKey = DispatchSpecificKey<Bool>()

    private struct Lifecycle {
        var readiness: Readiness?
        var listenFD: Int32 = -1
        var boundInode: (dev: UInt64, ino: UInt64)?
        var started = false
        var stopped = false
    }
    private let lifecycle = Mutex(Lifecycle())
    private let table = Mutex<[UInt64: ControlConnection]>([:])
    /// Connections per user, for `maxConnectionsPerUser` (guarded like `table`, taken after it).
    private let perUser = Mutex<[UInt32: Int]>([:])
    /// Drops idle and slow connections (`idleTimeout`, `slowTimeout`).
    private nonisolated(unsafe) var sweeper: DispatchSourceTimer?
    private let counters = Mutex<(connection: UInt64, ask: UInt64)>((0, 0))

    /// Accepting when descriptors run out (I/O queue only). A round of accepting that finds none
    /// (EMFILE, ENFILE) leaves the listening socket unwatched (it stays readable, so watching it
    /// would wake the I/O queue again at once, a busy loop): new connections wait in the backlog
    /// until a connection closes or `acceptBackoff` passes, then accepting is tried again.
    private struct Exhaustion {
        /// The listening socket is not watched.
        var paused = false
        /// A retry after `acceptBackoff` is on its way.
        var retryScheduled = false
        /// Accept found no descriptor, and none has been accepted since.
        var exhausted = false
        /// When that was last said (`notice`), and how many times it happened since unsaid.
        var lastSaid: UInt64?
        var unsaid = 0
    }
    private nonisolated(unsafe) var exhaustion = Exhaustion()
    private let exhaustionCount = Atomic<UInt64>(0)
    private let refusedCount = Atomic<UInt64>(0)

    /// Connections refused by `maxConnections`, `maxConnectionsPerUser` or the `share`.
    package var refusedConnections: UInt64 { refusedCount.load(ordering: .relaxed) }

    /// How many times accepting found no descriptor left (each time until one is accepted again counts once).
    package var descriptorExhaustions: UInt64 { exhaustionCount.load(ordering: .relaxed) }

    package init(configuration: Configuration, handler: any ControlServerHandler) {
        self.configuration = configuration
        self.handler = handler
        ioQueue.setSpecific(key: Self.ioQueueKey, value: true)
    }

    /// The connected clients (negotiated or not).
    package var connections: [ControlConnection] {
        table.withLock { Array($0.values) }.sorted { $0.id < $1.id }
    }

    /// Number of connected clients.
    package var connectionCount: Int { table.withLock { $0.count } }

    /// Binds the socket (atomically: bound under a temporary name, given its permissions, then
    /// renamed into place) and starts serving.
    /// - Throws: `.addressInUse` if a live daemon answers at the path; `.system` otherwise.
    package func start() throws(ControlTransportError) {
        let path = configuration.socketPath
        if let fd = try? connectUnixSocket(path) {
            Glibc.close(fd)
            throw .addressInUse(path)
        }
        let temporary = path + ".\(getpid()).tmp"
        unlink(temporary)
        let listenFD = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
        if listenFD < 0 { throw .system(operation: "socket", errno: errno) }
        let fds: [Int32] = [listenFD]
        func fail(_ operation: String, _ code: Int32) -> ControlTransportError {
            for fd in fds { Glibc.close(fd) }
            unlink(temporary)
            return .system(operation: operation, errno: code)
        }
        let bound = try withUnixAddress(temporary) { address, length in bind(listenFD, address, length) == 0 ? 0 : errno }
        if bound != 0 { throw fail("bind \(path)", bound) }
        if chmod(temporary, mode_t(configuration.permissions)) != 0 { throw fail("chmod \(path)", errno) }
        if rename(temporary, path) != 0 { throw fail("rename to \(path)", errno) }
        var info = stat()
        if stat(path, &info) != 0 { throw fail("stat \(path)", errno) }
        if listen(listenFD, 512) != 0 { throw fail("listen \(path)", errno) }

        let readiness: Readiness
        do {
            // The readiness thread never holds the server (only the I/O queue's blocks load it),
            // so the last reference to a dropped server is never let go there (deinit joins it).
            let weakly = WeakServer(self)
            readiness = try Readiness { [ioQueue] token, events in
                ioQueue.async { weakly.server?.ready(token, events) }
            }
        } catch {
            for fd in fds { Glibc.close(fd) }
            unlink(path)
            throw error
        }
        do {
            try lifecycle.withLock { (l: inout Lifecycle) throws(ControlTransportError) in
                guard !l.started else { throw .system(operation: "start (already started)", errno: EALREADY) }
                l.readiness = readiness
                l.listenFD = listenFD
                l.boundInode = (UInt64(info.st_dev), UInt64(info.st_ino))
                l.started = true
            }
        } catch {
            readiness.stop()
            Glibc.close(listenFD)
            throw error
        }
        // One-shot: armed again after each round of accepting (on the I/O queue).
        if !readiness.register(listenFD, token: Self.listenToken, events: Readiness.readable | Readiness.oneShot) {
            let code = errno
            stop()
            throw .system(operation: "epoll_ctl \(path)", errno: code)
        }
        do {
            try readiness.start()
        } catch {
            stop()
            throw error
        }
        startSweeping()
    }

    /// The listening socket's token; connections' are their ids, from 1 on, never reused.
    private static let listenToken: UInt64 = 0

    /// A readiness event (I/O queue): accepts, or writes and reads what a connection can.
    private func ready(_ token: UInt64, _ events: UInt32) {
        if token == Self.listenToken {
            guard let (readiness, listenFD) = lifecycle.withLock({ l in l.stopped ? nil : l.readiness.map { ($0, l.listenFD) } }) else { return }
            if let code = acceptAll(listenFD: listenFD, readiness: readiness) {
                pauseAccepting(code)
            } else {
                readiness.rearm(listenFD, token: Self.listenToken, events: Readiness.readable | Readiness.oneShot)
            }
            return
        }
        guard let connection = table.withLock({ $0[token] }) else { return }  // gone already
        if events & (Readiness.writable | Readiness.error | Readiness.hangup) != 0 {
            connection.flush()
        }
        if events & (Readiness.readable | Readiness.error | Readiness.hangup | Readiness.peerHangup) != 0 {
            readAvailable(connection)
        }
    }

    /// Accept found no descriptor (I/O queue): the listening socket stays unwatched until a
    /// connection closes or `acceptBackoff` passes; counted and said (`noteExhaustion`).
    private func pauseAccepting(_ code: Int32) {
        exhaustion.paused = true
        noteExhaustion(code)
        guard !exhaustion.retryScheduled else { return }
        exhaustion.retryScheduled = true
        let backoff = Int(ControlConnection.milliseconds(configuration.acceptBackoff))
        ioQueue.asyncAfter(deadline: .now() + .milliseconds(backoff)) { [weak self] in
            guard let self else { return }
            self.exhaustion.retryScheduled = false
            self.resumeAccepting()
        }
    }

    /// Counts running out (I/O queue; once until a connection is accepted again) and says it, once
    /// when it starts and at most once a minute however often it comes back. `atReserve`: accept
    /// gave a number the daemon keeps (`DescriptorReserve`), not an error.
    private func noteExhaustion(_ code: Int32, atReserve: Bool = false) {
        if !exhaustion.exhausted {
            exhaustion.exhausted = true
            exhaustionCount.add(1, ordering: .relaxed)
            let now = monotonicNanoseconds()
            if let last = exhaustion.lastSaid, now &- last < 60_000_000_000 {
                exhaustion.unsaid += 1
            } else {
                let again = exhaustion.unsaid > 0 ? " (\(exhaustion.unsaid) more times since this was last said)" : ""
                let what = code == EMFILE || code == ENFILE ? "file descriptors" : "memory"
                let why = atReserve ? "only the last \(DescriptorReserve.kept), kept for its own files, are left"
                    : String(cString: strerror(code))
                let then = atReserve ? "are refused (limitExceeded)" : "wait"
                configuration.notice?(
                    "control socket: out of \(what) (\(why)): new connections \(then) until one is free; "
                        + "connections already open are served\(again)")
                exhaustion.lastSaid = now
                exhaustion.unsaid = 0
            }
        }
    }

    /// Watches the listening socket again, if accepting was paused (I/O queue).
    private func resumeAccepting() {
        guard exhaustion.paused,
            let (readiness, listenFD) = lifecycle.withLock({ l in l.stopped ? nil : l.readiness.map { ($0, l.listenFD) } })
        else { return }
        exhaustion.paused = false
        readiness.rearm(listenFD, token: Self.listenToken, events: Readiness.readable | Readiness.oneShot)
    }

    /// Every quarter of the shorter timeout (within 0.1 to 5 s), on the I/O queue: closes the
    /// connections that stopped reading (`slowTimeout`) and those idle holding nothing (`idleTimeout`).
    private func startSweeping() {
        let timeouts = [configuration.idleTimeout, configuration.slowTimeout].compactMap { $0 }
        guard let shortest = timeouts.min() else { return }
        let period = min(max(Double(ControlConnection.milliseconds(shortest)) / 4000, 0.1), 5)
        let timer = DispatchSource.makeTimerSource(queue: ioQueue)
        timer.schedule(deadline: .now() + period, repeating: period)
        timer.setEventHandler { [weak self] in self?.sweep() }
        sweeper = timer
        timer.resume()
    }

    private func sweep() {
        let now = monotonicNanoseconds()
        func nanoseconds(_ d: Duration?) -> UInt64? { d.map { UInt64(ControlConnection.milliseconds($0)) * 1_000_000 } }
        let slow = nanoseconds(configuration.slowTimeout)
        let idle = nanoseconds(configuration.idleTimeout)
        for connection in table.withLock({ Array($0.values) }) {
            let (pendingSince, lastReceived, negotiated) = connection.state.withLock { s in
                (s.closing == nil ? s.pendingSince : nil, s.lastReceived, s.version != nil)
            }
            if let slow, let since = pendingSince, now &- since > slow {
                connection.beginClose(reason: .slowConsumer, finalFrame: nil, discardOutbound: true)
                continue
            }
            if let idle, negotiated, now &- lastReceived > idle, pendingSince == nil {
                let why = "idle for \(idle / 1_000_000_000) s holding nothing"
                connection.queue.async { [handler, self] in
                    guard handler.controlServer(self, holdsNothing: connection) else { return }
                    connection.beginClose(
                        reason: .closedByServer(ErrorBody(code: .limitExceeded, message: why)),
                        finalFrame: ControlMessage.error(ErrorMessage(code: .limitExceeded, message: why)).encodedFrame())
                }
            }
        }
    }

    /// Stops serving: closes every connection (handlers see `.serverStopped`) and removes the
    /// socket file if it is still the one this server bound. Do not call it from a handler
    /// that blocks the I/O queue (handlers run elsewhere, so calling it from one is fine).
    package func stop() {
        let snapshot = lifecycle.withLock { l -> (Readiness?, Int32, (dev: UInt64, ino: UInt64)?)? in
            guard l.started, !l.stopped else { return nil }
            l.stopped = true
            return (l.readiness, l.listenFD, l.boundInode)
        }
        guard let (readiness, listenFD, bound) = snapshot else { return }
        let work = { [self] in
            sweeper?.cancel()
            sweeper = nil
            for connection in table.withLock({ Array($0.values) }) {
                teardown(connection, reason: .serverStopped)
            }
            // The readiness thread never waits for the I/O queue, so it can be joined here;
            // events it handed over before find `stopped` or no connection and do nothing.
            readiness?.stop()
            Glibc.close(listenFD)
        }
        if DispatchQueue.getSpecific(key: Self.ioQueueKey) == true { work() } else { ioQueue.sync(execute: work) }
        removeSocketFile(ifBound: bound)
    }

    /// Raises this process's soft descriptor limit to its hard limit (a daemon serving
    /// thousands of clients needs more than the usual 1024). Returns the new soft limit.
    @discardableResult
    package static func raiseFileDescriptorLimit() -> UInt64 {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return 0 }
        if limit.rlim_cur < limit.rlim_max {
            limit.rlim_cur = limit.rlim_max
            _ = setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
        }
        return UInt64(limit.rlim_cur)
    }

    // MARK: Internals shared with ControlConnection

    func nextAskID() -> AskID {
        AskID(counters.withLock { c in c.ask += 1; return c.ask })
    }

    // MARK: The I/O queue

    /// Scratch buffer for reads; only used on the I/O queue.
    private nonisolated(unsafe) let readBuffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 * 1024, alignment: 8)

    /// A server let go without `stop()` stops all the same: its readiness thread ends and is
    /// joined, its connections and listening socket are closed, its socket file removed. Their
    /// handler is not told (`didClose` takes the server, which is gone); stop first for that.
    deinit {
        let snapshot = lifecycle.withLock { l -> (Readiness?, Int32, (dev: UInt64, ino: UInt64)?)? in
            guard l.started, !l.stopped else { return nil }
            l.stopped = true
            return (l.readiness, l.listenFD, l.boundInode)
        }
        if let (readiness, listenFD, bound) = snapshot {
            sweeper?.cancel()
            for connection in table.withLock({ Array($0.values) }) { _ = connection.finish(reason: .serverStopped) }
            readiness?.stop()
            Glibc.close(listenFD)
            removeSocketFile(ifBound: bound)
        }
        readBuffer.deallocate()
    }

    private func removeSocketFile(ifBound bound: (dev: UInt64, ino: UInt64)?) {
        var info = stat()
        if let bound, stat(configuration.socketPath, &info) == 0,
            UInt64(info.st_dev) == bound.dev, UInt64(info.st_ino) == bound.ino
        {
            unlink(configuration.socketPath)
        }
    }

    /// Accepts every connection waiting. Returns nil once none is left (or on an error the next
    /// wake-up may not have), the errno when there is no descriptor (or memory) to take the next.
    private func acceptAll(listenFD: Int32, readiness: Readiness) -> Int32? {
        while true {
            // accept4 is GNU-only in Glibc's module; accept + fcntl does the same here since
            // the daemon does not fork.
            let fd = retryingEINTR { accept(listenFD, nil, nil) }
            if fd < 0 {
                switch errno {
                case EMFILE, ENFILE, ENOBUFS, ENOMEM: return errno
                case ECONNABORTED, EPROTO: continue  // that one gave up; the next may be there
                default: return nil  // EAGAIN: all taken
                }
            }
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            // A number the daemon keeps for its own opens (`DescriptorReserve`): refused at once with
            // a clear answer, whoever connects (root's and the owner's too), as the connections over
            // `maxConnections` are; counted and said as running out is. Not paused: the backlog
            // drains, each client told, and a connection that closes makes room below the floor.
            guard DescriptorReserve.admits(fd) else {
                refuse(fd, because: DescriptorReserve.refusal(for: "another connection"))
                noteExhaustion(EMFILE, atReserve: true)
                continue
            }
            exhaustion.exhausted = false
            if (try? Sys.setNonBlocking(fd)) == nil {
                Glibc.close(fd)
                continue
            }
            guard let peer = try? PeerCredentials.of(socket: fd) else {
                Glibc.close(fd)
                continue
            }
            let id = counters.withLock { c in c.connection += 1; return c.connection }
            let queue = DispatchQueue(label: "coordfs.control.connection", target: delivery)
            let connection = ControlConnection(id: id, fd: fd, peer: peer, server: self, readiness: readiness, queue: queue, maxFrameSize: configuration.maxFrameSize)
            let refusal = table.withLock { t -> String? in
                let uid = peer.uid
                if configuration.exemptUsers.contains(uid) {
                    // Root and the owner: never locked out by other users.
                    guard t.count < configuration.maxConnections + configuration.reservedConnections else {
                        return "the daemon already serves \(t.count) connections"
                    }
                } else {
                    guard t.count < configuration.maxConnections else {
                        return "the daemon already serves \(configuration.maxConnections) connections (max_connections)"
                    }
                    let mine = perUser.withLock { $0[uid] ?? 0 }
                    guard mine < configuration.maxConnectionsPerUser else {
                        return "uid \(uid) already has \(mine) connections (max_user_connections)"
                    }
                    if let why = configuration.share?.take(uid) { return why }
                }
                t[id] = connection
                perUser.withLock { $0[uid, default: 0] += 1 }
                return nil
            }
            if let refusal {
                refuse(fd, because: refusal)
                continue
            }
            // Registered once for its life, edge-triggered: reading drains the socket to EAGAIN,
            // writing goes on until the buffer is empty or the socket full, and each change after
            // that is reported again.
            let events = Readiness.readable | Readiness.writable | Readiness.peerHangup | Readiness.edgeTriggered
            if !readiness.register(fd, token: id, events: events) {
                teardown(connection, reason: .ioError(errno))
                continue
            }
            let timeout = configuration.helloTimeout
            queue.asyncAfter(deadline: .now() + .milliseconds(Int(ControlConnection.milliseconds(timeout)))) { [weak connection] in
                guard let connection, connection.version == nil else { return }
                connection.beginClose(
                    reason: .protocolError(ProtocolError(.notNegotiated, "no hello within \(timeout)")),
                    finalFrame: ControlMessage.error(ErrorMessage(code: .notNegotiated, message: "no hello within \(timeout)")).encodedFrame())
            }
        }
    }

    /// Tells an accepted client why it is not served (`limitExceeded`) and closes its socket.
    private func refuse(_ fd: Int32, because refusal: String) {
        refusedCount.add(1, ordering: .relaxed)
        let frame = ControlMessage.error(ErrorMessage(code: .limitExceeded, message: refusal)).encodedFrame()
        _ = frame.withUnsafeBytes { Sys.send(fd, $0) }
        Glibc.close(fd)
    }

    private func readAvailable(_ connection: ControlConnection) {
        let buffer = readBuffer
        guard let fd = connection.state.withLock({ $0.finished ? nil : $0.fd }) else { return }
        // Read until the socket is drained (readiness is edge-triggered: nothing is reported
        // again until more arrives, and data and a hangup arriving together give one event).
        // After 16 reads, yield the queue and continue later so one chatty client cannot starve
        // the rest.
        for _ in 0..<16 {
            let n = Sys.read(fd, buffer)
            if n > 0 {
                connection.state.withLock { $0.lastReceived = monotonicNanoseconds() }
                connection.decoder.append(UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
                processFrames(connection)
                continue
            }
            if n == 0 {
                var reason: ControlConnection.CloseReason = .peerClosed
                do { try connection.decoder.finish() } catch { reason = .protocolError(error) }
                teardown(connection, reason: reason)
                return
            }
            if errno == EAGAIN || errno == EWOULDBLOCK { return }
            teardown(connection, reason: errno == ECONNRESET ? .peerClosed : .ioError(errno))
            return
        }
        ioQueue.async { [weak self, weak connection] in
            guard let self, let connection else { return }
            self.readAvailable(connection)
        }
    }

    private func processFrames(_ connection: ControlConnection) {
        while !connection.isClosed {
            let payload: [UInt8]
            do {
                guard let next = try connection.decoder.nextFrame() else { return }
                payload = next
            } catch {
                reject(connection, error)
                return
            }
            let message: ControlMessage
            do {
                message = try ControlMessage.decode(payload: payload)
            } catch {
                reject(connection, error)
                continue
            }
            dispatch(message, on: connection)
        }
    }

    /// Sends the error; closes the connection when the error says so.
    private func reject(_ connection: ControlConnection, _ error: ProtocolError) {
        let frame = ControlMessage.error(ErrorMessage(id: error.requestID.map(RequestID.init(rawValue:)), error)).encodedFrame()
        if error.closesConnection {
            connection.beginClose(reason: .protocolError(error), finalFrame: frame)
        } else {
            _ = connection.enqueue(frame)
        }
    }

    private func dispatch(_ message: ControlMessage, on connection: ControlConnection) {
        let negotiated = connection.version != nil
        switch message {
        case .hello(let hello):
            if negotiated {
                reject(connection, ProtocolError(.notNegotiated, "hello sent twice", requestID: hello.id.rawValue))
                return
            }
            guard let version = ProtocolVersion.negotiate(hello.versions) else {
                reject(connection, ProtocolError(
                    .unsupportedVersion,
                    "none of the offered versions \(hello.versions) is supported; this daemon speaks \(ProtocolVersion.supported)",
                    requestID: hello.id.rawValue))  // always closes, even with an id
                return
            }
            connection.state.withLock {
                $0.version = version
                $0.clientName = hello.client
            }
            connection.send(.welcome(Welcome(
                id: hello.id, version: version, server: configuration.serverName,
                maxFrameSize: configuration.maxFrameSize, mountPoint: configuration.mountPoint)))
            connection.deliver { [handler, self] in handler.controlServer(self, didOpen: connection) }
            return
        case _ where !negotiated:
            reject(connection, ProtocolError(.notNegotiated, "the first message must be hello, not \(message.typeName)"))
            return
        case .close:
            connection.beginClose(reason: .peerClosed, finalFrame: nil)
            return
        case .answer(let answer):
            if connection.complete(answer) { return }
        default:
            break
        }
        if message.direction == .toClient {
            let id = message.requestID
            let error = ProtocolError(.unexpectedMessage, "\(message.typeName) is sent by the daemon, not by clients", requestID: id?.rawValue)
            _ = connection.send(.error(ErrorMessage(id: id, error)))
            return
        }
        connection.deliver { [handler, self] in handler.controlServer(self, didReceive: message, on: connection) }
    }

    /// I/O queue only.
    private func teardown(_ connection: ControlConnection, reason: ControlConnection.CloseReason) {
        guard let (final, asks) = connection.finish(reason: reason) else { return }
        let removed = table.withLock { t -> Bool in
            guard t.removeValue(forKey: connection.id) != nil else { return false }
            perUser.withLock { counts in
                let uid = connection.peer.uid
                if let n = counts[uid], n > 1 { counts[uid] = n - 1 } else { counts[uid] = nil }
            }
            return true
        }
        // Its descriptor is closed (`finish`): its part of the share is free again.
        if removed, !configuration.exemptUsers.contains(connection.peer.uid) { configuration.share?.give(connection.peer.uid) }
        connection.queue.async { [handler, self] in
            for ask in asks { ask.completion(.disconnected) }
            handler.controlServer(self, didClose: connection, reason: final)
        }
        resumeAccepting()  // a descriptor is free again
    }
}

/// The server, for the readiness thread's closure, which must not hold it.
private final class WeakServer: Sendable {
    weak let server: ControlServer?
    init(_ server: ControlServer) { self.server = server }
}
