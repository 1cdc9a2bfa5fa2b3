@testable import Coordination
import NameBytes
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

/// The grant's and the release's short cuts through the tree (the child a node found last, taken
/// again after comparing its name's bytes; a release taking its entry back from the node the
/// grant put it at, through the nodes' parents) decide and leave exactly what the walks from the
/// root by hashed names did: checked against a model of the arbitration rules and a census of
/// the tree, while presenters come and go (dropping nodes) and a sweep drops empty subtrees.
@Suite struct LockTableShortCutTests {
    /// A presenter that is never asked anything: it only makes and drops nodes.
    final class Quiet: FilePresenter {
        let presentedItemPath: ItemPath?
        init(_ path: ItemPath) { presentedItemPath = path }
        func wantsAsk(_ ask: PresenterAsk) -> Bool { false }
    }

    struct Held {
        let access: CoordinatedAccess
        let path: ItemPath
        let mode: LockMode
    }

    /// What the documented rules say about a new access next to the held ones.
    static func conflicts(_ path: ItemPath, _ mode: LockMode, with held: [Held]) -> Bool {
        held.contains { h in
            if h.path == path { return h.mode != .read || mode != .read }
            if h.path.isAncestor(of: path) { return h.mode == .subtreeWrite }
            if path.isAncestor(of: h.path) { return mode == .subtreeWrite }
            return false
        }
    }

    /// The tree is what walks by hashed names see: every held entry at its path's node (its leaf
    /// that node), each node's counts the census of its subtree, every remembered child a child.
    /// Returns what is wrong (checked as plain code: the tree is walked after every step).
    static func census(_ coordinator: Coordinator, _ held: [Held]) -> [String] {
        coordinator.lock.withLock {
            var wrong: [String] = []
            let root = coordinator.locks.root
            for h in held {
                var node: PathNode? = root
                for component in h.path.components { node = node?.children[ExactName(component)] }
                guard let node else {
                    wrong.append("\(h.path) is not in the tree")
                    continue
                }
                if !node.entries.contains(where: { $0.owner === h.access && $0.mode == h.mode }) { wrong.append("no entry at \(h.path)") }
                if let leaf = h.access.leaf, leaf !== node { wrong.append("the leaf of \(h.path) is not its node") }
            }
            var entries = 0
            func visit(_ node: PathNode) -> Int {
                if let recent = node.recent, node.children[ExactName(recent.name)] !== recent.node {
                    wrong.append("the remembered child \(recent.name) is not a child")
                }
                var below = 0
                for (name, child) in node.children {
                    if child.parent !== node { wrong.append("\(name) does not know its parent") }
                    below += visit(child)
                }
                if node.descendantEntries != below { wrong.append("\(node.descendantEntries) entries below, counted \(below)") }
                if node.subtreeWrites != node.entries.count(where: { $0.mode == .subtreeWrite }) { wrong.append("subtree writes miscounted") }
                entries += node.entries.count
                return below + node.entries.count
            }
            _ = visit(root)
            if entries != held.count || coordinator.locks.entryCount != held.count {
                wrong.append("\(entries) entries in the tree, \(coordinator.locks.entryCount) counted, \(held.count) held")
            }
            return wrong
        }
    }

    @Test(arguments: [1, 2])
    func theShortCutsDecideAndLeaveWhatTheWalksDid(seed: UInt64) async throws {
        // Synchronous work that yields now and then: the suites' asynchronous tests (presenter asks,
        // deadlines) share the cooperative pool's threads, one a core.
        var rng = SeededGenerator(state: seed)
        let coordinator = Coordinator()
        // Names that share lengths and first bytes, and the NFC and NFD spellings of one name
        // (two names on Linux), so that a remembered child is often the wrong one.
        let names = ["a", "b", "ab", "ba", "caf\u{E9}", "cafe\u{301}", "c"]
        func randomPath() -> ItemPath {
            let depth = 1 + Int(rng.next() % 3)
            return try! ItemPath(components: (0..<depth).map { _ in names[Int(rng.next() % UInt64(names.count))] })
        }
        var held: [Held] = []
        var presenters: [(Quiet, PresenterID)] = []
        var granted = 0, refused = 0
        for step in 0..<2_000 {
            if step % 50 == 0 { await Task.yield() }
            switch rng.next() % 20 {
            case 0..<9:
                let p = randomPath()
                let intent: FileAccessIntent
                switch rng.next() % 3 {
                case 0: intent = .readingIntent(with: p)
                case 1: intent = .writingIntent(with: p)
                default: intent = .writingIntent(with: p, options: .forDeleting)
                }
                let expected = Self.conflicts(p, intent.lockMode, with: held)
                let access = coordinator.tryCoordinateImmediately(intent, origin: testOrigin)
                #expect((access == nil) == expected, "\(intent) next to \(held.map { "\($0.mode) \($0.path)" })")
                if let access {
                    held.append(Held(access: access, path: p, mode: intent.lockMode))
                    granted += 1
                } else {
                    refused += 1
                }
            case 9..<15:
                guard !held.isEmpty else { continue }
                held.remove(at: Int(rng.next() % UInt64(held.count))).access.release()
            case 15..<18:
                let presenter = Quiet(randomPath())
                presenters.append((presenter, try coordinator.addFilePresenter(presenter, owner: testOrigin)))
            default:
                guard !presenters.isEmpty else { continue }
                coordinator.removeFilePresenter(presenters.remove(at: Int(rng.next() % UInt64(presenters.count))).0)
            }
            let wrong = Self.census(coordinator, held)
            try #require(wrong.isEmpty, "after step \(step): \(wrong)")
        }
        #expect(granted > 200 && refused > 200, "both decisions were made often: \(granted) granted, \(refused) refused")
        // A sweep while some accesses are held drops empty subtrees only.
        for i in 0..<(LockTable.keptNodes + 100) {
            if i % 500 == 0 { await Task.yield() }
            try #require(coordinator.tryCoordinateImmediately(.readingIntent(with: ItemPath("other/f\(i)")), origin: testOrigin)).release()
        }
        #expect(coordinator.lock.withLock { coordinator.locks.nodeCount } < LockTable.keptNodes)
        #expect(Self.census(coordinator, held) == [])
        for h in held { h.access.release() }
        for (presenter, _) in presenters { coordinator.removeFilePresenter(presenter) }
        #expect(Self.census(coordinator, []) == [])
    }
}
