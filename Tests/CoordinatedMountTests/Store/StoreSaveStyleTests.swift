import XCTest
import Foundation
@testable import CoordFS
import Coordination
import DocumentStore

/// Every save style of the coordinated-mount issue, through a real mount, on a presented document
/// with unsaved changes: exactly one underlying-file-changed event (a change, with before/after
/// identity), the base kept as a version, one open conflict; the presenter's own "did change" from
/// the coordinator arrives too, once.
final class StoreSaveStyleTests: StoreMountTestCase {
    private func assertConflictAfterSave(_ presenter: DocumentRecorder, id: PresenterID, base: String, expect content: String,
                                         file: StaticString = #filePath, line: UInt = #line) throws {
        let events = presenter.waitForEvents(1, settle: 0.8)
        let conflict = try conflict(of: events, file: file, line: line)
        let event = events[0]
        XCTAssertEqual(event.kind, .change, file: file, line: line)
        XCTAssertEqual(event.presenter, id, file: file, line: line)
        XCTAssertNotNil(event.before, file: file, line: line)
        XCTAssertNotNil(event.after, file: file, line: line)
        XCTAssertNotEqual(event.before, event.after, file: file, line: line)
        XCTAssertEqual(conflict.kind, .change, file: file, line: line)
        XCTAssertEqual(conflict.state, .open, file: file, line: line)
        XCTAssertEqual(try service.conflicts(of: id).map(\.id), [conflict.id], "one conflict", file: file, line: line)
        XCTAssertEqual(presenter.log.filter { $0 == "didChange" }.count, 1, "the coordinator's did change, once: \(presenter.log)", file: file, line: line)
        XCTAssertFalse(presenter.log.contains("accommodateDeletion"), "\(presenter.log)", file: file, line: line)
        XCTAssertEqual(backingText(presenter.path.string), content, file: file, line: line)
        let kept = try keptTexts(presenter.path.string)
        XCTAssertTrue(kept.contains(base), "the base is kept: \(kept)", file: file, line: line)
        // Merge needs that base: it is the conflict's (pinned).
        let baseVersion = try XCTUnwrap(conflict.baseVersion, "the conflict knows its base", file: file, line: line)
        XCTAssertEqual(String(decoding: try store.contents(of: baseVersion), as: UTF8.self), base, file: file, line: line)
        XCTAssertTrue(try store.version(baseVersion).isPinned, file: file, line: line)
    }

    func testSedInPlace() throws {
        try write("doc.txt", "alpha\n")
        let (p, id) = try presentDocument("doc.txt", unsaved: true)
        try sh("sed -i s/alpha/beta/ doc.txt")
        try assertConflictAfterSave(p, id: id, base: "alpha\n", expect: "beta\n")
    }

    func testSedInPlaceWithABackupSuffix() throws {
        try write("doc.txt", "alpha\n")
        let (p, id) = try presentDocument("doc.txt", unsaved: true)
        try sh("sed -i.orig s/alpha/beta/ doc.txt")
        try assertConflictAfterSave(p, id: id, base: "alpha\n", expect: "beta\n")
        XCTAssertFalse(p.log.contains { $0.hasPrefix("didMove") }, "\(p.log)")
    }

    func testInstall() throws {
        try write("doc.txt", "alpha\n")
        try "installed\n".write(toFile: root + "/new.txt", atomically: false, encoding: .utf8)
        let (p, id) = try presentDocument("doc.txt", unsaved: true)
        try sh("install -m 600 ../new.txt doc.txt")
        try assertConflictAfterSave(p, id: id, base: "alpha\n", expect: "installed\n")
    }

    /// A change of attributes only (mode, times, extended attributes and ACLs) is told as a change,
    /// never a content conflict: no underlying-file-changed event, no conflict, no version. (An
    /// extended attribute set or removed through the mount told nothing before, while the same
    /// change beside the mount was told.)
    func testChmodAndTouchAreAChangeOfAttributesNotOfContents() throws {
        try write("doc.txt", "alpha\n")
        let (p, id) = try presentDocument("doc.txt", unsaved: true)
        var commands = ["chmod 600 doc.txt", "touch doc.txt", "touch -m -d 2001-01-01 doc.txt", "chmod 644 doc.txt"]
        if have("setfattr") { commands += ["setfattr -n user.tag -v red doc.txt", "setfattr -x user.tag doc.txt"] }
        if have("setfacl") { commands += ["setfacl -m u:nobody:rw doc.txt", "setfacl -b doc.txt"] }
        for command in commands {
            let before = p.log.filter { $0 == "didChange" }.count
            try sh(command)
            let deadline = Date().addingTimeInterval(5)
            while p.log.filter({ $0 == "didChange" }).count == before && Date() < deadline { usleep(10_000) }
            XCTAssertEqual(p.log.filter { $0 == "didChange" }.count, before + 1, "`\(command)` is told once: \(p.log)")
        }
        XCTAssertEqual(p.waitForEvents(1, timeout: 0.5), [], "no content change: \(p.log)")
        XCTAssertEqual(p.log.filter { $0 == "didChange" }.count, commands.count, "each told once: \(p.log)")
        XCTAssertEqual(try service.conflicts(of: id).count, 0)
        XCTAssertEqual(backingText("doc.txt"), "alpha\n")
    }

