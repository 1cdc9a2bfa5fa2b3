extension Coordinator {
    /// True when at least one presenter is registered for exactly `path` (not an ancestor). Costs the
    /// path's depth.
    public func isPresented(_ path: ItemPath) -> Bool {
        lock.withLock {
            if presenters.isEmpty { return false }
            var node = presenters.root
            for component in path.components {
                guard let next = node.children[component] else { return false }
                node = next
            }
            return !node.records.isEmpty
        }
    }

    /// True when a presenter is registered for `path` or for a directory containing it: someone
    /// would hear about a change at `path`. Costs the path's depth. The mount asks it before treating
    /// an unlink or a rename as the first half of a save.
    public func isObserved(_ path: ItemPath) -> Bool {
        lock.withLock {
            if presenters.isEmpty { return false }
            var node = presenters.root
            if !node.records.isEmpty { return true }
            for component in path.components {
                guard let next = node.children[component] else { return false }
                node = next
                if !node.records.isEmpty { return true }
            }
            return false
        }
    }
}
