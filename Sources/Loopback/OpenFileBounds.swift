import Glibc
import Linux
import Synchronization
import SystemPackage

/// What users other than root and the mount's owner may hold of the daemon's descriptors: each
/// open file and directory (and an unnamed file's node, `O_TMPFILE`) holds a descriptor in the
/// daemon for as long as the kernel holds the open, and on an `allow_other` mount any local user can
/// open a world-readable file over and over from many processes, each up to its own `ulimit -n`;
/// each of its control-socket connections holds one or two (`ControlService`), and so does a
/// resolution waiting for its grant with the file it resolves from open.
/// Without a bound one user took every descriptor the daemon has: root's opens through the mount,
/// root's presenters' connections and the store's and the log's files then failed.
///
/// Bounds (docs/protocol.md, "Limits"): `max_user_open_files` opens of one user (its connections:
/// `max_user_connections`), and everything all such users hold together at most `others`
/// (`DescriptorShares.others`: the opens, connections and files of every such user draw from this
/// one share, so no set of users, however many uids, takes what root, the owner and the daemon's own
/// files need). Beyond either, an open fails with ENFILE ("too many open files in system": the
/// caller's own table is not full), a connection is refused, nothing done.
/// Root's and the owner's are not counted (two comparisons, no lock).
public final class OpenFileBounds: Sendable {
    /// Root, and the daemon's own user (the mount's owner).
    let owner: UInt32
    private let perUser = Atomic<Int>(Int.max)
    private let others = Atomic<Int>(Int.max)
    private struct Counts {
        /// Each user's opens through the mount (for `max_user_open_files`).
        var byUser: [UInt32: Int] = [:]
        /// Everything such users hold: their opens, and what `takeShare` took.
        var total = 0
        /// What `takeShare` took (connections, files waiting resolutions keep open).
        var shared = 0
    }
    private let counts = Mutex(Counts())
    private let refusedCount = Atomic<Int>(0)
    private let shareRefusedCount = Atomic<Int>(0)
    /// When a refusal was last said (monotonic seconds), to say it at most once a minute.
    private let lastSaid = Mutex<(at: Double, refusedThen: Int)?>(nil)
    private let notice = Mutex<(@Sendable (String) -> Void)?>(nil)

    public init(owner: UInt32 = getuid()) { self.owner = owner }

    /// A user's opens held (given back with `giveBack` when its descriptor closes).
    public struct Hold: Sendable {
        let bounds: OpenFileBounds
        let uid: UInt32
        let units: Int
        /// Gives the descriptors back (once: the holder calls it from its deinit).
        func giveBack() { bounds.give(uid, units) }
    }

    /// Sets the bounds: `perUser` opens of one user, `others` of all users but root and the owner.
    public func configure(perUser: Int, others: Int) {
        self.perUser.store(max(0, perUser), ordering: .relaxed)
        self.others.store(max(0, others), ordering: .relaxed)
    }

    /// Where the daemon's log says a refusal (at most once a minute, with how many since).
    public func setNotice(_ say: (@Sendable (String) -> Void)?) { notice.withLock { $0 = say } }

    @inline(__always)
    func isExempt(_ uid: UInt32) -> Bool { uid == 0 || uid == owner }

    /// Takes `units` descriptors for `uid`'s open: ENFILE (nothing taken) at `uid`'s bound or at
    /// the others' total; nil for root and the owner (nothing counted).
    func take(_ uid: UInt32, _ units: Int = 1) -> Result<Hold?, Errno> {
        if isExempt(uid) { return .success(nil) }
        let user = perUser.load(ordering: .relaxed), all = others.load(ordering: .relaxed)
        let taken = counts.withLock { c -> Bool in
            let mine = c.byUser[uid] ?? 0
            guard mine + units <= user, c.total + units <= all else { return false }
            c.byUser[uid] = mine + units
            c.total += units
            return true
        }
        guard taken else {
            refused(uid, (counts.withLock { $0.byUser[uid] ?? 0 }) + units > user ? .userBound : .share)
            return .failure(Errno(rawValue: ENFILE))
        }
        return .success(Hold(bounds: self, uid: uid, units: units))
    }

    private func give(_ uid: UInt32, _ units: Int) {
        counts.withLock { c in
            if let mine = c.byUser[uid], mine > units { c.byUser[uid] = mine - units } else { c.byUser[uid] = nil }
            c.total = max(0, c.total - units)
        }
    }

    /// Takes `units` of the others' share for something of `uid`'s other than an open through the
    /// mount (a control-socket connection, a file a waiting resolution keeps open): within the
    /// share only (its own bound is the caller's: `max_user_connections`, `max_user_accesses`);
    /// false, counted and said as a refusal, when the share is taken. True for root and the owner
    /// (nothing counted).
    public func takeShare(_ uid: UInt32, units: Int) -> Bool {
        if isExempt(uid) { return true }
        let all = others.load(ordering: .relaxed)
        let taken = counts.withLock { c -> Bool in
            guard c.total + units <= all else { return false }
            c.total += units
            c.shared += units
            return true
        }
        if !taken { refused(uid, .share, open: false) }
        return taken
    }

