import Coordination
import Glibc
import NameBytes
import Synchronization

/// Another node's changes among this node's backing watcher's events (docs/cluster.md, "Every
/// save one change").
///
/// Nodes of one cluster over one folder of one host (or over a file system whose changes fanotify
/// reports across hosts) see each other's writes in their backing watchers as changes made beside
/// the mount; the cluster tells them too (the writer's change record), so a presenter here would
/// hear one save through another node two or three times. Such a change is the cluster's to tell:
/// - while another node's access that writes an item runs here as a proxy (a presenter here was
///   asked for it, from before its writes to its change record), the watcher's events on the item
///   are held; when the proxy ends, the record has told the change, and the held events are
///   dropped; a proxy whose record told nothing of the item (its access wrote nothing there) lets
///   them be told then, once;
/// - once a record told a change of an item here (or an access of this node made one, or the
///   watcher told one), the file as it then was is remembered: a watcher's event that finds the
///   file still so (read late, after the record) is that change; one that finds it changed is a
///   change beside every mount, told, and remembered;
/// - a record whose node asked nobody here (a folder's presenters, which a write inside it does
///   not ask: nothing was held) that finds the file as the watcher told it, read before the record
///   came, is that tell's change: it tells nothing more here.
/// Matched by what the file is, not by who wrote it or when, as `PassthroughWrites` matches the
/// mount's own writes.
final class ClusterEchoes: Sendable {
    /// The file as a record left it; `nil` for an item that is gone.
    typealias FileState = PassthroughWrites.FileState?

    private struct Entry {
        /// Proxies that write the item (`inside`: everything in it too) running now.
        var writing = 0, writingInside = 0
        /// Events held while they ran, with who the watcher found made the first.
        var held: AccessOrigin?
        /// The file as the last change told here left it (a record's, this node's own access's, or
        /// one the watcher told).
        var told: FileState?
        /// That last change was told by the watcher (before any record of it came).
        var toldByWatcher = false
        var order: UInt64 = 0
        var isEmpty: Bool { writing == 0 && writingInside == 0 && held == nil && told == nil }
    }
    private struct Table {
        var entries: [ItemPath: Entry] = [:]
        var order: UInt64 = 0
        /// Any proxy that writes inside an item runs (then ancestors are looked at).
        var inside = 0
    }
    private let table = Mutex(Table())
    private let kept: Int
    private let stateOf: @Sendable (ItemPath) -> FileState

    init(kept: Int = 1024, stateOf: @escaping @Sendable (ItemPath) -> FileState) {
        self.kept = kept
        self.stateOf = stateOf
    }

    /// The state of `path` in the backing folder `backing`, not following a last symbolic link.
    static func backingState(_ backing: String) -> @Sendable (ItemPath) -> FileState {
        { path in
            var st = stat()
            let full = path.isRoot ? backing : backing + "/" + path.string
            guard full.withNameCString({ fstatat(AT_FDCWD, $0, &st, AT_SYMLINK_NOFOLLOW) }) == 0 else { return nil }
            return PassthroughWrites.FileState(st)
        }
    }

    /// Another node's access that writes `intents`' items runs here (its proxy was granted).
    func began(_ intents: [FileAccessIntent]) {
        table.withLock { t in
            for intent in intents where intent.isWriting {
                if intent.lockMode == .subtreeWrite {
                    t.entries[intent.path, default: Entry()].writingInside += 1
                    t.inside += 1
                } else {
                    t.entries[intent.path, default: Entry()].writing += 1
                }
            }
        }
    }

    /// A change record of another node tells these items' changes here (before its presenters
    /// hear): the files as they are now are that change (one take of the lock). With `matching`
    /// (a record whose node asked no presenter here, so that nothing was held while it wrote):
    /// returns the items whose change presenters here heard already, from the watcher, which read
    /// the writes before the record came and found the file as it still is; the record tells
    /// nothing more of them here.
    @discardableResult
    func told(_ paths: [ItemPath], matching: Bool = false) -> Set<ItemPath> {
        let states = paths.map { ($0, stateOf($0)) }
        return table.withLock { t in
            var heard = Set<ItemPath>()
            for (path, state) in states {
                let before = note(path, state, byWatcher: false, &t)
                if matching, before.toldByWatcher, let told = before.told, told == state { heard.insert(path) }
                t.entries[path]?.held = nil
            }
            trim(&t)
            // Held below a told item (a folder replaced): told with it.
            for path in paths {
                for (p, e) in t.entries where e.held != nil && path.isAncestor(of: p) {
                    t.entries[p]?.held = nil
                    if t.entries[p]?.isEmpty == true { t.entries[p] = nil }
                }
            }
            return heard
        }
    }

