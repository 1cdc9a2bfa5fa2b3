import Glibc
import FuseKit
import Loopback
import Synchronization
import Coordination
import EventLog
import LinuxGNU
import Cluster
import ClusterKV
import Linux

/// One mount's daemon: the FUSE session over the passthrough, served until unmounted or signalled.
///
/// Process rules (see docs/architecture.md): `mount()` starts no thread; `serve()` starts every thread.
/// A background daemon is a program of its own (`DaemonLauncher.startInBackground`), never a fork.
public final class Daemon: @unchecked Sendable {
    /// The signal thread's name (`top -H`, `perf sched`, /proc/PID/task/TID/comm: at most 15 bytes).
    static let signalThreadName = "coordfs-signals"
    public let plan: MountPlan
    public let loopback: Loopback
    /// How the daemon's descriptors are shared out, cut from RLIMIT_NOFILE once raised (docs/architecture.md,
    /// "The daemon's descriptors").
    public let descriptors: DescriptorShares
    /// The mount's coordinator: presenters register here (in-process, or through the control socket).
    public let coordinator: Coordinator
    /// The coordinated layer, nil when the mount runs with `coordination=off`.
    public let coordinated: CoordinatedFileSystem?
    private(set) var session: FuseSession?
    /// The event log writer; opened by `startServices()`.
    public private(set) var eventLog: EventLogWriter?
    /// Every record reaches `eventLog` through this (in order, formatted off the FUSE threads).
    private(set) var recorder: EventRecorder?
    /// The control socket (out-of-process presenters and coordinators).
    public private(set) var control: ControlService?
    /// The document store (snapshots, conflicts).
    public private(set) var store: StoreService?
    /// The Prometheus metrics (`-o metrics=`), and where they are served.
    public private(set) var metrics: DaemonMetrics?
    private var metricsEndpoint: MetricsEndpoint?
    /// Sees changes made directly in the backing folder.
    private var watcher: BackingWatcher?
    /// The backing watcher, while it runs (tests hold its events back with `eventDelay`).
    var backingWatcher: BackingWatcher? { watcher }
    /// This mount as a node of a cluster (`-o cluster=`; docs/cluster.md), nil on one host.
    public internal(set) var cluster: ClusterNode?
    var clusterHost: DaemonClusterHost?
    /// The cluster store tests give (several daemons over one in-memory etcd); nil: etcd from the options.
    public var clusterStoreForTesting: (any ClusterStore)?
    private let unmounted = Mutex(false)
    private let saidDescriptors = Mutex(false)
    private let finished = Mutex<Bool>(false)

    public init(plan: MountPlan, coordinator: Coordinator = Coordinator()) throws(MountError) {
        var plan = plan
        // From here on the daemon reaches its state folder through the descriptor it holds
        // (`plan.state.io`), whatever happens to the name `.coordfs` in the backing folder.
        if let warning = try plan.state.hold() { sayOnStandardError("coordfs: warning: \(warning)") }
        self.plan = plan
        self.coordinator = coordinator
        // The limit is raised before anything is cut from it: the node budget, the callers' names
        // tables and the other users' share all come from this one reading (`DescriptorShares`).
        Daemon.raiseDescriptorLimit()
        descriptors = DescriptorShares.inForce()
        // The top numbers are the daemon's own from here on: no client's connection or open holds one.
        DescriptorReserve.keep(limit: descriptors.limit)
        var loopbackOptions = plan.options.loopbackOptions(hiding: [StateFolder.name])
        loopbackOptions.descriptors = descriptors
        do {
            loopback = try Loopback(backingRoot: plan.backing, options: loopbackOptions)
        } catch {
            throw .system("cannot open the backing folder '\(plan.backing)': \(error)")
        }
        coordinated = plan.options.coordination.enabled
            ? CoordinatedFileSystem(loopback: loopback, coordinator: coordinator, options: plan.options.coordination,
                                    maxUserWaits: plan.options.limits.maxUserWaits, backing: plan.state.io.backing)
            : nil
    }

