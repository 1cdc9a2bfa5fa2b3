import XCTest
import Foundation
@testable import CoordFS
import Coordination
import DocumentStore

/// Deletions (after the save window) and every resolution of a change and of a deletion, through
/// `StoreService`, on a real mount; the event-log records of each step.
final class StoreResolutionTests: StoreMountTestCase {
    /// A presented document changed underneath unsaved work ("alpha" → "theirs").
    private func changedConflict(unsaved: Bool = true, base: String = "alpha\nline 2\nline 3\n", theirs: String = "alpha\nline 2\nline 3 theirs\n") throws -> (DocumentRecorder, PresenterID, Conflict) {
        try write("doc.txt", base)
        let (p, id) = try presentDocument("doc.txt", unsaved: unsaved)
        try sh("printf '\(theirs.replacingOccurrences(of: "\n", with: "\\n"))' > doc.tmp && mv doc.tmp doc.txt")
        return (p, id, try conflict(of: p.waitForEvents(1, settle: 0.3)))
    }

    /// A presented document deleted (for good: after the save window) underneath unsaved work.
    private func deletedConflict() throws -> (DocumentRecorder, PresenterID, Conflict) {
        try write("doc.txt", "alpha\n")
        let (p, id) = try presentDocument("doc.txt", unsaved: true)
        try sh("rm doc.txt")
        let events = p.waitForEvents(1, timeout: 5, settle: 0.5)
        let conflict = try conflict(of: events)
        XCTAssertEqual(events.first?.kind, .deletion)
        XCTAssertNil(events.first?.after)
        XCTAssertEqual(conflict.kind, .deletion)
        return (p, id, conflict)
    }

    // MARK: Deletion

    func testDeletionWithoutUnsavedChangesCloses() throws {
        try write("doc.txt", "alpha\n")
        let (p, id) = try presentDocument("doc.txt")
        try sh("rm doc.txt")
        let events = p.waitForEvents(1, settle: 0.5)
        XCTAssertEqual(events.map(\.action), [.close], "\(events)")
        XCTAssertEqual(events.first?.kind, .deletion)
        XCTAssertEqual(try service.conflicts(of: id), [])
        XCTAssertEqual(try keptTexts("doc.txt"), ["alpha\n"], "the deleted file is kept (a copy or a clone)")
        XCTAssertEqual(try store.versions(ofPath: "doc.txt").first?.method, store.inPlaceMethod)
        XCTAssertEqual(try store.document(atPath: "doc.txt")?.presenters ?? [], [], "interest dropped")
    }

    func testDeletionWithUnsavedChangesIsAConflict() throws {
        let (p, _, conflict) = try deletedConflict()
        XCTAssertEqual(conflict.state, .open)
        XCTAssertTrue(p.log.contains("accommodateDeletion"), "\(p.log)")
        XCTAssertEqual(try keptTexts("doc.txt"), ["alpha\n"])
    }

    func testDeletionResolvedByClose() throws {
        let (_, id, conflict) = try deletedConflict()
        let outcome = try service.resolve(conflict.id, with: .close)
        XCTAssertEqual(outcome.conflict.resolution, .close)
        XCTAssertNil(backingText("doc.txt"), "stays deleted")
        XCTAssertEqual(try service.conflicts(of: id), [])
    }

    func testDeletionResolvedBySaveRestoresTheFile() throws {
        let (_, _, conflict) = try deletedConflict()
        try service.resolve(conflict.id, with: .save, mine: .bytes(Array("mine\n".utf8)))
        XCTAssertEqual(backingText("doc.txt"), "mine\n")
    }

