import Foundation
import Glibc
import XCTest
@testable import DocumentStore
import GRDB

/// The behaviour every backing filesystem must show; run on the machine's own disk and on XFS
/// with reflink (see StoreOnDiskTests and StoreOnReflinkTests).
struct Scenarios {
    /// Makes a fresh fixture on the filesystem under test.
    let make: (StoreConfiguration) throws -> Fixture
    /// Whether that filesystem clones (decides the expected methods).
    let expectsReflink: Bool

    let alice = StorePresenterID("alice")
    let bob = StorePresenterID("bob")

    func fixture(_ configuration: StoreConfiguration = StoreConfiguration()) throws -> Fixture { try make(configuration) }

    /// Registers alice on doc.txt, marks her dirty, changes the file in place through the
    /// preserve-then-change protocol, and returns the conflict.
    func changedUnderUnsaved(_ f: Fixture, base: String = "one\ntwo\nthree\n", theirs: String = "one\ntwo\nTHREE\n") throws -> Conflict {
        try f.write("doc.txt", base)
        try f.store.register(alice, path: "doc.txt")
        try f.store.setUnsavedChanges(alice, path: "doc.txt", true)
        let before = try f.identity("doc.txt")
        try f.store.preserveBeforeInPlaceWrite("doc.txt")
        try f.writeInPlace("doc.txt", theirs)
        let event = try XCTUnwrap(f.store.noteExternalChange("doc.txt", .changed(before: before, after: nil)))
        XCTAssertEqual(event.kind, .change)
        XCTAssertEqual(event.before, before)
        XCTAssertEqual(event.after, try f.identity("doc.txt"))
        XCTAssertEqual(event.outcomes.count, 1)
        guard case let .conflict(conflict) = event.outcomes[0].action else { XCTFail("expected a conflict"); throw CancellationError() }
        XCTAssertEqual(conflict.kind, .change)
        XCTAssertEqual(conflict.state, .open)
        XCTAssertNotNil(conflict.baseVersion, "base kept before the in-place write")
        return conflict
    }

    func deletedUnderUnsaved(_ f: Fixture) throws -> Conflict {
        try f.write("doc.txt", "kept\n")
        try f.store.register(alice, path: "doc.txt")
        try f.store.setUnsavedChanges(alice, path: "doc.txt", true)
        let snapshot = try XCTUnwrap(f.store.preserveBeforeDelete("doc.txt"))
        XCTAssertEqual(unlink(f.path("doc.txt")), 0)
        let event = try XCTUnwrap(f.store.noteExternalChange("doc.txt", .deleted(before: nil)))
        XCTAssertEqual(event.kind, .deletion)
        XCTAssertNil(event.after)
        guard case let .conflict(conflict) = event.outcomes.first?.action else { XCTFail("expected a conflict"); throw CancellationError() }
        XCTAssertEqual(conflict.kind, .deletion)
        XCTAssertEqual(try f.text(snapshot.version.id), "kept\n")
        return conflict
    }

    // MARK: Snapshot methods

    func snapshotMethods() throws {
        let f = try fixture()
        XCTAssertEqual(f.store.cloneSupported, expectsReflink, "filesystem \(f.store.filesystemName)")
        let inPlace: SnapshotMethod = expectsReflink ? .reflink : .copy

        // Rename over: the old file's bytes are kept in an inode of their own (never a link).
        try f.write("a.txt", "old a\n")
        try f.store.register(alice, path: "a.txt")
        let oldInode = try XCTUnwrap(f.identity("a.txt")).inode
        let replaced = try XCTUnwrap(f.store.preserveBeforeReplace("a.txt"))
        try f.replace("a.txt", "new a\n")
        XCTAssertEqual(replaced.version.method, inPlace)
        if expectsReflink {
            // The base was cloned at register and holds exactly these bytes: nothing more to do.
            XCTAssertTrue(replaced.reused)
            XCTAssertEqual(replaced.version.reason, .base)
        } else {
            XCTAssertFalse(replaced.reused)
            XCTAssertEqual(replaced.version.reason, .replaced)
        }
        let kept = try FileIdentity.of(absolutePath: f.store.storedFile(of: replaced.version.id))
        XCTAssertNotEqual(kept?.inode, oldInode, "the kept version is no other name of the old inode")
        XCTAssertEqual(try f.text(replaced.version.id), "old a\n")

        // Deletion: a clone or copy again.
        try f.write("b.txt", "old b\n")
        try f.store.register(bob, path: "b.txt")
        let deleted = try XCTUnwrap(f.store.preserveBeforeDelete("b.txt"))
        XCTAssertEqual(deleted.version.method, inPlace)
        XCTAssertEqual(deleted.version.reason, expectsReflink ? .base : .deleted)
        XCTAssertEqual(unlink(f.path("b.txt")), 0)
        XCTAssertEqual(try f.text(deleted.version.id), "old b\n")

        // In-place writes to a presented document: once per base.
        try f.write("c.txt", "c0\n")
        try f.store.register(alice, path: "c.txt")
        let first = try f.store.preserveBeforeInPlaceWrite("c.txt")
        if expectsReflink {
            XCTAssertNil(first, "base already cloned at register: the write pays nothing")
            let base = try XCTUnwrap(f.store.versions(ofPath: "c.txt").first)
            XCTAssertEqual(base.method, .reflink)
            XCTAssertEqual(base.reason, .base)
        } else {
            XCTAssertEqual(first?.version.method, .copy)
            XCTAssertEqual(first?.version.reason, .beforeWrite)
        }
        try f.writeInPlace("c.txt", "c1\n")
        XCTAssertNil(try f.store.preserveBeforeInPlaceWrite("c.txt"), "later writes to the same base pay nothing")
        try f.writeInPlace("c.txt", "c2\n")
        XCTAssertEqual(try f.store.versions(ofPath: "c.txt").count, 1)
        XCTAssertEqual(try f.text(f.store.versions(ofPath: "c.txt")[0].id), "c0\n")
        // After the presenter reloads, the next write captures the new base.
        try f.store.rebase(alice, path: "c.txt")
        let second = try f.store.preserveBeforeInPlaceWrite("c.txt")
        if !expectsReflink { XCTAssertEqual(second?.version.method, .copy) }
        XCTAssertEqual(try f.store.versions(ofPath: "c.txt").count, 2)
        XCTAssertEqual(try f.text(f.store.versions(ofPath: "c.txt")[0].id), "c2\n")

        // Unpresented files: in-place writes are kept only where that is free.
        try f.write("d.txt", "d0\n")
        let unpresented = try f.store.preserveBeforeInPlaceWrite("d.txt")
        XCTAssertEqual(unpresented?.version.method, expectsReflink ? inPlace : nil)
        let always = try fixture(StoreConfiguration(unpresentedFiles: .always))
        try always.write("d.txt", "d0\n")
        XCTAssertEqual(try always.store.preserveBeforeInPlaceWrite("d.txt")?.version.method, inPlace)
        let never = try fixture(StoreConfiguration(unpresentedFiles: .never))
        try never.write("d.txt", "d0\n")
        XCTAssertNil(try never.store.preserveBeforeReplace("d.txt"))
        XCTAssertNil(try never.store.preserveBeforeInPlaceWrite("d.txt"))
        // Replaced and deleted unpresented files: kept (cloned or copied) unless `.never`.
        try f.write("e.txt", "e0\n")
        XCTAssertEqual(try f.store.preserveBeforeReplace("e.txt")?.version.method, inPlace)
        XCTAssertEqual(try always.store.preserveBeforeDelete("d.txt")?.version.method, inPlace)
    }

