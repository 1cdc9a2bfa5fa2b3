import Foundation
import Glibc
import XCTest
@testable import DocumentStore

/// The refusals of a resolution are decided in one place: `checkResolution` (which the daemon
/// calls before it takes the resolution's coordinated write) and `resolve` (which checks again
/// inside its write) give the same error for the same state, and a refusal changes nothing.
final class ResolutionRulesTests: XCTestCase {
    var f: Fixture!

    /// XCTest keeps every test object until the process ends: the fixture (whose deinit removes its
    /// folder) is let go here.
    override func tearDown() {
        f = nil
        super.tearDown()
    }
    var scenarios: Scenarios!
    let saver = StorePresenterID("process:4242:77:uid:0")
    let text = Contents.bytes(Array("mine\n".utf8))
    let binary = Contents.bytes([0x6d, 0x00, 0x0a])

    override func setUpWithError() throws {
        f = try Fixture.onDisk(StoreConfiguration(unpresentedFiles: .never))
        scenarios = Scenarios(make: { _ in self.f }, expectsReflink: false)
    }

    /// A lost update of "doc": read "a\nb\nc\n", changed to `theirs` by rename over, then saved in
    /// place as "a\nb\nC\n". `keepBase`, `keepTheirs`: whether the store kept what the saver read,
    /// and what its save went over.
    private func lostUpdate(keepBase: Bool = true, keepTheirs: Bool = true, theirs: String = "A\nb\nc\n") throws -> Conflict {
        try f.write("doc", "a\nb\nc\n")
        let read = try XCTUnwrap(f.identity("doc"))
        if keepBase { try f.store.keepForReaders("doc", reason: .base) }
        try f.replace("doc", theirs)
        let over = try XCTUnwrap(f.identity("doc"))
        if keepTheirs { try f.store.keepForReaders("doc", reason: .beforeWrite) }
        try f.writeInPlace("doc", "a\nb\nC\n")
        return try f.store.recordLostUpdate("doc", saver: saver, read: read, theirs: over)
    }

    /// The errors of the check and then of the resolution of `conflict` (nil: none), asserting
    /// that the document's bytes and the conflict's state are as they were.
    private func refusal(_ conflict: Conflict, _ resolution: Resolution, mine: Contents?, at path: String,
                         file: StaticString = #filePath, line: UInt = #line) -> (checked: DocumentStoreError?, resolved: DocumentStoreError?) {
        func error(_ body: () throws -> Void) -> DocumentStoreError? {
            do { try body(); return nil } catch { return (error as? DocumentStoreError) ?? .database("\(error)") }
        }
        let before = try? f.read(path)
        let wasOpen = (try? f.store.conflict(conflict.id).state) == .open
        let checked = error { try f.store.checkResolution(conflict.id, with: resolution, mine: mine) }
        let resolved = error { _ = try f.store.resolve(conflict.id, with: resolution, mine: mine, by: "test") }
        XCTAssertEqual(try? f.read(path), before, "a refused \(resolution) changes nothing", file: file, line: line)
        XCTAssertEqual((try? f.store.conflict(conflict.id).state) == .open, wasOpen, "a refused \(resolution) leaves the conflict as it was", file: file, line: line)
        return (checked, resolved)
    }

