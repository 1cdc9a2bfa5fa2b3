import Coordination
import Glibc
import LinuxGNU
import Loopback
import Synchronization

/// The mount's own writes among the backing watcher's events.
///
/// With kernel passthrough, the kernel writes an open file's backing file itself, in the writing
/// process: fanotify then reports MODIFY and, at the last close, CLOSE_WRITE with the pid of whoever
/// closed it last (a child that inherited the descriptor, too), as if it had written to the backing
/// folder directly, and the close event may be read long after the daemon's RELEASE (under load).
/// Those changes are the mount's own (the open's coordinated access tells presenters once, at
/// release), so the watcher must not tell them again.
///
/// An event is matched by what the file is, not by who closed it or when:
/// - while a process holds a passthrough write open of the file, its own events on it are the
///   mount's (and the file as the watcher then finds it is what the mount's writes left);
/// - while the mount has the file open for writing (its RELEASE not handled yet), a close event
///   by any process is the mount's (`mountsWhileHeld`): the last close of a mount open may come
///   from any process that inherited the descriptor (a child, a subshell), before the daemon
///   handles its RELEASE, and fanotify cannot tell that close from the close of a write made
///   beside the mount meanwhile. Either change is told once, by the open's release: it compares
///   the file with what it was at the open. Only when no open held now will tell anything (the file
///   is still as it was when each began) is such a close a change beside the mount, made before.
///   While every open held keeps its FLUSH (opened when the file had a presenter: `flushed`), the
///   processes that closed its descriptors are known, and a close by any other process is a
///   change beside the mount, told at once; the opens' releases then compare with the file as it
///   was told (`rebase`) and tell their own writes (`wrote`);
/// - otherwise an event is the mount's own when the file (the inode, whatever its names are now) is
///   still exactly as the mount's writes left it: the size, mtime and ctime of the daemon's own
///   descriptor at the release of a write open (or found at the last event matched above). A write
///   made beside the mount changes the ctime (multigrain timestamps: the release's `fstat` makes
///   the next change get a new one), so it is never taken for the mount's; an event that finds the
///   file changed is a change beside the mount, and what was remembered of the file is forgotten.
///
/// An open for writing the daemon serves itself (no passthrough: `-o passthrough=off`, an append of
/// a presented document) writes through the daemon's own descriptor, whose events the watcher
/// skips by the daemon's pid. Its release is remembered as a passthrough open's is (the file as it
/// left it, the daemon's descriptor's close to come), for that close may come with another pid: a
/// process the daemon's process spawned shares the descriptor from its fork until its exec
/// (close-on-exec) and may drop it last. While another such open of the file is held and has
/// written (its release tells the change), that close is the mount's too (`mountsWhileHeld`).
///
/// What is remembered of a released file is dropped once its close events were all matched, once
/// the file changed, or, beyond `keptReleases` files whose close event never came (fanotify merges
/// a process's two closes of one file queued together), oldest first.
final class PassthroughWrites: Sendable {
    /// What a write changes of a file, and which inode it is.
    struct FileState: Equatable, Sendable {
        var device: UInt64, inode: UInt64, size: Int64
        var mtime: (Int, Int), ctime: (Int, Int)

        init(device: UInt64 = 0, inode: UInt64 = 0, size: Int64, mtime: (Int, Int) = (0, 0), ctime: (Int, Int)) {
            self.device = device; self.inode = inode; self.size = size; self.mtime = mtime; self.ctime = ctime
        }

        init?(fd: Int32) {
            var st = stat()
            guard fstat(fd, &st) == 0 else { return nil }
            self.init(st)
        }

        init(_ st: stat) {
            self.init(device: UInt64(st.st_dev), inode: UInt64(st.st_ino), size: Int64(st.st_size),
                      mtime: (st.st_mtim.tv_sec, st.st_mtim.tv_nsec), ctime: (st.st_ctim.tv_sec, st.st_ctim.tv_nsec))
        }

