import Coordination
import DocumentStore
import Dispatch
import LinuxGNU
import Glibc
import NameBytes
import SystemPackage
import Synchronization

/// The mount's side of lost updates between processes that present nothing (docs/semantics.md,
/// "Lost updates"). The coordinated mount calls it at a few points, inside the operation's access:
///
/// - ``didRead(_:file:by:)`` after an open for reading: the process is an implicit reader of that
///   version (``ImplicitReaders``);
/// - ``beforeSave(_:by:_:mayRefuse:)`` before a process overwrites a document (open for writing,
///   truncate, rename over, unlink, rename away): ``LostUpdateDecision`` says whether it is a lost
///   update; if so the version it goes over (theirs) is kept and the save is pending (or refused),
///   and, lost update or not, the version is kept when another live process read it (its base);
/// - ``didSave(_:by:file:)`` once the new contents are in place (the handle's release, the rename,
///   the truncate): a pending lost update becomes a conflict in the store, and the saver's own
///   record moves to what it wrote.
///
/// The decision never blocks: the store's work is a clone or a copy and one transaction. The
/// versions kept for live readers are held for them in the store (retention never drops them) until
/// the reader reads or saves the path again or exits.
final class LostUpdates: Sendable {
    let readers: ImplicitReaders
    private let coordinator: Coordinator
    private let backingRoot: String
    private struct Config: Sendable {
        var mode: LostUpdateMode = .off
        var store: StoreService?
    }
    private let config = Mutex(Config())

    /// A late save in progress: what the saver had read, what it goes over (kept), and the saver's
    /// start as known when the save began (see ``ProcessKey``; it may have exited when the save lands).
    private struct Pending: Sendable {
        let read: FileIdentity
        let theirs: FileIdentity
        let saverStart: UInt64?
        let since: UInt64
    }
    private struct Key: Hashable, Sendable {
        let pid: pid_t
        let path: ItemPath
    }
    private let pending = Mutex<[Key: Pending]>([:])
    /// The versions live processes hold in the store (a reader's base, a late saver's theirs), by
    /// process and path: the store's holder names. Released when the process reads or saves that
    /// path again or exits, so retention cannot drop a lost update's base before it is recorded.
    private let holds = Mutex<[pid_t: [ItemPath: Set<String>]]>([:])
    /// A save begun by an unlink or a rename away that no new file completes is dropped after this.
    private static let pendingLifetime: UInt64 = 60_000_000_000

    init(coordinator: Coordinator, backingRoot: String, readers: ImplicitReaders = ImplicitReaders()) {
        self.coordinator = coordinator
        self.backingRoot = backingRoot
        self.readers = readers
        readers.onDeparture { [weak self] process in self?.releaseHolds(of: process.pid, at: nil) }
    }

    /// Turns tracking on (`keep`, `refuse`, with the store that keeps versions and records
    /// conflicts) or off.
    func configure(_ mode: LostUpdateMode, store: StoreService?) {
        config.withLock { $0 = Config(mode: store == nil ? .off : mode, store: store) }
    }

    var mode: LostUpdateMode { config.withLock { $0.mode } }

