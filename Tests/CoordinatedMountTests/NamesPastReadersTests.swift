import XCTest
import Foundation
import Coordination
@testable import CoordFS

/// A change of names (rename over or away, unlink, create, mkdir, link) does not wait for another
/// program's file open for reading through the mount: the reader keeps reading the file it opened,
/// whatever name it has now, or none, as natively. Waiting gained nothing and could not end: the
/// kernel holds the folder (and a rename's or unlink's files) locked while the request waits in
/// the daemon, so a reader that creates, removes or looks up a name in that folder before it
/// closes (a second `sed -i` of the same file, making its temporary file) waited for the first
/// until `write_wait` ran out. An explicit coordinated read still holds a rename up. `write_wait`
/// is 30 s here and every command runs under `timeout 10`: a change that completes exits 0, one
/// that waits is still waiting at 10 s (exit 124). docs/semantics.md, "Waits and deadlines".
final class NamesPastReadersTests: InProcessMountTestCase {
    override func configure(_ options: inout MountOptions) {
        super.configure(&options)
        options.coordination.writeWait = 30
    }

    /// Holds `relative` open for reading through the mount in another process until `end`; then
    /// the process writes what it reads through that descriptor to `seen` beside the mount.
    private func holdOpenForReading(_ relative: String) throws -> Process {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/bin/sh")
        p.arguments = ["-c", "exec 3< '\(relative)'; : > ../ready; while [ ! -e ../stop ]; do sleep 0.05; done; cat <&3 > ../seen"]
        p.currentDirectoryURL = URL(fileURLWithPath: mnt)
        p.standardInput = FileHandle.nullDevice
        try p.run()
        let deadline = Date().addingTimeInterval(20)
        while !FileManager.default.fileExists(atPath: root + "/ready") {
            guard Date() < deadline, p.isRunning else {
                p.terminate(); p.waitUntilExit()
                throw XCTSkip("the reader did not open the file")
            }
            usleep(5_000)
        }
        return p
    }

    /// What the reader read through its descriptor, once ended.
    private func end(_ p: Process) -> String? {
        FileManager.default.createFile(atPath: root + "/stop", contents: nil)
        let deadline = Date().addingTimeInterval(10)
        while p.isRunning && Date() < deadline { usleep(10_000) }
        if p.isRunning { p.terminate() }
        p.waitUntilExit()
        return try? String(contentsOfFile: root + "/seen", encoding: .utf8)
    }

    /// Runs `command` through the mount under `timeout 10`; its exit status (124: still waiting at 10 s).
    private func within10s(_ command: String) throws -> Int32 {
        try sh("timeout 10 sh -c \"\(command)\"", allowFailure: true, timeout: 40).status
    }

    private func backingText(_ relative: String) throws -> String {
        try String(contentsOfFile: backing + "/" + relative, encoding: .utf8)
    }

    func testSavesByRenameMovesAndRemovalsDoNotWaitForAFileOpenForReading() throws {
        try write("doc.txt", "one\n")
        try write("new.txt", "three\n")
        let reader = try holdOpenForReading("doc.txt")
        let presenter = try present("doc.txt")
        XCTAssertEqual(try within10s("sed -i s/one/two/ doc.txt"), 0, "a save by rename over the file is not held up (write_wait, 30 s)")
        XCTAssertEqual(try backingText("doc.txt"), "two\n")
        XCTAssertEqual(try within10s("mv new.txt doc.txt"), 0, "a rename over it")
        XCTAssertEqual(try backingText("doc.txt"), "three\n")
        XCTAssertEqual(try within10s("mv doc.txt moved.txt && rm moved.txt"), 0, "a move away and a removal")
        XCTAssertFalse(FileManager.default.fileExists(atPath: backing + "/moved.txt"))
        XCTAssertEqual(try within10s("echo four > doc.txt && mkdir dir && ln -s doc.txt link && ln doc.txt hard"), 0, "new names beside it")
        XCTAssertEqual(end(reader), "one\n", "the reader read the file it opened, as natively")
        // Presenters are still asked and told as for any save.
        let log = presenter.waitUntil(timeout: 5, settle: 0.5) { $0.contains("didChange") }
        XCTAssertTrue(log.contains("relinquishToWriter") && log.contains("didChange"), "\(log)")
    }

    /// Two `sed -i` of one file at once: each reads the file, then makes its temporary file in the
    /// same folder and renames it over the file. Before, the first one's rename waited for the
    /// second's read, while the kernel, holding the folder for that rename, kept the second from
    /// making its temporary file: both waited until `write_wait` (1 round in 5 here).
    func testTwoSedsOfOneFileAtOnceDoNotWaitForEachOther() throws {
        try write("doc.txt", "a\n")
        let rounds = "for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do sed -i s/a/b/ doc.txt & sed -i s/b/a/ doc.txt & wait; done"
        XCTAssertEqual(try within10s(rounds), 0, "20 rounds of two seds at once, none held up for write_wait (30 s)")
        let text = try backingText("doc.txt")
        XCTAssertTrue(["a\n", "b\n"].contains(text), text)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: backing).filter { $0.hasPrefix("sed") }, [], "no temporary file left")
    }

    func testARenameStillWaitsForAnExplicitCoordinatedRead() throws {
        try write("doc.txt", "one\n")
        try write("new.txt", "two\n")
        let held = try XCTUnwrap(coordinator.tryCoordinateImmediately(.readingIntent(with: try ItemPath("doc.txt")), origin: .currentProcess))
        defer { held.release() }
        XCTAssertEqual(try within10s("mv new.txt doc.txt"), 124, "an explicit coordinated read holds a rename over the file up (write_wait, 30 s)")
        XCTAssertEqual(try backingText("doc.txt"), "one\n")
    }
}
