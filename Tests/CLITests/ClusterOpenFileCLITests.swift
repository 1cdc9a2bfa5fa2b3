import Foundation
import XCTest

/// A file kept open through one node and a write through the other (docs/cluster.md, "Open files
/// elsewhere"): two real `coordfs mount` nodes over one backing folder and a real etcd, as two
/// hosts over one shared folder.
final class ClusterOpenFileCLITests: ClusterCLITestCase {
    /// A shell keeping `relative` open for reading and writing through node a (as an office suite
    /// keeps the document it has loaded), once a holds a right for it in etcd. `writeFirst`: it
    /// writes a byte through the open first (a program writing, not only holding it). `thenWrite`:
    /// a FIFO; the shell writes a byte through the open when a line comes through it, then touches
    /// `thenWrite + ".done"`.
    private func keepOpenOnA(_ relative: String, writeFirst: Bool = false, thenWrite fifo: String? = nil) throws -> Child {
        try shellOnA("3<>'\(mnt!)/\(relative)'", first: writeFirst ? "printf w >&3" : nil,
                            then: (fifo.map { "read line < '\($0)' && printf w >&3 && : > '\($0).done' && " } ?? "") + "exec sleep 600")
    }

    /// Run by a shell holding descriptor 3: sets the file's times through it every 0.3 s, for ever
    /// (a program writing it now, without changing its bytes).
    static let keepTouching = "exec python3 -c 'import os, time\nwhile True: os.utime(3); time.sleep(0.3)'"

    /// A shell that opens its files through node a by the redirections `opens` (`3>>'path'`), runs
    /// `first`, then `then`; returned once it opened them and a holds a right in etcd.
    private func shellOnA(_ opens: String, first: String? = nil, then: String) throws -> Child {
        let ready = root + "/ready"
        unlink(ready)
        let shell = try start("/bin/sh", ["-c", "exec \(opens) && " + (first.map { $0 + " && " } ?? "") + ": > '\(ready)' && " + then])
        guard waitUntil(30, { access(ready, F_OK) == 0 || shell.wait(timeout: 0) != nil }), access(ready, F_OK) == 0 else {
            throw CLIError("the shell did not open its files (\(opens)) through a: \(shell.stderr)")
        }
        XCTAssertTrue(waitUntil(10) { etcdKeys("h").contains { $0.contains("\0a\0") } }, "a holds a right for the open files: \(etcdKeys("h"))")
        return shell
    }

    /// The program on a still holds the document open; it is killed, and both nodes unmounted.
    private func endHolding(_ holder: Child, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertNil(holder.wait(timeout: 0), "the program on a still holds the document open", file: file, line: line)
        _ = holder.stop(SIGKILL)
        XCTAssertEqual(coordfs("unmount", mntB).status, 0, file: file, line: line)
        unmount()
    }

    /// Runs each command, which must succeed within 10 s (the waits here are 20 s); `waited` says
    /// what taking longer means.
    private func completeWithin10s(_ commands: [(command: String, what: String)], else waited: String,
                                   file: StaticString = #filePath, line: UInt = #line) {
        for (command, what) in commands {
            let started = Date()
            let r = sh(command, timeout: 60)
            XCTAssertEqual(r.status, 0, "\(what): \(r)", file: file, line: line)
            XCTAssertLessThan(Date().timeIntervalSince(started), 10, "\(what) \(waited)", file: file, line: line)
        }
    }

    /// The lines of node `node`'s daemon log that say an access went ahead past another node's right.
    private func wentAhead(on node: String) -> [String] {
        ((try? String(contentsOfFile: nodeState(node) + "/daemon.log", encoding: .utf8)) ?? "")
            .split(separator: "\n").map(String.init).filter { $0.contains("went ahead without exclusion past node") }
    }

