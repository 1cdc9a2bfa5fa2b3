import Foundation
import Glibc
import XCTest
@testable import DocumentStore

/// A presenter's base kept as a prefix of its file (`BaseState.prefix`, `preserveBeforeAppend`):
/// an append leaves the loaded bytes where they are, so nothing is copied for it; the prefix is
/// copied (once) before anything else may change those bytes, for a conflict, and dropped by a
/// reload. Lazy bases (`eagerBaseWhenCloneable: false`), so this runs the same on any file system.
final class PrefixBaseTests: XCTestCase {
    private let alice = StorePresenterID("alice")
    private let bob = StorePresenterID("bob")
    private var fixture: Fixture!

    override func setUpWithError() throws {
        fixture = try Fixture.onDisk(StoreConfiguration(eagerBaseWhenCloneable: false))
    }

    override func tearDown() {
        fixture = nil
        super.tearDown()
    }

    /// Appends `text` through an `O_APPEND` descriptor (what the mount lets through after
    /// `preserveBeforeAppend`).
    private func append(_ relative: String, _ text: String) {
        let fd = open(fixture.path(relative), O_WRONLY | O_APPEND)
        XCTAssertGreaterThanOrEqual(fd, 0)
        defer { close(fd) }
        let bytes = Array(text.utf8)
        XCTAssertEqual(Glibc.write(fd, bytes, bytes.count), bytes.count)
    }

    private func base(_ presenter: StorePresenterID, _ relative: String = "log.txt") throws -> BaseState? {
        try fixture.store.document(atPath: relative)?.presenters.first { $0.presenter == presenter }?.base
    }

    func testAnAppendRecordsThePendingBaseAsAPrefixAndAReloadDropsItWithoutACopy() throws {
        let f = fixture!
        try f.write("log.txt", "one\ntwo\n")
        try f.store.register(alice, path: "log.txt")
        let loaded = try XCTUnwrap(f.identity("log.txt"))
        XCTAssertEqual(try base(alice), .pending(loaded))

        let kept = try f.store.preserveBeforeAppend("log.txt")
        XCTAssertNil(kept.snapshot, "nothing copied")
        XCTAssertEqual(kept.prefixEnd, 8)
        XCTAssertEqual(try base(alice), .prefix(loaded))
        append("log.txt", "three\n")
        let event = try XCTUnwrap(f.store.noteExternalChange("log.txt", .changed(before: nil, after: nil)))
        XCTAssertEqual(event.outcomes, [PresenterOutcome(presenter: alice, action: .applied(.reload))])
        XCTAssertEqual(try f.store.versions(ofPath: "log.txt"), [], "the reload dropped the prefix: no version")
        XCTAssertEqual(try base(alice), .pending(try XCTUnwrap(f.identity("log.txt"))))

        // The next append again: still nothing copied, ten times over.
        for i in 0..<10 {
            XCTAssertNil(try f.store.preserveBeforeAppend("log.txt").snapshot)
            append("log.txt", "line \(i)\n")
            try f.store.noteExternalChange("log.txt", .changed(before: nil, after: nil))
        }
        XCTAssertEqual(try f.store.versions(ofPath: "log.txt"), [])
    }

