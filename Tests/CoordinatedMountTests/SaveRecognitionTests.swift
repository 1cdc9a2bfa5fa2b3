import XCTest
import Coordination
@testable import CoordFS

/// Every way editors and tools save a document: the document's presenter is asked before, hears
/// exactly one "did change" after, never a deletion or a move, and keeps presenting the same path.
final class SaveRecognitionTests: InProcessMountTestCase {
    /// `doc.txt`, holding "alpha\n", presented; `command` run in the mount is one save of it,
    /// leaving `content`.
    private func assertOneSave(by command: String, expect content: String,
                               file: StaticString = #filePath, line: UInt = #line) throws {
        try write("doc.txt", "alpha\n")
        let p = try present("doc.txt")
        try sh(command)
        try assertOneSave(p, expect: content, file: file, line: line)
    }

    func testSedInPlace() throws {
        try assertOneSave(by: "sed -i s/alpha/beta/ doc.txt", expect: "beta\n")
    }

    /// The document is renamed to a backup name of the tool's choosing, then a new file takes its
    /// name: a save, whatever the backup name; the backup is a new item of the folder.
    func testSedInPlaceWithABackupSuffix() throws {
        try FileManager.default.createDirectory(atPath: backing + "/notes", withIntermediateDirectories: true)
        try write("notes/doc.txt", "alpha\n")
        let p = try present("notes/doc.txt")
        let dir = try present("notes")
        try sh("sed -i.orig s/alpha/beta/ notes/doc.txt")
        try assertOneSave(p, expect: "beta\n")
        XCTAssertEqual(try String(contentsOfFile: backing + "/notes/doc.txt.orig", encoding: .utf8), "alpha\n")
        let log = dir.waitUntil { $0.contains("subitemDidChange notes/doc.txt") }
        XCTAssertEqual(log.filter { !$0.hasPrefix("relinquish") && $0 != "reacquire" }.sorted(),
                       ["subitemDidAppear notes/doc.txt.orig", "subitemDidChange notes/doc.txt"], "\(log)")
    }

    /// Unlink, create anew, close, then the mode set by path: the mode is part of the save.
    func testInstallSetsTheModeByPathAfterItsSave() throws {
        try "installed\n".write(toFile: root + "/new.txt", atomically: false, encoding: .utf8)
        try assertOneSave(by: "install -m 600 ../new.txt doc.txt", expect: "installed\n")
        var st = stat()
        XCTAssertEqual(stat(backing + "/doc.txt", &st), 0)
        XCTAssertEqual(st.st_mode & 0o777, 0o600)
    }

    /// An archive extractor overwriting a document: unlink, create, write, then times, owner and
    /// mode: one save.
    func testArchiveExtractionOverADocument() throws {
        try sh("mkdir -p ../src && printf 'archived\\n' > ../src/doc.txt && tar -cf ../a.tar -C ../src doc.txt")
        try assertOneSave(by: "tar -xf ../a.tar", expect: "archived\n")
    }

    func testVimDefaultSettings() throws {
        try XCTSkipUnless(have("vim"), "vim is not installed (make test installs it)")
        try assertOneSave(by: "vim -u DEFAULTS -i NONE -es '+normal! Gobeta' '+wq' doc.txt", expect: "alpha\nbeta\n")
        XCTAssertFalse(FileManager.default.fileExists(atPath: backing + "/doc.txt~"))
    }

    func testVimBackupcopyYes() throws {
        try XCTSkipUnless(have("vim"), "vim is not installed (make test installs it)")
        try assertOneSave(by: "vim -u DEFAULTS -i NONE -es '+set backupcopy=yes' '+normal! Gobeta' '+wq' doc.txt", expect: "alpha\nbeta\n")
    }

    func testRsyncOverExistingFile() throws {
        try XCTSkipUnless(have("rsync"), "rsync is not installed (make test installs it)")
        try "from rsync\n".write(toFile: root + "/src.txt", atomically: false, encoding: .utf8)
        try assertOneSave(by: "rsync ../src.txt doc.txt", expect: "from rsync\n")
    }

    func testCpOverFile() throws {
        try "copied\n".write(toFile: root + "/src.txt", atomically: false, encoding: .utf8)
        try assertOneSave(by: "cp ../src.txt doc.txt", expect: "copied\n")
    }

    func testMvTempFileOver() throws {
        try assertOneSave(by: "printf 'moved\\n' > doc.txt.tmp && mv doc.txt.tmp doc.txt", expect: "moved\n")
    }