    /// `cp` through b over a document a program keeps open through a, and has written through,
    /// waits `write_wait`, then goes ahead as it would on one host (before: EBUSY, "cp: cannot
    /// create regular file ...: Device or resource busy", as if an explicit coordinated write held
    /// it). The next `cp` waits again.
    func testACopyOverAFileAnotherNodeKeepsOpenGoesAheadAtItsDeadline() throws {
        FileOps.put(backing + "/doc.txt", "old\n")
        FileOps.put(root + "/new.txt", "new\n")
        FileOps.put(root + "/newer.txt", "newer\n")
        try mountNodes(["write_wait=2"])
        // It keeps touching the file (a writer now: one that stopped writing a second ago holds
        // nobody up once it has held the file `write_wait`).
        let holder = try shellOnA("3<>'\(mnt!)/doc.txt'", first: "printf w >&3", then: Self.keepTouching)
        defer { _ = holder.stop(SIGKILL) }

        for (round, source) in ["new.txt", "newer.txt"].enumerated() {
            let started = Date()
            let r = sh("cp '\(root!)/\(source)' '\(mntB!)/doc.txt'", timeout: 30)
            let waited = Date().timeIntervalSince(started)
            XCTAssertEqual(r.status, 0, "round \(round): cp through b past the file a keeps open: \(r)")
            XCTAssertGreaterThan(waited, 1.5, "round \(round): waited for write_wait (2 s) as on one host")
            XCTAssertEqual(FileOps.get(backing + "/doc.txt"), FileOps.get(root + "/" + source), "round \(round): the copy is in the backing folder")
        }
        XCTAssertTrue(waitUntil(10) { FileOps.get(mnt + "/doc.txt") == "newer\n" }, "a shows b's last copy")
        XCTAssertEqual(wentAhead(on: "b").count, 2, "each copy went ahead past a's right, and said so")
        XCTAssertEqual(wentAhead(on: "b").filter { $0.contains("held without writing") }, [], "a program that wrote is a writer")
        endHolding(holder)
    }

    /// A program on a holding a document open for writing without writing it (an office suite with
    /// it loaded) holds nobody on b up once it held it a second, as on one host: `cat` and `cp`
    /// through b go on at once, not at their `read_wait` and `write_wait` (20 s here), and b's log
    /// says why; b's own copy does not make the program a writer. Once that program has written
    /// through its open, it is a writer again: the next `cp` through b waits (killed after 3 s, it
    /// changed nothing).
    func testAFileAnotherNodeHoldsOpenWithoutWritingHoldsNobodyUp() throws {
        FileOps.put(backing + "/doc.txt", "old\n")
        FileOps.put(root + "/new.txt", "new\n")
        FileOps.put(root + "/newer.txt", "newer\n")
        let fifo = root + "/write-now"
        XCTAssertEqual(mkfifo(fifo, 0o600), 0)
        try mountNodes(["read_wait=20", "write_wait=20"])
        let holder = try keepOpenOnA("doc.txt", thenWrite: fifo)
        defer { _ = holder.stop(SIGKILL) }
        usleep(1_500_000) // held a second without writing

        var started = Date()
        let cat = sh("cat '\(mntB!)/doc.txt'", timeout: 60)
        XCTAssertEqual(cat.status, 0, "\(cat)")
        XCTAssertEqual(cat.stdout, "old\n")
        XCTAssertLessThan(Date().timeIntervalSince(started), 10, "cat through b went on before its read_wait (20 s)")
        started = Date()
        let cp = sh("cp '\(root!)/new.txt' '\(mntB!)/doc.txt'", timeout: 60)
        XCTAssertEqual(cp.status, 0, "\(cp)")
        XCTAssertLessThan(Date().timeIntervalSince(started), 10, "cp through b went on before its write_wait (20 s)")
        XCTAssertEqual(FileOps.get(backing + "/doc.txt"), "new\n")
        // b's copy is not the program's write: once it is over and the file a second old, the
        // program holds nobody up again.
        usleep(1_500_000)
        started = Date()
        XCTAssertEqual(sh("cat '\(mntB!)/doc.txt'", timeout: 60).stdout, "new\n")
        let again = sh("cp '\(root!)/newer.txt' '\(mntB!)/doc.txt'", timeout: 60)
        XCTAssertEqual(again.status, 0, "\(again)")
        XCTAssertLessThan(Date().timeIntervalSince(started), 10, "cat and cp through b after b's copy went on before their waits (20 s)")
        XCTAssertEqual(FileOps.get(backing + "/doc.txt"), "newer\n")
        XCTAssertEqual(wentAhead(on: "b").filter { $0.contains("node a's open files held without writing") }.count, 4,
                       "each went ahead past a's right and said why: \(wentAhead(on: "b"))")

        // The program writes through its open: a writer from then on. (Not before a learns that
        // b's copy is over, its right gone from etcd: a write until then is taken for b's.)
        XCTAssertTrue(waitUntil(10) { !etcdKeys("h").contains { $0.contains("doc.txt\0b\0") } }, "b's rights on doc.txt gone: \(etcdKeys("h"))")
        usleep(1_000_000)
        let writer = try start("/bin/sh", ["-c", "echo > '\(fifo)'"])
        XCTAssertTrue(waitUntil(10) { access(fifo + ".done", F_OK) == 0 }, "the holder wrote")
        _ = writer.wait(timeout: 5)
        let written = FileOps.get(backing + "/doc.txt")
        XCTAssertEqual(written, "wewer\n", "its byte over b's copy")
        usleep(1_500_000) // longer than a's looks and any idleness
        let waiting = try start("/bin/cp", [root + "/new.txt", mntB + "/doc.txt"])
        XCTAssertNil(waiting.wait(timeout: 3), "cp through b waits for a program on a that wrote")
        _ = waiting.stop(SIGKILL)
        XCTAssertEqual(FileOps.get(backing + "/doc.txt"), written, "the killed cp changed nothing")
        endHolding(holder)
    }

