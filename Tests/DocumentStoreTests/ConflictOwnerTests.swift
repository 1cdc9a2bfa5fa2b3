import Foundation
import GRDB
import XCTest
@testable import DocumentStore

/// Whose a conflict is: the store records the uid of the presenter's user (given at registration)
/// or of a lost update's saver with the conflict, so that user may still list and resolve it once
/// the presenter is gone; a conflict an older store recorded has no owner (root's alone).
final class ConflictOwnerTests: XCTestCase {
    var f: Fixture!

    /// XCTest keeps every test object until the process ends: the fixture (whose deinit removes its
    /// folder) is let go here.
    override func tearDown() {
        f = nil
        super.tearDown()
    }
    let alice = StorePresenterID("coordfs-1-1/presenter#1")
    let bob = StorePresenterID("coordfs-1-1/presenter#2")

    override func setUpWithError() throws { f = try Fixture.onDisk() }

    /// The document changes underneath both presenters with unsaved changes: their conflicts.
    private func change(_ text: String) throws -> [Conflict] {
        try f.store.preserveBeforeReplace("doc.txt")
        try f.replace("doc.txt", text)
        let event = try XCTUnwrap(f.store.noteExternalChange("doc.txt", .replaced(before: nil, after: nil)))
        return event.outcomes.compactMap { if case .conflict(let c) = $0.action { c } else { nil } }
    }

    func testAPresentersConflictBelongsToItsUserAfterItLetGo() throws {
        try f.write("doc.txt", "base\n")
        try f.store.register(alice, path: "doc.txt", owner: 65534)
        try f.store.register(bob, path: "doc.txt")  // no user given: root's alone
        try f.store.setUnsavedChanges(alice, path: "doc.txt", true)
        try f.store.setUnsavedChanges(bob, path: "doc.txt", true)
        // Registering again names no other owner.
        try f.store.register(alice, path: "doc.txt", owner: 1000)
        try f.store.setUnsavedChanges(alice, path: "doc.txt", true)
        let opened = try change("theirs\n")
        XCTAssertEqual(Dictionary(uniqueKeysWithValues: opened.map { ($0.presenter, $0.owner) }), [alice: 65534, bob: nil])
        // A later change folds into the same conflict and keeps its owner; letting go and a
        // restart keep it too.
        let again = try change("again\n")
        XCTAssertEqual(Set(again.map(\.id)), Set(opened.map(\.id)))
        try f.store.unregisterAll([alice, bob])
        try f.reopen()
        let open = try f.store.conflicts()
        XCTAssertEqual(open.first { $0.presenter == alice }?.owner, 65534)
        XCTAssertEqual(open.count, 2)
        XCTAssertNil(try XCTUnwrap(open.first { $0.presenter == bob }).owner)
    }

    /// A presenter with unsaved changes takes over the open conflict its user's gone presenter left
    /// on the document (the editor registered again after its daemon crashed): one, the newest; never
    /// another user's, a live presenter's, a lost update, or one when it has its own.
    func testAPresenterWithUnsavedChangesTakesOverItsUsersGonePresentersConflict() throws {
        try f.write("doc.txt", "base\n")
        let carol = StorePresenterID("coordfs-1-1/presenter#3")
        try f.store.register(alice, path: "doc.txt", owner: 65534)
        try f.store.register(bob, path: "doc.txt", owner: 1000)
        try f.store.register(carol, path: "doc.txt", owner: 65534)
        for p in [alice, bob, carol] { try f.store.setUnsavedChanges(p, path: "doc.txt", true) }
        let opened = Dictionary(uniqueKeysWithValues: try change("theirs\n").map { ($0.presenter, $0.id) })
        // Carol still presents; alice and bob are gone (their daemon died, the next start dropped them).
        try f.store.unregisterAll([alice, bob])
        let again = StorePresenterID("coordfs-2-2/presenter#1"), other = StorePresenterID("coordfs-2-2/presenter#2")
        try f.store.register(again, path: "doc.txt", owner: 65534)
        XCTAssertEqual(try f.store.setUnsavedChanges(again, path: "doc.txt", false), [], "nothing unsaved: nothing to resolve with")
        XCTAssertEqual(try f.store.setUnsavedChanges(again, path: "doc.txt", true), [try XCTUnwrap(opened[alice])])
        XCTAssertEqual(try f.store.conflict(try XCTUnwrap(opened[alice])).presenter, again)
        XCTAssertEqual(try f.store.conflict(try XCTUnwrap(opened[alice])).owner, 65534, "still its user's")
        XCTAssertEqual(try f.store.setUnsavedChanges(again, path: "doc.txt", true), [], "it has one already")
        try f.store.register(other, path: "doc.txt", owner: 65534)
        XCTAssertEqual(try f.store.setUnsavedChanges(other, path: "doc.txt", true), [], "none left of its user's gone presenters")
        XCTAssertEqual(try f.store.conflict(try XCTUnwrap(opened[bob])).presenter, bob, "another user's stays")
        XCTAssertEqual(try f.store.conflict(try XCTUnwrap(opened[carol])).presenter, carol, "a live presenter's stays")
        // The next change folds into the conflict taken over: still one for the presenter.
        let next = try change("later\n").filter { $0.presenter == again }
        XCTAssertEqual(next.map(\.id), [try XCTUnwrap(opened[alice])])
    }