        static func == (a: FileState, b: FileState) -> Bool {
            a.device == b.device && a.inode == b.inode && a.size == b.size
                && a.mtime == b.mtime && a.ctime == b.ctime
        }
    }

    /// How an event is matched.
    enum Whose: Equatable {
        /// A change made beside the mount: told.
        case beside
        /// The mount's own write, told at its release.
        case mounts
        /// A close while the mount holds the file open for writing: the mount's, or a write beside
        /// the mount that the open's release tells (the kernel's cached attributes are dropped).
        case mountsWhileHeld
    }

    /// The times and size of a file, to tell whether it changed since an open began.
    struct Times: Equatable, Sendable {
        var size: Int64, mtime: (Int, Int), ctime: (Int, Int)
        init(size: Int64, mtime: (Int, Int), ctime: (Int, Int)) { self.size = size; self.mtime = mtime; self.ctime = ctime }
        init(_ s: FileState) { self.init(size: s.size, mtime: s.mtime, ctime: s.ctime) }
        static func == (a: Times, b: Times) -> Bool { a.size == b.size && a.mtime == b.mtime && a.ctime == b.ctime }
    }

    /// Only kept, never used: the nodes' own locks guard them.
    private struct Retained: @unchecked Sendable { let object: AnyObject }
    /// At most this many closers are remembered per open (and modifiers per file); beyond, the open's
    /// closers count as unknown (`HeldOpen.flushes` false), as without FLUSH.
    static let maxPids = 64
    /// One passthrough open for writing held now.
    private struct HeldOpen {
        var id: ObjectIdentifier?
        /// The open (told through `wrote` and `rebase`), kept until its release.
        var object: Retained?
        var pid: pid_t
        /// The file when it began, or since the last change beside the mount told while it was held
        /// (nil: the open changes the file by itself, a create or O_TRUNC, or it is not known).
        var atOpen: Times?
        /// The kernel sends FLUSH for it (no FOPEN_NOFLUSH): every process that closed a descriptor
        /// of it is in `closers`. False: who closes it is not known.
        var flushes: Bool
        var closers: Set<pid_t> = []
    }
    private struct FileWrites {
        /// Kept alive while it has an entry: its state is read through it (whatever its names are
        /// now), and its identifier is not reused by another file.
        let node: Retained
        var open: [pid_t: Int] = [:]
        /// The opens held, by the open's identity.
        var opens: [HeldOpen] = []
        /// While a held open flushes: the processes whose writes to the file (MODIFY) were read and
        /// which are neither an opener nor a closer of a held open (a child that inherited a
        /// descriptor and has not closed it yet, or a writer beside the mount whose close is still to
        /// come); `modifiersLost` once more than `maxPids` were.
        var modifiers: Set<pid_t> = []
        var modifiersLost = false
        /// The closers of held opens released lately, with the watcher's read at the release (their
        /// close event is read by the next read but one, as a release's own, `releasedBy`).
        var releasedClosers: [(pid: pid_t, read: UInt64)] = []
        /// The file as the mount's writes left it (nil: not known, or changed since).
        var left: FileState?
        /// The kernel's file handle of the file, as fanotify reports it (once known), and whether
        /// the watcher read it through the node already (it does so at most once, see `whose`).
        var handle: FileHandleKey?
        var handleRead = false
        /// Releases whose close event was not seen yet, and close events seen before their release.
        var closesToCome = 0, closesSeenEarly = 0
        /// Released opens whose daemon's own descriptor's close event was not seen yet. The daemon
        /// closes its descriptor of an open after the release; the event comes with the daemon's pid
        /// (`closedByDaemon`), or, when another process held a reference to that descriptor and
        /// dropped it last, with that process's pid (a child of the daemon's process between its
        /// fork and its exec, which closes the descriptor as close-on-exec: an in-process daemon's
        /// host spawning a process), matched as any close of the file as the mount left it.
        var ownClosesToCome = 0
        /// The releases by pid, with the watcher's read at the time (`reads`), for a close event that
        /// finds the file changed again since (by a change beside the mount right after).
        var releasedBy: [(pid: pid_t, read: UInt64)] = []
        var path: ItemPath?                   // as last opened
        /// The opens for writing the daemon serves itself, held now (`servedOpened`).
        var served: [Retained] = []
        var releasedAt: UInt64 = 0            // order of the last release, to drop the oldest
        var born: UInt64 = 0                  // order of the entry's making: the newer node is the later
        var isEmpty: Bool {
            open.isEmpty && served.isEmpty && (left == nil || ownClosesToCome <= 0) && ((left == nil && releasedBy.isEmpty) || closesToCome <= 0)
        }
        /// `opened`'s change; the entry's `born`, to tell a new entry.
        mutating func opened(by pid: pid_t, _ held: HeldOpen, at path: ItemPath?) -> UInt64 {
            open[pid, default: 0] += 1
            opens.append(held)
            if let path { self.path = path }
            return born
        }
        /// `servedOpened`'s change; the entry's `born`, as `opened`'s.
        mutating func servedOpened(_ open: Retained, at path: ItemPath?) -> UInt64 {
            served.append(open)
            if let path { self.path = path }
            return born
        }
    }
    private struct Table {
        var files: [ObjectIdentifier: FileWrites] = [:]
        var byHandle: [FileHandleKey: ObjectIdentifier] = [:]
        var releases: UInt64 = 0, born: UInt64 = 0
        mutating func remove(_ key: ObjectIdentifier) {
            if let h = files.removeValue(forKey: key)?.handle, byHandle[h] == key { byHandle[h] = nil }
        }
        /// The entry at `i` let go, when it is empty.
        mutating func removeIfEmpty(at i: [ObjectIdentifier: FileWrites].Index) {
            guard files.values[i].isEmpty else { return }
            let (key, f) = files.remove(at: i)
            if let h = f.handle, byHandle[h] == key { byHandle[h] = nil }
        }

