import Glibc
import Synchronization
import Coordination

/// The presented paths by the file they name, for a file with several names (hard links,
/// `CoordinatedFileSystem.presentedName`): each presented path's file as last looked at, looked
/// at again only for the paths a presenter registered at, went away from, or was told a change,
/// deletion, appearance or move of since (`mark`). So finding a file's presented names costs the
/// changes since the last look, not a look at every presented path: with 10,000 presenters an
/// open of a file with two names took about 100 ms when each open looked at all of them.
final class PresentedInodes: Sendable {
    /// A file: its device and inode.
    struct File: Hashable, Sendable {
        let dev: UInt64
        let ino: UInt64
        init(_ st: stat) { dev = UInt64(st.st_dev); ino = UInt64(st.st_ino) }
    }

    private struct State {
        var fileAt: [ItemPath: File] = [:]
        var namesOf: [File: Set<ItemPath>] = [:]
        /// Paths to look at again before the next answer.
        var stale: Set<ItemPath> = []
        /// More marks than this since the last look: everything is looked at again from the
        /// presented paths then (once, however many marks), so that marks nobody asks about do
        /// not gather without end.
        var rebuild = false
    }

    private let state = Mutex(State())
    private static let staleLimit = 4096

    /// `paths` may name another file now (called under the coordinator's lock: takes note only).
    func mark(_ paths: [ItemPath]) {
        if paths.isEmpty { return }
        state.withLock { s in
            if s.rebuild { return }
            s.stale.formUnion(paths)
            if s.stale.count > Self.staleLimit { s.rebuild = true; s.stale = [] }
        }
    }

    /// The paths last seen naming `file`, after looking again at the marked ones: `presented`
    /// gives every presented path (for a rebuild), `look` the file a presented path names now
    /// (nil: none, or not presented any more). Each candidate is still to be checked by the caller.
    func names(of file: File, presented: () -> [ItemPath], look: (ItemPath) -> File?) -> [ItemPath] {
        let (stale, rebuild) = state.withLock { s -> (Set<ItemPath>, Bool) in
            defer { s.stale = []; s.rebuild = false }
            return (s.stale, s.rebuild)
        }
        let paths = rebuild ? Set(presented()) : stale
        let seen = paths.map { ($0, look($0)) } // outside the lock: system calls
        return state.withLock { s in
            if rebuild { s.fileAt = [:]; s.namesOf = [:] }
            for (p, f) in seen {
                if let old = s.fileAt.removeValue(forKey: p) {
                    s.namesOf[old]?.remove(p)
                    if s.namesOf[old]?.isEmpty == true { s.namesOf[old] = nil }
                }
                if let f {
                    s.fileAt[p] = f
                    s.namesOf[f, default: []].insert(p)
                }
            }
            return Array(s.namesOf[file] ?? [])
        }
    }
}
