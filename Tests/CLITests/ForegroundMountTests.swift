import XCTest
import Foundation
import Glibc
import Dispatch

/// `coordfs mount -f` started by a Swift program through Foundation's `Process` (a supervisor, or
/// `coordfs-bench cluster`'s nodes).
final class ForegroundMountTests: CLITestCase {
    /// Foundation's `Process` learns that a child exited when the child's end of a socket it
    /// inherited closes, and then waits for it in `waitpid` on the one thread that watches every
    /// child. A foreground mount that closed what it inherited looked exited at once: that thread
    /// then waited for the mount to end, and no other child of the starter was seen to exit (its
    /// `waitUntilExit` never returned) while the mount lived.
    func testAStarterThroughFoundationProcessStillSeesItsOtherChildrenExit() throws {
        let daemon = Process()
        daemon.executableURL = URL(fileURLWithPath: binary)
        daemon.arguments = ["mount", backing, mnt, "-f"]
        daemon.standardOutput = FileHandle.nullDevice
        daemon.standardError = FileHandle.nullDevice
        try daemon.run()
        defer {
            _ = coordfs("unmount", mnt)
            let deadline = Date().addingTimeInterval(20)
            while daemon.isRunning && Date() < deadline { usleep(20_000) }
            if daemon.isRunning { kill(daemon.processIdentifier, SIGKILL) }
        }
        let mounted = Date().addingTimeInterval(30)
        while Self.mounts(under: root).isEmpty && daemon.isRunning && Date() < mounted { usleep(20_000) }
        XCTAssertFalse(Self.mounts(under: root).isEmpty, "the mount did not come up")

        // Another child of the same starter, through Process too: its exit is seen at once.
        let other = Process()
        other.executableURL = URL(fileURLWithPath: "/bin/sh")
        other.arguments = ["-c", "exit 3"]
        try other.run()
        let exited = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            other.waitUntilExit()
            exited.signal()
        }
        XCTAssertEqual(exited.wait(timeout: .now() + 15), .success, "the other child's exit was not seen while the mount runs")
        XCTAssertFalse(other.isRunning)
        XCTAssertTrue(daemon.isRunning, "the mount still runs")
        // The mount works meanwhile.
        XCTAssertTrue(FileManager.default.createFile(atPath: mnt + "/file.txt", contents: Data("x".utf8)))
        XCTAssertEqual(try String(contentsOfFile: backing + "/file.txt", encoding: .utf8), "x")
    }
}
