import Foundation
import Glibc
import XCTest
@testable import DocumentStore

/// Retention's size rule is fair between users (docs/document-store.md, "Retention and garbage
/// collection"): when the kept versions are over `maxTotalBytes`, the user holding the most
/// unpinned bytes loses its own oldest versions first, so one user's churn on its own documents
/// cannot push out another user's kept versions while that user holds less than the churner.
final class FairRetentionTests: XCTestCase {
    let nobody: uid_t = 65534

    /// Keeps a version of `name` (written with `text`, owned by `owner`) as a deletion does.
    private func keep(_ f: Fixture, _ name: String, _ text: String, owner: uid_t) throws {
        try f.write(name, text)
        XCTAssertEqual(chown(f.path(name), owner, owner), 0, "chown needs root")
        try f.store.preserveBeforeDelete(name)
        XCTAssertEqual(unlink(f.path(name)), 0)
    }

    func testOneUsersChurnEvictsItsOwnVersionsFirst() throws {
        // 10 bytes a version, room for 6.
        let f = try Fixture.onDisk(StoreConfiguration(retention: Retention(maxVersionsPerDocument: 100, maxTotalBytes: 60)))
        try keep(f, "root1", "root one.\n", owner: 0)
        try keep(f, "root2", "root two.\n", owner: 0)
        for i in 1...40 { try keep(f, "n\(i)", String(format: "nobody%02d.\n", i), owner: nobody) }
        let kept = try f.store.allVersions()
        let paths = Set(kept.map(\.path))
        XCTAssertTrue(paths.isSuperset(of: ["root1", "root2"]), "root's versions survive nobody's churn: \(paths.sorted())")
        XCTAssertEqual(paths.subtracting(["root1", "root2"]), ["n37", "n38", "n39", "n40"], "nobody keeps its newest")
        XCTAssertLessThanOrEqual(kept.reduce(0) { $0 + $1.size }, 60)

        // A holder over the others loses its oldest even when another's are older; once the
        // holders are level, the oldest goes first (with one holder: oldest first, as before).
        try keep(f, "other1", "other 1..\n", owner: 1000)
        try keep(f, "other2", "other 2..\n", owner: 1000)
        let after = Set(try f.store.allVersions().map(\.path))
        XCTAssertEqual(after, ["root1", "root2", "n39", "n40", "other1", "other2"], "\(after.sorted())")
    }

    func testFairEvictionOrder() {
        var e = FairEviction()
        // holder 0: 2 × 10; holder 1: 5 × 10; no holder: 1 × 30.
        e.add(0, holder: 0, size: 10)
        e.add(1, holder: nil, size: 30)
        e.add(2, holder: 0, size: 10)
        for i in 3...7 { e.add(i, holder: 1, size: 10) }
        var order: [Int] = []
        while let i = e.next() { order.append(i) }
        // 1 holds 50: 3, 4 (then 30 each: no-holder's version 1 is older), ...
        XCTAssertEqual(order, [3, 4, 1, 5, 0, 6, 2, 7])
    }
}
