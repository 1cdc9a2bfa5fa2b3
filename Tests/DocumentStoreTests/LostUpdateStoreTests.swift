import Foundation
import Glibc
import XCTest
@testable import DocumentStore

/// The store's side of a lost update (no mount): keeping the versions of a document nobody presents
/// for its readers, recording the conflict, and every resolution.
final class LostUpdateStoreTests: XCTestCase {
    var f: Fixture!

    /// XCTest keeps every test object until the process ends: the fixture (whose deinit removes its
    /// folder) is let go here.
    override func tearDown() {
        f = nil
        super.tearDown()
    }
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

    /// Each resolution writes what `Conflict.writes` says it writes (the mount makes it inside a
    /// coordinated write of that item, so that presenters on every node are asked and told): for
    /// lost updates, and for changes under unsaved presenters.
    func testEachResolutionWritesWhatItsConflictSaysItWrites() throws {
        let mine = Contents.bytes(Array("a\nm\nc\n".utf8))
        func written(_ outcome: ResolutionOutcome, _ document: String) -> ResolutionWrites {
            switch outcome.writtenPath { case nil: .nothing; case document?: .document; default: .besideDocument }
        }
        for resolution in Resolution.allCases {
            for withMine in [false, true] {
                let (conflict, _, _) = try lostUpdate()
                let says = conflict.writes(resolution, mine: withMine)
                let outcome = try f.store.resolve(conflict.id, with: resolution, mine: withMine ? mine : nil, by: "test")
                XCTAssertEqual(written(outcome, "doc"), says, "a lost update's \(resolution), mine given: \(withMine)")
            }
        }
        XCTAssertEqual(try lostUpdate().conflict.writes(.reload, mine: false), .document, "theirs written back")
        let scenarios = Scenarios(make: { _ in self.f }, expectsReflink: false)
        for resolution in Resolution.allCases {
            let conflict = try scenarios.changedUnderUnsaved(f)
            let says = conflict.writes(resolution, mine: true)
            let outcome = try f.store.resolve(conflict.id, with: resolution, mine: mine, by: "test")
            XCTAssertEqual(written(outcome, "doc.txt"), says, "a change's \(resolution)")
        }
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

    /// What live readers read is held for them: with one version per document and one byte in all,
    /// retention keeps every held version until its reader lets go, so a late save still finds its
    /// base (and merge works); released, the versions go.
    func testVersionsHeldForLiveReadersSurviveTightRetention() throws {
        f = try Fixture(under: "/tmp/coordfs-store-tests", configuration: StoreConfiguration(
            retention: Retention(maxVersionsPerDocument: 1, maxTotalBytes: 1), unpresentedFiles: .never))
        // Reader 1 read "a b c d e"; a writer renames over it: kept for reader 1.
        try f.write("doc", "a\nb\nc\nd\ne\n")
        let read1 = try XCTUnwrap(f.identity("doc"))
        let base1 = try XCTUnwrap(f.store.keepForReaders("doc", reason: .base, holders: ["reader-1"]))
        try f.replace("doc", "A\nb\nc\nd\ne\n")
        // Reader 2 read that; another writer changes it in place: kept for reader 2.
        let read2 = try XCTUnwrap(f.identity("doc"))
        let base2 = try XCTUnwrap(f.store.keepForReaders("doc", reason: .base, holders: ["reader-2"]))
        try f.writeInPlace("doc", "A\nb\nc\nd\nE\n")
        // Versions nobody holds are dropped at once under these limits.
        try f.store.keepForReaders("doc", reason: .beforeWrite)
        try f.writeInPlace("doc", "A\nb\nc\nd\nEE\n")
        try f.store.collectGarbage()
        XCTAssertEqual(Set(try f.store.versions(ofPath: "doc").map(\.id)), [base1.version.id, base2.version.id], "both held, nothing else")
        XCTAssertEqual(f.store.heldVersions, [base1.version.id, base2.version.id])
        XCTAssertEqual(try f.store.removeOtherVersions(ofPath: "doc"), 0, "removing versions leaves held ones too")

        // Reader 1 saves late over what it did not read: the base it read is found.
        let theirs = try XCTUnwrap(f.identity("doc"))
        let kept = try XCTUnwrap(f.store.keepForReaders("doc", reason: .beforeWrite, holders: ["reader-1"]))
        try f.writeInPlace("doc", "a\nb\nC\nd\ne\n")
        let conflict = try f.store.recordLostUpdate("doc", saver: saver, read: read1, theirs: theirs)
        XCTAssertEqual(conflict.baseVersion, base1.version.id)
        XCTAssertEqual(conflict.theirsVersion, kept.version.id)
        f.store.releaseHolds(of: "reader-1", atPath: "doc")
        XCTAssertEqual(f.store.heldVersions, [base2.version.id])
        try f.store.collectGarbage()
        XCTAssertEqual(try f.text(XCTUnwrap(conflict.baseVersion)), "a\nb\nc\nd\ne\n", "pinned by the open conflict now")
        let merged = try f.store.resolve(conflict.id, with: .merge, by: "test")
        XCTAssertEqual(merged.mergeConflicts, 0)
        XCTAssertEqual(try f.read("doc"), "A\nb\nC\nd\nEE\n")

        // Reader 2 exits: what it held goes back to retention.
        XCTAssertEqual(try f.store.version(atPath: "doc", identity: read2), base2.version.id)
        f.store.releaseHolds(of: "reader-2")
        XCTAssertEqual(f.store.heldVersions, [])
        try f.store.collectGarbage()
        XCTAssertNil(try f.store.version(atPath: "doc", identity: read2))
    }
}