        /// Files whose close event never came (merged with another; no watcher reads them) beyond
        /// `kept` are dropped, oldest first; files held open stay.
        mutating func dropUnmatched(beyond kept: Int) {
            guard files.count > kept else { return }
            let old = files.filter { $0.value.open.isEmpty && $0.value.served.isEmpty }.sorted { $0.value.releasedAt < $1.value.releasedAt }
            for (k, _) in old.prefix(files.count - kept / 2) { remove(k) }
        }

        /// `key`'s file has the kernel handle `h` (nil: it could not be read), read through its node.
        /// When another entry has that handle, the two are one file the kernel forgot and looked up
        /// again, a node of its own each (the loopback's node goes with the kernel's FORGET; an
        /// entry keeps its own alive): the older entry is merged into the newer, the node opens and
        /// releases now name, unless both hold opens.
        mutating func learn(_ key: ObjectIdentifier, handle h: FileHandleKey?) {
            guard var f = files[key], f.handle == nil else { return }
            f.handleRead = true
            files[key] = f
            guard let h else { return }
            guard let other = byHandle[h], other != key, let o = files[other] else {
                files[key]?.handle = h
                byHandle[h] = key
                return
            }
            let (old, new) = o.born < f.born ? (other, key) : (key, other)
            guard files[old]?.open.isEmpty == true, files[old]?.served.isEmpty == true,
                  let from = files.removeValue(forKey: old), var into = files[new] else { return }
            for (pid, n) in from.open { into.open[pid, default: 0] += n }
            into.opens += from.opens
            into.modifiers.formUnion(from.modifiers)
            into.modifiersLost = into.modifiersLost || from.modifiersLost
            into.releasedClosers = Array((from.releasedClosers + into.releasedClosers).suffix(PassthroughWrites.maxPids))
            into.releasedBy = Array((from.releasedBy + into.releasedBy).suffix(8))
            if into.left == nil { into.left = from.left }
            into.closesToCome += from.closesToCome
            into.closesSeenEarly += from.closesSeenEarly
            into.ownClosesToCome += from.ownClosesToCome
            if into.path == nil { into.path = from.path }
            into.releasedAt = max(into.releasedAt, from.releasedAt)
            into.handle = h
            into.handleRead = true
            byHandle[h] = new
            files[new] = into
        }
    }
    private let table = Mutex(Table())
    /// The backing watcher's reads of its event queue so far. The kernel queues a close event
    /// before the daemon gets its RELEASE, so the event is in a read that began by the next one.
    let reads = Atomic<UInt64>(0)
    private let keptReleases: Int
    /// The file's state now, read through its node (nil when it cannot be read: the file is gone).
    private let stateOf: @Sendable (AnyObject) -> FileState?
    /// The file's kernel handle, read through its node (nil when it cannot be read).
    private let handleOf: @Sendable (AnyObject) -> FileHandleKey?
    /// Tells an open that it wrote (its release tells a change whatever the file's times say).
    private let wrote: @Sendable (AnyObject) -> Void
    /// Tells an open that its release compares the file with what it is now (a change beside the
    /// mount made while it was held was told already).
    private let rebase: @Sendable (AnyObject) -> Void
    /// Whether an open the daemon serves wrote (its release tells a change).
    private let servedWrote: @Sendable (AnyObject) -> Bool