    /// A daemon is killed while its presenters hold documents, and some change while no daemon
    /// watches (written beside the mount, by another node): when the next start drops the gone
    /// presenters (`dropGonePresenters`), each that had unsaved changes in a document whose file is
    /// no longer its base gets the conflict a running daemon would have opened (a deletion for a file
    /// gone), with its base's identity as before and its user as owner, and its user's editor
    /// registering again with unsaved changes takes it over. A presenter without unsaved changes, or
    /// whose file is as it was, gets none. Before, their interests were dropped and nothing was
    /// recorded: the editor registered again with the changed file as its base.
    func testAGonePresenterWithUnsavedChangesInADocumentChangedMeanwhileGetsItsConflict() throws {
        try f.write("doc.txt", "base\n")
        try f.write("same.txt", "same\n")
        try f.write("gone.txt", "gone\n")
        let carol = StorePresenterID("coordfs-1-1/presenter#3"), dave = StorePresenterID("coordfs-1-1/presenter#4")
        try f.store.register(alice, path: "doc.txt", owner: 65534)
        try f.store.register(carol, path: "doc.txt", owner: 65534)   // no unsaved changes
        try f.store.register(bob, path: "same.txt", owner: 1000)
        try f.store.register(dave, path: "gone.txt", owner: 1000)
        try f.store.setUnsavedChanges(alice, path: "doc.txt", true)
        try f.store.setUnsavedChanges(bob, path: "same.txt", true)
        try f.store.setUnsavedChanges(dave, path: "gone.txt", true)
        let base = try XCTUnwrap(f.identity("doc.txt"))
        // The daemon dies; meanwhile one file is changed in place and one deleted.
        try f.writeInPlace("doc.txt", "theirs, longer\n")
        XCTAssertEqual(unlink(f.path("gone.txt")), 0)
        try f.reopen()

        let opened = try f.store.dropGonePresenters([alice, bob, carol, dave])
        XCTAssertEqual(Set(opened.map(\.presenter)), [alice, dave], "\(opened)")
        let changed = try XCTUnwrap(opened.first { $0.presenter == alice })
        XCTAssertEqual(changed.kind, .change)
        XCTAssertEqual(changed.before, base, "against the version it had")
        XCTAssertEqual(changed.after, try f.identity("doc.txt"))
        XCTAssertEqual(changed.owner, 65534)
        XCTAssertEqual(try XCTUnwrap(opened.first { $0.presenter == dave }).kind, .deletion)
        XCTAssertEqual(try f.store.presenters(), [], "their interests are dropped all the same")
        XCTAssertEqual(try f.store.dropGonePresenters([alice, dave]), [], "once")

        // Its editor, registered again with unsaved changes, takes it over.
        let again = StorePresenterID("coordfs-2-2/presenter#1")
        try f.store.register(again, path: "doc.txt", owner: 65534)
        XCTAssertEqual(try f.store.setUnsavedChanges(again, path: "doc.txt", true), [changed.id])
    }

    /// A gone presenter WITHOUT unsaved changes whose file changed (or was deleted) meanwhile gets
    /// no conflict: the change is remembered for its user and document, taken once by the next
    /// presenter of that user registering there (reload; close for a deletion), not by another
    /// user's, and survives a reopen and garbage collection until taken. A file as it was is nothing.
    func testAGonePresentersChangeWhileAwayIsToldOnceToItsUsersNextPresenter() throws {
        try f.write("doc.txt", "base\n")
        try f.write("same.txt", "same\n")
        try f.write("gone.txt", "gone\n")
        try f.store.register(alice, path: "doc.txt", owner: 65534)
        try f.store.register(bob, path: "same.txt", owner: 65534)
        let carol = StorePresenterID("coordfs-1-1/presenter#3")
        try f.store.register(carol, path: "gone.txt", owner: 1000)
        let base = try XCTUnwrap(f.identity("doc.txt"))
        try f.writeInPlace("doc.txt", "theirs, longer\n")
        XCTAssertEqual(unlink(f.path("gone.txt")), 0)
        try f.reopen()

        XCTAssertEqual(try f.store.dropGonePresenters([alice, bob, carol]), [], "no conflict without unsaved changes")
        XCTAssertEqual(try f.store.changesWhileAwayCount(), 2)
        try f.reopen()
        XCTAssertEqual(try f.store.takeChangesWhileAway([("doc.txt", 1000), ("same.txt", 65534)]), [nil, nil], "another user's; a file as it was")
        let taken = try f.store.takeChangesWhileAway([("doc.txt", 65534), ("gone.txt", 1000)])
        let changed = try XCTUnwrap(taken.first ?? nil)
        XCTAssertEqual(changed.kind, .change)
        XCTAssertEqual(changed.action, .reload)
        XCTAssertEqual(changed.before, base)
        XCTAssertEqual(changed.after, try f.identity("doc.txt"))
        let deleted = try XCTUnwrap(taken.last ?? nil)
        XCTAssertEqual(deleted.kind, .deletion)
        XCTAssertEqual(deleted.action, .close)
        XCTAssertNil(deleted.after)
        XCTAssertEqual(try f.store.takeChangesWhileAway([("doc.txt", 65534), ("gone.txt", 1000)]), [nil, nil], "once")
        XCTAssertEqual(try f.store.changesWhileAwayCount(), 0)
    }

