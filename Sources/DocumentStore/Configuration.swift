/// How long versions are kept.
public struct Retention: Sendable, Hashable {
    /// Keep at most this many versions per document (pinned versions always stay; what one user
    /// pins is bounded by ``UserPinBudget``).
    public var maxVersionsPerDocument: Int
    /// Keep at most this many bytes (logical sizes) of versions in total, dropping the oldest
    /// unpinned versions first.
    public var maxTotalBytes: Int64

    public init(maxVersionsPerDocument: Int = 20, maxTotalBytes: Int64 = 4 << 30) {
        self.maxVersionsPerDocument = max(0, maxVersionsPerDocument)
        self.maxTotalBytes = max(0, maxTotalBytes)
    }
}

/// How much of the store one user's pins may hold (docs/document-store.md, "Per-user budget"):
/// the versions its presenters' bases, its open conflicts (base and theirs) and its live readers'
/// holds keep beyond retention, counted once per version and by logical size. A version that would
/// take a user past either bound is not pinned for it (an ordinary version under retention, or not
/// kept at all when it would only be its base); what others pin is never touched. `exempt` users
/// (root and the mount's owner) and pins without a user are not counted.
public struct UserPinBudget: Sendable, Hashable {
    /// Distinct versions one user may pin.
    public var maxVersions: Int
    /// Logical bytes of the versions one user may pin.
    public var maxBytes: Int64
    /// Users not bound by the budget.
    public var exempt: Set<UInt32>

    public init(maxVersions: Int = .max, maxBytes: Int64 = .max, exempt: Set<UInt32> = [0]) {
        self.maxVersions = max(0, maxVersions)
        self.maxBytes = max(0, maxBytes)
        self.exempt = exempt
    }

    /// Whether the budget binds anybody.
    public var isBounded: Bool { maxVersions != .max || maxBytes != .max }

    /// Whether `uid` is bound by it (nil: a pin nobody owns, root's).
    func binds(_ uid: UInt32?) -> Bool {
        guard let uid, isBounded else { return false }
        return !exempt.contains(uid)
    }
}

/// What happens to a presenter without unsaved changes when its document changes (the guide's
/// default actions). `nil` means "ask": a conflict is recorded anyway.
public struct DefaultActions: Sendable, Hashable {
    /// `.reload` (default) or nil.
    public var whenChanged: Resolution?
    /// `.close` (default) or nil.
    public var whenDeleted: Resolution?

    public init(whenChanged: Resolution? = .reload, whenDeleted: Resolution? = .close) {
        self.whenChanged = whenChanged
        self.whenDeleted = whenDeleted
    }
}

/// Which versions to keep of files nobody presents.
public enum UnpresentedFilePolicy: String, Sendable, Hashable {
    /// Keep nothing.
    case never
    /// Keep replaced and deleted files (a clone, or a copy where the filesystem does not clone),
    /// and in-place writes only where the filesystem clones. (Default.)
    case whenCheap
    /// Also copy before in-place writes on filesystems without clones.
    case always
}

/// The store's knobs.
public struct StoreConfiguration: Sendable, Hashable {
    public var retention: Retention
    public var defaultActions: DefaultActions
    public var unpresentedFiles: UnpresentedFilePolicy
    /// Capture a presenter's base when it registers, where cloning is O(1) (reflink); otherwise
    /// the base is captured lazily by the first snapshot.
    public var eagerBaseWhenCloneable: Bool
    /// Use FICLONE when the backing filesystem supports it (turn off to measure or test the copy
    /// path on a reflink filesystem).
    public var allowReflink: Bool
    /// What one user's pins may hold (unbounded by default; a mount bounds it).
    public var userPins: UserPinBudget
    /// Versions' bytes are copied without the blocks the file system keeps for root
    /// (`RootReserve`): on a mount other users write, the daemon keeps their documents' versions as
    /// root, and they must not take the last blocks kept for root, its event log and this store's
    /// database. A copy that finds no room fails (`ENOSPC`) and the version is not kept.
    public var copiesLeaveRootReserve = false

    public init(
        retention: Retention = Retention(), defaultActions: DefaultActions = DefaultActions(),
        unpresentedFiles: UnpresentedFilePolicy = .whenCheap, eagerBaseWhenCloneable: Bool = true,
        allowReflink: Bool = true, userPins: UserPinBudget = UserPinBudget()
    ) {
        self.userPins = userPins
        self.retention = retention
        self.defaultActions = defaultActions
        self.unpresentedFiles = unpresentedFiles
        self.eagerBaseWhenCloneable = eagerBaseWhenCloneable
        self.allowReflink = allowReflink
    }
}
