import FuseKit
import LinuxGNU
import Loopback

/// The `-o` options of a coordfs mount, validated: libfuse/kernel mount options pass through, coordfs's
/// own are parsed, fstab-only words are accepted and ignored, anything else is an error.
public struct MountOptions: Sendable, Equatable {
    /// Options handed to libfuse (with `fsname`, `subtype`, and `default_permissions` when
    /// `kernelChecksPermissions`).
    public var fuseOptions: [String] = []
    /// Other users may use the mount (`allow_other` among `fuseOptions`).
    public var allowOther: Bool {
        get { fuseOptions.contains("allow_other") }
        set {
            fuseOptions.removeAll { $0 == "allow_other" }
            if newValue { fuseOptions.append("allow_other") }
        }
    }
    /// `default_permissions` was asked for explicitly.
    public var defaultPermissions = false
    public var readOnly = false
    public var debug = false
    /// Seconds the kernel caches attributes and names; nil: the defaults (1 s, or `watchedTimeout`
    /// while the backing watcher sees every change on a local backing file system).
    public var attributeTimeout: Double?
    public var entryTimeout: Double?
    /// The default cache lifetime of attributes and names the backing watcher keeps fresh.
    public static let watchedTimeout = 10.0
    /// Seconds the kernel caches "no such name"; nil: the default (0, or `watchedTimeout` in a
    /// directory where the backing watcher sees every name that appears).
    public var negativeTimeout: Double?
    /// Whether the daemon watches the backing folder (fanotify) for changes made directly in it
    /// (`backing_watcher=on|off`). On network storage it sees no other host's writes; with it off
    /// the kernel's caches keep the plain timeouts (1 s unless given) and changes made beside the
    /// mount reach presenters only through a cluster.
    public var backingWatcher = true
    public var keepCache = true
    public var maxThreads = 16
    /// How long the worker reading /dev/fuse polls it after a request before it sleeps, in
    /// microseconds (FuseKit's `DeviceReader`); 0: every worker sleeps in read(2), as with libfuse's
    /// own loop.
    public var spinMicroseconds = 200
    /// Whether the reader polls only while it pays (FuseKit's `SpinGovernor`: requests mostly come
    /// within the spin, and a core is idle); off: it polls for the whole spin after every request.
    public var adaptiveSpin = true
    /// How requests come from the kernel (FuseKit's `RingTransport`): `auto` is io_uring when the
    /// kernel offers it at INIT, else /dev/fuse; `uring` the same, for a mount that asks for io_uring
    /// (either way the daemon's log says which one it uses and why); `dev` is read(2)/write(2) on
    /// /dev/fuse only.
    public var transport: FuseTransport = .auto
    /// Kernel passthrough for open regular files (Linux 6.9+, CAP_SYS_ADMIN): reads and writes go
    /// from the kernel to the backing file without the daemon.
    public var passthrough = true
    /// The coordination policy (see docs/semantics.md).
    public var coordination = CoordinationOptions()
    /// The event log (docs/event-log.md).
    public var eventLog = EventLogSettings()
    /// The document store (docs/document-store.md).
    public var store = StoreOptions()
    /// What the control socket's peers may hold, per user and in total (docs/protocol.md, "Limits").
    public var limits = PeerLimits()
    /// Where the daemon serves Prometheus metrics (`metrics=HOST:PORT`; docs/metrics.md); nil: nowhere.
    public var metrics: MetricsAddress?
    /// Local users besides root and the mount's own who may read the metrics
    /// (`metrics_users=USER:USER`, names or uids; docs/metrics.md "Who may read them").
    public var metricsReaders: [UInt32] = []
    /// The cluster (docs/cluster.md): etcd endpoints, node, lease; off without `cluster=`.
    public var cluster = ClusterOptions()

    public init() {}

    /// Whether the kernel checks permissions (`default_permissions`): always when other users may use
    /// the mount (`allow_other`, `allow_root`), and when asked. Otherwise only processes with exactly
    /// the mounting user's ids reach the mount (the kernel refuses the rest), the daemon acts with
    /// those same ids, and the backing folder's own checks are the native ones; the kernel then does
    /// not re-read a directory's attributes after every change in it (two requests per file created
    /// or removed).
    public var kernelChecksPermissions: Bool {
        defaultPermissions || allowOther || fuseOptions.contains("allow_root")
    }

