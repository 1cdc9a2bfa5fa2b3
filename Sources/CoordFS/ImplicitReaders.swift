import Coordination
import Dispatch
import DocumentStore
import Glibc
import Linux
import LinuxGNU
import Synchronization

/// A process as the lost-update rules tell processes apart: its pid and its start, so a pid the
/// kernel hands out again is another process. `start` is the inode number of a pidfd of it where the
/// kernel has pidfs (Linux 6.9 and later: unique per process, never reused; a process that exits
/// and one that gets its pid can start within the same clock tick), else its start time (field 22 of
/// `/proc/PID/stat`, in clock ticks after boot).
struct ProcessKey: Hashable, Sendable {
    var pid: pid_t
    var start: UInt64

    /// The live process `pid` now, or nil when there is none.
    static func current(_ pid: pid_t) -> ProcessKey? {
        processStart(pid).map { ProcessKey(pid: pid, start: $0) }
    }
}

/// What tells the process `pid` from any other that had or will have its pid (see ``ProcessKey``),
/// or nil when there is no such process.
func processStart(_ pid: pid_t) -> UInt64? {
    guard pid > 0 else { return nil }
    guard pidfsInodes else { return ProcessLife.startTime(pid) }
    let fd = LinuxCalls.pidfdOpen(pid)
    guard fd >= 0 else { return errno == ESRCH ? nil : ProcessLife.startTime(pid) }
    defer { close(fd) }
    var st = stat()
    return fstat(fd, &st) == 0 ? UInt64(st.st_ino) : ProcessLife.startTime(pid)
}

/// True when pidfds of two processes have two inode numbers (pidfs); before it, every pidfd was the
/// one anonymous inode.
private let pidfsInodes: Bool = {
    let mine = LinuxCalls.pidfdOpen(getpid()), first = LinuxCalls.pidfdOpen(1)
    defer { if mine >= 0 { close(mine) }; if first >= 0 { close(first) } }
    var a = stat(), b = stat()
    guard mine >= 0, first >= 0, fstat(mine, &a) == 0, fstat(first, &b) == 0 else { return false }
    return a.st_ino != b.st_ino
}()

/// Every live process that opened a document for reading through the mount is an *implicit reader*
/// of the version it read: the file's identity (device, inode, size, mtime: no copy), per process
/// (``ProcessKey``) and path. A record ends when its process exits (a sweep drops it within
/// `sweepInterval`, and every decision checks the processes it relies on) or is replaced when the
/// process reads or saves the document again. docs/semantics.md, "Lost updates".
///
/// The table holds no file descriptors: one process's records cost a dictionary slot per path and
/// one entry in its process's list (`coordfs-bench readers` measures the bytes per record).
///
/// It is bounded (``Limits``): one user (uid) holds at most `perUser` records, and the table at
/// most `total`. A read beyond its user's bound drops that user's oldest record first (the reading
/// process's own oldest, else another process of the same user's); a read beyond the total drops
/// the oldest record of the user holding the most records. So one user's reads never push out
/// another user's records unless that user holds more than it does. Each dropped record is counted
/// (``dropped``, the metric `coordfs_lost_update_readers_dropped_total`); a process whose record
/// was dropped is no reader of that version any more (its late save there is not recognised).
final class ImplicitReaders: Sendable {
    /// The bounds (`-o max_user_readers`, `max_readers`).
    struct Limits: Sendable, Equatable {
        var perUser = 65_536
        var total = 262_144
    }
    /// One reader of one path (its start is its process's, in ``Process``: 40 bytes a record).
    struct Entry: Sendable, Equatable {
        var pid: pid_t
        var read: FileIdentity
    }

    /// The readers of one path: almost always one, held inline.
    struct Readers: Sendable {
        var first: Entry
        var more: [Entry] = []

        var all: [Entry] { [first] + more }

        mutating func set(_ entry: Entry) {
            if first.pid == entry.pid { first = entry; return }
            if let i = more.firstIndex(where: { $0.pid == entry.pid }) { more[i] = entry } else { more.append(entry) }
        }

