import Foundation
import Glibc
import XCTest
@testable import ControlProtocol

/// Delegate that answers asks after an optional delay and records everything.
final class RecordingDelegate: ControlClientDelegate, @unchecked Sendable {
    let asks = Recorder<Ask>()
    let notifications = Recorder<PresenterNotification>()
    let closes = Recorder<String>()
    var answerError: ErrorBody?
    var answers = true

    func controlClient(_ client: ControlClient, didReceive ask: Ask) {
        asks.append(ask)
        if answers { client.answer(ask.id, error: answerError) }
    }
    func controlClient(_ client: ControlClient, didReceive notification: PresenterNotification) { notifications.append(notification) }
    func controlClient(_ client: ControlClient, didCloseWith error: ControlTransportError?) { closes.append("\(String(describing: error))") }
}

final class ServerTests: XCTestCase {
    var directory: TemporaryDirectory!
    var daemon: MiniDaemon!
    var socketPath: String { directory.path + "/control.sock" }

    override func setUpWithError() throws {
        directory = try TemporaryDirectory(mode: 0o755)
        daemon = MiniDaemon(socketPath: directory.path + "/control.sock")
        try daemon.server.start()
    }

    override func tearDown() {
        daemon.server.stop()
        daemon = nil
        directory = nil
    }

    func testRegisterAskAnswerNotifyStatusAndDisconnect() async throws {
        let presenterDelegate = RecordingDelegate()
        let presenterClient = try ControlClient.connect(socketPath: socketPath, clientName: "presenter", delegate: presenterDelegate)
        XCTAssertEqual(presenterClient.welcome.version, 1)
        XCTAssertEqual(presenterClient.welcome.mountPoint, "/mnt/test")
        let file = Samples.path("docs/report.txt")
        let presenter = try await presenterClient.register(file, kind: .file, asks: [.save, .relinquishToWriter])
        XCTAssertEqual(daemon.presenterIDs(), [presenter])

        let writer = try ControlClient.connect(socketPath: socketPath, clientName: "writer")
        // A write: the presenter is asked first, the grant follows its answer.
        let access = try await writer.coordinate([.writing(file)])
        let asks = presenterDelegate.asks.all
        XCTAssertEqual(asks.map(\.kind), [.relinquishToWriter])
        XCTAssertEqual(asks.first?.presenter, presenter)
        XCTAssertEqual(asks.first?.path, file)
        guard case .answered(let latency) = daemon.askOutcomes.all.first else { return XCTFail("\(daemon.askOutcomes.all)") }
        XCTAssertLessThan(latency, 2_000_000_000)

        // Status shows both the presenter (with its pid) and the held access.
        let status = try await writer.status()
        XCTAssertEqual(status.presenters.map(\.presenter), [presenter])
        XCTAssertEqual(status.presenters.first?.pid, getpid())
        XCTAssertEqual(status.accesses.map(\.access), [access])

        // Release with a change: the presenter is told after.
        try await writer.release(access, changes: [.changed(file)])
        presenterDelegate.notifications.wait { $0.count == 1 }
        XCTAssertEqual(presenterDelegate.notifications.all.first, PresenterNotification(presenter: presenter, event: .didChange))

        // A failed answer reaches the daemon as such.
        presenterDelegate.answerError = ErrorBody(code: .failed, message: "cannot save now")
        let second = try await writer.coordinate([.reading(file)])
        daemon.askOutcomes.wait { $0.count == 2 }
        guard case .failed(let body, _) = daemon.askOutcomes.all[1] else { return XCTFail("\(daemon.askOutcomes.all)") }
        XCTAssertEqual(body.message, "cannot save now")
        try await writer.release(second)

        // Errors from the daemon come back as typed errors and leave the connection open.
        var refusal: ControlTransportError?
        do {
            try await writer.release(AccessID(424242))
        } catch {
            refusal = error
        }
        XCTAssertEqual(refusal, .protocolError(ProtocolError(.unknownAccess, "access#424242 is not held by this connection", requestID: refusal.flatMap { if case .protocolError(let e) = $0 { return e.requestID } else { return nil } })))
        XCTAssertTrue(writer.isConnected)

        // The presenter's process "dies": its presenter is dropped at once.
        presenterClient.close()
        daemon.events.wait { $0.contains { $0.hasPrefix("close peerClosed dropped [\(presenter.rawValue)]") } }
        XCTAssertEqual(daemon.presenterIDs(), [])
        presenterDelegate.closes.wait { $0.count == 1 }
        writer.close()
    }