    /// The version kept before a replace, a deletion or a backup rename must not change when the
    /// old inode lives on and is written: renamed to a backup name and written in place, written
    /// through an open descriptor after the unlink, or the replace never happened and the file is
    /// written in place behind the store's back (another program in the backing folder).
    func keptVersionsShareNoInodeWithLiveFiles() throws {
        let f = try fixture(StoreConfiguration(eagerBaseWhenCloneable: false))
        // Backup rename (doc -> doc~), then the backup is written in place.
        try f.write("a.txt", "original a\n")
        try f.store.register(alice, path: "a.txt")
        let backedUp = try XCTUnwrap(f.store.preserveBeforeReplace("a.txt"))
        XCTAssertEqual(rename(f.path("a.txt"), f.path("a.txt~")), 0)
        try f.write("a.txt", "new a\n")
        try f.writeInPlace("a.txt~", "scribbled over the backup\n")
        XCTAssertEqual(try f.text(backedUp.version.id), "original a\n")
        XCTAssertEqual(try f.store.document(atPath: "a.txt")?.presenters.first?.base, .kept(backedUp.version.id))

        // Deleted while another process holds it open for writing.
        try f.write("b.txt", "original b\n")
        try f.store.register(alice, path: "b.txt")
        let fd = open(f.path("b.txt"), O_WRONLY)
        XCTAssertGreaterThanOrEqual(fd, 0)
        defer { close(fd) }
        let deleted = try XCTUnwrap(f.store.preserveBeforeDelete("b.txt"))
        XCTAssertEqual(unlink(f.path("b.txt")), 0)
        XCTAssertEqual(ftruncate(fd, 0), 0)
        XCTAssertEqual(pwrite(fd, "late\n", 5, 0), 5)
        XCTAssertEqual(try f.text(deleted.version.id), "original b\n")

        // The announced replace never happened; the file is then truncated and written in place
        // without the store being asked first.
        try f.write("c.txt", "original c\n")
        try f.store.register(alice, path: "c.txt")
        let announced = try XCTUnwrap(f.store.preserveBeforeReplace("c.txt"))
        try f.writeInPlace("c.txt", "written behind the store's back\n")
        XCTAssertEqual(try f.text(announced.version.id), "original c\n")

        for version in [backedUp, deleted, announced] {
            XCTAssertNotEqual(version.version.method, .link)
            var st = stat()
            XCTAssertEqual(lstat(try f.store.storedFile(of: version.version.id), &st), 0)
            XCTAssertEqual(st.st_nlink, 1, "the kept file has no other name")
        }
    }

    /// A store written by an older build holds `link` versions (other names of documents' inodes);
    /// opening it gives each its own bytes, so a write to the live file no longer reaches them.
    func linkVersionsOfOlderStoresAreDetachedAtOpen() throws {
        let f = try fixture(StoreConfiguration(eagerBaseWhenCloneable: false))
        try f.write("doc.txt", "kept\n")
        let snapshot = try XCTUnwrap(f.store.preserveBeforeReplace("doc.txt"))
        // What an older build left: the stored name a hard link to the live file.
        let stored = try f.store.storedFile(of: snapshot.version.id)
        XCTAssertEqual(unlink(stored), 0)
        XCTAssertEqual(link(f.path("doc.txt"), stored), 0)
        try f.store.database.write { db in
            try db.execute(sql: "UPDATE version SET method = 'link' WHERE id = ?", arguments: [snapshot.version.id.rawValue])
        }
        try f.reopen()
        let version = try XCTUnwrap(f.store.versions(ofPath: "doc.txt").first)
        XCTAssertEqual(version.method, expectsReflink ? .reflink : .copy)
        try f.writeInPlace("doc.txt", "changed\n")
        XCTAssertEqual(try f.text(version.id), "kept\n")
        var st = stat()
        XCTAssertEqual(lstat(stored, &st), 0)
        XCTAssertEqual(st.st_nlink, 1)
    }