    /// A folder holding a presented document moves: the store follows the document (its base, a
    /// later conflict, its versions by the new path), as when the document itself moves.
    func testMovingAnAncestorFolderKeepsTheDocument() throws {
        try FileManager.default.createDirectory(atPath: backing + "/sub/inner", withIntermediateDirectories: true)
        try write("sub/inner/doc.txt", "alpha\n")
        let (p, id) = try presentDocument("sub/inner/doc.txt", unsaved: true)
        try sh("mv sub sub2")
        let deadline = Date().addingTimeInterval(5)
        while !p.log.contains("didMove sub2/inner/doc.txt") && Date() < deadline { usleep(10_000) }
        XCTAssertTrue(p.log.contains("didMove sub2/inner/doc.txt"), "\(p.log)")
        try sh("printf 'theirs\\n' > sub2/inner/doc.txt")
        let events = p.waitForEvents(1, settle: 0.6)
        let conflict = try conflict(of: events)
        XCTAssertEqual(conflict.path, "sub2/inner/doc.txt")
        XCTAssertEqual(try service.conflicts(of: id).map(\.id), [conflict.id])
        XCTAssertTrue(try keptTexts("sub2/inner/doc.txt").contains("alpha\n"), "the base is kept under the new path")
        XCTAssertEqual(try keptTexts("sub/inner/doc.txt"), [])
    }

    /// A change made directly in the backing folder (not through the mount) over a presented
    /// document with unsaved changes is the same conflict as one made through the mount, at once and
    /// attributed to whoever made it. The old bytes could not be kept (nothing asked first): the
    /// conflict has no base version unless the store had kept one.
    func testAChangeMadeInTheBackingFolderIsTheSameConflict() throws {
        try write("doc.txt", "alpha\n")
        let (p, id) = try presentDocument("doc.txt", unsaved: true)
        let writer = try sh("printf 'theirs\\n' > doc.txt; echo $$", in: backing).output
        let events = p.waitForEvents(1, settle: 0.6)
        let conflict = try conflict(of: events)
        XCTAssertEqual(events.first?.kind, .change)
        XCTAssertEqual(conflict.kind, .change)
        XCTAssertEqual(conflict.state, .open)
        XCTAssertEqual(try service.conflicts(of: id).map(\.id), [conflict.id], "one conflict")
        XCTAssertEqual(p.log.filter { $0 == "didChange" }.count, 1, "\(p.log)")
        XCTAssertEqual(backingText("doc.txt"), "theirs\n")
        if let base = conflict.baseVersion {
            XCTAssertEqual(String(decoding: try store.contents(of: base), as: UTF8.self), "alpha\n")
        }
        // Nobody else is blamed for it later: a read and a close through the mount change nothing.
        _ = try sh("cat doc.txt")
        XCTAssertEqual(p.waitForEvents(2, timeout: 0.5).count, 1)
        let detected = try logged().filter { $0.kind == .conflictDetected }
        XCTAssertEqual(detected.count, 1)
        XCTAssertEqual(detected.first?.actor?.pid, Int32(writer.trimmingCharacters(in: .whitespacesAndNewlines)), "the writer: \(String(describing: detected.first))")
    }

    func testVimDefaultSettings() throws {
        try XCTSkipUnless(have("vim"), "vim is not installed (make test installs it)")
        try write("doc.txt", "alpha\n")
        let (p, id) = try presentDocument("doc.txt", unsaved: true)
        try sh("vim -u DEFAULTS -i NONE -es '+normal! Gobeta' '+wq' doc.txt")
        try assertConflictAfterSave(p, id: id, base: "alpha\n", expect: "alpha\nbeta\n")
    }

    func testVimBackupcopyYes() throws {
        try XCTSkipUnless(have("vim"), "vim is not installed (make test installs it)")
        try write("doc.txt", "alpha\n")
        let (p, id) = try presentDocument("doc.txt", unsaved: true)
        try sh("vim -u DEFAULTS -i NONE -es '+set backupcopy=yes' '+normal! Gobeta' '+wq' doc.txt")
        try assertConflictAfterSave(p, id: id, base: "alpha\n", expect: "alpha\nbeta\n")
        XCTAssertEqual(try store.versions(ofPath: "doc.txt").first?.method, store.inPlaceMethod, "in place: copied (ext4) or cloned")
    }

    func testRsync() throws {
        try XCTSkipUnless(have("rsync"), "rsync is not installed (make test installs it)")
        try write("doc.txt", "alpha\n")
        try "from rsync\n".write(toFile: root + "/src.txt", atomically: false, encoding: .utf8)
        let (p, id) = try presentDocument("doc.txt", unsaved: true)
        try sh("rsync ../src.txt doc.txt")
        try assertConflictAfterSave(p, id: id, base: "alpha\n", expect: "from rsync\n")
        XCTAssertEqual(try store.versions(ofPath: "doc.txt").first?.method, store.inPlaceMethod, "renamed over: the old file copied (ext4) or cloned, never linked")
    }