    func testAConflictOnAnAppendedFileKeepsThePrefixAsItsBaseAndMergesWithIt() throws {
        let f = fixture!
        try f.write("log.txt", "one\ntwo\n")
        try f.store.register(alice, path: "log.txt")
        try f.store.setUnsavedChanges(alice, path: "log.txt", true)
        XCTAssertEqual(try f.store.preserveBeforeAppend("log.txt").prefixEnd, 8)
        append("log.txt", "three\n")
        let event = try XCTUnwrap(f.store.noteExternalChange("log.txt", .changed(before: nil, after: nil)))
        guard case let .conflict(conflict) = event.outcomes.first?.action else { return XCTFail("expected a conflict: \(event)") }
        let baseVersion = try XCTUnwrap(conflict.baseVersion, "the conflict pins a real version")
        XCTAssertEqual(try f.text(baseVersion), "one\ntwo\n")
        let version = try XCTUnwrap(f.store.versions(ofPath: "log.txt").first)
        XCTAssertEqual(version.size, 8)
        XCTAssertEqual(version.source.size, 8, "the version is the file as alice loaded it")
        XCTAssertTrue(version.isPinned)
        XCTAssertEqual(try base(alice), .kept(baseVersion))

        // More appends update the conflict and copy nothing more.
        XCTAssertNil(try f.store.preserveBeforeAppend("log.txt").prefixEnd, "the base is kept already")
        append("log.txt", "four\n")
        try f.store.noteExternalChange("log.txt", .changed(before: nil, after: nil))
        XCTAssertEqual(try f.store.versions(ofPath: "log.txt").count, 1)
        let outcome = try f.store.resolve(conflict.id, with: .merge, mine: .bytes(Array("ONE\ntwo\n".utf8)), by: "alice")
        XCTAssertEqual(outcome.mergeConflicts, 0)
        XCTAssertEqual(try f.read("log.txt"), "ONE\ntwo\nthree\nfour\n")
    }

    /// Every other change of the file copies the prefix first: an in-place write (another open, a
    /// truncate), a rename over it, a deletion.
    func testAPrefixIsCopiedBeforeAnyOtherChange() throws {
        let f = fixture!
        for name in ["write.txt", "replace.txt", "delete.txt"] {
            try f.write(name, "loaded\n")
            try f.store.register(alice, path: name)
            XCTAssertEqual(try f.store.preserveBeforeAppend(name).prefixEnd, 7)
            append(name, "appended\n")
        }
        let written = try XCTUnwrap(f.store.preserveBeforeInPlaceWrite("write.txt"), "the prefix is copied before the write")
        XCTAssertEqual(written.version.size, 7)
        try f.writeInPlace("write.txt", "over\n")
        try f.store.preserveBeforeReplace("replace.txt")
        try f.replace("replace.txt", "new\n")
        try f.store.preserveBeforeDelete("delete.txt")
        XCTAssertEqual(unlink(f.path("delete.txt")), 0)
        for name in ["write.txt", "replace.txt", "delete.txt"] {
            guard case let .kept(id)? = try base(alice, name) else { return XCTFail("\(name): \(String(describing: try base(alice, name)))") }
            XCTAssertEqual(try f.text(id), "loaded\n", name)
        }
        // What the rename over and the deletion kept is the whole file as it was then.
        XCTAssertEqual(try f.store.versions(ofPath: "replace.txt").map { try f.text($0.id) }.sorted(), ["loaded\n", "loaded\nappended\n"])
    }

    /// A prefix is persisted: a store opened again (a daemon restarted) still copies it for a conflict.
    func testAPrefixSurvivesAReopenedStore() throws {
        let f = fixture!
        try f.write("log.txt", "l1\nl2\nl3\n")
        try f.store.register(alice, path: "log.txt")
        try f.store.setUnsavedChanges(alice, path: "log.txt", true)
        let loaded = try XCTUnwrap(f.identity("log.txt"))
        XCTAssertEqual(try f.store.preserveBeforeAppend("log.txt").prefixEnd, 9)
        append("log.txt", "l4\n")
        try f.reopen()
        XCTAssertEqual(try base(alice), .prefix(loaded))
        let event = try XCTUnwrap(f.store.noteExternalChange("log.txt", .changed(before: nil, after: nil)))
        guard case let .conflict(conflict) = event.outcomes.first?.action else { return XCTFail("expected a conflict: \(event)") }
        XCTAssertEqual(try f.text(XCTUnwrap(conflict.baseVersion)), "l1\nl2\nl3\n")
        let merged = try f.store.resolve(conflict.id, with: .merge, mine: .bytes(Array("L1\nl2\nl3\n".utf8)), by: "alice")
        XCTAssertEqual(merged.mergeConflicts, 0)
        XCTAssertEqual(try f.read("log.txt"), "L1\nl2\nl3\nl4\n")
    }

