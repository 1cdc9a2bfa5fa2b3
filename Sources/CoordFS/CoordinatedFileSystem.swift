import Dispatch
import Coordination
import FuseKit
import Glibc
import Loopback
import MountPolicy
import NameBytes
import SystemPackage
import Synchronization
import LinuxGNU

/// The coordinated mount: every open, create, write, truncate, rename and delete an unmodified tool
/// makes through the mount is a coordinated access (docs/semantics.md has the whole table). Presenters
/// are asked before and told after, exactly as for a cooperating app.
///
/// A FUSE worker thread never waits here: when an access cannot be granted at once (a conflicting
/// access, a presenter to ask), the request is parked and answered from the coordinator's completion.
/// Reads and writes on an open file are not coordinated again: the open's access covers them.
public final class CoordinatedFileSystem: FuseFileSystem, @unchecked Sendable {
    public let loopback: Loopback
    public let coordinator: Coordinator
    public let options: CoordinationOptions
    let names: ProcessNames
    let saves: SaveTracker
    let readPolicy: CoordinationPolicy
    let writePolicy: CoordinationPolicy
    /// An append's (``HandlePlan/appends``) and a change of names' (create, mkdir, link, symlink,
    /// mknod, unlink, rmdir, rename): a write that does not wait for other programs' files open for
    /// reading, which it changes no byte of (``OperationPolicy/waits(write:pastOpenReaders:_:)``).
    let pastReadersPolicy: CoordinationPolicy
    /// Which intents, store hooks and announcements each operation is (docs/semantics.md).
    let policy: OperationPolicy
    /// The document store's hooks (set by the store service), called for presented documents only.
    private let documentHooks = Mutex<(any DocumentHooks)?>(nil)
    /// Open write handles by backing node, so that a chmod or utimes by path from the process that
    /// holds the file open for writing joins that open's access (vim's fchmod after writing).
    let openWriters = Mutex<[ObjectIdentifier: [(handle: HandleAccess, file: OpenFile)]]>([:])
    /// Requests that went ahead past such opens held without writing (`probeStuckHolders`): those
    /// opens, and when (uptime ns). Taken by the request's open for writing (`track`), into
    /// `changesPast`; dropped after `passedKept` otherwise (a read, a request that failed). Weak:
    /// an open's descriptor closes with its object, which this must not keep past its release.
    let passedIdle = Mutex<[RequestID: (files: [WeakOpenFile], at: UInt64)]>([:])
    /// Opens for writing of requests that went ahead past opens held without writing, by open:
    /// at their release the file as they left it is not those opens' change (`OpenFile.noteChangedPast`).
    let changesPast = Mutex<[ObjectIdentifier: [WeakOpenFile]]>([:])
    static let passedKept: UInt64 = 60_000_000_000
    struct WeakOpenFile: @unchecked Sendable { weak var file: OpenFile? }
    /// Every coordinated open (for reading or writing), by the access it holds, with when it was
    /// opened (uptime ns), from its reply to its release: a waiting request goes ahead past opens
    /// held without writing (`idleCandidates`), whose file the name they hold no longer leads to
    /// (`leftItsName`), or that append and were opened a second ago (`appendingAWhile`).
    let opensByAccess = Mutex<[RequestID: [(file: OpenFile, at: UInt64)]]>([:])

    /// The opens holding access `id` that may be held without writing: opens for writing in place,
    /// neither creates nor O_TRUNC opens (`OpenFile.mayWriteNothing`, `OpenFile.wroteNothing`).
    private func idleCandidates(_ id: RequestID) -> [(file: OpenFile, at: UInt64)] {
        opensByAccess.withLock { $0[id]?.filter { $0.file.mayWriteNothing } ?? [] }
    }
    /// Of each file with write opens tracked: the file's state (size, mtime, ctime) when a release
    /// last told its change while another write open of it was tracked. A release that finds the
    /// file just so tells nothing: the change it sees (another open's write, which a release tells
    /// whoever wrote it) was told. Dropped with the file's last tracked open.
    let toldStates = Mutex<[ObjectIdentifier: FileState]>([:])
    /// Opens answered ESTALE because their file was removed under the kernel's name (`open`): by
    /// node, the process and when (monotonic ns).
    private let staleOpens = Mutex<[ObjectIdentifier: (pid: pid_t, at: UInt64)]>([:])
    /// When `/proc/locks` was last read for a waiting request, what it said and the CPU time the read took (`lockWaits(readAfter:)`).
    private let lockWaitsSeen = Mutex<(at: UInt64, waits: FileLockWaits, cost: UInt64)?>(nil)
    /// Passthrough writes, for the backing watcher to tell from changes made outside the mount.
    let passthroughWrites = PassthroughWrites()
    /// For tests: milliseconds a release waits after its reply before it is told and forgotten (a
    /// RELEASE handled late, as under load).
    let releaseDelay = Atomic<Int>(0)
    /// Implicit readers and their late saves (docs/semantics.md, "Lost updates"); off until the store configures it.
    let lostUpdates: LostUpdates
    /// The mounted session, for `forgetCached` (weak: the session owns this file system).
    private let kernel = Mutex(WeakSession())
    private struct WeakSession { weak var session: FuseSession? }
    /// Each user's requests waiting at once (`max_user_waits`).
    let waits: UserCounts

    /// `backing`: the path this process reaches the backing folder by for the lost-update readers'
    /// checks (the daemon's held descriptor, `StateFolder.io`); nil: the loopback's.
    public init(loopback: Loopback, coordinator: Coordinator, options: CoordinationOptions, maxUserWaits: Int = PeerLimits().maxUserWaits,
                backing: String? = nil) {
        self.loopback = loopback
        names = ProcessNames(limit: loopback.descriptors.callerNames)
        waits = UserCounts(limit: maxUserWaits)
        self.coordinator = coordinator
        self.options = options
        saves = SaveTracker(window: options.saveWindow, coordinator: coordinator)
        lostUpdates = LostUpdates(coordinator: coordinator, backingRoot: backing ?? loopback.backingRoot)
        policy = OperationPolicy(recognisesSaves: options.saveWindow > 0)
        let waits = OperationPolicy.Waits(askTimeout: options.askTimeout, strict: options.strict, readWait: options.readWait,
                                          writeWait: options.writeWait)
        readPolicy = policy.waits(write: false, waits)
        writePolicy = policy.waits(write: true, waits)
        pastReadersPolicy = policy.waits(write: true, pastOpenReaders: true, waits)
        registrations.fs = self
        coordinator.presenterRegistrationWatcher = registrations
    }

    /// Remembers, for each write open held while a presenter of its file (or of a folder it is in)
    /// registers, the file as it was then (`HandleAccess.lateRegistrants`).
    private let registrations = RegistrationWatcher()
    /// The presented paths by the file they name (hard links: `presentedName`).
    let presentedInodes = PresentedInodes()
    /// How many times a presented path was looked at in the backing folder for that (tests).
    let presentedPathLooks = Atomic<Int>(0)
    private final class RegistrationWatcher: PresenterRegistrationWatcher, @unchecked Sendable {
        /// Set once, in the file system's init.
        weak var fs: CoordinatedFileSystem?

        /// The write opens held now at or below `path`.
        func writers(at path: ItemPath) -> [(handle: HandleAccess, file: OpenFile)] {
            guard let fs else { return [] }
            return fs.openWriters.withLock { table in
                table.isEmpty ? [] : table.values.flatMap { $0.filter { !$0.handle.quiet && path.isSameOrAncestor(of: $0.handle.path) } }
            }
        }

        /// The file of each such open before the registration: a write that lands while it is
        /// made counts as after it (told), never as before.
        func willRegister(at path: ItemPath) -> (any Sendable)? {
            var before: [ObjectIdentifier: PassthroughWrites.Times] = [:]
            for w in writers(at: path) {
                if let state = PassthroughWrites.FileState(fd: w.file.fd) { before[ObjectIdentifier(w.handle)] = .init(state) }
            }
            return before
        }

        func presentedItemsMayHaveChanged(_ paths: [ItemPath]) { fs?.presentedInodes.mark(paths) }

        func registered(_ id: PresenterID, at path: ItemPath, before: (any Sendable)?) {
            fs?.presentedInodes.mark([path])
            let before = before as? [ObjectIdentifier: PassthroughWrites.Times] ?? [:]
            for w in writers(at: path) {
                guard let access = w.handle.grant.access, access.wasGranted(before: id) else { continue }
                // An open made while the presenter registered: the file as it opened it (a create,
                // an O_TRUNC open or a write the daemon serves has none: it is told).
                let baseline = before[ObjectIdentifier(w.handle)]
                    ?? w.file.stateAtOpen.map { PassthroughWrites.Times(size: $0.size, mtime: $0.mtime, ctime: $0.ctime) }
                if let baseline { w.handle.lateRegistrants.withLock { $0[id] = baseline } }
            }
        }
    }

    /// Installs (or removes, with nil) the document store's hooks.
    public func setDocumentHooks(_ hooks: (any DocumentHooks)?) {
        documentHooks.withLock { $0 = hooks }
        saves.setDocumentHooks(hooks)
    }

    /// The hooks, whatever the path.
    var storeHooks: (any DocumentHooks)? { documentHooks.withLock { $0 } }

    /// The hooks, when `path` is a presented document.
    func documents(_ path: ItemPath) -> (any DocumentHooks)? {
        guard let hooks = documentHooks.withLock({ $0 }), coordinator.isPresented(path) else { return nil }
        return hooks
    }

