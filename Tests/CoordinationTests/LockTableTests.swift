@testable import Coordination
import Testing

/// The arbitration tree's memory: nodes of paths no access holds any more.
@Suite struct LockTableTests {
    /// `grep -r` of a source tree opens every file once per walk. Before, empty nodes were swept
    /// past 4,096, so each walk of a larger tree lost its nodes and made them again.
    @Test func aTreeWalkedAgainKeepsItsNodesAndEmptyNodesStayBounded() throws {
        let coordinator = Coordinator()
        func walk(_ folder: String, _ files: Int) throws {
            for i in 0..<files {
                let access = try #require(coordinator.tryCoordinateImmediately(.readingIntent(with: ItemPath("\(folder)/f\(i)")), origin: testOrigin))
                access.release()
            }
        }
        func nodes() -> Int { coordinator.lock.withLock { coordinator.locks.nodeCount } }
        try walk("tree", 9_000)
        #expect(nodes() == 9_002, "the root, the folder and its files")
        try walk("tree", 9_000)
        #expect(nodes() == 9_002, "the same walk again makes no node")
        try walk("other", 3 * LockTable.keptNodes)
        #expect(nodes() <= LockTable.keptNodes + 1, "empty nodes past the bound are swept")
        #expect(coordinator.lock.withLock { coordinator.locks.entryCount } == 0)
    }
}
