import XCTest
import Foundation
import Glibc
import ControlProtocol
import Coordination

/// The daemon's side of the control socket: path rules, refusals that change nothing, and what a
/// disconnect ends.
final class ControlServiceTests: ClientMountTestCase {
    private func register(_ client: RawClient, _ path: String, kind: ItemKind = .file, asks: Set<AskKind> = Set(AskKind.allCases)) throws -> ControlMessage? {
        let mountPath = try MountPath(validating: path)
        return client.request { .register(Register(id: $0, path: mountPath, kind: kind, asks: asks)) }
    }

    private func code(_ message: ControlMessage?) -> ErrorCode? {
        if case .error(let error) = message { return error.code }
        return nil
    }

    func testTheSocketIsOwnerOnlyAndOutsideTheMount() throws {
        var st = stat()
        XCTAssertEqual(lstat(socketPath, &st), 0)
        XCTAssertEqual(st.st_mode & S_IFMT, S_IFSOCK)
        XCTAssertEqual(st.st_mode & 0o777, 0o600)
        XCTAssertTrue(socketPath.hasPrefix(backing + "/.coordfs/"))
        XCTAssertNotEqual(lstat(mnt + "/.coordfs", &st), 0, "the state folder is not visible through the mount")
    }

    func testPathsThatLeaveTheMountAreRefusedAndNothingChanges() throws {
        try writeBacking("inside.txt", "x")
        mkdir(backing + "/sub", 0o755)
        try writeBacking("sub/doc.txt", "y")
        symlink("/etc", backing + "/out")
        symlink("/etc/passwd", backing + "/passwd-link")
        symlink("../../..", backing + "/sub/up")
        symlink("sub", backing + "/inner")
        symlink(mnt + "/sub/doc.txt", backing + "/absolute-inside")
        let client = try RawClient(socket: socketPath)
        XCTAssertTrue(client.hello())
        for escape in ["out/passwd", "passwd-link", "sub/up/etc/passwd", ".coordfs/daemon.pid", ".coordfs"] {
            XCTAssertEqual(code(try register(client, escape)), .notFound, escape)
        }
        // Spelled escapes never get past the decoder; the connection stays open (the id was read).
        client.sendBytes(Framing.frame(Array(#"{"type":"register","id":50,"path":"../etc/passwd","kind":"file","asks":[]}"#.utf8)))
        guard case .error(let error) = client.receive() else { return XCTFail("no error for ..") }
        XCTAssertEqual(error.code, .invalidPath)
        client.sendBytes(Framing.frame(Array(#"{"type":"coordinate","id":51,"intents":[{"intent":"read","path":"/etc/passwd"}]}"#.utf8)))
        guard case .error(let absolute) = client.receive() else { return XCTFail("no error for an absolute path") }
        XCTAssertEqual(absolute.code, .invalidPath)
        // A write to a link out of the mount is refused too.
        let out = try MountPath(validating: "passwd-link")
        XCTAssertEqual(code(client.request { .coordinate(Coordinate(id: $0, intents: [.writing(out)])) }), .notFound)
        XCTAssertEqual(presenterCount, 0, "nothing registered")
        XCTAssertTrue(daemon.coordinator.status().held.isEmpty, "nothing held")

        // Links that stay inside resolve to the real item.
        guard case .registered = try register(client, "inner/doc.txt") else { return XCTFail("inner link refused") }
        guard case .registered = try register(client, "absolute-inside") else { return XCTFail("absolute link into the mount refused") }
        XCTAssertEqual(daemon.coordinator.status().presenters.map(\.path.string).sorted(), ["sub/doc.txt", "sub/doc.txt"])
    }

    func testUnknownIdsAndAnnouncementsOutsideTheAccessAreRefused() throws {
        try writeBacking("a.txt", "a")
        try writeBacking("b.txt", "b")
        let client = try RawClient(socket: socketPath)
        XCTAssertTrue(client.hello())
        XCTAssertEqual(code(client.request { .unregister(Unregister(id: $0, presenter: PresenterID(999))) }), .unknownPresenter)
        XCTAssertEqual(code(client.request { .release(Release(id: $0, access: AccessID(999))) }), .unknownAccess)
        let a = try MountPath(validating: "a.txt"), b = try MountPath(validating: "b.txt")
        XCTAssertEqual(code(client.request { .coordinate(Coordinate(id: $0, intents: [.reading(a)], presenter: PresenterID(5))) }), .unknownPresenter)
        guard case .granted(let granted) = client.request({ .coordinate(Coordinate(id: $0, intents: [.writing(a)])) }) else {
            return XCTFail("no grant")
        }
        // Announcing a change to b.txt, which this access did not coordinate, is refused: still held.
        XCTAssertEqual(code(client.request { .release(Release(id: $0, access: granted.access, changes: [.changed(b)])) }), .invalidValue)
        XCTAssertEqual(daemon.coordinator.status().held.count, 1)
        guard case .ok = client.request({ .release(Release(id: $0, access: granted.access, changes: [.changed(a)])) }) else {
            return XCTFail("release refused")
        }
        XCTAssertTrue(daemon.coordinator.status().held.isEmpty)
    }

    func testMalformedFramesCloseOnlyThatConnection() throws {
        try writeBacking("doc.txt", "d")
        let good = try RawClient(socket: socketPath)
        XCTAssertTrue(good.hello())
        guard case .registered = try register(good, "doc.txt") else { return XCTFail("register failed") }
        for garbage: [UInt8] in [[0, 0, 0, 3, 0x7b, 0x7d, 0x7d], [0xff, 0xff, 0xff, 0xff], [0, 0, 0, 2] + Array("{}".utf8)] {
            let bad = try RawClient(socket: socketPath)
            XCTAssertTrue(bad.hello())
            bad.sendBytes(garbage)
            guard case .error(let error) = bad.receive() else { return XCTFail("no error frame for \(garbage)") }
            XCTAssertNil(error.id)
            XCTAssertNil(bad.receive(), "closed after \(error.code)")
        }
        // The daemon and the other client are unaffected.
        XCTAssertEqual(presenterCount, 1)
        guard case .statusReport(let report) = good.request({ .status(StatusQuery(id: $0)) }) else { return XCTFail("no status") }
        XCTAssertEqual(report.presenters.count, 1)
    }

    func testADisconnectedPresenterEndsItsPendingAskAtOnce() throws {
        try writeBacking("doc.txt", "old\n")
        let client = try RawClient(socket: socketPath)
        XCTAssertTrue(client.hello())
        guard case .registered = try register(client, "doc.txt") else { return XCTFail("register failed") }
        // A writer through the mount: the presenter is asked and never answers.
        let writer = try start(["/bin/sh", "-c", "echo new > '\(mnt!)/doc.txt'"])
        guard case .ask(let ask) = client.receive() else { return XCTFail("no ask") }
        XCTAssertEqual(ask.kind, .relinquishToWriter)
        XCTAssertEqual(ask.deadlineMs, 10_000)
        XCTAssertEqual(readBacking("doc.txt"), "old\n", "the write waits for the answer")
        usleep(200_000)
        XCTAssertTrue(isRunning(writer))
        let closed = Date()
        client.disconnect()
        XCTAssertEqual(wait(writer, timeout: 5), 0)
        XCTAssertLessThan(Date().timeIntervalSince(closed), 2, "the ask ended when the client left, not at its 10 s deadline")
        XCTAssertEqual(readBacking("doc.txt"), "new\n")
        XCTAssertTrue(eventually { self.presenterCount == 0 })
        XCTAssertFalse(recorded { if case .presenterGone = $0 { return true }; return false }.isEmpty, "recorded as presenter gone")
    }

    func testAConnectionsAccessesEndWhenItCloses() throws {
        try writeBacking("doc.txt", "old\n")
        let client = try RawClient(socket: socketPath)
        XCTAssertTrue(client.hello())
        let path = try MountPath(validating: "doc.txt")
        guard case .granted = client.request({ .coordinate(Coordinate(id: $0, intents: [.writing(path)])) }) else {
            return XCTFail("no grant")
        }
        // A writer this process did not start (it would pass the access, as its own child): one
        // that `setsid -f` leaves to init, writing once it is on its own.
        let done = root + "/writer-status"
        let writer = try start(["/usr/bin/setsid", "-f", "/bin/sh", "-c", "sleep 0.2; echo new > '\(mnt!)/doc.txt'; echo $? > '\(done)'"])
        XCTAssertEqual(wait(writer, timeout: 5), 0)
        usleep(600_000)
        XCTAssertFalse(FileManager.default.fileExists(atPath: done), "held off by the access")
        XCTAssertEqual(readBacking("doc.txt"), "old\n")
        client.disconnect()
        XCTAssertTrue(eventually(timeout: 5) { (try? String(contentsOfFile: done, encoding: .utf8)) == "0\n" })
        XCTAssertEqual(readBacking("doc.txt"), "new\n")
        XCTAssertTrue(eventually { self.daemon.coordinator.status().held.isEmpty })
    }

    func testAWaitingRequestEndsWhenItsClientDies() throws {
        try writeBacking("doc.txt", "old\n")
        let holder = try RawClient(socket: socketPath)
        XCTAssertTrue(holder.hello())
        let path = try MountPath(validating: "doc.txt")
        guard case .granted(let granted) = holder.request({ .coordinate(Coordinate(id: $0, intents: [.writing(path)])) }) else {
            return XCTFail("no grant")
        }
        let waiter = try start([try Self.coordfsBinary(), "coordinate", "--write", "--timeout", "60", mnt + "/doc.txt", "--", "true"])
        XCTAssertTrue(eventually { self.daemon.coordinator.status().waiting.count == 1 })
        kill(waiter.pid, SIGKILL)
        wait(waiter)
        XCTAssertTrue(eventually(timeout: 2) { self.daemon.coordinator.status().waiting.isEmpty }, "cancelled with its connection")
        guard case .ok = holder.request({ .release(Release(id: $0, access: granted.access)) }) else { return XCTFail("release") }
        XCTAssertTrue(daemon.coordinator.status().held.isEmpty, "the dead waiter was never granted")
    }
}
