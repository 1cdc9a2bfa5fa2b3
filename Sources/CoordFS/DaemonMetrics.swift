import Coordination
import CoreMetrics
import DocumentStore
import EventLog
import FuseKit
import Glibc
import Prometheus
import Synchronization
import LinuxGNU

/// The daemon's Prometheus metrics (`-o metrics=HOST:PORT`, docs/metrics.md): one registry per
/// mount, served as Prometheus text at `http://HOST:PORT/metrics` by `MetricsEndpoint`.
///
/// What happens on a hot path costs one relaxed atomic add on a preallocated slot of its own cache
/// line (no lock, no allocation, no label lookup): FUSE requests are counted by FuseKit
/// (`FuseRequestCounters`), coordination steps by a `CoordinationEventSink` in front of the event
/// log's and kept versions by the store (`MetricSlots`). The registry's counters are brought up
/// to those slots when Prometheus scrapes, as the levels (presenters, held and waiting accesses,
/// open conflicts, the event log's counters, the process) are read then. Only the ask latency,
/// once per answer of a presenter, is recorded at once (a swift-metrics timer on the registry's
/// histogram). `coordfs-bench metrics` measures what this costs per FUSE request.
public final class DaemonMetrics: @unchecked Sendable {
    public let registry = PrometheusCollectorRegistry()
    private let factory: PrometheusMetricsFactory

    /// Ask latency buckets, in seconds: a presenter answers in microseconds (in process) to seconds
    /// (a person's editor saving); `ask_timeout` is 5 s by default.
    static let askBuckets: [Duration] = [
        .microseconds(100), .microseconds(250), .microseconds(500), .milliseconds(1), .milliseconds(2.5), .milliseconds(5),
        .milliseconds(10), .milliseconds(25), .milliseconds(50), .milliseconds(100), .milliseconds(250), .milliseconds(500),
        .seconds(1), .seconds(2.5), .seconds(5), .seconds(10),
    ]

    /// Counted as it happens, read at scrape.
    let slots = MetricSlots()
    /// Per answer of a presenter, through swift-metrics' API.
    let askLatency: CoreMetrics.Timer
    /// The registry's counters for the slots, by slot.
    private let slotCounters: [(MetricSlots.Slot, Prometheus.Counter)]

    // Read at scrape time.
    private let fuseRequests: [(FuseOperation, Prometheus.Counter)]
    private let presenters, heldAccesses, waitingAccesses, openConflicts: Prometheus.Gauge
    private let logRecords, logDropped, logBytes, logWriteErrors: Prometheus.Counter
    private let logStuck: Prometheus.Gauge
    private let logUsersOverShare: Prometheus.Gauge
    private let logRecordsSummarised: Prometheus.Counter
    private let readerRecords: Prometheus.Gauge
    private let readersDropped: Prometheus.Counter
    private let controlOutOfDescriptors: Prometheus.Counter
    private let openFilesRefused: Prometheus.Counter
    private let othersOpenFiles: Prometheus.Gauge
    private let othersDescriptors, othersDescriptorsLimit, nodeDescriptorsLimit: Prometheus.Gauge
    private let connectionsRefused: Prometheus.Counter
    private let cpuSeconds: Prometheus.Counter
    private let residentBytes, virtualBytes, openFDs, maxFDs, startTime, threads: Prometheus.Gauge
    /// What the scrape-time counters had reached at the last scrape (they only ever increase by the delta).
    private let seen = Mutex<[ObjectIdentifier: UInt64]>([:])
    /// CPU seconds at the last scrape (under `scraping`).
    private var cpuSeen = 0.0
    /// One scrape at a time.
    private let scraping = Mutex(())

