import NameBytes

/// One intent's hold (or queued claim) on a path.
struct LockEntry {
    let owner: CoordinatedAccess
    let mode: LockMode
}

/// A node of the path trie shared by arbitration (``LockTable``) and presenters
/// (``PresenterRegistry``): the fast path walks one path once and sees both.
final class PathNode {
    var children: [ExactName: PathNode] = [:]
    var entries: [LockEntry] = []
    /// Entries strictly below this node: a subtree write checks its subtree only when non-zero.
    var descendantEntries = 0
    /// Entries here with `.subtreeWrite`: descendants check this node only when non-zero.
    var subtreeWrites = 0
    /// Presenters registered at this node.
    var records = PresenterSlots()
    /// Presenters strictly below this node, so descendant searches stop at empty subtrees.
    var descendantPresenters = 0

    /// Nothing here or below: the node can go.
    var isUnused: Bool {
        entries.isEmpty && descendantEntries == 0 && records.isEmpty && descendantPresenters == 0
    }
}

/// The arbitration tree: who holds or waits for which path, keyed by path components.
///
/// Rules (checked by ``firstBlocker(path:mode:blocks:)``; `blocks` adds purpose, queue order and
/// presenter exemptions):
/// - same item: readers share; any write excludes every other access;
/// - an entry on a strict ancestor conflicts only when it is a subtree write;
/// - an entry on a strict descendant conflicts only when the request is a subtree write.
///
/// Empty nodes are not pruned at once: the same paths are used again and again (one file's
/// opens and writes), so nodes are kept and swept only when there are more than `keptNodes` and
/// empty ones dominate.
/// Not thread-safe; the coordinator's lock guards it.
struct LockTable {
    let root: PathNode
    private(set) var nodeCount = 1
    private(set) var entryCount = 0

    /// The owner of the first entry that conflicts with `mode` on `path` and for which `blocks`
    /// says yes, or nil.
    @inline(__always)
    func firstBlocker(path: ItemPath, mode: LockMode, blocks: (CoordinatedAccess) -> Bool) -> CoordinatedAccess? {
        var node = root
        for component in path.components {
            if node.subtreeWrites > 0, let found = Self.subtreeBlocker(in: node, blocks: blocks) { return found }
            guard let next = node.children[ExactName(component)] else { return nil }
            node = next
        }
        return Self.blocker(at: node, mode: mode, blocks: blocks)
    }

    init(root: PathNode) {
        self.root = root
    }

    @inline(__always)
    static func subtreeBlocker(in node: PathNode, blocks: (CoordinatedAccess) -> Bool) -> CoordinatedAccess? {
        for entry in node.entries where entry.mode == .subtreeWrite && blocks(entry.owner) { return entry.owner }
        return nil
    }

    @inline(__always)
    static func blocker(at node: PathNode, mode: LockMode, blocks: (CoordinatedAccess) -> Bool) -> CoordinatedAccess? {
        for entry in node.entries where (entry.mode != .read || mode != .read) && blocks(entry.owner) {
            return entry.owner
        }
        if mode == .subtreeWrite && node.descendantEntries > 0 {
            return firstBlocker(below: node, blocks: blocks)
        }
        return nil
    }

    private static func firstBlocker(below node: PathNode, blocks: (CoordinatedAccess) -> Bool) -> CoordinatedAccess? {
        for child in node.children.values {
            for entry in child.entries where blocks(entry.owner) { return entry.owner }
            if child.descendantEntries > 0, let found = firstBlocker(below: child, blocks: blocks) { return found }
        }
        return nil
    }

    /// The fast path in one walk: inserts the entry unless something blocks it; returns the blocker.
    /// `presentersNearby` is set when a presenter is registered at, above or below `path`.
    mutating func insertIfFree(path: ItemPath, mode: LockMode, owner: CoordinatedAccess,
                               presentersNearby: inout Bool,
                               blocks: (CoordinatedAccess) -> Bool) -> CoordinatedAccess? {
        var node = root
        var blocker: CoordinatedAccess?
        var incremented = 0
        var nearby = false
        for component in path.components {
            if node.subtreeWrites > 0, let found = Self.subtreeBlocker(in: node, blocks: blocks) {
                blocker = found
                break
            }
            if !node.records.isEmpty { nearby = true }
            node.descendantEntries += 1
            incremented += 1
            node = child(of: node, component)
        }
        if blocker == nil {
            blocker = Self.blocker(at: node, mode: mode, blocks: blocks)
            presentersNearby = nearby || !node.records.isEmpty || node.descendantPresenters > 0
        }
        if let blocker {
            // Undo the optimistic counts (rare: the caller falls back to the queued path).
            var undo = root
            for component in path.components.prefix(incremented) {
                undo.descendantEntries -= 1
                undo = undo.children[ExactName(component)]!
            }
            return blocker
        }
        node.entries.append(LockEntry(owner: owner, mode: mode))
        if mode == .subtreeWrite { node.subtreeWrites += 1 }
        entryCount += 1
        return nil
    }

    @inline(__always)
    mutating func child(of node: PathNode, _ component: String) -> PathNode {
        if let next = node.children[ExactName(component)] { return next }
        let next = PathNode()
        node.children[ExactName(component)] = next
        nodeCount += 1
        return next
    }

    mutating func insert(path: ItemPath, mode: LockMode, owner: CoordinatedAccess) {
        var node = root
        for component in path.components {
            node.descendantEntries += 1
            node = child(of: node, component)
        }
        node.entries.append(LockEntry(owner: owner, mode: mode))
        if mode == .subtreeWrite { node.subtreeWrites += 1 }
        entryCount += 1
    }

    mutating func remove(path: ItemPath, mode: LockMode, owner: CoordinatedAccess) {
        var node = root
        for component in path.components {
            guard let next = node.children[ExactName(component)] else { return }
            node.descendantEntries -= 1
            node = next
        }
        if let at = node.entries.firstIndex(where: { $0.owner === owner && $0.mode == mode }) {
            node.entries.remove(at: at)
            if mode == .subtreeWrite { node.subtreeWrites -= 1 }
            entryCount -= 1
        }
        if nodeCount > Self.keptNodes && nodeCount > 16 * (entryCount + 1) {
            sweep()
        }
    }

    /// Empty nodes are kept up to this many (a few MB): a tree walked again and again, each file
    /// opened once (`grep -r` of a source tree), keeps its nodes instead of losing them to a sweep
    /// every few thousand opens and making them again on the next walk.
    static let keptNodes = 16_384

    /// Drops every empty subtree.
    private mutating func sweep() {
        var removed = 0
        func prune(_ node: PathNode) {
            for (key, child) in node.children {
                if child.isUnused {
                    removed += count(child)
                    node.children[key] = nil
                } else {
                    prune(child)
                }
            }
        }
        func count(_ node: PathNode) -> Int { 1 + node.children.values.reduce(0) { $0 + count($1) } }
        prune(root)
        nodeCount = max(1, nodeCount - removed)
    }

    /// Every distinct owner with an entry, in request order.
    func owners() -> [CoordinatedAccess] {
        var seen = Set<ObjectIdentifier>()
        var result: [CoordinatedAccess] = []
        func visit(_ node: PathNode) {
            for entry in node.entries where seen.insert(ObjectIdentifier(entry.owner)).inserted {
                result.append(entry.owner)
            }
            for child in node.children.values { visit(child) }
        }
        visit(root)
        return result.sorted { $0.id < $1.id }
    }
}