    init(keptReleases: Int = 256, stateOf: @escaping @Sendable (AnyObject) -> FileState? = PassthroughWrites.backingState,
         handleOf: @escaping @Sendable (AnyObject) -> FileHandleKey? = PassthroughWrites.backingHandle,
         wrote: @escaping @Sendable (AnyObject) -> Void = { ($0 as? OpenFile)?.noteWritten() },
         rebase: @escaping @Sendable (AnyObject) -> Void = { ($0 as? OpenFile)?.noteChangedBeside() },
         servedWrote: @escaping @Sendable (AnyObject) -> Bool = { ($0 as? OpenFile)?.modified ?? false }) {
        self.keptReleases = keptReleases
        self.stateOf = stateOf
        self.handleOf = handleOf
        self.wrote = wrote
        self.rebase = rebase
        self.servedWrote = servedWrote
    }

    static func backingState(_ node: AnyObject) -> FileState? {
        guard let node = node as? BackingNode else { return nil }
        return (try? node.withDescriptor { FileState(fd: $0) }.get()) ?? nil
    }

    static func backingHandle(_ node: AnyObject) -> FileHandleKey? {
        guard let node = node as? BackingNode else { return nil }
        return (try? node.withDescriptor { LinuxCalls.identityHandle(of: $0).map(FileHandleKey.init) }.get()) ?? nil
    }

    /// A passthrough open for writing by `pid`, of the file at `path`; `open` is the open's identity
    /// and `atOpen` the file when it began (nil: the open changes the file by itself). `flushes`: the
    /// kernel sends FLUSH for it, and each is told here (`flushed`).
    func opened(_ node: AnyObject, by pid: pid_t, at path: ItemPath? = nil, open: AnyObject? = nil, atOpen: Times? = nil,
                flushes: Bool = false) {
        let held = HeldOpen(id: open.map { ObjectIdentifier($0) }, object: open.map { Retained(object: $0) },
                            pid: pid, atOpen: atOpen, flushes: flushes)
        table.withLock { t in
            // One look-up: the entry, made when new, is changed in place.
            let born = t.born + 1
            if t.files[ObjectIdentifier(node), default: FileWrites(node: Retained(object: node), born: born)]
                .opened(by: pid, held, at: path) == born { t.born = born }
        }
    }

    /// An open for writing of the file at `path` that the daemon serves itself (its writes come to
    /// the daemon, through its own descriptor): held until `servedReleased`.
    func servedOpened(_ node: AnyObject, at path: ItemPath? = nil, open: AnyObject) {
        table.withLock { t in
            // One look-up, as `opened`'s.
            let born = t.born + 1
            if t.files[ObjectIdentifier(node), default: FileWrites(node: Retained(object: node), born: born)]
                .servedOpened(Retained(object: open), at: path) == born { t.born = born }
        }
    }