    public init() {
        let f = PrometheusMetricsFactory(registry: registry)
        factory = f
        let r = registry
        func describe(_ name: String, _ help: String) -> MetricNameDescriptor {
            MetricNameDescriptor(metricName: name, unitName: "", helpText: help)
        }
        func counter(_ name: String, _ help: String, labels: [(String, String)] = []) -> Prometheus.Counter {
            r.makeCounter(descriptor: describe(name, help), labels: labels)
        }
        var c: [(MetricSlots.Slot, Prometheus.Counter)] = [
            (.requests, counter("coordfs_coordination_requests_total", "Coordinated access requests (tools through the mount and clients of the control socket).")),
            (.grants, counter("coordfs_coordination_grants_total", "Coordinated accesses granted.")),
            (.denials, counter("coordfs_coordination_denials_total", "Coordinated access requests that ended without access (a presenter refused or timed out under strict, a wait deadline, a deadlock, cancelled).")),
            (.askTimeouts, counter("coordfs_presenter_ask_timeouts_total", "Asks to presenters that missed ask_timeout.")),
            (.askErrors, counter("coordfs_presenter_ask_errors_total", "Asks presenters answered with an error (refusing the access).")),
            (.asksGone, counter("coordfs_presenter_asks_gone_total", "Asks whose presenter went away before answering.")),
        ]
        let asks = r.makeDurationHistogram(descriptor: describe("coordfs_ask_duration_seconds", "Time from asking a presenter to its answer."),
                                           buckets: Self.askBuckets)
        askLatency = CoreMetrics.Timer(label: "coordfs_ask_duration_seconds", dimensions: [], handler: asks, factory: f)
        // The ways the store keeps a version now (a `link` version is one of an older build's store).
        for method in MetricSlots.keptMethods {
            c.append((MetricSlots.snapshots(method), counter("coordfs_snapshots_total", "Versions the document store kept, by how they are stored.", labels: [("method", method.rawValue)])))
            c.append((MetricSlots.snapshotBytes(method), counter("coordfs_snapshot_bytes_total", "Bytes of the versions the document store kept, by how they are stored (a reflink shares them).", labels: [("method", method.rawValue)])))
        }
        slotCounters = c
        fuseRequests = FuseOperation.allCases.map { op in
            (op, r.makeCounter(descriptor: describe("coordfs_fuse_requests_total", "FUSE requests the kernel sent the daemon, by operation."), labels: [("operation", op.name)]))
        }
        presenters = r.makeGauge(descriptor: describe("coordfs_presenters", "Presenters registered (in the daemon and over the control socket)."))
        heldAccesses = r.makeGauge(descriptor: describe("coordfs_accesses_held", "Coordinated accesses held now (an open file through the mount is one)."))
        waitingAccesses = r.makeGauge(descriptor: describe("coordfs_accesses_waiting", "Coordinated access requests waiting for another access to end."))
        openConflicts = r.makeGauge(descriptor: describe("coordfs_conflicts_open", "Open conflicts in the document store."))
        logRecords = r.makeCounter(descriptor: describe("coordfs_event_log_records_total", "Records written to the event log (gap records included)."))
        logDropped = r.makeCounter(descriptor: describe("coordfs_event_log_gap_records_total", "Records the event log could not keep under memory pressure (each range is covered by a gap record)."))
        logBytes = r.makeCounter(descriptor: describe("coordfs_event_log_written_bytes_total", "Bytes written to the event log's segments."))
        logWriteErrors = r.makeCounter(descriptor: describe("coordfs_event_log_write_errors_total", "Failed writes of the event log (retried)."))
        logStuck = r.makeGauge(descriptor: describe("coordfs_event_log_stuck", "1 while the event log cannot be written (a full disk), else 0."))
        logUsersOverShare = r.makeGauge(descriptor: describe("coordfs_event_log_users_over_share", "Users over their share of the event log (log_user_share) now, whose records are summarised in coalesced records (coordfs status names them)."))
        logRecordsSummarised = r.makeCounter(descriptor: describe("coordfs_event_log_records_summarised_total", "Records of users over their share of the event log summarised in coalesced records instead of stored one by one."))
        readerRecords = r.makeGauge(descriptor: describe("coordfs_lost_update_readers", "Records of the lost-update readers table (a live process that read a document)."))
        readersDropped = r.makeCounter(descriptor: describe("coordfs_lost_update_readers_dropped_total", "Records of the lost-update readers table dropped by max_user_readers or max_readers (the oldest of a user's)."))
        controlOutOfDescriptors = r.makeCounter(descriptor: describe("coordfs_control_out_of_descriptors_total", "Times the control socket found no file descriptor (or memory) to accept a connection with; new connections waited meanwhile."))
        openFilesRefused = r.makeCounter(descriptor: describe("coordfs_open_files_refused_total", "Opens through the mount refused with ENFILE by max_user_open_files or by the descriptors kept for root and the owner."))
        othersOpenFiles = r.makeGauge(descriptor: describe("coordfs_open_files_others", "Descriptors the daemon holds now for files and directories users other than root and the owner hold open through the mount."))
        othersDescriptors = r.makeGauge(descriptor: describe("coordfs_others_descriptors", "Descriptors of the others' share held now for users other than root and the owner: their opens through the mount, two per control-socket connection, files their waiting resolutions keep open."))
        othersDescriptorsLimit = r.makeGauge(descriptor: describe("coordfs_others_descriptors_limit", "The others' share: what users other than root and the owner may hold together of the daemon's descriptors, cut from its descriptor limit as raised."))
        nodeDescriptorsLimit = r.makeGauge(descriptor: describe("coordfs_node_descriptors_limit", "The node budget: descriptors the daemon's nodes may hold (half its descriptor limit as raised); beyond it nodes keep file handles."))
        connectionsRefused = r.makeCounter(descriptor: describe("coordfs_control_connections_refused_total", "Control-socket connections refused by max_connections, max_user_connections or the others' share of the daemon's descriptors."))
        cpuSeconds = r.makeCounter(descriptor: describe("process_cpu_seconds_total", "Total user and system CPU time spent in seconds."))
        residentBytes = r.makeGauge(descriptor: describe("process_resident_memory_bytes", "Resident memory size in bytes."))
        virtualBytes = r.makeGauge(descriptor: describe("process_virtual_memory_bytes", "Virtual memory size in bytes."))
        openFDs = r.makeGauge(descriptor: describe("process_open_fds", "Number of open file descriptors."))
        maxFDs = r.makeGauge(descriptor: describe("process_max_fds", "Maximum number of open file descriptors."))
        startTime = r.makeGauge(descriptor: describe("process_start_time_seconds", "Start time of the process since unix epoch in seconds."))
        threads = r.makeGauge(descriptor: describe("process_threads", "Number of OS threads in the process."))
    }

