import XCTest
import Foundation
import Linux
@testable import CoordFS

/// A process never waits for the files of the processes that started it (its parent, theirs), which
/// act with it as one program: `flock doc sh -c '... > doc'` holds `doc` open (to lock it) while its
/// command writes it; a script holding a file open runs `cp new doc`. Before, each such write waited
/// all of `write_wait` for its own parent. And a write goes ahead at once past a program whose open
/// file is in its way when that program waits for a file lock the writer or a process that started
/// it holds: it cannot close before the write ends (several `flock doc sh -c '... > doc'` at once:
/// every program in line for the lock holds `doc` open). `write_wait` and `read_wait` are 30 s here
/// and commands run under `timeout 10`: one that completes exits 0, one that waits is still waiting
/// at 10 s (exit 124). docs/semantics.md, "Waits and deadlines".
final class StartedProcessesAndLockWaitersTests: OpenFilesTestCase {
    override func configure(_ options: inout MountOptions) {
        super.configure(&options)
        options.coordination.readWait = 30
    }

    /// Records of accesses that waited out a deadline, or went ahead before it.
    private func wentAhead() throws -> [String] {
        try logged().filter { $0.kind == .granted && $0.details.reason == "waitDeadline" }
            .map { "\(($0.actor?.executable ?? "?").split(separator: "/").last ?? "?") \($0.path)" }
    }

    func testAProcessDoesNotWaitForTheFilesOfTheProgramsThatStartedIt() throws {
        try write("doc.txt", "one\n")
        try write("new.txt", "two\n")
        XCTAssertEqual(try within10s("flock doc.txt sh -c 'echo three > doc.txt'"), 0, "flock's command writes the file flock holds open")
        XCTAssertEqual(try backingText("doc.txt"), "three\n")
        XCTAssertEqual(try within10s("exec 3<doc.txt; cp new.txt doc.txt; true"), 0, "cp over a file its shell holds open")
        XCTAssertEqual(try backingText("doc.txt"), "two\n")
        XCTAssertEqual(try within10s("exec 3<doc.txt; sh -c 'echo four > doc.txt; true'; true"), 0, "a grandchild")
        XCTAssertEqual(try backingText("doc.txt"), "four\n")
        XCTAssertEqual(try within10s("exec 3>>doc.txt; cat doc.txt > ../out; true"), 0, "a read of a file its shell holds open for writing")
        XCTAssertEqual(try String(contentsOfFile: root + "/out", encoding: .utf8), "four\n")
        XCTAssertEqual(try wentAhead(), [], "nothing waited out a deadline or went ahead past anyone")
    }

    /// The other way round nothing changed: a process waits for the files of the processes it started.
    func testAProcessStillWaitsForTheFilesOfTheProcessesItStarted() throws {
        try write("doc.txt", "one\n")
        defer {
            if let child = try? String(contentsOfFile: root + "/child", encoding: .utf8), let pid = pid_t(child.trimmingCharacters(in: .whitespacesAndNewlines)) {
                kill(pid, SIGKILL)
            }
        }
        // The child in a session of its own, so that timeout's signal to its group ends the writer
        // only; it ends by itself soon after (the output the test reads to its end is its too).
        XCTAssertEqual(try within10s("setsid sleep 12 < doc.txt & echo \\$! > ../child; sleep 0.3; echo two > doc.txt"), 124,
                       "its child's open file holds the write up (write_wait, 30 s)")
        XCTAssertEqual(try backingText("doc.txt"), "one\n", "the write, interrupted, did nothing")
    }

    /// Four programs take turns under a lock on the file they count in, each `flock count.txt sh -c
    /// 'v=$(cat count.txt); echo $((v+1)) > count.txt'`: while one writes, the others hold the file
    /// open, waiting for the lock its parent holds. Before, every write waited for them until
    /// `write_wait` (30 s each, so the turns could not end within the minute).
    func testProgramsTakingTurnsUnderAFileLockNeverWaitForEachOthersOpenFiles() throws {
        try write("count.txt", "0\n")
        let script = root + "/workers.sh"
        try """
        for w in 1 2 3 4; do
          ( for i in $(seq 1 25); do flock count.txt sh -c 'v=$(cat count.txt); echo $((v+1)) > count.txt'; done ) &
        done
        wait
        """.write(toFile: script, atomically: true, encoding: .utf8)
        let run = try sh("timeout 60 sh \(script)", allowFailure: true, timeout: 90)
        XCTAssertEqual(run.status, 0, "every turn ended within the minute: \(run.output)")
        XCTAssertEqual(try backingText("count.txt"), "100\n", "no count lost: each turn read the one before it")
        XCTAssertEqual(try wentAhead().filter { !$0.hasPrefix("sh ") }, [], "only the writers went ahead, past the programs in line for the lock")
    }

