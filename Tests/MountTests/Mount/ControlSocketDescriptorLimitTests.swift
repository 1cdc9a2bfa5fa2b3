import Foundation
import Glibc
import TestSupport
import XCTest

/// The control socket of an `allow_other` mount, which every local user can connect to, and the
/// mount itself, when the daemon runs out of descriptors: a daemon with RLIMIT_NOFILE at 128 (soft
/// and hard, set with `prlimit`; it cannot raise it) and more clients (root's: no share bounds
/// them) connecting, or more opens, than it has descriptors left. It keeps the top 32 numbers for
/// its own files (`DescriptorReserve`): before, root's connections took every descriptor, and the
/// daemon died within seconds (libdispatch's workqueue monitor, which opens /proc/TID/stat of its
/// workers about once a second, crashes the process when it cannot: SIGILL, on io_uring in CI).
/// It does not spin (its CPU time, utime+stime from /proc/PID/stat, stays low while the limit is
/// hit: before, the listening socket, still readable, woke its accept loop again at once, a core's
/// worth), tells each client it cannot serve why, says so once in its log, answers the clients it
/// has, and serves new ones once others disconnect.
final class ControlSocketDescriptorLimitTests: MountTestCase {
    override var descriptorLimit: Int? { 128 }
    override var comparesTreesAtEnd: Bool { false }
    override var mountOptions: [String] {
        (try? MountTarget.fromEnvironment().isCoordFS) == true ? super.mountOptions + ["metrics=127.0.0.1:0"] : super.mountOptions
    }

    /// A raw client of the control socket (frames: a 4-byte big-endian length, then JSON).
    final class Client {
        let fd: Int32
        init(_ path: String) throws {
            fd = UnixSocket.connect(path)
            guard fd >= 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
        }
        deinit { Glibc.close(fd) }

        func send(_ json: String) {
            let body = Array(json.utf8)
            let n = UInt32(body.count).bigEndian
            let frame = withUnsafeBytes(of: n) { Array($0) } + body
            _ = frame.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        }

        /// The next frame's JSON, waiting up to `seconds`; nil at the end or when nothing came.
        func receive(within seconds: Double) -> [String: Any]? {
            func exactly(_ count: Int) -> [UInt8]? {
                var bytes: [UInt8] = []
                let deadline = Date().addingTimeInterval(seconds)
                while bytes.count < count {
                    var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                    let left = Int32(max(0, deadline.timeIntervalSinceNow) * 1000)
                    guard poll(&p, 1, left) == 1 else { return nil }
                    var chunk = [UInt8](repeating: 0, count: count - bytes.count)
                    let n = recv(fd, &chunk, chunk.count, 0)
                    guard n > 0 else { return nil }
                    bytes += chunk[0..<n]
                }
                return bytes
            }
            guard let head = exactly(4) else { return nil }
            let length = head.reduce(0) { $0 << 8 | Int($1) }
            guard let body = exactly(length) else { return nil }
            return (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any]
        }

        /// Says hello; the type of the daemon's first reply (`welcome`), or nil.
        func hello(within seconds: Double = 20) -> String? {
            send(#"{"type":"hello","id":1,"versions":[1]}"#)
            return receive(within: seconds)?["type"] as? String
        }
    }

    /// Each client's first frame, all within `seconds` together (nil: none came).
    private func firstAnswers(of clients: [Client], within seconds: Double) -> [[String: Any]?] {
        let deadline = Date().addingTimeInterval(seconds)
        return clients.map { $0.receive(within: max(0.05, deadline.timeIntervalSinceNow)) }
    }

    /// utime + stime of `pid`, in clock ticks (/proc/PID/stat, fields 14 and 15).
    private func cpuTicks(_ pid: pid_t) -> Int? {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8), let close = stat.lastIndex(of: ")") else { return nil }
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        guard fields.count > 13, let utime = Int(fields[11]), let stime = Int(fields[12]) else { return nil }
        return utime + stime
    }

    /// Why the daemon's CPU time could not be read: whether it still runs, and the end of its log
    /// (CI once found no /proc/PID/stat for it at its limit on io_uring, and said nothing more).
    private func whyNoTicks(_ pid: pid_t) -> String {
        let running = kill(pid, 0) == 0 ? "runs" : "is gone (\(String(cString: strerror(errno))))"
        return "no CPU time for daemon \(pid), which \(running); its log ends: \(daemonLog().suffix(1200))"
    }