    /// Its release; `state` is the file as the daemon's descriptor of it shows it now. The daemon
    /// closes that descriptor after this: its close event is the mount's, whoever drops it last.
    func servedReleased(_ node: AnyObject, open: AnyObject, state: FileState?) {
        table.withLock { t in
            let key = ObjectIdentifier(node)
            guard let e = t.files.index(forKey: key) else { return }
            t.releases += 1
            t.files.values[e].served.removeAll { $0.object === open }
            t.files.values[e].left = state
            t.files.values[e].ownClosesToCome += 1
            t.files.values[e].releasedAt = t.releases
            t.removeIfEmpty(at: e)
            t.dropUnmatched(beyond: keptReleases)
        }
    }

    /// A FLUSH of `open` (of the file) by `pid`: close(2), exit, close-on-exec or dup2 of one of its
    /// descriptors, in the closing process, before the last reference goes and the kernel queues
    /// its close event. One lock, nothing waited for.
    func flushed(_ node: AnyObject, open: AnyObject, by pid: pid_t) {
        table.withLock { t in
            let id = ObjectIdentifier(open)
            guard let e = t.files.index(forKey: ObjectIdentifier(node)) else { return }
            // Changed in place (a copy would copy the arrays and sets it changes).
            Self.flushed(&t.files.values[e], id, by: pid, wrote: wrote)
        }
    }

    private static func flushed(_ f: inout FileWrites, _ id: ObjectIdentifier, by pid: pid_t, wrote: (AnyObject) -> Void) {
        guard let i = f.opens.firstIndex(where: { $0.id == id }), f.opens[i].flushes else { return }
        if !f.opens[i].closers.contains(pid) {
            if f.opens[i].closers.count >= Self.maxPids { f.opens[i].flushes = false } else { f.opens[i].closers.insert(pid) }
        }
        // Its writes read before: through this open's descriptor (the mount's), not beside it.
        if f.modifiers.remove(pid) != nil, let o = f.opens[i].object { wrote(o.object) }
    }

    /// Its release; `state` is the file as the daemon's own descriptor of it shows it now (every
    /// write of this open is done). One lock, no system call: the file's kernel handle is learned
    /// from the watcher's events (`whose`), not read here. `handle` is for tests.
    func released(_ node: AnyObject, by pid: pid_t, open: AnyObject? = nil, state: FileState?, handle: FileHandleKey? = nil) {
        let id = open.map { ObjectIdentifier($0) }
        table.withLock { t in
            let key = ObjectIdentifier(node)
            guard let e = t.files.index(forKey: key) else { return }
            t.releases += 1
            // Changed in place (a copy would copy the arrays and dictionaries it changes).
            Self.released(&t.files.values[e], by: pid, id, state: state, read: reads.load(ordering: .relaxed), order: t.releases)
            if t.files.values[e].handle == nil, let handle {
                t.files.values[e].handle = handle
                t.byHandle[handle] = key
            }
            // After the handle, so that a removal lets go of it too.
            t.removeIfEmpty(at: e)
            t.dropUnmatched(beyond: keptReleases)
        }
    }

    private static func released(_ f: inout FileWrites, by pid: pid_t, _ id: ObjectIdentifier?, state: FileState?, read: UInt64, order: UInt64) {
        if let n = f.open[pid] { f.open[pid] = n > 1 ? n - 1 : nil }
        if let i = f.opens.firstIndex(where: { $0.id == id }) {
            for pid in f.opens[i].closers {
                if f.releasedClosers.count >= Self.maxPids { f.releasedClosers.removeFirst() }
                f.releasedClosers.append((pid, read))
            }
            f.opens.remove(at: i)
        }
        if f.open.isEmpty { f.modifiers = []; f.modifiersLost = false }
        f.left = state
        if f.closesSeenEarly > 0 { f.closesSeenEarly -= 1 } else {
            f.closesToCome += 1
            if f.releasedBy.count >= 8 { f.releasedBy.removeFirst() }
            f.releasedBy.append((pid, read))
        }
        // The daemon's own descriptor of the open closes after this.
        f.ownClosesToCome += 1
        f.releasedAt = order
    }

