import Coordination
import Glibc
import Synchronization

/// The mount's own writes among the backing watcher's events.
///
/// With kernel passthrough, the kernel writes an open file's backing file itself, in the writing
/// process: fanotify then reports MODIFY and, at close, CLOSE_WRITE with that process's pid, as if it
/// had written to the backing folder directly. Those changes are the mount's own (the open's
/// coordinated access tells presenters once, at release), so the watcher must not tell them again.
///
/// An event of pid P on a file is the mount's own while P holds a passthrough write open of it. The
/// CLOSE_WRITE of that open and the daemon's RELEASE race each other, so each close is matched once,
/// whichever comes first: a release leaves a token for the close event to come, a close event seen
/// while the open is still held leaves a credit for the release. Unmatched ones lapse after
/// `matchWindow` (fanotify merges two closes of one process queued together into one event).
///
/// A file written, closed and removed at once may be forgotten by the kernel before the watcher
/// reads its events: then the event is matched by the path the file was opened by.
final class PassthroughWrites: Sendable {
    private struct Pending { var pid: pid_t; var until: ContinuousClock.Instant }
    /// Only kept, never used: the nodes' own locks guard them.
    private struct Retained: @unchecked Sendable { let object: AnyObject }
    private struct FileWrites {
        /// Kept alive while it has an entry, so that its identifier is not reused by another file.
        let node: Retained
        var open: [pid_t: Int] = [:]
        var releasedUnseen: [Pending] = []   // tokens: released, close event not seen yet
        var seenUnreleased: [Pending] = []   // credits: close event seen, release not yet
        var path: ItemPath?                   // as last opened
        var isEmpty: Bool { open.isEmpty && releasedUnseen.isEmpty && seenUnreleased.isEmpty }
        mutating func opened(by pid: pid_t, at path: ItemPath?) {
            open[pid, default: 0] += 1
            if let path { self.path = path }
        }
        mutating func lapse(_ now: ContinuousClock.Instant) {
            releasedUnseen.removeAll { $0.until < now }
            seenUnreleased.removeAll { $0.until < now }
        }
    }
    private let matchWindow: Duration
    private let files = Mutex<[ObjectIdentifier: FileWrites]>([:])
    /// Entries at which `released` drops every lapsed one (only under `files`' lock).
    private nonisolated(unsafe) var sweepAt = 64

    init(matchWindow: Duration = .seconds(2)) { self.matchWindow = matchWindow }

    /// A passthrough open for writing by `pid`, of the file at `path`.
    func opened(_ node: AnyObject, by pid: pid_t, at path: ItemPath? = nil) {
        files.withLock { table in
            table[ObjectIdentifier(node), default: FileWrites(node: Retained(object: node))].opened(by: pid, at: path)
        }
    }

    /// Its release.
    func released(_ node: AnyObject, by pid: pid_t) {
        let now = ContinuousClock.now
        files.withLock { table in
            // Changed in place (one hash, no copy of its lists to append to).
            guard let at = table.index(forKey: ObjectIdentifier(node)) else { return }
            let empty = Self.release(&table.values[at], pid: pid, now: now, until: now + matchWindow)
            if empty { table.remove(at: at) }
            // Tokens whose close event never came (merged with another) lapse here too, so their
            // entries do not keep nodes alive.
            if table.count >= sweepAt {
                table = table.filter { _, v in
                    var v = v
                    v.lapse(now)
                    return !v.isEmpty
                }
                sweepAt = max(64, table.count * 2)
            }
        }
    }

    /// `released` on one file's entry; true when nothing is left of it.
    private static func release(_ f: inout FileWrites, pid: pid_t, now: ContinuousClock.Instant, until: ContinuousClock.Instant) -> Bool {
        f.lapse(now)
        if let n = f.open[pid] { f.open[pid] = n > 1 ? n - 1 : nil }
        if let i = f.seenUnreleased.firstIndex(where: { $0.pid == pid }) {
            f.seenUnreleased.remove(at: i)
        } else {
            f.releasedUnseen.append(Pending(pid: pid, until: until))
        }
        return f.isEmpty
    }

    /// True when a change event of `pid` on `node` (or, when the kernel knows no such file any
    /// more, on the file opened by `path`) is the mount's own write; a close event is matched with
    /// its release.
    func isOwn(_ node: AnyObject?, path: ItemPath? = nil, pid: pid_t, close: Bool) -> Bool {
        let now = ContinuousClock.now
        return files.withLock { table in
            // By path, several files may have had that name: the one this process wrote.
            let keys = node.map { [ObjectIdentifier($0)] }
                ?? path.map { p in table.filter { $0.value.path == p }.map(\.key) } ?? []
            for key in keys {
                guard let at = table.index(forKey: key) else { continue }
                let (own, empty) = Self.match(&table.values[at], pid: pid, close: close, now: now, until: now + matchWindow)
                if empty { table.remove(at: at) }
                if own { return true }
            }
            return false
        }
    }

    /// `isOwn` on one file's entry (changed in place): whether the event is the mount's own, and
    /// whether nothing is left of the entry.
    private static func match(_ f: inout FileWrites, pid: pid_t, close: Bool, now: ContinuousClock.Instant,
                              until: ContinuousClock.Instant) -> (own: Bool, empty: Bool) {
        f.lapse(now)
        let held = f.open[pid] != nil
        let released = f.releasedUnseen.firstIndex { $0.pid == pid }
        var own = false
        if !close {
            own = held || released != nil
        } else if let released {
            f.releasedUnseen.remove(at: released)
            own = true
        } else if held {
            f.seenUnreleased.append(Pending(pid: pid, until: until))
            own = true
        }
        return (own, f.isEmpty)
    }
}
