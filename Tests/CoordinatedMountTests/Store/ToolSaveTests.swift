import XCTest
import Foundation
@testable import CoordFS
import Coordination
import DocumentStore

/// Save styles of real tools no other class drives, through a real mount, on a presented document
/// without unsaved changes: one save is one "did change" (never a deletion or a move), one
/// underlying-file-changed event (a reload: the store's base is the saved file), one `didChange`
/// record for the document in the event log, and the saved bytes in the backing folder.
final class ToolSaveTests: StoreMountTestCase {
    private func assertSaves(_ presenter: DocumentRecorder, _ count: Int = 1, expect content: String, by tool: String = "",
                             file: StaticString = #filePath, line: UInt = #line) throws {
        let events = presenter.waitForEvents(count, settle: 0.8)
        XCTAssertEqual(events.count, count, "\(tool) one underlying-file-changed event per save: \(events) \(presenter.log)", file: file, line: line)
        XCTAssertTrue(events.allSatisfy { $0.kind == .change && $0.action == .reload }, "\(events)", file: file, line: line)
        XCTAssertEqual(presenter.log.filter { $0 == "didChange" }.count, count, "did change once per save: \(presenter.log)", file: file, line: line)
        XCTAssertFalse(presenter.log.contains("accommodateDeletion"), "a save is not a deletion: \(presenter.log)", file: file, line: line)
        XCTAssertFalse(presenter.log.contains { $0.hasPrefix("didMove") }, "a save is not a move: \(presenter.log)", file: file, line: line)
        XCTAssertEqual(backingText(presenter.path.string), content, tool, file: file, line: line)
        let info = try XCTUnwrap(try store.document(atPath: presenter.path.string), file: file, line: line)
        XCTAssertEqual(info.identity, events.last?.after, "the store's base is the saved file", file: file, line: line)
        // What the log says since the presenter registered.
        let all = try daemon.storeLogRecords()
        let since = all.lastIndex { $0.kind == "presenterAdded" && $0.path == "/" + presenter.path.string } ?? 0
        let records = all[since...].filter { $0.path == "/" + presenter.path.string }
        XCTAssertEqual(records.filter { $0.kind == "didChange" }.count, count, "\(records.map(\.kind))", file: file, line: line)
        XCTAssertEqual(records.filter { $0.kind == "didDelete" || $0.kind == "didMove" }.count, 0, "\(records.map(\.kind))", file: file, line: line)
    }

    private func source(_ text: String, _ name: String = "src.txt") throws {
        try text.write(toFile: root + "/" + name, atomically: false, encoding: .utf8)
    }

    func testRsyncInPlace() throws {
        try XCTSkipUnless(have("rsync"), "rsync is not installed (make test installs it)")
        try write("doc.txt", "alpha alpha alpha\n")
        try source("alpha beta alpha\n")
        let (p, _) = try presentDocument("doc.txt")
        try sh("rsync --inplace --no-whole-file ../src.txt doc.txt")
        try assertSaves(p, expect: "alpha beta alpha\n")
    }

    func testRsyncWithABackup() throws {
        try XCTSkipUnless(have("rsync"), "rsync is not installed (make test installs it)")
        try write("doc.txt", "alpha\n")
        try source("from rsync\n")
        let (p, _) = try presentDocument("doc.txt")
        try sh("rsync -b ../src.txt doc.txt")
        try assertSaves(p, expect: "from rsync\n")
        XCTAssertEqual(backingText("doc.txt~"), "alpha\n")
    }

    /// `rsync -a` of a tree over a copy of itself where one file differs: that document is saved
    /// once, the others are not touched and hear nothing.
    func testRsyncOfATreeOverItsCopy() throws {
        try XCTSkipUnless(have("rsync"), "rsync is not installed (make test installs it)")
        try sh("mkdir -p tree/sub && echo one > tree/a.txt && echo two > tree/sub/b.txt && echo three > tree/c.txt")
        try sh("cp -a tree ../copy && echo changed > ../copy/sub/b.txt")
        let (same, _) = try presentDocument("tree/a.txt")
        let (changed, _) = try presentDocument("tree/sub/b.txt")
        try sh("rsync -a ../copy/ tree/")
        try assertSaves(changed, expect: "changed\n")
        XCTAssertEqual(same.waitForEvents(1, timeout: 0.3, settle: 0), [])
        XCTAssertFalse(same.log.contains("didChange"), "\(same.log)")
    }

