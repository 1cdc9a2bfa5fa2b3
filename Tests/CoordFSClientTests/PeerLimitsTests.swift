import XCTest
import Foundation
import Glibc
import ControlProtocol
import Coordination
import TestSupport
@testable import CoordFS
import DocumentStore

/// Per-user limits on the control socket (issue 17, item 6; docs/protocol.md, "Limits"), tested
/// with hostile peers run as other users (a Python client under setpriv): connections per user
/// and in total with root never locked out, presenters and pending asks per user, idle and slow
/// peers dropped, and the options' range checks.
final class PeerLimitsTests: ClientMountTestCase {
    override func configure(_ options: inout MountOptions) {
        super.configure(&options)
        options.allowOther = true  // other users reach the socket
        options.coordination.askTimeout = 2
        options.limits.maxConnections = 6
        options.limits.maxUserConnections = 4
        options.limits.maxUserPresenters = 50
        options.limits.maxUserAsks = 2
        // Only the test of idle and slow peers has them dropped after a second.
        let quick = name.contains("IdleAndSlow")
        options.limits.idleTimeout = quick ? 1 : 300
        options.limits.slowTimeout = quick ? 1 : 30
    }

    static let nobody: (uid: uid_t, gid: gid_t) = (65534, 65534)
    static let other: (uid: uid_t, gid: gid_t) = (65533, 65534)