    /// A save that writes a deleted document anew, and a restore that does, make a new item: its
    /// folder's presenters hear that it appeared, as for any create (not that it changed), and the
    /// log records an appearance; a restore over the file that is there is a change again.
    func testASaveOrRestoreThatReCreatesADeletedDocumentMakesItAppear() throws {
        try FileManager.default.createDirectory(atPath: backing + "/notes", withIntermediateDirectories: true)
        try write("notes/doc.txt", "alpha\n")
        let (p, _) = try presentDocument("notes/doc.txt", unsaved: true)
        let dir = try present("notes")
        try sh("rm notes/doc.txt")
        let conflict = try conflict(of: p.waitForEvents(1, timeout: 5, settle: 0.5))
        XCTAssertEqual(conflict.kind, .deletion)
        var seen = dir.waitUntil(timeout: 5, settle: 0.3) { $0.contains { $0.hasPrefix("accommodateSubitemDeletion") } }.count
        func toldSince() -> [String] {
            let log = dir.waitUntil(timeout: 5, settle: 0.5) { $0.dropFirst(seen).contains { $0.hasPrefix("subitemDid") } }
            defer { seen = log.count }
            return log.dropFirst(seen).filter { $0.hasPrefix("subitemDid") }
        }
        let outcome = try service.resolve(conflict.id, with: .save, mine: .bytes(Array("mine\n".utf8)))
        XCTAssertTrue(outcome.recreated)
        XCTAssertEqual(backingText("notes/doc.txt"), "mine\n")
        XCTAssertEqual(toldSince(), ["subitemDidAppear notes/doc.txt"], "the save re-created it: \(dir.log)")
        // Deleted again, then restored from the version kept at the deletion.
        let alpha = try XCTUnwrap(try store.versions(ofPath: "notes/doc.txt").first { v in
            (try? store.contents(of: v.id)).map { String(decoding: $0, as: UTF8.self) } == "alpha\n"
        })
        try sh("rm notes/doc.txt")
        _ = dir.waitUntil(timeout: 5, settle: 0.5) { $0.dropFirst(seen).contains { $0.hasPrefix("accommodateSubitemDeletion") } }
        seen = dir.log.count
        let restored = try service.restore(alpha.id)
        XCTAssertTrue(restored.recreated)
        XCTAssertEqual(backingText("notes/doc.txt"), "alpha\n")
        XCTAssertEqual(toldSince(), ["subitemDidAppear notes/doc.txt"], "the restore re-created it: \(dir.log)")
        // Over the file that is there: a change.
        let again = try service.restore(alpha.id)
        XCTAssertFalse(again.recreated)
        XCTAssertEqual(toldSince(), ["subitemDidChange notes/doc.txt"], "\(dir.log)")
        XCTAssertEqual(dir.waitUntil(timeout: 0, settle: 0.5) { _ in true }.filter { $0.hasPrefix("subitemDid") },
                       ["subitemDidChange notes/doc.txt", "subitemDidAppear notes/doc.txt", "subitemDidChange notes/doc.txt",
                        "subitemDidAppear notes/doc.txt", "subitemDidChange notes/doc.txt"],
                       "one message per write (each deletion: subitemDidDelete, which a presenter hears as a change by default)")
        let kinds = try logged().filter { $0.path == "/notes/doc.txt" }.map(\.kind)
        XCTAssertEqual(kinds.filter { $0 == .subitemAppeared }.count, 2, "\(kinds)")
    }