    /// An access of this node changed these items (its presenters heard, and other nodes will from
    /// its record): the files as they are now are that change. What the watcher reads later of
    /// another node finding them still so (its daemon letting go of a descriptor it kept, which
    /// changes nothing) is not told again.
    func changedHere(_ paths: [ItemPath]) {
        let states = paths.map { ($0, stateOf($0)) }
        table.withLock { t in
            for (path, state) in states { note(path, state, byWatcher: false, &t) }
            trim(&t)
        }
    }

    /// Notes `path`'s file as a change told here left it (`byWatcher`: the watcher told it, before
    /// any record of it came), the newest entry. Returns the entry as it was before.
    @discardableResult
    private func note(_ path: ItemPath, _ state: FileState, byWatcher: Bool, _ t: inout Table) -> Entry {
        t.order += 1
        let before = t.entries[path] ?? Entry()
        var e = before
        e.told = .some(state)
        e.toldByWatcher = byWatcher
        e.order = t.order
        t.entries[path] = e
        return before
    }

    /// The proxy of `began(intents)` ended; `told`: its access's change record told changes here.
    /// Returns the items whose events were held meanwhile when no record told anything (the access
    /// changed nothing, so what was seen was made beside it): the watcher tells them now, once each.
    /// Held events of an access that changed something were its own (its temporary files too,
    /// which its record does not name).
    func ended(_ intents: [FileAccessIntent], told recorded: Bool) -> [(path: ItemPath, origin: AccessOrigin, gone: Bool)] {
        let untold = table.withLock { t -> [(ItemPath, AccessOrigin)] in
            var out: [(ItemPath, AccessOrigin)] = []
            for intent in intents where intent.isWriting {
                guard var e = t.entries[intent.path] else { continue }
                if intent.lockMode == .subtreeWrite {
                    e.writingInside -= 1
                    t.inside -= 1
                } else {
                    e.writing -= 1
                }
                t.entries[intent.path] = e
            }
            for (path, e) in t.entries where e.held != nil && !isWritten(t, path, names: true) {
                if !recorded { out.append((path, e.held!)) }
                t.entries[path]?.held = nil
            }
            for (path, e) in t.entries where e.isEmpty { t.entries[path] = nil }
            return out
        }
        return untold.map { ($0.0, $0.1, stateOf($0.0) == nil) }
    }

    /// `names`: a name made, removed or renamed at `path`, which a write of its folder makes.
    private func isWritten(_ t: Table, _ path: ItemPath, names: Bool = false) -> Bool {
        if let e = t.entries[path], e.writing > 0 || e.writingInside > 0 { return true }
        if names, let parent = path.parent, let e = t.entries[parent], e.writing > 0 { return true }
        guard t.inside > 0 else { return false }
        var p = path.parent
        while let at = p {
            if let e = t.entries[at], e.writingInside > 0 { return true }
            p = at.parent
        }
        return false
    }

    /// Whether the watcher's event on `paths` (the item, or a rename's two names; `decisive`: the one
    /// whose file decides, a rename's destination; none for an event the watcher tells nothing of,
    /// a write's MODIFY: it must not take the file as told; `names`: a name made, removed or renamed,
    /// which another node's access writing its folder makes: a `mkdir`, a link, whose record tells
    /// it through the proxy that asked the folder's presenters here) is another node's
    /// change the cluster tells (held, or told already), or finds the file as presenters here were
    /// last told of it (a late close of a descriptor that changed nothing since: another node's
    /// daemon letting go of a file it kept): then the watcher tells nothing of it. Otherwise the
    /// file as it is now is what the watcher tells.
    func isEcho(_ paths: [ItemPath], decidedBy decisive: [ItemPath], names: Bool = false, origin: AccessOrigin) -> Bool {
        let held = table.withLock { t -> Bool in
            var held = false
            for path in paths where isWritten(t, path, names: names) {
                if t.entries[path]?.held == nil { t.entries[path, default: Entry()].held = origin }
                held = true
            }
            return held
        }
        if held { return true }
        let states = decisive.map { ($0, stateOf($0)) }
        return table.withLock { t in
            var echo = false
            for (path, state) in states {
                if let told = t.entries[path]?.told, told == state {
                    echo = true
                    continue
                }
                note(path, state, byWatcher: true, &t)
            }
            trim(&t)
            return echo
        }
    }

    private func trim(_ t: inout Table) {
        guard t.entries.count > kept else { return }
        let old = t.entries.filter { $0.value.writing == 0 && $0.value.writingInside == 0 && $0.value.held == nil }
            .sorted { $0.value.order < $1.value.order }
        for (path, _) in old.prefix(t.entries.count - kept / 2) { t.entries[path] = nil }
    }
}
