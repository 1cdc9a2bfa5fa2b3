import Foundation
import Glibc
import XCTest
@testable import DocumentStore

/// The store's side of a lost update (no mount): keeping the versions of a document nobody presents
/// for its readers, recording the conflict, and every resolution.
final class LostUpdateStoreTests: XCTestCase {
    var f: Fixture!
    let saver = StorePresenterID("process:4242:77:uid:0")

    override func setUpWithError() throws {
        let parent = "/tmp/coordfs-store-tests"
        try FileSystem.mkdirs(parent)
        // The mount's configuration: nothing kept for unpresented files, except for readers.
        f = try Fixture(under: parent, configuration: StoreConfiguration(unpresentedFiles: .never))
    }

    /// A reads "a\nb\nc\n"; B changes the first line (rename over, the base kept before it);
    /// A saves its change of the last line in place (theirs kept before it). Both are copies or
    /// clones, never links.
    private func lostUpdate() throws -> (conflict: Conflict, read: FileIdentity, theirs: FileIdentity) {
        try f.write("doc", "a\nb\nc\n")
        let read = try XCTUnwrap(f.identity("doc"))
        let base = try XCTUnwrap(f.store.keepForReaders("doc", reason: .base))
        XCTAssertEqual(base.version.method, f.store.inPlaceMethod)
        try f.replace("doc", "A\nb\nc\n")
        let theirs = try XCTUnwrap(f.identity("doc"))
        let kept = try XCTUnwrap(f.store.keepForReaders("doc", reason: .beforeWrite))
        XCTAssertEqual(kept.version.method, f.store.inPlaceMethod)
        try f.writeInPlace("doc", "a\nb\nC\n")
        let conflict = try f.store.recordLostUpdate("doc", saver: saver, read: read, theirs: theirs)
        XCTAssertEqual(conflict.kind, .lostUpdate)
        XCTAssertEqual(conflict.baseVersion, base.version.id)
        XCTAssertEqual(conflict.theirsVersion, kept.version.id)
        XCTAssertEqual(conflict.before, theirs)
        XCTAssertEqual(conflict.after, try f.identity("doc"))
        XCTAssertEqual(try f.store.version(atPath: "doc", identity: read), base.version.id)
        return (conflict, read, theirs)
    }

    func testBothVersionsAreKeptPinnedAndTheConflictListed() throws {
        let (conflict, _, _) = try lostUpdate()
        XCTAssertEqual(try f.text(conflict.baseVersion!), "a\nb\nc\n")
        XCTAssertEqual(try f.text(conflict.theirsVersion!), "A\nb\nc\n")
        XCTAssertEqual(try f.store.conflicts(atPath: "doc").map(\.id), [conflict.id])
        XCTAssertTrue(try f.store.versions(ofPath: "doc").allSatisfy(\.isPinned))
        // Pinned: retention keeps them while the conflict is open, even beyond the limit.
        f = try Fixture(under: "/tmp/coordfs-store-tests", configuration: StoreConfiguration(retention: Retention(maxVersionsPerDocument: 2), unpresentedFiles: .never))
        let again = try lostUpdate()
        try f.store.keepForReaders("doc", reason: .beforeWrite)
        try f.writeInPlace("doc", "x\n")
        try f.store.keepForReaders("doc", reason: .beforeWrite)
        try f.writeInPlace("doc", "yy\n")
        try f.store.keepForReaders("doc", reason: .beforeWrite)
        try f.store.collectGarbage()
        // The two newest unpinned ones, plus the two pinned ones: the oldest unpinned one went.
        XCTAssertEqual(try f.store.versions(ofPath: "doc").count, 4)
        XCTAssertEqual(try f.text(again.conflict.theirsVersion!), "A\nb\nc\n")
        XCTAssertEqual(try f.text(again.conflict.baseVersion!), "a\nb\nc\n")
    }

    func testMergeTakesBothChangesAgainstWhatTheSaverRead() throws {
        let (conflict, _, _) = try lostUpdate()
        let outcome = try f.store.resolve(conflict.id, with: .merge, by: "test")
        XCTAssertEqual(outcome.mergeConflicts, 0)
        XCTAssertEqual(try f.read("doc"), "A\nb\nC\n")
        XCTAssertEqual(try f.text(outcome.preserved!.version.id), "a\nb\nC\n", "mine kept before the merge wrote over it")
        XCTAssertThrowsError(try f.store.resolve(conflict.id, with: .merge, by: "test"))
    }

    func testReloadRestoresTheirsAndSaveOrCloseKeepMine() throws {
        let first = try lostUpdate()
        try f.store.resolve(first.conflict.id, with: .reload, by: "test")
        XCTAssertEqual(try f.read("doc"), "A\nb\nc\n")
        let second = try lostUpdate()
        try f.store.resolve(second.conflict.id, with: .save, by: "test")
        XCTAssertEqual(try f.read("doc"), "a\nb\nC\n")
        let third = try lostUpdate()
        try f.store.resolve(third.conflict.id, with: .close, by: "test")
        XCTAssertEqual(try f.read("doc"), "a\nb\nC\n")
        XCTAssertTrue(try f.store.conflicts(atPath: "doc").isEmpty)
    }

    func testKeepBothWritesTheirsBeside() throws {
        let (conflict, _, _) = try lostUpdate()
        let outcome = try f.store.resolve(conflict.id, with: .keepBoth, by: "test")
        let copy = try XCTUnwrap(outcome.writtenPath)
        XCTAssertTrue(copy.hasPrefix("doc (conflict "), copy)
        XCTAssertEqual(try f.read(copy), "A\nb\nc\n")
        XCTAssertEqual(try f.read("doc"), "a\nb\nC\n")
    }

    func testWithoutAKeptBaseMergeIsRefusedAndNothingChanges() throws {
        try f.write("doc", "a\nb\nc\n")
        let read = try XCTUnwrap(f.identity("doc"))
        try f.replace("doc", "A\nb\nc\n") // changed where the store could not keep the base
        let theirs = try XCTUnwrap(f.identity("doc"))
        try f.store.keepForReaders("doc", reason: .replaced)
        try f.replace("doc", "a\nb\nC\n")
        let conflict = try f.store.recordLostUpdate("doc", saver: saver, read: read, theirs: theirs)
        XCTAssertNil(conflict.baseVersion)
        XCTAssertThrowsError(try f.store.resolve(conflict.id, with: .merge, by: "test")) { error in
            XCTAssertEqual(error as? DocumentStoreError, .baseUnavailable(path: "doc"))
        }
        XCTAssertEqual(try f.read("doc"), "a\nb\nC\n")
        XCTAssertEqual(try f.store.conflicts(atPath: "doc").count, 1)
    }
}