    func testPerlInPlace() throws {
        try XCTSkipUnless(have("perl"), "perl is not installed")
        try write("doc.txt", "alpha\n")
        let (p, _) = try presentDocument("doc.txt")
        try sh("perl -pi -e s/alpha/beta/ doc.txt")
        try assertSaves(p, expect: "beta\n")
    }

    /// An atomic save through an unnamed file: O_TMPFILE in the document's folder, written, linked
    /// in under a name of no temp pattern (AT_EMPTY_PATH), renamed over the document.
    func testAnUnnamedFileLinkedInAndRenamedOver() throws {
        try write("doc.txt", "alpha\n")
        let (p, _) = try presentDocument("doc.txt")
        try sh("""
        python3 -c "
        import os, ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        fd = os.open('.', os.O_TMPFILE | os.O_WRONLY, 0o644); os.write(fd, b'unnamed\\n'); os.fsync(fd)
        assert libc.linkat(fd, b'', -100, b'doc.txt.saving', 0x1000) == 0, ctypes.get_errno()
        os.close(fd); os.replace('doc.txt.saving', 'doc.txt')
        "
        """)
        try assertSaves(p, expect: "unnamed\n")
    }

    /// An atomic swap save: a new file written, exchanged with the document (renameat2 with
    /// RENAME_EXCHANGE), then removed (it holds the old version).
    func testASwapSaveByRenameExchange() throws {
        try write("doc.txt", "alpha\n")
        let (p, _) = try presentDocument("doc.txt")
        try sh("""
        python3 -c "
        import os, ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        fd = os.open('doc.txt.new', os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644); os.write(fd, b'swapped\\n'); os.fsync(fd); os.close(fd)
        assert libc.renameat2(-100, b'doc.txt.new', -100, b'doc.txt', 2) == 0, ctypes.get_errno()
        os.unlink('doc.txt.new')
        "
        """)
        try assertSaves(p, expect: "swapped\n")
        XCTAssertTrue(try keptTexts("doc.txt").contains("alpha\n"), "the version it replaced is kept")
        XCTAssertNil(backingText("doc.txt.new"))
    }

    /// The document unlinked and another file linked in at its name (`rm doc; ln copy doc`): one
    /// save, its version kept, never a deletion once the save window closes.
    func testUnlinkThenLinkAnotherFileIn() throws {
        try write("doc.txt", "alpha\n")
        try write("copy.txt", "restored\n")
        let (p, _) = try presentDocument("doc.txt")
        try sh("rm doc.txt && ln copy.txt doc.txt")
        try assertSaves(p, expect: "restored\n")
        XCTAssertTrue(try keptTexts("doc.txt").contains("alpha\n"), "the version it replaced is kept")
    }

    func testPythonTempfileAndReplace() throws {
        try write("doc.txt", "alpha\n")
        let (p, _) = try presentDocument("doc.txt")
        try sh("""
        python3 -c "
        import os, tempfile
        fd, name = tempfile.mkstemp(dir='.')
        os.write(fd, b'python\\n'); os.fsync(fd); os.close(fd)
        os.replace(name, 'doc.txt')
        "
        """)
        try assertSaves(p, expect: "python\n")
    }

    func testPatch() throws {
        try XCTSkipUnless(have("patch"), "patch is not installed (make test installs it)")
        try write("doc.txt", "alpha\nbeta\n")
        try sh("printf 'alpha\\ngamma\\n' > ../new.txt; cp doc.txt ../old.txt; diff -u ../old.txt ../new.txt > ../fix.diff", allowFailure: true)
        let (p, _) = try presentDocument("doc.txt")
        try sh("patch -s doc.txt < ../fix.diff")
        try assertSaves(p, expect: "alpha\ngamma\n")
    }