    /// The hooks, when `path` is a presented document or a folder with presented documents inside
    /// (whose move takes them along).
    func documents(atOrBelow path: ItemPath) -> (any DocumentHooks)? {
        guard let hooks = documentHooks.withLock({ $0 }), coordinator.isPresented(atOrBelow: path) else { return nil }
        return hooks
    }

    /// Tells `forgetCached` which session to notify (the daemon, once mounted; nil when stopped).
    public func setSession(_ session: FuseSession?) { kernel.withLock { $0.session = session } }

    /// Drops what the kernel has cached for `path` (the name, the item's attributes and pages, the
    /// directory's attributes) after the daemon changed it outside a FUSE request: the document store's
    /// resolutions and restores. The kernel knows only of changes made through the mount, and the
    /// backing watcher skips the daemon's own. Call it with no coordinated access held: the kernel
    /// takes the directory's lock, which a request parked in that directory may hold.
    public func forgetCached(_ path: ItemPath) {
        guard let session = kernel.withLock({ $0.session }), let name = path.name else { return }
        var directory = loopback.inode(.root)
        for component in path.components.dropLast() {
            // A directory the kernel does not know has nothing cached below it.
            guard let next = loopback.knownChild(of: directory, named: component) else { return }
            directory = next
        }
        let child = loopback.knownChild(of: directory, named: name)
        _ = session.invalidateEntry(parent: loopback.id(of: directory), name: name)
        if let child {
            loopback.xattrsMayHaveChanged(child)
            _ = session.invalidate(inode: loopback.id(of: child))
        }
        _ = session.invalidate(inode: loopback.id(of: directory))
    }

    /// Ends saves still waiting for their document to come back (at unmount).
    public func finishPendingSaves() { saves.flush() }

    // MARK: Who and where

    /// The calling process (not thread), acting for its own presenter of `path` if it has one.
    func origin(_ c: RequestContext, _ path: ItemPath? = nil) -> AccessOrigin {
        let who = names.identity(of: c.pid)
        let presenter = path.flatMap { coordinator.presenter(ownedBy: who.pid, at: $0) }
        return AccessOrigin(pid: who.pid, uid: c.uid, gid: c.gid, executable: who.name, presenterID: presenter)
    }

    func path(_ node: BackingNode) -> ItemPath? {
        // A file's path from its folder's (kept per path generation) and the name it was looked up
        // by, when that name still is the file: no read of /proc/self/fd on every open.
        if let (directory, name) = loopback.lookedUpName(of: node), let folder = path(directory),
           let p = try? folder.appending(name) {
            return presentedName(of: node, else: p)
        }
        return loopback.path(of: node) { try? ItemPath($0) }.map { presentedName(of: node, else: $0) }
    }

    /// The name an access to a regular file with several names (hard links) is coordinated at. An
    /// open or a setattr reaches the daemon with the file's node only, never the name its caller
    /// used, and the node's path is the name the kernel last looked up (`ls`, `cat other` of
    /// another name moves it there, while the kernel's cached entry of the document's own name
    /// leads to the same node without a lookup). When `p` is not presented but another name of
    /// the file is, the access is that document's: its presenters are asked and told, and its
    /// store keeps its version (docs/semantics.md, "Several names for one file"). Costs nothing
    /// while nobody presents anything, one fstat of the node while someone does, and for a file
    /// with several names a look-up by its inode (`PresentedInodes`: the presented paths changed
    /// since are looked at again, then each of the file's presented names once).
    func presentedName(of node: BackingNode, else p: ItemPath) -> ItemPath {
        guard node.type == S_IFREG, coordinator.hasPresentersAnywhere,
              case .success(let found) = node.withDescriptor({ fd -> stat? in
                  var st = stat()
                  return fstat(fd, &st) == 0 ? st : nil
              }), let st = found, st.st_nlink > 1, !coordinator.isPresentedAnywhere(p) else { return p }
        return presentedNames(of: st).first ?? p
    }

    /// The presented paths that are names of the regular file `st` (hard links), in path order.
    func presentedNames(of st: stat) -> [ItemPath] {
        guard st.st_mode & S_IFMT == S_IFREG, st.st_nlink > 1, coordinator.hasPresentersAnywhere else { return [] }
        let file = PresentedInodes.File(st)
        let candidates = presentedInodes.names(of: file, presented: { coordinator.presentedPathsAnywhere() },
                                               look: { q in coordinator.isPresentedAnywhere(q) ? backingFile(at: q) : nil })
        // Each still presented (here or, in a cluster, on another node) and still that file now.
        return candidates.filter { coordinator.isPresentedAnywhere($0) && backingFile(at: $0) == file }.sorted()
    }

    /// The regular file at `q` in the backing folder, by its path from the root (nil: none there).
    private func backingFile(at q: ItemPath) -> PresentedInodes.File? {
        guard !q.components.isEmpty else { return nil }
        presentedPathLooks.add(1, ordering: .relaxed)
        if case .some(let file) = backingEntry(at: q) { return file }
        return nil
    }

    enum BackingEntry {
        /// Nothing, or something other than a regular file.
        case none
        case some(PresentedInodes.File)
        /// It could not be looked at (a path too long for one call, the daemon out of descriptors).
        case unknown
    }

    /// What is at `q` in the backing folder, by its path from the root.
    private func backingEntry(at q: ItemPath) -> BackingEntry {
        guard !q.components.isEmpty else { return .none }
        let found = loopback.inode(.root).withDescriptor { rootFD -> BackingEntry in
            q.string.withNameCString { name in
                var st = stat()
                guard fstatat(rootFD, name, &st, AT_SYMLINK_NOFOLLOW) == 0 else { return errno == ENOENT || errno == ENOTDIR ? .none : .unknown }
                return st.st_mode & S_IFMT == S_IFREG ? .some(PresentedInodes.File(st)) : .none
            }
        }
        return (try? found.get()) ?? .unknown
    }

    func path(_ parent: BackingNode, _ name: String) -> ItemPath? {
        path(parent).flatMap { try? $0.appending(name) }
    }

    func isTemp(_ name: String) -> Bool { options.tempPatterns.matches(name) }

    func isTemp(_ path: ItemPath) -> Bool { path.name.map(isTemp) ?? false }

    // MARK: Getting an access without blocking the worker

    /// Runs `body` once `intents` are granted: at once on this thread when nothing conflicts and no
    /// presenter must be asked, otherwise later from the coordinator's completion (the kernel request
    /// waits, parked). At a wait deadline, reads go ahead without exclusion; writes go ahead past
    /// readers and open files (programs that keep a file open for long share it through their own
    /// locks) and get EBUSY while an explicit coordinated write holds the item. Presenter errors and
    /// strict timeouts fail the request with the coordinator's errno. A path longer than
    /// `PathLimit.maxBytes` fails with ENAMETOOLONG.
    ///
    /// Every access of one process shares a purpose identifier, so a process never waits for itself
    /// (git chmods the lock file it holds open; sed renames over the file it is still reading), nor
    /// for the processes that started it (its parent, theirs: `flock doc sh -c '... > doc'`, a script
    /// that holds `doc` open and runs `cp new doc`), which act with it as one program; they still
    /// wait for it as for anyone.
    ///
    /// A user (other than root and the mount's owner) may have `max_user_waits` requests waiting at
    /// once; a further one that would wait fails with EAGAIN, nothing done.
    ///
    /// `pastOpenReaders` (asked only when the request would wait): a write that changes no byte
    /// another program's open file for reading could read (an append, a change of names) does not
    /// wait for such files. `kernelLocks`: the kernel holds the folder or the file locked while this
    /// request waits (a change of names, of attributes by path): it goes ahead past open files as
    /// soon as a process holding one waits in the kernel (`probeStuckHolders`). Any waiting request
    /// goes ahead past open files as soon as a process holding one waits for a file lock that the
    /// requester or a process that started it holds.
    func withAccess(_ request: consuming Request, _ intents: [FileAccessIntent], origin: AccessOrigin, write: Bool,
                    pastOpenReaders: @autoclosure () -> Bool = false, kernelLocks: Bool = false, _ body: @escaping @Sendable (consuming Request, Grant) -> Void) {
        // Deeper than presenters and the log can be told about: refused, never uncoordinated.
        guard intents.allSatisfy({ PathLimit.fits($0.path) }) else { return request.reply(error: .fileNameTooLong) }
        let purpose = Self.purpose(of: origin.pid)
        if let access = coordinator.tryCoordinateImmediately(intents, origin: origin, purpose: purpose) {
            return body(request, Grant(access: access, coordinator: coordinator, origin: origin))
        }
        guard waits.begin(origin.uid) else { return request.reply(error: .resourceTemporarilyUnavailable) }
        let parked = request.park()
        let ancestors = ProcessLife.ancestors(of: origin.pid)
        let passesReaders = write && pastOpenReaders()
        let id = coordinator.coordinate(intents, origin: origin, purpose: purpose, sharing: ancestors.map(Self.purpose(of:)),
                                        policy: write ? (passesReaders ? pastReadersPolicy : writePolicy) : readPolicy) { [self] result in
            waits.end(origin.uid)
            guard let req = parked.resume() else {
                if case .success(let access) = result { access.release() }
                return
            }
            switch result {
            case .success(let access):
                body(req, Grant(access: access, coordinator: coordinator, origin: origin))
            case .failure(let error):
                // The errno the log records for this request (cancelled: EINTR, busy: EBUSY, ...).
                req.reply(error: Errno(rawValue: error.posixErrorCode))
            }
        }
        // Ctrl-C on the waiting process ends the wait at once: EINTR, nothing done.
        parked.onInterrupt { [coordinator] in coordinator.cancel(id) }
        probeStuckHolders(id, lineage: Set(ancestors + [origin.pid]), kernelLocks: kernelLocks, pastAppenders: passesReaders, after: 0,
                          lastLook: DispatchTime.now().uptimeNanoseconds)
    }