    /// A version the store kept.
    func snapshotTaken(_ snapshot: Snapshot) {
        guard !snapshot.reused else { return }
        slots.add(MetricSlots.snapshots(snapshot.version.method))
        slots.add(MetricSlots.snapshotBytes(snapshot.version.method), UInt64(max(0, snapshot.version.size)))
    }

    /// The sink that counts the coordinator's steps, then hands each to `next` (the daemon puts
    /// it in front of the event log's; `coordfs-bench metrics` times it).
    public func eventSink(next: (any CoordinationEventSink)?) -> any CoordinationEventSink {
        MetricsEventSink(metrics: self, next: next)
    }

    /// The metrics as Prometheus text, with the levels read now.
    public func scrape(daemon: Daemon) -> [UInt8] {
        scraping.withLock { _ in
            if let counters = daemon.requestCounters {
                for (op, c) in fuseRequests { advance(c, to: counters.value(op)) }
            }
            for (slot, c) in slotCounters { advance(c, to: slots.value(slot)) }
            let counts = daemon.coordinator.statusCounts()
            presenters.set(Double(counts.presenters))
            heldAccesses.set(Double(counts.held))
            waitingAccesses.set(Double(counts.waiting))
            if let store = daemon.store, let open = try? store.documentStore.conflicts(state: .open) {
                openConflicts.set(Double(open.count))
            }
            if let readers = daemon.coordinated?.lostUpdates.readers {
                readerRecords.set(Double(readers.count))
                advance(readersDropped, to: readers.dropped)
            }
            if let log = daemon.eventLog {
                let s = log.statistics
                advance(logRecords, to: s.written)
                advance(logDropped, to: s.dropped)
                advance(logBytes, to: s.bytesWritten)
                advance(logWriteErrors, to: s.writeErrors)
                logStuck.set(log.stuckSince == nil ? 0.0 : 1.0)
            }
            if let share = daemon.recorder?.shareState {
                logUsersOverShare.set(Double(share.users.count))
                advance(logRecordsSummarised, to: share.summarisedRecords)
            }
            if let control = daemon.control { advance(controlOutOfDescriptors, to: control.server.descriptorExhaustions) }
            advance(openFilesRefused, to: UInt64(daemon.loopback.openFiles.refusals))
            othersOpenFiles.set(Double(daemon.loopback.openFiles.heldByOthers))
            othersDescriptors.set(Double(daemon.loopback.openFiles.shareHeld))
            othersDescriptorsLimit.set(Double(daemon.descriptors.others))
            nodeDescriptorsLimit.set(Double(daemon.loopback.nodeDescriptorBudget))
            if let control = daemon.control { advance(connectionsRefused, to: control.server.refusedConnections) }
            readProcess()
            return registry.emitToBuffer()
        }
    }

    /// Brings a counter read at scrape time up to `value`.
    private func advance(_ counter: Prometheus.Counter, to value: UInt64) {
        let id = ObjectIdentifier(counter)
        let delta = seen.withLock { s -> UInt64 in
            let last = s[id] ?? 0
            s[id] = max(last, value)
            return value > last ? value - last : 0
        }
        if delta > 0 { counter.increment(by: Int64(clamping: delta)) }
    }