    /// Gives back what `takeShare` took (nothing for root and the owner).
    public func giveShare(_ uid: UInt32, units: Int) {
        if isExempt(uid) { return }
        counts.withLock { c in
            c.total = max(0, c.total - units)
            c.shared = max(0, c.shared - units)
        }
    }

    /// Whether an open of `uid` would be refused now (asked before coordinating an open, so that a
    /// user at its bound asks no presenter and takes no access for an open that cannot be made).
    @inline(__always)
    public func refuses(_ uid: UInt32) -> Bool {
        if isExempt(uid) { return false }
        let user = perUser.load(ordering: .relaxed), all = others.load(ordering: .relaxed)
        let (mine, total) = counts.withLock { ($0.byUser[uid] ?? 0, $0.total) }
        guard mine < user, total < all else {
            refused(uid, mine >= user ? .userBound : .share)
            return true
        }
        return false
    }

    /// Whether an open, whoever's, may keep the descriptor it took (`fd`): not one of the numbers the
    /// daemon keeps for its own files (`DescriptorReserve`). False: counted and said as a refusal; the
    /// caller closes `fd` and fails with ENFILE.
    @inline(__always)
    public func mayKeep(_ fd: Int32) -> Bool {
        if DescriptorReserve.admits(fd) { return true }
        refused(0, .reserve)
        return false
    }

    /// A node refused because it would hold a descriptor at a number the daemon keeps for itself
    /// (an item without a file handle, `InodeTable.remember`): counted and said as a refusal; the
    /// error to fail the lookup or create with (ENFILE).
    public func refusedAtReserve() -> Errno {
        refused(0, .reserve)
        return Errno(rawValue: ENFILE)
    }

    /// Whether an open that changes its file as it opens (`O_TRUNC`, which cannot be refused after
    /// the fact) may be made: a descriptor below the reserve is free now (`probe`: any descriptor
    /// the caller holds). False: counted and said as a refusal; fail with ENFILE, nothing done.
    public func hasRoom(probing probe: Int32) -> Bool {
        if DescriptorReserve.hasRoom(probing: probe) { return true }
        refused(0, .reserve)
        return false
    }

    /// Why an open or a share was refused.
    private enum Refusal { case userBound, share, reserve }

    /// Counts a refusal and says it (at most once a minute, with how many since): `.userBound`, an
    /// open of a user at `max_user_open_files`; `.share`, anything refused because the others'
    /// share is taken; `.reserve`, an open of anyone's (or a node without a file handle) that found
    /// only the daemon's own numbers left.
    private func refused(_ uid: UInt32, _ why: Refusal, open: Bool = true) {
        if open { refusedCount.add(1, ordering: .relaxed) } else { shareRefusedCount.add(1, ordering: .relaxed) }
        let n = refusedCount.load(ordering: .relaxed) + shareRefusedCount.load(ordering: .relaxed)
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        let t = Double(now.tv_sec) + Double(now.tv_nsec) / 1e9
        let since = lastSaid.withLock { last -> Int? in
            if let l = last, t - l.at < 60 { return nil }
            defer { last = (at: t, refusedThen: n) }
            return n - (last?.refusedThen ?? 0)
        }
        guard let since, let say = notice.withLock({ $0 }) else { return }
        let which: String
        switch why {
        case .userBound:
            which = "user \(uid) holds max_user_open_files (\(perUser.load(ordering: .relaxed))) files open through the mount: "
                + "its further opens fail with ENFILE until some close"
        case .share:
            which = "users other than root and the owner hold \(others.load(ordering: .relaxed)) of the daemon's descriptors, all it keeps "
                + "for them (their opens through the mount, control-socket connections, files waiting resolutions keep open): their "
                + "further opens fail with ENFILE and their connections are refused until some close"
        case .reserve:
            which = "the daemon holds all its descriptors but the last \(DescriptorReserve.kept), which it keeps for its own files: "
                + "opens through the mount (and lookups, where the backing file system has no file handles) fail with ENFILE, "
                + "whoever's, until some close"
        }
        say("coordfs: \(which) (\(since) refused since last said)")
    }

    /// Opens refused so far.
    public var refusals: Int { refusedCount.load(ordering: .relaxed) }
    /// What `takeShare` refused so far (connections, resolutions).
    public var shareRefusals: Int { shareRefusedCount.load(ordering: .relaxed) }
    /// Descriptors held for `uid`'s opens now (0 for root and the owner: not counted).
    public func held(by uid: UInt32) -> Int { counts.withLock { $0.byUser[uid] ?? 0 } }
    /// Descriptors held for the opens of users other than root and the owner now.
    public var heldByOthers: Int { counts.withLock { $0.total - $0.shared } }
    /// Everything held of the others' share now: their opens and what `takeShare` took.
    public var shareHeld: Int { counts.withLock { $0.total } }
    /// The bounds now.
    public var bounds: (perUser: Int, others: Int) { (perUser.load(ordering: .relaxed), others.load(ordering: .relaxed)) }
}