    /// Looks at waiting request `id` `after`, and again every 100 ms (50 ms while a holder is seen
    /// stuck; sooner when `/proc/locks` could not be read again yet) while it waits for open files
    /// (granted holds that yield at its deadline). It takes its deadline's action at once, going
    /// ahead past them (docs/semantics.md, "Waits and deadlines"), when every open file in its way
    /// is an open for writing held a second through which nothing was written, and nobody changed
    /// its file for as long (`heldWithoutWriting`: the program holds it to write some time, not
    /// now, and would close it only when done: an office suite's document), the file the names
    /// it holds no longer lead to (`leftItsName`: renamed away, replaced, removed), or, for an
    /// append or a change of names (`pastAppenders`), an open that only appends, held a second
    /// (`appendingAWhile`: a service's log); or when a program whose open file is in its way
    /// cannot close it before this request ends:
    /// - it waits for a file lock (flock, fcntl, lockf: `/proc/locks`, read after the request's
    ///   previous look) held by the requester or a process that started it (`lineage`):
    ///   `flock doc sh -c '... > doc'` run by several programs at once, each holding `doc` open
    ///   while it waits for the lock the writer's parent holds;
    /// - or, for a request the kernel holds locks for while it waits (`kernelLocks`: a change of
    ///   names locks its folder, and a rename's or unlink's files; a change of a file's attributes,
    ///   size or extended attributes, the file), a thread of it waits uninterruptibly in the kernel
    ///   at looks 50 ms or more apart: it waits for such a lock (its write to the file, a name it
    ///   makes or looks up in the folder).
    /// Ends when the request waits no more.
    private func probeStuckHolders(_ id: RequestID, lineage: Set<pid_t>, kernelLocks: Bool, pastAppenders: Bool, after delay: UInt64,
                                   lastLook: UInt64, stuckSince: UInt64? = nil) {
        Self.stuckHolderProbe.asyncAfter(deadline: .now() + .nanoseconds(Int(delay))) { [weak self] in
            guard let self, let holds = coordinator.yieldingHolds(blocking: id) else { return }
            let now = DispatchTime.now().uptimeNanoseconds
            var next: UInt64 = 100_000_000, looked = lastLook
            let idle = holds.filter { heldWithoutWriting($0.id, now: now) }
            if !holds.isEmpty, holds.allSatisfy({ h in
                idle.contains { $0 === h } || pastAppenders && appendingAWhile(h, now: now) || leftItsName(h.id, h.intents.map(\.path))
            }) {
                // Kept first: the request may be granted, and open its file, before the call returns.
                // (Not the opens of files no longer at the name: the request does not change them.)
                notePassed(id, idle.map(\.id), now: now)
                if coordinator.goAheadPastYieldingHolds(id) { return }
                passedIdle.withLock { _ = $0.removeValue(forKey: id) }
            }
            // A process with several holds in the way (or one blocking several intents) is looked at once.
            let pids = Set(holds.map(\.origin.pid))
            if !pids.isEmpty {
                switch lockWaits(readAfter: lastLook) {
                case .read(let locks, let at):
                    looked = at
                    if pids.contains(where: { locks.waits($0, forAnyOf: lineage) }), coordinator.goAheadPastYieldingHolds(id) { return }
                case .tooSoon(let wait):
                    next = min(next, wait)
                }
            }
            var stuck: UInt64?
            if kernelLocks, pids.contains(where: ProcessLife.waitsUninterruptibly) {
                let since = stuckSince ?? now
                if now &- since >= 50_000_000, coordinator.goAheadPastYieldingHolds(id) { return }
                stuck = since
                next = min(next, 50_000_000)
            }
            probeStuckHolders(id, lineage: lineage, kernelLocks: kernelLocks, pastAppenders: pastAppenders, after: next, lastLook: looked,
                              stuckSince: stuck)
        }
    }

    private static let stuckHolderProbe = DispatchQueue(label: "coordfs.stuck-holders")

    enum LockWaitsLook {
        /// `/proc/locks` as read at `at`.
        case read(FileLockWaits, at: UInt64)
        /// Not read since the time asked for, and not to be read again for this many nanoseconds.
        case tooSoon(UInt64)
    }

    /// `/proc/locks` as read after `since` (uptime nanoseconds), by this look or another request's.
    /// It is read again only once 20 times the CPU time its last read took has passed (and at least
    /// 2 ms): however many requests wait and however long any user makes the file (it is read up
    /// to 256 KiB), reading it takes at most a twentieth of one CPU, while on a machine with few
    /// locks each look sees them as they are now.
    private func lockWaits(readAfter since: UInt64) -> LockWaitsLook {
        let now = DispatchTime.now().uptimeNanoseconds
        if let seen = lockWaitsSeen.withLock({ $0 }) {
            if seen.at > since { return .read(seen.waits, at: seen.at) }
            let next = seen.at &+ max(2_000_000, 20 &* seen.cost)
            if now < next { return .tooSoon(next - now) }
        }
        let cpu = Self.threadCPUTime()
        let waits = FileLockWaits.read()
        let cost = Self.threadCPUTime() &- cpu
        let done = DispatchTime.now().uptimeNanoseconds
        lockWaitsSeen.withLock { $0 = (done, waits, cost) }
        return .read(waits, at: done)
    }