    /// Starts what runs beside the FUSE loop, each with threads of its own:
    /// the event log (first, so the others' records land in it), the backing watcher, the document
    /// store, the cluster node (when `cluster=` is given; the join) and the control socket.
    func startServices() throws(MountError) {
        boundOpenFiles()
        if plan.options.eventLog.enabled && eventLog == nil {
            do {
                let log = try EventLogWriter(directory: plan.state.io.eventLog, options: plan.options.eventLog.writerOptions)
                eventLog = log
                log.setNoticeHandler { notice in sayOnStandardError(Daemon.describe(notice)) }
                let recorder = EventRecorder(log: log, share: plan.options.eventLog.userShare)
                self.recorder = recorder
                coordinator.eventSink = recorder
                // Formatting and encoding records on the worker that polls /dev/fuse, between requests.
                session?.setIdleWork { [weak recorder] in recorder?.help() ?? false }
                recorder.append(.mount, path: "/", actor: EventActor(pid: getpid(), uid: getuid(), executable: "coordfs"),
                           details: EventDetails(message: "\(plan.backing) on \(plan.mountpoint)"))
            } catch {
                throw .system("cannot open the event log in '\(plan.state.eventLog)': \(error)")
            }
        }
        if !plan.options.backingWatcher {
            // backing_watcher=off: nothing watched, the plain cache timeouts.
        } else if watcher == nil, let session, let w = BackingWatcher(loopback: loopback, session: session, coordinator: coordinator,
                                                               tempPatterns: plan.options.coordination.tempPatterns,
                                                               passthroughWrites: coordinated?.passthroughWrites,
                                                               fileSystem: coordinated) {
            watcher = w
            w.start()
        } else if watcher == nil, session != nil {
            sayOnStandardError("coordfs: changes made directly in the backing folder are not seen (fanotify: \(String(cString: strerror(errno)))): "
                + "they show through the mount after the cache timeouts, and presenters are not told")
        }
        if store == nil { store = try StoreService.start(daemon: self) }
        // The cluster before the control socket: an access granted through the socket before the
        // join would hold no gate pass, unseen by the other nodes for as long as it is held.
        try startCluster(store: clusterStoreForTesting)
        if control == nil {
            let started = try ControlService.start(daemon: self)
            if let cluster { started?.handler.clusterView.withLock { $0 = ClusterView(node: cluster) } }
            control = started
        }
        if metrics == nil, let address = plan.options.metrics {
            let m = DaemonMetrics()
            let endpoint = try MetricsEndpoint(address: address, readers: plan.options.metricsReaders) { [weak self] in
                guard let self else { return [] }
                return m.scrape(daemon: self)
            }
            metrics = m
            store?.metrics = m
            coordinator.eventSink = MetricsEventSink(metrics: m, next: coordinator.eventSink)
            metricsEndpoint = endpoint
            endpoint.start()
            sayOnStandardError("coordfs: metrics at http://\(endpoint.address)/metrics")
            let readers = ([0, getuid()] + plan.options.metricsReaders).reduce(into: [UInt32]()) { if !$0.contains($1) { $0.append($1) } }
            sayOnStandardError("coordfs: metrics readable by local uids \(readers.map(String.init).joined(separator: ", ")) (others: 403) and by other hosts")
        }
    }

    /// The FUSE requests served so far, by operation (nil before the mount).
    public var requestCounters: FuseRequestCounters? { session?.requestCounters }
    /// The transport the mount's requests come through (nil before the mount).
    public var transportInUse: FuseTransportInUse? { session?.transportInUse }

