import NameBytes

extension Coordinator {
    /// True when at least one presenter is registered for exactly `path` (not an ancestor). Costs the
    /// path's depth.
    public func isPresented(_ path: ItemPath) -> Bool {
        lock.withLock { presenterNode(path).map { !$0.records.isEmpty } ?? false }
    }

    /// True when process `pid` registered a presenter for `path` itself (not only for a folder above
    /// it): that process's accesses to the item are its presenter's (the lost-update rules leave its
    /// saves to that presenter's own conflicts). Costs the path's depth.
    public func isPresented(_ path: ItemPath, byProcess pid: Int32) -> Bool {
        lock.withLock { presenterNode(path)?.records.first(ownedBy: pid) != nil }
    }

    /// True when a presenter is registered for `path` or for an item inside it (a folder whose move
    /// takes presented documents along). Costs the path's depth.
    public func isPresented(atOrBelow path: ItemPath) -> Bool {
        lock.withLock { presenterNode(path).map { !$0.records.isEmpty || $0.descendantPresenters > 0 } ?? false }
    }

    /// Every path a presenter is registered for here, each once (files and folders, in no order).
    /// Costs the number of presenters: the mount asks it only for a file with several names (hard
    /// links), to find which of them are presented.
    public func presentedPaths() -> [ItemPath] {
        lock.withLock {
            if presenters.isEmpty { return [] }
            var seen = Set<ItemPath>()
            return presenters.byID.values.compactMap { seen.insert($0.path).inserted ? $0.path : nil }
        }
    }

    /// True when any presenter is registered here.
    public var hasPresenters: Bool { lock.withLock { !presenters.isEmpty } }

    /// The presenter trie's node of `path`, nil when no presenter is at or below it (call with the
    /// lock held). Costs the path's depth.
    private func presenterNode(_ path: ItemPath) -> PathNode? {
        if presenters.isEmpty { return nil }
        var node = presenters.root
        for component in path.components {
            guard let next = node.child(named: component) else { return nil }
            node = next
        }
        return node
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
                guard let next = node.child(named: component) else { return false }
                node = next
                if !node.records.isEmpty { return true }
            }
            return false
        }
    }
}

extension Coordinator {
    /// A presenter registered by process `pid` for `path` or, failing that, for the nearest directory
    /// containing it. The mount makes an access by that process on behalf of that presenter, so a
    /// presenter is never asked about its own process's reads and writes (its `FileCoordinator`
    /// accessor writing through the mount, a `coordfs present --on-save` hook saving the file).
    public func presenter(ownedBy pid: Int32, at path: ItemPath) -> PresenterID? {
        lock.withLock {
            if presenters.isEmpty { return nil }
            var node = presenters.root
            var found = node.records.first(ownedBy: pid)?.id
            for component in path.components {
                guard let next = node.child(named: component) else { break }
                node = next
                if let own = node.records.first(ownedBy: pid) { found = own.id }
            }
            return found
        }
    }
}
