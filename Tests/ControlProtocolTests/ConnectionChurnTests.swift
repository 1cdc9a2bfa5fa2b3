import Foundation
import Glibc
import Synchronization
import XCTest
@testable import ControlProtocol

/// Answers every `status` with a burst of large frames, so a client that does not read at once
/// makes the daemon's sends hit EAGAIN (and buffer, and wait for the socket to be writable).
private final class BurstHandler: ControlServerHandler, @unchecked Sendable {
    let opened = Atomic<Int>(0)
    let closed = Atomic<Int>(0)
    /// 24 frames of 16 KB (made once), then an `error` with the query's id to end the burst.
    let frames = Array(repeating: ControlMessage.notification(PresenterNotification(
        presenter: PresenterID(1),
        event: .unknown(event: "pad", fields: JSONObject(["x": .string(String(repeating: "x", count: 16_000))])))).encodedFrame(), count: 24)

    func controlServer(_ server: ControlServer, didOpen connection: ControlConnection) { opened.add(1, ordering: .relaxed) }
    func controlServer(_ server: ControlServer, didClose connection: ControlConnection, reason: ControlConnection.CloseReason) {
        closed.add(1, ordering: .relaxed)
    }
    func controlServer(_ server: ControlServer, didReceive message: ControlMessage, on connection: ControlConnection) {
        guard case .status(let query) = message else { return }
        let end = ControlMessage.error(ErrorMessage(id: query.id, ProtocolError(.unknownAccess, "end of burst"))).encodedFrame()
        connection.sendInOrder(frames + [end])
    }
}

/// Many clients at once connecting, asking for more than the socket holds, reading it slowly in
/// pieces, and going away abruptly (with unread bytes on both sides, or half-closed first), while
/// new ones connect: the daemon's readiness handling for each connection starts, waits for
/// writability many times and ends, all the time, on many descriptors whose numbers are reused at
/// once. Session 24 saw libdispatch's manager thread crash (`_dispatch_event_loop_drain`, a bad
/// pointer) in a test process running a daemon; this is that load. The daemon must survive it and
/// serve the next client. `COORDFS_CHURN_SECONDS` (default 8) sets how long it runs.
final class ConnectionChurnTests: XCTestCase {
    func testManyClientsComingSlowAndGoingAbruptlyLeaveADaemonThatServes() throws {
        let directory = try TemporaryDirectory()
        let path = directory.path + "/churn.sock"
        let handler = BurstHandler()
        let server = ControlServer(
            configuration: .init(socketPath: path, maxOutboundBytes: 64 << 20, slowTimeout: .seconds(30)), handler: handler)
        try server.start()
        defer { server.stop() }

        let seconds = Double(ProcessInfo.processInfo.environment["COORDFS_CHURN_SECONDS"] ?? "") ?? 8
        let deadline = Date().addingTimeInterval(seconds)
        let clients = 16
        let rounds = Atomic<Int>(0)
        let stopped = Atomic<Bool>(false)
        let failures = Mutex<[String]>([])
        DispatchQueue.concurrentPerform(iterations: clients) { worker in
            var seed = UInt64(worker + 1) &* 0x9E37_79B9_7F4A_7C15
            func next(_ bound: Int) -> Int {
                seed ^= seed << 13; seed ^= seed >> 7; seed ^= seed << 17
                return Int(seed % UInt64(bound))
            }
            var buffer = [UInt8](repeating: 0, count: 16 * 1024)
            while Date() < deadline {
                if stopped.load(ordering: .relaxed) { return }
                let fd: Int32
                do throws(ChurnFailure) {
                    fd = try connect(path)
                } catch {
                    failures.withLock { $0.append(error.description) }
                    stopped.store(true, ordering: .relaxed)
                    return
                }
                var request = ControlMessage.hello(Hello(id: RequestID(1))).encodedFrame()
                for id in 0..<(1 + next(4)) {
                    request += ControlMessage.status(StatusQuery(id: RequestID(UInt64(2 + id)))).encodedFrame()
                }
                if (try? Sys.sendAll(fd, request)) == nil {
                    close(fd)
                    continue
                }
                // Read some of it slowly, in small pieces: the daemon's buffer drains and fills
                // again, so it waits for writability again and again.
                let pieces = next(24)
                for _ in 0..<pieces {
                    let n = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, 1 + next($0.count)) }
                    if n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) {
                        // Nothing for 10 s though the daemon has more for this client: it no
                        // longer hears that the socket takes bytes again.
                        failures.withLock { $0.append("a reading client got nothing for 10 s (the daemon stopped writing)") }
                        stopped.store(true, ordering: .relaxed)
                        break
                    }
                    if n <= 0 { break }
                    if next(16) == 0 { usleep(UInt32(next(1000))) }
                }
                switch next(3) {
                case 0: close(fd)  // unread bytes left: the daemon sees a reset
                case 1:
                    shutdown(fd, Int32(SHUT_WR))
                    usleep(UInt32(next(500)))
                    close(fd)
                default:
                    shutdown(fd, Int32(SHUT_RDWR))
                    close(fd)
                }
                rounds.add(1, ordering: .relaxed)
            }
        }
        XCTAssertEqual(failures.withLock { $0 }, [])
        XCTAssertGreaterThan(rounds.load(ordering: .relaxed), clients)

        // Every connection ends (eventually), and a new client is served as before.
        let settle = Date().addingTimeInterval(30)
        while server.connectionCount > 0 && Date() < settle { usleep(20_000) }
        XCTAssertEqual(server.connectionCount, 0, "every connection of the churn ended")
        let raw = try RawClient(path: path)
        XCTAssertEqual(try raw.hello().version, 1)
        try raw.send(.status(StatusQuery(id: RequestID(9))))
        var frames = 0
        while let message = try raw.receive() {
            frames += 1
            if case .error(let error) = message {
                XCTAssertEqual(error.id, RequestID(9))
                break
            }
        }
        XCTAssertEqual(frames, 25, "the whole burst of the last client arrived")
        print("ConnectionChurnTests: \(rounds.load(ordering: .relaxed)) connections in \(seconds) s, \(handler.opened.load(ordering: .relaxed)) negotiated")
    }
}

private struct ChurnFailure: Error, CustomStringConvertible {
    let description: String
}

/// A connected client socket whose connect, sends and reads give up after 10 s (a daemon that
/// stopped accepting or writing fails the test instead of hanging it).
private func connect(_ path: String) throws(ChurnFailure) -> Int32 {
    let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
    guard fd >= 0 else { throw ChurnFailure(description: "socket: errno \(errno)") }
    var timeout = timeval(tv_sec: 10, tv_usec: 0)
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    let result = (try? withUnixAddress(path) { address, length in Glibc.connect(fd, address, length) < 0 ? errno : 0 }) ?? EINVAL
    if result != 0 {
        close(fd)
        throw ChurnFailure(description: result == EAGAIN
            ? "connect waited 10 s (the daemon stopped accepting)" : "connect: errno \(result)")
    }
    return fd
}