    /// Mount options libfuse and the kernel understand, passed through as given.
    static let passThroughFlags: Set<String> = [
        "allow_other", "allow_root", "auto_unmount", "default_permissions",
        "ro", "rw", "suid", "nosuid", "dev", "nodev", "exec", "noexec", "async", "sync", "dirsync",
        "atime", "noatime", "diratime", "nodiratime", "lazytime", "nolazytime", "relatime", "norelatime",
        "strictatime", "nostrictatime",
    ]
    static let passThroughValues: Set<String> = ["max_read"]
    /// Words that belong to fstab, mount(8) or systemd, not to the filesystem.
    static let ignoredFlags: Set<String> = ["defaults", "auto", "noauto", "user", "nouser", "users", "_netdev", "nofail", "nofail", "owner", "group", "nonempty"]
    static let ignoredPrefixes = ["x-", "comment="]

    /// Every option name coordfs accepts, for the error message and `--help`.
    public static var documentation: String {
        """
        kernel/libfuse: \(passThroughFlags.sorted().joined(separator: ", ")), max_read=N (1 to 2147483647)
        coordfs: attr_timeout=S, entry_timeout=S, negative_timeout=S, cache=auto|none, passthrough=on|off, \
        backing_watcher=on|off, max_threads=N (1 to 1024), spin=MICROSECONDS (0 to 100000), \
        spin_adapt=on|off, transport=auto|uring|dev, debug
        coordination: coordination=on|off, ask_timeout=S, strict, read_wait=S, write_wait=S, \
        save_window=S, temp_patterns=GLOB:GLOB:...  (every S: seconds, 0 to 86400)
        event log: log=on|off, log_sync=none|batch, log_max_mb=N (1 to 16777216), \
        log_max_days=N (at most 36500), log_user_share=PERCENT (1 to 100, 10), \
        log_summary_interval=S (1 to 3600, 10)
        \(StoreOptions.documentation)
        \(PeerLimits.documentation)
        \(ClusterOptions.documentation)
        metrics: metrics=HOST:PORT (Prometheus text at http://HOST:PORT/metrics; e.g. 127.0.0.1:9464), \
        metrics_users=USER:USER (local users besides root and the mount's own who may read them)
        ignored (fstab): \(ignoredFlags.sorted().joined(separator: ", ")), x-*, comment=*
        """
    }