        /// Removes `pid`'s entry; false when none is left.
        mutating func remove(_ pid: pid_t) -> Bool {
            if first.pid == pid {
                guard !more.isEmpty else { return false }
                first = more.removeLast()
            } else {
                more.removeAll { $0.pid == pid }
            }
            return true
        }

        func entry(of pid: pid_t) -> Entry? {
            first.pid == pid ? first : more.first { $0.pid == pid }
        }
    }

    /// One tracked process: its start time, its user and the paths it has records for, oldest
    /// first (those before `head` were dropped already).
    struct Process: Sendable {
        var start: UInt64
        var uid: UInt32
        var paths: [ItemPath]
        var head = 0

        var live: ArraySlice<ItemPath> { paths[head...] }
    }

    /// One user's records and processes.
    struct User: Sendable {
        var records = 0
        var pids: Set<pid_t> = []
    }

    struct State: Sendable {
        var byPath: [ItemPath: Readers] = [:]
        var processes: [pid_t: Process] = [:]
        var users: [UInt32: User] = [:]
        var records = 0
        var dropped: UInt64 = 0
        var limits = Limits()
    }

    private let state: Mutex<State>
    /// The capacity the path table keeps when its readers have gone (see `removeProcess`).
    static let keptPaths = 32_768
    /// How a pid's start time is found (`/proc`; tests give their own).
    private let startTime: @Sendable (pid_t) -> UInt64?
    let sweepInterval: Double
    private let sweeper = Mutex<DispatchSourceTimer?>(nil)
    private let departures = Mutex<(@Sendable (ProcessKey) -> Void)?>(nil)
    private let queue = DispatchQueue(label: "coordfs.readers.sweep", qos: .utility)

    init(sweepInterval: Double = 0.5, limits: Limits = Limits(), startTime: @escaping @Sendable (pid_t) -> UInt64? = processStart) {
        state = Mutex(State(limits: limits))
        self.sweepInterval = sweepInterval
        self.startTime = startTime
    }

    deinit { sweeper.withLock { $0?.cancel() } }

    /// How many (process, path) records the table holds.
    var count: Int { state.withLock { $0.records } }

    /// How many processes it holds records for.
    var processCount: Int { state.withLock { $0.processes.count } }

    /// How many records the bounds dropped so far (``Limits``).
    var dropped: UInt64 { state.withLock { $0.dropped } }

    /// How many records `uid`'s processes hold.
    func count(of uid: UInt32) -> Int { state.withLock { $0.users[uid]?.records ?? 0 } }

    /// The bounds in effect.
    var limits: Limits {
        get { state.withLock { $0.limits } }
        set { state.withLock { $0.limits = newValue } }
    }

    /// The user of the tracked process `pid`.
    func user(of pid: pid_t) -> UInt32? { state.withLock { $0.processes[pid]?.uid } }

    /// `pid` (of user `uid`) opened `path` for reading and got the version `read`.
    func noteRead(_ path: ItemPath, identity read: FileIdentity, by pid: pid_t, uid: UInt32 = 0) {
        let entry = Entry(pid: pid, read: read)
        // A known process (every read after its first): noted under the same lock it was found in.
        // A pid seen before keeps the start it had until the sweep finds it gone; a record wrongly
        // kept under the old process is never the new one's: every decision checks the process again.
        if state.withLock({ s -> Bool in
            guard let start = s.processes[pid]?.start else { return false }
            s.set(entry, of: ProcessKey(pid: pid, start: start), uid: uid, at: path)
            return true
        }) { return }
        // A new process: its start time once, read without the lock.
        guard let start = startTime(pid) else { return }
        let first = state.withLock { s -> Bool in
            let wasEmpty = s.processes.isEmpty
            s.set(entry, of: ProcessKey(pid: pid, start: start), uid: uid, at: path)
            return wasEmpty
        }
        if first { startSweeping() }
    }