    /// A resolution the store refuses (a merge of binary contents, a save without contents, a merge
    /// of a deletion) fails before its write is asked for: the document's other presenter and its
    /// folder's presenter are asked nothing and told nothing, and the log has no access for it.
    func testARefusedResolutionAsksNoOne() throws {
        try FileManager.default.createDirectory(atPath: backing + "/notes", withIntermediateDirectories: true)
        try write("notes/doc.txt", "alpha\n")
        let (p, id) = try presentDocument("notes/doc.txt", unsaved: true)
        let other = try present("notes/doc.txt")
        let dir = try present("notes")
        try sh("echo theirs > notes/doc.txt")
        let changed = try conflict(of: p.waitForEvents(1, settle: 0.3))
        _ = other.waitUntil(timeout: 5, settle: 0.5) { $0.contains("didChange") }
        func refused(_ conflict: Conflict, _ resolution: Resolution, mine: Contents?, _ expected: DocumentStoreError) throws {
            let (otherBefore, dirBefore, recordsBefore) = (other.log.count, dir.log.count, try logged().count)
            XCTAssertThrowsError(try service.resolve(conflict.id, with: resolution, mine: mine)) { error in
                XCTAssertEqual(error as? DocumentStoreError, expected)
            }
            usleep(300_000)
            XCTAssertEqual(Array(other.log.dropFirst(otherBefore)), [], "\(resolution) refused: the document's presenter is asked nothing")
            XCTAssertEqual(Array(dir.log.dropFirst(dirBefore)), [], "\(resolution) refused: the folder's presenter is asked nothing")
            let kinds = try logged().dropFirst(recordsBefore).map(\.kind)
            XCTAssertFalse(kinds.contains(.intentRequested) || kinds.contains(.presenterAsked) || kinds.contains(.granted), "\(kinds)")
            XCTAssertEqual(try service.conflicts(of: id).map(\.id), [conflict.id], "still open")
        }
        try refused(changed, .merge, mine: .bytes([0x61, 0, 0x62]), .binaryContents("notes/doc.txt"))
        try refused(changed, .save, mine: nil, .missingContents("save"))
        XCTAssertEqual(backingText("notes/doc.txt"), "theirs\n")
        try service.resolve(changed.id, with: .reload)
        try service.setUnsavedChanges(id, true)
        let eventsBefore = p.events.count
        try sh("rm notes/doc.txt")
        let deleted = try conflict(of: Array(p.waitForEvents(eventsBefore + 1, timeout: 5, settle: 0.5).dropFirst(eventsBefore)))
        XCTAssertEqual(deleted.kind, .deletion)
        _ = other.waitUntil(timeout: 5, settle: 0.5) { $0.contains("accommodateDeletion") }
        _ = dir.waitUntil(timeout: 5, settle: 0.5) { $0.contains { $0.hasPrefix("accommodateSubitemDeletion") } }
        try refused(deleted, .merge, mine: .bytes(Array("x\n".utf8)), .resolutionNotApplicableToDeletion("merge"))
        XCTAssertNil(backingText("notes/doc.txt"))
    }

    func testDeletionRefusesReloadAndMergeAndChangesNothing() throws {
        let (_, id, conflict) = try deletedConflict()
        XCTAssertThrowsError(try service.resolve(conflict.id, with: .reload)) { error in
            XCTAssertEqual(error as? DocumentStoreError, .resolutionNotApplicableToDeletion("reload"))
            XCTAssertTrue("\(error)".contains("deleted"), "\(error)")
        }
        XCTAssertThrowsError(try service.resolve(conflict.id, with: .merge, mine: .bytes(Array("x\n".utf8))))
        XCTAssertEqual(try service.conflicts(of: id).map(\.id), [conflict.id], "still open")
        XCTAssertNil(backingText("doc.txt"))
    }

    func testDeletionResolvedByKeepBoth() throws {
        let (_, _, conflict) = try deletedConflict()
        let outcome = try service.resolve(conflict.id, with: .keepBoth, mine: .bytes(Array("mine\n".utf8)))
        let copy = try XCTUnwrap(outcome.writtenPath)
        XCTAssertTrue(copy.hasPrefix("doc (conflict "), copy)
        XCTAssertEqual(backingText(copy), "mine\n")
        XCTAssertNil(backingText("doc.txt"))
    }

    // MARK: Change

    func testChangeResolvedByClose() throws {
        let (_, id, conflict) = try changedConflict()
        try service.resolve(conflict.id, with: .close)
        XCTAssertEqual(backingText("doc.txt"), "alpha\nline 2\nline 3 theirs\n", "untouched")
        XCTAssertEqual(try store.document(atPath: "doc.txt")?.presenters.map(\.presenter) ?? [], [], "interest dropped")
        XCTAssertEqual(try service.conflicts(of: id), [])
    }

