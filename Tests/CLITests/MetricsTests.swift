// The daemon's Prometheus endpoint (`-o metrics=HOST:PORT`, docs/metrics.md): real mount, real
// scrapes over TCP, `promtool check metrics` on the real output, and the numbers moving with what
// happens through the mount.
import Foundation
import Glibc
import XCTest
import TestSupport
import EtcdTestSupport

final class MetricsTests: CLITestCase {
    /// The address the daemon printed to its log (`coordfs: metrics at http://ADDR/metrics`).
    private func metricsPort(host: String = "127.0.0.1", file: StaticString = #filePath, line: UInt = #line) throws -> UInt16 {
        let deadline = Date().addingTimeInterval(10)
        while Date() < deadline {
            let log = (try? String(contentsOfFile: backing + "/.coordfs/daemon.log", encoding: .utf8)) ?? ""
            if let l = log.split(separator: "\n").last(where: { $0.contains("metrics at http://\(host):") }),
               let port = l.split(separator: ":").last?.split(separator: "/").first.flatMap({ UInt16($0) }) {
                return port
            }
            usleep(50_000)
        }
        throw CLIError("the daemon did not say where its metrics are")
    }

    /// One scrape: series (name with labels) to value.
    private func scrape(_ port: UInt16, file: StaticString = #filePath, line: UInt = #line) throws -> (text: String, values: [String: Double]) {
        guard let r = HTTP.request(port: port, "GET", "/metrics") else { throw CLIError("no answer from the metrics endpoint") }
        XCTAssertEqual(r.status, 200, "\(r)", file: file, line: line)
        XCTAssertTrue(r.headers["content-type"]?.hasPrefix("text/plain; version=0.0.4") == true, "\(r.headers)", file: file, line: line)
        var values: [String: Double] = [:]
        for l in r.text.split(separator: "\n") where !l.hasPrefix("#") {
            guard let space = l.lastIndex(of: " "), let v = Double(l[l.index(after: space)...]) else {
                XCTFail("not a sample: \(l)", file: file, line: line)
                continue
            }
            values[String(l[..<space])] = v
        }
        return (r.text, values)
    }

    private func wait(_ port: UInt16, until series: String, _ ok: (Double) -> Bool, file: StaticString = #filePath, line: UInt = #line) throws -> [String: Double] {
        let deadline = Date().addingTimeInterval(10)
        var values = try scrape(port).values
        while !(values[series].map(ok) ?? false) && Date() < deadline {
            usleep(100_000)
            values = try scrape(port).values
        }
        XCTAssertTrue(values[series].map(ok) ?? false, "\(series) = \(values[series].map { "\($0)" } ?? "missing")", file: file, line: line)
        return values
    }