    /// The close event of one of the daemon's own descriptors of a file (the daemon's pid): of a
    /// released open's descriptor, which the daemon closes after the release. Found as `whose` finds
    /// a file (its handle, the node at its name, the path it was opened by); nothing else is read
    /// but, once, the handle of a node at the name that may be another file (`learnHandle`).
    /// False when the file may be remembered but was not found: the handle is not known, and no
    /// node or path was given (the watcher looks the node up only then).
    @discardableResult
    func closedByDaemon(handle: FileHandleKey? = nil, _ node: AnyObject?, path: ItemPath? = nil, name: String? = nil) -> Bool {
        if let handle, let node { learnHandle(of: node, for: handle, named: name ?? path?.name) }
        return table.withLock { t in
            var key: ObjectIdentifier?
            if let handle, let k = t.byHandle[handle] { key = k }
            else if let node, let f = t.files[ObjectIdentifier(node)], Self.mayBe(f, handle) { key = ObjectIdentifier(node) }
            else if node == nil, let path { key = t.files.first { $0.value.path == path && $0.value.ownClosesToCome > 0 }?.key }
            else if node == nil, path == nil, !t.files.isEmpty { return false }
            guard let key, let e = t.files.index(forKey: key), t.files.values[e].ownClosesToCome > 0 else { return true }
            t.files.values[e].ownClosesToCome -= 1
            if t.files.values[e].handle == nil, let handle, t.byHandle[handle] == nil {
                t.files.values[e].handle = handle
                t.byHandle[handle] = key
            }
            // After the handle, so that a removal lets go of the handle just learned too.
            t.removeIfEmpty(at: e)
            return true
        }
    }

    /// True while something of the file is remembered (for tests).
    func remembers(_ node: AnyObject) -> Bool {
        table.withLock { $0.files[ObjectIdentifier(node)] != nil }
    }

    /// True when a change event (`close`: CLOSE_WRITE) of `pid` is the mount's own write.
    func isOwn(handle: FileHandleKey? = nil, _ node: AnyObject?, path: ItemPath? = nil, pid: pid_t, close: Bool) -> Bool {
        whose(handle: handle, node, path: path, pid: pid, close: close) != .beside
    }

    /// Whose change event (`close`: CLOSE_WRITE) of `pid` is. The file is found by its kernel handle
    /// as the event reports it, else by the node known at the event's name (`name`, its last
    /// component; the node's, unless its handle says it is another file, `learnHandle`), else (no
    /// node: the kernel forgot the file) by `path`, the event's path, as the file was opened by.
    /// The watcher builds `path` only then: the event's name is enough otherwise (a path is a walk
    /// of /proc when its folder's is not kept). A handle not known yet may be of a file the mount
    /// released whose name changed since (renamed, replaced): the handles of the files no event has
    /// shown yet are read then, through their nodes, outside the lock, each at most once (so a
    /// release never reads one, and a file whose events come by the name it was opened by never
    /// needs it).
    func whose(handle: FileHandleKey? = nil, _ node: AnyObject?, path: ItemPath? = nil, name: String? = nil, pid: pid_t, close: Bool) -> Whose {
        if let handle, let node { learnHandle(of: node, for: handle, named: name ?? path?.name) }
        let read = reads.load(ordering: .relaxed)
        if let found = table.withLock({ lookUp(&$0, handle: handle, node, path: path, pid: pid, close: close, read: read) }) {
            return found
        }
        guard let handle else { return .beside }
        let unread = table.withLock { t in t.files.compactMap { $0.value.handle == nil && !$0.value.handleRead ? ($0.key, $0.value.node) : nil } }
        guard !unread.isEmpty else { return .beside }
        let handles = unread.map { ($0.0, handleOf($0.1.object)) }
        return table.withLock { t in
            for (key, h) in handles { t.learn(key, handle: h) }
            guard let key = t.byHandle[handle] else { return .beside }
            return matchEntry(&t, key, handle: nil, pid: pid, close: close, read: read)
        }
    }

