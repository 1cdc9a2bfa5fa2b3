import Foundation
import Glibc
import XCTest
@testable import ControlProtocol

/// A fresh directory under /tmp, removed on deinit.
final class TemporaryDirectory {
    let path: String
    init(mode: mode_t = 0o700) throws {
        var template = Array("/tmp/coordfs-proto-XXXXXX".utf8CString)
        guard let result = mkdtemp(&template) else { throw POSIXError(.EIO) }
        path = String(cString: result)
        chmod(path, mode)
    }
    deinit { try? FileManager.default.removeItem(atPath: path) }
}

extension String {
    func write(toFile path: String) throws {
        try Data(utf8).write(to: URL(fileURLWithPath: path))
    }
}

/// Thread-safe recorder for what handlers saw.
final class Recorder<Element: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var items: [Element] = []
    private let signal = DispatchSemaphore(value: 0)

    func append(_ item: Element) {
        lock.withLock { items.append(item) }
        signal.signal()
    }

    var all: [Element] { lock.withLock { items } }

    /// Waits until `predicate` holds for the recorded items (or fails after `timeout`).
    @discardableResult
    func wait(timeout: TimeInterval = 5, file: StaticString = #filePath, line: UInt = #line, until predicate: ([Element]) -> Bool) -> [Element] {
        let deadline = Date().addingTimeInterval(timeout)
        while true {
            let snapshot = all
            if predicate(snapshot) { return snapshot }
            if Date() >= deadline {
                XCTFail("timed out waiting; recorded: \(snapshot)", file: file, line: line)
                return snapshot
            }
            _ = signal.wait(timeout: .now() + 0.05)
        }
    }
}

/// A small daemon over the real transport, enough to exercise the protocol end to end:
/// presenters per path; `coordinate` asks the other presenters of each path (`save` before
/// reads, `accommodateDeletion` before deleting writes, `relinquishToWriter` before other
/// writes), then grants; `release` notifies them; `status` lists everything; a disconnected
/// client's presenters vanish at once.
final class MiniDaemon: ControlServerHandler, @unchecked Sendable {
    struct PresenterRecord {
        let id: PresenterID
        var path: MountPath
        let kind: ItemKind
        let asks: Set<AskKind>
        let connection: ControlConnection
    }

    let lock = NSLock()
    var presenters: [PresenterID: PresenterRecord] = [:]
    var accesses: [AccessID: (ControlConnection, [Intent], PresenterID?)] = [:]
    var nextPresenter: UInt64 = 100
    var nextAccess: UInt64 = 500
    let events = Recorder<String>()
    let askOutcomes = Recorder<AskOutcome>()
    var askDeadline: Duration = .seconds(2)
    var server: ControlServer!

    init(socketPath: String, permissions: UInt32 = 0o600) {
        server = ControlServer(configuration: .init(socketPath: socketPath, permissions: permissions, mountPoint: "/mnt/test"), handler: self)
    }

    func presenterIDs() -> [PresenterID] { lock.withLock { presenters.keys.sorted() } }

    func controlServer(_ server: ControlServer, didOpen connection: ControlConnection) {
        events.append("open \(connection.peer.pid)")
    }

    func controlServer(_ server: ControlServer, didClose connection: ControlConnection, reason: ControlConnection.CloseReason) {
        let dropped = lock.withLock { () -> [PresenterID] in
            let gone = presenters.values.filter { $0.connection === connection }.map(\.id)
            for id in gone { presenters[id] = nil }
            accesses = accesses.filter { $0.value.0 !== connection }
            return gone.sorted()
        }
        events.append("close \(reason) dropped \(dropped.map(\.rawValue))")
    }