    /// `pid` (of user `uid`) opened `path` for reading only (`fd`: its backing file): it read that version.
    func didRead(_ path: ItemPath, file fd: Int32, by pid: pid_t, uid: UInt32) {
        guard mode != .off else { return }
        var st = stat()
        guard fstat(fd, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG else { return }
        readers.noteRead(path, identity: Self.identity(st), by: pid, uid: uid)
        // What it read before is no longer its base.
        releaseHolds(of: pid, at: path)
    }

    /// The store's name for what `process` holds.
    static func holderName(_ process: ProcessKey) -> String { "process:\(process.pid):\(process.start)" }

    /// Keeps the file at `path` for `holders` (held in the store until they let go).
    private func keep(_ path: ItemPath, reason: VersionReason, for holders: [ProcessKey], store: StoreService, by origin: AccessOrigin) {
        let names = holders.map(Self.holderName)
        // Each holder's user: what it holds counts in that user's budget of pinned versions.
        var users: [String: UInt32] = [:]
        for (process, name) in zip(holders, names) {
            users[name] = process.pid == origin.pid ? origin.uid : readers.user(of: process.pid)
        }
        guard store.keepForReaders(path, reason: reason, holders: names, users: users, by: origin) else { return }
        holds.withLock { table in
            for (process, name) in zip(holders, names) { table[process.pid, default: [:]][path, default: []].insert(name) }
        }
    }

    /// `pid` no longer needs what it holds at `path` (nil: anywhere).
    private func releaseHolds(of pid: pid_t, at path: ItemPath?) {
        let released = holds.withLock { table -> [(String, ItemPath)] in
            guard !table.isEmpty, let paths = table[pid] else { return [] }
            if let path {
                guard let names = paths[path] else { return [] }
                table[pid]?[path] = nil
                if table[pid]?.isEmpty == true { table[pid] = nil }
                return names.map { ($0, path) }
            }
            table[pid] = nil
            return paths.flatMap { path, names in names.map { ($0, path) } }
        }
        guard !released.isEmpty, let store = config.withLock({ $0.store }) else { return }
        for (name, path) in released { store.documentStore.releaseHolds(of: name, atPath: path.string) }
    }

    /// `origin` is about to overwrite the document at `path`. Returns the errno to fail the
    /// operation with (a refused late save), or nil to go on. `mayRefuse`: false for the first half
    /// of a save that cannot be told from a removal or a move (unlink, rename away): kept, never refused.
    func beforeSave(_ path: ItemPath, by origin: AccessOrigin, _ overwrite: LostUpdateDecision.Overwrite, mayRefuse: Bool = true) -> Errno? {
        let (mode, store) = config.withLock { ($0.mode, $0.store) }
        // The fast path of every write: nobody read this path.
        guard mode != .off, let store, readers.hasReaders(path) else { return nil }
        let key = Key(pid: origin.pid, path: path)
        pending.withLock { _ = $0.removeValue(forKey: key) }
        guard let current = identity(of: path) else { return nil }
        // Only the saver's own presenter of the document takes its save out of these rules (its
        // conflicts are that presenter's): another process presenting it (a viewer, `coordfs
        // present`, another user who may read it) changes nothing for the saver's lost update.
        let ownPresenter = coordinator.isPresented(path, byProcess: origin.pid)
        let read = readers.readVersion(at: path, by: origin.pid)
        switch LostUpdateDecision.decide(mode: mode == .refuse && !mayRefuse ? .keep : mode, presented: ownPresenter, read: read, current: current) {
        case .refuse:
            store.recordRefusedLostUpdate(path, by: origin, errno: LostUpdateDecision.refusal)
            return Errno(rawValue: LostUpdateDecision.refusal)
        case .keep(let read, let theirs):
            // Theirs, held for the saver until its save is recorded (the conflict pins it then).
            let saver = readers.process(origin.pid)
            keep(path, reason: overwrite == .replace ? .replaced : .beforeWrite, for: saver.map { [$0] } ?? [], store: store, by: origin)
            let now = DispatchTime.now().uptimeNanoseconds
            pending.withLock { table in
                if table.count >= 64 { table = table.filter { now - $0.value.since < Self.pendingLifetime } }
                table[key] = Pending(read: read, theirs: theirs, saverStart: saver?.start, since: now)
            }
        case .save:
            // Not this process's lost update; but another live process read this very version:
            // keep it as that reader's base while it can still be had (whoever presents the document).
            let others = readers.liveReaders(path, current: current, except: origin.pid)
            if !others.isEmpty { keep(path, reason: .base, for: others, store: store, by: origin) }
        }
        return nil
    }

    /// Another node is about to change `path` (with `inside`, anything in it): true when a process
    /// here read something there (then ``keepBeforeChangeElsewhere(_:inside:by:)``). Cheap: no `stat`.
    func readBeforeChangeElsewhere(_ path: ItemPath, inside: Bool) -> Bool {
        mode != .off && !readers.pathsRead(at: path, inside: inside).isEmpty
    }

    /// Another node (`origin`) is about to change `path` (with `inside`, anything in it), on the
    /// shared folder, where this node's store is never told before: the versions live processes
    /// here read and still see there are kept as their bases, as before a change through this
    /// node (``beforeSave(_:by:_:mayRefuse:)``), so a late save of one of them over that change
    /// finds its base.
    func keepBeforeChangeElsewhere(_ path: ItemPath, inside: Bool, by origin: AccessOrigin) {
        let (mode, store) = config.withLock { ($0.mode, $0.store) }
        guard mode != .off, let store else { return }
        for p in readers.pathsRead(at: path, inside: inside) {
            guard let current = identity(of: p) else { continue }
            let live = readers.liveReaders(p, current: current, except: 0)
            if !live.isEmpty { keep(p, reason: .base, for: live, store: store, by: origin) }
        }
    }

    /// `origin`'s save of `path` landed (`fd`: the file it wrote, when it was a handle; else the
    /// path is looked at).
    func didSave(_ path: ItemPath, by origin: AccessOrigin, file fd: Int32? = nil) {
        let (mode, store) = config.withLock { ($0.mode, $0.store) }
        guard mode != .off, let store else { return }
        let late = pending.withLock { $0.isEmpty ? nil : $0.removeValue(forKey: Key(pid: origin.pid, path: path)) }
        guard late != nil || readers.hasReaders(path) else { return }
        var st = stat()
        if let fd {
            guard fstat(fd, &st) == 0, st.st_nlink > 0 else { return }
        } else {
            guard let found = statPath(path) else { return }
            st = found
        }
        if let late { store.recordLostUpdate(path, by: origin, saverStart: late.saverStart, read: late.read, theirs: late.theirs) }
        readers.noteSaved(path, identity: Self.identity(st), by: origin.pid)
        // Its base and theirs are the conflict's now (pinned), or no longer its own.
        releaseHolds(of: origin.pid, at: path)
    }

    /// A rename through the mount, as the save rules see it.
    struct RenameSave: Sendable {
        let src: ItemPath
        let dst: ItemPath
        let srcIsFile: Bool
        let dstIsFile: Bool
        let dstExists: Bool
        let flags: UInt32
        /// With RENAME_EXCHANGE, the document an atomic swap save saves as the mount recognised it
        /// (the other name held a file its caller made moments ago in a presented folder, or one of
        /// a temp name: `OperationPolicy.Rename.swapSavedDocument`).
        var swapSaved: ItemPath? = nil

        /// A file renamed over a file: a save of `dst` (temp file renamed over, `mv` over).
        var replaces: Bool { srcIsFile && dstIsFile && flags & LinuxCalls.renameExchange == 0 }
        /// A file renamed to a new name: maybe the first half of a save of `src` (renamed to a
        /// backup name, then written anew).
        var departs: Bool { srcIsFile && !dstExists && flags & LinuxCalls.renameExchange == 0 }
        /// Two files exchanged (RENAME_EXCHANGE): each name holds the other's file now.
        var exchangesFiles: Bool { srcIsFile && dstIsFile && flags & LinuxCalls.renameExchange != 0 }
    }

    /// The document a rename saves for `pid`: `dst` renamed over; with an exchange of two files (an
    /// atomic swap save: the new file exchanged with the document, then removed), the swap save's
    /// document, and where the mount could not tell it (nobody presents the folder, the new file's
    /// name is no temp name), the one name of the two that `pid` read: the other is its new file.
    /// Nil for a process that read both (two documents swapped: each one's contents are still
    /// there) or neither (never read, no lost update).
    private func saved(by r: RenameSave, _ pid: pid_t) -> ItemPath? {
        if r.replaces { return r.dst }
        guard r.exchangesFiles else { return nil }
        if let document = r.swapSaved { return document }
        let readSource = readers.readVersion(at: r.src, by: pid) != nil, readDestination = readers.readVersion(at: r.dst, by: pid) != nil
        guard readSource != readDestination else { return nil }
        return readSource ? r.src : r.dst
    }

    /// Before a rename (inside its access): a save of a document (renamed over, or exchanged with
    /// the caller's new file), or `src` leaving for a backup name.
    func beforeRename(_ r: RenameSave, by origin: AccessOrigin) -> Errno? {
        guard mode != .off else { return nil }
        if let document = saved(by: r, origin.pid) { return beforeSave(document, by: origin, .replace) }
        if r.departs { _ = beforeSave(r.src, by: origin, .replace, mayRefuse: false) }
        return nil
    }

    /// After the rename: a save of a document landed. (A departure waits for the new file.) The
    /// saver's read records are as they were before the rename: the same document is found.
    func didRename(_ r: RenameSave, by origin: AccessOrigin) {
        guard mode != .off else { return }
        if let document = saved(by: r, origin.pid) { didSave(document, by: origin) }
    }

    /// A write open of `origin` ended without changing the contents: no save.
    func didNotSave(_ path: ItemPath, by origin: AccessOrigin) {
        pending.withLock { table in
            if !table.isEmpty { table[Key(pid: origin.pid, path: path)] = nil }
        }
    }

    // MARK: Files

    private func statPath(_ path: ItemPath) -> stat? {
        var st = stat()
        let absolute = backingRoot + "/" + path.string
        guard absolute.withNameCString({ lstat($0, &st) }) == 0, (st.st_mode & S_IFMT) == S_IFREG else { return nil }
        return st
    }

    private func identity(of path: ItemPath) -> FileIdentity? { statPath(path).map(Self.identity) }

    static func identity(_ st: stat) -> FileIdentity {
        FileIdentity(device: UInt64(st.st_dev), inode: UInt64(st.st_ino), size: Int64(st.st_size),
                     modificationTimeNanoseconds: Int64(st.st_mtim.tv_sec) * 1_000_000_000 + Int64(st.st_mtim.tv_nsec))
    }
}
