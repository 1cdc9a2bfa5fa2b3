import EventLog

/// The event log of a mount (`-o log=...`).
public struct EventLogSettings: Sendable, Equatable {
    /// Off: nothing is recorded (for comparison benchmarks).
    public var enabled = true
    /// fdatasync after every batch: records survive a power loss, not only a daemon crash.
    public var syncEveryBatch = false
    /// Retention by size (whole old segments are dropped; readers see a gap record).
    public var maxMegabytes: UInt64 = 256
    /// Retention by age.
    public var maxDays: Double? = nil
    /// `log_user_share`: the percentage of `maxMegabytes` one user's records (not root's, not the
    /// owner's) may take before its further records are summarised (100: no bound).
    public var userSharePercent = 10
    /// `log_summary_interval`: seconds between the `coalesced` records of a user over its share,
    /// and the most an idle log writer sleeps before it looks for one that is due (its retention
    /// check, every 10 s by default, wakes it sooner when this is shorter).
    public var summaryIntervalSeconds = 10
    public init() {}

    /// `log_user_share`: 1 to 100 percent.
    public static let userShareRange: ClosedRange<Int> = 1...100
    /// `log_summary_interval`: 1 s to an hour.
    public static let summaryIntervalRange: ClosedRange<Int> = 1...3600

    /// Each user's share of the log, for the daemon's recorder (nil when off).
    var userShare: UserLogShare? {
        guard userSharePercent < 100 else { return nil }
        return UserLogShare(percent: userSharePercent, logBytes: writerOptions.maxTotalBytes ?? maxMegabytes << 20,
                            exempt: PeerLimits.exemptUsers, summaryMillis: Int64(clampedSummaryInterval) * 1000)
    }

    /// `log_max_mb`: 1 MiB to 16 TiB (`MountOptions.parse` refuses the rest).
    public static let megabytesRange: ClosedRange<UInt64> = 1...(1 << 24)
    /// `log_max_days`: a hundred years at most.
    public static let maxDaysLimit = 36_500.0

    /// `summaryIntervalSeconds` within its range (a value set in code past the parser's must not trap).
    private var clampedSummaryInterval: Int {
        min(max(summaryIntervalSeconds, Self.summaryIntervalRange.lowerBound), Self.summaryIntervalRange.upperBound)
    }

    var writerOptions: EventLogOptions {
        var o = EventLogOptions()
        o.sync = syncEveryBatch ? .everyBatch : .none
        // Clamped, not trusted: a value set in code past the parser's range must not trap.
        let megabytes = min(max(maxMegabytes, Self.megabytesRange.lowerBound), Self.megabytesRange.upperBound)
        o.maxTotalBytes = megabytes * 1024 * 1024
        // Retention drops whole segments and never the newest: keep segments small enough that the
        // limit bounds the log (at least 8 segments fit).
        o.segmentBytes = Int(min(UInt64(o.segmentBytes), max(64 * 1024, megabytes * 1024 * 1024 / 8)))
        // A quiet user's summary is written at the idle writer's retention check: no later than
        // one summary interval after it is due.
        if userSharePercent < 100 && clampedSummaryInterval < 10 {
            o.retentionCheckInterval = .seconds(clampedSummaryInterval)
        }
        o.maxAge = maxDays.map { .seconds(($0.isNaN ? 0 : min(max($0, 0), Self.maxDaysLimit)) * 86_400) }
        return o
    }
}
