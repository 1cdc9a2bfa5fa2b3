import Foundation
import Glibc
import XCTest

/// `mount-scripts/demo.sh` (`make run`) as a user runs it, with the built binary: it mounts the demo
/// folder, prints the page's launcher and follows the event log; Ctrl-C (SIGINT to the terminal's
/// process group, which `coordfs web` and `coordfs log -f` get too) unmounts and leaves no launcher.
final class DemoScriptTests: CLITestCase {
    private var script: String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("mount-scripts/demo.sh").path
    }

    func testCtrlCWhileFollowingTheLogUnmountsAndRemovesTheLauncher() throws {
        let child = try start("/usr/bin/setsid", [script], environment: ["BIN": binary, "DEMO": root + "/demo", "TMPDIR": root])
        let deadline = Date().addingTimeInterval(60)
        while !child.stdout.contains("the event log follows here") && child.wait(timeout: 0) == nil && Date() < deadline { usleep(50_000) }
        XCTAssertTrue(child.stdout.contains("the event log follows here"), "\(child.stdout)\n\(child.stderr)")
        XCTAssertEqual(Self.mounts(under: root).count, 1, "the demo folder is mounted while it runs")
        let launcher = child.stdout.split(separator: "\n").compactMap { line -> String? in
            guard let r = line.range(of: "file://") else { return nil }
            return String(line[r.upperBound...]).trimmingCharacters(in: .whitespaces)
        }.first
        XCTAssertNotNil(launcher, "the page's launcher is printed: \(child.stdout)")
        if let launcher { XCTAssertEqual(access(launcher, R_OK), 0, "the launcher \(launcher) is there while it runs") }
        // A user watches the log a while: by then `coordfs web` ends on Ctrl-C before the script's
        // cleanup runs (right after its start it may not), and the cleanup must go on to unmount.
        usleep(3_000_000)
        kill(-child.pid, SIGINT)  // Ctrl-C: to the terminal's process group
        XCTAssertNotNil(child.wait(timeout: 30), "the script ends on Ctrl-C")
        XCTAssertTrue(Self.mounts(under: root).isEmpty, "Ctrl-C unmounts: \(Self.mounts(under: root))\n\(child.stderr)")
        if let launcher { XCTAssertNotEqual(access(launcher, F_OK), 0, "the launcher \(launcher) is gone") }
    }
}
