import Foundation
import Glibc
import TestSupport
import XCTest

/// How the daemon shares out its descriptors (docs/architecture.md, "The daemon's descriptors";
/// docs/protocol.md, "Limits"), through the real binary under `prlimit` without CAP_SYS_RESOURCE:
/// every share is cut from RLIMIT_NOFILE as in force once the daemon raised it (soft to hard),
/// and the opens through the mount and the control-socket connections of all users other than
/// root and the owner draw from one share, so that however many uids they use, root's `cat`,
/// `echo >`, `ls` and `coordfs status` are served.
///
/// Before: the node budget (and the callers' names table) was taken from the soft limit before
/// the daemon raised it (512 nodes at a soft limit of 1,024 raised to 4,096, and the others' pool
/// 2,688 of 4,096), and connections were bounded by `max_connections` and `max_user_connections`
/// alone, beside the opens' pool: four uids' 256 connections each took what the opens left.
final class DescriptorSharesTests: MountTestCase {
    override var descriptorLimit: Int? {
        if name.contains("CannotRaise") { return 2048 }
        if name.contains("SeveralUsers") { return 1024 }
        return 4096
    }
    override var softDescriptorLimit: Int? { name.contains("TheDaemonRaised") ? 1024 : nil }
    override var comparesTreesAtEnd: Bool { false }
    override var mountOptions: [String] {
        (try? MountTarget.fromEnvironment().isCoordFS) == true
            ? super.mountOptions + ["max_user_open_files=100000", "metrics=127.0.0.1:0"] : super.mountOptions
    }

    /// What `DescriptorShares` cuts from `limit`: (nodes, both callers' names tables, others).
    private static func shares(_ limit: Int) -> (nodes: Int, names: Int, others: Int) {
        let nodes = max(256, limit / 2), names = 2 * max(16, min(512, limit / 16))
        let rest = max(0, limit - nodes - names)
        return (nodes, names, rest - max(64, rest / 4))
    }

    /// The soft limit 1,024, the hard 4,096: the daemon raises it and cuts every share from 4,096.
    /// Its log and metrics say so; root's lookups of 1,500 files keep their nodes' descriptors
    /// (the node budget is 2,048, not 512); nobody's four processes opening 400 times each hold
    /// 1,152 (the others' share of 4,096), the rest ENFILE; root is served meanwhile.
    func testTheSharesFollowTheLimitTheDaemonRaised() throws {
        guard target.isCoordFS else { throw XCTSkip("a coordfs daemon's descriptors") }
        XCTAssertEqual(fixture.daemonDescriptorLimit(), 4096, "the daemon raised its soft limit to the hard one")
        let expected = Self.shares(4096)
        XCTAssertEqual(expected.nodes, 2048)
        XCTAssertEqual(expected.others, 1152)
        try assertSharesAreSaid(4096)

        // The node budget: root's lookups of 1,500 files each keep their node's descriptor.
        mkdir(backing("many"), 0o755)
        for i in 0..<1500 { XCTAssertTrue(FileManager.default.createFile(atPath: backing("many/f\(i)"), contents: nil)) }
        var st = stat()
        for i in 0..<1500 { XCTAssertEqual(stat(mnt("many/f\(i)"), &st), 0, "stat f\(i) through the mount") }
        let inBacking = fixture.daemonDescriptorsInBacking() ?? 0
        XCTAssertGreaterThanOrEqual(inBacking, 1500, "the nodes of 1,500 looked-up files hold descriptors within a node budget of 2,048 (512 was cut from the soft limit before the raise)")

        try assertOthersOpensStopAtTheirShare(expected.others, processes: 4, each: 400)
    }

    /// The limit 2,048, soft and hard: nothing to raise; the shares are cut from 2,048 and nobody's
    /// opens stop at 576.
    func testTheSharesFollowALimitTheDaemonCannotRaise() throws {
        guard target.isCoordFS else { throw XCTSkip("a coordfs daemon's descriptors") }
        XCTAssertEqual(fixture.daemonDescriptorLimit(), 2048)
        XCTAssertEqual(Self.shares(2048).others, 576)
        try assertSharesAreSaid(2048)
        try assertOthersOpensStopAtTheirShare(576, processes: 4, each: 200)
    }

