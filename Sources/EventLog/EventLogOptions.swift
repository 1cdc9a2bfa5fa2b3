/// How an `EventLogWriter` stores, syncs and prunes its log.
public struct EventLogOptions: Sendable, Equatable {
    /// When the writer calls `fdatasync`.
    public enum SyncPolicy: Sendable, Equatable {
        /// Never: records reach the page cache within a few milliseconds of `append`, which
        /// survives a crash or SIGKILL of the daemon but not a power loss or kernel panic. Default.
        case none
        /// After every batch: survives a power loss too, at the cost of one `fdatasync` per batch
        /// (batches grow under load, so throughput stays high; latency rises).
        case everyBatch
    }

    public var sync: SyncPolicy
    /// A segment is closed and a new one started once it reaches this size.
    public var segmentBytes: Int
    /// Retention by size: the oldest segments are deleted while the log is larger (nil = no limit).
    /// The active segment is never deleted, so keep this several times `segmentBytes`.
    public var maxTotalBytes: UInt64?
    /// Retention by age: segments whose last record is older than this are deleted (nil = keep).
    public var maxAge: Duration?
    /// How often the writer checks age retention when idle.
    public var retentionCheckInterval: Duration
    /// The most records waiting in memory for the writer thread (default 262,144: about half a
    /// second at the writer's top speed, some 80 MB plus the strings at worst). Beyond it (the
    /// disk is stalled or full), appends are dropped and one `gap` record with reason `dropped`
    /// is written in their place.
    public var maxQueuedRecords: Int
    /// How long the writer thread lets records gather after the first one arrives before writing
    /// them (cut short by `flush()`, `close()` or 8,192 queued records). Bounds the syscalls per
    /// record when the mount is busy; it is also the usual delay before a record is in the file
    /// (and visible to `coordfs watch`). Zero writes each wake-up at once.
    public var coalescing: Duration
    /// The writer thread's nice value (0 to 19). Above 0 the writer yields the CPU to the threads
    /// whose work it records (a mount's FUSE workers) when the machine is busy, and catches up as
    /// soon as a CPU is free; its queue and `maxQueuedRecords` absorb the difference.
    public var writerNiceness: Int32

    public init(
        sync: SyncPolicy = .none, segmentBytes: Int = 16 << 20, maxTotalBytes: UInt64? = nil,
        maxAge: Duration? = nil, retentionCheckInterval: Duration = .seconds(10),
        maxQueuedRecords: Int = 1 << 18, coalescing: Duration = .milliseconds(5), writerNiceness: Int32 = 0
    ) {
        self.writerNiceness = writerNiceness
        self.sync = sync
        self.segmentBytes = segmentBytes
        self.maxTotalBytes = maxTotalBytes
        self.maxAge = maxAge
        self.retentionCheckInterval = retentionCheckInterval
        self.maxQueuedRecords = maxQueuedRecords
        self.coalescing = coalescing
    }

    func validate() throws {
        guard segmentBytes >= 4096 else { throw EventLogError.invalidArgument("segmentBytes must be at least 4096") }
        guard maxQueuedRecords >= 1 else { throw EventLogError.invalidArgument("maxQueuedRecords must be at least 1") }
        if let a = maxAge, a <= .zero { throw EventLogError.invalidArgument("maxAge must be positive") }
        if let b = maxTotalBytes, b == 0 { throw EventLogError.invalidArgument("maxTotalBytes must be positive") }
        guard coalescing >= .zero, coalescing <= .milliseconds(100) else {
            throw EventLogError.invalidArgument("coalescing must be between 0 and 100 ms")
        }
        guard (0...19).contains(writerNiceness) else { throw EventLogError.invalidArgument("writerNiceness must be between 0 and 19") }
        guard retentionCheckInterval > .zero, retentionCheckInterval <= .seconds(86_400) else {
            throw EventLogError.invalidArgument("retentionCheckInterval must be positive and at most a day")
        }
    }
}

extension Duration {
    /// Whole nanoseconds, 0 for a negative duration and `UInt64.max` for one beyond 584 years
    /// (saturating: a huge option value must not trap).
    var nanoseconds: UInt64 {
        let (s, atto) = components
        if s < 0 { return 0 }
        let (ns, overflow) = UInt64(s).multipliedReportingOverflow(by: 1_000_000_000)
        if overflow { return .max }
        let (sum, carry) = ns.addingReportingOverflow(UInt64(atto / 1_000_000_000))
        return carry ? .max : sum
    }
}