    /// The daemon log's line for a notice of the event log writer.
    static func describe(_ notice: EventLogWriter.Notice) -> String {
        switch notice {
        case .stuck(let since, let error, let waiting):
            return "coordfs: event log: STUCK since \(since.iso8601): \(error); \(waiting) record(s) wait in memory and are not "
                + "in the log yet; retrying every 100 ms (`coordfs status` says while it lasts)"
        case .writingAgain(let since, let error, let first):
            let seconds = Double(EventTime.now().millisecondsSinceEpoch - since.millisecondsSinceEpoch) / 1000
            return "coordfs: event log: writing again after \(seconds) s stuck since \(since.iso8601) (\(error)); "
                + "the records from seq \(first) on waited and are written, none lost"
        }
    }

    /// Ends the services: the last record, then everything flushed to the log.
    func stopServices() {
        plan.state.io.removeMountRecord()
        // Presenters still registered have not let go: the next start tells them what changed
        // meanwhile (StoreService.keepPresentersAtEnd), though closing their connections drops them.
        store?.keepPresentersAtEnd()
        // The control socket before the cluster: its accesses are released through the gate, and
        // none is granted once the node has left.
        control?.stop()
        control = nil
        stopCluster()
        metricsEndpoint?.stop()
        metricsEndpoint = nil
        watcher?.stop()
        watcher = nil
        store?.stop()
        store = nil
        guard let log = eventLog else { return }
        coordinator.eventSink = nil
        session?.setIdleWork(nil)
        recorder?.append(.unmount, path: "/", actor: EventActor(pid: getpid(), uid: getuid(), executable: "coordfs"),
                         details: EventDetails(message: plan.mountpoint))
        recorder?.detach()
        recorder = nil
        try? log.close()
        eventLog = nil
    }

    /// Waits until every record of a step taken so far is in the log file.
    public func flushEventLog() throws {
        try recorder?.flush() // set together with eventLog
    }

    /// What the kernel talks to.
    var fileSystem: any FuseFileSystem { coordinated ?? loopback }

    /// Creates the session and mounts. The kernel queues requests until `serve` answers INIT.
    public func mount(onReady: (@Sendable () -> Void)? = nil) throws(MountError) {
        var fuse = ["fsname=" + plan.backing, "subtype=coordfs"]
        if plan.options.kernelChecksPermissions { fuse.append("default_permissions") }
        fuse += plan.options.fuseOptions
        let s: FuseSession
        do {
            s = try FuseSession(fileSystem: fileSystem, options: fuse, debug: plan.options.debug,
                                passthrough: plan.options.passthrough, spin: .microseconds(plan.options.spinMicroseconds),
                                adaptiveSpin: plan.options.adaptiveSpin,
                                transport: plan.options.transport, onInit: onReady)
            try s.mount(at: plan.mountpoint)
            loopback.setBackingFileRegistry(s)
            coordinated?.setSession(s)
        } catch {
            throw .system("cannot mount '\(plan.backing)' on '\(plan.mountpoint)': \(error)")
        }
        session = s
        // A cluster node's record, by which the CLI finds its state folder from the mount point.
        plan.state.io.writeMountRecord(mountpoint: plan.mountpoint)
    }