    func testTheEndpointPassesPromtoolAndCountsWhatHappensThroughTheMount() throws {
        FileManager.default.createFile(atPath: backing + "/doc.txt", contents: Data("base\n".utf8))
        try mount(options: ["metrics=127.0.0.1:0"])
        let port = try metricsPort()
        let before = try scrape(port).values
        XCTAssertEqual(before["coordfs_conflicts_open"], 0)
        XCTAssertEqual(before["coordfs_presenters"], 0)

        // A presenter with unsaved changes, a write through the mount: asks, a kept version, a conflict.
        let presenter = try present("doc.txt", unsaved: true)
        XCTAssertEqual(sh("echo theirs > '\(mnt!)/doc.txt' && echo new > '\(mnt!)/new.txt' && cat '\(mnt!)/new.txt' >/dev/null").status, 0)
        let after = try wait(port, until: "coordfs_conflicts_open") { $0 == 1 }
        XCTAssertEqual(after["coordfs_presenters"], 1)
        XCTAssertGreaterThanOrEqual(after["coordfs_fuse_requests_total{operation=\"create\"}"] ?? 0, 1)
        XCTAssertGreaterThan(after["coordfs_fuse_requests_total{operation=\"lookup\"}"] ?? 0, before["coordfs_fuse_requests_total{operation=\"lookup\"}"] ?? 0)
        XCTAssertGreaterThanOrEqual(after["coordfs_coordination_requests_total"] ?? 0, 3)
        XCTAssertGreaterThanOrEqual(after["coordfs_coordination_grants_total"] ?? 0, 3)
        XCTAssertGreaterThanOrEqual(after["coordfs_ask_duration_seconds_count"] ?? 0, 1, "the presenter was asked and answered")
        let kept = ["reflink", "copy"].map { after["coordfs_snapshots_total{method=\"\($0)\"}"] ?? 0 }.reduce(0, +)
        XCTAssertGreaterThanOrEqual(kept, 1, "the presenter's base was kept")
        let keptBytes = ["reflink", "copy"].map { after["coordfs_snapshot_bytes_total{method=\"\($0)\"}"] ?? 0 }.reduce(0, +)
        XCTAssertGreaterThanOrEqual(keptBytes, 5, "base\\n")
        // The store only clones or copies: those are the methods listed, and no `link` that cannot move.
        for family in ["coordfs_snapshots_total", "coordfs_snapshot_bytes_total"] {
            XCTAssertEqual(Set(after.keys.filter { $0.hasPrefix(family + "{") }), Set(["reflink", "copy"].map { "\(family){method=\"\($0)\"}" }))
        }
        XCTAssertGreaterThan(after["coordfs_event_log_records_total"] ?? 0, 0)
        XCTAssertGreaterThan(after["coordfs_event_log_written_bytes_total"] ?? 0, 0)
        XCTAssertEqual(after["coordfs_event_log_gap_records_total"], 0)
        XCTAssertGreaterThan(after["process_open_fds"] ?? 0, 0)
        XCTAssertGreaterThan(after["process_resident_memory_bytes"] ?? 0, 1_048_576)
        XCTAssertGreaterThan(after["process_start_time_seconds"] ?? 0, 1_600_000_000)

        // A presenter that refuses a save: a denial.
        let refuser = try startCoordfs(["present", mnt + "/locked.txt", "--on-save", "exit 1"])
        _ = refuser.waitForLines(1)
        FileManager.default.createFile(atPath: backing + "/locked.txt", contents: Data("x\n".utf8))
        _ = coordfs("coordinate", "--read", mnt + "/locked.txt", "-q", "--", "/bin/true")
        _ = try wait(port, until: "coordfs_coordination_denials_total") { $0 >= 1 }

        // promtool, on the real output.
        let text = try scrape(port).text
        let file = root + "/metrics.txt"
        try text.write(toFile: file, atomically: false, encoding: .utf8)
        guard access("/usr/bin/promtool", X_OK) == 0 else { return XCTFail("promtool is missing: make deps installs Debian's prometheus package") }
        let check = sh("promtool check metrics < '\(file)'")
        XCTAssertEqual(check.status, 0, "promtool check metrics: \(check)")
        for help in ["coordfs_fuse_requests_total", "coordfs_ask_duration_seconds", "coordfs_conflicts_open", "coordfs_event_log_users_over_share", "coordfs_event_log_records_summarised_total", "process_cpu_seconds_total"] {
            XCTAssertTrue(text.contains("# HELP \(help) "), "help for \(help)")
        }
        XCTAssertTrue(text.contains("# TYPE coordfs_ask_duration_seconds histogram"), text)
        XCTAssertTrue(text.contains("# TYPE coordfs_fuse_requests_total counter"), text)
        XCTAssertFalse(text.contains("doc.txt"), "no names in the metrics")

        // Only /metrics, only GET.
        XCTAssertEqual(HTTP.request(port: port, "GET", "/")?.status, 404)
        XCTAssertEqual(HTTP.request(port: port, "POST", "/metrics")?.status, 405)
        _ = presenter
    }

