import Coordination
import Dispatch
import FuseKit
import Glibc
import Loopback
import MountPolicy
import NameBytes
import Synchronization
import LinuxGNU

/// Sees changes made directly in the backing folder (a sync agent, a process that does not use the
/// mount) and makes them visible through the mount at once: the kernel's cached names, attributes
/// and pages for the item are dropped, and presenters are told (did change, subitem appeared, did
/// delete, did move), as for a change made through the mount.
///
/// fanotify marks every directory the kernel knows (the mount's root and each directory looked up),
/// reporting the directory's file handle and the entry's name, and the pid of whoever made the
/// change: the daemon's own changes (every change made through the mount) are skipped.
final class BackingWatcher: DirectoryObserver, @unchecked Sendable {
    private let group: Int32
    /// Whether a name's event carries the named item's own handle (`FAN_REPORT_TARGET_FID`): a
    /// rename's moved item is then found where it went, in a folder without a mark too.
    private let reportsTargets: Bool
    private let wake: (read: Int32, write: Int32)
    private let loopback: Loopback
    private let session: FuseSession
    private let coordinator: Coordinator
    private let tempPatterns: TempNamePatterns
    private let names: ProcessNames
    /// Directories by their kernel file handle bytes, and the handle each was marked with (a
    /// directory's node may keep no descriptor, and its file may be gone when it is forgotten).
    private let directories = Mutex<(byHandle: [FileHandleKey: BackingNode], handleOf: [ObjectIdentifier: FileHandleKey])>(([:], [:]))
    private let ownPID = getpid()
    /// The mount's own writes made by the kernel (passthrough), reported with the writer's pid.
    private let passthroughWrites: PassthroughWrites?
    /// The mount, for the document store's hooks: a change made here over a presented document is the
    /// same change for the store as one made through the mount (a version when it could be kept, a
    /// conflict for unsaved changes, attributed to whoever made it).
    private weak let fileSystem: CoordinatedFileSystem?
    private let stopped = Atomic<Bool>(false)
    /// False once a directory could not be marked (the loopback then reads every path afresh).
    private let marksComplete = Atomic<Bool>(true)
    /// For tests: milliseconds each batch of events waits before it is handled (as under load).
    let eventDelay = Atomic<Int>(0)
    /// Another node's changes the cluster tells (a node of a cluster; `ClusterEchoes`).
    let clusterEchoes = Mutex<ClusterEchoes?>(nil)
    /// New files seen here whose appearance waits for `save_window` (a node of a cluster): by path,
    /// the generation of their wait.
    private let appearing = Mutex<(byPath: [ItemPath: UInt64], generation: UInt64)>(([:], 0))
    private let appearQueue = DispatchQueue(label: "coordfs.watcher.appear")

    /// The watcher thread's name (`top -H`, `perf sched`, /proc/PID/task/TID/comm: at most 15 bytes).
    static let threadName = "backing-watcher"

    static let mask: UInt64 = LinuxCalls.Fanotify.modify | LinuxCalls.Fanotify.attrib | LinuxCalls.Fanotify.closeWrite
        | LinuxCalls.Fanotify.create | LinuxCalls.Fanotify.delete | LinuxCalls.Fanotify.rename
        | LinuxCalls.Fanotify.onChild | LinuxCalls.Fanotify.onDirectory

    /// Nil when fanotify is not available (not root, an old kernel): then changes made directly in the
    /// backing folder show through the mount after the cache timeouts, and presenters are not told.
    init?(loopback: Loopback, session: FuseSession, coordinator: Coordinator, tempPatterns: TempNamePatterns,
          passthroughWrites: PassthroughWrites?, fileSystem: CoordinatedFileSystem? = nil) {
        let (g, targets) = LinuxCalls.Fanotify.initialize()
        guard g >= 0 else { return nil }
        reportsTargets = targets
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else { close(g); return nil }
        group = g
        wake = (fds[0], fds[1])
        self.loopback = loopback
        names = ProcessNames(limit: loopback.descriptors.callerNames)
        self.session = session
        self.coordinator = coordinator
        self.tempPatterns = tempPatterns
        self.passthroughWrites = passthroughWrites
        self.fileSystem = fileSystem
    }

