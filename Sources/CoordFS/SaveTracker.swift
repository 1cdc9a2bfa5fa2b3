import Coordination
import Dispatch
import Glibc
import MountPolicy
import Synchronization

/// Recognises the saves that take a document away for a moment: an editor renames it to a backup name
/// (whatever the name) and writes a new file; a checkout unlinks it and creates it again.
///
/// When a presented document is unlinked or renamed away, the write access taken for it is not
/// released: it waits here for `window` seconds. A create or write-open of the same path in
/// that time adopts it, so the presenter sees one relinquish before and one "did change" after the
/// whole save, and keeps presenting the same document. When nothing comes back, the window closes and
/// the access announces what really happened (a move or a deletion) and ends; a move, also as soon as
/// another access writes, truncates, renames or removes the new name (``moveArrives(at:unlessBackTo:)``).
final class SaveTracker: Sendable {
    /// How the document left (the operation policy's `SaveDeparture`).
    typealias Departure = SaveDeparture

    private struct Pending {
        let access: CoordinatedAccess
        let departure: Departure
        let generation: UInt64
    }

    private let pending = Mutex<(byPath: [ItemPath: Pending], generation: UInt64)>(([:], 0))
    /// Files just created and not told to their folder's presenters yet: the creating process, and
    /// what tells them.
    private let fresh = Mutex<(byPath: [ItemPath: Fresh], generation: UInt64)>(([:], 0))
    private struct Fresh {
        let pid: pid_t
        let generation: UInt64
        let reveal: @Sendable () -> Void
    }
    /// Saves just finished: the saving process, and until when (monotonic nanoseconds) the
    /// attributes it sets by path belong to that save.
    /// Expired entries are dropped when the table reaches `pruneAt`, which then becomes twice what
    /// is left (at least 64): a tool saving thousands of files within one window (an archive
    /// extractor) costs O(1) per save, where pruning at a fixed size filtered the whole table at
    /// every save.
    private let finished = Mutex<(table: [HashedPath: (pid: pid_t, until: UInt64)], pruneAt: Int)>(([:], 64))
    /// A path with its hash taken once (the standard library's SipHash, seeded at random per
    /// process, so nobody picks colliding names): the table of finished saves grows by one entry a
    /// save and is rehashed as it grows and when pruned, and each rehash hashed every path's
    /// components again (4,000 instructions a saved file when 2,000 were saved in one window).
    private struct HashedPath: Hashable {
        let path: ItemPath
        let hash: Int
        init(_ path: ItemPath) {
            self.path = path
            hash = path.hashValue
        }
        static func == (a: HashedPath, b: HashedPath) -> Bool { a.hash == b.hash && a.path == b.path }
        func hash(into hasher: inout Hasher) { hasher.combine(hash) }
    }
    let window: Double
    private let coordinator: Coordinator
    private let queue = DispatchQueue(label: "coordfs.saves")
    private let hooks = Mutex<(any DocumentHooks)?>(nil)

    func setDocumentHooks(_ h: (any DocumentHooks)?) { hooks.withLock { $0 = h } }

    init(window: Double, coordinator: Coordinator) {
        self.window = window
        self.coordinator = coordinator
    }

    /// `access` (a granted write on `path`) stays held until the document comes back or the window
    /// closes.
    func begin(_ path: ItemPath, access: CoordinatedAccess, departure: Departure) {
        let (generation, previous) = pending.withLock { state -> (UInt64, Pending?) in
            state.generation += 1
            let old = state.byPath.updateValue(Pending(access: access, departure: departure, generation: state.generation), forKey: path)
            return (state.generation, old)
        }
        if let previous { finish(path, previous) }
        queue.asyncAfter(deadline: .now() + window) { [self] in
            let expired = pending.withLock { state -> Pending? in
                guard let p = state.byPath[path], p.generation == generation else { return nil }
                state.byPath[path] = nil
                return p
            }
            if let expired { finish(path, expired) }
        }
    }

    /// The held access of a save in progress at `path`, handed over to the caller (who announces the
    /// change and releases it), or nil.
    func adopt(_ path: ItemPath) -> CoordinatedAccess? {
        // Looked up only when some save is in progress: hashing the path cost every create 700
        // instructions.
        guard let p = pending.withLock({ $0.byPath.isEmpty ? nil : $0.byPath.removeValue(forKey: path) }) else { return nil }
        if case .renamed(let backup, kept: true) = p.departure { p.access.announce(.subitemAppeared(backup)) }
        return p.access
    }