    /// Lazy base: captured (a copy, or a clone) when the next mutation is a rename over.
    func lazyBaseCapturedBeforeARename() throws {
        let f = try fixture(StoreConfiguration(eagerBaseWhenCloneable: false))
        try f.write("doc.txt", "base\n")
        let registration = try f.store.register(alice, path: "doc.txt")
        guard case .pending = registration.base else { return XCTFail("expected a pending base, got \(registration.base)") }
        let snapshot = try XCTUnwrap(f.store.preserveBeforeReplace("doc.txt"))
        try f.replace("doc.txt", "theirs\n")
        XCTAssertEqual(snapshot.version.method, expectsReflink ? .reflink : .copy)
        XCTAssertEqual(try f.store.document(atPath: "doc.txt")?.presenters.first?.base, .kept(snapshot.version.id))
        XCTAssertTrue(try XCTUnwrap(f.store.versions(ofPath: "doc.txt").first).isPinned)
    }

    /// A change the store never saw beforehand loses a pending base; merge then says why.
    func baseLostOutsideTheStore() throws {
        let f = try fixture(StoreConfiguration(eagerBaseWhenCloneable: false))
        try f.write("doc.txt", "base\n")
        try f.store.register(alice, path: "doc.txt")
        try f.store.setUnsavedChanges(alice, path: "doc.txt", true)
        try f.writeInPlace("doc.txt", "behind the store's back\n")
        let event = try XCTUnwrap(f.store.noteExternalChange("doc.txt", .changed(before: nil, after: nil)))
        guard case let .conflict(conflict) = event.outcomes.first?.action else { return XCTFail("expected a conflict") }
        XCTAssertNil(conflict.baseVersion)
        XCTAssertEqual(try f.store.document(atPath: "doc.txt")?.presenters.first?.base, .lost)
        XCTAssertThrowsError(try f.store.resolve(conflict.id, with: .merge, mine: .bytes(Array("mine\n".utf8)), by: "test")) {
            XCTAssertEqual($0 as? DocumentStoreError, .baseUnavailable(path: "doc.txt"))
        }
        XCTAssertEqual(try f.store.conflict(conflict.id).state, .open)
    }

    // MARK: Default actions

    func defaultActions() throws {
        let f = try fixture()
        try f.write("doc.txt", "v1\n")
        try f.store.register(alice, path: "doc.txt")
        try f.store.register(bob, path: "doc.txt")
        // Change without unsaved changes: reload for everybody except the writer.
        try f.store.preserveBeforeReplace("doc.txt")
        try f.replace("doc.txt", "v2\n")
        let event = try XCTUnwrap(f.store.noteExternalChange("doc.txt", .replaced(before: nil, after: nil), by: bob))
        XCTAssertEqual(event.outcomes, [PresenterOutcome(presenter: alice, action: .applied(.reload))])
        XCTAssertEqual(try f.store.conflicts(), [])
        let info = try XCTUnwrap(f.store.document(atPath: "doc.txt"))
        XCTAssertEqual(info.identity, try f.identity("doc.txt"))
        // Deletion without unsaved changes: close.
        try f.store.preserveBeforeDelete("doc.txt")
        XCTAssertEqual(unlink(f.path("doc.txt")), 0)
        let deletion = try XCTUnwrap(f.store.noteExternalChange("doc.txt", .deleted(before: nil)))
        XCTAssertEqual(Set(deletion.outcomes.map(\.presenter)), [alice, bob])
        XCTAssertTrue(deletion.outcomes.allSatisfy { $0.action == .applied(.close) })
        XCTAssertEqual(try f.store.document(atPath: "doc.txt")?.presenters, [])
        // Configurable: ask instead.
        let asking = try fixture(StoreConfiguration(defaultActions: DefaultActions(whenChanged: nil, whenDeleted: nil)))
        try asking.write("doc.txt", "v1\n")
        try asking.store.register(alice, path: "doc.txt")
        try asking.store.preserveBeforeInPlaceWrite("doc.txt")
        try asking.writeInPlace("doc.txt", "v2\n")
        let asked = try XCTUnwrap(asking.store.noteExternalChange("doc.txt", .changed(before: nil, after: nil)))
        guard case .conflict = asked.outcomes.first?.action else { return XCTFail("expected a conflict") }
    }

    /// Several changes before a resolution: one open conflict, updated; the writer never hears.
    func oneConflictPerPresenter() throws {
        let f = try fixture()
        let conflict = try changedUnderUnsaved(f)
        try f.store.preserveBeforeReplace("doc.txt")
        try f.replace("doc.txt", "again\n")
        let event = try XCTUnwrap(f.store.noteExternalChange("doc.txt", .replaced(before: nil, after: nil)))
        guard case let .conflict(again) = event.outcomes.first?.action else { return XCTFail("expected a conflict") }
        XCTAssertEqual(again.id, conflict.id)
        XCTAssertEqual(again.after, try f.identity("doc.txt"))
        XCTAssertEqual(try f.store.conflicts().count, 1)
        XCTAssertEqual(try f.store.noteExternalChange("doc.txt", .changed(before: nil, after: nil), by: alice)?.outcomes, [])
        XCTAssertNil(try f.store.noteExternalChange("nobody-presents.txt", .deleted(before: nil)))
    }