    func start() {
        loopback.setDirectoryObserver(self)
        // Every known directory is marked: renames outside the mount reach `pathsChanged()`.
        loopback.setPathsAreWatched(true)
        if !marksComplete.load(ordering: .relaxed) { loopback.setPathsAreWatched(false) }
        startThread(named: Self.threadName) { [self] in run() }
    }

    func stop() {
        guard !stopped.exchange(true, ordering: .relaxed) else { return }
        loopback.setPathsAreWatched(false)
        loopback.setDirectoryObserver(nil)
        _ = write(wake.write, "x", 1)
    }

    // MARK: DirectoryObserver

    func directoryAppeared(_ node: BackingNode) {
        // A directory beyond the daemon's descriptor budget is reopened by its handle for this.
        let marked = node.withDescriptor { fd -> (handle: LinuxCalls.KernelFileHandle, error: Int32)? in
            guard let handle = LinuxCalls.identityHandle(of: fd) else { return nil }
            return (handle, LinuxCalls.Fanotify.mark(group, add: true, mask: Self.mask, directory: fd) == 0 ? 0 : errno)
        }
        guard case .success(let result) = marked, let (handle, markError) = result, markError == 0 else {
            // A directory this watcher cannot see into: renames there would go unnoticed.
            let error: Int32 = switch marked {
            case .failure(let e): e.rawValue
            case .success(let r): r?.error ?? errno
            }
            if marksComplete.exchange(false, ordering: .relaxed) {
                // Said once, in the daemon's log: direct changes there show only after the cache timeouts.
                let place = loopback.path(of: node).map { $0.hasPrefix("/") ? $0 : "/" + $0 } ?? "a directory"
                sayOnStandardError("coordfs: changes made directly in the backing folder are not seen in '\(place)' "
                    + "and wherever else a directory cannot be watched (fanotify: \(String(cString: strerror(error))))")
            }
            loopback.setPathsAreWatched(false)
            return
        }
        let key = FileHandleKey(handle)
        directories.withLock { d in
            d.byHandle[key] = node
            d.handleOf[ObjectIdentifier(node)] = key
        }
    }

    func directoryForgotten(_ node: BackingNode) {
        let wasMarked = directories.withLock { d -> Bool in
            guard let h = d.handleOf.removeValue(forKey: ObjectIdentifier(node)) else { return false }
            if d.byHandle[h] === node { d.byHandle[h] = nil }
            return true
        }
        // A directory that can no longer be reopened is gone, and its mark with it.
        guard wasMarked else { return }
        _ = node.withDescriptor { LinuxCalls.Fanotify.mark(group, add: false, mask: Self.mask, directory: $0) }
    }

    // MARK: Events