    func testCpWithABackup() throws {
        try write("doc.txt", "alpha\n")
        try source("copied\n")
        let (p, _) = try presentDocument("doc.txt")
        try sh("cp --backup=simple ../src.txt doc.txt")
        try assertSaves(p, expect: "copied\n")
        XCTAssertEqual(backingText("doc.txt~"), "alpha\n")
    }

    func testMvWithABackup() throws {
        try write("doc.txt", "alpha\n")
        try write("new.txt", "moved\n")
        let (p, _) = try presentDocument("doc.txt")
        try sh("mv -b new.txt doc.txt")
        try assertSaves(p, expect: "moved\n")
        XCTAssertEqual(backingText("doc.txt~"), "alpha\n")
    }

    /// The backup name already holds the backup of an earlier save: the next save with a backup
    /// is one change all the same (on main the document moved to the backup name, its presenter
    /// with it, and the new file was another document).
    func testSavesWithABackupWhenAnEarlierBackupIsThere() throws {
        try write("doc.txt", "alpha\n")
        try write("doc.txt~", "an earlier backup\n")
        try source("copied\n")
        let (p, _) = try presentDocument("doc.txt")
        try sh("echo moved > new.txt && mv -b new.txt doc.txt")
        try assertSaves(p, expect: "moved\n")
        XCTAssertEqual(backingText("doc.txt~"), "alpha\n")
        try sh("cp --backup=simple ../src.txt doc.txt")
        try assertSaves(p, 2, expect: "copied\n")
        XCTAssertEqual(backingText("doc.txt~"), "moved\n")
        if have("emacs") {
            try sh("emacs -Q --batch doc.txt --eval '(progn (goto-char (point-max)) (insert \"beta\\n\") (save-buffer))'")
            try assertSaves(p, 3, expect: "copied\nbeta\n")
        }
    }

    func testTee() throws {
        try write("doc.txt", "alpha\n")
        let (p, _) = try presentDocument("doc.txt")
        try sh("echo teed | tee doc.txt > /dev/null")
        try assertSaves(p, expect: "teed\n")
    }

    func testDdWithoutTruncating() throws {
        try write("doc.txt", "alpha\n")
        let (p, _) = try presentDocument("doc.txt")
        try sh("printf BETA | dd of=doc.txt conv=notrunc status=none")
        try assertSaves(p, expect: "BETAa\n")
    }

    /// Truncated by path, then opened and written: two operations, two changes, even by one process
    /// (docs/semantics.md: a truncate by path is a write of its own; only attributes set by path
    /// right after a save are part of it).
    func testTruncateByPathThenWriteIsTwoChanges() throws {
        try write("doc.txt", "alpha\n")
        let (p, _) = try presentDocument("doc.txt")
        try sh("python3 -c \"import os; os.truncate('doc.txt', 0); f = open('doc.txt', 'a'); f.write('new\\\\n'); f.close()\"")
        try assertSaves(p, 2, expect: "new\n")
    }

    func testASaveThroughASymlink() throws {
        try write("doc.txt", "alpha\n")
        try sh("ln -s doc.txt link.txt")
        let (p, _) = try presentDocument("doc.txt")
        try sh("echo linked > link.txt")
        try assertSaves(p, expect: "linked\n")
    }

    func testASaveThroughAHardLink() throws {
        try write("doc.txt", "alpha\n")
        try sh("ln doc.txt other.txt")
        let (p, _) = try presentDocument("doc.txt")
        try sh("echo linked > other.txt")
        try assertSaves(p, expect: "linked\n")
    }