    // MARK: Resolutions of a change

    func changeSave() throws {
        let f = try fixture()
        let conflict = try changedUnderUnsaved(f)
        let theirsIdentity = try f.identity("doc.txt")
        try f.store.register(bob, path: "doc.txt")
        let outcome = try f.store.resolve(conflict.id, with: .save, mine: .bytes(Array("mine\n".utf8)), by: "alice")
        XCTAssertEqual(try f.read("doc.txt"), "mine\n")
        XCTAssertEqual(outcome.conflict.state, .resolved)
        XCTAssertEqual(outcome.conflict.resolution, .save)
        XCTAssertEqual(outcome.conflict.resolvedBy, "alice")
        XCTAssertEqual(outcome.preserved?.version.source, theirsIdentity)
        XCTAssertEqual(try f.text(XCTUnwrap(outcome.preserved).version.id), "one\ntwo\nTHREE\n", "theirs kept: undoable")
        XCTAssertEqual(outcome.othersNotified?.outcomes, [PresenterOutcome(presenter: bob, action: .applied(.reload))])
        let alicesInterest = try XCTUnwrap(f.store.document(atPath: "doc.txt")?.presenters.first { $0.presenter == alice })
        XCTAssertFalse(alicesInterest.hasUnsavedChanges)
        XCTAssertThrowsError(try f.store.resolve(conflict.id, with: .reload, by: "alice")) {
            XCTAssertEqual($0 as? DocumentStoreError, .conflictAlreadyResolved(conflict.id.rawValue, resolution: "save"))
        }
    }

    func changeReload() throws {
        let f = try fixture()
        let conflict = try changedUnderUnsaved(f)
        let outcome = try f.store.resolve(conflict.id, with: .reload, by: "alice")
        XCTAssertEqual(outcome.conflict.resolution, .reload)
        XCTAssertEqual(try f.read("doc.txt"), "one\ntwo\nTHREE\n")
        let interest = try XCTUnwrap(f.store.document(atPath: "doc.txt")?.presenters.first)
        XCTAssertFalse(interest.hasUnsavedChanges)
        switch interest.base {
        case .pending(let identity): XCTAssertEqual(identity, try f.identity("doc.txt"))
        case .kept(let version): XCTAssertEqual(try f.text(version), "one\ntwo\nTHREE\n")
        case .lost: XCTFail("base lost")
        case .prefix(let identity): XCTFail("a reload's base is no prefix: \(identity)")
        }
    }

    func changeClose() throws {
        let f = try fixture()
        let conflict = try changedUnderUnsaved(f)
        let outcome = try f.store.resolve(conflict.id, with: .close, by: "alice")
        XCTAssertEqual(outcome.conflict.resolution, .close)
        XCTAssertEqual(try f.read("doc.txt"), "one\ntwo\nTHREE\n")
        XCTAssertEqual(try f.store.document(atPath: "doc.txt")?.presenters ?? [], [])
    }