    /// The version `process` last read (or saved) at `path`, if it is the live process it was.
    func readVersion(at path: ItemPath, by pid: pid_t) -> FileIdentity? {
        guard let (entry, start) = state.withLock({ s -> (Entry, UInt64)? in
            guard let entry = s.byPath[path]?.entry(of: pid), let start = s.processes[pid]?.start else { return nil }
            return (entry, start)
        }) else { return nil }
        guard startTime(pid) == start else {
            drop(ProcessKey(pid: pid, start: start))
            return nil
        }
        return entry.read
    }

    /// True when a live process other than `pid` read `path` as it is now (`current`): its version
    /// is worth keeping before `pid` changes it.
    func othersRead(_ path: ItemPath, current: FileIdentity, except pid: pid_t) -> Bool {
        !liveReaders(path, current: current, except: pid, all: false).isEmpty
    }

    /// The live processes other than `pid` that read `path` as it is now (`current`); with `all`
    /// false, the first one found.
    func liveReaders(_ path: ItemPath, current: FileIdentity, except pid: pid_t, all: Bool = true) -> [ProcessKey] {
        let candidates = state.withLock { s -> [ProcessKey] in
            guard let readers = s.byPath[path] else { return [] }
            return readers.all.compactMap { entry in
                guard entry.pid != pid, entry.read == current, let start = s.processes[entry.pid]?.start else { return nil }
                return ProcessKey(pid: entry.pid, start: start)
            }
        }
        var live: [ProcessKey] = []
        for process in candidates {
            if startTime(process.pid) == process.start {
                live.append(process)
                if !all { break }
            } else {
                drop(process)
            }
        }
        return live
    }

    /// The tracked process `pid` (its start as the table knows it).
    func process(_ pid: pid_t) -> ProcessKey? {
        state.withLock { s in s.processes[pid].map { ProcessKey(pid: pid, start: $0.start) } }
    }

    /// Calls `body` with each process whose records are dropped (it exited, or its pid is another
    /// process's now), after the drop. One observer; set once.
    func onDeparture(_ body: @escaping @Sendable (ProcessKey) -> Void) {
        departures.withLock { $0 = body }
    }

    /// True when anybody has a record at `path` (a cheap first test before any `stat`).
    func hasReaders(_ path: ItemPath) -> Bool {
        state.withLock { !$0.byPath.isEmpty && $0.byPath[path] != nil }
    }

    /// The paths with records at `path` or, with `inside`, anywhere in it (the whole table looked
    /// at, for a folder).
    func pathsRead(at path: ItemPath, inside: Bool) -> [ItemPath] {
        state.withLock { s in
            if s.byPath.isEmpty { return [] }
            var out = s.byPath[path] != nil ? [path] : []
            if inside { out += s.byPath.keys.filter { path.isAncestor(of: $0) } }
            return out
        }
    }

    /// `pid`, which had read `path`, saved it: its version is now what it wrote. A process with no
    /// record there gets none (a process that only writes is no reader).
    func noteSaved(_ path: ItemPath, identity: FileIdentity, by pid: pid_t) {
        state.withLock { s in
            guard var readers = s.byPath[path], var entry = readers.entry(of: pid) else { return }
            entry.read = identity
            readers.set(entry)
            s.byPath[path] = readers
        }
    }

    /// Drops every record of `process` (it exited, or its pid is another process's now).
    func drop(_ process: ProcessKey) {
        let dropped = state.withLock { s -> Bool in
            guard let p = s.processes[process.pid], p.start == process.start else { return false }
            s.removeProcess(process.pid)
            return true
        }
        if dropped, let observer = departures.withLock({ $0 }) { observer(process) }
    }

    /// Drops the records of processes that are gone (or whose pid is another process's now).
    /// Returns how many processes were dropped.
    @discardableResult
    func sweep() -> Int {
        let tracked = state.withLock { s in s.processes.map { ($0.key, $0.value.start) } }
        var gone = 0
        for (pid, start) in tracked where startTime(pid) != start {
            drop(ProcessKey(pid: pid, start: start))
            gone += 1
        }
        return gone
    }

