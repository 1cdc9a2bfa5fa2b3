import CoordFS
import Coordination
import Foundation
import Glibc
import XCTest

/// On a mount other users share (`allow_other`), a user who may read a document but not write it
/// must not hold up its owner's saves by keeping it open (docs/protocol.md, "Who may delay or
/// refuse what": a read counts as a write). Before, nobody's `sleep < doc.txt` made every save of
/// root's world-readable document wait `write_wait` (5 s by default) for as long as it kept it open.
final class OtherUsersReadersTests: InProcessMountTestCase {
    override func configure(_ options: inout MountOptions) {
        super.configure(&options)
        options.allowOther = true
        // Long enough that a write held up by the reader would outlast `sh`'s generous timeout.
        options.coordination.writeWait = 600
    }

    static let asNobody = "setpriv --reuid=65534 --regid=65534 --clear-groups"

    /// Starts nobody's reader of `doc.txt` through the mount and waits until it holds it open.
    func nobodyKeepsOpen(_ relative: String) throws -> Process {
        chmod(root, 0o755)
        let marks = root + "/marks"
        mkdir(marks, 0o777)
        chmod(marks, 0o777)
        unlink(marks + "/ready")
        let reader = Process()
        reader.executableURL = URL(fileURLWithPath: "/bin/sh")
        reader.currentDirectoryURL = URL(fileURLWithPath: mnt)
        reader.arguments = ["-c", "exec \(Self.asNobody) /usr/bin/python3 -c \"import time; f = open('\(relative)'); "
                            + "open('\(marks)/ready', 'w'); time.sleep(3600)\""]
        reader.standardOutput = FileHandle.nullDevice
        reader.standardError = FileHandle.nullDevice
        try reader.run()
        let deadline = Date().addingTimeInterval(30)
        while !FileManager.default.fileExists(atPath: marks + "/ready") {
            guard Date() < deadline, reader.isRunning else {
                reader.terminate()
                XCTFail("nobody's reader did not open \(relative)")
                return reader
            }
            usleep(10_000)
        }
        return reader
    }

    func testAReaderWhoCouldNotWriteTheDocumentDoesNotHoldUpItsSaves() throws {
        try write("doc.txt", "old\n")
        chmod(backing + "/doc.txt", 0o644)
        let reader = try nobodyKeepsOpen("doc.txt")
        defer { reader.terminate(); reader.waitUntilExit() }
        XCTAssertGreaterThanOrEqual(coordinator.statusCounts().held, 1, "nobody's open holds a read")

        // Root's saves, in place and by rename, go ahead while nobody's reader keeps the file open.
        try sh("echo new > doc.txt", timeout: 120)
        try sh("sed -i s/new/newer/ doc.txt", timeout: 120)
        XCTAssertEqual(try String(contentsOfFile: backing + "/doc.txt", encoding: .utf8), "newer\n")
        XCTAssertTrue(reader.isRunning, "nobody still holds it open")
        let wentAhead = try logged().filter { $0.kind == .granted && $0.path == "/doc.txt" && $0.details.reason == "waitDeadline" }
        XCTAssertEqual(wentAhead.count, 0, "no save waited for the reader's deadline")
    }

    func testAReaderWhoCouldWriteTheDocumentStillHoldsUpAnotherUsersSave() throws {
        try write("doc.txt", "old\n")
        chmod(backing + "/doc.txt", 0o666)
        let reader = try nobodyKeepsOpen("doc.txt")
        defer { reader.terminate(); reader.waitUntilExit() }

        let save = Process()
        save.executableURL = URL(fileURLWithPath: "/bin/sh")
        save.arguments = ["-c", "echo new > doc.txt"]
        save.currentDirectoryURL = URL(fileURLWithPath: mnt)
        save.standardInput = FileHandle.nullDevice
        try save.run()
        defer { if save.isRunning { save.terminate() } }
        let deadline = Date().addingTimeInterval(30)
        while coordinator.statusCounts().waiting == 0 && Date() < deadline { usleep(10_000) }
        XCTAssertEqual(coordinator.statusCounts().waiting, 1, "root's save waits for the reader, who could write the document")
        XCTAssertTrue(save.isRunning)
        reader.terminate()
        reader.waitUntilExit()
        save.waitUntilExit()
        XCTAssertEqual(save.terminationStatus, 0)
        XCTAssertEqual(try String(contentsOfFile: backing + "/doc.txt", encoding: .utf8), "new\n")
    }
}