    func changeKeepBoth() throws {
        let f = try fixture()
        let conflict = try changedUnderUnsaved(f)
        XCTAssertThrowsError(try f.store.resolve(conflict.id, with: .keepBoth, by: "alice")) {
            XCTAssertEqual($0 as? DocumentStoreError, .missingContents("keep both"))
        }
        let outcome = try f.store.resolve(conflict.id, with: .keepBoth, mine: .bytes(Array("mine\n".utf8)), by: "alice")
        let copy = try XCTUnwrap(outcome.writtenPath)
        XCTAssertNotNil(copy.range(of: #"^doc \(conflict \d{4}-\d{2}-\d{2} \d{6}\)\.txt$"#, options: .regularExpression), copy)
        XCTAssertEqual(try f.read(copy), "mine\n")
        XCTAssertEqual(try f.read("doc.txt"), "one\ntwo\nTHREE\n")
        XCTAssertEqual(outcome.conflict.conflictCopyPath, copy)
        // A second copy in the same second gets its own name.
        let second = try changedUnderUnsaved(f, base: "x\n", theirs: "y\n")
        let other = try f.store.resolve(second.id, with: .keepBoth, mine: .bytes(Array("mine 2\n".utf8)), by: "alice")
        XCTAssertNotEqual(other.writtenPath, copy)
        XCTAssertEqual(try f.read(XCTUnwrap(other.writtenPath)), "mine 2\n")
        XCTAssertEqual(try f.read(copy), "mine\n")
    }

    func changeMerge() throws {
        let f = try fixture()
        let conflict = try changedUnderUnsaved(f, base: "one\ntwo\nthree\nfour\nfive\n", theirs: "one\ntwo\nthree\nfour\nFIVE\n")
        let outcome = try f.store.resolve(conflict.id, with: .merge, mine: .bytes(Array("ONE\ntwo\nthree\nfour\nfive\n".utf8)), by: "alice")
        XCTAssertEqual(outcome.mergeConflicts, 0)
        XCTAssertEqual(try f.read("doc.txt"), "ONE\ntwo\nthree\nfour\nFIVE\n")
        XCTAssertEqual(try f.text(XCTUnwrap(outcome.preserved).version.id), "one\ntwo\nthree\nfour\nFIVE\n")

        let clash = try changedUnderUnsaved(f, base: "a\nb\nc\n", theirs: "a\nB theirs\nc\n")
        let marked = try f.store.resolve(clash.id, with: .merge, mine: .bytes(Array("a\nB mine\nc\n".utf8)), by: "alice")
        XCTAssertEqual(marked.mergeConflicts, 1)
        XCTAssertEqual(try f.read("doc.txt"), "a\n<<<<<<< mine\nB mine\n=======\nB theirs\n>>>>>>> theirs\nc\n")

        let binary = try changedUnderUnsaved(f, base: "text\n", theirs: "te\u{0}xt\n")
        XCTAssertThrowsError(try f.store.resolve(binary.id, with: .merge, mine: .bytes(Array("mine\n".utf8)), by: "alice")) {
            XCTAssertEqual($0 as? DocumentStoreError, .binaryContents("doc.txt"))
        }
        XCTAssertEqual(try f.read("doc.txt"), "te\u{0}xt\n", "a refused merge changes nothing")
        XCTAssertEqual(try f.store.conflict(binary.id).state, .open)
    }

    // MARK: Resolutions of a deletion

    func deletionSave() throws {
        let f = try fixture()
        let conflict = try deletedUnderUnsaved(f)
        let outcome = try f.store.resolve(conflict.id, with: .save, mine: .bytes(Array("restored by save\n".utf8)), by: "alice")
        XCTAssertEqual(try f.read("doc.txt"), "restored by save\n")
        XCTAssertNil(outcome.preserved)
        XCTAssertEqual(outcome.after, try f.identity("doc.txt"))
        XCTAssertEqual(try f.store.document(atPath: "doc.txt")?.identity, try f.identity("doc.txt"))
    }

    func deletionReloadRefused() throws {
        let f = try fixture()
        let conflict = try deletedUnderUnsaved(f)
        XCTAssertThrowsError(try f.store.resolve(conflict.id, with: .reload, by: "alice")) {
            XCTAssertEqual($0 as? DocumentStoreError, .resolutionNotApplicableToDeletion("reload"))
            XCTAssertTrue("\($0)".contains("deleted"))
        }
        XCTAssertEqual(try f.store.conflict(conflict.id).state, .open)
        XCTAssertFalse(f.exists("doc.txt"))
        XCTAssertThrowsError(try f.store.resolve(conflict.id, with: .merge, mine: .bytes([0x41]), by: "alice")) {
            XCTAssertEqual($0 as? DocumentStoreError, .resolutionNotApplicableToDeletion("merge"))
        }
    }

    func deletionClose() throws {
        let f = try fixture()
        let conflict = try deletedUnderUnsaved(f)
        XCTAssertEqual(try f.store.resolve(conflict.id, with: .close, by: "alice").conflict.resolution, .close)
        XCTAssertFalse(f.exists("doc.txt"))
        XCTAssertEqual(try f.store.document(atPath: "doc.txt")?.presenters ?? [], [])
        XCTAssertEqual(try f.store.conflicts(), [])
    }

    func deletionKeepBoth() throws {
        let f = try fixture()
        let conflict = try deletedUnderUnsaved(f)
        let outcome = try f.store.resolve(conflict.id, with: .keepBoth, mine: .bytes(Array("mine\n".utf8)), by: "alice")
        XCTAssertEqual(try f.read(XCTUnwrap(outcome.writtenPath)), "mine\n")
        XCTAssertFalse(f.exists("doc.txt"))
        XCTAssertEqual(try f.store.document(atPath: "doc.txt")?.presenters ?? [], [])
    }

    // MARK: Restart

    func restartMidConflict() throws {
        let f = try fixture()
        let conflict = try changedUnderUnsaved(f, base: "l1\nl2\nl3\nl4\n", theirs: "l1\nl2\nl3\nL4\n")
        let deletion: Conflict = try {
            try f.write("gone.txt", "gone\n")
            try f.store.register(bob, path: "gone.txt")
            try f.store.setUnsavedChanges(bob, path: "gone.txt", true)
            try f.store.preserveBeforeDelete("gone.txt")
            XCTAssertEqual(unlink(f.path("gone.txt")), 0)
            let event = try XCTUnwrap(f.store.noteExternalChange("gone.txt", .deleted(before: nil)))
            guard case let .conflict(c) = event.outcomes.first?.action else { throw CancellationError() }
            return c
        }()
        // Leave a scratch file as an interrupted write would.
        FileSystem.unlinkIfPresent(f.store.temporaryDirectory + "/write-leftover")
        _ = creat(f.store.temporaryDirectory + "/write-leftover", 0o600)
        try f.reopen()
        XCTAssertEqual(try FileSystem.list(f.store.temporaryDirectory), [])
        XCTAssertEqual(try f.store.conflicts().map(\.id), [conflict.id, deletion.id])
        XCTAssertEqual(try f.store.presenters(), [alice, bob])
        let merged = try f.store.resolve(conflict.id, with: .merge, mine: .bytes(Array("L1\nl2\nl3\nl4\n".utf8)), by: "alice")
        XCTAssertEqual(merged.mergeConflicts, 0)
        XCTAssertEqual(try f.read("doc.txt"), "L1\nl2\nl3\nL4\n")
        _ = try f.store.resolve(deletion.id, with: .save, mine: .bytes(Array("back\n".utf8)), by: "bob")
        XCTAssertEqual(try f.read("gone.txt"), "back\n")
        try f.reopen()
        XCTAssertEqual(try f.store.conflicts(), [])
        XCTAssertEqual(try f.store.conflicts(state: .resolved).map(\.resolution), [.merge, .save])
    }

    /// The daemon killed mid-conflict: the backing folder and the store's files exactly as they
    /// are on disk while the store is still open (WAL not checkpointed, nothing closed) are copied
    /// and opened by a new store, which still has the conflict and can resolve it.
    func killedMidConflict() throws {
        let f = try fixture()
        let conflict = try changedUnderUnsaved(f, base: "k1\nk2\nk3\nk4\n", theirs: "k1\nk2\nk3\nK4\n")
        let copy = f.backing + "-after-kill"
        try Shell.run("/bin/cp", ["-a", f.backing, copy])
        defer { _ = try? Shell.run("/bin/rm", ["-rf", copy]) }
        XCTAssertTrue(FileManager.default.fileExists(atPath: copy + "/.coordfs/store/metadata.sqlite-wal"), "the copy is taken with the WAL live")
        let survivor = try DocumentStore(backingRoot: copy, stateDirectory: copy + "/.coordfs/store", configuration: f.configuration)
        XCTAssertEqual(try survivor.conflicts().map(\.id), [conflict.id])
        XCTAssertEqual(try survivor.document(atPath: "doc.txt")?.presenters.first?.hasUnsavedChanges, true)
        let merged = try survivor.resolve(conflict.id, with: .merge, mine: .bytes(Array("K1\nk2\nk3\nk4\n".utf8)), by: "alice")
        XCTAssertEqual(merged.mergeConflicts, 0)
        XCTAssertEqual(String(decoding: try Data(contentsOf: URL(fileURLWithPath: copy + "/doc.txt")), as: UTF8.self), "K1\nk2\nk3\nK4\n")
        XCTAssertEqual(try f.read("doc.txt"), "k1\nk2\nk3\nK4\n", "the original is untouched")
    }

    // MARK: Versions for people

    func versionsDiffRestore() throws {
        let f = try fixture(StoreConfiguration(eagerBaseWhenCloneable: false))
        try f.write("notes.md", "# Notes\nfirst\n")
        try f.store.preserveBeforeReplace("notes.md")
        try f.replace("notes.md", "# Notes\nsecond\n")
        try f.store.preserveBeforeReplace("notes.md")
        try f.replace("notes.md", "# Notes\nthird\n")
        let versions = try f.store.versions(ofPath: "notes.md")
        XCTAssertEqual(versions.map(\.reason), [.replaced, .replaced])
        XCTAssertEqual(versions.map(\.method), Array(repeating: expectsReflink ? .reflink : .copy, count: 2))
        XCTAssertEqual(versions.map(\.size), [15, 14])
        XCTAssertEqual(try f.text(versions[1].id), "# Notes\nfirst\n")
        XCTAssertEqual(try f.store.diff(versions[1].id), """
            --- a/notes.md (version \(versions[1].id.rawValue))
            +++ b/notes.md (current)
            @@ -1,2 +1,2 @@
             # Notes
            -first
            +third

            """)
        XCTAssertEqual(try f.store.diff(versions[0].id, againstCurrentOf: "notes.md").contains("-second"), true)
        let restored = try f.store.restore(versions[1].id)
        XCTAssertEqual(try f.read("notes.md"), "# Notes\nfirst\n")
        let undo = try XCTUnwrap(restored.preserved)
        XCTAssertEqual(undo.version.reason, .restore)
        XCTAssertEqual(try f.text(undo.version.id), "# Notes\nthird\n")
        // The restored file is its own inode: writing it leaves the version alone.
        try f.writeInPlace("notes.md", "scribble\n")
        XCTAssertEqual(try f.text(versions[1].id), "# Notes\nfirst\n")
        try f.store.restore(undo.version.id)
        XCTAssertEqual(try f.read("notes.md"), "# Notes\nthird\n")
        XCTAssertThrowsError(try f.store.restore(VersionID(rawValue: 9999))) {
            XCTAssertEqual($0 as? DocumentStoreError, .unknownVersion(9999))
        }
    }

    /// removeOtherVersions forgets the document's kept versions and their stored files.
    func removeOtherVersions() throws {
        let f = try fixture(StoreConfiguration(eagerBaseWhenCloneable: false))
        try f.write("notes.md", "first\n")
        try f.store.preserveBeforeReplace("notes.md")
        try f.replace("notes.md", "second\n")
        try f.write("other.md", "x\n")
        try f.store.preserveBeforeReplace("other.md")
        try f.replace("other.md", "y\n")
        let files = try f.store.versions(ofPath: "notes.md").map { try f.store.storedFile(of: $0.id) }
        XCTAssertEqual(files.count, 1)
        XCTAssertEqual(try f.store.removeOtherVersions(ofPath: "notes.md"), 1)
        XCTAssertEqual(try f.store.versions(ofPath: "notes.md"), [])
        XCTAssertFalse(files.contains { access($0, F_OK) == 0 }, "the stored files are gone")
        XCTAssertEqual(try f.store.versions(ofPath: "other.md").count, 1, "another document's versions stay")
        XCTAssertEqual(try f.read("notes.md"), "second\n")
    }

    // MARK: Retention

    func retention() throws {
        let f = try fixture(StoreConfiguration(retention: Retention(maxVersionsPerDocument: 2, maxTotalBytes: 1 << 20), eagerBaseWhenCloneable: false))
        try f.write("doc.txt", "v0\n")
        try f.store.register(alice, path: "doc.txt")
        for i in 1...4 {
            try f.store.preserveBeforeReplace("doc.txt")
            try f.replace("doc.txt", "v\(i)\n")
        }
        // v0 is alice's base (pinned); of the others the newest two stay.
        let texts = try f.store.versions(ofPath: "doc.txt").map { try f.text($0.id) }
        XCTAssertEqual(texts, ["v3\n", "v2\n", "v0\n"])
        let objects = try FileSystem.list(f.store.objectsDirectory)
        XCTAssertEqual(objects.count, 3, "dropped versions' files are gone")
        // Letting go releases the base.
        try f.store.unregister(alice, path: "doc.txt")
        XCTAssertEqual(try f.store.versions(ofPath: "doc.txt").map { try f.text($0.id) }, ["v3\n", "v2\n"])
        XCTAssertEqual(try FileSystem.list(f.store.objectsDirectory).count, 2)

        // Total bytes: oldest unpinned first.
        let small = try fixture(StoreConfiguration(retention: Retention(maxVersionsPerDocument: 100, maxTotalBytes: 10)))
        for name in ["a", "b", "c"] {
            try small.write(name, "1234\n")
            try small.store.preserveBeforeDelete(name)
            XCTAssertEqual(unlink(small.path(name)), 0)
        }
        XCTAssertEqual(try small.store.allVersions().map(\.path), ["c", "b"])
    }

    // MARK: Hostile input

    func hostilePaths() throws {
        let f = try fixture()
        try f.write("doc.txt", "x\n")
        XCTAssertEqual(symlink("/etc", f.path("escape")), 0)
        try FileSystem.mkdirs(f.path("dir"))
        for bad in ["", "/etc/passwd", "../outside", "a/../../b", ".coordfs/store/metadata.sqlite", "./.coordfs/store", "escape/passwd", "x\u{0}y", "."] {
            XCTAssertThrowsError(try f.store.preserveBeforeReplace(bad), bad) {
                guard case .invalidPath = $0 as? DocumentStoreError else { return XCTFail("\(bad): \($0)") }
            }
            XCTAssertThrowsError(try f.store.register(alice, path: bad), bad)
        }
        XCTAssertThrowsError(try f.store.register(alice, path: "dir")) {
            XCTAssertEqual($0 as? DocumentStoreError, .notARegularFile("dir"))
        }
        XCTAssertThrowsError(try f.store.register(alice, path: "missing.txt")) {
            XCTAssertEqual($0 as? DocumentStoreError, .fileNotFound("missing.txt"))
        }
        XCTAssertThrowsError(try f.store.setUnsavedChanges(bob, path: "doc.txt", true)) {
            XCTAssertEqual($0 as? DocumentStoreError, .unknownPresenter(presenter: "bob", path: "doc.txt"))
        }
        XCTAssertThrowsError(try f.store.resolve(ConflictID(rawValue: 42), with: .close, by: "x")) {
            XCTAssertEqual($0 as? DocumentStoreError, .unknownConflict(42))
        }
        XCTAssertEqual(try f.store.allVersions(), [])
        XCTAssertEqual(try f.read("doc.txt"), "x\n")
        // A folder on the path that is a link (one another user swapped in after the caller's
        // check) is never written through, even to a folder inside the backing folder.
        try FileSystem.mkdirs(f.path("private"))
        try f.write("private/x", "private\n")
        XCTAssertEqual(symlink("private", f.path("via")), 0)
        let kept = try XCTUnwrap(try f.store.preserveBeforeReplace("doc.txt"))
        XCTAssertThrowsError(try f.store.restore(kept.version.id, to: "via/x")) {
            guard case .invalidPath = $0 as? DocumentStoreError else { return XCTFail("restore through a link: \($0)") }
        }
        XCTAssertEqual(try f.read("private/x"), "private\n")
        XCTAssertEqual(try f.store.removeOtherVersions(ofPath: "doc.txt"), 1)
        // Normalised paths name the same document.
        try f.store.register(alice, path: "./doc.txt")
        XCTAssertNotNil(try f.store.document(atPath: "doc.txt"))
    }

    func moves() throws {
        let f = try fixture()
        try f.write("a.txt", "a\n")
        let registration = try f.store.register(alice, path: "a.txt")
        XCTAssertEqual(rename(f.path("a.txt"), f.path("b.txt")), 0)
        XCTAssertEqual(try f.store.noteMoved(from: "a.txt", to: "b.txt"), registration.document)
        XCTAssertEqual(try f.store.document(atPath: "b.txt")?.id, registration.document)
        XCTAssertNil(try f.store.document(atPath: "a.txt"))
        XCTAssertNil(try f.store.noteMoved(from: "nothing", to: "else"))
        // A folder moves: the documents inside follow; a look-alike name beside it stays.
        XCTAssertEqual(mkdir(f.path("dir"), 0o755), 0)
        XCTAssertEqual(mkdir(f.path("dir/in"), 0o755), 0)
        try f.write("dir/in/c.txt", "c\n")
        try f.write("dirx.txt", "x\n")
        let inside = try f.store.register(alice, path: "dir/in/c.txt")
        let beside = try f.store.register(alice, path: "dirx.txt")
        XCTAssertEqual(rename(f.path("dir"), f.path("moved")), 0)
        XCTAssertNil(try f.store.noteMoved(from: "dir", to: "moved"))
        XCTAssertEqual(try f.store.document(atPath: "moved/in/c.txt")?.id, inside.document)
        XCTAssertNil(try f.store.document(atPath: "dir/in/c.txt"))
        XCTAssertEqual(try f.store.document(atPath: "dirx.txt")?.id, beside.document)
        // Moved over a document whose presenters stay (a rename over a presented document is a
        // save of it): the moved document joins it, versions, presenters and conflicts.
        try f.write("x.txt", "x\n")
        try f.write("y.txt", "y\n")
        let x = try f.store.register(alice, path: "x.txt")
        let y = try f.store.register(bob, path: "y.txt")
        let keptX = try XCTUnwrap(try f.store.preserveBeforeReplace("x.txt"))
        XCTAssertEqual(rename(f.path("x.txt"), f.path("y.txt")), 0)
        XCTAssertEqual(try f.store.noteMoved(from: "x.txt", to: "y.txt"), y.document)
        let joined = try XCTUnwrap(try f.store.document(atPath: "y.txt"))
        XCTAssertEqual(Set(joined.presenters.map(\.presenter)), [alice, bob])
        XCTAssertNil(try f.store.document(atPath: "x.txt"))
        XCTAssertNil(try f.store.document(x.document), "the moved document is gone, joined")
        XCTAssertTrue(try f.store.versions(ofPath: "y.txt").map(\.id).contains(keptX.version.id))
        // Over a document nobody presents: it is detached, as before.
        try f.write("z.txt", "z\n")
        let z = try f.store.register(alice, path: "z.txt")
        try f.store.unregisterAll(alice)
        try f.write("w.txt", "w\n")
        let w = try f.store.register(bob, path: "w.txt")
        XCTAssertEqual(rename(f.path("w.txt"), f.path("z.txt")), 0)
        XCTAssertEqual(try f.store.noteMoved(from: "w.txt", to: "z.txt"), w.document)
        XCTAssertEqual(try f.store.document(atPath: "z.txt")?.id, w.document)
        XCTAssertNotEqual(w.document, z.document)
    }

    // MARK: Save styles

    /// Every way an editor saves reaches the store as the documented calls and yields one event,
    /// one conflict, the document's id unchanged and its base intact (merge works).
    func saveStyles() throws {
        let styles: [(String, (Fixture) throws -> ExternalChange)] = [
            ("temp file renamed over", { f in
                try f.store.preserveBeforeReplace("doc.txt")
                try f.replace("doc.txt", "base line\ntheirs\n")
                return .replaced(before: nil, after: nil)
            }),
            ("backup rename, then create", { f in
                // The mount treats the rename away of a presented document as the start of a save.
                try f.store.preserveBeforeReplace("doc.txt")
                XCTAssertEqual(rename(f.path("doc.txt"), f.path("doc.txt~")), 0)
                try f.write("doc.txt", "base line\ntheirs\n")
                return .replaced(before: nil, after: nil)
            }),
            ("truncate and write", { f in
                try f.store.preserveBeforeInPlaceWrite("doc.txt")
                try f.writeInPlace("doc.txt", "base line\ntheirs\n")
                return .changed(before: nil, after: nil)
            }),
            ("unlink, then create", { f in
                try f.store.preserveBeforeDelete("doc.txt")
                XCTAssertEqual(unlink(f.path("doc.txt")), 0)
                try f.write("doc.txt", "base line\ntheirs\n")
                return .replaced(before: nil, after: nil)
            }),
        ]
        for (style, save) in styles {
            let f = try fixture(StoreConfiguration(eagerBaseWhenCloneable: false))
            try f.write("doc.txt", "base line\n")
            let registration = try f.store.register(alice, path: "doc.txt")
            try f.store.setUnsavedChanges(alice, path: "doc.txt", true)
            let before = try f.identity("doc.txt")
            let change = try save(f)
            let event = try XCTUnwrap(f.store.noteExternalChange("doc.txt", change, by: bob), style)
            XCTAssertEqual(event.document, registration.document, style)
            XCTAssertEqual(event.kind, .change, style)
            XCTAssertEqual(event.before, before, style)
            XCTAssertEqual(event.after, try f.identity("doc.txt"), style)
            XCTAssertEqual(event.outcomes.count, 1, style)
            XCTAssertEqual(try f.store.conflicts().count, 1, style)
            let conflict = try XCTUnwrap(f.store.conflicts().first)
            let base = try XCTUnwrap(conflict.baseVersion, style)
            XCTAssertEqual(try f.text(base), "base line\n", style)
            let merged = try f.store.resolve(conflict.id, with: .merge, mine: .bytes(Array("mine\nbase line\n".utf8)), by: "alice")
            XCTAssertEqual(merged.mergeConflicts, 0, style)
            XCTAssertEqual(try f.read("doc.txt"), "mine\nbase line\ntheirs\n", style)
            XCTAssertEqual(try f.store.document(atPath: "doc.txt")?.id, registration.document, style)
        }
    }

    /// Calls from many threads at once are serialised; nothing is lost.
    func concurrentCalls() throws {
        let f = try fixture()
        for i in 0..<8 { try f.write("f\(i).txt", "file \(i)\n") }
        let store = f.store
        let errors = ErrorBox()
        DispatchQueue.concurrentPerform(iterations: 8) { i in
            do {
                let presenter = StorePresenterID("p\(i)")
                for round in 0..<5 {
                    try store.register(presenter, path: "f\(i).txt")
                    try store.setUnsavedChanges(presenter, path: "f\(i).txt", round % 2 == 0)
                    try store.preserveBeforeReplace("f\((i + 1) % 8).txt")
                    _ = try store.versions(ofPath: "f\(i).txt")
                }
            } catch {
                errors.append("\(error)")
            }
        }
        XCTAssertEqual(errors.all, [])
        XCTAssertEqual(try f.store.presenters().count, 8)
    }
}

final class ErrorBox: @unchecked Sendable {
    private let lock = NSLock()
    private var errors: [String] = []
    func append(_ error: String) { lock.lock(); errors.append(error); lock.unlock() }
    var all: [String] { lock.lock(); defer { lock.unlock() }; return errors }
}
