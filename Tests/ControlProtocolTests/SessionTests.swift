import Foundation
import XCTest
@testable import ControlProtocol

final class RecordingEndpoint: PresenterEndpoint, @unchecked Sendable {
    let asks = Recorder<AskKind>()
    let events = Recorder<PresenterEvent>()
    let lost = Recorder<String>()
    func perform(_ ask: Ask) async -> ErrorBody? {
        asks.append(ask.kind)
        return nil
    }
    func receive(_ event: PresenterEvent) async { events.append(event) }
    func registrationLost(_ error: ControlTransportError) async { lost.append("\(error)") }
}

final class SessionTests: XCTestCase {
    func testSessionReconnectsAfterDaemonRestartAndRegistersPresentersAgain() async throws {
        let directory = try TemporaryDirectory()
        let path = directory.path + "/control.sock"
        var daemon = MiniDaemon(socketPath: path)
        try daemon.server.start()

        let session = ControlSession(socketPath: { path }, options: .init(clientName: "session-test", reconnectDelay: (.milliseconds(20), .milliseconds(200))))
        let endpoint = RecordingEndpoint()
        let presenter = try await session.register(Samples.path("draft.txt"), kind: .file, asks: [.relinquishToWriter], endpoint: endpoint)
        XCTAssertEqual(session.connectionCount, 1)

        // Another client moves the file: the presenter is asked, told, and its path follows.
        let other = try ControlClient.connect(socketPath: path)
        let access = try await other.coordinate([.writing(Samples.path("draft.txt"), options: [.forMoving])])
        XCTAssertEqual(endpoint.asks.all, [.relinquishToWriter])
        try await other.release(access, changes: [.moved(Samples.path("draft.txt"), to: Samples.path("final.txt"))])
        endpoint.events.wait { $0 == [.didMove(to: Samples.path("final.txt"))] }
        other.close()

        // The daemon restarts; the session comes back and registers the presenter at its new path.
        daemon.server.stop()
        daemon = MiniDaemon(socketPath: path)
        try daemon.server.start()
        let deadline = Date().addingTimeInterval(5)
        while daemon.presenterIDs().isEmpty && Date() < deadline { try await Task.sleep(for: .milliseconds(20)) }
        XCTAssertEqual(session.connectionCount, 2)
        let status = try await session.status()
        XCTAssertEqual(status.presenters.map(\.path), [Samples.path("final.txt")])
        XCTAssertEqual(session.remoteID(of: presenter), status.presenters.first?.presenter)

        // Asks reach the presenter through the new connection; its own accesses do not ask it.
        let writer = try ControlClient.connect(socketPath: path)
        let second = try await writer.coordinate([.writing(Samples.path("final.txt"))])
        XCTAssertEqual(endpoint.asks.all, [.relinquishToWriter, .relinquishToWriter])
        try await writer.release(second, changes: [.changed(Samples.path("final.txt"))])
        endpoint.events.wait { $0.count == 2 }
        let own = try await session.coordinate([.writing(Samples.path("final.txt"))], presenter: presenter)
        try await session.release(own)
        XCTAssertEqual(endpoint.asks.all.count, 2, "a presenter is not asked about its own access")

        await session.unregister(presenter)
        let after = try await writer.status()
        XCTAssertEqual(after.presenters, [])
        writer.close()
        session.close()
        daemon.server.stop()
    }

    func testSessionReportsAFailedReRegistration() async throws {
        let directory = try TemporaryDirectory()
        let path = directory.path + "/control.sock"
        var daemon = MiniDaemon(socketPath: path)
        try daemon.server.start()
        let session = ControlSession(socketPath: { path }, options: .init(reconnectDelay: (.milliseconds(20), .milliseconds(100))))
        let endpoint = RecordingEndpoint()
        _ = try await session.register(Samples.path("gone.txt"), kind: .file, endpoint: endpoint)
        daemon.server.stop()
        // The new daemon refuses every registration.
        final class Refusing: ControlServerHandler, @unchecked Sendable {
            func controlServer(_ server: ControlServer, didReceive message: ControlMessage, on connection: ControlConnection) {
                if let id = message.requestID { connection.reply(to: id, error: ProtocolError(.notFound, "no such file")) }
            }
        }
        let refusing = Refusing()
        let server = ControlServer(configuration: .init(socketPath: path), handler: refusing)
        try server.start()
        endpoint.lost.wait { $0.count == 1 }
        XCTAssertTrue(endpoint.lost.all[0].contains("notFound"))
        session.close()
        server.stop()
        daemon = MiniDaemon(socketPath: path)
    }

    func testRequestsFailCleanlyWithoutADaemon() async throws {
        let session = ControlSession(socketPath: { "/nonexistent/coordfs/control.sock" })
        do {
            _ = try await session.status()
            XCTFail("status without a daemon succeeded")
        } catch {
            guard case .system(_, let code) = error else { return XCTFail("\(error)") }
            XCTAssertEqual(code, ENOENT)
        }
    }
}