    func testShellRedirect() throws {
        try assertOneSave(by: "echo redirected > doc.txt", expect: "redirected\n")
    }

    func testPythonOpenWrite() throws {
        try assertOneSave(by: "python3 -c \"open('doc.txt', 'w').write('python\\\\n')\"", expect: "python\n")
    }

    func testGitCheckout() throws {
        try XCTSkipUnless(have("git"), "git is not installed (make test installs it)")
        try write("doc.txt", "committed\n")
        try sh("git init -q . && git -c user.name=t -c user.email=t@t add doc.txt && git -c user.name=t -c user.email=t@t commit -qm one")
        try sh("echo 'local edit' > doc.txt") // before the presenter registers: it is not told
        let p = try present("doc.txt")
        try sh("git checkout -- doc.txt")
        try assertOneSave(p, expect: "committed\n")
    }

    /// A presented document unlinked and a file linked in at its name within save_window (`rm doc;
    /// ln copy doc`, and an unnamed file linked in right after the unlink): one save each, as when
    /// a create brings it back (before: told it changed, then, once the window closed, asked to
    /// accommodate a deletion and told it was deleted, while it was there).
    func testUnlinkThenALinkAtItsNameIsOneSave() throws {
        try write("doc.txt", "alpha\n")
        try write("copy.txt", "restored\n")
        try write("doc2.txt", "alpha\n")
        let p = try present("doc.txt"), q = try present("doc2.txt")
        try sh("rm doc.txt && ln copy.txt doc.txt")
        try sh("""
        python3 -c "
        import os, ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        fd = os.open('.', os.O_TMPFILE | os.O_WRONLY, 0o644); os.write(fd, b'unnamed\\n')
        os.unlink('doc2.txt')
        assert libc.linkat(fd, b'', -100, b'doc2.txt', 0x1000) == 0, ctypes.get_errno()
        os.close(fd)
        "
        """)
        try assertOneSave(p, expect: "restored\n")
        try assertOneSave(q, expect: "unnamed\n")
        for presenter in [p, q] {
            XCTAssertFalse(presenter.log.contains { $0.lowercased().contains("delete") }, "no deletion: \(presenter.log)")
        }
    }

    func testTempFilePlusRenameLikeLibreOffice() throws {
        try write("doc.txt", "alpha\n")
        let p = try present("doc.txt")
        try sh("""
        python3 -c "
        import os
        open('.~lock.doc.txt#', 'w').write('lock')
        with open('lu12345.tmp', 'w') as f: f.write('office\\\\n'); f.flush(); os.fsync(f.fileno())
        os.replace('lu12345.tmp', 'doc.txt')
        os.unlink('.~lock.doc.txt#')
        "
        """)
        try assertOneSave(p, expect: "office\n")
    }

    func testEmacsRenameToBackupSave() throws {
        try XCTSkipUnless(have("emacs"), "emacs is not installed (make test installs emacs-nox)")
        try assertOneSave(by: "emacs -Q --batch doc.txt --eval '(progn (goto-char (point-max)) (insert \"beta\\n\") (save-buffer))'", expect: "alpha\nbeta\n")
    }

    /// What a folder's presenter heard, without the asks around accesses.
    private func told(_ presenter: RecordingPresenter) -> [String] {
        presenter.log.filter { !$0.hasPrefix("relinquish") && $0 != "reacquire" && $0 != "save" }
    }

    /// Temp files are recognised by what their creator does, whatever their name: created, written
    /// and renamed over the document, or created and removed, by one process within save_window and
    /// opened by no other. The folder's presenter hears of the document only.
    func testTempFilesOfAnyNameNeverReachTheFolderPresenter() throws {
        try FileManager.default.createDirectory(atPath: backing + "/notes", withIntermediateDirectories: true)
        try write("notes/doc.txt", "alpha\n")
        let dir = try present("notes")
        // Python's tempfile names (tmpXXXXXXXX), a probe created and removed at once.
        try sh("""
        python3 -c "
        import os, tempfile
        f = tempfile.NamedTemporaryFile('w', dir='notes', delete=False); f.write('beta\\n'); f.close()
        os.replace(f.name, 'notes/doc.txt')
        fd = os.open('notes/probe-%d' % os.getpid(), os.O_CREAT | os.O_EXCL | os.O_WRONLY); os.close(fd)
        os.unlink('notes/probe-%d' % os.getpid())
        "
        """)
        let log = dir.waitUntil(settle: 0.8) { $0.contains("subitemDidChange notes/doc.txt") }
        XCTAssertEqual(told(dir), ["subitemDidChange notes/doc.txt"], "\(log)")
        XCTAssertEqual(try String(contentsOfFile: backing + "/notes/doc.txt", encoding: .utf8), "beta\n")
    }