    /// A change the store was not asked about first (beside the mount) may have changed any byte:
    /// the prefix is lost, as a pending base is, and merge says why.
    func testAChangeBesideTheMountLosesAPrefix() throws {
        let f = fixture!
        try f.write("log.txt", "one\ntwo\n")
        try f.store.register(alice, path: "log.txt")
        try f.store.setUnsavedChanges(alice, path: "log.txt", true)
        XCTAssertEqual(try f.store.preserveBeforeAppend("log.txt").prefixEnd, 8)
        append("log.txt", "three\n")
        let fd = open(f.path("log.txt"), O_WRONLY)
        XCTAssertEqual(pwrite(fd, "ONE", 3, 0), 3)
        close(fd)
        let event = try XCTUnwrap(f.store.noteExternalChange("log.txt", .changed(before: nil, after: nil), beside: true))
        guard case let .conflict(conflict) = event.outcomes.first?.action else { return XCTFail("expected a conflict: \(event)") }
        XCTAssertNil(conflict.baseVersion)
        XCTAssertEqual(try base(alice), .lost)
        XCTAssertThrowsError(try f.store.resolve(conflict.id, with: .merge, mine: .bytes(Array("mine\n".utf8)), by: "alice")) {
            XCTAssertEqual($0 as? DocumentStoreError, .baseUnavailable(path: "log.txt"))
        }
    }

    /// A prefix the file no longer has (shorter now, or another inode at the path) is lost, never
    /// kept from the wrong bytes.
    func testAPrefixTheFileNoLongerHasIsLost() throws {
        let f = fixture!
        try f.write("short.txt", "one\ntwo\n")
        try f.write("other.txt", "one\ntwo\n")
        for name in ["short.txt", "other.txt"] {
            try f.store.register(alice, path: name)
            XCTAssertEqual(try f.store.preserveBeforeAppend(name).prefixEnd, 8)
        }
        XCTAssertEqual(truncate(f.path("short.txt"), 3), 0)
        try f.replace("other.txt", "one\ntwo\nthree\n")
        XCTAssertNil(try f.store.preserveBeforeInPlaceWrite("short.txt"))
        XCTAssertEqual(try base(alice, "short.txt"), .lost)
        XCTAssertEqual(try f.store.preserveBeforeAppend("other.txt").prefixEnd, nil)
        XCTAssertEqual(try base(alice, "other.txt"), .lost)
        XCTAssertEqual(try f.store.versions(ofPath: "short.txt"), [])
    }

    /// Two presenters: one reloads (its prefix dropped), the other has unsaved changes (its prefix
    /// copied for its conflict); an empty file is kept as before (nothing to copy, no prefix).
    func testPresentersWithAndWithoutUnsavedChangesAndAnEmptyFile() throws {
        let f = fixture!
        try f.write("log.txt", "one\n")
        try f.store.register(alice, path: "log.txt")
        try f.store.register(bob, path: "log.txt")
        try f.store.setUnsavedChanges(bob, path: "log.txt", true)
        XCTAssertEqual(try f.store.preserveBeforeAppend("log.txt").prefixEnd, 4)
        append("log.txt", "two\n")
        let event = try XCTUnwrap(f.store.noteExternalChange("log.txt", .changed(before: nil, after: nil)))
        XCTAssertEqual(event.outcomes.first { $0.presenter == alice }?.action, .applied(.reload))
        guard case let .conflict(conflict)? = event.outcomes.first(where: { $0.presenter == bob })?.action else { return XCTFail("\(event)") }
        XCTAssertEqual(try f.text(XCTUnwrap(conflict.baseVersion)), "one\n")
        XCTAssertEqual(try base(alice), .pending(try XCTUnwrap(f.identity("log.txt"))))

        try f.write("empty.txt", "")
        try f.store.register(alice, path: "empty.txt")
        let kept = try f.store.preserveBeforeAppend("empty.txt")
        XCTAssertNil(kept.prefixEnd)
        XCTAssertEqual(kept.snapshot?.version.size, 0)
        guard case .kept? = try base(alice, "empty.txt") else { return XCTFail("an empty file's base is kept at once") }
    }
}