    func testOutOfDescriptorsTheDaemonDoesNotSpinAnswersItsClientsAndServesNewOnesOnceSomeAreFree() throws {
        guard target.isCoordFS else { throw XCTSkip("a coordfs daemon's control socket") }
        guard let pid = fixture.daemonPids.first else { return XCTFail("no daemon serves \(fixture.mountpoint)") }
        XCTAssertEqual(fixture.daemonDescriptorLimit(), 128)
        let socketPath = fixture.backing + "/.coordfs/control.sock"
        let ticksPerSecond = Int(sysconf(Int32(_SC_CLK_TCK)))

        let early = try Client(socketPath)
        XCTAssertEqual(early.hello(), "welcome")

        // More clients than the daemon has descriptors left, each saying hello; each is answered,
        // welcomed or told it cannot be served (none left waiting).
        var flood: [Client] = []
        for _ in 0..<200 {
            let client = try Client(socketPath)
            client.send(#"{"type":"hello","id":1,"versions":[1]}"#)
            flood.append(client)
        }
        let answers = firstAnswers(of: flood, within: 20)
        let welcomed = answers.filter { $0?["type"] as? String == "welcome" }.count
        let refusals = answers.compactMap { $0 }.filter { $0["type"] as? String == "error" }
        XCTAssertEqual(welcomed + refusals.count, flood.count, "every client is answered: \(answers.filter { $0 == nil }.count) got nothing")
        XCTAssertGreaterThan(welcomed, 50, "the daemon serves as many as it has descriptors for")
        XCTAssertFalse(refusals.isEmpty, "more clients than descriptors: some are refused")
        for refusal in refusals {
            XCTAssertEqual(refusal["code"] as? String, "limitExceeded", "\(refusal)")
            XCTAssertTrue((refusal["message"] as? String ?? "").contains("kept for its own files"), "says why: \(refusal)")
        }

        // At the limit, with more clients connecting: no busy loop, and the daemon's own files
        // still have their descriptors (it lives, and at least half the 32 it keeps are free).
        let more = (0..<20).compactMap { _ in try? Client(socketPath) }
        more.forEach { $0.send(#"{"type":"hello","id":1,"versions":[1]}"#) }
        let before = try XCTUnwrap(cpuTicks(pid), whyNoTicks(pid))
        Thread.sleep(forTimeInterval: 3)
        let after = try XCTUnwrap(cpuTicks(pid), whyNoTicks(pid))
        XCTAssertLessThan(after - before, ticksPerSecond / 2,
                          "the daemon used \(after - before) clock ticks of CPU in 3 s at its descriptor limit (a spinning accept loop takes about \(3 * ticksPerSecond))")
        // Each answered too: refused, or (a descriptor of the daemon's own below the floor closed
        // meanwhile, now a client's to take) welcomed.
        let later = firstAnswers(of: more, within: 20)
        let laterRefused = later.filter { $0?["code"] as? String == "limitExceeded" }.count
        XCTAssertEqual(laterRefused + later.filter { $0?["type"] as? String == "welcome" }.count, more.count, "every later client is answered: \(later)")
        XCTAssertGreaterThanOrEqual(laterRefused, more.count / 2, "later clients are refused too")
        let held = try XCTUnwrap(fixture.daemonOpenDescriptors(), whyNoTicks(pid))
        XCTAssertGreaterThanOrEqual(held, 128 - 32 - 8, "the daemon holds about all the descriptors clients may take")
        XCTAssertLessThanOrEqual(held, 128 - 16, "the daemon keeps descriptors for its own files, whoever connects")
        let outOfDescriptors = "out of file descriptors"
        XCTAssertTrue(daemonLog().contains(outOfDescriptors), "the daemon's log says it ran out: \(daemonLog().suffix(600))")

        // A client it has is answered.
        early.send(#"{"type":"status","id":2}"#)
        var reply: [String: Any]?
        repeat { reply = early.receive(within: 20) } while reply != nil && (reply?["id"] as? Int) != 2
        XCTAssertNotNil(reply, "the connected client got no answer to its status")

        // Once others disconnect, a new client is served.
        flood.removeAll()
        let late = try Client(socketPath)
        XCTAssertEqual(late.hello(), "welcome", "a client connecting after others left is served")
        early.send(#"{"type":"status","id":3}"#)
        repeat { reply = early.receive(within: 20) } while reply != nil && (reply?["id"] as? Int) != 3
        XCTAssertEqual(reply?["type"] as? String, "statusReport")

        let said = daemonLog().components(separatedBy: outOfDescriptors).count - 1
        XCTAssertEqual(said, 1, "said once, not once per round of the accept loop: \(daemonLog().suffix(1200))")
        // Operators see it in the metrics too (each time until a connection is accepted again counts once).
        XCTAssertGreaterThanOrEqual(metric("coordfs_control_out_of_descriptors_total") ?? 0, 1, "the metrics endpoint counts the exhaustion: \(daemonLog().suffix(600))")
    }

    /// Root's opens through the mount, which no share bounds, stop short of the descriptors the
    /// daemon keeps for its own files: the open that would take one fails with ENFILE, a truncating
    /// open or create then fails before it changes anything, a create of a new file leaves none, and
    /// once the opens close the file opens again.
    func testOpensThroughTheMountLeaveTheDaemonItsOwnDescriptorsAndATruncatingOneChangesNothing() throws {
        guard target.isCoordFS else { throw XCTSkip("a coordfs daemon's descriptors") }
        guard let pid = fixture.daemonPids.first else { return XCTFail("no daemon serves \(fixture.mountpoint)") }
        let file = fixture.mountpoint + "/held.txt"
        try Data("keep me".utf8).write(to: URL(fileURLWithPath: file))
        let inBackingBefore = try XCTUnwrap(fixture.daemonDescriptorsInBacking(), whyNoTicks(pid))
        var held: [Int32] = []
        defer { held.forEach { Glibc.close($0) } }
        var refused: Int32 = 0
        for _ in 0..<200 {
            let fd = open(file, O_RDONLY)
            if fd < 0 { refused = errno; break }
            held.append(fd)
        }
        XCTAssertEqual(refused, ENFILE, "an open beyond what the daemon has for clients fails with ENFILE (after \(held.count))")
        XCTAssertGreaterThan(held.count, 40, "the daemon serves opens while it has descriptors for them")
        let daemonHolds = try XCTUnwrap(fixture.daemonOpenDescriptors(), whyNoTicks(pid))
        XCTAssertLessThanOrEqual(daemonHolds, 128 - 16, "the daemon keeps descriptors for its own files, whoever opens")

        // A truncating open fails before it truncates, a create too, and a folder's open.
        /// The errno of an open of `path` (0: it opened, and is closed again).
        func failure(_ path: String, _ flags: Int32) -> Int32 {
            let fd = open(path, flags, 0o644)
            if fd >= 0 { Glibc.close(fd); return 0 }
            return errno
        }
        XCTAssertEqual(failure(file, O_WRONLY | O_TRUNC), ENFILE, "a truncating open at the reserve")
        XCTAssertEqual(failure(file, O_WRONLY | O_CREAT | O_TRUNC), ENFILE, "a create of the file there")
        XCTAssertEqual(failure(fixture.mountpoint + "/new.txt", O_WRONLY | O_CREAT | O_TRUNC), ENFILE, "a create of a new file")
        XCTAssertFalse(FileManager.default.fileExists(atPath: fixture.backing + "/new.txt"), "the refused create made nothing")
        XCTAssertEqual(try String(contentsOfFile: fixture.backing + "/held.txt", encoding: .utf8), "keep me", "nothing truncated")
        XCTAssertEqual(failure(fixture.mountpoint, O_RDONLY | O_DIRECTORY), ENFILE, "a folder's open at the reserve")
        XCTAssertTrue(daemonLog().contains("which it keeps for its own files"), "the daemon's log says why: \(daemonLog().suffix(600))")

        // Closed again, the file opens, and truncates. (Once the daemon has handled the kernel's
        // releases, which come after close(2) returns: before, the open could find the reserve
        // still taken and fail with ENFILE.)
        held.forEach { Glibc.close($0) }
        held.removeAll()
        // (The file's node may keep a descriptor of its own by then: a few more than before.)
        eventually("the daemon gave back the closed opens' descriptors (\(inBackingBefore) in the backing folder before them)", within: 20) {
            (fixture.daemonDescriptorsInBacking() ?? .max) <= inBackingBefore + 4
        }
        let fd = open(file, O_WRONLY | O_TRUNC)
        XCTAssertGreaterThanOrEqual(fd, 0, "opens once others closed: \(String(cString: strerror(errno)))")
        if fd >= 0 { Glibc.close(fd) }
        XCTAssertEqual(try String(contentsOfFile: fixture.backing + "/held.txt", encoding: .utf8), "")
        XCTAssertEqual(kill(pid, 0), 0, "the daemon lives")
    }
}