    func testChangeResolvedByReload() throws {
        let (_, _, conflict) = try changedConflict()
        let outcome = try service.resolve(conflict.id, with: .reload)
        XCTAssertEqual(outcome.conflict.resolution, .reload)
        let interest = try XCTUnwrap(try store.document(atPath: "doc.txt")?.presenters.first)
        XCTAssertFalse(interest.hasUnsavedChanges)
        XCTAssertEqual(backingText("doc.txt"), "alpha\nline 2\nline 3 theirs\n")
    }

    func testChangeResolvedBySaveKeepsTheirsAndTellsTheOtherPresenters() throws {
        try write("doc.txt", "alpha\n")
        let (_, id) = try presentDocument("doc.txt", unsaved: true)
        let (other, _) = try presentDocument("doc.txt")
        try sh("echo theirs > doc.txt")
        _ = other.waitForEvents(1, settle: 0.2)
        let conflict = try XCTUnwrap(try service.conflicts(of: id).first)
        let outcome = try service.resolve(conflict.id, with: .save, mine: .bytes(Array("mine\n".utf8)))
        XCTAssertEqual(backingText("doc.txt"), "mine\n")
        let preserved = try XCTUnwrap(outcome.preserved)
        XCTAssertEqual(String(decoding: try store.contents(of: preserved.version.id), as: UTF8.self), "theirs\n", "theirs is kept: undoable")
        let events = other.waitForEvents(2, settle: 0.5)
        XCTAssertEqual(events.map(\.action), [.reload, .reload], "the other presenter hears both writes: \(events)")
        XCTAssertEqual(other.log.filter { $0 == "didChange" }.count, 2, "\(other.log)")
    }

    /// What the daemon's store writes (a resolution, a restore) shows through the mount at once:
    /// the kernel's cached name and attributes of the document are dropped. The backing watcher skips
    /// the daemon's own changes, so without that the mount served the replaced file until the entry
    /// timeout.
    func testWhatTheStoreWritesShowsThroughTheMountAtOnce() throws {
        let (_, _, conflict) = try changedConflict()
        // The kernel has the document's name and attributes cached now.
        XCTAssertEqual(try read("doc.txt"), "alpha\nline 2\nline 3 theirs\n")
        try service.resolve(conflict.id, with: .save, mine: .bytes(Array("mine\n".utf8)))
        XCTAssertEqual(try read("doc.txt"), "mine\n", "the mount still shows the replaced file after a resolution")
        var st = stat()
        XCTAssertEqual(stat(mnt + "/doc.txt", &st), 0)
        XCTAssertEqual(st.st_size, 5, "the mount still has the replaced file's size")
        // A restore of the version the resolution kept.
        let kept = try XCTUnwrap(try store.versions(ofPath: "doc.txt").first { v in
            (try? store.contents(of: v.id)).map { String(decoding: $0, as: UTF8.self) } == "alpha\nline 2\nline 3 theirs\n"
        })
        try service.restore(kept.id)
        XCTAssertEqual(try read("doc.txt"), "alpha\nline 2\nline 3 theirs\n", "the mount still shows the file a restore replaced")
    }