    func testALostUpdateBelongsToItsSaver() throws {
        try f.write("doc", "a\n")
        let read = try XCTUnwrap(f.identity("doc"))
        try f.store.keepForReaders("doc", reason: .base)
        try f.replace("doc", "b\n")
        let theirs = try XCTUnwrap(f.identity("doc"))
        try f.store.keepForReaders("doc", reason: .beforeWrite)
        try f.writeInPlace("doc", "c\n")
        let conflict = try f.store.recordLostUpdate("doc", saver: StorePresenterID("process:9:9:uid:4242"), owner: 4242, read: read, theirs: theirs)
        XCTAssertEqual(conflict.owner, 4242)
        XCTAssertEqual(try f.store.conflict(conflict.id).owner, 4242)
    }

    /// A store an older build left (no owner columns): its conflicts open with no owner after the
    /// migration; conflicts recorded since have theirs.
    func testConflictsOfAnOlderStoreHaveNoOwner() throws {
        try f.write("doc.txt", "base\n")
        try f.store.register(alice, path: "doc.txt", owner: 65534)
        try f.store.setUnsavedChanges(alice, path: "doc.txt", true)
        let old = try XCTUnwrap(change("theirs\n").first)
        XCTAssertEqual(old.owner, 65534)
        // Back to the older schema: the columns and their migration gone.
        try f.store.database.write { db in
            try db.execute(sql: "DROP INDEX interest_owner")
            try db.execute(sql: "DELETE FROM grdb_migrations WHERE identifier = 'interestOwnerIndex'")
            try db.execute(sql: "DROP INDEX conflict_owner")
            try db.execute(sql: "DELETE FROM grdb_migrations WHERE identifier = 'conflictOwnerIndex'")
            try db.execute(sql: "ALTER TABLE interest DROP COLUMN ownerUid")
            try db.execute(sql: "ALTER TABLE conflict DROP COLUMN ownerUid")
            try db.execute(sql: "DELETE FROM grdb_migrations WHERE identifier = 'v3'")
        }
        try f.reopen()
        XCTAssertNil(try f.store.conflict(old.id).owner, "an older store's conflict stays root's")
        XCTAssertEqual(try f.store.conflicts().map(\.id), [old.id])
        try f.store.register(bob, path: "doc.txt", owner: 1000)
        try f.store.setUnsavedChanges(bob, path: "doc.txt", true)
        let new = try change("later\n")
        XCTAssertEqual(new.first { $0.presenter == bob }?.owner, 1000)
        XCTAssertEqual(try f.store.conflicts(ownedBy: 1000).map(\.id), [old.id] + new.filter { $0.presenter == bob }.map(\.id))
    }

    /// A user's conflicts (`conflicts(ownedBy:)`, what the control socket lists for a user other
    /// than root) are its own and those of no owner, found through the owner index: SQLite's plan
    /// searches `conflict_owner` and scans no table, so the cost follows the user's conflicts.
    func testAUsersConflictsAreFoundThroughTheOwnerIndex() throws {
        let carol = StorePresenterID("coordfs-1-1/presenter#3")
        try f.write("doc.txt", "base\n")
        try f.store.register(alice, path: "doc.txt", owner: 65534)
        try f.store.register(bob, path: "doc.txt")
        try f.store.register(carol, path: "doc.txt", owner: 1000)
        for p in [alice, bob, carol] { try f.store.setUnsavedChanges(p, path: "doc.txt", true) }
        let opened = Dictionary(uniqueKeysWithValues: try change("theirs\n").map { ($0.presenter, $0.id) })
        XCTAssertEqual(opened.count, 3)
        XCTAssertEqual(try f.store.conflicts(ownedBy: 65534).map(\.id), [alice, bob].compactMap { opened[$0] }.sorted { $0.rawValue < $1.rawValue })
        XCTAssertEqual(try f.store.conflicts(ownedBy: 1000).map(\.id), [bob, carol].compactMap { opened[$0] }.sorted { $0.rawValue < $1.rawValue })
        XCTAssertEqual(try f.store.conflicts(ownedBy: 4242).map(\.id), [opened[bob]!])
        XCTAssertEqual(try f.store.conflicts(ownedBy: 65534, state: .resolved), [])

        let plan = try f.store.database.read { db in
            try Row.fetchAll(db, sql: "EXPLAIN QUERY PLAN " + DocumentStore.ownedConflictsQuery, arguments: [65534, "open", "open"])
                .map { $0["detail"] as String }
        }
        XCTAssertTrue(plan.contains { $0.contains("conflict_owner") }, "\(plan)")
        XCTAssertFalse(plan.contains { $0.hasPrefix("SCAN c") || $0.hasPrefix("SCAN conflict") }, "\(plan)")
    }
}