    func controlServer(_ server: ControlServer, didReceive message: ControlMessage, on connection: ControlConnection) {
        switch message {
        case .register(let r):
            let id = lock.withLock { () -> PresenterID in
                nextPresenter += 1
                let id = PresenterID(nextPresenter)
                presenters[id] = PresenterRecord(id: id, path: r.path, kind: r.kind, asks: r.asks, connection: connection)
                return id
            }
            connection.send(.registered(Registered(id: r.id, presenter: id)))
            events.append("register \(r.path) as \(id.rawValue)")
        case .unregister(let u):
            let known = lock.withLock { presenters.removeValue(forKey: u.presenter) != nil && true }
            if known {
                connection.send(.ok(OK(id: u.id)))
            } else {
                connection.reply(to: u.id, error: ProtocolError(.unknownPresenter, "\(u.presenter) is not registered"))
            }
        case .coordinate(let c):
            Task { await self.coordinate(c, on: connection) }
        case .release(let r):
            let held = lock.withLock { accesses.removeValue(forKey: r.access) }
            guard let (owner, intents, onBehalf) = held, owner === connection else {
                connection.reply(to: r.id, error: ProtocolError(.unknownAccess, "\(r.access) is not held by this connection"))
                return
            }
            connection.send(.ok(OK(id: r.id)))
            for change in r.changes {
                for p in others(of: change.path, except: onBehalf) {
                    switch change {
                    case .changed: p.connection.notify(p.id, .didChange)
                    case .deleted: p.connection.notify(p.id, .didDelete)
                    case .moved(_, let to):
                        lock.withLock { presenters[p.id]?.path = to }
                        p.connection.notify(p.id, .didMove(to: to))
                    }
                }
            }
            _ = intents
        case .status(let s):
            let report = lock.withLock { () -> StatusReport in
                StatusReport(
                    id: s.id,
                    presenters: presenters.values.sorted { $0.id < $1.id }.map {
                        .init(presenter: $0.id, path: $0.path, kind: $0.kind, pid: $0.connection.peer.pid, uid: $0.connection.peer.uid)
                    },
                    accesses: accesses.sorted { $0.key < $1.key }.map {
                        .init(access: $0.key, intents: $0.value.1, pid: $0.value.0.peer.pid, uid: $0.value.0.peer.uid, heldMs: 0)
                    })
            }
            connection.send(.statusReport(report))
        default:
            events.append("stray \(message.typeName)")
        }
    }

    private func others(of path: MountPath, except presenter: PresenterID?) -> [PresenterRecord] {
        lock.withLock { presenters.values.filter { $0.path == path && $0.id != presenter }.sorted { $0.id < $1.id } }
    }

    private func coordinate(_ request: Coordinate, on connection: ControlConnection) async {
        for intent in request.intents {
            for p in others(of: intent.path, except: request.presenter) {
                let kind: AskKind
                switch intent {
                case .reading: kind = .save
                case .writing(_, let options): kind = options.contains(.forDeleting) ? .accommodateDeletion : .relinquishToWriter
                }
                guard p.asks.contains(kind) else { continue }
                let outcome = await p.connection.ask(kind, presenter: p.id, path: p.path, deadline: askDeadline)
                askOutcomes.append(outcome)
            }
        }
        let access = lock.withLock { () -> AccessID in
            nextAccess += 1
            let id = AccessID(nextAccess)
            accesses[id] = (connection, request.intents, request.presenter)
            return id
        }
        connection.send(.granted(Granted(id: request.id, access: access)))
    }
}

/// A raw blocking client for tests that need to send exact bytes.
final class RawClient {
    let fd: Int32
    var decoder = FrameDecoder()

    init(path: String) throws {
        fd = try connectUnixSocket(path)
        var timeout = timeval(tv_sec: 5, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    }

    deinit { close(fd) }

    func send(_ bytes: [UInt8]) throws { try Sys.sendAll(fd, bytes) }
    func send(_ message: ControlMessage) throws { try send(message.encodedFrame()) }

    /// The next message, or nil at end of stream.
    func receive() throws -> ControlMessage? {
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            if let payload = try decoder.nextFrame() { return try ControlMessage.decode(payload: payload) }
            let n = buffer.withUnsafeMutableBytes { Sys.read(fd, $0) }
            if n == 0 || (n < 0 && errno == ECONNRESET) { return nil }
            if n < 0 { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
            decoder.append(buffer[0..<n])
        }
    }

    func hello() throws -> Welcome {
        try send(.hello(Hello(id: RequestID(1))))
        guard case .welcome(let welcome)? = try receive() else { throw POSIXError(.EPROTO) }
        return welcome
    }
}