    /// A program holds the file open and waits for a lock on another file: when the writer's parent
    /// holds that lock the write goes ahead at once; when a program of its own holds it, the write
    /// waits as before (that program may let go, and the waiting one close, at any time).
    func testAWriteGoesAheadPastAProgramWaitingForALockOnlyWhenTheWritersSideHoldsIt() throws {
        try write("doc.txt", "one\n")
        try write("lock", "")
        // The lock's owner: the writer's parent, which writes doc.txt once ../go exists.
        let parent = try flockInMount("sh -c ': > ../locked; while [ ! -e ../go ]; do sleep 0.05; done; echo two > doc.txt'")
        defer { end(parent) }
        try waitFor("locked")
        let reader = try holdOpen("doc.txt", then: "exec flock lock true")
        defer { end(reader) }
        try waitUntil(reader.processIdentifier, waitsForTheLockOf: parent.processIdentifier)
        FileManager.default.createFile(atPath: root + "/go", contents: nil)
        let deadline = Date().addingTimeInterval(10)
        while parent.isRunning && Date() < deadline { usleep(10_000) }
        XCTAssertFalse(parent.isRunning, "the write did not wait for the program in line for its parent's lock (write_wait, 30 s)")
        parent.waitUntilExit()
        XCTAssertEqual(parent.terminationStatus, 0)
        XCTAssertEqual(try backingText("doc.txt"), "two\n")
        reader.waitUntilExit()
        XCTAssertEqual(reader.terminationStatus, 0, "the reader got the lock once the writer's parent let go")

        // Somebody else's lock: the write waits for the program in line for it.
        for name in ["locked", "go"] { unlink(root + "/" + name) }
        let other = try flockInMount("sh -c 'echo $$ > ../sleeper; : > ../locked; exec sleep 30'")
        defer {
            // flock's command holds the lock (an inherited descriptor) until it ends too.
            if let text = try? String(contentsOfFile: root + "/sleeper", encoding: .utf8), let pid = pid_t(text.trimmingCharacters(in: .whitespacesAndNewlines)) {
                kill(pid, SIGKILL)
            }
            end(other)
        }
        try waitFor("locked")
        let secondReader = try holdOpen("doc.txt", then: "exec flock lock true")
        defer { end(secondReader) }
        try waitUntil(secondReader.processIdentifier, waitsForTheLockOf: other.processIdentifier)
        XCTAssertEqual(try within10s("echo three > doc.txt"), 124, "still waiting at 10 s for the reader in line for another program's lock")
        XCTAssertEqual(try backingText("doc.txt"), "two\n")
    }

    /// `flock lock COMMAND` run in the mount.
    private func flockInMount(_ command: String) throws -> Process {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/flock")
        p.arguments = ["lock", "sh", "-c", command]
        p.currentDirectoryURL = URL(fileURLWithPath: mnt)
        p.standardInput = FileHandle.nullDevice
        try p.run()
        return p
    }

    private func waitFor(_ name: String) throws {
        let deadline = Date().addingTimeInterval(20)
        while !FileManager.default.fileExists(atPath: root + "/" + name) {
            guard Date() < deadline else { throw XCTSkip("\(name) never appeared") }
            usleep(5_000)
        }
    }

    private func waitUntil(_ waiter: pid_t, waitsForTheLockOf owner: pid_t) throws {
        let deadline = Date().addingTimeInterval(20)
        while !FileLockWaits.read().waits(waiter, forAnyOf: [owner]) {
            guard Date() < deadline else { return XCTFail("\(waiter) never waited for \(owner)'s lock") }
            usleep(5_000)
        }
    }
}
