import NameBytes

/// One intent's hold (or queued claim) on a path.
struct LockEntry {
    let owner: CoordinatedAccess
    let mode: LockMode
}

/// A node of the path trie shared by arbitration (``LockTable``) and presenters
/// (``PresenterRegistry``): the fast path walks one path once and sees both.
///
/// Every field is guarded by the coordinator's lock, so none is checked for exclusive access at
/// run time (`@exclusivity(unchecked)`: those checks were a fifth of a grant's instructions).
final class PathNode {
    /// The node above, nil at the root. Unowned: a node is held by its parent's `children` and a
    /// subtree is dropped only when nothing in it is held (``isUnused``), so a node that is
    /// reachable (the trie, an access's ``CoordinatedAccess/leaf``) has a live parent.
    unowned(unsafe) let parent: PathNode?
    /// The children by name, hashed with the standard library's seeded SipHash (a hostile user who
    /// picks names cannot make chains long). Change them only through ``child(named:)``,
    /// ``child(named:made:)`` and ``removeChild(_:)``, which keep ``recent`` true.
    @exclusivity(unchecked) private(set) var children: [ExactName: PathNode] = [:]
    /// The child found or made last, with its name: the walks of one folder's files pass through
    /// the same folder again and again (a create, its folder's access, the release, the unlink),
    /// and a comparison of the name's bytes costs a tenth of hashing it. Always one of `children`.
    @exclusivity(unchecked) private(set) var recent: (name: String, node: PathNode)?
    @exclusivity(unchecked) var entries: [LockEntry] = []
    /// Entries strictly below this node: a subtree write checks its subtree only when non-zero.
    @exclusivity(unchecked) var descendantEntries = 0
    /// Entries here with `.subtreeWrite`: descendants check this node only when non-zero.
    @exclusivity(unchecked) var subtreeWrites = 0
    /// Presenters registered at this node.
    @exclusivity(unchecked) var records = PresenterSlots()
    /// Presenters strictly below this node, so descendant searches stop at empty subtrees.
    @exclusivity(unchecked) var descendantPresenters = 0

    init(parent: PathNode? = nil) {
        self.parent = parent
    }

    /// Nothing here or below: the node can go.
    var isUnused: Bool {
        entries.isEmpty && descendantEntries == 0 && records.isEmpty && descendantPresenters == 0
    }

    /// The child named `name` (by its bytes), or nil.
    @inline(__always)
    func child(named name: String) -> PathNode? {
        if let recent, ExactName.same(recent.name, name) { return recent.node }
        guard let found = children[ExactName(name)] else { return nil }
        recent = (name, found)
        return found
    }

    /// The child named `name`, made when there is none (one hashing of the name either way);
    /// `made` says whether it was.
    func child(named name: String, made: inout Bool) -> PathNode {
        if let recent, ExactName.same(recent.name, name) { return recent.node }
        let found = Self.take(&children[ExactName(name), default: Self.make(parent: self, &made)])
        recent = (name, found)
        return found
    }

    private static func make(parent: PathNode, _ made: inout Bool) -> PathNode {
        made = true
        return PathNode(parent: parent)
    }

    @inline(__always)
    private static func take(_ node: inout PathNode) -> PathNode { node }

    /// Drops the child at `key` and its subtree.
    func removeChild(_ key: ExactName) {
        if let recent, ExactName.same(recent.name, key.string) { self.recent = nil }
        children[key] = nil
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
            guard let next = node.child(named: component) else { return nil }
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
    /// `presentersNearby` is set when a presenter is registered at, above or below `path`; `leaf`
    /// to the entry's node when it is inserted (for ``remove(at:mode:owner:)``).
    mutating func insertIfFree(path: ItemPath, mode: LockMode, owner: CoordinatedAccess,
                               presentersNearby: inout Bool, leaf: inout PathNode?,
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
                undo = undo.child(named: component)!
            }
            return blocker
        }
        node.entries.append(LockEntry(owner: owner, mode: mode))
        if mode == .subtreeWrite { node.subtreeWrites += 1 }
        entryCount += 1
        leaf = node
        return nil
    }

    @inline(__always)
    mutating func child(of node: PathNode, _ component: String) -> PathNode {
        var made = false
        let next = node.child(named: component, made: &made)
        if made { nodeCount += 1 }
        return next
    }

    /// Inserts the entry; returns its node (for ``remove(at:mode:owner:)``).
    @discardableResult
    mutating func insert(path: ItemPath, mode: LockMode, owner: CoordinatedAccess) -> PathNode {
        var node = root
        for component in path.components {
            node.descendantEntries += 1
            node = child(of: node, component)
        }
        node.entries.append(LockEntry(owner: owner, mode: mode))
        if mode == .subtreeWrite { node.subtreeWrites += 1 }
        entryCount += 1
        return node
    }

    mutating func remove(path: ItemPath, mode: LockMode, owner: CoordinatedAccess) {
        var node = root
        for component in path.components {
            guard let next = node.child(named: component) else { return }
            node.descendantEntries -= 1
            node = next
        }
        removeEntry(at: node, mode: mode, owner: owner)
    }

    /// Removes the entry that ``insert(path:mode:owner:)`` or ``insertIfFree`` put at `leaf`,
    /// without walking (or hashing) the path again: the counts of the nodes above are taken back
    /// through their parents, the same nodes the walk from the root would pass (a node with an
    /// entry at or below it is never dropped, so `leaf` is still in the tree).
    mutating func remove(at leaf: PathNode, mode: LockMode, owner: CoordinatedAccess) {
        var above = leaf.parent
        while let node = above {
            node.descendantEntries -= 1
            above = node.parent
        }
        removeEntry(at: leaf, mode: mode, owner: owner)
    }

    private mutating func removeEntry(at node: PathNode, mode: LockMode, owner: CoordinatedAccess) {
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
                    node.removeChild(key)
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
