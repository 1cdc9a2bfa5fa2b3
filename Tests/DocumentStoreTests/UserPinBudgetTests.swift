import Foundation
import XCTest
@testable import DocumentStore

/// The per-user budget of pinned versions (``UserPinBudget``, docs/document-store.md, "Per-user
/// budget"): what one user's presenters' bases, open conflicts and live readers' holds keep beyond
/// retention stops at its bound; beyond it nothing more is pinned for that user (registrations
/// still succeed here, with no base kept; the control socket refuses them first), and nothing of
/// another user, root or the owner changes.
final class UserPinBudgetTests: XCTestCase {
    let nobody: UInt32 = 65534
    let other: UInt32 = 1000

    private func fixture(versions: Int = .max, bytes: Int64 = .max, retention: Retention = Retention()) throws -> Fixture {
        try Fixture.onDisk(StoreConfiguration(retention: retention, userPins: UserPinBudget(maxVersions: versions, maxBytes: bytes, exempt: [0])))
    }

    private func presenter(_ n: Int) -> StorePresenterID { StorePresenterID("coordfs-1-1/presenter#\(n)") }

    /// Registers `presenter(n)` for `doc<n>.txt` (written with `text`) as `uid` and captures its
    /// base as the mount does before the first write.
    @discardableResult
    private func present(_ f: Fixture, _ n: Int, as uid: UInt32?, _ text: String? = nil) throws -> BaseState {
        let path = "doc\(n).txt"
        if !f.exists(path) { try f.write(path, text ?? "document \(n)\n") }
        try f.store.register(presenter(n), path: path, owner: uid)
        try f.store.preserveBeforeInPlaceWrite(path)
        return try XCTUnwrap(f.store.document(atPath: path)?.presenters.first { $0.presenter == presenter(n) }).base
    }

    private func isKept(_ base: BaseState) -> Bool { if case .kept = base { true } else { false } }

    func testAUsersBasesStopAtItsBudgetWhileOthersAreKept() throws {
        let f = try fixture(versions: 2)
        // Many cycles of nobody's: only two bases kept, the rest registered without one.
        let nobodys = try (1...6).map { try present(f, $0, as: nobody) }
        XCTAssertEqual(nobodys.map(isKept), [true, true, false, false, false, false])
        XCTAssertEqual(try f.store.pinnedUsage(of: nobody).versions, 2)
        XCTAssertThrowsError(try f.store.checkRoomForBase(of: nobody, path: "doc1.txt")) { error in
            guard case DocumentStoreError.userPinsExceeded(let uid, let versions, _) = error else { return XCTFail("\(error)") }
            XCTAssertEqual(uid, nobody)
            XCTAssertEqual(versions, 2)
            XCTAssertFalse("\(error)".contains("presenter#"), "names nothing of others: \(error)")
        }
        // Root (exempt), a pin without a user and another user are not limited by nobody's usage.
        XCTAssertTrue(try (7...10).map { try present(f, $0, as: 0) }.allSatisfy(isKept))
        XCTAssertTrue(isKept(try present(f, 11, as: nil)))
        XCTAssertTrue(isKept(try present(f, 12, as: other)))
        XCTAssertNoThrow(try f.store.checkRoomForBase(of: other, path: "doc1.txt"))
        XCTAssertNoThrow(try f.store.checkRoomForBase(of: 0, path: "doc1.txt"))
        // Letting go frees room: the next registration keeps its base again.
        try f.store.unregister(presenter(1), path: "doc1.txt")
        XCTAssertNoThrow(try f.store.checkRoomForBase(of: nobody, path: "doc1.txt"))
        XCTAssertTrue(isKept(try present(f, 14, as: nobody)))
        XCTAssertEqual(try f.store.pinnedUsage(of: nobody).versions, 2)
    }

    func testTheByteBoundCountsLogicalSizes() throws {
        let f = try fixture(bytes: 20)
        XCTAssertTrue(isKept(try present(f, 1, as: nobody, String(repeating: "a", count: 12))))
        XCTAssertFalse(isKept(try present(f, 2, as: nobody, String(repeating: "b", count: 12))))
        XCTAssertTrue(isKept(try present(f, 3, as: nobody, "small\n")))
        XCTAssertEqual(try f.store.pinnedUsage(of: nobody).bytes, 18)
        XCTAssertThrowsError(try f.store.checkRoomForBase(of: nobody, path: "doc2.txt"))
    }

    /// A burst of registrations in one transaction (a connection registering many presenters at
    /// once) is counted as it goes: exactly the budget's worth of bases is kept.
    func testABurstOfRegistrationsInOneTransactionStopsAtTheBudget() throws {
        let f = try fixture(versions: 5)
        for n in 1...20 {
            try f.write("doc\(n).txt", "document \(n)\n")
            try f.store.keepForReaders("doc\(n).txt", reason: .base)  // a kept version of each file, reused as its base
        }
        let results = f.store.registerAll((1...20).map { (presenter($0), "doc\($0).txt", Optional(nobody)) })
        let kept = try results.map { try $0.get().base }.filter(isKept)
        XCTAssertEqual(kept.count, 5)
        XCTAssertEqual(try f.store.pinnedUsage(of: nobody).versions, 5)
    }