    private func run() {
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        var fds = [pollfd(fd: group, events: Int16(POLLIN), revents: 0), pollfd(fd: wake.read, events: Int16(POLLIN), revents: 0)]
        while !stopped.load(ordering: .relaxed) {
            guard poll(&fds, 2, -1) > 0 else { if errno == EINTR { continue }; break }
            if fds[1].revents != 0 { break }
            // Let a burst accumulate: one read per few milliseconds instead of one wake-up per event
            // (every change made through the mount also queues an event, skipped below by pid).
            usleep(2_000)
            passthroughWrites?.reads.add(1, ordering: .relaxed)
            let n = read(group, &buffer, buffer.count)
            if n <= 0 { if n < 0 && errno == EINTR { continue }; break }
            if case let delay = eventDelay.load(ordering: .relaxed), delay > 0 { usleep(UInt32(delay) * 1000) }
            buffer.withUnsafeBytes { handleEvents(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
        }
        close(group); close(wake.read); close(wake.write)
    }

    /// Walks `struct fanotify_event_metadata` records and their info records.
    private func handleEvents(_ bytes: UnsafeRawBufferPointer) {
        var offset = 0
        while offset + 24 <= bytes.count {
            let eventLength = Int(bytes.loadUnaligned(fromByteOffset: offset, as: UInt32.self))
            let metadataLength = Int(bytes.loadUnaligned(fromByteOffset: offset + 6, as: UInt16.self))
            let mask = bytes.loadUnaligned(fromByteOffset: offset + 8, as: UInt64.self)
            let pid = bytes.loadUnaligned(fromByteOffset: offset + 20, as: Int32.self)
            guard eventLength >= 24, offset + eventLength <= bytes.count else { return }
            // A directory moved or removed (by anyone): the loopback's kept directory paths are stale.
            if mask & LinuxCalls.Fanotify.onDirectory != 0, mask & (LinuxCalls.Fanotify.rename | LinuxCalls.Fanotify.delete) != 0 {
                loopback.pathsChanged()
            }
            if mask & LinuxCalls.Fanotify.overflow != 0 {
                overflowed()
            } else if pid == ownPID {
                // The daemon's own changes are made through the mount and told there: only the close
                // of its descriptors is looked at, first by the file's handle alone, which finds it
                // without the rest of the event decoded (`daemonClosed`).
                if mask & LinuxCalls.Fanotify.closeWrite != 0, let own = passthroughWrites {
                    let records = offset + metadataLength ..< offset + eventLength
                    if !own.closedByDaemon(handle: Self.fileHandle(bytes, records), nil) {
                        daemonClosed(own, Self.entries(bytes, records))
                    }
                }
            } else {
                handle(mask: mask, pid: pid, entries: Self.entries(bytes, offset + metadataLength ..< offset + eventLength))
            }
            offset += eventLength
        }
    }

    /// An event's info records (`records`: their bytes in `bytes`): each one's type, its file handle
    /// (after the fsid's 8 bytes, a `struct file_handle`) and the bytes after the handle (the name,
    /// for the DFID_NAME kinds). `body` returns false to stop.
    private static func forEachRecord(_ bytes: UnsafeRawBufferPointer, _ records: Range<Int>,
                                      _ body: (_ type: UInt8, _ handleType: Int32, _ handle: UnsafeRawBufferPointer, _ rest: Range<Int>) -> Bool) {
        var info = records.lowerBound
        while info + 4 <= records.upperBound {
            let type = bytes[info]
            let length = Int(bytes.loadUnaligned(fromByteOffset: info + 2, as: UInt16.self))
            guard length >= 4, info + length <= records.upperBound else { return }
            let handleStart = info + 4 + 8
            if handleStart + 8 <= info + length {
                let handleBytes = Int(bytes.loadUnaligned(fromByteOffset: handleStart, as: UInt32.self))
                let handleType = bytes.loadUnaligned(fromByteOffset: handleStart + 4, as: Int32.self)
                let bytesStart = handleStart + 8
                if bytesStart + handleBytes <= info + length {
                    let handle = UnsafeRawBufferPointer(rebasing: bytes[bytesStart..<(bytesStart + handleBytes)])
                    if !body(type, handleType, handle, (bytesStart + handleBytes)..<(info + length)) { return }
                }
            }
            info += length
        }
    }

    /// The event's info records, each with its handle and its name (empty for a record without one).
    private static func entries(_ bytes: UnsafeRawBufferPointer, _ records: Range<Int>) -> [Entry] {
        var entries: [Entry] = []
        forEachRecord(bytes, records) { type, handleType, handle, rest in
            // The name: up to its NUL (or the record's end), decoded in place.
            var p = rest.lowerBound
            while p < rest.upperBound, bytes[p] != 0 { p += 1 }
            let name = String(nameBuffer: UnsafeBufferPointer(rebasing: bytes.assumingMemoryBound(to: UInt8.self)[rest.lowerBound..<p]))
            entries.append((type, FileHandleKey(type: handleType, bytes: handle), name))
            return true
        }
        return entries
    }

    /// The changed file's own handle (the FID record's), where the event reports it.
    private static func fileHandle(_ bytes: UnsafeRawBufferPointer, _ records: Range<Int>) -> FileHandleKey? {
        var found: FileHandleKey?
        forEachRecord(bytes, records) { type, handleType, handle, _ in
            guard type == LinuxCalls.Fanotify.fidRecord else { return true }
            found = FileHandleKey(type: handleType, bytes: handle)
            return false
        }
        return found
    }

    /// The close of one of the daemon's own descriptors opened for writing (a write open's, closed
    /// after its release) that its handle did not find (`closedByDaemon` false: the handle is not
    /// known yet, or the event has none): `PassthroughWrites` stops waiting for it. Nothing is told.
    /// The file is found by the node at the event's name, else by its path.
    private func daemonClosed(_ own: PassthroughWrites, _ entries: [Entry]) {
        let target = entries.first { $0.type == LinuxCalls.Fanotify.fidRecord }?.directory
        let first = directories.withLock { dirs in
            entries.first { $0.type != LinuxCalls.Fanotify.fidRecord }.flatMap { e in dirs.byHandle[e.directory].map { (type: e.type, node: $0, name: e.name) } }
        }
        guard let first, !first.name.isEmpty else { return }
        let changed = loopback.knownChild(of: first.node, named: first.name)
        own.closedByDaemon(handle: target, changed, path: changed == nil ? pathOf(first) : nil, name: first.name)
    }

    private static let dfidName: UInt8 = 2, oldDfidName: UInt8 = 10, newDfidName: UInt8 = 12

    /// One info record of an event: its type, the directory's (or, for `fidRecord`, the changed
    /// file's own) handle, and the entry's name.
    typealias Entry = (type: UInt8, directory: FileHandleKey, name: String)

    private func handle(mask eventMask: UInt64, pid: Int32, entries: [Entry]) {
        var mask = eventMask
        // The changed file's own handle (its inode, whatever its names are now), where reported.
        let target = entries.first { $0.type == LinuxCalls.Fanotify.fidRecord }?.directory
        let resolved: [(type: UInt8, node: BackingNode, name: String)] = directories.withLock { dirs in
            entries.compactMap { e in
                e.type == LinuxCalls.Fanotify.fidRecord ? nil : dirs.byHandle[e.directory].map { (e.type, $0, e.name) }
            }
        }
        guard !resolved.isEmpty else { return }
        if Self.isUnnamedFile(mask: mask, resolved[0]) { return }
        let contentBits = LinuxCalls.Fanotify.modify | LinuxCalls.Fanotify.attrib | LinuxCalls.Fanotify.closeWrite
        // The changed item of a content event, if the kernel knows it (looked up once).
        let changed = mask & contentBits == 0 ? nil
            : resolved.first.flatMap { r in r.name.isEmpty ? nil : loopback.knownChild(of: r.node, named: r.name) }
        // An attribute set or removed (ATTRIB, whoever did it): the file's absent attributes are
        // forgotten first, even for a process writing it through the mount.
        if mask & LinuxCalls.Fanotify.attrib != 0, let changed { loopback.xattrsMayHaveChanged(changed) }
        if mask & contentBits != 0, let own = passthroughWrites, let first = resolved.first, !first.name.isEmpty {
            let close = mask & LinuxCalls.Fanotify.closeWrite != 0
            // By the file the event is about; a file the kernel has forgotten already (written,
            // closed and removed at once) by its path.
            let whose = own.whose(handle: target, changed, path: changed == nil ? pathOf(first) : nil, name: first.name, pid: pid, close: close)
            if whose != .beside {
                // A close while the mount holds the file open for writing may be of a write made
                // beside the mount (told by the open's release): the kernel's attributes are dropped.
                if whose == .mountsWhileHeld, let changed { session.invalidate(inode: loopback.id(of: changed)) }
                mask &= ~contentBits
                if mask & ~(LinuxCalls.Fanotify.onChild | LinuxCalls.Fanotify.onDirectory) == 0 { return }
            }
        }
        // First make the kernel forget what it cached, so the next access through the mount sees it:
        // also its "no such name" for a name that appeared (a lookup answering meanwhile caches none).
        if mask & (LinuxCalls.Fanotify.create | LinuxCalls.Fanotify.rename) != 0 { loopback.namesMayHaveAppeared() }
        // A name that appeared, went or moved changed its folder's times and maybe its link count:
        // the kernel drops the folder's attributes only for a name it held (a new name it never had).
        let nameEvents = LinuxCalls.Fanotify.create | LinuxCalls.Fanotify.delete | LinuxCalls.Fanotify.rename
        for (i, r) in resolved.enumerated() where !r.name.isEmpty {
            session.invalidateEntry(parent: loopback.id(of: r.node), name: r.name)
            if mask & nameEvents != 0 { session.invalidate(inode: loopback.id(of: r.node)) }
            if mask & contentBits != 0, let child = i == 0 ? changed : loopback.knownChild(of: r.node, named: r.name) {
                session.invalidate(inode: loopback.id(of: child))
            }
        }
        // A rename into a folder the kernel never looked up (no mark there, made beside the mount
        // just before, at any depth) is reported by its source's mark alone, without its
        // destination: the moved item's own handle says where it went. A document moved so moved
        // there, as into a known folder; nowhere the mount shows (outside the backing folder, in
        // the state folder, gone): it left the mount, a deletion.
        let renamed = mask & LinuxCalls.Fanotify.rename != 0
        var movedTo: ItemPath? = nil
        if renamed, reportsTargets, !resolved.contains(where: { $0.type == Self.newDfidName }),
           let moved = entries.first(where: { $0.type == LinuxCalls.Fanotify.fidRecord }),
           let now = loopback.path(ofHandle: moved.directory.kernelHandle) {
            movedTo = try? ItemPath(now)
        }
        /// A rename's source (`oldDfidName`) or destination (`newDfidName`); nil for a temp name
        /// when `skippingTemp`.
        func side(_ t: UInt8, skippingTemp: Bool = false) -> ItemPath? {
            if let r = resolved.first(where: { $0.type == t }) {
                return skippingTemp && tempPatterns.matches(r.name) ? nil : pathOf(r)
            }
            guard t == Self.newDfidName, let movedTo else { return nil }
            return skippingTemp && tempPatterns.matches(movedTo.name ?? "") ? nil : movedTo
        }
        // A document renamed through the mount moments ago to a name changed here moved: told first
        // (the store follows it), so the change reaches it at its new path as through the mount.
        if let fs = fileSystem {
            let touched = renamed ? [Self.newDfidName, Self.oldDfidName].compactMap { side($0) }
                                : resolved.prefix(1).compactMap(pathOf)
            fs.perform(fs.policy.backingChangePrelude(touched), by: pid)
        }
        // Then tell presenters, once per change (a write's many MODIFY events are not announced).
        let who = names.identity(of: pid)
        let origin = AccessOrigin(pid: who.pid, uid: 0, gid: 0, executable: who.name)
        // Another node's change, which its change record tells (nodes over one folder): not again.
        var fromWaiting = false
        if let echoes = clusterEchoes.withLock({ $0 }) {
            switch appearsLater(mask: mask, resolved, renamed: (side(Self.oldDfidName), side(Self.newDfidName)), origin: origin, echoes) {
            case .told: return
            case .renamedFromWaiting: fromWaiting = true
            case .goOn: break
            }
            // A rename is decided by the name that holds the file now (its source when it left).
            let from = renamed ? side(Self.oldDfidName) : nil
            let to = renamed ? side(Self.newDfidName) : nil
            let item = renamed ? nil : resolved.first.flatMap(pathOf)
            let touched = [from, to, item].compactMap { $0 }
            let decisive = [to ?? from ?? item].compactMap { $0 }
            // Only an event that tells presenters something notes the file as told (a write's
            // MODIFY read before its close tells nothing: the close, or the record, does).
            let tells = mask & (LinuxCalls.Fanotify.create | LinuxCalls.Fanotify.delete | LinuxCalls.Fanotify.rename
                                | LinuxCalls.Fanotify.closeWrite) != 0
                || (mask & LinuxCalls.Fanotify.attrib != 0 && mask & LinuxCalls.Fanotify.onDirectory == 0)
            let names = mask & (LinuxCalls.Fanotify.create | LinuxCalls.Fanotify.delete | LinuxCalls.Fanotify.rename) != 0
            if echoes.isEcho(touched, decidedBy: tells ? decisive : [], names: names, origin: origin) { return }
        }
        func path(_ r: (type: UInt8, node: BackingNode, name: String)) -> ItemPath? {
            tempPatterns.matches(r.name) ? nil : pathOf(r)
        }
        if renamed {
            let from = fromWaiting ? nil : side(Self.oldDfidName, skippingTemp: true)
            let to = side(Self.newDfidName, skippingTemp: true)
            switch (from, to) {
            case let (f?, t?):
                // Over a presented document: its contents were replaced (its presenters stay). The
                // documents moved follow, a presented one joining the document it replaced (as
                // through the mount: the change first, then the move).
                fileSystem?.documents(t)?.didChangeBeside(t, by: origin)
                fileSystem?.documents(atOrBelow: f)?.didMove(from: f, to: t, by: origin)
                coordinator.announceObserved(.moved(from: f, to: t), origin: origin)
            case let (nil, t?): // from a temp name: over a presented document, a save
                fileSystem?.documents(t)?.didChangeBeside(t, by: origin)
                coordinator.announceObserved(.subitemAppeared(t), origin: origin)
            case let (f?, nil):
                fileSystem?.documents(f)?.didDelete(f, by: origin)
                coordinator.announceObserved(.deleted(f), origin: origin)
            default: break
            }
            return
        }
        guard let first = resolved.first, let p = path(first) else { return }
        // fanotify merges queued events on the same entry (CREATE|MODIFY|CLOSE_WRITE): each bit is
        // its own announcement, in the order they happened.
        if mask & LinuxCalls.Fanotify.create != 0 {
            coordinator.announceObserved(.subitemAppeared(p), origin: origin)
        }
        if mask & LinuxCalls.Fanotify.closeWrite != 0 || (mask & LinuxCalls.Fanotify.attrib != 0 && mask & LinuxCalls.Fanotify.onDirectory == 0) {
            // Written (a change of attributes alone is not one of contents for the store). The file's
            // other names a presenter presents (hard links) are the same file: changed too.
            for q in [p] + otherPresentedNames(first, changed, besides: p) {
                if mask & LinuxCalls.Fanotify.closeWrite != 0 { fileSystem?.documents(q)?.didChangeBeside(q, by: origin) }
                coordinator.announceObserved(.changed(q), origin: origin)
            }
        }
        if mask & LinuxCalls.Fanotify.delete != 0 {
            fileSystem?.documents(p)?.didDelete(p, by: origin)
            coordinator.announceObserved(.deleted(p), origin: origin)
        }
    }

    /// On a node of a cluster: a new file (a symbolic link or node too) seen here in a folder
    /// presented here is told as a file made through a mount is (docs/semantics.md, `create`): once it outlives `save_window`, what
    /// was written meanwhile part of that one message, and never when it is removed or renamed
    /// away first (a temp file; renamed, its new name is told as a name that appeared). Another
    /// node's create is seen here so (its daemon makes the file, its writer writes it) and that
    /// node tells it by its record when its own wait ends: one of the two tells it, matched by the
    /// file's state (`ClusterEchoes`). Says whether the event tells anything more now.
    private func appearsLater(mask: UInt64, _ resolved: [(type: UInt8, node: BackingNode, name: String)],
                              renamed sides: (from: ItemPath?, to: ItemPath?), origin: AccessOrigin, _ echoes: ClusterEchoes) -> Appearing {
        let renamed = mask & LinuxCalls.Fanotify.rename != 0
        if renamed {
            // Renamed away while it waits: a temp file (its new name is told as appeared, below).
            guard let from = sides.from else { return .goOn }
            let to = sides.to
            let waited = appearing.withLock { a in
                if let to { a.byPath[to] = nil }
                return a.byPath.removeValue(forKey: from) != nil
            }
            return waited ? .renamedFromWaiting : .goOn
        }
        guard let first = resolved.first, !first.name.isEmpty, !tempPatterns.matches(first.name), let p = pathOf(first) else { return .goOn }
        if mask & LinuxCalls.Fanotify.create != 0 && mask & LinuxCalls.Fanotify.onDirectory == 0 {
            let window = fileSystem?.saves.window ?? 0
            guard window > 0, let parent = p.parent, coordinator.isObserved(parent), !coordinator.isPresented(p),
                  Self.appearsAsAFile(first) else { return .goOn }
            if mask & LinuxCalls.Fanotify.delete != 0 { return .told } // made and gone already
            let generation = appearing.withLock { a -> UInt64 in
                a.generation += 1
                a.byPath[p] = a.generation
                return a.generation
            }
            appearQueue.asyncAfter(deadline: .now() + window) { [self] in
                let due = appearing.withLock { a -> Bool in
                    guard a.byPath[p] == generation else { return false }
                    a.byPath[p] = nil
                    return true
                }
                guard due, !stopped.load(ordering: .relaxed) else { return }
                // Told already by the node that made it (its record came first): not again.
                if echoes.isEcho([p], decidedBy: [p], origin: origin) { return }
                coordinator.announceObserved(.subitemAppeared(p), origin: origin)
            }
            return .told
        }
        // Written, its attributes set, or removed while it waits: part of it, or a temp file.
        let waiting = appearing.withLock { a -> Bool in
            guard a.byPath[p] != nil else { return false }
            if mask & LinuxCalls.Fanotify.delete != 0 { a.byPath[p] = nil }
            return true
        }
        return waiting ? .told : .goOn
    }

    private enum Appearing {
        /// Nothing to do with a new file's wait: the event is told as any other.
        case goOn
        /// Part of a new file's wait (or its end as a temp file): nothing more is told now.
        case told
        /// A rename whose source waited: it was a temp file, its new name told as from one.
        case renamedFromWaiting
    }

    /// A regular file, a symbolic link or a node (FIFO, socket, device): what appears as a created
    /// file does (a folder is told at once, as `mkdir` through a mount is).
    private static func appearsAsAFile(_ r: (type: UInt8, node: BackingNode, name: String)) -> Bool {
        let kind = r.node.withDescriptor { dfd -> mode_t in
            var st = stat()
            return fstatat(dfd, r.name, &st, AT_SYMLINK_NOFOLLOW) == 0 ? st.st_mode & S_IFMT : 0
        }
        guard case .success(let k) = kind else { return false }
        return k != 0 && k != S_IFDIR
    }

    /// A change whose events were held while another node's access that writes the item ran here,
    /// and which that node's change record did not tell (`ClusterEchoes.ended`): told now, once.
    func tellHeld(_ path: ItemPath, origin: AccessOrigin, gone: Bool) {
        if gone {
            fileSystem?.documents(path)?.didDelete(path, by: origin)
            coordinator.announceObserved(.deleted(path), origin: origin)
        } else {
            fileSystem?.documents(path)?.didChangeBeside(path, by: origin)
            coordinator.announceObserved(.changed(path), origin: origin)
        }
    }

    /// An event of an unnamed file (O_TMPFILE, made through the mount or beside it): the kernel
    /// reports its writes, closes and attribute changes under the name it gives such a file,
    /// "#" and its inode number, which no entry of the folder has. Nobody presents an unnamed file
    /// and nobody is told of it: linked in, its new name's create event is told as any other.
    private static func isUnnamedFile(mask: UInt64, _ r: (type: UInt8, node: BackingNode, name: String)) -> Bool {
        let nameEvents = LinuxCalls.Fanotify.create | LinuxCalls.Fanotify.delete | LinuxCalls.Fanotify.rename
        let digits = r.name.utf8.dropFirst()
        guard mask & nameEvents == 0, r.name.utf8.first == UInt8(ascii: "#"), !digits.isEmpty,
              digits.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) else { return false }
        let exists = r.node.withDescriptor { dfd -> Bool in
            var st = stat()
            return fstatat(dfd, r.name, &st, AT_SYMLINK_NOFOLLOW) == 0 || errno != ENOENT
        }
        return exists == .success(false)
    }

    /// The presented names other than `p` of the regular file an event's entry is (hard links:
    /// docs/semantics.md, "Several names for one file"); none for a file with one name, or while
    /// nobody presents anything.
    private func otherPresentedNames(_ r: (type: UInt8, node: BackingNode, name: String), _ changed: BackingNode?,
                                     besides p: ItemPath) -> [ItemPath] {
        guard let fs = fileSystem, coordinator.hasPresenters else { return [] }
        let looked: stat?
        if let changed {
            looked = (try? changed.withDescriptor { fd -> stat? in
                var st = stat()
                return fstat(fd, &st) == 0 ? st : nil
            }.get()) ?? nil
        } else {
            looked = (try? r.node.withDescriptor { dfd -> stat? in
                r.name.withNameCString { name -> stat? in
                    var st = stat()
                    return fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 ? st : nil
                }
            }.get()) ?? nil
        }
        guard let st = looked, st.st_nlink > 1 else { return [] }
        return fs.presentedNames(of: st).filter { $0 != p }
    }

    /// The mount path of an event's entry.
    private func pathOf(_ r: (type: UInt8, node: BackingNode, name: String)) -> ItemPath? {
        guard !r.name.isEmpty else { return nil }
        return loopback.path(of: r.node).flatMap { try? ItemPath($0) }.flatMap { try? $0.appending(r.name) }
    }

    /// Events were lost: every cached name and attribute of the known directories may be stale.
    private func overflowed() {
        loopback.pathsChanged()
        loopback.namesMayHaveAppeared()
        loopback.forgetAbsentXattrs()
        let dirs = directories.withLock { Array($0.byHandle.values) }
        for d in dirs { session.invalidate(inode: loopback.id(of: d)) }
    }
}