    /// Four uids (nobody, 65533, 65532, 65531) each open root's 0644 file 30 times, connect to the
    /// control socket until refused, then open until refused, all at once: together they hold
    /// exactly the others' share of 1,024 (288: an open one, a connection two), each refused with
    /// ENFILE and `limitExceeded` beyond it; root's `cat`, `echo >`, `ls` and `coordfs status` work
    /// meanwhile; the daemon keeps descriptors to spare; once they exit, the share is free again.
    func testSeveralUsersOpensAndConnectionsTogetherLeaveRootItsDescriptors() throws {
        guard target.isCoordFS else { throw XCTSkip("a coordfs daemon's descriptors") }
        XCTAssertEqual(fixture.daemonDescriptorLimit(), 1024)
        let share = Self.shares(1024).others
        XCTAssertEqual(share, 288)
        try makeSharedFile()

        let hogs = try [65534, 65533, 65532, 65531].map { uid in
            try Hog(uid: uid_t(uid), file: mnt("shared/doc.txt"), socket: fixture.backing + "/.coordfs/control.sock")
        }
        defer { hogs.forEach { $0.end() } }
        let reports = hogs.map { $0.report() }
        for (h, r) in zip(hogs, reports) { XCTAssertNotNil(r, "uid \(h.uid): \(h.errors)") }
        let held = reports.compactMap { $0 }
        let opens = held.map(\.opens).reduce(0, +), connections = held.map(\.connections).reduce(0, +)
        XCTAssertEqual(opens + 2 * connections, share, "the four uids hold the others' share and no more: \(held)")
        XCTAssertGreaterThan(connections, 0, "they got connections: \(held)")
        for r in held {
            XCTAssertEqual(r.lastOpen, "ENFILE", "each uid's last open is refused with ENFILE: \(held)")
            // Refused: `limitExceeded`, or closed before the client could read it (not left waiting).
            XCTAssertTrue(["limitExceeded", "closed"].contains(r.lastConnection), "each uid's last connection is refused: \(held)")
        }
        XCTAssertEqual(metric("coordfs_others_descriptors"), Double(share), "the metrics count what they hold")
        XCTAssertGreaterThanOrEqual(metric("coordfs_control_connections_refused_total") ?? 0, 4, "and the connections refused")
        XCTAssertTrue(daemonLog().contains("users other than root and the owner hold \(share) of the daemon's descriptors"),
                      "the daemon's log says the share is taken: \(daemonLog().suffix(800))")

        try assertRootIsServedThroughItsTools("four uids holding the others' share")
        XCTAssertLessThan(fixture.daemonOpenDescriptors() ?? 1024, 1024 - 64, "the daemon keeps descriptors to spare")

        hogs.forEach { $0.end() }
        eventually("the share is free once they exited") { metric("coordfs_others_descriptors") == 0 }
        let again = try Hog(uid: 65534, file: mnt("shared/doc.txt"), socket: fixture.backing + "/.coordfs/control.sock", opens: 10, connections: 5)
        defer { again.end() }
        let second = try XCTUnwrap(again.report(), again.errors)
        XCTAssertEqual(second.opens, 10 + (share - 10 - 10), "nobody alone gets the whole share again: \(second)")
        XCTAssertEqual(second.connections, 5)
    }

    // MARK: Helpers

    /// The daemon's log line and metrics state the shares of `limit`.
    private func assertSharesAreSaid(_ limit: Int, file: StaticString = #filePath, line: UInt = #line) throws {
        let s = Self.shares(limit)
        let said = "coordfs: descriptors: \(limit) (RLIMIT_NOFILE in force): \(s.nodes) for nodes, \(s.names) for callers' names, \(s.others) for users other than root and the owner"
        XCTAssertTrue(daemonLog().contains(said), "the daemon's log says `\(said)`: \(daemonLog().suffix(800))", file: file, line: line)
        let reserve = "the top \(min(256, max(32, limit / 16))) numbers only for the daemon's own"
        XCTAssertTrue(daemonLog().contains(reserve), "the daemon's log says `\(reserve)`: \(daemonLog().suffix(800))", file: file, line: line)
        XCTAssertEqual(metric("coordfs_node_descriptors_limit"), Double(s.nodes), "the node budget's metric", file: file, line: line)
        XCTAssertEqual(metric("coordfs_others_descriptors_limit"), Double(s.others), "the others' share's metric", file: file, line: line)
        XCTAssertEqual(metric("process_max_fds"), Double(limit), file: file, line: line)
    }

    /// `processes` of nobody's opening root's file `each` times hold `share` in all, the rest ENFILE;
    /// root is served meanwhile.
    private func assertOthersOpensStopAtTheirShare(_ share: Int, processes: Int, each: Int,
                                                  file: StaticString = #filePath, line: UInt = #line) throws {
        try makeSharedFile()
        let holders = try (0..<processes).map { _ in try OpenFileLimitTests.Holder(uid: 65534, path: mnt("shared/doc.txt"), count: each) }
        defer { holders.forEach { $0.end() } }
        let reports = holders.map { $0.report() }
        for (h, r) in zip(holders, reports) { XCTAssertNotNil(r, "nobody's opens: \(h.errors)", file: file, line: line) }
        let opened = reports.compactMap { $0?.opened }.reduce(0, +)
        XCTAssertEqual(opened, share, "nobody's processes hold the others' share of the limit as raised, no more: \(reports)", file: file, line: line)
        for r in reports.compactMap({ $0 }) where r.opened < each {
            XCTAssertEqual(r.refusal, "ENFILE", "beyond it: ENFILE (\(reports))", file: file, line: line)
        }
        XCTAssertEqual(metric("coordfs_open_files_others"), Double(share), file: file, line: line)
        try assertRootIsServedThroughItsTools("nobody holding the others' share", file: file, line: line)
    }