    /// A conflict's base is the presenter's base (counted once); a user at its budget gets its
    /// conflicts recorded without a base (merge refused), and what it pinned stays pinned after its
    /// presenter let go, until the conflict is resolved.
    func testConflictsCountAndStayWithinTheBudget() throws {
        let f = try fixture(versions: 1)
        try present(f, 1, as: nobody)
        try present(f, 2, as: nobody)
        for n in 1...2 { try f.store.setUnsavedChanges(presenter(n), path: "doc\(n).txt", true) }
        var conflicts: [Conflict] = []
        for n in 1...2 {
            try f.store.preserveBeforeReplace("doc\(n).txt")
            try f.replace("doc\(n).txt", "theirs \(n)\n")
            let event = try XCTUnwrap(f.store.noteExternalChange("doc\(n).txt", .replaced(before: nil, after: nil)))
            conflicts += event.outcomes.compactMap { if case .conflict(let c) = $0.action { c } else { nil } }
        }
        XCTAssertEqual(conflicts.count, 2, "both conflicts recorded")
        XCTAssertNotNil(conflicts[0].baseVersion)
        XCTAssertNil(conflicts[1].baseVersion, "no room for a second pin")
        XCTAssertEqual(try f.store.pinnedUsage(of: nobody).versions, 1)
        try f.store.unregisterAll([presenter(1), presenter(2)])
        XCTAssertEqual(try f.store.pinnedUsage(of: nobody).versions, 1, "the open conflict still pins its base")
        XCTAssertThrowsError(try f.store.checkRoomForBase(of: nobody, path: "doc1.txt"))
        try f.store.resolve(conflicts[0].id, with: .close, by: "test")
        XCTAssertEqual(try f.store.pinnedUsage(of: nobody).versions, 0)
    }

    /// A lost update of a saver at its budget is recorded (the saver's file is on disk), with
    /// neither version pinned for it; another saver's pins both.
    func testALostUpdateOfASaverAtItsBudgetPinsNothing() throws {
        let f = try fixture(versions: 1)
        try present(f, 9, as: nobody)  // nobody's one pin
        func lostUpdate(_ path: String, by uid: UInt32) throws -> Conflict {
            try f.write(path, "a\n")
            let read = try XCTUnwrap(f.identity(path))
            try f.store.keepForReaders(path, reason: .base)
            try f.replace(path, "b\n")
            let theirs = try XCTUnwrap(f.identity(path))
            try f.store.keepForReaders(path, reason: .beforeWrite)
            try f.writeInPlace(path, "c\n")
            return try f.store.recordLostUpdate(path, saver: StorePresenterID("process:9:9:uid:\(uid)"), owner: uid, read: read, theirs: theirs)
        }
        let nobodys = try lostUpdate("x", by: nobody)
        XCTAssertNil(nobodys.theirsVersion)
        XCTAssertNil(nobodys.baseVersion)
        XCTAssertEqual(try f.store.versions(ofPath: "x").count, 2, "both versions still kept, under retention")
        let others = try lostUpdate("y", by: other)
        XCTAssertNotNil(others.theirsVersion, "another user's saves are not limited by nobody's usage")
        XCTAssertEqual(try f.store.pinnedUsage(of: other).versions, 1)
    }

    /// Versions held for a user's live readers count in its budget; beyond it they are not held.
    func testHoldsOfAUsersReadersCountAndStopAtTheBudget() throws {
        let f = try fixture(versions: 2, retention: Retention(maxVersionsPerDocument: 1, maxTotalBytes: 1))
        var held: [VersionID] = []
        for n in 1...4 {
            try f.write("r\(n)", "read \(n)\n")
            let holder = "process:\(n):1"
            let kept = try XCTUnwrap(f.store.keepForReaders("r\(n)", reason: .base, holders: [holder], users: [holder: nobody]))
            held.append(kept.version.id)
        }
        XCTAssertEqual(f.store.heldVersions, Set(held.prefix(2)))
        XCTAssertEqual(try f.store.pinnedUsage(of: nobody).versions, 2)
        // Root's reader is held whatever nobody holds.
        try f.write("root", "root's\n")
        let roots = try XCTUnwrap(f.store.keepForReaders("root", reason: .base, holders: ["process:99:1"], users: ["process:99:1": 0]))
        XCTAssertTrue(f.store.heldVersions.contains(roots.version.id))
        // A reader that exits frees its room.
        f.store.releaseHolds(of: "process:1:1")
        XCTAssertEqual(try f.store.pinnedUsage(of: nobody).versions, 1)
    }

    /// A user at its budget that reloads (its base moves to the file as it is now) keeps a base:
    /// the one it lets go of makes the room.
    func testAUserAtItsBudgetKeepsABaseWhenItsBaseMoves() throws {
        let f = try fixture(versions: 1)
        XCTAssertTrue(isKept(try present(f, 1, as: nobody)))
        try f.store.preserveBeforeReplace("doc1.txt")
        try f.replace("doc1.txt", "saved\n")
        try f.store.rebase(presenter(1), path: "doc1.txt")
        try f.store.preserveBeforeInPlaceWrite("doc1.txt")
        let base = try XCTUnwrap(f.store.document(atPath: "doc1.txt")?.presenters.first).base
        XCTAssertTrue(isKept(base), "\(base)")
        guard case .kept(let id) = base else { return }
        XCTAssertEqual(try f.text(id), "saved\n")
        XCTAssertEqual(try f.store.pinnedUsage(of: nobody).versions, 1)
    }
}
