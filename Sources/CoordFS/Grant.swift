import Coordination
import Glibc
import Synchronization

/// An access granted to one operation, or none: announcements then go to the coordinator directly
/// (`Coordinator.announce`, a change made outside any access), so presenters here still hear, and
/// the other nodes of a cluster too.
struct Grant: Sendable {
    let access: CoordinatedAccess?
    let coordinator: Coordinator
    let origin: AccessOrigin

    func announce(_ change: AccessChange) {
        if let access { access.announce(change) } else { coordinator.announce(change, origin: origin) }
    }
    func release() { access?.release() }
    var isWrite: Bool { access?.intents.contains(where: \.isWriting) ?? true }
}

/// What an open file holds: its access, for the life of the handle.
final class HandleAccess: Sendable {
    let grant: Grant
    let path: ItemPath
    /// The process that opened it.
    let pid: pid_t
    /// Opened with O_TRUNC (or created): a change even without a write.
    let truncated: Bool
    /// A temp/backup name: nobody is told about it.
    let quiet: Bool
    /// An append (O_APPEND without O_TRUNC): its open did not wait for files open for reading.
    let appends: Bool
    /// An append the daemon serves (no kernel passthrough) because what presenters loaded is kept
    /// as a prefix of the file, not a copy (`DocumentHooks.beforeAppend`): every write, truncate
    /// and `fallocate` through it is looked at (`prefixEnd`).
    let watched: Bool
    private let touchedFlag = Atomic<Bool>(false)
    private let finished = Mutex<Bool>(false)
    /// While above 0, the document store may hold a base that is the file's first `prefixEnd`
    /// bytes: a change below it through this open keeps them first (`takePrefixEnd`).
    private let prefixEndValue = Atomic<Int64>(0)
    init(grant: Grant, path: ItemPath, pid: pid_t, truncated: Bool, quiet: Bool, appends: Bool = false, watchedBelow: Int64? = nil) {
        self.grant = grant; self.path = path; self.pid = pid; self.truncated = truncated; self.quiet = quiet; self.appends = appends
        self.watched = watchedBelow != nil
        if let watchedBelow { prefixEndValue.store(watchedBelow, ordering: .relaxed) }
    }
    /// The end of the prefix this open must not change unseen (0: none).
    var prefixEnd: Int64 { prefixEndValue.load(ordering: .relaxed) }
    /// Another append recorded a prefix of the file up to `end`: watched up to there too.
    func watch(below end: Int64) {
        var current = prefixEndValue.load(ordering: .relaxed)
        while current < end {
            let (exchanged, original) = prefixEndValue.compareExchange(expected: current, desired: end, ordering: .relaxed)
            if exchanged { return }
            current = original
        }
    }
    /// True once when a change through this open at `offset` (a size change: 0) falls below the
    /// prefix: the caller keeps the prefix first; later changes through this open are not
    /// looked at again (the store holds no prefix of the file after that, until another append
    /// records one and raises it, `watch(below:)`).
    func takePrefixEnd(below offset: Int64) -> Bool {
        let end = prefixEndValue.load(ordering: .relaxed)
        guard end > 0, offset < end else { return false }
        return prefixEndValue.compareExchange(expected: end, desired: 0, ordering: .relaxed).exchanged
    }
    private let resizedFlag = Atomic<Bool>(false)
    private let closedByOpenerFlag = Atomic<Bool>(false)
    /// The process that opened it closed a descriptor of it (a FLUSH from that process): its next
    /// open of the file for writing tells this open's change first (`finishClosedWrites`).
    var closedByOpener: Bool { closedByOpenerFlag.load(ordering: .relaxed) }
    func closeByOpener() { closedByOpenerFlag.store(true, ordering: .relaxed) }
    /// Presenters registered at or above `path` while this open is held, with the file's size and
    /// times when each registered (what it could read then): its release tells it a change only
    /// when the file changed since (`CoordinatedFileSystem.finish`).
    let lateRegistrants = Mutex<[PresenterID: PassthroughWrites.Times]>([:])
    /// Attributes changed while open (fchmod, futimens).
    var touched: Bool { touchedFlag.load(ordering: .relaxed) }
    func touch() { touchedFlag.store(true, ordering: .relaxed) }
    /// Truncated or extended by a setattr while open (ftruncate, or truncate by the same process).
    var resized: Bool { resizedFlag.load(ordering: .relaxed) }
    func resize() { resizedFlag.store(true, ordering: .relaxed) }
    /// Runs `body` the first time only; a second caller waits until it has run.
    func finishOnce(_ body: () -> Void) {
        finished.withLock { done in
            if !done { done = true; body() }
        }
    }
}