    /// Every refusal, each from a state of its own: check and resolve give the same error, the one
    /// expected, in the order the rules are written (a deletion before missing contents, missing
    /// contents before the base).
    func testCheckAndResolveRefuseEachStateWithTheSameError() throws {
        let change = { try self.scenarios.changedUnderUnsaved(self.f) }
        let deletion = { try self.scenarios.deletedUnderUnsaved(self.f) }
        let binaryTheirs = { try self.scenarios.changedUnderUnsaved(self.f, theirs: "one\0\n") }
        let resolvedAlready = { () throws -> Conflict in
            let c = try change()
            _ = try self.f.store.resolve(c.id, with: .close, by: "other")
            return c
        }
        let deletedAfterItsLostUpdate = { () throws -> Conflict in
            let c = try self.lostUpdate()
            XCTAssertEqual(unlink(self.f.path("doc")), 0)
            return c
        }
        let lostUpdate = { try self.lostUpdate() }
        let noBase = { try self.lostUpdate(keepBase: false) }
        let noTheirs = { try self.lostUpdate(keepTheirs: false) }
        let binaryLostTheirs = { try self.lostUpdate(theirs: "A\0\nb\nc\n") }
        let cases: [(name: String, make: () throws -> Conflict, resolution: Resolution, mine: Contents?, expected: DocumentStoreError?)] = [
            ("resolved already", resolvedAlready, .save, text, nil),  // conflictAlreadyResolved, with its id
            ("reload of a deletion", deletion, .reload, nil, .resolutionNotApplicableToDeletion("reload")),
            ("merge of a deletion", deletion, .merge, text, .resolutionNotApplicableToDeletion("merge")),
            ("merge of a deletion, no contents", deletion, .merge, nil, .resolutionNotApplicableToDeletion("merge")),
            ("save without contents", change, .save, nil, .missingContents("save")),
            ("save of a deletion without contents", deletion, .save, nil, .missingContents("save")),
            ("keep both without contents", change, .keepBoth, nil, .missingContents("keep both")),
            ("merge without contents", change, .merge, nil, .missingContents("merge")),
            ("merge of binary theirs", binaryTheirs, .merge, text, .binaryContents("doc.txt")),
            ("merge of binary mine", change, .merge, binary, .binaryContents("doc.txt")),
            ("lost update: merge without a kept base", noBase, .merge, nil, .baseUnavailable(path: "doc")),
            ("lost update: reload, theirs not kept", noTheirs, .reload, nil, .unknownVersion(0)),
            ("lost update: keep both, theirs not kept", noTheirs, .keepBoth, nil, .unknownVersion(0)),
            ("lost update: merge, theirs not kept", noTheirs, .merge, nil, .unknownVersion(0)),
            ("lost update: merge of a deletion", deletedAfterItsLostUpdate, .merge, nil, .resolutionNotApplicableToDeletion("merge")),
            ("lost update: merge of binary theirs", binaryLostTheirs, .merge, nil, .binaryContents("doc")),
            ("lost update: merge of binary mine", lostUpdate, .merge, binary, .binaryContents("doc")),
        ]
        for c in cases {
            f = try Fixture.onDisk(StoreConfiguration(unpresentedFiles: .never))
            let conflict = try c.make()
            let expected = c.expected ?? .conflictAlreadyResolved(conflict.id.rawValue, resolution: "close")
            let (checked, resolved) = refusal(conflict, c.resolution, mine: c.mine, at: conflict.kind == .lostUpdate ? "doc" : "doc.txt")
            XCTAssertEqual(checked, expected, "\(c.name): check")
            XCTAssertEqual(resolved, expected, "\(c.name): resolve")
        }
    }

    /// What the check let through is checked again inside the resolution: the state it was checked
    /// in may be gone by the time the write runs.
    func testResolveRefusesWhatChangedSinceItsCheck() throws {
        // The file turned binary after a merge was checked.
        var conflict = try scenarios.changedUnderUnsaved(f)
        XCTAssertNoThrow(try f.store.checkResolution(conflict.id, with: .merge, mine: text))
        try f.writeInPlace("doc.txt", "one\0\n")
        var (checked, resolved) = refusal(conflict, .merge, mine: text, at: "doc.txt")
        XCTAssertEqual(resolved, .binaryContents("doc.txt"))
        XCTAssertEqual(checked, resolved)

        // The file deleted after a reload was checked.
        f = try Fixture.onDisk(StoreConfiguration(unpresentedFiles: .never))
        conflict = try scenarios.changedUnderUnsaved(f)
        XCTAssertNoThrow(try f.store.checkResolution(conflict.id, with: .reload))
        XCTAssertEqual(unlink(f.path("doc.txt")), 0)
        (checked, resolved) = refusal(conflict, .reload, mine: nil, at: "doc.txt")
        XCTAssertEqual(resolved, .resolutionNotApplicableToDeletion("reload"))
        XCTAssertEqual(checked, resolved)

        // Resolved by someone else after a save was checked: written by neither.
        f = try Fixture.onDisk(StoreConfiguration(unpresentedFiles: .never))
        conflict = try scenarios.changedUnderUnsaved(f)
        XCTAssertNoThrow(try f.store.checkResolution(conflict.id, with: .save, mine: text))
        _ = try f.store.resolve(conflict.id, with: .reload, by: "other")
        (checked, resolved) = refusal(conflict, .save, mine: text, at: "doc.txt")
        XCTAssertEqual(resolved, .conflictAlreadyResolved(conflict.id.rawValue, resolution: "reload"))
        XCTAssertEqual(checked, resolved)
        XCTAssertEqual(try f.read("doc.txt"), "one\ntwo\nTHREE\n")

        // A lost update's file (mine) turned binary after its merge was checked.
        f = try Fixture.onDisk(StoreConfiguration(unpresentedFiles: .never))
        conflict = try lostUpdate()
        XCTAssertNoThrow(try f.store.checkResolution(conflict.id, with: .merge))
        try f.writeInPlace("doc", "a\0\nb\nC\n")
        (checked, resolved) = refusal(conflict, .merge, mine: nil, at: "doc")
        XCTAssertEqual(resolved, .binaryContents("doc"))
        XCTAssertEqual(checked, resolved)
    }
}