    func testCp() throws {
        try write("doc.txt", "alpha\n")
        try "copied\n".write(toFile: root + "/src.txt", atomically: false, encoding: .utf8)
        let (p, id) = try presentDocument("doc.txt", unsaved: true)
        try sh("cp ../src.txt doc.txt")
        try assertConflictAfterSave(p, id: id, base: "alpha\n", expect: "copied\n")
    }

    func testMvTempFileOver() throws {
        try write("doc.txt", "alpha\n")
        let (p, id) = try presentDocument("doc.txt", unsaved: true)
        try sh("printf 'moved\\n' > doc.txt.tmp && mv doc.txt.tmp doc.txt")
        try assertConflictAfterSave(p, id: id, base: "alpha\n", expect: "moved\n")
    }

    func testShellRedirect() throws {
        try write("doc.txt", "alpha\n")
        let (p, id) = try presentDocument("doc.txt", unsaved: true)
        try sh("echo redirected > doc.txt")
        try assertConflictAfterSave(p, id: id, base: "alpha\n", expect: "redirected\n")
    }

    func testPython() throws {
        try write("doc.txt", "alpha\n")
        let (p, id) = try presentDocument("doc.txt", unsaved: true)
        try sh("python3 -c \"open('doc.txt', 'w').write('python\\\\n')\"")
        try assertConflictAfterSave(p, id: id, base: "alpha\n", expect: "python\n")
    }

    func testGitCheckout() throws {
        try XCTSkipUnless(have("git"), "git is not installed (make test installs it)")
        try write("doc.txt", "committed\n")
        try sh("git init -q . && git -c user.name=t -c user.email=t@t add doc.txt && git -c user.name=t -c user.email=t@t commit -qm one")
        try sh("echo 'local edit' > doc.txt")
        let (p, id) = try presentDocument("doc.txt", unsaved: true)
        try sh("git checkout -- doc.txt")
        try assertConflictAfterSave(p, id: id, base: "local edit\n", expect: "committed\n")
    }

    func testLibreOfficeStyleTempPlusRename() throws {
        try write("doc.txt", "alpha\n")
        let (p, id) = try presentDocument("doc.txt", unsaved: true)
        try sh("""
        python3 -c "
        import os
        open('.~lock.doc.txt#', 'w').write('lock')
        with open('lu12345.tmp', 'w') as f: f.write('office\\\\n'); f.flush(); os.fsync(f.fileno())
        os.replace('lu12345.tmp', 'doc.txt')
        os.unlink('.~lock.doc.txt#')
        "
        """)
        try assertConflictAfterSave(p, id: id, base: "alpha\n", expect: "office\n")
    }

    func testEmacs() throws {
        try XCTSkipUnless(have("emacs"), "emacs is not installed (make test installs emacs-nox)")
        try write("doc.txt", "alpha\n")
        let (p, id) = try presentDocument("doc.txt", unsaved: true)
        try sh("emacs -Q --batch doc.txt --eval '(progn (goto-char (point-max)) (insert \"beta\\n\") (save-buffer))'")
        try assertConflictAfterSave(p, id: id, base: "alpha\n", expect: "alpha\nbeta\n")
    }

    /// Without unsaved changes the default action applies: reload (the base moves to the new
    /// file), no conflict; the old version is still kept.
    func testWithoutUnsavedChangesTheDefaultIsReload() throws {
        try write("doc.txt", "alpha\n")
        let (p, id) = try presentDocument("doc.txt")
        try sh("sed -i s/alpha/beta/ doc.txt")
        let events = p.waitForEvents(1, settle: 0.8)
        XCTAssertEqual(events.map(\.action), [.reload], "\(events)")
        XCTAssertEqual(try service.conflicts(of: id), [])
        XCTAssertTrue(try keptTexts("doc.txt").contains("alpha\n"))
        let info = try XCTUnwrap(try store.document(atPath: "doc.txt"))
        XCTAssertEqual(info.presenters.count, 1)
        XCTAssertEqual(info.identity, events.first?.after, "the base is the new file")
    }

    /// Several writes before the conflict is resolved stay one conflict (and each is one event).
    func testFurtherChangesFoldIntoTheOpenConflict() throws {
        try write("doc.txt", "alpha\n")
        let (p, id) = try presentDocument("doc.txt", unsaved: true)
        try sh("echo one > doc.txt")
        p.waitForEvents(1, settle: 0.2)
        try sh("echo two > doc.txt")
        let events = p.waitForEvents(2, settle: 0.6)
        XCTAssertEqual(events.count, 2, "one event per change: \(events)")
        XCTAssertEqual(Set(events.map(\.action)).count, 1, "the same conflict: \(events)")
        XCTAssertEqual(try service.conflicts(of: id).count, 1)
    }
}