    private func makeSharedFile() throws {
        if access(backing("shared/doc.txt"), F_OK) == 0 { return }
        XCTAssertEqual(mkdir(mnt("shared"), 0o755), 0)
        XCTAssertTrue(FileManager.default.createFile(atPath: mnt("shared/doc.txt"), contents: Data("hello\n".utf8),
                                                     attributes: [.posixPermissions: 0o644]))
    }

    /// Root's `cat`, `echo >` (through sh) and `ls` through the mount, and `coordfs status`.
    private func assertRootIsServedThroughItsTools(_ what: String, file: StaticString = #filePath, line: UInt = #line) throws {
        let cat = Spawn.run("/bin/cat", [mnt("shared/doc.txt")])
        XCTAssertEqual(cat.status, 0, "\(what): root's cat: \(cat)", file: file, line: line)
        XCTAssertEqual(cat.stdout, "hello\n", "\(what): root's cat", file: file, line: line)
        let name = "root-\(UInt32.random(in: 0...UInt32.max)).txt"
        let echo = Spawn.run("/bin/sh", ["-c", "echo saved > \"$0\"", mnt(name)])
        XCTAssertEqual(echo.status, 0, "\(what): root's echo >: \(echo)", file: file, line: line)
        XCTAssertEqual(try? String(contentsOfFile: backing(name), encoding: .utf8), "saved\n", "\(what): root's file is in the backing folder", file: file, line: line)
        let ls = Spawn.run("/bin/ls", [mnt("shared")])
        XCTAssertEqual(ls.status, 0, "\(what): root's ls: \(ls)", file: file, line: line)
        XCTAssertEqual(ls.stdout, "doc.txt\n", file: file, line: line)
        guard case .coordfs(let bin) = target else { return }
        let status = Spawn.run(bin, ["status", fixture.mnt])
        XCTAssertEqual(status.status, 0, "\(what): root's `coordfs status` connects: \(status)", file: file, line: line)
    }

    /// A process of `uid` that opens FILE `opens` times, connects to the control socket (saying
    /// hello) up to `connections` times or until one is refused, then opens FILE until refused;
    /// prints "<opens> <connections> <errno of its last open> <how its last connection ended:
    /// OK, limitExceeded, closed, timeout>" and holds everything until killed.
    static let hog = pythonFraming + #"""
    import os, errno, time
    path, sock_path, first, most = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    fds, socks = [], []
    def opens(limit):
        for _ in range(limit):
            try:
                fds.append(os.open(path, os.O_RDONLY))
            except OSError as e:
                return errno.errorcode.get(e.errno, str(e.errno))
        return "OK"
    def connections(limit):
        for _ in range(limit):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(5)
            try:
                s.connect(sock_path)
            except OSError as e:
                s.close()
                return "connect-" + errno.errorcode.get(e.errno, "?")
            try:
                send_on(s, {"type": "hello", "id": 1, "versions": [1]})
            except OSError:
                pass  # refused at once: its error frame may still be there to read
            try:
                reply = receive_on(s)
            except socket.timeout:
                s.close()
                return "timeout"
            except (OSError, EOFError):
                s.close()
                return "closed"  # refused and closed before its error frame could be read
            if reply.get("type") != "welcome":
                s.close()
                return reply.get("code", reply.get("type", "?"))
            socks.append(s)
        return "OK"
    opens(first)
    last_connection = connections(most)
    last_open = opens(100000)
    print(len(fds), len(socks), last_open, last_connection, flush=True)
    time.sleep(600)
    """#

    /// A `hog` run as `uid` under setpriv, and what it printed.
    final class Hog: ScriptAsUser {
        init(uid: uid_t, file: String, socket: String, opens: Int = 30, connections: Int = 300) throws {
            try super.init(uid: uid, script: DescriptorSharesTests.hog, arguments: [file, socket, "\(opens)", "\(connections)"])
        }

        /// What it printed once done (nil when nothing came within two minutes).
        func report() -> (opens: Int, connections: Int, lastOpen: String, lastConnection: String)? {
            guard let f = fields(4, within: 120), let o = Int(f[0]), let c = Int(f[1]) else { return nil }
            return (o, c, f[2], f[3])
        }
    }
}