    /// Another local user's connections to the endpoint hold up no scrape: nobody opens 300
    /// connections that send nothing and one that sends a byte a second; root's scrapes meanwhile
    /// are each answered within a second, nobody keeps at most 8 connections (the rest closed at
    /// their accept) and its trickle is cut after 2 s. Before, the endpoint served one connection at
    /// a time and waited 5 s for each read: root's scrapes got no answer while nobody's connections
    /// queued (10 s and more), and a trickle held it for as long as it went on.
    func testAnotherUsersIdleConnectionsDoNotHoldUpAScrape() throws {
        try mount(options: ["metrics=127.0.0.1:0"])
        let port = try metricsPort()
        let script = #"""
        import socket, sys, time
        port = int(sys.argv[1])
        socks = []
        for i in range(300):
            s = socket.socket()
            s.settimeout(5)
            try:
                s.connect(("127.0.0.1", port))
                socks.append(s)
            except OSError:
                s.close()
        trickle = socket.create_connection(("127.0.0.1", port), timeout=5)
        print("connected %d" % len(socks), flush=True)
        cut = None
        start = time.monotonic()
        while time.monotonic() - start < 6:
            try:
                trickle.send(b"G")
            except OSError:
                cut = time.monotonic() - start
                break
            time.sleep(1)
        closed = 0
        for s in socks:
            s.settimeout(0.01)
            try:
                if s.recv(1) == b"": closed += 1
            except socket.timeout:
                pass
            except OSError:
                closed += 1
        print("closed %d cut %s" % (closed, "%.1f" % cut if cut is not None else "never"), flush=True)
        """#
        let flood = try start("/usr/bin/setpriv", ["--reuid=65534", "--regid=65534", "--clear-groups", "--",
                                                   "/usr/bin/python3", "-c", script, "\(port)"])
        defer { _ = flood.wait(timeout: 20) }
        let connected = Date().addingTimeInterval(30)
        while !flood.stdout.contains("connected") && flood.wait(timeout: 0) == nil && Date() < connected { usleep(50_000) }
        XCTAssertTrue(flood.stdout.contains("connected 300"), "\(flood.stdout) \(flood.stderr)")
        for _ in 0..<3 {
            let asked = Date()
            let r = HTTP.request(port: port, "GET", "/metrics", timeout: 10)
            XCTAssertEqual(r?.status, 200, "root's scrape is answered: \(String(describing: r))")
            XCTAssertLessThan(Date().timeIntervalSince(asked), 1, "root's scrape waited for nobody's connections")
            usleep(300_000)
        }
        XCTAssertEqual(flood.wait(timeout: 20), 0, flood.stderr)
        let counts = flood.stdout.split(separator: "\n").last.map { String($0) } ?? ""
        let numbers = counts.split(whereSeparator: { !$0.isNumber && $0 != "." }).compactMap { Double($0) }
        XCTAssertTrue(counts.hasPrefix("closed") && numbers.count == 2, "\(flood.stdout)")
        XCTAssertGreaterThanOrEqual(numbers.first ?? 0, 292, "nobody keeps at most 8 connections: \(counts)")
        XCTAssertLessThanOrEqual(numbers.last ?? 99, 4, "the trickle is cut near its 2 s: \(counts)")
    }

    /// `GET /metrics` from `host`:`port` by a Python process run as nobody (`launcher` first, as
    /// `nsenter --net=...` for another host): the status and the body.
    private func scrapeAsNobody(_ port: UInt16, host: String = "127.0.0.1", launcher: [String] = []) -> (status: Int, body: String) {
        let script = #"""
        import http.client, sys
        c = http.client.HTTPConnection(sys.argv[1], int(sys.argv[2]), timeout=5)
        c.request("GET", "/metrics")
        r = c.getresponse()
        print(r.status)
        print(r.read().decode())
        """#
        let command = launcher + ["/usr/bin/setpriv"] + user(65534) + ["/usr/bin/python3", "-c", script, host, "\(port)"]
        let r = run(command[0], Array(command.dropFirst()))
        let lines = r.stdout.split(separator: "\n", maxSplits: 1)
        return (lines.first.flatMap { Int($0) } ?? -1, lines.count > 1 ? String(lines[1]) : r.stderr)
    }

    /// The numbers tell when a shared mount is busy and with what, so on this machine only root,
    /// the mount's user and the users of `metrics_users=` read them: nobody's scrape is answered
    /// 403 with no number in it (before, every local user read them), until a mount names nobody.
    func testOnlyRootTheMountsUserAndTheListedUsersReadTheNumbers() throws {
        try mount(options: ["allow_other", "metrics=127.0.0.1:0"])
        var port = try metricsPort()
        let refused = scrapeAsNobody(port)
        XCTAssertEqual(refused.status, 403, refused.body)
        XCTAssertTrue(refused.body.contains("metrics_users="), refused.body)
        XCTAssertFalse(refused.body.contains("coordfs_"), "no number for nobody: \(refused.body)")
        XCTAssertEqual(HTTP.request(port: port, "GET", "/metrics")?.status, 200, "root reads them")
        let log = (try? String(contentsOfFile: backing + "/.coordfs/daemon.log", encoding: .utf8)) ?? ""
        XCTAssertTrue(log.contains("metrics readable by local uids 0 (others: 403)"), log)
        unmount()

        try mount(options: ["allow_other", "metrics=127.0.0.1:0", "metrics_users=nobody"])
        port = try metricsPort()
        let allowed = scrapeAsNobody(port)
        XCTAssertEqual(allowed.status, 200, allowed.body)
        XCTAssertTrue(allowed.body.contains("coordfs_fuse_requests_total"), allowed.body)
    }

    /// An endpoint listening beyond loopback: a scraper on another host (a process in a network
    /// namespace of its own across a veth pair, whose socket this machine's sock_diag cannot see)
    /// is answered, as a Prometheus elsewhere would be, while a local user reaching the same
    /// address from this host is still refused.
    func testAScraperOnAnotherHostIsAnsweredAndALocalUserAtTheSameAddressIsNot() throws {
        let other = try NetworkNamespace()
        defer { other.remove() }
        try mount(options: ["allow_other", "metrics=0.0.0.0:0"])
        let port = try metricsPort(host: "0.0.0.0")
        let remote = scrapeAsNobody(port, host: other.hostAddress, launcher: other.enter)
        XCTAssertEqual(remote.status, 200, remote.body)
        XCTAssertTrue(remote.body.contains("coordfs_fuse_requests_total"), remote.body)
        let local = scrapeAsNobody(port, host: other.hostAddress)
        XCTAssertEqual(local.status, 403, local.body)
    }

    /// A user `metrics_users=` cannot name, or the option without an endpoint: a clear error, no mount.
    func testABadMetricsUsersOptionIsRefusedBeforeAnythingIsMounted() throws {
        for (bad, says) in [("metrics=127.0.0.1:0,metrics_users=no-such-user-here", "names no user no-such-user-here"),
                            ("metrics=127.0.0.1:0,metrics_users=", "expects user names or uids"),
                            ("metrics_users=nobody", "needs metrics=HOST:PORT")] {
            let r = coordfs("mount", backing, mnt, "-o", bad)
            XCTAssertEqual(r.status, 1, "\(bad): \(r)")
            XCTAssertTrue(r.stderr.contains(says), "\(bad): \(r)")
            XCTAssertTrue(Self.mounts(under: root).isEmpty, bad)
        }
    }

    func testABadAddressIsRefusedBeforeAnythingIsMounted() throws {
        for bad in ["metrics=example.com:80", "metrics=127.0.0.1", "metrics=127.0.0.1:70000", "metrics=:9464"] {
            let r = coordfs("mount", backing, mnt, "-o", bad)
            XCTAssertEqual(r.status, 1, "\(bad): \(r)")
            XCTAssertTrue(r.stderr.contains("metrics"), "\(bad): \(r)")
            XCTAssertTrue(Self.mounts(under: root).isEmpty, bad)
        }
        // A port that is taken: the mount says so and does not stay up half-configured.
        let taken = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(taken) }
        var a = sockaddr_in()
        a.sin_family = sa_family_t(AF_INET)
        inet_pton(AF_INET, "127.0.0.1", &a.sin_addr)
        _ = withUnsafePointer(to: &a) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(taken, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        listen(taken, 1)
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &a) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(taken, $0, &length) } }
        let port = UInt16(bigEndian: a.sin_port)
        let r = coordfs("mount", backing, mnt, "-o", "metrics=127.0.0.1:\(port)")
        XCTAssertNotEqual(r.status, 0, "\(r)")
        XCTAssertTrue((r.stderr + r.stdout).contains("cannot listen on 127.0.0.1:\(port)"), "\(r)")
        usleep(300_000)
        XCTAssertTrue(Self.mounts(under: root).isEmpty, "nothing mounted")
    }
}