    /// The CPU time this thread has used, in nanoseconds.
    private static func threadCPUTime() -> UInt64 {
        var t = timespec()
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t)
        return UInt64(t.tv_sec) &* 1_000_000_000 &+ UInt64(t.tv_nsec)
    }

    /// `pid:N`, the purpose every access of process N shares, its digits written straight into a
    /// small string (`String(_:radix:)`, generic, and the concatenation cost an access 900
    /// instructions).
    static func purpose(of pid: pid_t) -> String {
        guard pid >= 0 else { return "pid:" + String(Int(pid), radix: 10) }
        var digits: (UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8) = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        return withUnsafeMutableBytes(of: &digits) { d in
            var v = UInt32(pid), n = 0
            repeat {
                d[9 - n] = UInt8(ascii: "0") + UInt8(v % 10)
                v /= 10
                n += 1
            } while v > 0
            return String(unsafeUninitializedCapacity: 4 + n) { out in
                out[0] = UInt8(ascii: "p"); out[1] = UInt8(ascii: "i"); out[2] = UInt8(ascii: "d"); out[3] = UInt8(ascii: ":")
                for i in 0..<n { out[4 + i] = d[10 - n + i] }
                return 4 + n
            }
        }
    }

    // MARK: Files

    public func initialize(connection: inout ConnectionInfo) { loopback.initialize(connection: &connection) }

    public func destroy() {
        finishPendingSaves()
        loopback.destroy()
    }

    public func open(_ request: consuming Request, inode id: InodeID, file: FileInfo) {
        // A user at its bound of open files (`max_user_open_files`, or the others' share of the
        // daemon's descriptors) is refused before anything is coordinated: no presenter asked, no
        // access taken, for an open that cannot be made.
        if loopback.openFiles.refuses(request.context.uid) { return request.reply(error: .tooManyOpenFilesInSystem) }
        let node = loopback.inode(id)
        // Only regular files are coordinated (the policy's rule, asked before looking the path up).
        guard policy.coordinatesOpen(of: ItemKind(mode: node.type)) else {
            return loopback.open(request, inode: id, file: file)
        }
        guard let p = path(node) else {
            if removedUnderTheKernel(node, by: request.context.pid) { return request.reply(error: Errno(rawValue: ESTALE)) }
            return loopback.open(request, inode: id, file: file)
        }
        let who = origin(request.context, p)
        let write = file.flags & O_ACCMODE != O_RDONLY || file.flags & O_TRUNC != 0
        guard let plan = policy.open(.init(path: p, kind: .file, write: write, truncate: file.flags & O_TRUNC != 0,
                                           append: file.flags & O_APPEND != 0, tempName: isTemp(p), fresh: freshness(p, for: who.pid))) else {
            return loopback.open(request, inode: id, file: file)
        }
        perform(plan.first, by: who.pid)
        if let p = plan.adopts, let adopted = saves.adopt(p) {
            return finishOpen(request, node, file, Grant(access: adopted, coordinator: coordinator, origin: who), p, plan, adopted: true)
        }
        withAccess(request, plan.intents, origin: who, write: plan.write, pastOpenReaders: plan.appends) { [self] req, grant in
            finishOpen(req, node, file, grant, p, plan)
        }
    }

    /// `adopted`: the access is a save's in progress (`SaveTracker.adopt`), which may cover more
    /// than this open.
    private func finishOpen(_ request: consuming Request, _ node: BackingNode, _ file: FileInfo, _ grant: Grant, _ p: ItemPath, _ plan: HandlePlan,
                            adopted: Bool = false) {
        // An unmodified program's open file from its grant on: a request whose deadline passes
        // while the open is still being made (the store keeping a version first) goes ahead past
        // it, as a moment later. Marked only once made, it was taken for an explicit coordinated
        // write meanwhile: of four SQLite writers in WAL mode, the two whose deadline passed just
        // after a third went ahead failed with EBUSY and fell back to read-only ("attempt to write
        // a readonly database").
        // One that only appends holds no other program's read up (a log being written).
        grant.access?.yieldAtWaitDeadlines(appending: plan.appends && !adopted)
        let pid = grant.origin.pid
        if plan.write { finishClosedWrites(of: node, by: pid) }
        // Opened to read and write in place (a database; Python's "r+"): what the process writes
        // over is what it reads through this very open, the version it opens, as an open for
        // reading would record (docs/semantics.md, "Lost updates"). The sqlite3 shell reads a
        // database's first bytes before it opens it to write: a write of two of them sharing one
        // database was a lost update whenever the other wrote in between.
        if plan.write, !plan.quiet, file.flags & O_ACCMODE == O_RDWR, file.flags & O_TRUNC == 0 {
            _ = node.withDescriptor { lostUpdates.didRead(p, file: $0, by: pid, uid: grant.origin.uid) }
        }
        if plan.write, !plan.quiet, let refused = lostUpdates.beforeSave(p, by: grant.origin, .inPlace) {
            grant.release()
            return request.reply(error: refused)
        }
        // An append of a presented document keeps what its presenters loaded as the file's first
        // bytes, not a copy, while nothing else may write the file: then the daemon serves it
        // and sees each change below them (`watchedBelow`).
        var watchedBelow: Int64?
        if !plan.before.isEmpty { // a read has no store step: no look at the store's hooks
            let store = StoreView(self, origin: grant.origin, before: plan.before, done: [])
            for step in plan.before {
                if plan.appends, case .beforeInPlaceWrite(let q) = step, q == p, store.isPresented(q), !writtenOtherwise(node) {
                    watchedBelow = store.runAppend(q)
                } else {
                    store.run(step)
                }
            }
        }
        switch loopback.openFile(node, flags: file.flags, caller: request.context, passthrough: watchedBelow == nil) {
        case .success(let f):
            if watchedBelow != nil, !f.servedByDaemon {
                // The inode has passthrough opens (the kernel refuses an open without passthrough
                // then): this one passes through as well, and the prefix is copied now, as before.
                watchedBelow = nil
                storeHooks?.beforeInPlaceWrite(p)
            }
            if !plan.write && !plan.quiet { lostUpdates.didRead(p, file: f.fd, by: pid, uid: grant.origin.uid) }
            let handle = HandleAccess(grant: grant, path: p, pid: pid, truncated: plan.truncated, quiet: plan.quiet, appends: plan.appends,
                                      watchedBelow: watchedBelow)
            f.attachment = handle
            holds(f, handle)
            if let watchedBelow { watchAppends(of: node, below: watchedBelow) }
            let reply = openReply(f, p)
            if f.isWrite { track(handle, f, flushes: !reply.noFlush) }
            request.reply(open: reply, flags: file.flags)
        case .failure(let e):
            grant.release()
            request.reply(error: e)
        }
    }

    /// Whether an open of `node`, a regular file with no path any more, should be answered ESTALE:
    /// its file was removed or replaced under a name the kernel still holds (another node of a
    /// cluster renamed a file over it and its change record had not reached this node when the
    /// kernel used the name; a change beside the mount the watcher had not reported yet). The
    /// kernel then looks the name up again and opens what it names now, coordinated; opened as it
    /// was, the open would go uncoordinated and read the replaced file. The kernel tries once
    /// more: an open of the same node by the same process right after (through a
    /// /proc/PID/fd link to a removed file, which leads to the node again) is served as before.
    private func removedUnderTheKernel(_ node: BackingNode, by pid: pid_t) -> Bool {
        guard node.type == S_IFREG else { return false }
        let removed: Bool
        switch node.withDescriptor({ fd -> Bool in
            var st = stat()
            return fstat(fd, &st) == 0 && st.st_nlink == 0
        }) {
        case .success(let unlinked): removed = unlinked
        case .failure(let e): removed = e == .noSuchFileOrDirectory
        }
        guard removed else { return false }
        let key = ObjectIdentifier(node)
        let now = DispatchTime.now().uptimeNanoseconds
        return staleOpens.withLock { table in
            if let last = table.removeValue(forKey: key), last.pid == pid, now - last.at < 1_000_000_000 { return false }
            if table.count >= 256 { table = table.filter { now - $0.value.at < 1_000_000_000 } }
            table[key] = (pid, now)
            return true
        }
    }

    public func release(_ request: consuming Request, inode id: InodeID, file: FileInfo) {
        let f = loopback.openFile(file)
        let handle = f.attachment as? HandleAccess
        loopback.release(request, inode: id, file: file)
        guard let handle else { return }
        if case let delay = releaseDelay.load(ordering: .relaxed), delay > 0 { usleep(UInt32(delay) * 1000) }
        // Finished while still tracked: a remove or rename by the same process either finishes it
        // first or waits until this has.
        let seen = finish(handle, f)
        if f.isWrite { untrack(handle, f, seen: seen) }
        if let id = handle.grant.access?.id {
            opensByAccess.withLock { table in
                guard var list = table.removeValue(forKey: id) else { return }
                list.removeAll { $0.file === f }
                if !list.isEmpty { table[id] = list }
            }
        }
    }

    /// Open `f` holds `handle`'s access (`opensByAccess`), until its release. In a cluster, another
    /// node's request waiting for the access's right goes ahead past it at once while the opens
    /// holding it hold nobody up (held without writing, or their name left them), as a request of
    /// this host does: the gate is told how to see that (`CoordinatedAccess.mayBeHeldIdle`) with
    /// the access's first open.
    private func holds(_ f: OpenFile, _ handle: HandleAccess) {
        guard let access = handle.grant.access else { return }
        let id = access.id
        let at = DispatchTime.now().uptimeNanoseconds
        let first = opensByAccess.withLock { table in
            table[id, default: []].append((f, at))
            return table[id]?.count == 1
        }
        guard first, coordinator.isGated else { return }
        let paths = access.intents.map(\.path)
        // (Marked at its grant, before its open: `finishOpen`, `create`.)
        var appending: (@Sendable () -> Bool)?
        if access.onlyAppends {
            appending = { @Sendable [weak self] in self?.opensMadeAWhileAgo(id, now: DispatchTime.now().uptimeNanoseconds) ?? false }
        }
        access.mayBeHeldIdle({ [weak self] in
                                 guard let self else { return false }
                                 return heldWithoutWriting(id, now: DispatchTime.now().uptimeNanoseconds) || leftItsName(id, paths)
                             },
                             appendingAWhile: appending,
                             changedPast: { [weak self] in
                                 for held in self?.idleCandidates(id) ?? [] { held.file.noteChangedPast() }
                             })
    }

    /// Whether `access` is held by open files that only append (`O_APPEND` without `O_TRUNC`), each
    /// held at least `idleWriterAfter`: a program keeping its log open, which it closes when it
    /// exits, not when a request's wait would end. An append or a change of names goes ahead past
    /// it: bytes appended at the file's end, to whatever name it has, as natively.
    private func appendingAWhile(_ access: CoordinatedAccess, now: UInt64) -> Bool {
        access.onlyAppends && opensMadeAWhileAgo(access.id, now: now)
    }

    /// Whether every open holding access `id` was made `idleWriterAfter` ago or more.
    private func opensMadeAWhileAgo(_ id: RequestID, now: UInt64) -> Bool {
        guard let opens = opensByAccess.withLock({ $0[id] }), !opens.isEmpty else { return false }
        return opens.allSatisfy { now &- $0.at >= Self.idleWriterAfter }
    }

    /// Whether every open holding `access` is of a file that the names it holds no longer lead to:
    /// renamed away (a logger's log after `mv app.log app.log.1`), replaced by a rename over it (a
    /// reader's document after `sed -i`) or removed. What such a program reads or writes is no
    /// longer what the name leads to, so it holds nobody up there (each look is two `fstat`s).
    private func leftItsName(_ id: RequestID, _ paths: [ItemPath]) -> Bool {
        guard !paths.isEmpty, let opens = opensByAccess.withLock({ $0[id] }), !opens.isEmpty else { return false }
        return opens.allSatisfy { open in
            var st = stat()
            guard fstat(open.file.fd, &st) == 0 else { return false }
            let file = PresentedInodes.File(st)
            return paths.allSatisfy { p in
                switch backingEntry(at: p) {
                case .none: return true
                case .some(let other): return other != file
                case .unknown: return false
                }
            }
        }
    }

    /// Tells what an open did and ends its access, once: at its release, or before its process
    /// removes or renames the file. A file removed meanwhile is not told changed: its deletion was.
    /// Returns the file as its descriptor showed it before the close was told (the "removed since?"
    /// check), when this call finished the open and nothing it did may have touched the file after
    /// that look (no hook of the document store ran: nobody presents it): all the open's writes
    /// were done by then, and the access was still held, so it is the file as this open left it
    /// (`untrack`).
    @discardableResult
    private func finish(_ handle: HandleAccess, _ f: OpenFile) -> stat? {
        var seen: stat? = nil
        handle.finishOnce {
            let wrote = f.modified || handle.truncated || handle.resized
            if wrote && !handle.quiet {
                lostUpdates.didSave(handle.path, by: handle.grant.origin, file: f.fd)
            } else if f.isWrite {
                lostUpdates.didNotSave(handle.path, by: handle.grant.origin)
            }
            // Told already: another open's release told the file as it is now (a process with two
            // descriptors of it, the one that did not write closed first).
            // One look at the file serves this and `seen` below.
            let key = ObjectIdentifier(f.inode)
            var st = stat()
            let looked = (wrote || handle.touched) && fstat(f.fd, &st) == 0
            let state = looked && wrote && !handle.quiet ? FileState(st) : nil
            let contents = wrote && !(state != nil && toldStates.withLock { $0[key] } == state)
            // What was done decides what is told: an open that changed nothing tells nothing, and
            // the save tracker and the file's links are looked at only when it changed something.
            let changed = contents || handle.touched
            if changed, looked { seen = st }
            // A presenter registered while the open was held hears of its change only when the
            // file changed after it registered (what it read then did not hold the change): as with
            // Apple, every presenter learns of a save once, and never of one it had read already.
            if changed, let access = handle.grant.access, access.presenterRegisteredSinceGrant {
                let now = seen.map { PassthroughWrites.Times(.init($0)) }
                let sawIt = handle.lateRegistrants.withLock { late in Set(late.compactMap { now != nil && $0.value == now! ? $0.key : nil }) }
                access.tellPresentersRegisteredSinceGrant(except: sawIt)
            }
            let steps = policy.close(.init(path: handle.path, contentsChanged: contents, attributesChanged: handle.touched, quiet: handle.quiet,
                                           freshByOpener: changed && saves.creator(of: handle.path) == handle.pid,
                                           removed: seen.map { $0.st_nlink == 0 } ?? false))
            // Kept only while another write open of the file is tracked (whose release could tell it again).
            if contents, let state, openWriters.withLock({ $0[key]?.contains { $0.handle !== handle } ?? false }) {
                toldStates.withLock { $0[key] = state }
            }
            // The store's hooks (a presented document) read and keep the file: looked at again after.
            if perform(steps, handle.grant) { seen = nil }
            handle.grant.release()
        }
        return seen
    }

    /// Finishes `pid`'s write opens of `p` before that process removes or renames it. close(2) does
    /// not wait for the RELEASE (no FLUSH at close on local file systems, and RELEASE is asynchronous
    /// anyway), which may come after the next request: the write is told first, as it happened. An
    /// open still held goes on uncoordinated (the name it was opened by is about to go).
    func finishWrites(of p: ItemPath, by pid: pid_t) {
        let mine = openWriters.withLock { table in
            table.isEmpty ? [] : table.values.flatMap { $0.filter { $0.handle.pid == pid && $0.handle.path == p } }
        }
        for w in mine {
            w.file.noteChangesSinceOpen() // at a release, the loopback's release has done this
            finish(w.handle, w.file)
        }
    }

    /// Finishes `pid`'s write opens of `node` that it closed (a FLUSH came from it) before it opens
    /// the file for writing again: close(2) does not wait for the RELEASE, which may come after
    /// the next open (`echo a > doc; echo b > doc`, a loop of such saves). The earlier save is told
    /// first, as it happened, so that the store keeps the version the presenter reloaded then
    /// before this open changes it; told at the release, after this open, it was one version
    /// short. (An open the process still holds through another descriptor goes on uncoordinated,
    /// as at `finishWrites`.)
    private func finishClosedWrites(of node: BackingNode, by pid: pid_t) {
        let closed = openWriters.withLock { $0[ObjectIdentifier(node)]?.filter { $0.handle.pid == pid && $0.handle.closedByOpener } ?? [] }
        for w in closed {
            w.file.noteChangesSinceOpen() // at a release, the loopback's release has done this
            finish(w.handle, w.file)
        }
    }

    /// The reply to an open of `p`. An open for writing of a file someone presents (the file or a
    /// folder it is in) keeps its FLUSH, also on a local file system (`QuietCloses`): each
    /// close(2), exit, close-on-exec and dup2 of one of its descriptors then names the closing
    /// process before the kernel's close event exists, so a close by any other process while a
    /// passthrough open is held is a write beside the mount, told at once
    /// (`PassthroughWrites.flushed`), and the opener's next open of the file for writing tells this
    /// open's change first (`finishClosedWrites`). Other opens cost no FLUSH.
    private func openReply(_ f: OpenFile, _ p: ItemPath) -> OpenReply {
        var reply = loopback.openReply(f)
        if reply.noFlush, f.isWrite, coordinator.isObserved(p) { reply.noFlush = false }
        return reply
    }

    private func track(_ handle: HandleAccess, _ f: OpenFile, flushes: Bool) {
        if f.backingID != nil {
            let atOpen = f.stateAtOpen.map { PassthroughWrites.Times(size: $0.size, mtime: $0.mtime, ctime: $0.ctime) }
            passthroughWrites.opened(f.inode, by: handle.pid, at: handle.path, open: f, atOpen: atOpen, flushes: flushes)
        } else {
            passthroughWrites.servedOpened(f.inode, at: handle.path, open: f)
        }
        openWriters.withLock { $0[ObjectIdentifier(f.inode), default: []].append((handle, f)) }
        if let id = handle.grant.access?.id, let passed = passedIdle.withLock({ $0.removeValue(forKey: id) }) {
            changesPast.withLock { $0[ObjectIdentifier(f)] = passed.files }
        }
    }

    /// `seen`: the file as `finish` found it through the open's descriptor at this release (nil:
    /// read it now).
    private func untrack(_ handle: HandleAccess, _ f: OpenFile, seen: stat? = nil) {
        if f.backingID != nil {
            // The file as this open's writes left it, from the daemon's own descriptor.
            passthroughWrites.released(f.inode, by: handle.pid, open: f, state: seen.map { .init($0) } ?? .init(fd: f.fd))
        } else {
            // The daemon's descriptor, which it closes after this, may be dropped last by a process
            // its process spawned: that close is the mount's too.
            passthroughWrites.servedReleased(f.inode, open: f, state: seen.map { .init($0) } ?? .init(fd: f.fd))
        }
        openWriters.withLock { table in
            // One lookup: the list is taken out, and put back only when others are left.
            let key = ObjectIdentifier(f.inode)
            guard var list = table.removeValue(forKey: key) else { return }
            list.removeAll { $0.handle === handle }
            if !list.isEmpty { table[key] = list } else { toldStates.withLock { _ = $0.removeValue(forKey: key) } }
        }
        if let passed = changesPast.withLock({ $0.removeValue(forKey: ObjectIdentifier(f)) }) { Self.notePassedChange(passed) }
    }

    /// Request `id` goes ahead past the opens holding `holders`, each held without writing.
    private func notePassed(_ id: RequestID, _ holders: [RequestID], now: UInt64) {
        let files = holders.flatMap { idleCandidates($0).map { WeakOpenFile(file: $0.file) } }
        passedIdle.withLock { table in
            table = table.filter { now &- $0.value.at < Self.passedKept }
            table[id] = (files, now)
        }
    }

    /// The opens in `files` still open take the file as it is now as not their change
    /// (`OpenFile.noteChangedPast`): a request that went ahead past them made it. An open's
    /// descriptor closes with its object (`OpenFile.deinit`), which the reference taken here keeps;
    /// one already released is no longer asked (`opensByAccess`), so telling it changes nothing.
    private static func notePassedChange(_ files: [WeakOpenFile]) {
        for case let f? in files.map(\.file) { f.noteChangedPast() }
    }

    /// How long an open for writing must be held without writing before it holds nobody up.
    static let idleWriterAfter: UInt64 = 1_000_000_000

    /// Whether every open holding access `id` is an open for writing in place (neither a create
    /// nor O_TRUNC) that is not writing now: held at least `idleWriterAfter` with nothing written
    /// through it and its file unchanged for that long (`OpenFile.wroteNothing`: the program keeps
    /// it open to write some time, an office suite's loaded document, a database connection that
    /// only read, `exec 3<>doc`), or held longer than `write_wait` with its file unchanged for
    /// `idleWriterAfter`, whatever it wrote before (`OpenFile.unchanged(since:)`: a database
    /// connection between its transactions, which take their own locks). Such a program holds its
    /// file until it is done with it, not until a request's wait would end, and a request would
    /// go ahead past it at that deadline anyway: waiting for it then only helps a request that
    /// comes while it writes, which still waits until it pauses.
    private func heldWithoutWriting(_ id: RequestID, now: UInt64) -> Bool {
        let opens = idleCandidates(id)
        guard !opens.isEmpty else { return false }
        var limit = timespec()
        clock_gettime(CLOCK_REALTIME, &limit)
        limit.tv_sec -= Int(Self.idleWriterAfter / 1_000_000_000)
        let heldLong = max(Self.idleWriterAfter, UInt64(max(0, options.writeWait) * 1e9))
        return opens.allSatisfy { open in
            let held = now &- open.at
            return held >= Self.idleWriterAfter && open.file.wroteNothing(changedBefore: limit)
                || held >= heldLong && open.file.unchanged(since: limit)
        }
    }

    /// Whether an open other than an append the daemon watches (`HandleAccess.watched`) may write
    /// `node`: then an append's open keeps what presenters loaded by a copy, as any write's.
    private func writtenOtherwise(_ node: BackingNode) -> Bool {
        openWriters.withLock { $0[ObjectIdentifier(node)]?.contains { !$0.handle.watched || $0.file.backingID != nil } ?? false }
    }

    /// The watched appends of `node` look at changes below `end` too (a prefix recorded for another
    /// append of the file).
    private func watchAppends(of node: BackingNode, below end: Int64) {
        let watched = openWriters.withLock { $0[ObjectIdentifier(node)]?.filter { $0.handle.watched }.map(\.handle) ?? [] }
        for h in watched { h.watch(below: end) }
    }

    /// Before a change through `f` at `offset` (a size change: 0): when it may change what the
    /// store keeps as a prefix of the file for its presenters, those bytes are kept first.
    private func keepPrefix(before f: OpenFile, at offset: Int64) {
        guard let handle = f.attachment as? HandleAccess, handle.watched, handle.takePrefixEnd(below: offset) else { return }
        // By the file's path now (a document renamed meanwhile took its base along).
        storeHooks?.beforeInPlaceWrite(path(f.inode) ?? handle.path)
    }

    /// An open write handle of `pid` on `node`, if any.
    private func openWriter(of node: BackingNode, pid: pid_t) -> (handle: HandleAccess, file: OpenFile)? {
        openWriters.withLock { $0[ObjectIdentifier(node)]?.first { $0.handle.pid == pid } }
    }

    public func create(_ request: consuming Request, parent: InodeID, name: FileName, mode: mode_t, file: FileInfo) {
        if loopback.isHidden(parent: parent, name) { return request.reply(error: .notPermitted) }
        if loopback.openFiles.refuses(request.context.uid) { return request.reply(error: .tooManyOpenFilesInSystem) }
        let pnode = loopback.inode(parent)
        let n = name.string, bytes = name.copy
        guard let dirPath = path(pnode), let p = try? dirPath.appending(n) else {
            return loopback.create(request, parent: parent, name: name, mode: mode, file: file)
        }
        let who = origin(request.context, p)
        let context = request.context
        let plan = policy.create(.init(path: p, parent: dirPath, tempName: isTemp(n), parentObserved: coordinator.isObservedAnywhere(dirPath),
                                       presented: coordinator.isPresentedAnywhere(p)))
        let done = CreatePlan(created: plan.created, truncated: plan.truncated, quiet: plan.quiet)
        if let p = plan.adopts, let adopted = saves.adopt(p) {
            let grant = Grant(access: adopted, coordinator: coordinator, origin: who)
            return finishCreate(request, pnode, bytes, mode, file, context, grant, p, done, parentGrant: nil)
        }
        // The new file's own write access lasts as long as the handle; the folder's only for the create.
        // The closures take only what is left to do (a copy of the whole plan cost 700 instructions).
        let parentIntents = plan.parentIntents
        // A new file (the name names nothing now: no program can have it open; a reader holding
        // the name reads a file since removed or moved) does not wait for files open for reading,
        // looked at only when the create would wait. An existing file is opened for writing: it does.
        withAccess(request, plan.intents, origin: who, write: true, pastOpenReaders: namesNothing(pnode, bytes), kernelLocks: true) { [self] req, fileGrant in
            // An open file from its grant on, as an open's (`finishOpen`); one that only appends
            // (`>> new.log`) holds no other program's read up.
            fileGrant.access?.yieldAtWaitDeadlines(appending: file.flags & O_APPEND != 0 && file.flags & O_TRUNC == 0)
            guard !parentIntents.isEmpty else {
                return finishCreate(req, pnode, bytes, mode, file, context, fileGrant, p, done, parentGrant: nil)
            }
            withAccess(req, parentIntents, origin: who, write: true, pastOpenReaders: true, kernelLocks: true) { [self] req, dirGrant in
                finishCreate(req, pnode, bytes, mode, file, context, fileGrant, p, done, parentGrant: dirGrant)
            }
        }
    }

    /// Whether `name` names nothing in the backing folder of `folder` now.
    private func namesNothing(_ folder: BackingNode, _ name: NameCopy) -> Bool {
        let r = folder.withDescriptor { fd -> Bool in
            var st = stat()
            return name.withCString { fstatat(fd, $0, &st, AT_SYMLINK_NOFOLLOW) } != 0 && errno == ENOENT
        }
        if case .success(true) = r { return true }
        return false
    }

    /// What a create's plan does once its accesses are granted.
    private struct CreatePlan {
        let created: [Step]
        let truncated: Bool
        let quiet: Bool
    }

    private func finishCreate(_ request: consuming Request, _ pnode: BackingNode, _ name: NameCopy, _ mode: mode_t, _ file: FileInfo,
                              _ context: RequestContext, _ grant: Grant, _ p: ItemPath, _ plan: CreatePlan, parentGrant dirGrant: Grant?) {
        let result = name.withCString { loopback.createFile(parent: pnode, name: FileName($0), mode: mode, flags: file.flags, context: context) }
        switch result {
        case .success(let (entry, f)):
            if let dirGrant {
                perform(plan.created, dirGrant)
                dirGrant.release()
            }
            let handle = HandleAccess(grant: grant, path: p, pid: grant.origin.pid, truncated: plan.truncated, quiet: plan.quiet)
            let reply = openReply(f, p)
            // Opened for reading only (`flock FILE` making its lock file): nothing can be written
            // through it, so the create is over once made, as an open for writing closed at once
            // (`touch`) is: finished now, and the handle holds no access. Held to its release, its
            // write made every other program's open of the file wait (`read_wait`, `write_wait`)
            // for as long as the `flock` ran; tracked as an open writer, it was never untracked.
            guard f.isWrite else {
                finish(handle, f)
                return request.reply(create: entry, open: reply, flags: file.flags)
            }
            f.attachment = handle
            holds(f, handle)
            track(handle, f, flushes: !reply.noFlush)
            request.reply(create: entry, open: reply, flags: file.flags)
        case .failure(let e):
            dirGrant?.release()
            grant.release()
            request.reply(error: e)
        }
    }

    public func setattr(_ request: consuming Request, inode id: InodeID, attributes: stat, changing: SetAttributes, file: FileInfo?) {
        let node = loopback.inode(id)
        let open = file.map { loopback.openFile($0) }
        // An open for writing already holds the write access (ftruncate, fchmod on it). fchmod and
        // futimens may also arrive without the handle: the caller's own open for writing covers them.
        // Either way its one "did change" at close reports them too.
        if let f = open, let handle = f.attachment as? HandleAccess, handle.grant.isWrite {
            return setattr(request, node, attributes, changing, open: f, covered: handle)
        }
        let pid = names.process(of: request.context.pid)
        if let writer = openWriter(of: node, pid: pid) {
            return setattr(request, node, attributes, changing, open: open, covered: writer.handle, writer: writer.file)
        }
        guard let p = path(node) else { return loopback.setattr(request, inode: id, attributes: attributes, changing: changing, file: file) }
        perform(policy.setAttributesPrelude(p), by: pid)
        let size = changing.contains(.size)
        guard let plan = policy.setAttributes(.init(path: p, sizeChanges: size, tempName: isTemp(p), fresh: freshness(p, for: pid),
                                                    afterOwnSave: !size && saves.isAftermath(p, by: pid))) else {
            return loopback.setattr(request, inode: id, attributes: attributes, changing: changing, file: file)
        }
        perform(plan.first, by: pid)
        withAccess(request, plan.intents, origin: origin(request.context, p), write: true, kernelLocks: true) { [self] req, grant in
            var result: Result<stat, Errno> = .failure(.ioError)
            _ = perform(plan, grant) {
                // A truncate by path is a save: maybe a late one.
                if size, let refused = lostUpdates.beforeSave(p, by: grant.origin, .inPlace) {
                    result = .failure(refused)
                    return refused
                }
                result = loopback.setAttributes(node, attributes, changing: changing, open: open, caller: req.context)
                if case .failure(let e) = result { return e }
                if size { lostUpdates.didSave(p, by: grant.origin) }
                return nil
            }
            switch result {
            case .success(let st): req.reply(attributes: st, timeout: loopback.attributeTimeout(for: st))
            case .failure(let e): req.reply(error: e)
            }
        }
    }

    /// A setattr covered by an open for writing (`writer`: the open file it is covered by, when
    /// the request came without it). A size change is a change of contents; attributes alone are
    /// noted as such, so the open's close tells a change of attributes unless it also wrote.
    private func setattr(_ request: consuming Request, _ node: BackingNode, _ attributes: stat, _ changing: SetAttributes,
                         open: OpenFile?, covered handle: HandleAccess, writer: OpenFile? = nil) {
        // ftruncate under an append: its open went past files open for reading, the size change
        // waits for them as a write (a short write access of its own, same process: it never
        // waits for its own handle), and is still told as part of the open's one change.
        if policy.setAttributesUnderOpenWaitsForReaders(sizeChanges: changing.contains(.size), appends: handle.appends) {
            let who = origin(request.context, handle.path)
            return withAccess(request, [.writingIntent(with: handle.path)], origin: who, write: true, kernelLocks: true) { [self] req, grant in
                coveredSetattr(req, node, attributes, changing, open: open, covered: handle, writer: writer)
                grant.release()
            }
        }
        coveredSetattr(request, node, attributes, changing, open: open, covered: handle, writer: writer)
    }

    private func coveredSetattr(_ request: consuming Request, _ node: BackingNode, _ attributes: stat, _ changing: SetAttributes,
                                open: OpenFile?, covered handle: HandleAccess, writer: OpenFile?) {
        let attributesOnly = policy.setAttributesUnderOpenWrite(sizeChanges: changing.contains(.size)) == .attributes
        // A truncate (or extension) through a watched append: what presenters loaded is kept first.
        if !attributesOnly, handle.watched, handle.takePrefixEnd(below: 0) { storeHooks?.beforeInPlaceWrite(path(node) ?? handle.path) }
        if attributesOnly { (open ?? writer)?.noteChangesSinceOpen() }
        let result = loopback.setAttributes(node, attributes, changing: changing, open: open, caller: request.context)
        if case .success = result {
            if attributesOnly {
                handle.touch()
                (open ?? writer)?.noteAttributesSet()
            } else {
                handle.resize()
            }
        }
        switch result {
        case .success(let st): request.reply(attributes: st, timeout: loopback.attributeTimeout(for: st))
        case .failure(let e): request.reply(error: e)
        }
    }

    // MARK: Extended attributes

    /// An extended attribute set or removed (setfattr, setfacl, a file manager's tags) is a change
    /// of attributes, as a chmod by path is (docs/semantics.md): presenters are asked and told, the
    /// store keeps no version and opens no conflict. Part of the caller's own open for writing (its
    /// close tells it), of its save right before (vim sets the ACL after writing) and of a file it
    /// just made (`cp -a`, `rsync -X`); a temp name tells nobody. A change the kernel makes inside
    /// another system call (the capability a chown removes) is that call's, not coordinated again.
    public func setxattr(_ request: consuming Request, inode id: InodeID, name: FileName, value: UnsafeRawBufferPointer, flags: Int32) {
        let node = loopback.inode(id)
        guard let (covered, plan, p) = attributeChange(request.context, node) else {
            return loopback.setxattr(request, inode: id, name: name, value: value, flags: flags)
        }
        // The request's buffers do not outlive a wait: copied.
        let n = name.copy, v = Array(value)
        changeAttribute(request, node, covered: covered, plan: plan, p) { [loopback] in
            n.withCString { name in v.withUnsafeBytes { loopback.setExtendedAttribute(node, name: name, value: $0, flags: flags) } }
        }
    }

    public func removexattr(_ request: consuming Request, inode id: InodeID, name: FileName) {
        let node = loopback.inode(id)
        guard let (covered, plan, p) = attributeChange(request.context, node) else {
            return loopback.removexattr(request, inode: id, name: name)
        }
        let n = name.copy, caller = request.context
        changeAttribute(request, node, covered: covered, plan: plan, p) { [loopback] in
            n.withCString { loopback.removeExtendedAttribute(node, name: $0, caller: caller) }
        }
    }

    /// How an extended attribute change of `node` is coordinated: covered by the caller's open
    /// for writing, a plan of its own at a path, or nil: not coordinated.
    private func attributeChange(_ context: RequestContext, _ node: BackingNode)
        -> (covered: (handle: HandleAccess, file: OpenFile)?, plan: Plan?, path: ItemPath?)? {
        guard node.type == S_IFREG, CallerSystemCall.isExtendedAttributeChange(context.pid) != false else { return nil }
        let pid = names.process(of: context.pid)
        if let writer = openWriter(of: node, pid: pid) { return (writer, nil, nil) }
        guard let p = path(node) else { return nil }
        perform(policy.setAttributesPrelude(p), by: pid)
        guard let plan = policy.setAttributes(.init(path: p, sizeChanges: false, tempName: isTemp(p), fresh: freshness(p, for: pid),
                                                    afterOwnSave: saves.isAftermath(p, by: pid))) else { return nil }
        perform(plan.first, by: pid)
        return (nil, plan, p)
    }

    private func changeAttribute(_ request: consuming Request, _ node: BackingNode, covered: (handle: HandleAccess, file: OpenFile)?,
                                 plan: Plan?, _ p: ItemPath?, _ change: @escaping @Sendable () -> Errno?) {
        if let (handle, file) = covered {
            file.noteChangesSinceOpen()
            let e = change()
            if e == nil {
                handle.touch()
                file.noteAttributesSet()
            }
            if let e { return request.reply(error: e) }
            return request.replyOK()
        }
        guard let plan, let p else { return request.reply(error: .ioError) }
        withAccess(request, plan.intents, origin: origin(request.context, p), write: true, kernelLocks: true) { [self] req, grant in
            let e = perform(plan, grant, change)
            if let e { req.reply(error: e) } else { req.replyOK() }
        }
    }

    // MARK: Names

    /// mknod, mkdir, symlink and link: a short write on the parent; the new item appears.
    /// `plan`: the policy's plan for the new item's path in its folder's (by default `make`'s).
    /// `leaf`: a symbolic link or a node, which appears as a created file does (`OperationPolicy.make`).
    private func makeItem(_ request: consuming Request, parent pnode: BackingNode, name fileName: FileName, leaf: Bool = false,
                          plan planFor: ((ItemPath, ItemPath) -> Plan?)? = nil,
                          _ make: @escaping @Sendable (UnsafePointer<CChar>, RequestContext) -> Result<EntryReply, Errno>) {
        let context = request.context
        guard let dirPath = path(pnode), let p = try? dirPath.appending(fileName.string) else {
            return request.reply(make(fileName.cString, context))
        }
        let name = fileName.copy
        let made = { [self] in
            policy.make(p, in: dirPath, tempName: isTemp(p), leaf: leaf,
                        parentObserved: leaf && coordinator.isObservedAnywhere(dirPath), presented: leaf && coordinator.isPresentedAnywhere(p))
        }
        var plan = planFor?(p, dirPath) ?? made()
        if let back = plan.adopts {
            // The save in progress there comes back: done under its access (as a create adopts it).
            if let adopted = saves.adopt(back) {
                let who = origin(context, p)
                let grant = Grant(access: adopted, coordinator: coordinator, origin: who)
                var result: Result<EntryReply, Errno> = .failure(.ioError)
                _ = perform(plan, grant) {
                    result = name.withCString { make($0, context) }
                    if case .failure(let e) = result { return e }
                    lostUpdates.didSave(p, by: who) // the second half of the save its unlink began
                    return nil
                }
                return request.reply(result)
            }
            // Its window closed meanwhile: a name like any other.
            plan = planFor?(p, dirPath) ?? made()
            if plan.adopts != nil { plan = made() }
        }
        withAccess(request, plan.intents, origin: origin(context, p), write: true, pastOpenReaders: true, kernelLocks: true) { [self, plan] req, grant in
            var result: Result<EntryReply, Errno> = .failure(.ioError)
            _ = perform(plan, grant) {
                result = name.withCString { make($0, context) }
                if case .failure(let e) = result { return e }
                return nil
            }
            req.reply(result)
        }
    }

    public func mknod(_ request: consuming Request, parent: InodeID, name: FileName, mode: mode_t, device: dev_t) {
        if loopback.isHidden(parent: parent, name) { return request.reply(error: .notPermitted) }
        let pnode = loopback.inode(parent)
        makeItem(request, parent: pnode, name: name, leaf: true) { [loopback] n, c in loopback.makeNode(parent: pnode, name: n, mode: mode, device: device, context: c) }
    }

    public func mkdir(_ request: consuming Request, parent: InodeID, name: FileName, mode: mode_t) {
        if loopback.isHidden(parent: parent, name) { return request.reply(error: .notPermitted) }
        let pnode = loopback.inode(parent)
        makeItem(request, parent: pnode, name: name) { [loopback] n, c in loopback.makeDirectory(parent: pnode, name: n, mode: mode, context: c) }
    }

    public func symlink(_ request: consuming Request, target: UnsafePointer<CChar>, parent: InodeID, name: FileName) {
        if loopback.isHidden(parent: parent, name) { return request.reply(error: .notPermitted) }
        let pnode = loopback.inode(parent)
        let t = NameCopy(FileName(target))
        makeItem(request, parent: pnode, name: name, leaf: true) { [loopback] n, c in
            t.withCString { loopback.makeSymlink(target: $0, parent: pnode, name: n, context: c) }
        }
    }

    public func link(_ request: consuming Request, inode id: InodeID, newParent: InodeID, newName: FileName) {
        if loopback.isHidden(parent: newParent, newName) { return request.reply(error: .notPermitted) }
        let node = loopback.inode(id), pnode = loopback.inode(newParent)
        let unnamed = loopback.isUnnamed(node), file = node.type == S_IFREG
        let plan: (ItemPath, ItemPath) -> Plan? = { [self] p, dirPath in
            // A presented document unlinked moments ago comes back as this file: a save.
            if file, saves.isPending(p) { return policy.linkBack(p) }
            // An unnamed file (O_TMPFILE) gets its first name: a new file of its linker's, as a create makes.
            guard unnamed else { return nil }
            return policy.linkUnnamed(.init(path: p, parent: dirPath, tempName: isTemp(p), parentObserved: coordinator.isObservedAnywhere(dirPath),
                                            presented: coordinator.isPresentedAnywhere(p)))
        }
        makeItem(request, parent: pnode, name: newName, plan: plan) { [loopback] n, _ in loopback.makeLink(node, newParent: pnode, newName: n) }
    }

    /// An unnamed file (O_TMPFILE): it has no path, so nobody presents it, nobody is asked and
    /// nobody is told; its I/O is the Loopback's (passthrough as any open). Linking it in is a new
    /// file (`link`); never linked, it leaves nothing.
    public func tmpfile(_ request: consuming Request, parent: InodeID, mode: mode_t, file: FileInfo) {
        loopback.tmpfile(request, parent: parent, mode: mode, file: file)
    }

    public func unlink(_ request: consuming Request, parent: InodeID, name: FileName) {
        remove(request, parent: parent, name: name, directory: false)
    }

    public func rmdir(_ request: consuming Request, parent: InodeID, name: FileName) {
        remove(request, parent: parent, name: name, directory: true)
    }

    private func remove(_ request: consuming Request, parent: InodeID, name: FileName, directory: Bool) {
        if loopback.isHidden(parent: parent, name) { return request.reply(error: .noSuchFileOrDirectory) }
        let pnode = loopback.inode(parent)
        let n = name.string, bytes = name.copy
        guard let p = path(pnode, n) else { return request.reply(loopback.removeItem(parent: pnode, name: name.cString, directory: directory)) }
        let who = origin(request.context, p)
        perform(policy.removePrelude(p, directory: directory), by: who.pid)
        let temp = isTemp(n)
        var facts = OperationPolicy.Remove(path: p, directory: directory, tempName: temp, presented: coordinator.isPresentedAnywhere(p),
                                           fresh: freshness(p, for: who.pid))
        var plan = policy.remove(facts)
        var settled: (@Sendable () -> Void)?
        if !perform(plan.first, by: who.pid, settled: &settled) {
            facts.fresh = .told
            plan = policy.remove(facts)
        }
        withAccess(request, plan.intents, origin: who, write: true, pastOpenReaders: true, kernelLocks: true) { [self, plan, settled] req, grant in
            req.reply(perform(plan, grant, settled: settled) {
                // Maybe the first half of a save (unlink, then create): kept, never refused.
                if !directory && !temp { _ = lostUpdates.beforeSave(p, by: who, .replace, mayRefuse: false) }
                return bytes.withCString { loopback.removeItem(parent: pnode, name: $0, directory: directory) }
            })
        }
    }

    public func rename(_ request: consuming Request, parent: InodeID, name: FileName, newParent: InodeID, newName: FileName, flags: UInt32) {
        if loopback.isHidden(parent: parent, name) { return request.reply(error: .noSuchFileOrDirectory) }
        if loopback.isHidden(parent: newParent, newName) { return request.reply(error: .notPermitted) }
        let from = loopback.inode(parent), to = loopback.inode(newParent)
        let n = name.string, nn = newName.string, bytes = name.copy, newBytes = newName.copy
        guard let src = path(from, n), let dst = path(to, nn) else {
            return request.reply(loopback.renameItem(parent: from, name: name.cString, newParent: to, newName: newName.cString, flags: flags))
        }
        let who = origin(request.context, src)
        perform(policy.renamePrelude(from: src, to: dst), by: who.pid)
        let srcKind = loopback.itemAttributes(parent: from, name: name.cString).map { ItemKind(mode: $0.st_mode) }
        let dstKind = loopback.itemAttributes(parent: to, name: newName.cString).map { ItemKind(mode: $0.st_mode) }
        // A symbolic link or node made moments ago that nobody was told of yet (`OperationPolicy.make`)
        // and renamed now: told first that it appeared, then what the rename does, as before.
        if srcKind != .file { saves.settle(src)?() }
        if let dstKind, dstKind != .file { saves.settle(dst)?() }
        let exchange = flags & LinuxCalls.renameExchange != 0
        var facts = OperationPolicy.Rename(
            source: src, destination: dst, exchange: exchange, sourceKind: srcKind, destinationKind: dstKind,
            sourceTempName: isTemp(n), destinationTempName: isTemp(nn), sourceFresh: srcKind == .file ? freshness(src, for: who.pid) : .told,
            destinationFresh: exchange && dstKind == .file ? freshness(dst, for: who.pid) : .told,
            // Presenters of other nodes of a cluster count as this node's own: a save by rename
            // to a backup name (vim) or a file moved over a document presented elsewhere is the
            // document's change there too, told as one in this node's change record.
            sourcePresented: coordinator.isPresentedAnywhere(src), sourceObserved: coordinator.isObservedAnywhere(src),
            destinationPresented: coordinator.isPresentedAnywhere(dst), saveInProgressAtDestination: saves.isPending(dst))
        var plan = policy.rename(facts)
        var settled: (@Sendable () -> Void)?
        if !perform(plan.first, by: who.pid, settled: &settled) {
            facts.sourceFresh = .told
            plan = policy.rename(facts)
        }
        var held: Grant?
        if let p = plan.adopts {
            if let adopted = saves.adopt(p) {
                held = Grant(access: adopted, coordinator: coordinator, origin: who)
            } else {
                facts.saveInProgressAtDestination = false
                plan = policy.rename(facts)
            }
        }
        let swapSaved = facts.swapSavedDocument
        withAccess(request, plan.intents, origin: who, write: true, pastOpenReaders: true, kernelLocks: true) { [self, plan, held, settled] req, grant in
            let save = LostUpdates.RenameSave(src: src, dst: dst, srcIsFile: srcKind == .file, dstIsFile: dstKind == .file,
                                              dstExists: dstKind != nil, flags: flags, swapSaved: swapSaved)
            req.reply(perform(plan, grant, adopted: held, settled: settled) {
                if let refused = lostUpdates.beforeRename(save, by: who) { return refused }
                let e = bytes.withCString { a in newBytes.withCString { b in loopback.renameItem(parent: from, name: a, newParent: to, newName: b, flags: flags) } }
                if e == nil { lostUpdates.didRename(save, by: who) }
                return e
            })
        }
    }

    // MARK: Not coordinated (covered by the open's access, or metadata reads)

    public func lookup(_ request: consuming Request, parent: InodeID, name: FileName) { loopback.lookup(request, parent: parent, name: name) }
    public func forget(_ inode: InodeID, count: UInt64) { loopback.forget(inode, count: count) }
    public func regularFilesTheKernelHolds(limit: Int) -> [InodeID] { loopback.regularFilesTheKernelHolds(limit: limit) }
    public func getattr(_ request: consuming Request, inode: InodeID, file: FileInfo?) { loopback.getattr(request, inode: inode, file: file) }
    public func readlink(_ request: consuming Request, inode: InodeID) { loopback.readlink(request, inode: inode) }
    public func read(_ request: consuming Request, inode: InodeID, size: Int, offset: Int, file: FileInfo) { loopback.read(request, inode: inode, size: size, offset: offset, file: file) }
    public func write(_ request: consuming Request, inode: InodeID, data: IncomingData, offset: Int, file: FileInfo) {
        keepPrefix(before: loopback.openFile(file), at: Int64(offset))
        loopback.write(request, inode: inode, data: data, offset: offset, file: file)
    }
    /// A FLUSH: on a local file system only for an open for writing of a presented file
    /// (`openReply`). Who closed is noted (one lock, a read of /proc for the thread's process; the
    /// opener itself on its handle) and the reply never waits for anything else: no presenter, no
    /// access.
    public func flush(_ request: consuming Request, inode: InodeID, file: FileInfo) {
        let f = loopback.openFile(file)
        if f.isWrite, let handle = f.attachment as? HandleAccess {
            let closer = names.process(of: request.context.pid)
            if closer == handle.pid { handle.closeByOpener() }
            if f.backingID != nil { passthroughWrites.flushed(f.inode, open: f, by: closer) }
        }
        loopback.flush(request, inode: inode, file: file)
    }
    public func fsync(_ request: consuming Request, inode: InodeID, dataOnly: Bool, file: FileInfo) { loopback.fsync(request, inode: inode, dataOnly: dataOnly, file: file) }
    public func opendir(_ request: consuming Request, inode: InodeID, file: FileInfo) { loopback.opendir(request, inode: inode, file: file) }
    public func readdir(_ request: consuming Request, inode: InodeID, size: Int, offset: Int, file: FileInfo, plus: Bool) { loopback.readdir(request, inode: inode, size: size, offset: offset, file: file, plus: plus) }
    public func releasedir(_ request: consuming Request, inode: InodeID, file: FileInfo) { loopback.releasedir(request, inode: inode, file: file) }
    public func fsyncdir(_ request: consuming Request, inode: InodeID, dataOnly: Bool, file: FileInfo) { loopback.fsyncdir(request, inode: inode, dataOnly: dataOnly, file: file) }
    public func statfs(_ request: consuming Request, inode: InodeID) { loopback.statfs(request, inode: inode) }
    public func getxattr(_ request: consuming Request, inode: InodeID, name: FileName, size: Int) { loopback.getxattr(request, inode: inode, name: name, size: size) }
    public func listxattr(_ request: consuming Request, inode: InodeID, size: Int) { loopback.listxattr(request, inode: inode, size: size) }
    public func access(_ request: consuming Request, inode: InodeID, mask: Int32) { loopback.access(request, inode: inode, mask: mask) }
    public func fallocate(_ request: consuming Request, inode: InodeID, mode: Int32, offset: Int, length: Int, file: FileInfo) {
        keepPrefix(before: loopback.openFile(file), at: Int64(offset))
        loopback.fallocate(request, inode: inode, mode: mode, offset: offset, length: length, file: file)
    }
    public func copyFileRange(_ request: consuming Request, input: InodeID, inputOffset: Int, inputFile: FileInfo, output: InodeID, outputOffset: Int, outputFile: FileInfo, length: Int, flags: Int32) {
        keepPrefix(before: loopback.openFile(outputFile), at: Int64(outputOffset))
        loopback.copyFileRange(request, input: input, inputOffset: inputOffset, inputFile: inputFile, output: output, outputOffset: outputOffset, outputFile: outputFile, length: length, flags: flags) }
    public func lseek(_ request: consuming Request, inode: InodeID, offset: Int, whence: Int32, file: FileInfo) { loopback.lseek(request, inode: inode, offset: offset, whence: whence, file: file) }
}

extension ItemKind {
    /// The kind of a `st_mode`.
    init(mode: mode_t) {
        switch mode & S_IFMT {
        case S_IFREG: self = .file
        case S_IFDIR: self = .directory
        default: self = .other
        }
    }
}
