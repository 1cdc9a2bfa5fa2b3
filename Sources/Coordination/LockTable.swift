/// One intent's hold (or queued claim) on a path.
struct LockEntry {
    let owner: CoordinatedAccess
    let mode: LockMode
}

/// A node of the arbitration trie.
final class LockNode {
    var children: [String: LockNode] = [:]
    var entries: [LockEntry] = []
    /// Entries strictly below this node: a subtree write checks its subtree only when non-zero.
    var descendantEntries = 0
    /// Entries here with `.subtreeWrite`: descendants check this node only when non-zero.
    var subtreeWrites = 0
}

/// The arbitration tree: who holds or waits for which path, keyed by path components.
///
/// Rules (checked by ``firstBlocker(path:mode:blocks:)``; `blocks` adds purpose, queue order and
/// presenter exemptions):
/// - same item: readers share; any write excludes every other access;
/// - an entry on a strict ancestor conflicts only when it is a subtree write;
/// - an entry on a strict descendant conflicts only when the request is a subtree write.
///
/// Not thread-safe; the coordinator's lock guards it.
struct LockTable {
    let root = LockNode()

    /// The owner of the first entry that conflicts with `mode` on `path` and for which `blocks`
    /// says yes, or nil.
    @inline(__always)
    func firstBlocker(path: ItemPath, mode: LockMode, blocks: (CoordinatedAccess) -> Bool) -> CoordinatedAccess? {
        var node = root
        for component in path.components {
            if node.subtreeWrites > 0 {
                for entry in node.entries where entry.mode == .subtreeWrite && blocks(entry.owner) {
                    return entry.owner
                }
            }
            guard let next = node.children[component] else { return nil }
            node = next
        }
        for entry in node.entries where (entry.mode != .read || mode != .read) && blocks(entry.owner) {
            return entry.owner
        }
        if mode == .subtreeWrite && node.descendantEntries > 0 {
            return Self.firstBlocker(below: node, blocks: blocks)
        }
        return nil
    }

    private static func firstBlocker(below node: LockNode, blocks: (CoordinatedAccess) -> Bool) -> CoordinatedAccess? {
        for child in node.children.values {
            for entry in child.entries where blocks(entry.owner) { return entry.owner }
            if child.descendantEntries > 0, let found = firstBlocker(below: child, blocks: blocks) { return found }
        }
        return nil
    }

    func insert(path: ItemPath, mode: LockMode, owner: CoordinatedAccess) {
        var node = root
        for component in path.components {
            node.descendantEntries += 1
            if let next = node.children[component] {
                node = next
            } else {
                let next = LockNode()
                node.children[component] = next
                node = next
            }
        }
        node.entries.append(LockEntry(owner: owner, mode: mode))
        if mode == .subtreeWrite { node.subtreeWrites += 1 }
    }

    func remove(path: ItemPath, mode: LockMode, owner: CoordinatedAccess) {
        _ = Self.remove(from: root, components: path.components, index: 0, mode: mode, owner: owner)
    }

    /// Returns true when `node` became empty and its parent can drop it.
    private static func remove(from node: LockNode, components: [String], index: Int, mode: LockMode, owner: CoordinatedAccess) -> Bool {
        if index == components.count {
            if let at = node.entries.firstIndex(where: { $0.owner === owner && $0.mode == mode }) {
                node.entries.remove(at: at)
                if mode == .subtreeWrite { node.subtreeWrites -= 1 }
            }
        } else {
            let key = components[index]
            guard let child = node.children[key] else { return false }
            node.descendantEntries -= 1
            if remove(from: child, components: components, index: index + 1, mode: mode, owner: owner) {
                node.children[key] = nil
            }
        }
        return node.entries.isEmpty && node.children.isEmpty
    }

    /// Every distinct owner with an entry, in request order.
    func owners() -> [CoordinatedAccess] {
        var seen = Set<ObjectIdentifier>()
        var result: [CoordinatedAccess] = []
        func visit(_ node: LockNode) {
            for entry in node.entries where seen.insert(ObjectIdentifier(entry.owner)).inserted {
                result.append(entry.owner)
            }
            for child in node.children.values { visit(child) }
        }
        visit(root)
        return result.sorted { $0.id < $1.id }
    }
}