    /// An event names its file by `handle`, and `node` is the node now at the event's `name`,
    /// whose file's handle is not known yet: the node's is read (once per file, outside the lock)
    /// when the handle names another entry (the same file under an old node and a new one,
    /// `Table.learn`), or when the node's file was opened by another name than the event's (the
    /// last components compared: a file moved to another folder under its name is not read): it
    /// may be another file, renamed over that name since the event (`zip` makes its archive's
    /// name, closes and removes it, then renames its temp file there), whose own events are still
    /// to come. A node whose handle is known and is not the event's is not the event's file
    /// (`lookUp`, `closedByDaemon`). A file whose events come by the name it was opened by takes
    /// the handle its first event reports, unread.
    private func learnHandle(of node: AnyObject, for handle: FileHandleKey, named name: String?) {
        guard table.withLock({ t in
            let key = ObjectIdentifier(node)
            guard let f = t.files[key], f.handle == nil, !f.handleRead else { return false }
            if let k = t.byHandle[handle] { return k != key }
            guard let name, let opened = f.path?.name else { return false }
            return opened != name
        }) else { return }
        let h = handleOf(node)
        table.withLock { $0.learn(ObjectIdentifier(node), handle: h) }
    }

    /// Whether the entry `f` may be the file of an event that names its file by `handle`: its
    /// handle is not known, or is that one.
    private static func mayBe(_ f: FileWrites, _ handle: FileHandleKey?) -> Bool {
        handle == nil || f.handle == nil || f.handle == handle
    }

    /// `whose` on the entries found now; nil when none was found.
    private func lookUp(_ t: inout Table, handle: FileHandleKey?, _ node: AnyObject?, path: ItemPath?, pid: pid_t, close: Bool, read: UInt64) -> Whose? {
        if let handle, let k = t.byHandle[handle] {
            if let e = t.files.index(forKey: k) { return matchEntry(&t, e, k, handle: handle, pid: pid, close: close, read: read) }
            t.byHandle[handle] = nil // (never left behind: see `matchEntry`)
        }
        if let node, let e = t.files.index(forKey: ObjectIdentifier(node)), Self.mayBe(t.files.values[e], handle) {
            return matchEntry(&t, e, ObjectIdentifier(node), handle: handle, pid: pid, close: close, read: read)
        }
        guard node == nil, let path else { return nil }
        let keys = t.files.filter { $0.value.path == path }.map(\.key)
        guard !keys.isEmpty else { return nil }
        for key in keys {
            let whose = matchEntry(&t, key, handle: handle, pid: pid, close: close, read: read)
            if whose != .beside { return whose }
        }
        return .beside
    }

    private func matchEntry(_ t: inout Table, _ key: ObjectIdentifier, handle: FileHandleKey?, pid: pid_t, close: Bool, read: UInt64) -> Whose {
        guard let e = t.files.index(forKey: key) else { return .beside }
        return matchEntry(&t, e, key, handle: handle, pid: pid, close: close, read: read)
    }

    /// The entry at `e` (of `key`), changed in place: a copy would copy the arrays and dictionaries
    /// `match` changes.
    private func matchEntry(_ t: inout Table, _ e: [ObjectIdentifier: FileWrites].Index, _ key: ObjectIdentifier,
                            handle: FileHandleKey?, pid: pid_t, close: Bool, read: UInt64) -> Whose {
        // The handle the event reports, for later events after a rename.
        if t.files.values[e].handle == nil, let handle, t.byHandle[handle] == nil {
            t.files.values[e].handle = handle
            t.byHandle[handle] = key
        }
        let whose = match(&t.files.values[e], pid: pid, close: close, read: read)
        // After the handle, so that a removal finds the handle just learned and lets go of it too.
        t.removeIfEmpty(at: e)
        return whose
    }