    func testPendingAskEndsAtOnceWhenPresenterDisconnects() async throws {
        daemon.askDeadline = .seconds(30)
        let silent = RecordingDelegate()
        silent.answers = false
        let presenterClient = try ControlClient.connect(socketPath: socketPath, delegate: silent)
        let file = Samples.path("slow.txt")
        _ = try await presenterClient.register(file, kind: .file)
        let writer = try ControlClient.connect(socketPath: socketPath)
        let started = Date()
        async let grant = writer.coordinate([.writing(file)])
        silent.asks.wait { $0.count == 1 }
        presenterClient.close()
        _ = try await grant
        XCTAssertLessThan(Date().timeIntervalSince(started), 5, "the ask ended at the disconnect, not at its 30 s deadline")
        XCTAssertEqual(daemon.askOutcomes.all, [.disconnected])
        writer.close()
    }

    /// An answer completes its ask in order with what the client sent before it: a message still
    /// being handled when the answer arrives is handled first (the client's `setUnsavedChanges`
    /// before its answer to a save ask must count for that save); with nothing pending, the
    /// answer completes at once.
    func testAnAnswerNeverOvertakesWhatTheClientSentBeforeIt() throws {
        final class SlowHandler: ControlServerHandler, @unchecked Sendable {
            let seen = Recorder<String>()
            let opened = Recorder<ControlConnection>()
            func controlServer(_ server: ControlServer, didOpen connection: ControlConnection) { opened.append(connection) }
            func controlServer(_ server: ControlServer, didReceive message: ControlMessage, on connection: ControlConnection) {
                usleep(100_000)
                seen.append(message.typeName)
            }
        }
        let handler = SlowHandler()
        let path = directory.path + "/ordered.sock"
        let server = ControlServer(configuration: .init(socketPath: path), handler: handler)
        try server.start()
        defer { server.stop() }
        let raw = try RawClient(path: path)
        _ = try raw.hello()
        let connection = handler.opened.wait { $0.count == 1 }[0]
        for round in 0..<2 {
            let asked = Recorder<Ask>()
            connection.ask(.save, presenter: PresenterID(1), path: Samples.path("a.txt"), deadline: .seconds(10)) { outcome in
                if case .answered = outcome { handler.seen.append("answered") } else { handler.seen.append("\(outcome)") }
            }
            guard case .ask(let ask)? = try raw.receive() else { return XCTFail("no ask") }
            asked.append(ask)
            if round == 0 {
                // Both in one write: the answer reaches the server while the first is handled.
                try raw.send(ControlMessage.setUnsavedChanges(SetUnsavedChanges(id: RequestID(7), presenter: PresenterID(1), unsaved: false)).encodedFrame()
                             + ControlMessage.answer(Answer(id: ask.id)).encodedFrame())
                XCTAssertEqual(handler.seen.wait { $0.count == 2 }, ["setUnsavedChanges", "answered"])
            } else {
                try raw.send(.answer(Answer(id: ask.id)))
                XCTAssertEqual(handler.seen.wait { $0.count == 3 }.last, "answered")
            }
        }
    }

    /// A delegate that takes its calls on the client's reader thread gets asks and notifications
    /// in order, and its answers go out from there.
    func testAReaderThreadDelegateAnswersAsks() async throws {
        final class Inline: ControlClientDelegate, @unchecked Sendable {
            let asks = Recorder<Ask>()
            var receivesOnReaderThread: Bool { true }
            func controlClient(_ client: ControlClient, didReceive ask: Ask) {
                asks.append(ask)
                client.answer(ask.id)
            }
            func controlClient(_ client: ControlClient, didReceive notification: PresenterNotification) {}
            func controlClient(_ client: ControlClient, didCloseWith error: ControlTransportError?) {}
        }
        let inline = Inline()
        let presenterClient = try ControlClient.connect(socketPath: socketPath, delegate: inline)
        _ = try await presenterClient.register(Samples.path("inline.txt"), kind: .file)
        let writer = try ControlClient.connect(socketPath: socketPath)
        for _ in 0..<3 {
            let access = try await writer.coordinate([.writing(Samples.path("inline.txt"))])
            try await writer.release(access)
        }
        XCTAssertEqual(inline.asks.wait { $0.count >= 3 }.map(\.kind).prefix(3).allSatisfy { $0 == .relinquishToWriter }, true)
        XCTAssertEqual(daemon.askOutcomes.all.filter { if case .answered = $0 { return true } else { return false } }.count, daemon.askOutcomes.all.count)
        presenterClient.close()
        writer.close()
    }

