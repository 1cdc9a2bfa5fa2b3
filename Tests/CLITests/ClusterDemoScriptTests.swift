import Foundation
import Glibc
import XCTest

/// `mount-scripts/cluster-demo.sh` (`make cluster-demo`) as a user runs it, with the built binary:
/// it starts etcd, mounts two nodes, shows the cluster and a cross-node ask with its conflict, and
/// leaves no mount, no etcd and no etcd data behind, when it ends by itself and on Ctrl-C.
final class ClusterDemoScriptTests: CLITestCase {
    private var etcdPIDs: [pid_t] = []

    private var script: String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("mount-scripts/cluster-demo.sh").path
    }

    override func setUpWithError() throws {
        try super.setUpWithError()
        guard access("/usr/bin/etcd", X_OK) == 0 else { throw XCTSkip("no etcd (make deps installs etcd-server)") }
    }

    override func tearDownWithError() throws {
        // Should the script have died without its cleanup: its etcd goes too (its mounts are
        // under the test's root, which the fixture unmounts).
        for pid in etcdPIDs where kill(pid, 0) == 0 { kill(pid, SIGKILL) }
        try super.tearDownWithError()
    }

    private func demo(_ environment: [String: String]) throws -> Child {
        try start("/usr/bin/setsid", [script], environment: ["BIN": binary, "DEMO": root + "/demo"].merging(environment) { $1 })
    }

    /// The etcd pid and data folder the script announced.
    private func etcd(_ output: String) -> (pid: pid_t, data: String)? {
        guard let line = output.split(separator: "\n").first(where: { $0.hasPrefix("== etcd at ") }),
              let pidPart = line.range(of: "(pid "), let dataPart = line.range(of: ", data in ") else { return nil }
        let pid = pid_t(line[pidPart.upperBound...].prefix { $0.isNumber }) ?? 0
        let data = String(line[dataPart.upperBound...].dropLast())
        if pid > 0 { etcdPIDs.append(pid) }
        return (pid, data)
    }

    private func assertCleanedUp(_ output: String, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertTrue(Self.mounts(under: root).isEmpty, "mounts left: \(Self.mounts(under: root))", file: file, line: line)
        guard let (pid, data) = etcd(output) else { return XCTFail("no etcd line: \(output)", file: file, line: line) }
        let deadline = Date().addingTimeInterval(5)
        while kill(pid, 0) == 0 && Date() < deadline { usleep(20_000) }
        XCTAssertNotEqual(kill(pid, 0), 0, "etcd \(pid) still runs", file: file, line: line)
        XCTAssertNotEqual(access(data, F_OK), 0, "etcd's data \(data) left", file: file, line: line)
    }

    func testTheDemoShowsTheClusterAndACrossNodeAskAndCleansUp() throws {
        let child = try demo(["CLUSTER_DEMO_NONINTERACTIVE": "1"])
        let status = child.wait(timeout: 120) ?? child.stop(SIGKILL)
        let out = child.stdout
        XCTAssertEqual(status, 0, "\(out)\n\(child.stderr)")
        XCTAssertTrue(out.contains("nodes (2)") && out.contains("b (this)"), out)
        XCTAssertTrue(out.contains("etcd: reachable, session valid"), out)
        XCTAssertTrue(out.contains("ask ask#1 relinquishToWriter report.txt"), "A's presenter asked when B saved: \(out)")
        XCTAssertTrue(out.contains("action=conflict"), out)
        XCTAssertTrue(out.contains("node A shows B's bytes: B's version"), out)
        assertCleanedUp(out)
    }

    func testCtrlCWhileFollowingStepsUnmountsBothAndStopsEtcd() throws {
        let child = try demo([:])
        let deadline = Date().addingTimeInterval(120)
        while !child.stdout.contains("every node's steps follow here") && child.wait(timeout: 0) == nil && Date() < deadline { usleep(50_000) }
        XCTAssertTrue(child.stdout.contains("every node's steps follow here"), "\(child.stdout)\n\(child.stderr)")
        XCTAssertEqual(Self.mounts(under: root).count, 2, "both nodes mounted while it runs")
        // A step while it follows: writes through node A (until the watch, started just after the
        // script's message, shows one).
        let shown = Date().addingTimeInterval(15)
        var n = 0
        while !child.stdout.contains("a: did") && Date() < shown {
            n += 1
            XCTAssertEqual(sh("echo \(n) > '\(root!)/demo/node-a/notes.txt'").status, 0)
            usleep(200_000)
        }
        XCTAssertTrue(child.stdout.contains("a: did"), "the watch shows node A's step: \(child.stdout)")
        kill(-child.pid, SIGINT)  // Ctrl-C: to the terminal's process group
        XCTAssertNotNil(child.wait(timeout: 30), "the script ends on Ctrl-C")
        assertCleanedUp(child.stdout)
    }
}