    private func startSweeping() {
        guard sweepInterval > 0 else { return }
        sweeper.withLock { timer in
            guard timer == nil else { return }
            let t = DispatchSource.makeTimerSource(queue: queue)
            let interval = DispatchTimeInterval.nanoseconds(Int(sweepInterval * 1e9))
            t.schedule(deadline: .now() + interval, repeating: interval, leeway: .milliseconds(50))
            t.setEventHandler { [weak self] in
                guard let self else { return }
                self.sweep()
                // Nothing left to watch: the timer stops until the next reader.
                self.sweeper.withLock { timer in
                    if self.state.withLock({ $0.processes.isEmpty }) {
                        timer?.cancel()
                        timer = nil
                    }
                }
            }
            timer = t
            t.resume()
        }
    }
}

extension ImplicitReaders.State {
    mutating func set(_ entry: ImplicitReaders.Entry, of process: ProcessKey, uid: UInt32, at path: ItemPath) {
        let pid = process.pid
        if let p = processes[pid], p.start != process.start { removeProcess(pid) }
        // A new record beyond a bound: the oldest of its user's (or of the biggest user's) goes first.
        if byPath[path]?.entry(of: pid) == nil {
            let user = processes[pid]?.uid ?? uid
            if let mine = users[user], mine.records >= limits.perUser { dropOldest(of: user, preferring: pid) }
            if records >= limits.total, let biggest = users.max(by: { $0.value.records < $1.value.records })?.key {
                dropOldest(of: biggest, preferring: pid)
            }
        }
        // One hash of the path: the readers are updated in place, or made when there are none.
        var made = false
        func first() -> ImplicitReaders.Readers {
            made = true
            return ImplicitReaders.Readers(first: entry)
        }
        let added = Self.set(entry, in: &byPath[path, default: first()]) || made
        if added {
            records += 1
            let owner = processes[pid]?.uid ?? uid
            processes[pid, default: .init(start: process.start, uid: owner, paths: [])].paths.append(path)
            users[owner, default: .init()].records += 1
            users[owner]?.pids.insert(pid)
        }
    }

    /// Drops the oldest record of `uid`'s: `pid`'s own when it has one, else another of its
    /// processes'. Counted in `dropped`.
    mutating func dropOldest(of uid: UInt32, preferring pid: pid_t) {
        guard let user = users[uid] else { return }
        let victim = processes[pid].map { $0.uid == uid && !$0.live.isEmpty } == true ? pid : user.pids.first { !(processes[$0]?.live.isEmpty ?? true) }
        guard let victim, var p = processes[victim] else { return }
        let path = p.paths[p.head]
        p.head += 1
        if p.head == p.paths.count {
            p.paths.removeAll()
            p.head = 0
        } else if p.head >= 64 && p.head * 2 >= p.paths.count {
            p.paths.removeFirst(p.head)
            p.head = 0
        }
        processes[victim] = p
        if let i = byPath.index(forKey: path), !byPath.values[i].remove(victim) { byPath.remove(at: i) }
        records -= 1
        dropped += 1
        users[uid]?.records -= 1
    }

    /// Sets `entry` among `readers`; true when its process had none there.
    private static func set(_ entry: ImplicitReaders.Entry, in readers: inout ImplicitReaders.Readers) -> Bool {
        let new = readers.entry(of: entry.pid) == nil
        readers.set(entry)
        return new
    }

    mutating func removeProcess(_ pid: pid_t) {
        guard let p = processes.removeValue(forKey: pid) else { return }
        for path in p.live {
            // One hash of the path: the readers are changed in place, or removed with the last one.
            guard let i = byPath.index(forKey: path) else { continue }
            if !byPath.values[i].remove(pid) { byPath.remove(at: i) }
            records -= 1
        }
        if var user = users[p.uid] {
            user.records -= p.live.count
            user.pids.remove(pid)
            users[p.uid] = user.pids.isEmpty ? nil : user
        }
        processes.shrinkIfSparse()
        // Each `grep -r` is a new process that reads every file of a tree once and exits: the
        // table empties at the sweep and fills again at the next walk (two walks' records at once
        // when the next begins before the sweep). A capacity up to `keptPaths` (about 2 MB) is
        // kept, so that the table does not grow again from nothing, rehashing as it goes.
        byPath.shrinkIfSparse(keeping: ImplicitReaders.keptPaths)
    }
}