    /// Saves further apart than save_window are two changes; many quick ones, each its own.
    func testSavesApartAndManyQuickOnes() throws {
        try write("doc.txt", "alpha\n")
        let (p, _) = try presentDocument("doc.txt")
        try sh("sed -i s/alpha/beta/ doc.txt")
        p.waitForEvents(1, settle: 0)
        usleep(1_000_000)
        try sh("echo gamma > doc.txt")
        try assertSaves(p, 2, expect: "gamma\n")
        try sh("for i in 1 2 3 4 5 6 7 8 9 10; do echo $i > doc.txt; done")
        try assertSaves(p, 12, expect: "10\n")
    }

    /// One row of `testMoreToolsEachSaveOnce`: `command`, run in the mount, saves `document`
    /// (written beforehand as "alpha alpha\n" beside the mount, after `setup` ran there) and leaves
    /// `expect` in it.
    private struct ToolRow {
        var tool: String
        var document: String
        var setup = ""
        var command: String
        var expect: String
    }

    /// Tools no other test drives, each saving its own presented document once (what was tried by
    /// hand on 27 Nov and found right; kept so that it stays right): a shared memory map written
    /// and synced, `unzip -o` (an unlink and a create, then times and mode set by path), `cp -a` and
    /// `cp --reflink=auto` over it, `sendfile(2)` into a truncating open, `fallocate -l` and
    /// `truncate -s` by path, `rsync -aXA` of a file with an extended attribute and an ACL (set
    /// on rsync's temp file, renamed over), and `git checkout` of a branch in a clone made through
    /// the mount.
    func testMoreToolsEachSaveOnce() throws {
        let alpha = "alpha alpha\n"
        try source("copied\n")
        var rows = [
            ToolRow(tool: "mmap", document: "mmap.txt", command: """
                python3 -c "
                import mmap, os
                fd = os.open('mmap.txt', os.O_RDWR); m = mmap.mmap(fd, 0); os.close(fd)
                m[0:5] = b'BETA!'; m.flush(); m.close()"
                """, expect: "BETA! alpha\n"),
            ToolRow(tool: "cp -a", document: "cpa.txt", command: "cp -a ../src.txt cpa.txt", expect: "copied\n"),
            ToolRow(tool: "cp --reflink=auto", document: "reflink.txt", command: "cp --reflink=auto ../src.txt reflink.txt", expect: "copied\n"),
            ToolRow(tool: "sendfile", document: "sendfile.txt", command: """
                python3 -c "
                import os
                s = os.open('../src.txt', os.O_RDONLY); d = os.open('sendfile.txt', os.O_WRONLY | os.O_TRUNC)
                os.sendfile(d, s, 0, 100); os.close(d)"
                """, expect: "copied\n"),
            ToolRow(tool: "fallocate -l", document: "fallocate.txt", command: "fallocate -l 64 fallocate.txt",
                    expect: alpha + String(repeating: "\0", count: 64 - alpha.utf8.count)),
            ToolRow(tool: "truncate -s", document: "truncate.txt", command: "truncate -s 5 truncate.txt", expect: "alpha"),
            ToolRow(tool: "rsync -aXA", document: "rsync.txt",
                    setup: "cp ../src.txt ../rsync.txt && setfattr -n user.tag -v red ../rsync.txt && setfacl -m u:nobody:r ../rsync.txt",
                    command: "rsync -aXA ../rsync.txt rsync.txt && getfattr -n user.tag rsync.txt | grep -q red && getfacl -c rsync.txt | grep -q user:nobody:r",
                    expect: "copied\n"),
        ]
        if have("unzip") {
            rows.append(ToolRow(tool: "unzip -o", document: "zipped.txt",
                                setup: "cd .. && python3 -c \"import zipfile; zipfile.ZipFile('a.zip', 'w').writestr('zipped.txt', 'unzipped\\\\n')\"",
                                command: "unzip -q -o ../a.zip", expect: "unzipped\n"))
        }
        if have("git") {
            let git = "git -c user.name=t -c user.email=t@t"
            rows.append(ToolRow(tool: "git checkout", document: "repo/doc.txt", setup: """
                mkdir ../origin && cd ../origin && git init -q -b main && echo one > doc.txt && \(git) add doc.txt && \(git) commit -qm one && \
                git checkout -qb other && echo two > doc.txt && \(git) commit -qam two && git checkout -q main && \
                cd ../mnt && \(git) clone -q ../origin repo
                """, command: "cd repo && \(git) checkout -q other", expect: "two\n"))
        }
        for row in rows {
            if !row.setup.isEmpty { try sh(row.setup) }
            if !row.document.contains("/") { try write(row.document, alpha) }
        }
        for row in rows {
            let (p, _) = try presentDocument(row.document)
            let out = try sh(row.command, allowFailure: true)
            XCTAssertEqual(out.status, 0, "\(row.tool): \(out.output)")
            try assertSaves(p, expect: row.expect, by: row.tool)
        }
    }