    /// A restore another process asked for (the control socket's `restore`, `coordfs restore`) is
    /// that process's write in the log: its coordinated write and the version kept first name it,
    /// not the daemon.
    func testARestoreIsLoggedAsTheRequestersAccess() throws {
        let (_, _, conflict) = try changedConflict()
        try service.resolve(conflict.id, with: .save, mine: .bytes(Array("mine\n".utf8)))
        let kept = try XCTUnwrap(try store.versions(ofPath: "doc.txt").first)
        let requester = AccessOrigin(pid: 4242, uid: 1234, gid: 1234, executable: "/usr/bin/restorer")
        let before = try daemon.storeLogRecords().count
        try service.restore(kept.id, requestedBy: requester)
        let records = try daemon.storeLogRecords().dropFirst(before).filter { $0.path == "/doc.txt" }
        XCTAssertTrue(records.contains { $0.kind == "snapshotTaken" && $0.actorPID == 4242 }, "\(records)")
        let granted = records.filter { $0.kind == "granted" }
        XCTAssertFalse(granted.isEmpty, "\(records.map(\.kind))")
        for record in granted {
            XCTAssertEqual(record.actorPID, 4242)
            XCTAssertEqual(record.actorUID, 1234)
            XCTAssertEqual(record.actorExecutable, "/usr/bin/restorer")
        }
    }

    func testChangeResolvedByKeepBoth() throws {
        let (_, _, conflict) = try changedConflict()
        let outcome = try service.resolve(conflict.id, with: .keepBoth, mine: .bytes(Array("mine\n".utf8)))
        let copy = try XCTUnwrap(outcome.writtenPath)
        XCTAssertEqual(backingText(copy), "mine\n")
        XCTAssertEqual(backingText("doc.txt"), "alpha\nline 2\nline 3 theirs\n")
        XCTAssertEqual(try store.conflict(conflict.id).conflictCopyPath, copy)
    }

    func testChangeResolvedByCleanMerge() throws {
        let (_, _, conflict) = try changedConflict()
        let outcome = try service.resolve(conflict.id, with: .merge, mine: .bytes(Array("alpha mine\nline 2\nline 3\n".utf8)))
        XCTAssertEqual(outcome.mergeConflicts, 0)
        XCTAssertEqual(backingText("doc.txt"), "alpha mine\nline 2\nline 3 theirs\n")
    }

    func testChangeResolvedByOverlappingMergeMarksTheHunk() throws {
        let (_, _, conflict) = try changedConflict()
        let outcome = try service.resolve(conflict.id, with: .merge, mine: .bytes(Array("alpha\nline 2\nline 3 mine\n".utf8)))
        XCTAssertEqual(outcome.mergeConflicts, 1)
        let merged = try XCTUnwrap(backingText("doc.txt"))
        XCTAssertTrue(merged.contains("<<<<<<< mine\nline 3 mine\n=======\nline 3 theirs\n>>>>>>> theirs\n"), merged)
    }

    func testMergeRefusesBinaryAndChangesNothing() throws {
        let (_, id, conflict) = try changedConflict()
        XCTAssertThrowsError(try service.resolve(conflict.id, with: .merge, mine: .bytes([0x61, 0, 0x62]))) { error in
            XCTAssertEqual(error as? DocumentStoreError, .binaryContents("doc.txt"))
        }
        XCTAssertEqual(try service.conflicts(of: id).count, 1)
        XCTAssertEqual(backingText("doc.txt"), "alpha\nline 2\nline 3 theirs\n")
    }

    // MARK: Options, retention, the event log

    func testDefaultActionsAreConfigurable() throws {
        var options = StoreOptions()
        XCTAssertTrue(try options.parse("on_change", "ask", item: "on_change=ask"))
        XCTAssertFalse(try options.parse("ask_timeout", "1", item: "ask_timeout=1"), "not a store option")
        XCTAssertThrowsError(try options.parse("on_delete", "maybe", item: "on_delete=maybe"))
        XCTAssertEqual(try StoreOptions.parse(["on_change=ask,keep_versions=3", "on_delete=ask"]).defaultActions, DefaultActions(whenChanged: nil, whenDeleted: nil))
        try service.reconfigure(options)
        try write("doc.txt", "alpha\n")
        let (p, id) = try presentDocument("doc.txt")
        try sh("echo theirs > doc.txt")
        _ = try conflict(of: p.waitForEvents(1, settle: 0.3))
        XCTAssertEqual(try service.conflicts(of: id).count, 1, "asked even without unsaved changes")
    }