    func testAskTimesOutAtItsDeadline() async throws {
        daemon.askDeadline = .milliseconds(200)
        let silent = RecordingDelegate()
        silent.answers = false
        let presenterClient = try ControlClient.connect(socketPath: socketPath, delegate: silent)
        _ = try await presenterClient.register(Samples.path("x"), kind: .file)
        let writer = try ControlClient.connect(socketPath: socketPath)
        _ = try await writer.coordinate([.writing(Samples.path("x"))])
        XCTAssertEqual(daemon.askOutcomes.all, [.timedOut])
        XCTAssertEqual(silent.asks.all.first?.deadlineMs, 200)
        // The late answer is ignored without harm.
        presenterClient.answer(silent.asks.all[0].id)
        let status = try await writer.status()
        XCTAssertEqual(status.presenters.count, 1)
        presenterClient.close()
        writer.close()
    }

    func testPeerCredentialsAndSocketPermissions() throws {
        var info = stat()
        XCTAssertEqual(stat(socketPath, &info), 0)
        XCTAssertEqual(info.st_mode & 0o777, 0o600)
        XCTAssertEqual(info.st_mode & S_IFMT, S_IFSOCK)

        let raw = try RawClient(path: socketPath)
        _ = try raw.hello()
        daemon.events.wait { $0.contains("open \(getpid())") }
        let connection = try XCTUnwrap(daemon.server.connections.first)
        XCTAssertEqual(connection.peer, PeerCredentials(pid: getpid(), uid: getuid(), gid: getgid()))
        XCTAssertEqual(connection.version, 1)
    }