    /// Parses comma-separated option lists (as given to `-o`, possibly several times).
    public static func parse(_ lists: [String]) throws(MountError) -> MountOptions {
        var o = MountOptions()
        for list in lists {
            var previousWasEndpoint = false
            for raw in list.split(separator: ",", omittingEmptySubsequences: true) {
                let item = String(raw)
                let continuesEndpoints = previousWasEndpoint
                previousWasEndpoint = item.hasPrefix("cluster=") || (continuesEndpoints && ClusterOptions.isEndpoint(item))
                let (key, value): (String, String?) = {
                    guard let eq = item.firstIndex(of: "=") else { return (item, nil) }
                    return (String(item[..<eq]), String(item[item.index(after: eq)...]))
                }()
                if ignoredFlags.contains(item) || ignoredPrefixes.contains(where: { item.hasPrefix($0) }) { continue }
                if try o.cluster.parse(key, value, item: item, previousWasEndpoint: continuesEndpoints) { continue }
                if value == nil, passThroughFlags.contains(key) {
                    switch key {
                    case "default_permissions": o.defaultPermissions = true; continue
                    case "ro": o.readOnly = true
                    case "rw": o.readOnly = false
                    default: break
                    }
                    if key != "rw" && key != "ro" { o.fuseOptions.append(key) }
                    continue
                }
                if let value, passThroughValues.contains(key) {
                    guard let n = Int(value), Limits.maxRead.contains(n) else {
                        throw .badOption(item, "expects \(Limits.describe(Limits.maxRead)) bytes")
                    }
                    o.fuseOptions.append("\(key)=\(n)")
                    continue
                }
                switch (key, value) {
                case ("debug", nil): o.debug = true
                case ("attr_timeout", let v?): o.attributeTimeout = try seconds(item, v)
                case ("entry_timeout", let v?): o.entryTimeout = try seconds(item, v)
                case ("negative_timeout", let v?): o.negativeTimeout = try seconds(item, v)
                case ("cache", "auto"): o.keepCache = true
                case ("cache", "none"): o.keepCache = false; o.attributeTimeout = 0; o.entryTimeout = 0; o.negativeTimeout = 0
                case ("cache", _): throw .badOption(item, "expects auto or none")
                case ("passthrough", "on"): o.passthrough = true
                case ("passthrough", "off"): o.passthrough = false
                case ("passthrough", _): throw .badOption(item, "expects on or off")
                case ("backing_watcher", "on"): o.backingWatcher = true
                case ("backing_watcher", "off"): o.backingWatcher = false
                case ("backing_watcher", _): throw .badOption(item, "expects on or off")
                case ("spin_adapt", "on"): o.adaptiveSpin = true
                case ("spin_adapt", "off"): o.adaptiveSpin = false
                case ("spin_adapt", _): throw .badOption(item, "expects on or off")
                case ("coordination", "on"): o.coordination.enabled = true
                case ("coordination", "off"): o.coordination.enabled = false
                case ("coordination", _): throw .badOption(item, "expects on or off")
                case ("ask_timeout", let v?): o.coordination.askTimeout = try positiveSeconds(item, v)
                case ("strict", nil): o.coordination.strict = true
                case ("read_wait", let v?): o.coordination.readWait = try seconds(item, v)
                case ("write_wait", let v?): o.coordination.writeWait = try seconds(item, v)
                case ("save_window", let v?): o.coordination.saveWindow = try seconds(item, v)
                case ("temp_patterns", let v?):
                    o.coordination.tempPatterns = TempNamePatterns(v.split(separator: ":").map(String.init))
                case ("log", "on"): o.eventLog.enabled = true
                case ("log", "off"): o.eventLog.enabled = false
                case ("log", _): throw .badOption(item, "expects on or off")
                case ("log_sync", "none"): o.eventLog.syncEveryBatch = false
                case ("log_sync", "batch"): o.eventLog.syncEveryBatch = true
                case ("log_sync", _): throw .badOption(item, "expects none or batch")
                case ("log_max_mb", let v?):
                    guard let n = UInt64(v), EventLogSettings.megabytesRange.contains(n) else {
                        throw .badOption(item, "expects \(Limits.describe(EventLogSettings.megabytesRange)) MiB")
                    }
                    o.eventLog.maxMegabytes = n
                case ("log_user_share", let v?):
                    guard let n = Int(v), EventLogSettings.userShareRange.contains(n) else {
                        throw .badOption(item, "expects \(Limits.describe(EventLogSettings.userShareRange)) percent of log_max_mb")
                    }
                    o.eventLog.userSharePercent = n
                case ("log_summary_interval", let v?):
                    guard let n = Int(v), EventLogSettings.summaryIntervalRange.contains(n) else {
                        throw .badOption(item, "expects \(Limits.describe(EventLogSettings.summaryIntervalRange)) seconds")
                    }
                    o.eventLog.summaryIntervalSeconds = n
                case ("log_max_days", let v?):
                    guard let d = Double(v), d > 0, d <= EventLogSettings.maxDaysLimit else {
                        throw .badOption(item, "expects more than 0 and at most \(Limits.describe(EventLogSettings.maxDaysLimit)) days")
                    }
                    o.eventLog.maxDays = d
                case ("max_threads", let v?):
                    guard let n = Int(v), Limits.maxThreads.contains(n) else {
                        throw .badOption(item, "expects \(Limits.describe(Limits.maxThreads)) threads")
                    }
                    o.maxThreads = n
                case ("metrics", let v?):
                    guard let address = MetricsAddress(v) else {
                        throw .badOption(item, "expects HOST:PORT, an IP address (127.0.0.1, [::1]) or localhost and a port (0 to 65535)")
                    }
                    o.metrics = address
                case ("metrics_users", let v?):
                    var readers: [UInt32] = []
                    for name in v.split(separator: ":", omittingEmptySubsequences: true) {
                        guard let uid = LinuxCalls.userID(named: String(name)) else {
                            throw .badOption(item, "names no user \(name): expects user names or uids separated by ':'")
                        }
                        readers.append(uid)
                    }
                    guard !readers.isEmpty else { throw .badOption(item, "expects user names or uids separated by ':'") }
                    o.metricsReaders = readers
                case ("transport", let v?):
                    guard let t = FuseTransport(rawValue: v) else { throw .badOption(item, "expects auto, uring or dev") }
                    o.transport = t
                case ("spin", let v?):
                    guard let n = Int(v), Limits.spin.contains(n) else {
                        throw .badOption(item, "expects microseconds, \(Limits.describe(Limits.spin))")
                    }
                    o.spinMicroseconds = n
                default:
                    if try o.store.parse(key, value, item: item) { continue }
                    if try o.limits.parse(key, value, item: item) { continue }
                    throw .unknownOption(item)
                }
            }
        }
        if o.readOnly { o.fuseOptions.append("ro") }
        if !o.metricsReaders.isEmpty, o.metrics == nil {
            throw .badOption("metrics_users", "needs metrics=HOST:PORT (it says who may read the metrics served there)")
        }
        try o.cluster.check()
        return o
    }