    /// Programs reading files through a (`tail -f log.txt`; a shell keeping `doc.txt` and `old.txt`
    /// open for reading, as `less` does) hold up no append, no save by rename (`sed -i`), no `mv`
    /// and no `rm` of them through b, as on one host (before: each waited `write_wait`, here 20 s),
    /// and `tail -f` through a shows b's append; a `cp` over the log (an in-place write, which
    /// waits for files open for reading on one host too) still waits.
    func testFilesAnotherNodeHasOpenForReadingHoldUpNoAppendAndNoChangeOfNames() throws {
        FileOps.put(backing + "/log.txt", "l1\n")
        FileOps.put(backing + "/doc.txt", "hello\n")
        FileOps.put(backing + "/old.txt", "old\n")
        FileOps.put(root + "/new.txt", "new\n")
        try mountNodes(["write_wait=20"])
        let out = root + "/tail.out"
        let holder = try shellOnA("4<'\(mnt!)/doc.txt' 5<'\(mnt!)/old.txt'", then: "exec tail -f '\(mnt!)/log.txt' > '\(out)'")
        defer { _ = holder.stop(SIGKILL) }
        XCTAssertTrue(waitUntil(30) { FileOps.get(out) == "l1\n" }, "tail -f through a: \(holder.stderr)")

        completeWithin10s([("echo more >> '\(mntB!)/log.txt'", "an append"), ("sed -i s/hello/hi/ '\(mntB!)/doc.txt'", "sed -i"),
                           ("mv '\(mntB!)/old.txt' '\(mntB!)/older.txt'", "mv"), ("rm '\(mntB!)/older.txt'", "rm")],
                          else: "through b waited for files open for reading through a")
        XCTAssertEqual(FileOps.get(backing + "/log.txt"), "l1\nmore\n")
        XCTAssertEqual(FileOps.get(backing + "/doc.txt"), "hi\n")
        XCTAssertFalse(FileManager.default.fileExists(atPath: backing + "/old.txt"))
        XCTAssertFalse(FileManager.default.fileExists(atPath: backing + "/older.txt"))
        XCTAssertTrue(waitUntil(10) { FileOps.get(out) == "l1\nmore\n" }, "tail -f through a shows b's append: \(FileOps.get(out) ?? "")")

        let waiting = try start("/bin/cp", [root + "/new.txt", mntB + "/log.txt"])
        XCTAssertNil(waiting.wait(timeout: 3), "cp over the log through b waits for tail -f through a")
        _ = waiting.stop(SIGKILL)
        XCTAssertEqual(FileOps.get(backing + "/log.txt"), "l1\nmore\n", "the killed cp changed nothing")
        endHolding(holder)
    }

    /// Programs through a whose files their names no longer lead to hold nobody up there through
    /// b, as on one host: a log renamed away through a under the shell appending to it (logrotate's
    /// `mv`), then the new log made, appended to, written over and read through b; a document
    /// replaced through b (`sed -i`) under a reader through a, then copied over through b (before:
    /// `write_wait` each, `read_wait` the `cat`; here 20 s each).
    func testFilesWhoseNamesLeftThemOnAnotherNodeHoldNobodyUp() throws {
        FileOps.put(backing + "/app.log", "")
        FileOps.put(backing + "/doc.txt", "one\n")
        FileOps.put(root + "/new.txt", "new\n")
        try mountNodes(["read_wait=20", "write_wait=20"])
        let holder = try shellOnA("3>>'\(mnt!)/app.log' 4<'\(mnt!)/doc.txt'", then: "while :; do echo x >&3; sleep 0.05; done")
        defer { _ = holder.stop(SIGKILL) }
        XCTAssertEqual(sh("mv '\(mnt!)/app.log' '\(mnt!)/app.log.1'", timeout: 60).status, 0)

        completeWithin10s([("touch '\(mntB!)/app.log'", "the new log made"), ("echo y >> '\(mntB!)/app.log'", "an append to it"),
                           ("echo z > '\(mntB!)/app.log'", "a write over it"), ("cat '\(mntB!)/app.log'", "a read of it"),
                           ("sed -i s/one/two/ '\(mntB!)/doc.txt'", "sed -i"), ("cp '\(root!)/new.txt' '\(mntB!)/doc.txt'", "cp over the new document")],
                          else: "through b waited for a program through a whose file left the name")
        XCTAssertEqual(FileOps.get(backing + "/app.log"), "z\n")
        XCTAssertEqual(FileOps.get(backing + "/doc.txt"), "new\n")
        let rotated = FileOps.get(backing + "/app.log.1")?.count ?? 0
        XCTAssertTrue(waitUntil(5) { (FileOps.get(backing + "/app.log.1")?.count ?? 0) > rotated }, "the shell still writes the renamed log")
        endHolding(holder)
    }