    /// A symbolic link or FIFO its maker removes at once was a probe, as a file created and removed
    /// at once is: `git init` and `git clone` make `.git/tXXXXXX` a symbolic link to see whether
    /// the file system has them, and remove it. The folder's presenter never hears of them (before:
    /// that each appeared, then asked to accommodate its deletion and told it was deleted, on every
    /// `git init` in a presented folder); one kept appears once it outlives save_window.
    func testASymlinkOrFIFOItsMakerRemovesAtOnceNeverReachesTheFolderPresenter() throws {
        try FileManager.default.createDirectory(atPath: backing + "/notes", withIntermediateDirectories: true)
        let dir = try present("notes")
        try sh("""
        python3 -c "
        import os
        os.symlink('target', 'notes/probe'); os.unlink('notes/probe')
        os.mkfifo('notes/fifo'); os.unlink('notes/fifo')
        os.symlink('target', 'notes/kept')
        "
        """)
        let log = dir.waitUntil(settle: 0.8) { $0.contains("subitemDidAppear notes/kept") }
        XCTAssertEqual(told(dir), ["subitemDidAppear notes/kept"], "\(log)")
        XCTAssertFalse(log.contains { $0.hasPrefix("accommodateSubitemDeletion") }, "\(log)")
        if have("git") {
            dir.clear()
            try sh("git init -q notes/repo")
            let log = dir.waitUntil(settle: 1.2) { $0.contains("subitemDidAppear notes/repo/.git/HEAD") }
            let probes = log.filter { $0.range(of: #"\.git/t[A-Za-z0-9]{6}$"#, options: .regularExpression) != nil }
            XCTAssertEqual(probes, [], "\(log)")
            XCTAssertTrue(log.contains("subitemDidAppear notes/repo/.git/HEAD"), "\(log)")
        }
    }

    /// An atomic swap save: a new file written, exchanged with the document (renameat2 with
    /// RENAME_EXCHANGE, which leaves the old version at the new file's name), then removed; the
    /// document named first or second. Each document's presenter is asked before and told once;
    /// the folder's presenter hears that the documents changed, never of the new files (before: that
    /// each changed, then asked to accommodate its deletion and told it was deleted).
    func testASwapSaveByRenameExchangeIsOneSave() throws {
        try FileManager.default.createDirectory(atPath: backing + "/notes", withIntermediateDirectories: true)
        try write("notes/doc.txt", "alpha\n")
        try write("notes/doc2.txt", "alpha\n")
        let p = try present("notes/doc.txt"), q = try present("notes/doc2.txt")
        let dir = try present("notes")
        try sh("""
        python3 -c "
        import ctypes, os
        libc = ctypes.CDLL(None, use_errno=True)
        def swap(a, b):
            assert libc.renameat2(-100, a.encode(), -100, b.encode(), 2) == 0, os.strerror(ctypes.get_errno())
        for doc, first in (('notes/doc.txt', False), ('notes/doc2.txt', True)):
            new = doc + '.new'
            fd = os.open(new, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644); os.write(fd, b'beta\\n'); os.fsync(fd); os.close(fd)
            swap(doc, new) if first else swap(new, doc)
            os.unlink(new)
        "
        """)
        try assertOneSave(p, expect: "beta\n")
        try assertOneSave(q, expect: "beta\n")
        let log = dir.waitUntil(settle: 0.8) { $0.contains("subitemDidChange notes/doc2.txt") }
        XCTAssertEqual(told(dir), ["subitemDidChange notes/doc.txt", "subitemDidChange notes/doc2.txt"], "\(log)")
        XCTAssertFalse(log.contains { $0.contains(".new") }, "\(log)")
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: backing + "/notes").sorted(), ["doc.txt", "doc2.txt"])
    }