    /// Another access is about to write, truncate, rename or remove `path`, where a presented
    /// document was renamed moments ago: it moved, it is no save in progress. The move is told now
    /// (the document store follows it, its presenters hear didMove) so that what comes next at
    /// `path` reaches the document and its presenters. A rename back to `back` (the name it left)
    /// is left to ``adopt(_:)``.
    func moveArrives(at path: ItemPath, unlessBackTo back: ItemPath? = nil) {
        let moved = pending.withLock { state -> (ItemPath, Pending)? in
            guard !state.byPath.isEmpty, let entry = state.byPath.first(where: { from, p in
                guard case .renamed(let to, _) = p.departure else { return false }
                return to == path && from != back
            }) else { return nil }
            state.byPath[entry.key] = nil
            return (entry.key, entry.value)
        }
        if let (from, p) = moved { finish(from, p) }
    }

    /// True while a save holds `path`.
    func isPending(_ path: ItemPath) -> Bool { pending.withLock { !$0.byPath.isEmpty && $0.byPath[path] != nil } }

    /// The document did not come back: it really moved or was deleted. A deletion is now a
    /// coordinated delete, so presenters get `accommodatePresentedItemDeletion` (late: the file is
    /// already gone; the document store kept its last version). A presenter refusing it (or, with
    /// `strict`, not answering) cannot undo it: the deletion is then told without the access, as one
    /// seen beside the mount, so every presenter still hears of it and the log records it.
    private func finish(_ path: ItemPath, _ p: Pending) {
        switch p.departure {
        case .renamed(let to, _):
            hooks.withLock { $0 }?.didMove(from: path, to: to, by: p.access.origin)
            p.access.didMove(from: path, to: to)
            p.access.release()
        case .deleted:
            hooks.withLock { $0 }?.didDelete(path, by: p.access.origin)
            p.access.release()
            let origin = p.access.origin
            coordinator.coordinate([.writingIntent(with: path, options: .forDeleting)], origin: origin) { [coordinator] result in
                switch result {
                case .success(let deletion):
                    deletion.didDelete(path)
                    deletion.release()
                case .failure:
                    coordinator.announce(.deleted(path), origin: origin)
                }
            }
        }
    }

    /// `pid` finished saving `path` (its new contents are told): for `window` seconds, attributes
    /// it sets by path (a mode, times, an owner: copies with metadata, installs, archive extractors)
    /// are the rest of that save, not another change.
    func saved(_ path: ItemPath, by pid: pid_t) {
        guard window > 0 else { return }
        let now = DispatchTime.now().uptimeNanoseconds
        finished.withLock { f in
            if f.table.count >= f.pruneAt {
                f.table = f.table.filter { $0.value.until > now }
                f.pruneAt = max(64, f.table.count * 2)
            }
            f.table[HashedPath(path)] = (pid, now + UInt64(window * 1e9))
        }
    }

    /// True when attributes `pid` sets on `path` now belong to a save it just finished.
    func isAftermath(_ path: ItemPath, by pid: pid_t) -> Bool {
        let now = DispatchTime.now().uptimeNanoseconds
        return finished.withLock { f in
            guard !f.table.isEmpty, let entry = f.table[HashedPath(path)], entry.pid == pid else { return false }
            return entry.until > now
        }
    }

    /// `pid` just created a file at `path`. Its folder's presenters are told (`reveal`) once `window`
    /// passes, or at once when another process touches it (`settle`); if its creator removes it or
    /// renames it away before that, it was a temp file and nobody hears of it.
    func created(_ path: ItemPath, by pid: pid_t, reveal: @escaping @Sendable () -> Void) {
        let (generation, previous) = fresh.withLock { state -> (UInt64, Fresh?) in
            state.generation += 1
            let old = state.byPath.updateValue(Fresh(pid: pid, generation: state.generation, reveal: reveal), forKey: path)
            return (state.generation, old)
        }
        previous?.reveal()
        queue.asyncAfter(deadline: .now() + window) { [self] in
            let due = fresh.withLock { state -> Fresh? in
                guard let f = state.byPath[path], f.generation == generation else { return nil }
                state.byPath[path] = nil
                return f
            }
            due?.reveal()
        }
    }

    /// The process that created `path`, while nobody has been told of it yet.
    func creator(of path: ItemPath) -> pid_t? {
        fresh.withLock { $0.byPath.isEmpty ? nil : $0.byPath[path]?.pid }
    }

    /// Ends `path`'s wait: returns what tells its folder's presenters (call it, or drop it when the
    /// file turned out to be a temp), or nil when it was not waiting.
    func settle(_ path: ItemPath) -> (@Sendable () -> Void)? {
        fresh.withLock { $0.byPath.isEmpty ? nil : $0.byPath.removeValue(forKey: path)?.reveal }
    }

    /// Ends every pending save now (unmount).
    func flush() {
        let waiting = fresh.withLock { state -> [Fresh] in
            defer { state.byPath.removeAll() }
            return Array(state.byPath.values)
        }
        for f in waiting { f.reveal() }
        let all = pending.withLock { state -> [(ItemPath, Pending)] in
            defer { state.byPath.removeAll() }
            return state.byPath.map { ($0.key, $0.value) }
        }
        for (path, p) in all { finish(path, p) }
    }
}