    func testOwnerOnlySocketRefusesOtherUsersAndOpenSocketReportsTheirCredentials() throws {
        guard getuid() == 0 else { throw XCTSkip("needs root to act as another user") }
        let script = """
            import os, socket, sys, struct, json
            os.setgid(65534); os.setuid(65534)
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(sys.argv[1])
            except PermissionError:
                print("denied"); sys.exit(0)
            body = json.dumps({"type": "hello", "id": 1, "versions": [1]}).encode()
            s.sendall(struct.pack(">I", len(body)) + body)
            n = struct.unpack(">I", s.recv(4))[0]
            print(json.loads(s.recv(n))["type"], os.getpid())
            """
        XCTAssertEqual(try runPython(script, [socketPath]).output.trimmingCharacters(in: .whitespacesAndNewlines), "denied")

        let shared = MiniDaemon(socketPath: directory.path + "/shared.sock", permissions: 0o666)
        try shared.server.start()
        defer { shared.server.stop() }
        var info = stat()
        stat(directory.path + "/shared.sock", &info)
        XCTAssertEqual(info.st_mode & 0o777, 0o666)
        let result = try runPython(script, [directory.path + "/shared.sock"])
        let words = result.output.split(separator: " ").map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }
        XCTAssertEqual(words.first, "welcome", result.output + result.errors)
        let pid = Int32(words.last ?? "") ?? -1
        shared.events.wait { $0.contains("open \(pid)") }
        let closed = shared.events.wait { $0.contains { $0.hasPrefix("close") } }
        XCTAssertFalse(closed.isEmpty)
        // The connection is gone by now; the credentials were checked when it opened.
        XCTAssertTrue(shared.events.all.contains("open \(pid)"))
    }

    func testMalformedFramesCloseOnlyThatConnection() async throws {
        let bystander = RecordingDelegate()
        let good = try ControlClient.connect(socketPath: socketPath, delegate: bystander)
        _ = try await good.register(Samples.path("keep.txt"), kind: .file)

        let cases: [([UInt8], ErrorCode)] = [
            (Framing.frame(Array("{not json".utf8)), .malformedJSON),
            ([0x7F, 0xFF, 0xFF, 0xFF], .frameTooLarge),
            (Framing.frame(Array(#"{"type":"teleport","id":3}"#.utf8)), .unknownType),
            ([0, 0, 0, 0], .malformedFrame),
        ]
        for (bytes, code) in cases {
            let raw = try RawClient(path: socketPath)
            _ = try raw.hello()
            try raw.send(bytes)
            guard case .error(let error)? = try raw.receive() else { return XCTFail("no error frame for \(code)") }
            XCTAssertEqual(error.code, code)
            XCTAssertNil(try raw.receive(), "connection closed after \(code)")
        }
        // Before hello, an unknown version, and a request before hello.
        let early = try RawClient(path: socketPath)
        try early.send(.status(StatusQuery(id: RequestID(1))))
        guard case .error(let notNegotiated)? = try early.receive() else { return XCTFail() }
        XCTAssertEqual(notNegotiated.code, .notNegotiated)
        XCTAssertNil(try early.receive())

        let future = try RawClient(path: socketPath)
        try future.send(.hello(Hello(id: RequestID(1), versions: [7, 9])))
        guard case .error(let unsupported)? = try future.receive() else { return XCTFail() }
        XCTAssertEqual(unsupported.code, .unsupportedVersion)
        XCTAssertEqual(unsupported.id, RequestID(1))
        XCTAssertTrue(unsupported.message.contains("[1]"))
        XCTAssertNil(try future.receive())

        // A truncated frame followed by a hangup: the daemon notices and cleans up.
        let truncated = try RawClient(path: socketPath)
        _ = try truncated.hello()
        try truncated.send(Array(ControlMessage.status(StatusQuery(id: RequestID(2))).encodedFrame().prefix(9)))
        shutdown(truncated.fd, Int32(SHUT_WR))
        daemon.events.wait { $0.contains { $0.contains("truncatedFrame") } }

        // A field error with a known id is answered and the connection stays open.
        let sloppy = try RawClient(path: socketPath)
        _ = try sloppy.hello()
        try sloppy.send(Framing.frame(Array(#"{"type":"register","id":5,"path":"../etc/passwd","kind":"file","asks":[]}"#.utf8)))
        guard case .error(let pathError)? = try sloppy.receive() else { return XCTFail() }
        XCTAssertEqual(pathError.code, .invalidPath)
        XCTAssertEqual(pathError.id, RequestID(5))
        try sloppy.send(.status(StatusQuery(id: RequestID(6))))
        guard case .statusReport(let report)? = try sloppy.receive() else { return XCTFail() }
        XCTAssertEqual(report.presenters.count, 1)
        // Daemon-to-client messages from a client are refused, not fatal.
        try sloppy.send(.granted(Granted(id: RequestID(7), access: AccessID(1))))
        guard case .error(let unexpected)? = try sloppy.receive() else { return XCTFail() }
        XCTAssertEqual(unexpected.code, .unexpectedMessage)

        // The well-behaved client never noticed.
        XCTAssertTrue(good.isConnected)
        let status = try await good.status()
        XCTAssertEqual(status.presenters.map(\.path), [Samples.path("keep.txt")])
        good.close()
    }

    func testStaleSocketIsReplacedAndLiveOneIsNot() throws {
        let second = MiniDaemon(socketPath: socketPath)
        XCTAssertThrowsError(try second.server.start()) { error in
            XCTAssertEqual(error as? ControlTransportError, .addressInUse(socketPath))
        }
        daemon.server.stop()
        // A leftover socket file nobody listens on (a crashed daemon) is replaced.
        let stalePath = directory.path + "/stale.sock"
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        _ = try withUnixAddress(stalePath) { bind(fd, $0, $1) }
        close(fd)
        let revived = MiniDaemon(socketPath: stalePath)
        try revived.server.start()
        let client = try RawClient(path: stalePath)
        XCTAssertEqual(try client.hello().version, 1)
        revived.server.stop()
        XCTAssertEqual(access(stalePath, F_OK), -1, "stop removes the socket file")
    }

    /// A server let go without `stop()` stops all the same: its readiness thread (`coordfs-control`)
    /// ends and is joined, its client is disconnected, its socket file removed. Before, the thread
    /// went on waiting in epoll_wait for ever, holding the epoll instance and the listening socket.
    func testAServerLetGoWithoutStopEndsItsThreadAndClosesItsSockets() throws {
        final class Quiet: ControlServerHandler, @unchecked Sendable {
            func controlServer(_ server: ControlServer, didReceive message: ControlMessage, on connection: ControlConnection) {}
        }
        func controlThreads() -> Int {
            let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
            return tasks.filter { task in
                (try? String(contentsOfFile: "/proc/self/task/\(task)/comm", encoding: .utf8))?.hasPrefix("coordfs-control") == true
            }.count
        }
        func eventually(_ what: String, _ condition: () -> Bool) {
            let deadline = Date().addingTimeInterval(10)
            while !condition() {
                if Date() > deadline { return XCTFail("not within 10 s: \(what)") }
                usleep(10_000)
            }
        }
        daemon.server.stop()  // setUp's: its thread joined, so only this test's server's comes and goes
        let path = directory.path + "/dropped.sock"
        let before = controlThreads()
        var server: ControlServer? = ControlServer(configuration: .init(socketPath: path), handler: Quiet())
        try server?.start()
        eventually("the server's readiness thread, named") { controlThreads() == before + 1 }
        let raw = try RawClient(path: path)
        _ = try raw.hello()
        weak let dropped = server
        server = nil
        eventually("the server is gone") { dropped == nil }
        eventually("its readiness thread ended (\(controlThreads()) running, \(before) before)") { controlThreads() == before }
        XCTAssertNil(try raw.receive(), "its client sees the end of the stream")
        XCTAssertFalse(FileManager.default.fileExists(atPath: path), "its socket file is removed")
    }

    func testLongSocketPathsWork() throws {
        var deep = directory.path
        while deep.utf8.count < 150 {
            deep += "/a-rather-long-directory-name"
            mkdir(deep, 0o755)
        }
        let path = deep + "/control.sock"
        let server = MiniDaemon(socketPath: path)
        try server.server.start()
        defer { server.server.stop() }
        let client = try ControlClient.connect(socketPath: path)
        XCTAssertEqual(client.welcome.version, 1)
        client.close()
    }

    func testSlowConsumerIsDisconnected() throws {
        let small = MiniDaemon(socketPath: directory.path + "/small.sock")
        small.server = ControlServer(configuration: .init(socketPath: directory.path + "/small.sock", maxOutboundBytes: 256 * 1024), handler: small)
        try small.server.start()
        defer { small.server.stop() }
        let raw = try RawClient(path: directory.path + "/small.sock")
        _ = try raw.hello()
        small.events.wait { $0.contains { $0.hasPrefix("open") } }
        let connection = try XCTUnwrap(small.server.connections.first)
        let big = ControlMessage.notification(PresenterNotification(presenter: PresenterID(1), event: .unknown(event: "pad", fields: JSONObject(["x": .string(String(repeating: "x", count: 60_000))]))))
        var sent = 0
        while connection.send(big), sent < 1000 { sent += 1 }
        XCTAssertLessThan(sent, 1000, "sending stops once the client is cut off")
        small.events.wait { $0.contains { $0.hasPrefix("close slowConsumer") } }
    }

    /// Connections of users not in `exemptUsers` draw from a share the server does not own
    /// (`Configuration.share`: the daemon's share of descriptors for users other than root and the
    /// owner, which their opens through the mount draw from too): refused with `limitExceeded`,
    /// nothing opened, once it is taken; given back once for each connection taken, when its peer
    /// closes it and when the server stops.
    func testConnectionsDrawFromAShareAndGiveItBackOnceEach() throws {
        final class Share: @unchecked Sendable {
            let lock = NSLock()
            var held = 0, taken = 0, given = 0
        }
        let share = Share()
        let path = directory.path + "/shared.sock"
        let shared = MiniDaemon(socketPath: path)
        shared.server = ControlServer(configuration: .init(
            socketPath: path, exemptUsers: [],
            share: (take: { _ in
                share.lock.withLock { () -> String? in
                    guard share.held < 2 else { return "the share is taken" }
                    share.held += 1
                    share.taken += 1
                    return nil
                }
            }, give: { _ in
                share.lock.withLock {
                    share.held -= 1
                    share.given += 1
                }
            })), handler: shared)
        try shared.server.start()
        defer { shared.server.stop() }

        var first: RawClient? = try RawClient(path: path)
        let second = try RawClient(path: path)
        _ = try first?.hello()
        _ = try second.hello()
        let third = try RawClient(path: path)
        try? third.send(.hello(Hello(id: RequestID(1))))
        // Refused at once: its error frame, or the reset of a socket closed with the hello unread.
        switch try? third.receive() {
        case .error(let e)?:
            XCTAssertEqual(e.code, .limitExceeded)
            XCTAssertEqual(e.message, "the share is taken")
        case .welcome?: XCTFail("a third connection beyond a share of two was served")
        default: break
        }
        XCTAssertEqual(shared.server.refusedConnections, 1)
        XCTAssertEqual(shared.server.connectionCount, 2)
        XCTAssertEqual(share.lock.withLock { share.held }, 2)

        first = nil  // the peer closes
        shared.events.wait { $0.contains { $0.hasPrefix("close") } }
        XCTAssertEqual(share.lock.withLock { share.given }, 1)
        let fourth = try RawClient(path: path)
        _ = try fourth.hello()
        shared.server.stop()
        XCTAssertEqual(share.lock.withLock { share.held }, 0, "every connection's part given back")
        XCTAssertEqual(share.lock.withLock { share.taken }, 3)
        XCTAssertEqual(share.lock.withLock { share.given }, 3, "once each")
    }

    func testPythonExampleFromTheDocsWorks() async throws {
        let docs = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("docs/protocol.md")
        let markdown = try String(contentsOf: docs, encoding: .utf8)
        guard let start = markdown.range(of: "```python\n"), let end = markdown.range(of: "\n```", range: start.upperBound..<markdown.endIndex) else {
            return XCTFail("docs/protocol.md has no python example")
        }
        let example = String(markdown[start.upperBound..<end.lowerBound])
        XCTAssertLessThanOrEqual(example.split(separator: "\n").count, 30, "the example stays short")

        // While the example presents notes.txt, another client writes it: the example must
        // answer the ask and then see the notification.
        let finished = expectation(description: "writer done")
        let path = socketPath
        Task.detached {
            defer { finished.fulfill() }
            let writer = try ControlClient.connect(socketPath: path)
            for _ in 0..<100 {
                if try await writer.status().presenters.isEmpty == false { break }
                try await Task.sleep(for: .milliseconds(50))
            }
            let access = try await writer.coordinate([.writing(Samples.path("notes.txt"))])
            try await writer.release(access, changes: [.changed(Samples.path("notes.txt"))])
            try await Task.sleep(for: .milliseconds(200))
            writer.close()
        }
        let process = try startPython(example, [socketPath, "notes.txt"])
        await fulfillment(of: [finished], timeout: 15)
        // The example runs until the daemon goes away.
        daemon.server.stop()
        process.waitUntilExit()
        let output = String(decoding: (process.standardOutput as! Pipe).fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        XCTAssertEqual(process.terminationStatus, 0, output)
        XCTAssertTrue(output.contains("\"type\": \"welcome\""), output)
        XCTAssertTrue(output.contains("\"type\": \"registered\""), output)
        XCTAssertTrue(output.contains("\"ask\": \"relinquishToWriter\""), output)
        XCTAssertTrue(output.contains("\"event\": \"didChange\""), output)
        XCTAssertEqual(daemon.askOutcomes.all.count, 1)
        guard case .answered = daemon.askOutcomes.all.first else { return XCTFail("the example did not answer: \(daemon.askOutcomes.all)") }
    }

    // MARK: Helpers

    private func startPython(_ script: String, _ arguments: [String]) throws -> Process {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", "-c", script] + arguments
        process.standardOutput = Pipe()
        process.standardError = Pipe()
        try process.run()
        return process
    }

    private func runPython(_ script: String, _ arguments: [String]) throws -> (output: String, errors: String) {
        let process = try startPython(script, arguments)
        let output = (process.standardOutput as! Pipe).fileHandleForReading.readDataToEndOfFile()
        let errors = (process.standardError as! Pipe).fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (String(decoding: output, as: UTF8.self), String(decoding: errors, as: UTF8.self))
    }
}
