/// How the mount coordinates unmodified tools (the `-o` options of docs/semantics.md).
public struct CoordinationOptions: Sendable, Equatable {
    /// Off: a plain passthrough (for comparison benchmarks).
    public var enabled = true
    /// Each presenter ask (relinquish, save, accommodate deletion) may take this long.
    public var askTimeout = 5.0
    /// A presenter that misses its deadline fails the operation with ETIMEDOUT instead of being
    /// recorded as timed out and passed over.
    public var strict = false
    /// How long an open for reading waits for a conflicting writer before it proceeds anyway.
    public var readWait = 1.0
    /// How long a write (open for writing, truncate, rename, unlink, ...) waits for conflicting
    /// accesses. At the deadline: EBUSY when a writer holds the item, proceed when only readers do.
    public var writeWait = 5.0
    /// After a presented document is unlinked or renamed to a backup name, how long a re-creation at
    /// its path still counts as the same save (vim, emacs, git checkout).
    public var saveWindow = 1.0
    /// Temporary, swap, lock and backup names.
    public var tempPatterns = TempNamePatterns()
    public init() {}
}