    /// Serves until the mount goes away (`coordfs unmount`, `umount`) or SIGINT/SIGTERM/SIGHUP arrives,
    /// then unmounts. Returns the process exit status. `onStartFailure` hears why the services could
    /// not start (the event log, the store, the control socket, ...), before the daemon unmounts and
    /// returns 1: the background starter waits on its pipe for that, since the daemon's log, where it
    /// is said too, may be where it cannot write (a full disk).
    public func serve(onStartFailure: ((String) -> Void)? = nil) -> Int32 {
        guard let session else { return 1 }
        umask(0) // new items' modes: the caller's umask or its folder's default ACL (Loopback.creationMode)
        // Signals go to one thread that unmounts. They are blocked first, before any service starts
        // a thread: every thread inherits the mask, so none of them can be killed by SIGTERM.
        var set = sigset_t()
        sigemptyset(&set)
        for s in [SIGINT, SIGTERM, SIGHUP] { sigaddset(&set, s) }
        pthread_sigmask(SIG_BLOCK, &set, nil)
        signal(SIGPIPE, SIG_IGN)
        let signals = set
        // The first signal unmounts as `umount -l` does: the mount leaves the tree at once, and what
        // is open in it (files, a shell's working folder) is served until it is let go; then the
        // kernel ends the session and the loop returns. A second signal ends it at once.
        startThread(named: Self.signalThreadName) { [self] in
            var s = signals
            var caught: Int32 = 0
            while sigwait(&s, &caught) != 0 {}
            let connection = self.fuseConnection()
            sayOnStandardError("coordfs: signal \(caught): unmounting; what is still open in the mount is served until it is let go (a second signal ends it now)")
            self.stop(servingWhatIsOpen: true)
            while true {
                while sigwait(&s, &caught) != 0 {}
                self.abort(connection: connection)
            }
        }
        do { try startServices() } catch {
            sayOnStandardError("coordfs: \(error)")
            onStartFailure?(error.description)
            stop()
            return 1
        }
        writePIDFile()
        defer {
            unlink(plan.state.io.pidFile)
            plan.state.letGo()
        }
        // A lazy unmount (from the signal thread, or `coordfs unmount`) ends the loop once open files
        // are closed.
        let rc = session.run(maxThreads: plan.options.maxThreads)
        loopback.setBackingFileRegistry(nil) // the session holds the loopback: no cycle left behind
        stop()
        coordinated?.finishPendingSaves()
        stopServices()
        return rc == 0 ? 0 : 1
    }

    /// Mounts and serves on a background thread of this process (tests, embedding); returns once the
    /// mount answers. Signals are left alone. End it with `stopAndWait()`.
    public func startInProcess(timeoutSeconds: Double = 10) throws(MountError) {
        let ready = Mutex(false)
        try mount(onReady: { ready.withLock { $0 = true } })
        guard let session else { return }
        try startServices()
        let threads = plan.options.maxThreads
        startThread { [self] in
            _ = session.run(maxThreads: threads, handleSignals: false)
            loopback.setBackingFileRegistry(nil) // the session holds the loopback: no cycle left behind
            coordinated?.finishPendingSaves()
            stopServices()
            plan.state.letGo()
            finished.withLock { $0 = true }
        }
        var waited = 0.0
        while !ready.withLock({ $0 }) {
            if waited > timeoutSeconds { stop(); throw .system("the mount did not answer within \(timeoutSeconds) s") }
            usleep(2_000); waited += 0.002
        }
    }

    /// Unmounts and waits for the serving thread of `startInProcess` to end.
    /// The serving loop has ended (after `stop`, or an unmount from outside).
    public var hasFinished: Bool { finished.withLock { $0 } }

    public func stopAndWait(timeoutSeconds: Double = 10) {
        stop()
        var waited = 0.0
        while !finished.withLock({ $0 }) && waited < timeoutSeconds { usleep(2_000); waited += 0.002 }
    }

    /// Unmounts (once, lazily). The session's descriptor is not closed here: libfuse's own unmount
    /// would close it under the worker threads (they would fail with EBADF).
    /// `servingWhatIsOpen` (a signal): the session is not ended; what is open in the detached mount
    /// keeps working until it is let go, when the kernel ends the session and the serving loop
    /// returns cleanly. Otherwise (or when the mount could not be detached) the loop is told to end
    /// too, and does at once (`FuseSession.exit` wakes the reader): a file still open then fails
    /// with ECONNABORTED.
    public func stop(servingWhatIsOpen: Bool = false) {
        let first = unmounted.withLock { done in defer { done = true }; return !done }
        guard first, let session else { return }
        if !servingWhatIsOpen { session.exit() }
        // Not root: fusermount3 detaches a user's own mount. Already gone (unmounted from outside):
        // nothing to do.
        if umount2(plan.mountpoint, Int32(MNT_DETACH)) != 0, errno == EPERM,
           !Unmounter.runFusermount(["-uz", plan.mountpoint]) {
            session.exit()
            session.unmount()
        }
    }