    func testLettingGoReleasesTheBaseToRetention() throws {
        try write("doc.txt", "alpha\n")
        let (p, _) = try presentDocument("doc.txt")
        // An open for writing keeps the base (a copy on ext4, a clone on XFS) even if nothing is
        // written: the version is pinned while the presenter holds it.
        try sh("python3 -c \"open('doc.txt', 'r+').close()\"")
        let deadline = Date().addingTimeInterval(3)
        while try store.versions(ofPath: "doc.txt").isEmpty && Date() < deadline { usleep(10_000) }
        XCTAssertEqual(try store.versions(ofPath: "doc.txt").map(\.isPinned), [true], "the base is kept and pinned")
        daemon.removeDocumentPresenter(p)
        XCTAssertNil(coordinator.presenterID(of: p))
        XCTAssertEqual(try store.versions(ofPath: "doc.txt").map(\.isPinned), [false], "released once it let go")
        var tight = StoreOptions()
        tight.retention = Retention(maxVersionsPerDocument: 0, maxTotalBytes: 0)
        try service.reconfigure(tight)
        try store.collectGarbage()
        XCTAssertEqual(try store.versions(ofPath: "doc.txt"), [], "collected")
        XCTAssertNil(try store.document(atPath: "doc.txt"), "forgotten")
    }

    func testEventLogRecordsSnapshotConflictAndResolution() throws {
        let (_, _, conflict) = try changedConflict()
        try service.resolve(conflict.id, with: .save, mine: .bytes(Array("mine\n".utf8)))
        let records = try daemon.storeLogRecords().filter { $0.path == "/doc.txt" }
        let snapshot = try XCTUnwrap(records.first { $0.kind == "snapshotTaken" }, "\(records.map(\.kind))")
        XCTAssertEqual(snapshot.snapshotMethod, store.inPlaceMethod.rawValue)
        XCTAssertEqual(snapshot.bytes, UInt64("alpha\nline 2\nline 3\n".utf8.count))
        XCTAssertNotNil(snapshot.versionID)
        XCTAssertNotNil(snapshot.documentID)
        let detected = try XCTUnwrap(records.first { $0.kind == "conflictDetected" })
        XCTAssertEqual(detected.reason, "change")
        XCTAssertEqual(detected.documentID, snapshot.documentID, "one stable document id")
        let resolved = try XCTUnwrap(records.first { $0.kind == "conflictResolved" })
        XCTAssertEqual(resolved.resolution, "save")
        XCTAssertEqual(records.filter { $0.kind == "conflictDetected" }.count, 1)
    }

    func testObserversGetEveryEventInOrder() throws {
        let seen = ObservedEvents()
        service.addObserver { seen.append($0) }
        try write("doc.txt", "alpha\n")
        let (p, id) = try presentDocument("doc.txt", unsaved: true)
        try sh("echo one > doc.txt")
        try sh("rm doc.txt")
        p.waitForEvents(2, settle: 0.3)
        // Observers are called on a queue of their own, not with the presenter's events: under load
        // they may come after the presenter heard both.
        let deadline = Date().addingTimeInterval(20)
        while seen.all.count < 2 && Date() < deadline { usleep(10_000) }
        usleep(300_000) // and nothing more after them
        XCTAssertEqual(seen.all.map(\.kind), [.change, .deletion])
        XCTAssertEqual(seen.all.map(\.presenter), [id, id])
    }
}

final class ObservedEvents: @unchecked Sendable {
    private let lock = NSLock()
    private var events: [DocumentChangeEvent] = []
    func append(_ e: DocumentChangeEvent) { lock.lock(); events.append(e); lock.unlock() }
    var all: [DocumentChangeEvent] { lock.lock(); defer { lock.unlock() }; return events }
}