    /// git's lock file is written and renamed over the index: the presenter of the repository hears
    /// that the index changed, never of a lock file.
    func testGitsLockFileIsATempFile() throws {
        try XCTSkipUnless(have("git"), "git is not installed (make test installs it)")
        try FileManager.default.createDirectory(atPath: backing + "/repo", withIntermediateDirectories: true)
        try sh("cd repo && git init -q . && echo one > a.txt && git add a.txt")
        let dir = try present("repo/.git")
        try sh("cd repo && echo two > b.txt && git add b.txt")
        let log = dir.waitUntil(settle: 0.8) { $0.contains("subitemDidChange repo/.git/index") }
        XCTAssertTrue(log.contains("subitemDidChange repo/.git/index"), "\(log)")
        XCTAssertFalse(log.contains { $0.contains("index.lock") }, "\(log)")
        // Every item it was told appeared is there.
        for entry in told(dir) where entry.hasPrefix("subitemDidAppear ") {
            let item = String(entry.dropFirst("subitemDidAppear ".count))
            XCTAssertTrue(FileManager.default.fileExists(atPath: backing + "/" + item), "told \(item) appeared: \(log)")
        }
    }

    /// A new file that outlives save_window is told once, as having appeared (with what its creator
    /// wrote).
    func testANewFileAppearsOnceItOutlivesTheSaveWindow() throws {
        try FileManager.default.createDirectory(atPath: backing + "/notes", withIntermediateDirectories: true)
        let dir = try present("notes")
        try sh("echo new > notes/new.txt")
        let log = dir.waitUntil(settle: 0.5) { $0.contains("subitemDidAppear notes/new.txt") }
        XCTAssertEqual(told(dir), ["subitemDidAppear notes/new.txt"], "\(log)")
    }

    /// Temp, swap, lock and backup files never show up as documents to a directory's presenter; the
    /// saved document shows up as changed, once.
    func testDirectoryPresenterHearsTheDocumentNotTheTempFiles() throws {
        try XCTSkipUnless(have("vim"), "vim is not installed (make test installs it)")
        try FileManager.default.createDirectory(atPath: backing + "/notes", withIntermediateDirectories: true)
        try write("notes/doc.txt", "alpha\n")
        let dir = try present("notes")
        try sh("vim -u DEFAULTS -i NONE -es '+normal! Gobeta' '+wq' notes/doc.txt")
        try sh("sed -i s/alpha/gamma/ notes/doc.txt")
        let log = dir.waitUntil(timeout: 5, settle: 0.8) { $0.filter { $0 == "subitemDidChange notes/doc.txt" }.count >= 2 }
        let mentioned = Set(log.compactMap { $0.split(separator: " ").dropFirst().first.map(String.init) })
        XCTAssertEqual(mentioned, ["notes/doc.txt"], "only the document is reported: \(log)")
        XCTAssertFalse(log.contains { $0.hasPrefix("subitemDidAppear") }, "no new documents: \(log)")
    }
}

/// With a long save_window: a new file another process opens is told at once, not at the window's end.
final class NewFileAppearanceTests: InProcessMountTestCase {
    override func configure(_ options: inout MountOptions) {
        super.configure(&options)
        options.coordination.saveWindow = 4
    }

    func testANewFileIsToldWhenSaveWindowCloses() throws {
        try FileManager.default.createDirectory(atPath: backing + "/notes", withIntermediateDirectories: true)
        let dir = try present("notes")
        try sh("echo new > notes/new.txt")
        usleep(1_500_000)
        XCTAssertFalse(dir.log.contains { $0.hasPrefix("subitem") }, "not before save_window: \(dir.log)")
        let log = dir.waitUntil(timeout: 5, settle: 0.3) { $0.contains("subitemDidAppear notes/new.txt") }
        XCTAssertEqual(log.filter { $0.hasPrefix("subitem") }, ["subitemDidAppear notes/new.txt"])
    }

    func testANewFileAnotherProcessOpensIsToldAtOnce() throws {
        try FileManager.default.createDirectory(atPath: backing + "/notes", withIntermediateDirectories: true)
        let dir = try present("notes")
        let started = Date()
        try sh("python3 -c \"import subprocess; f = open('notes/read.txt', 'w'); f.write('x'); f.flush(); subprocess.run(['cat', 'notes/read.txt'], check=True)\"")
        let log = dir.waitUntil(timeout: 3, settle: 0) { $0.contains("subitemDidAppear notes/read.txt") }
        XCTAssertTrue(log.contains("subitemDidAppear notes/read.txt"), "\(log)")
        XCTAssertLessThan(Date().timeIntervalSince(started), 3, "told when cat opened it, not when save_window (4 s) closed")
        XCTAssertEqual(dir.waitUntil(timeout: 0, settle: 0.5) { _ in true }.filter { $0.hasPrefix("subitemDidAppear") }, ["subitemDidAppear notes/read.txt"])
    }