    func testGitStashAndPop() throws {
        try XCTSkipUnless(have("git"), "git is not installed (make test installs it)")
        try write("doc.txt", "committed\n")
        try sh("git init -q . && git -c user.name=t -c user.email=t@t add doc.txt && git -c user.name=t -c user.email=t@t commit -qm one")
        try sh("echo 'local edit' > doc.txt")
        let (p, _) = try presentDocument("doc.txt")
        try sh("git -c user.name=t -c user.email=t@t stash -q")
        try assertSaves(p, expect: "committed\n")
        usleep(600_000)
        try sh("git -c user.name=t -c user.email=t@t stash pop -q")
        try assertSaves(p, 2, expect: "local edit\n")
    }
}

/// Two unmodified editors over each other, where the other's change is made by a real tool: a
/// Python process reads `doc`, the tool changes it ("a" → "A"), and the Python process saves its
/// copy ("c" → "C") by renaming a new file over it: one `lostUpdate` conflict with what it read as
/// the base and the tool's bytes as theirs, never a silent loss.
final class ToolLostUpdateTests: LostUpdateMountTestCase {
    func testEachToolsChangeUnderAnEditorIsALostUpdateWhenTheEditorSaves() throws {
        try "A\nb\nc\n".write(toFile: root + "/src", atomically: false, encoding: .utf8)
        var tools = [
            "dd": "printf A | dd of=doc conv=notrunc status=none",
            "cp --backup": "cp --backup=simple ../src doc",
            "mv -b": "cp ../src new && mv -b new doc",
            "perl -i": "perl -pi -e 's/^a$/A/' doc",
            "tee": "tee doc < ../src > /dev/null",
            "a hard link": "ln doc other && cat ../src > other && rm other",
            "a symlink": "ln -s doc link && cat ../src > link && rm link",
        ]
        if have("rsync") {
            tools["rsync --inplace"] = "rsync --inplace -I ../src doc"
            tools["rsync -b"] = "rsync -b -I ../src doc"
        }
        if have("patch") {
            try "a\nb\nc\n".write(toFile: root + "/old", atomically: false, encoding: .utf8)
            _ = try sh("diff -u ../old ../src > ../fix.diff", allowFailure: true)
            tools["patch"] = "patch -s doc < ../fix.diff"
        }
        for (tool, command) in tools.sorted(by: { $0.key < $1.key }) {
            try write("doc", "a\nb\nc\n")
            for conflict in try store.conflicts(atPath: "doc") { _ = try service.resolve(conflict.id, with: .save, by: "test") }
            let reader = try startReader("rename")
            try sh(command)
            XCTAssertEqual(backingText("doc"), "A\nb\nc\n", "\(tool) changed it")
            finish(reader)
            let open = try store.conflicts(atPath: "doc")
            XCTAssertEqual(open.map(\.kind), [.lostUpdate], "\(tool): one lost update: \(open)")
            guard let conflict = open.first else { continue }
            XCTAssertEqual(try text(conflict.theirsVersion), "A\nb\nc\n", "\(tool): theirs kept")
            XCTAssertEqual(try text(conflict.baseVersion), "a\nb\nc\n", "\(tool): what the editor read kept")
            XCTAssertEqual(backingText("doc"), "a\nb\nC\n", "\(tool): the editor's save went through")
            unlink(backing + "/doc~")
        }
    }
}