    /// A hostile client: `connections` connections (each says hello), then per connection
    /// `register` presenters of PATH with ASKS, printing one line per reply; then it reads
    /// (`read`) or sleeps without reading (`sleep`) for SECONDS, printing each ask and how each
    /// connection ended.
    static let script = pythonFraming + #"""
    import time
    sock_path, count, registers, path, asks, mode, seconds, rcvbuf = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6], float(sys.argv[7]), int(sys.argv[8])
    send, recv = send_on, receive_on
    socks = []
    for i in range(count):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if rcvbuf: s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        try:
            s.connect(sock_path)
            send(s, {"type": "hello", "id": 1, "versions": [1]})
        except (BrokenPipeError, ConnectionResetError, ConnectionRefusedError):
            pass  # refused at once: its error frame may still be there to read
        try:
            m = recv(s)
            print("conn", i, m["type"], m.get("code", ""), flush=True)
            if m["type"] == "welcome": socks.append(s)
        except (EOFError, ConnectionResetError, BrokenPipeError):
            print("conn", i, "closed", flush=True)
    asklist = [a for a in asks.split(",") if a]
    for s in socks:
        frames = b"".join(struct.pack(">I", len(b)) + b for b in (json.dumps({"type": "register", "id": 10 + n, "path": path, "kind": "file", "asks": asklist}).encode() for n in range(registers)))
        if frames: s.sendall(frames)
        if mode == "read":
            for n in range(registers):
                m = recv(s)
                print("register", m["type"], m.get("code", ""), flush=True)
    print("ready", flush=True)
    end = time.time() + seconds
    if mode == "sleep":
        time.sleep(seconds)
    for s in socks:
        s.settimeout(max(0.1, end - time.time()))
        try:
            while True:
                m = recv(s)
                if m["type"] == "ask": print("ask", m["ask"], flush=True)
                if m["type"] == "error" and "id" not in m: print("dropped", m["code"], flush=True)
        except EOFError:
            print("closed", flush=True)
        except (socket.timeout, TimeoutError):
            print("open", flush=True)
        except ConnectionResetError:
            print("closed", flush=True)
    """#

    /// Runs the script as `user`; returns the child (its output fills as it goes).
    func hostile(_ user: (uid: uid_t, gid: gid_t), connections: Int, registers: Int = 0, path: String = "doc.txt",
                 asks: [String] = [], mode: String = "read", seconds: Double = 0, receiveBuffer: Int = 0) throws -> Child {
        let file = root + "/hostile.py"
        if access(file, R_OK) != 0 { try Self.script.write(toFile: file, atomically: true, encoding: .utf8) }
        // The system's Python: a per-user one (pyenv's shims under /root) is not for other users.
        return try start(["/usr/bin/python3", file, socketPath, String(connections), String(registers), path, asks.joined(separator: ","), mode,
                          String(seconds), String(receiveBuffer)], user: user)
    }

    func lines(_ child: Child, _ prefix: String) -> [String] { child.lines.filter { $0.hasPrefix(prefix) } }

    /// 8,192 connections used to lock everyone out, root included. Now one user gets
    /// `max_user_connections`, all others together `max_connections`, and root always gets in.
    func testConnectionsAreBoundedPerUserAndRootIsNeverLockedOut() throws {
        let first = try hostile(Self.nobody, connections: 5, seconds: 30)
        XCTAssertTrue(eventually(timeout: 60) { self.lines(first, "conn").count == 5 }, first.text)
        XCTAssertEqual(lines(first, "conn").filter { $0.hasSuffix("welcome ") }.count, 4, first.text)
        // Refused: `limitExceeded`, or closed before the client could read it.
        XCTAssertFalse(lines(first, "conn 4").first?.contains("welcome") ?? true, "the 5th of one user: \(first.text)")
        let second = try hostile(Self.other, connections: 3, seconds: 30)
        XCTAssertTrue(eventually(timeout: 60) { self.lines(second, "conn").count == 3 }, second.text)
        XCTAssertEqual(lines(second, "conn").filter { $0.hasSuffix("welcome ") }.count, 2, "six in all: \(second.text)")
        XCTAssertFalse(lines(second, "conn 2").first?.contains("welcome") ?? true, second.text)
        XCTAssertFalse((first.text + second.text).contains("Traceback"), first.text + second.text)
        // Root, with every other connection taken.
        let rootClient = try RawClient(socket: socketPath)
        XCTAssertTrue(rootClient.hello(), "root is never locked out")
        let rootAgain = try RawClient(socket: socketPath)
        XCTAssertTrue(rootAgain.hello())
    }

    /// A user may register `max_user_presenters` presenters over all its connections.
    func testPresentersAreBoundedPerUser() throws {
        try writeBacking("doc.txt", "x\n")
        let peer = try hostile(Self.nobody, connections: 2, registers: 30, seconds: 0.1)
        XCTAssertTrue(eventually(timeout: 30) { self.lines(peer, "ready").count == 1 }, peer.text)
        let replies = lines(peer, "register")
        XCTAssertEqual(replies.filter { $0.contains("registered") }.count, 50, peer.text)
        XCTAssertEqual(replies.filter { $0.contains("limitExceeded") }.count, 10, peer.text)
    }

    /// A user's presenters have at most `max_user_asks` asks pending: five presenters that never
    /// answer get two asks, and the writer waits for two deadlines' worth of them, not five.
    func testPendingAsksAreBoundedPerUser() throws {
        try writeBacking("doc.txt", "x\n", mode: 0o666)  // nobody could write it: its presenters are asked
        let peer = try hostile(Self.nobody, connections: 1, registers: 5, asks: ["relinquishToWriter"], seconds: 8)
        XCTAssertTrue(eventually(timeout: 30) { self.lines(peer, "ready").count == 1 }, peer.text)
        XCTAssertEqual(try run(["/bin/sh", "-c", "echo y > '\(mnt!)/doc.txt'"], timeout: 30).status, 0)
        XCTAssertTrue(eventually(timeout: 20) { self.lines(peer, "open").count + self.lines(peer, "closed").count == 1 }, peer.text)
        XCTAssertEqual(lines(peer, "ask").count, 2, "two asks pending at most: \(peer.text)")
    }

    /// A connection that holds nothing and says nothing is closed after `idle_timeout`; one that
    /// stopped reading is closed after `slow_timeout` and its presenters go with it. A quiet
    /// connection holding a presenter stays.
    func testIdleAndSlowPeersAreDropped() throws {
        try writeBacking("doc.txt", "x\n")
        let keeper = try RawClient(socket: socketPath)
        XCTAssertTrue(keeper.hello())
        guard case .registered = keeper.request({ .register(Register(id: $0, path: try! MountPath(validating: "doc.txt"), kind: .file, asks: [])) }) else {
            return XCTFail("root's presenter")
        }
        let idle = try hostile(Self.nobody, connections: 1, seconds: 6)
        // 3,000 registrations whose replies it never reads, through a small receive buffer.
        let slow = try hostile(Self.other, connections: 1, registers: 3_000, mode: "sleep", seconds: 6, receiveBuffer: 4096)
        XCTAssertTrue(eventually(timeout: 30) { self.lines(idle, "closed").count + self.lines(idle, "open").count == 1 }, idle.text)
        XCTAssertEqual(lines(idle, "dropped"), ["dropped limitExceeded"], idle.text)
        XCTAssertTrue(eventually(timeout: 30) { self.lines(slow, "closed").count + self.lines(slow, "open").count == 1 }, slow.text)
        XCTAssertEqual(lines(slow, "closed").count, 1, "the slow reader was disconnected: \(slow.text)")
        XCTAssertTrue(eventually(timeout: 10) { self.presenterCount == 1 }, "the slow reader's presenters went with it; root's stays")
        guard case .statusReport(let report) = keeper.request({ .status(StatusQuery(id: $0)) }) else { return XCTFail("root's connection was dropped") }
        XCTAssertEqual(report.presenters.count, 1)
    }

    /// One user's 30,000 presenters going away at once do not hold up another user's write to
    /// another document: the write waits only for its own document's registrations (17 s before).
    func testAnotherUsersTeardownDoesNotDelayAWrite() throws {
        try writeBacking("a.txt", "a\n")
        try writeBacking("b.txt", "b\n", mode: 0o666)
        // Three connections of 10,000 (a connection's own limit); root is not bound per user.
        let a = try MountPath(validating: "a.txt")
        var bulk: [RawClient] = []
        var registered = 0
        for _ in 0..<3 {
            let client = try RawClient(socket: socketPath)
            XCTAssertTrue(client.hello())
            var frames: [UInt8] = []
            for _ in 0..<10_000 { frames += ControlMessage.register(Register(id: client.id(), path: a, kind: .file, asks: [])).encodedFrame() }
            client.sendAll(frames)
            var mine = 0
            while mine < 10_000, let message = client.receive() { if case .registered = message { mine += 1 } }
            registered += mine
            bulk.append(client)
        }
        XCTAssertEqual(registered, 30_000)
        // b.txt has a presenter of its own: its write keeps a version through the store.
        let other = try RawClient(socket: socketPath)
        XCTAssertTrue(other.hello())
        guard case .registered = other.request({ .register(Register(id: $0, path: try! MountPath(validating: "b.txt"), kind: .file, asks: [])) }) else {
            return XCTFail("b's presenter")
        }
        for client in bulk { shutdown(client.fd, Int32(SHUT_RDWR)) }
        XCTAssertTrue(eventually(timeout: 30) { self.presenterCount < 30_001 }, "the teardown began")
        let started = Date()
        XCTAssertEqual(try run(["/bin/sh", "-c", "echo b2 > '\(mnt!)/b.txt'"], user: Self.nobody, timeout: 60).status, 0)
        let took = Date().timeIntervalSince(started)
        print("PeerLimitsTests: nobody's write during the teardown of 30,000 presenters took \(took) s")
        XCTAssertLessThan(took, 5, "the write did not wait for another user's teardown")
    }

    /// Every limit option is range-checked with a clear error.
    func testLimitOptionsAreRangeChecked() throws {
        let options = try MountOptions.parse(["max_connections=100,max_user_connections=10,max_user_presenters=7,max_user_accesses=3,max_user_asks=9,max_user_waits=5,max_user_open_files=13,idle_timeout=60,slow_timeout=2.5",
                                             "max_user_pinned_versions=4,max_user_pinned_mb=2,max_user_readers=11,max_readers=12"])
        XCTAssertEqual(options.limits.maxConnections, 100)
        XCTAssertEqual(options.limits.maxUserConnections, 10)
        XCTAssertEqual(options.limits.maxUserPresenters, 7)
        XCTAssertEqual(options.limits.maxUserAccesses, 3)
        XCTAssertEqual(options.limits.maxUserAsks, 9)
        XCTAssertEqual(options.limits.maxUserWaits, 5)
        XCTAssertEqual(options.limits.maxUserOpenFiles, 13)
        XCTAssertEqual(MountOptions().limits.maxUserOpenFiles, 8192)
        XCTAssertEqual(options.limits.idleTimeout, 60)
        XCTAssertEqual(options.limits.slowTimeout, 2.5)
        XCTAssertEqual(options.limits.userPins, UserPinBudget(maxVersions: 4, maxBytes: 2 << 20, exempt: PeerLimits.exemptUsers))
        XCTAssertEqual(options.limits.readers, ImplicitReaders.Limits(perUser: 11, total: 12))
        for bad in ["max_connections=0", "max_connections=65537", "max_user_connections=-1", "max_user_presenters=1e300",
                    "max_user_presenters=17592186044416", "max_user_accesses=", "max_user_asks=x", "max_user_waits=0", "max_user_waits=1000001", "max_user_open_files=0", "max_user_open_files=10000001",
                    "max_user_open_files=1e3", "idle_timeout=inf",
                    "idle_timeout=nan", "slow_timeout=0", "slow_timeout=86401", "max_user_presenters",
                    "max_user_pinned_versions=0", "max_user_pinned_mb=1073741825", "max_user_readers=x", "max_readers=0"] {
            XCTAssertThrowsError(try MountOptions.parse([bad]), bad) { error in
                XCTAssertTrue("\(error)".contains(bad.split(separator: "=").first.map(String.init) ?? bad), "\(bad): \(error)")
            }
        }
        // Through the command line: a clear message, no daemon.
        mkdir(root + "/other-mnt", 0o755)
        let (status, output) = try run([try Self.coordfsBinary(), "mount", backing, root + "/other-mnt", "-o", "max_user_asks=0"])
        XCTAssertNotEqual(status, 0)
        XCTAssertTrue(output.contains("max_user_asks=0") && output.contains("1 to 1000000"), output)
    }
}