    /// The standard process metrics, from /proc/self.
    private func readProcess() {
        let ticks = Double(sysconf(Int32(_SC_CLK_TCK)))
        let page = Double(sysconf(Int32(_SC_PAGESIZE)))
        if let stat = readWholeFile("/proc/self/stat"), let close = stat.lastIndex(of: ")") {
            // Fields after "(comm)": state is field 3; utime 14, stime 15, num_threads 20, starttime 22,
            // vsize 23, rss 24.
            let f = stat[stat.index(after: close)...].split(separator: " ")
            func field(_ n: Int) -> Double { Double(f[n - 3]) ?? 0 }
            if f.count >= 22 {
                let cpu = (field(14) + field(15)) / ticks
                if cpu > cpuSeen { cpuSeconds.increment(by: cpu - cpuSeen); cpuSeen = cpu }
                threads.set(field(20))
                virtualBytes.set(field(23))
                residentBytes.set(field(24) * page)
                if let btime = readWholeFile("/proc/stat")?.split(separator: "\n").first(where: { $0.hasPrefix("btime ") }),
                   let boot = Double(btime.dropFirst(6)) {
                    startTime.set(boot + field(22) / ticks)
                }
            }
        }
        var fds = 0
        if let dir = opendir("/proc/self/fd") {
            while let e = readdir(dir) { if e.pointee.d_name.0 != 0x2E { fds += 1 } }
            closedir(dir)
            fds -= 1  // the directory's own descriptor
        }
        openFDs.set(Double(max(0, fds)))
        var limit = rlimit()
        if getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit) == 0 { maxFDs.set(Double(limit.rlim_cur)) }
    }
}

/// Counts the coordinator's steps, then hands each to the next sink (the event log's).
final class MetricsEventSink: CoordinationEventSink {
    let metrics: DaemonMetrics
    let next: (any CoordinationEventSink)?
    /// `next`, held by reference: every event of every access passes here.
    private let forward: (any CoordinationEventSink & AnyObject)?

    init(metrics: DaemonMetrics, next: (any CoordinationEventSink)?) {
        self.metrics = metrics
        self.next = next
        forward = forwardingReference(to: next)
    }

    func record(_ event: CoordinationEvent) {
        switch event.kind {
        case .requested: metrics.slots.add(.requests)
        case .granted: metrics.slots.add(.grants)
        case .failed: metrics.slots.add(.denials)
        case .presenterAnswered(_, _, let latency): metrics.askLatency.recordNanoseconds(Int64(clamping: latency))
        case .presenterTimedOut: metrics.slots.add(.askTimeouts)
        case .presenterFailed: metrics.slots.add(.askErrors)
        case .presenterGone: metrics.slots.add(.asksGone)
        default: break
        }
        forward?.record(event)
    }
}

/// The daemon's counts of what happens, one slot each, each slot on a cache line of its own so
/// threads counting different things do not share one: a count is one relaxed atomic add (no
/// lock, no allocation, no label lookup). Read when Prometheus scrapes (`DaemonMetrics.scrape`).
final class MetricSlots: @unchecked Sendable {
    enum Slot: Int, CaseIterable {
        case requests, grants, denials, askTimeouts, askErrors, asksGone
        case snapshotsReflink, snapshotsCopy
        case snapshotBytesReflink, snapshotBytesCopy
    }
    /// 8 × 8 bytes per slot: one cache line each.
    private static let stride = 8
    private let storage: InlineArray<96, Atomic<UInt64>>

    init() {
        precondition(Slot.allCases.count * Self.stride <= 96)
        storage = InlineArray { _ in Atomic<UInt64>(0) }
    }

    @inline(__always)
    func add(_ slot: Slot, _ amount: UInt64 = 1) {
        storage[slot.rawValue &* Self.stride].add(amount, ordering: .relaxed)
    }

    func value(_ slot: Slot) -> UInt64 { storage[slot.rawValue * Self.stride].load(ordering: .relaxed) }

    /// The methods the store keeps versions with: it clones or copies, never links any more.
    static let keptMethods: [SnapshotMethod] = [.reflink, .copy]

    /// A kept version's slot; a `link` version (never made now) counts as the copy the store turns
    /// it into when it opens.
    static func snapshots(_ method: SnapshotMethod) -> Slot {
        switch method {
        case .reflink: .snapshotsReflink
        case .copy, .link: .snapshotsCopy
        }
    }

    static func snapshotBytes(_ method: SnapshotMethod) -> Slot {
        switch method {
        case .reflink: .snapshotBytesReflink
        case .copy, .link: .snapshotBytesCopy
        }
    }
}