    /// This mount's FUSE connection number (the minor of its device in /proc/self/mountinfo; the
    /// newest coordfs mount on the mount point), read without a request to the mount.
    private func fuseConnection() -> String? {
        MountInfo.current().last { $0.mountPoint == plan.mountpoint && $0.fileSystemType.hasPrefix("fuse") }
            .flatMap { $0.device.split(separator: ":").last.map(String.init) }
    }

    /// Ends the session at once (a second signal while what was open in the unmounted mount is still
    /// served): the kernel's abort of the connection fails what is still open with ECONNABORTED and
    /// the serving loop returns cleanly. Without the connection's control file, the process ends.
    private func abort(connection: String?) {
        sayOnStandardError("coordfs: a second signal: ending the session now; files still open in the unmounted mount fail with ECONNABORTED")
        if let connection {
            let fd = open("/sys/fs/fuse/connections/\(connection)/abort", O_WRONLY | O_CLOEXEC)
            if fd >= 0 {
                let written = write(fd, "1", 1)
                close(fd)
                if written == 1 { return }
            }
        }
        _exit(1)
    }

    /// Bounds what other users may hold of the daemon's descriptors (`max_user_open_files`, and the
    /// others' share of the limit as raised, which their connections draw from too), and says how
    /// the descriptors are shared out, once.
    private func boundOpenFiles() {
        loopback.openFiles.configure(perUser: plan.options.limits.maxUserOpenFiles, others: descriptors.others)
        loopback.openFiles.setNotice { sayOnStandardError($0) }
        if !saidDescriptors.withLock({ said in defer { said = true }; return said }) {
            sayOnStandardError("coordfs: descriptors: \(descriptors)")
        }
    }

    /// Nodes hold descriptors up to half the limit and are reopened by file handle beyond it: take
    /// the hard limit, so that fewer need reopening. Called before anything is cut from the limit
    /// (`Daemon.init`).
    /// As root the hard limit itself is raised, up to the kernel's `fs.nr_open`.
    static func raiseDescriptorLimit() {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return }
        if geteuid() == 0, let text = readWholeFile("/proc/sys/fs/nr_open"), let nrOpen = rlim_t(text.trimmingCharacters(in: " \n")),
           nrOpen > limit.rlim_max {
            var raised = rlimit(rlim_cur: nrOpen, rlim_max: nrOpen)
            if setrlimit(Int32(RLIMIT_NOFILE.rawValue), &raised) == 0 { return }
        }
        guard limit.rlim_cur < limit.rlim_max else { return }
        limit.rlim_cur = limit.rlim_max
        setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
    }

    /// `daemon.pid`: this process's pid, then its start time and boot (`DaemonPIDFile`), so that the
    /// file a killed daemon leaves names no running daemon once its pid is another process's.
    private func writePIDFile() {
        let bytes = DaemonPIDFile.contents()
        let fd = open(plan.state.io.pidFile, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0o644)
        guard fd >= 0 else { return }
        _ = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        close(fd)
    }
}

/// A detached POSIX thread running `body` (no Dispatch or Swift concurrency: the signal thread must
/// exist before anything else is started). `name`: the thread's name (`top -H`, `perf sched`,
/// /proc/PID/task/TID/comm; at most 15 bytes), nil to keep the process's.
func startThread(named name: String? = nil, _ body: @escaping @Sendable () -> Void) {
    final class Box: @unchecked Sendable {
        let name: String?
        let body: @Sendable () -> Void
        init(_ n: String?, _ b: @escaping @Sendable () -> Void) { name = n; body = b }
    }
    var tid = pthread_t()
    let arg = Unmanaged.passRetained(Box(name, body)).toOpaque()
    pthread_create(&tid, nil, { raw in
        let box = Unmanaged<Box>.fromOpaque(raw!).takeRetainedValue()
        if let name = box.name { nameCurrentThread(name) }
        box.body()
        return nil
    }, arg)
    pthread_detach(tid)
}