    /// A log a program keeps open and appends to through a holds up no read through b, as on one
    /// host (before: `read_wait` each, here 20 s), and `cat` shows what it wrote; once it has held
    /// it a second, no append and no rename of it through b either (before: `write_wait` each); a
    /// `cp` over it through b (an in-place write) still waits for it.
    func testALogAnotherNodeAppendsToHoldsUpNoRead() throws {
        FileOps.put(backing + "/app.log", "l0\n")
        FileOps.put(root + "/new.txt", "new\n")
        try mountNodes(["read_wait=20", "write_wait=20"])
        let logger = try shellOnA("3>>'\(mnt!)/app.log'", then: "while :; do echo x >&3; sleep 0.05; done")
        defer { _ = logger.stop(SIGKILL) }
        for _ in 0..<2 {
            let started = Date()
            let r = sh("cat '\(mntB!)/app.log'", timeout: 60)
            XCTAssertEqual(r.status, 0, "\(r)")
            XCTAssertTrue(r.stdout.hasPrefix("l0\nx\n"), r.stdout)
            XCTAssertLessThan(Date().timeIntervalSince(started), 10, "cat through b waited for the log a appends to")
        }
        usleep(1_000_000)
        completeWithin10s([("echo b >> '\(mntB!)/app.log'", "an append"), ("echo b >> '\(mntB!)/app.log'", "another append")],
                          else: "through b waited for the program appending through a")
        XCTAssertEqual(FileOps.get(backing + "/app.log")?.components(separatedBy: "\n").filter { $0 == "b" }.count, 2)
        let waiting = try start("/bin/cp", [root + "/new.txt", mntB + "/app.log"])
        XCTAssertNil(waiting.wait(timeout: 3), "cp over the log through b waits for the program appending through a")
        _ = waiting.stop(SIGKILL)
        XCTAssertTrue(FileOps.get(backing + "/app.log")?.hasPrefix("l0\n") ?? false, "the killed cp changed nothing")
        completeWithin10s([("mv '\(mntB!)/app.log' '\(mntB!)/app.log.1'", "logrotate's rename")],
                          else: "through b waited for the program appending through a")
        let rotated = FileOps.get(backing + "/app.log.1")?.count ?? 0
        XCTAssertTrue(waitUntil(5) { (FileOps.get(backing + "/app.log.1")?.count ?? 0) > rotated }, "the program goes on appending to the renamed log")
        endHolding(logger)
    }

    /// An explicit coordinated write through a (`coordfs coordinate --write`) still makes the same
    /// `cp` through b fail with EBUSY at its deadline, and leaves the document as it was.
    func testACopyUnderAnExplicitWriteOnAnotherNodeStillFails() throws {
        FileOps.put(backing + "/doc.txt", "old\n")
        FileOps.put(root + "/new.txt", "new\n")
        try mountNodes(["write_wait=2"])
        let hold = try startCoordfs(["coordinate", "--write", mnt + "/doc.txt", "--", "sleep", "600"])
        defer { _ = hold.stop(SIGKILL) }
        XCTAssertTrue(waitUntil(30) { etcdKeys("h").contains { $0.contains("\0a\0") } }, "a holds a right for the explicit write: \(etcdKeys("h"))")

        let r = sh("cp '\(root!)/new.txt' '\(mntB!)/doc.txt'", timeout: 30)
        XCTAssertNotEqual(r.status, 0, "cp through b went ahead past an explicit write on a: \(r)")
        XCTAssertTrue(r.stderr.contains("Device or resource busy"), r.stderr)
        XCTAssertEqual(FileOps.get(backing + "/doc.txt"), "old\n")
        XCTAssertEqual(wentAhead(on: "b"), [])

        _ = hold.stop(SIGKILL)
        XCTAssertEqual(coordfs("unmount", mntB).status, 0)
        unmount()
    }
}