    /// `whose` on one file's entry (changed in place).
    private func match(_ f: inout FileWrites, pid: pid_t, close: Bool, read: UInt64) -> Whose {
        let now = stateOf(f.node.object)
        // Releases whose close event would have been read by now.
        f.releasedBy.removeAll { $0.read + 2 < read }
        f.releasedClosers.removeAll { $0.read + 2 < read }
        let token = f.releasedBy.firstIndex { $0.pid == pid }
        if f.open[pid] != nil {
            // Its writer's own event: the file now is what the mount's writes left.
            if let now { f.left = now }
            if close { f.closesSeenEarly += 1 } else {
                for o in f.opens where o.pid == pid { if let object = o.object { wrote(object.object) } }
            }
            return .mounts
        }
        let held = !f.open.isEmpty
        // While every open held flushes, who closed each of its descriptors is known.
        let closersKnown = held && f.opens.allSatisfy(\.flushes)
        let closesHeld = f.opens.contains { $0.closers.contains(pid) } || f.releasedClosers.contains { $0.pid == pid }
        if !close, closersKnown {
            if closesHeld {
                // A write through a held open's descriptor by a process that closed one of them.
                for o in f.opens where o.closers.contains(pid) { if let object = o.object { wrote(object.object) } }
            } else if !f.modifiersLost {
                // Whose it is, is known at its close or its FLUSH.
                if f.modifiers.count >= Self.maxPids { f.modifiersLost = true } else { f.modifiers.insert(pid) }
            }
        }
        // Gone (written, closed and removed at once: a change no one can read any more), or still
        // as the mount's writes left it.
        if let left = f.left, now == nil || now == left {
            // A close while the file is held may be one whose release is still to come: not counted.
            if close, !held {
                // The close of a released open's own file, or else of the daemon's descriptor of it
                // that another process dropped last.
                if f.closesToCome <= 0, f.ownClosesToCome > 0 { f.ownClosesToCome -= 1 } else { f.closesToCome -= 1 }
                if let token { f.releasedBy.remove(at: token) }
            }
            return .mounts
        }
        // The close of the daemon's descriptor of a released open, dropped last by another process,
        // after an open the daemon serves wrote the file again: that open's release tells the change.
        if close, f.ownClosesToCome > 0, f.served.contains(where: { servedWrote($0.object) }) {
            f.ownClosesToCome -= 1
            return .mountsWhileHeld
        }
        // The mount holds the file open for writing: a close is the last close of one of its opens
        // by a process that inherited the descriptor (its RELEASE still to come), or the close of a
        // write beside the mount, which fanotify does not tell apart. The open's release tells the
        // change either way, unless no open held will tell anything (the file is still as it was
        // when each began): then the change was made beside the mount before they began.
        // When every open held flushes (`flushes`), the last close of one of its descriptors is by a
        // process that flushed it: a close by any other process is a write beside the mount, told now.
        if close, held, !closersKnown || closesHeld {
            let unchanged = now.map { now in f.opens.allSatisfy { $0.atOpen == Times(now) } } ?? false
            if !unchanged { return .mountsWhileHeld }
        }
        // Changed beside the mount since: what was remembered no longer tells the mount's writes.
        f.left = nil
        // Yet this is the close of a release of this process's, read in the read that followed it:
        // the change beside the mount came right after (and has events of its own, later).
        if close, let token {
            f.releasedBy.remove(at: token)
            f.closesToCome -= 1
            return .mounts
        }
        if close, held, closersKnown {
            // Told now, as its writer's change: the opens held tell at their release only what
            // changed after it, unless a write not known to be beside the mount came before it (a
            // process that has not closed yet), or they wrote themselves (`wrote`).
            f.modifiers.remove(pid)
            if f.modifiers.isEmpty, !f.modifiersLost, let now {
                for i in f.opens.indices where f.opens[i].atOpen != nil {
                    f.opens[i].atOpen = Times(now)
                    if let o = f.opens[i].object { rebase(o.object) }
                }
            }
        }
        return .beside
    }
}