    /// Presenters that register after the new file was written (of the file, of its folder) found it
    /// made: its appearance, told when save_window closes, reaches the folder's presenter that was
    /// there before, and not them (the file's presenter heard "did change" for contents it had
    /// read). The next save reaches all three, once.
    func testPresentersRegisteredAfterANewFileWasMadeAreNotToldItsLateAppearance() throws {
        try FileManager.default.createDirectory(atPath: backing + "/notes", withIntermediateDirectories: true)
        let dir = try present("notes")
        try sh("echo new > notes/fresh.txt")
        let file = try present("notes/fresh.txt")
        let lateDir = try present("notes")
        let log = dir.waitUntil(timeout: 20, settle: 1) { $0.contains("subitemDidAppear notes/fresh.txt") }
        XCTAssertEqual(log.filter { $0.hasPrefix("subitem") }, ["subitemDidAppear notes/fresh.txt"], "the folder's presenter from before")
        XCTAssertEqual(file.log, [], "the file's presenter registered once it was written")
        XCTAssertEqual(lateDir.log, [], "the folder's presenter registered once it was written")
        try sh("echo more > notes/fresh.txt")
        XCTAssertEqual(file.waitUntil(timeout: 20, settle: 0.5) { $0.contains("didChange") }.filter { $0 == "didChange" }.count, 1,
                       "the next save: \(file.log)")
        XCTAssertEqual(lateDir.waitUntil(timeout: 20, settle: 0) { $0.contains("subitemDidChange notes/fresh.txt") }
            .filter { $0.hasPrefix("subitemDid") }, ["subitemDidChange notes/fresh.txt"])
        XCTAssertEqual(dir.log.filter { $0.hasPrefix("subitemDid") }, ["subitemDidAppear notes/fresh.txt", "subitemDidChange notes/fresh.txt"])
        XCTAssertEqual(try read("notes/fresh.txt"), "more\n")
    }
}

/// A write that was over before the presenter registered, but whose handle another process still
/// holds (close(2) does not wait for the kernel's RELEASE either, which under load came after the
/// presenter of `testGitCheckout` registered and told it twice): the presenter, which registered
/// after the change, is not told it when the handle finally closes. The write's open waited for
/// a reader first, so it was not granted at once. The save that follows is one change.
class LateReleaseTestCase: InProcessMountTestCase {
    func writeOverBeforeThePresenterRegisteredIsNotToldItAtItsLateRelease() throws -> RecordingPresenter {
        try write("doc.txt", "alpha\n")
        // The child holding the handle lets go once the presenter registered (../go appears); the
        // children keep none of the test's pipes, so the command returns at once.
        try sh("""
        python3 -c "
        import os, time
        if os.fork() == 0:
            os.closerange(0, 65536)
            fd = os.open('doc.txt', os.O_RDONLY); time.sleep(0.5); os._exit(0)
        time.sleep(0.1)
        fd = os.open('doc.txt', os.O_WRONLY | os.O_TRUNC)
        os.write(fd, b'local edit\\n')
        if os.fork() == 0:
            os.closerange(0, fd); os.closerange(fd + 1, 65536)
            n = 0
            while not os.path.exists('../go') and n < 200:
                time.sleep(0.05); n += 1
            os._exit(0)
        "
        """)
        XCTAssertEqual(try String(contentsOfFile: backing + "/doc.txt", encoding: .utf8), "local edit\n")
        let p = try present("doc.txt")
        let doc = try ItemPath("doc.txt")
        func holders() -> [RequestID] { coordinator.status().held.filter { $0.intents.contains { $0.path == doc } }.map(\.id) }
        XCTAssertEqual(holders().count, 1, "the write is still held when the presenter registers")
        FileManager.default.createFile(atPath: root + "/go", contents: nil)
        let deadline = Date().addingTimeInterval(6)
        while !holders().isEmpty && Date() < deadline { usleep(20_000) }
        XCTAssertEqual(holders(), [], "the handle was released")
        usleep(300_000)
        XCTAssertEqual(p.log, [], "a change over before it registered: \(p.log)")
        try sh("echo saved > doc.txt")
        let log = p.waitUntil(timeout: 5, settle: 0.8) { $0.contains("didChange") }
        XCTAssertEqual(log.filter { $0 == "didChange" }.count, 1, "one change per save: \(log)")
        return p
    }