    private static func seconds(_ item: String, _ v: String) throws(MountError) -> Double {
        guard let d = Double(v), d >= 0, d <= Limits.maxSeconds else {
            throw .badOption(item, "expects seconds (0 to \(Limits.describe(Limits.maxSeconds)))")
        }
        return d
    }

    /// The range of every numeric option, checked by `parse` (so by `coordfs mount` before a daemon
    /// starts, and again by the daemon, which parses the same `-o` lists): a value outside it is a
    /// `badOption` naming the range, never an overflow further on. README.md lists them.
    public enum Limits {
        /// `attr_timeout`, `entry_timeout`, `negative_timeout`, `ask_timeout`, `read_wait`,
        /// `write_wait`, `save_window`: a day at most.
        public static let maxSeconds = 86_400.0
        public static let maxThreads = 1...1024
        public static let spin = 0...100_000
        /// `max_read`, in bytes: libfuse and the kernel keep it in an unsigned 32-bit field.
        public static let maxRead = 1...Int(Int32.max)

        /// "1 to 1024", with no thousands separators (as the option takes it).
        static func describe<T: BinaryInteger>(_ r: ClosedRange<T>) -> String { "\(r.lowerBound) to \(r.upperBound)" }
        static func describe(_ d: Double) -> String { d == d.rounded() ? String(Int64(d)) : String(d) }
    }

    private static func positiveSeconds(_ item: String, _ v: String) throws(MountError) -> Double {
        let d = try seconds(item, v)
        guard d > 0 else { throw .badOption(item, "expects more than 0 seconds") }
        return d
    }

    /// The passthrough's settings for these options.
    public func loopbackOptions(hiding names: Set<String>) -> LoopbackOptions {
        var l = LoopbackOptions()
        l.attributeTimeout = attributeTimeout ?? 1.0
        l.entryTimeout = entryTimeout ?? 1.0
        // Given explicitly (or cache=none): that, whatever the watcher sees.
        l.watchedAttributeTimeout = attributeTimeout == nil ? Self.watchedTimeout : nil
        l.watchedEntryTimeout = entryTimeout == nil ? Self.watchedTimeout : nil
        l.negativeTimeout = negativeTimeout ?? 0
        l.watchedNegativeTimeout = negativeTimeout == nil ? Self.watchedTimeout : nil
        l.keepCache = keepCache
        l.hiddenRootNames = names
        l.readOnly = readOnly
        l.posixACLs = kernelChecksPermissions
        l.sharedWithOtherUsers = allowOther
        return l
    }
}
