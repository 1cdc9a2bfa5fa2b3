import XCTest
import Foundation
import Glibc
@testable import CoordFS
import Coordination
import DocumentStore
import EventLog

/// Lost updates between processes that present nothing, through a real mount with real tools
/// (docs/semantics.md, "Lost updates"): a Python process reads `doc`, `sed -i` changes it, and the
/// Python process writes back what it had read with one of the save styles.
class LostUpdateMountTestCase: StoreMountTestCase {
    /// A reader that opens `doc` through the mount, says it read it, waits for `go`, then writes
    /// back its copy with the last line changed ("c" → "C"), saving with `style`.
    static let reader = #"""
    import os, sys, time
    doc, style, ready, go = sys.argv[1:5]
    reread = len(sys.argv) > 5
    data = open(doc).read()
    open(ready, "w").close()
    while not os.path.exists(go):
        time.sleep(0.02)
    if reread:
        data = open(doc).read()
    new = data.replace("c\n", "C\n")
    if style == "inplace":
        with open(doc, "w") as f: f.write(new)
    elif style == "readwrite":
        # Opened to read and write in place, as a database is: what it writes over is what it
        # reads through that open.
        with open(doc, "r+") as f:
            data = f.read(); f.seek(0); f.write(data.replace("c\n", "C\n")); f.truncate()
    elif style == "rename":
        with open(doc + ".new", "w") as f: f.write(new)
        os.replace(doc + ".new", doc)
    elif style == "exchange":
        # An atomic swap save: the new file exchanged with the document (renameat2 with
        # RENAME_EXCHANGE), then removed (it holds the old version).
        import ctypes
        with open(doc + ".new", "w") as f: f.write(new)
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.renameat2(-100, (doc + ".new").encode(), -100, doc.encode(), 2) != 0:
            sys.exit(os.strerror(ctypes.get_errno()))
        os.unlink(doc + ".new")
    elif style == "unlink":
        os.unlink(doc)
        with open(doc, "w") as f: f.write(new)
    elif style == "backup":
        os.rename(doc, doc + ".bak")
        with open(doc, "w") as f: f.write(new)
    elif style == "inherited":
        # In place, but a child keeps the descriptor until this process is gone: the save lands
        # (the RELEASE) after the saver exited.
        # The child keeps only that descriptor (so the test sees this process exit and reaps it)
        # and closes it once this process is gone (10 s at most).
        f = open(doc, "w"); f.write(new); f.flush()
        parent = os.getpid()
        if os.fork() == 0:
            os.closerange(0, f.fileno())
            os.closerange(f.fileno() + 1, 65536)
            deadline = time.time() + 10
            while time.time() < deadline:
                try:
                    os.kill(parent, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.01)
            os._exit(0)
        os._exit(0)
    """#

    struct Reader {
        let process: Process
        let go: String
    }

    /// Starts the reader and waits until it read the document.
    func startReader(_ style: String, rereadAfterChange: Bool = false, file: StaticString = #filePath, line: UInt = #line) throws -> Reader {
        let script = root + "/reader.py", ready = root + "/ready-\(style)", go = root + "/go-\(style)"
        try Self.reader.write(toFile: script, atomically: true, encoding: .utf8)
        unlink(ready); unlink(go)
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        p.arguments = [script, "doc", style, ready, go] + (rereadAfterChange ? ["reread"] : [])
        p.currentDirectoryURL = URL(fileURLWithPath: mnt)
        try p.run()
        let deadline = Date().addingTimeInterval(10)
        while access(ready, F_OK) != 0 && Date() < deadline && p.isRunning { usleep(10_000) }
        XCTAssertEqual(access(ready, F_OK), 0, "the reader read the document", file: file, line: line)
        return Reader(process: p, go: go)
    }

    /// Lets the reader save and waits for it to exit, and then for the mount to have finished its
    /// write handles: close(2) and the exit do not wait for the kernel's RELEASE (asynchronous, and
    /// no FLUSH on a local backing folder), and a save written through a handle (in place, or the
    /// new file of an unlink or backup save) lands, and its lost update is recorded, at that RELEASE.
    func finish(_ reader: Reader, file: StaticString = #filePath, line: UInt = #line) {
        FileManager.default.createFile(atPath: reader.go, contents: nil)
        var deadline = Date().addingTimeInterval(10)
        while reader.process.isRunning && Date() < deadline { usleep(10_000) }
        if reader.process.isRunning { reader.process.terminate() }
        reader.process.waitUntilExit()
        XCTAssertEqual(reader.process.terminationStatus, 0, "the reader saved", file: file, line: line)
        let pid = reader.process.processIdentifier
        func writing() -> Bool {
            daemon.coordinated!.openWriters.withLock { $0.values.contains { $0.contains { $0.handle.pid == pid } } }
        }
        deadline = Date().addingTimeInterval(10)
        while writing() && Date() < deadline { usleep(5_000) }
        XCTAssertFalse(writing(), "the mount never had the reader's RELEASE", file: file, line: line)
    }

    var readers: ImplicitReaders { daemon.coordinated!.lostUpdates.readers }

    func lostUpdateRecords() throws -> [EventRecord] { try logged().filter { $0.kind == .lostUpdate } }

    func text(_ version: VersionID?) throws -> String? {
        try version.map { String(decoding: try store.contents(of: $0), as: UTF8.self) }
    }
}

final class LostUpdateMountTests: LostUpdateMountTestCase {
    /// A process that read the document and, after another process changed it, opens it to read
    /// and write in place (a database's way, Python's "r+") writes over what it reads through that
    /// open: no lost update. Before, this was a `lostUpdate` conflict.
    func testAnOpenToReadAndWriteInPlaceAfterAChangeIsNoLostUpdate() throws {
        try write("doc", "a\nb\nc\n")
        let reader = try startReader("readwrite")
        try sh("sed -i 's/^a$/A/' doc")
        finish(reader)
        let conflicts = try store.conflicts(atPath: "doc")
        XCTAssertEqual(conflicts.count, 0, "\(conflicts)")
        XCTAssertEqual(try lostUpdateRecords().count, 0)
        XCTAssertEqual(backingText("doc"), "A\nb\nC\n", "both changes are in the file")
    }

    /// Two sqlite3 shells writing one database in WAL mode (SQLite's own locks keep them apart;
    /// each shell reads the file's first bytes before it opens it to read and write): every row is
    /// there, the database is whole, and no write is a lost update (before: a conflict whenever one
    /// shell wrote between the other's first read and its open, two in ten on a quiet machine).
    func testTwoSqliteShellsWritingOneDatabaseAreNoLostUpdates() throws {
        try XCTSkipUnless(have("sqlite3"), "sqlite3 is not installed")
        try sh("sqlite3 t.db 'create table t(x); pragma journal_mode=wal;' > /dev/null")
        let insert = "sqlite3 t.db 'pragma busy_timeout=20000; insert into t values(1);' > /dev/null"
        try sh("(for i in 1 2 3 4 5 6 7 8 9 10; do \(insert); done) & (for i in 1 2 3 4 5 6 7 8 9 10; do \(insert); done); wait")
        XCTAssertEqual(try sh("sqlite3 t.db 'select count(*) from t; pragma integrity_check;'").output, "20\nok\n")
        let conflicts = try store.conflicts(atPath: "t.db")
        XCTAssertEqual(conflicts.count, 0, "\(conflicts.map(\.kind))")
        XCTAssertEqual(try lostUpdateRecords().count, 0)
    }

    /// Each save style: one conflict, theirs and the base kept, the file the reader's, and a clean
    /// three-way merge brings both changes together.
    func testEverySaveStyleOverAChangeSinceTheReadIsOneConflictWithBothVersionsKept() throws {
        for style in ["inplace", "rename", "exchange", "unlink", "backup"] {
            try write("doc", "a\nb\nc\n")
            let reader = try startReader(style)
            try sh("sed -i 's/^a$/A/' doc")
            finish(reader)
            let open = try store.conflicts(atPath: "doc")
            XCTAssertEqual(open.count, 1, "\(style): one conflict: \(open)")
            guard let conflict = open.first else { continue }
            XCTAssertEqual(conflict.kind, .lostUpdate, style)
            XCTAssertTrue(conflict.presenter.rawValue.hasPrefix("process:\(reader.process.processIdentifier):"), conflict.presenter.rawValue)
            XCTAssertEqual(try text(conflict.theirsVersion), "A\nb\nc\n", "\(style): theirs kept")
            XCTAssertEqual(try text(conflict.baseVersion), "a\nb\nc\n", "\(style): what the reader read kept")
            XCTAssertEqual(backingText("doc"), "a\nb\nC\n", "\(style): the save went through")
            let records = try lostUpdateRecords()
            XCTAssertEqual(records.last?.details.reason, "kept", style)
            XCTAssertEqual(records.last?.actor?.pid, reader.process.processIdentifier, style)
            XCTAssertEqual(records.last?.path, "/doc", style)
            let outcome = try service.resolve(conflict.id, with: .merge, by: "test")
            XCTAssertEqual(outcome.mergeConflicts, 0, style)
            XCTAssertEqual(try read("doc"), "A\nb\nC\n", "\(style): merged through the mount")
            unlink(backing + "/doc.bak")
        }
        XCTAssertEqual(try lostUpdateRecords().count, 5, "one record per late save")
    }

    /// The saver is named by the process it was (pid and start) when its save lands after it
    /// exited: the RELEASE of its last descriptor comes later (here a child holds it).
    func testASaverThatExitedBeforeItsSaveLandedIsStillNamedByItsStart() throws {
        try write("doc", "a\nb\nc\n")
        let reader = try startReader("inherited")
        let pid = reader.process.processIdentifier
        let start = try XCTUnwrap(readers.process(pid)?.start, "the reader is tracked")
        try sh("sed -i 's/^a$/A/' doc")
        finish(reader)
        let conflict = try XCTUnwrap(try store.conflicts(atPath: "doc").first)
        XCTAssertEqual(conflict.presenter.rawValue, "process:\(pid):\(start):uid:\(getuid())")
        XCTAssertEqual(backingText("doc"), "a\nb\nC\n")
    }

    func testAChangeMadeInTheBackingFolderIsALostUpdateTooButItsBaseIsGone() throws {
        try write("doc", "a\nb\nc\n")
        let reader = try startReader("inplace")
        try sh("sed -i 's/^a$/A/' doc", in: backing)
        finish(reader)
        let conflict = try XCTUnwrap(try store.conflicts(atPath: "doc").first)
        XCTAssertEqual(conflict.kind, .lostUpdate)
        XCTAssertEqual(try text(conflict.theirsVersion), "A\nb\nc\n", "theirs kept before the save landed")
        XCTAssertNil(conflict.baseVersion, "changed where coordfs could not keep what the reader read")
        XCTAssertThrowsError(try service.resolve(conflict.id, with: .merge, by: "test"))
        try service.resolve(conflict.id, with: .reload, by: "test")
        XCTAssertEqual(try read("doc"), "A\nb\nc\n", "theirs restored")
    }

    func testNoConflictWhenNobodyElseChangedItOrTheSaverReadItAgain() throws {
        for style in ["inplace", "rename", "exchange", "unlink", "backup"] {
            try write("doc", "a\nb\nc\n")
            finish(try startReader(style))
            unlink(backing + "/doc.bak")
        }
        try write("doc", "a\nb\nc\n")
        let reader = try startReader("inplace", rereadAfterChange: true)
        try sh("sed -i 's/^a$/A/' doc")
        finish(reader)
        XCTAssertEqual(backingText("doc"), "A\nb\nC\n")
        XCTAssertTrue(try store.conflicts(state: nil).isEmpty)
        XCTAssertTrue(try lostUpdateRecords().isEmpty)
    }

    /// A reader that exited before the change is no reader: its record goes within a second, and
    /// another process writing the file (`cat` then `cp`: two processes, not linked) is no lost update.
    func testAReaderThatExitedBeforeTheChangeIsForgottenWithinASecond() throws {
        try write("doc", "a\nb\nc\n")
        try sh("cat doc > /dev/null")
        let deadline = Date().addingTimeInterval(1)
        while readers.count > 0 && Date() < deadline { usleep(10_000) }
        XCTAssertEqual(readers.count, 0, "dropped within a second of its exit")
        try sh("sed -i 's/^a$/A/' doc")
        try sh("printf 'a\\nb\\nC\\n' > doc")
        XCTAssertTrue(try store.conflicts(state: nil).isEmpty)
        XCTAssertTrue(try store.versions(ofPath: "doc").isEmpty, "nothing kept: nobody alive had read it")
    }

    /// A reader exits and its pid is given to a new process at once, before any sweep: the new
    /// process writing the changed file never read it, so there is no lost update.
    func testAReusedPidIsNotTheReader() throws {
        try write("doc", "a\nb\nc\n")
        let script = #"""
        import os, sys, time
        a = os.fork()
        if a == 0:
            open("doc").read()
            os._exit(0)
        os.waitpid(a, 0)
        with open(sys.argv[1] + "/doc", "w") as f: f.write("A\nb\nc\n")   # changed in the backing folder
        for attempt in range(200):
            try:
                with open("/proc/sys/kernel/ns_last_pid", "w") as f: f.write(str(a - 1))
            except OSError as e:
                print("no ns_last_pid:", e); sys.exit(3)
            b = os.fork()
            if b == 0:
                if os.getpid() == a:
                    with open("doc", "w") as f: f.write("x\n")
                os._exit(0)
            os.waitpid(b, 0)
            if b == a:
                print("reused", a); sys.exit(0)
        print("no reuse"); sys.exit(4)
        """#
        try script.write(toFile: root + "/reuse.py", atomically: true, encoding: .utf8)
        let result = try sh("python3 '\(root!)/reuse.py' '\(backing!)'", allowFailure: true)
        if result.status == 3 || result.status == 4 { throw XCTSkip("cannot hand out a pid again here: \(result.output)") }
        XCTAssertEqual(result.status, 0, result.output)
        XCTAssertEqual(backingText("doc"), "x\n", "the new process wrote")
        XCTAssertTrue(try store.conflicts(state: nil).isEmpty, "a reused pid never inherits a read")
    }

    /// With one version per document and one byte in all, retention still keeps what each live
    /// reader read (held for it) until its late save is recorded; then the open conflict pins it,
    /// and merge has its base.
    func testWhatALiveReaderReadSurvivesTightRetentionUntilItsLateSaveIsRecorded() throws {
        var tight = StoreOptions()
        tight.retention = Retention(maxVersionsPerDocument: 1, maxTotalBytes: 1)
        try service.reconfigure(tight)
        try write("doc", "a\nb\nc\nd\ne\n")
        let first = try startReader("inplace")
        try sh("sed -i 's/^a$/A/' doc")
        let second = try startReader("rename")
        try sh("sed -i 's/^e$/E/' doc")
        // Two readers alive, two held versions; the limits would allow none.
        XCTAssertEqual(Set(try store.versions(ofPath: "doc").map { try text($0.id) }), ["a\nb\nc\nd\ne\n", "A\nb\nc\nd\ne\n"])
        finish(first)
        let conflict = try XCTUnwrap(try store.conflicts(atPath: "doc").first)
        XCTAssertEqual(try text(conflict.baseVersion), "a\nb\nc\nd\ne\n", "what the first reader read")
        XCTAssertEqual(try text(conflict.theirsVersion), "A\nb\nc\nd\nE\n")
        let merged = try service.resolve(conflict.id, with: .merge, by: "test")
        XCTAssertEqual(merged.mergeConflicts, 0)
        XCTAssertEqual(try read("doc"), "A\nb\nC\nd\nE\n")
        finish(second)
        let late = try XCTUnwrap(try store.conflicts(atPath: "doc").first)
        XCTAssertEqual(try text(late.baseVersion), "A\nb\nc\nd\ne\n", "what the second reader read")
        try service.resolve(late.id, with: .close, by: "test")
        // Both readers gone and every conflict resolved: nothing is held, retention applies.
        let deadline = Date().addingTimeInterval(3)
        while !store.heldVersions.isEmpty && Date() < deadline { usleep(20_000) }
        XCTAssertEqual(store.heldVersions, [])
        try store.collectGarbage()
        XCTAssertEqual(try store.versions(ofPath: "doc").count, 0)
    }

    /// A document another process presents (a viewer: an app showing it, `coordfs present`, another
    /// user who may read it) keeps the lost-update rules for the processes that save it: its presenter
    /// hears each save once, and the reader's late save over sed's change is still one conflict with
    /// theirs and the base kept. (Before, any presenter of the document turned the rule off, so sed's
    /// change was lost with no trace while somebody merely looked at the file.)
    func testAnotherProcessPresentingTheDocumentDoesNotHideALostUpdate() throws {
        try write("doc", "a\nb\nc\n")
        let (presenter, _) = try presentDocument("doc")
        let reader = try startReader("rename")
        try sh("sed -i 's/^a$/A/' doc")
        finish(reader)
        presenter.waitForEvents(2)
        XCTAssertEqual(presenter.events.count, 2, "sed's save and the reader's: \(presenter.events)")
        XCTAssertEqual(backingText("doc"), "a\nb\nC\n", "the reader's save went through")
        let open = try store.conflicts(atPath: "doc")
        XCTAssertEqual(open.count, 1, "one conflict: \(open)")
        guard let conflict = open.first else { return }
        XCTAssertEqual(conflict.kind, .lostUpdate)
        XCTAssertTrue(conflict.presenter.rawValue.hasPrefix("process:\(reader.process.processIdentifier):"), conflict.presenter.rawValue)
        XCTAssertEqual(try text(conflict.theirsVersion), "A\nb\nc\n", "sed's version kept")
        XCTAssertEqual(try text(conflict.baseVersion), "a\nb\nc\n", "what the reader read kept")
        XCTAssertEqual(try lostUpdateRecords().count, 1)
        XCTAssertEqual(try lostUpdateRecords().last?.actor?.pid, reader.process.processIdentifier)
    }

    /// The process that presents the document saving it itself keeps its presenter's rules: its
    /// late save is its presenter's affair (its own unsaved-changes conflicts), not a lost update.
    func testThePresentersOwnProcessSavingItIsLeftToItsPresenter() throws {
        try write("doc", "a\nb\nc\n")
        let (presenter, _) = try presentDocument("doc")
        XCTAssertEqual(try read("doc"), "a\nb\nc\n", "this process read it through the mount")
        try sh("sed -i 's/^a$/A/' doc")
        presenter.waitForEvents(1)
        XCTAssertEqual(presenter.events.count, 1, "sed's save: \(presenter.events)")
        // This process (the presenter's) writes back what it had read, in place, through the mount.
        try "a\nb\nC\n".write(toFile: mnt + "/doc", atomically: false, encoding: .utf8)
        XCTAssertEqual(backingText("doc"), "a\nb\nC\n")
        // The save lands (and a lost update would be recorded) at the kernel's RELEASE, which
        // close(2) does not wait for.
        let me = getpid()
        func writing() -> Bool {
            daemon.coordinated!.openWriters.withLock { $0.values.contains { $0.contains { $0.handle.pid == me } } }
        }
        let deadline = Date().addingTimeInterval(10)
        while writing() && Date() < deadline { usleep(5_000) }
        XCTAssertFalse(writing(), "the mount never had this process's RELEASE")
        let conflicts = try store.conflicts(state: nil)
        XCTAssertTrue(conflicts.isEmpty, "\(conflicts)")
        XCTAssertTrue(try lostUpdateRecords().isEmpty)
    }
}

/// `-o lost_updates=refuse`: the late save fails with ECANCELED and nothing changes.
final class LostUpdateRefuseMountTests: LostUpdateMountTestCase {
    override func configure(_ options: inout MountOptions) {
        super.configure(&options)
        options.store.lostUpdates = .refuse
    }

    func testALateSaveIsRefusedWithECANCELED() throws {
        for style in ["inplace", "rename", "exchange"] {
            try write("doc", "a\nb\nc\n")
            let reader = try startReader(style)
            try sh("sed -i 's/^a$/A/' doc")
            FileManager.default.createFile(atPath: reader.go, contents: nil)
            reader.process.waitUntilExit()
            XCTAssertNotEqual(reader.process.terminationStatus, 0, "\(style): refused")
            XCTAssertEqual(backingText("doc"), "A\nb\nc\n", "\(style): nothing changed")
            unlink(backing + "/doc.new")
        }
        XCTAssertTrue(try store.conflicts(state: nil).isEmpty)
        let records = try lostUpdateRecords()
        XCTAssertEqual(records.map(\.details.reason), ["refused", "refused", "refused"])
        XCTAssertEqual(records.first?.details.errno, ECANCELED)
        // A save that first removes the document is kept, never refused (it cannot be told from a removal).
        try write("doc", "a\nb\nc\n")
        let reader = try startReader("unlink")
        try sh("sed -i 's/^a$/A/' doc")
        finish(reader)
        XCTAssertEqual(try store.conflicts(atPath: "doc").map(\.kind), [.lostUpdate])
    }
}

/// `-o lost_updates=off`: nothing tracked, nothing kept.
final class LostUpdateOffMountTests: LostUpdateMountTestCase {
    override func configure(_ options: inout MountOptions) {
        super.configure(&options)
        options.store.lostUpdates = .off
    }

    func testNothingIsTrackedOrKept() throws {
        try write("doc", "a\nb\nc\n")
        let reader = try startReader("inplace")
        XCTAssertEqual(readers.count, 0)
        try sh("sed -i 's/^a$/A/' doc")
        finish(reader)
        XCTAssertEqual(backingText("doc"), "a\nb\nC\n")
        XCTAssertTrue(try store.conflicts(state: nil).isEmpty)
        XCTAssertTrue(try store.versions(ofPath: "doc").isEmpty)
    }
}

/// A real editor holding `doc` in a terminal (tmux) while `sed -i` changes it, then saving: one
/// lost-update conflict, both versions kept, and a clean three-way merge (the edits do not overlap).
final class LostUpdateEditorTests: LostUpdateMountTestCase {
    private var session: String { "coordfs-lost-\(getpid())" }

    override func tearDownWithError() throws {
        _ = try? sh("tmux -L \(session) kill-server", allowFailure: true)
        try super.tearDownWithError()
    }

    private func screen() throws -> String { try sh("tmux -L \(session) capture-pane -p -t edit", allowFailure: true).output }

    private func waitForScreen(_ text: String, timeout: Double = 10) throws -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if try screen().contains(text) { return true }
            usleep(50_000)
        }
        return false
    }

    private func keys(_ k: String...) throws {
        try sh("tmux -L \(session) send-keys -t edit " + k.map { "'\($0)'" }.joined(separator: " "))
    }

    /// Opens `doc` in `editor` (a shell command line), lets `change` alter it, then `save` keys it.
    private func edit(_ editor: String, change: String, in directory: String? = nil, save: () throws -> Void) throws {
        guard have("tmux") else { throw XCTSkip("tmux is not installed (make deps)") }
        try write("doc", "one\ntwo\nthree\nfour\nfive\n")
        // The tmux server must not keep any of the test's descriptors (its output pipe) open.
        let start = "import subprocess, sys; subprocess.run(sys.argv[1:], close_fds=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)"
        try sh("python3 -c '\(start)' tmux -L \(session) new-session -d -s edit -x 100 -y 30 'cd \(mnt!) && \(editor) doc'")
        let shown = try waitForScreen("five")
        XCTAssertTrue(shown, "the editor shows the document: \((try? screen()) ?? "")")
        try sh(change, in: directory)
        try save()
    }

    private func checkTheLostUpdate(baseKept: Bool = true, file: StaticString = #filePath, line: UInt = #line) throws {
        let deadline = Date().addingTimeInterval(10)
        while (try store.conflicts(atPath: "doc")).isEmpty && Date() < deadline { usleep(50_000) }
        let conflicts = try store.conflicts(atPath: "doc")
        XCTAssertEqual(conflicts.map(\.kind), [.lostUpdate], "one conflict: \(conflicts)", file: file, line: line)
        guard let conflict = conflicts.first else { return }
        XCTAssertEqual(backingText("doc"), "one\ntwo\nthree\nfour\nFIVE\n", "the editor's save", file: file, line: line)
        XCTAssertEqual(try text(conflict.theirsVersion), "ONE\ntwo\nthree\nfour\nfive\n", "sed's version kept", file: file, line: line)
        XCTAssertEqual(try lostUpdateRecords().count, 1, file: file, line: line)
        guard baseKept else {
            XCTAssertNil(conflict.baseVersion, file: file, line: line)
            return
        }
        XCTAssertEqual(try text(conflict.baseVersion), "one\ntwo\nthree\nfour\nfive\n", "what the editor read", file: file, line: line)
        let outcome = try service.resolve(conflict.id, with: .merge, by: "test")
        XCTAssertEqual(outcome.mergeConflicts, 0, file: file, line: line)
        XCTAssertEqual(try read("doc"), "ONE\ntwo\nthree\nfour\nFIVE\n", "both changes", file: file, line: line)
    }

    /// vim warns that the file changed since it read it and asks; answered yes, the save is a lost update.
    private func vimSaves() throws {
        try keys("G", "c", "c", "FIVE", "Escape", ":w", "Enter")
        if try waitForScreen("(y/n)", timeout: 3) { try keys("y", "Enter") }
        let written = try waitForScreen("written")
        XCTAssertTrue(written, (try? screen()) ?? "")
        try keys(":q", "Enter")
    }

    func testVimHoldingTheDocumentWhileSedChangesIt() throws {
        try edit("vim -u NONE -N -n", change: "sed -i 's/^one$/ONE/' doc", save: vimSaves)
        try checkTheLostUpdate()
    }

    func testVimHoldingTheDocumentWhileItIsChangedInTheBackingFolder() throws {
        try edit("vim -u NONE -N -n", change: "sed -i 's/^one$/ONE/' doc", in: backing, save: vimSaves)
        try checkTheLostUpdate(baseKept: false)
    }

    /// nano saves in place over the changed file (it may ask first, as vim does).
    func testNanoHoldingTheDocumentWhileSedChangesIt() throws {
        guard have("nano") else { throw XCTSkip("nano is not installed (make deps)") }
        try edit("nano --ignorercfiles", change: "sed -i 's/^one$/ONE/' doc") {
            try keys("M-/", "BSpace", "BSpace", "BSpace", "BSpace", "BSpace", "FIVE", "C-s")
            if try waitForScreen("continue saving", timeout: 3) { try keys("y") }
            let wrote = try waitForScreen("Wrote")
            XCTAssertTrue(wrote, (try? screen()) ?? "")
            try keys("C-x")
        }
        try checkTheLostUpdate()
    }
}