    /// The other way round: a process opened the document for writing (with O_TRUNC or without)
    /// before the presenter registered, and writes and closes after it did. What the presenter read
    /// when it registered did not hold the save, so it hears of it, once (as with Apple: a save
    /// is told to every presenter once), and the next save once more.
    func writeAfterThePresenterRegisteredIsToldOnce(truncate: Bool) throws -> RecordingPresenter {
        try write("doc.txt", "alpha\n")
        // The child opens the file, writes once ../go appears, and closes (the command returns at once).
        try sh("""
        python3 -c "
        import os, time
        if os.fork() == 0:
            os.closerange(0, 65536)
            fd = os.open('doc.txt', os.O_WRONLY\(truncate ? " | os.O_TRUNC" : ""))
            n = 0
            while not os.path.exists('../go') and n < 200:
                time.sleep(0.05); n += 1
            os.write(fd, b'written after\\n'); os.close(fd); os._exit(0)
        "
        """)
        let doc = try ItemPath("doc.txt")
        func holders() -> [RequestID] { coordinator.status().held.filter { $0.intents.contains { $0.path == doc } }.map(\.id) }
        var deadline = Date().addingTimeInterval(6)
        while holders().isEmpty && Date() < deadline { usleep(20_000) }
        XCTAssertEqual(holders().count, 1, "the write open is held when the presenter registers")
        let p = try present("doc.txt")
        FileManager.default.createFile(atPath: root + "/go", contents: nil)
        deadline = Date().addingTimeInterval(6)
        while !holders().isEmpty && Date() < deadline { usleep(20_000) }
        XCTAssertEqual(holders(), [], "the handle was released")
        XCTAssertEqual(try String(contentsOfFile: backing + "/doc.txt", encoding: .utf8), "written after\n")
        let log = p.waitUntil(timeout: 5, settle: 0.8) { $0.contains("didChange") }
        XCTAssertEqual(log.filter { $0 == "didChange" }.count, 1, "a save after the registration is told once: \(log)")
        try sh("echo saved > doc.txt")
        let after = p.waitUntil(timeout: 5, settle: 0.8) { $0.filter { $0 == "didChange" }.count >= 2 }
        XCTAssertEqual(after.filter { $0 == "didChange" }.count, 2, "the next save once more: \(after)")
        return p
    }
}

/// Without passthrough: the daemon serves the writes and sees the last close as the RELEASE.
final class LateReleaseTests: LateReleaseTestCase {
    override func configure(_ options: inout MountOptions) {
        super.configure(&options)
        options.passthrough = false
    }

    func testAWriteOverBeforeThePresenterRegisteredIsNotToldItAtItsLateRelease() throws {
        _ = try writeOverBeforeThePresenterRegisteredIsNotToldItAtItsLateRelease()
    }

    func testAWriteAfterThePresenterRegisteredIsToldOnce() throws {
        _ = try writeAfterThePresenterRegisteredIsToldOnce(truncate: false)
    }

    func testAWriteAfterThePresenterRegisteredIsToldOnceAfterATruncatingOpen() throws {
        _ = try writeAfterThePresenterRegisteredIsToldOnce(truncate: true)
    }
}

/// With kernel passthrough: the child's last close of the backing file is also reported by fanotify,
/// under the child's pid, which opened nothing through the mount. The backing watcher knows it for
/// the mount's own by what the file is (still as the mount's release left it), so nothing is told
/// or recorded as a change made beside the mount.
final class LatePassthroughReleaseTests: LateReleaseTestCase {
    func testAWriteOverBeforeThePresenterRegisteredIsNotToldItAtItsLateRelease() throws {
        XCTAssertEqual(daemon.session?.passthroughEnabled, true)
        _ = try writeOverBeforeThePresenterRegisteredIsNotToldItAtItsLateRelease()
        XCTAssertEqual(try besideTheMount("/doc.txt"), [], "the child's close is the mount's own write")
    }

    func testAWriteAfterThePresenterRegisteredIsToldOnce() throws {
        _ = try writeAfterThePresenterRegisteredIsToldOnce(truncate: false)
        XCTAssertEqual(try besideTheMount("/doc.txt"), [], "the child's close is the mount's own write")
    }

    func testAWriteAfterThePresenterRegisteredIsToldOnceAfterATruncatingOpen() throws {
        _ = try writeAfterThePresenterRegisteredIsToldOnce(truncate: true)
    }
}
