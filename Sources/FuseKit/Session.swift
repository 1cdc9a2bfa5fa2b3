import CFuse3
import Glibc
import NameBytes
import SystemPackage
import Synchronization
import Linux

/// What the C callbacks reach through the session's userdata.
final class SessionState: Sendable {
    let fileSystem: any FuseFileSystem
    let passthrough: PassthroughHandshake
    let reader: DeviceReader
    /// FUSE over io_uring (RingTransport.swift), when wanted.
    let ring: RingTransport
    /// The rings are set up (before INIT).
    let ringPrepared = Atomic<Bool>(false)
    /// The transport in use once INIT is answered.
    let ringInUse = Atomic<Bool>(false)
    /// The requests served, by operation.
    let requests = FuseRequestCounters()
    /// The requests that wait off the workers (`ParkedRequest`), answered at the session's end.
    let parkedRequests = ParkedRequests()
    /// The backing files registered with the kernel (`openBacking`) and not closed yet.
    let backingIDs = Mutex<Set<Int32>>([])
    private let onInit: Mutex<(@Sendable () -> Void)?>
    private let say: @Sendable (String) -> Void
    /// Whether other users may use the mount (`allow_other`, `allow_root`), for the log's line.
    let shared: Bool
    init(fileSystem: any FuseFileSystem, passthrough: Bool, spinNanoseconds: Int, adaptiveSpin: Bool = true, transport: FuseTransport,
         shared: Bool = false,
         say: @escaping @Sendable (String) -> Void = sayOnStandardError, onInit: (@Sendable () -> Void)?) {
        self.shared = shared
        self.fileSystem = fileSystem
        self.passthrough = PassthroughHandshake(wanted: passthrough)
        self.reader = DeviceReader(spinNanoseconds: spinNanoseconds, adaptive: adaptiveSpin)
        self.ring = RingTransport(wanted: transport, spinNanoseconds: spinNanoseconds, adaptiveSpin: adaptiveSpin, deviceReader: reader, say: say,
                                  regularFilesHeld: { limit in fileSystem.regularFilesTheKernelHolds(limit: limit).map(\.rawValue) })
        self.say = say
        self.onInit = Mutex(onInit)
    }

    /// The state of the session `req` came through.
    @inline(__always)
    static func of(_ req: fuse_req_t) -> SessionState {
        Unmanaged<SessionState>.fromOpaque(fuse_req_userdata(req)!).takeUnretainedValue()
    }

    /// The session ends (its loop returned, its reader and ring stopped; libfuse is about to free
    /// it): the requests still waiting are answered now (`ParkedRequests.end`).
    func end() -> Int {
        let answered = parkedRequests.end()
        if answered > 0 {
            FuseSession.answeredAtTheirSessionsEnd.add(answered, ordering: .relaxed)
            say("coordfs: the session ended with \(answered) request\(answered == 1 ? "" : "s") still waiting: answered ECONNABORTED")
        }
        return answered
    }

    /// The INIT reply takes FUSE_OVER_IO_URING (known once the kernel's INIT has been read).
    var ringWillBeUsed: Bool {
        ring.isWanted && ringPrepared.load(ordering: .acquiring) && passthrough.ringOffered.load(ordering: .relaxed)
    }

    /// Says which transport the mount uses and why (one line in the daemon's log), from libfuse's INIT, and
    /// whether this machine's idle CPUs halt at once (`IdleCPUs`), which every round trip pays.
    func sayTransport() {
        let option = "transport=\(ring.wanted.rawValue)"
        if ringWillBeUsed {
            // A shared mount is served through the ring too: a parked request holds an entry added
            // for it, so another user's requests on that CPU still find free entries.
            let sharing = shared ? "; the mount is shared with other users, and one user's parked requests (at most max_user_waits) "
                + "hold entries added for them, never the free entries another user's requests need" : ""
            say("coordfs: requests come through io_uring (\(option), and the kernel offers FUSE over io_uring): \(ring.shape)\(sharing)")
        } else if !ring.isWanted {
            say("coordfs: requests come through /dev/fuse (\(option))")
        } else if let why = ring.setupFailure {
            say("coordfs: requests come through /dev/fuse (\(option), but io_uring could not be set up: \(why))")
        } else {
            say("coordfs: requests come through /dev/fuse (\(option), but the kernel does not offer FUSE over io_uring: "
                + "it needs Linux 6.14 or later built with CONFIG_FUSE_IO_URING, and /sys/module/fuse/parameters/enable_uring set to Y)")
        }
        if let idle = IdleCPUs.note() { say(idle) }
    }

    /// The INIT reply was written; `ringPayload`: it took the ring, whose entries need payload buffers
    /// of that size.
    func initAnswered(ringPayload: Int?) {
        guard let ringPayload else { return }
        ringInUse.store(true, ordering: .releasing)
        ring.start(payloadSize: ringPayload)
    }
    func initialized() {
        let f = onInit.withLock { f in defer { f = nil }; return f }
        f?()
    }
}

/// An error setting up a FUSE session.
public struct FuseSessionError: Error, CustomStringConvertible {
    public var description: String
}

/// A libfuse low-level session: create, mount, serve on a pool of worker threads, unmount.
public final class FuseSession: BackingFileRegistry, @unchecked Sendable {
    private let state: SessionState
    private let session: OpaquePointer

    /// - Parameters:
    ///   - options: libfuse and mount options, as for `-o` (validated by the caller; libfuse rejects
    ///     unknown ones too).
    ///   - passthrough: ask the kernel for passthrough (Passthrough.swift): open files then reach their
    ///     backing files without the daemon, when the kernel offers it and the daemon may register
    ///     backing files (CAP_SYS_ADMIN).
    ///   - spin: how long the worker that holds /dev/fuse polls it after a request before it sleeps
    ///     (`DeviceReader`), and so the ring's threads (`RingTransport`); zero: every idle worker
    ///     sleeps in read(2), as in libfuse's own loop.
    ///   - adaptiveSpin: poll only while it pays (`SpinGovernor`: requests mostly come within the
    ///     spin, and a core is idle); false: for the whole spin after every request.
    ///   - onInit: called once, on a worker thread, when the kernel's INIT has been answered: the mount
    ///     serves requests from then on.
    ///   - transport: how requests come (RingTransport.swift): through io_uring when the kernel offers
    ///     it (`.auto`, `.uring`), or read(2)/write(2) on /dev/fuse.
    public init(fileSystem: any FuseFileSystem, options: [String], debug: Bool = false, passthrough: Bool = false,
                spin: Duration = .zero, adaptiveSpin: Bool = true, transport: FuseTransport = .dev, onInit: (@Sendable () -> Void)? = nil) throws {
        let spinNanoseconds = Int(spin.components.seconds * 1_000_000_000 + spin.components.attoseconds / 1_000_000_000)
        let shared = options.flatMap { $0.split(separator: ",") }.contains { $0 == "allow_other" || $0 == "allow_root" }
        state = SessionState(fileSystem: fileSystem, passthrough: passthrough, spinNanoseconds: spinNanoseconds, adaptiveSpin: adaptiveSpin,
                             transport: transport, shared: shared, onInit: onInit)
        var argv: [String] = ["coordfs"]
        if !options.isEmpty { argv += ["-o", options.joined(separator: ",")] }
        if debug { argv.append("-d") }
        // libfuse keeps pointers into argv while parsing; these few strings live for the process.
        let cargv = UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>.allocate(capacity: argv.count + 1)
        for (i, a) in argv.enumerated() { cargv[i] = strdup(a) }
        cargv[argv.count] = nil
        var args = cfuse_args_init(Int32(argv.count), cargv)
        var ops = makeOperations()
        let userdata = Unmanaged.passRetained(state).toOpaque()
        guard let se = fuse_session_new(&args, &ops, MemoryLayout<fuse_lowlevel_ops>.size, userdata) else {
            Unmanaged<SessionState>.fromOpaque(userdata).release()
            throw FuseSessionError(description: "libfuse rejected the options: \(options.joined(separator: ","))")
        }
        fuse_opt_free_args(&args)
        session = se
    }

    deinit {
        state.reader.stop()   // a session that was mounted but never served still has its watchdog
        state.ring.stop()     // and its ring's threads
        // A request of this session may still be parked somewhere (a presenter's ask, a deadline,
        // a closure: an in-process mount stopped and let go): libfuse frees a request only when it
        // is answered, unlinking it from the session under the session's lock, and every later
        // look at it (its interrupt callback, its reply through the I/O hooks and the ring) reads
        // the session. So each is answered now and never touched again (`ParkedRequest`). The
        // session counts as exited: a reply the kernel no longer waits for is no error to print.
        fuse_session_exit(session)
        _ = state.end()
        closeRegisteredBackingFiles()
        fuse_session_destroy(session)
        // The userdata reference taken in init (libfuse is done with it: destroy called the file
        // system's destroy last). Without this the file system and its descriptors would outlive an
        // in-process mount.
        Unmanaged.passUnretained(state).release()
    }

    /// Mount at `mountpoint` (the kernel starts queueing requests; INIT is answered by `run`).
    public func mount(at mountpoint: String) throws {
        guard fuse_session_mount(session, mountpoint) == 0 else {
            throw FuseSessionError(description: "cannot mount on \(mountpoint)")
        }
        if state.passthrough.wanted || state.reader.spins || state.ring.isWanted {
            guard state.reader.start(fuse_session_fd(session), session: session) else {
                fuse_session_unmount(session)
                throw FuseSessionError(description: "cannot set up the reader of /dev/fuse (non-blocking descriptor, watchdog thread)")
            }
            // The ring's failure to set up is said at INIT (the mount then uses /dev/fuse).
            if state.ring.prepare(session: session, devfd: fuse_session_fd(session)) {
                state.ringPrepared.store(true, ordering: .releasing)
            }
        }
        // Always: the hooks also turn a FUSE_TMPFILE into a create libfuse can read (`TmpfileRequest`).
        var io = passthroughIO()
        guard fuse_session_custom_io(session, &io, fuse_session_fd(session)) == 0 else {
            fuse_session_unmount(session)
            throw FuseSessionError(description: "libfuse refused the session's I/O hooks")
        }
    }

    /// Requests answered by their session's end in this process, because they were still parked
    /// (or taken back and not yet answered) when the session was let go (`ParkedRequest`).
    public static var requestsAnsweredAtTheirSessionsEnd: Int { answeredAtTheirSessionsEnd.load(ordering: .relaxed) }
    static let answeredAtTheirSessionsEnd = Atomic<Int>(0)

    /// This session's requests that wait off the workers: parked (`Request.park`), or taken back and
    /// not yet answered.
    public var requestsWaiting: Int { state.parkedRequests.count }

    /// The requests the kernel sent this session, by operation (the metrics endpoint reads them).
    public var requestCounters: FuseRequestCounters { state.requests }

    /// The /dev/fuse descriptor (for the daemon to hand to a child, or to check liveness).
    public var fileDescriptor: Int32 { fuse_session_fd(session) }

    /// Serve requests until unmounted or `exit()`. With `handleSignals`, SIGINT, SIGTERM and SIGHUP end
    /// the loop (libfuse's handlers, installed here and removed before returning). Returns 0 on a clean
    /// end.
    public func run(maxThreads: Int = 16, maxIdleThreads: Int = 8, handleSignals: Bool = true) -> Int32 {
        if handleSignals { fuse_set_signal_handlers(session) }
        defer { if handleSignals { fuse_remove_signal_handlers(session) } }
        let config = fuse_loop_cfg_create()
        defer { fuse_loop_cfg_destroy(config) }
        fuse_loop_cfg_set_max_threads(config, UInt32(maxThreads))
        fuse_loop_cfg_set_idle_threads(config, UInt32(maxIdleThreads))
        fuse_loop_cfg_set_clone_fd(config, 0)
        let rc = cfuse_session_loop_mt(session, config)
        state.reader.stop()
        state.ring.stop()
        closeRegisteredBackingFiles()
        return rc
    }

    /// Closes every backing file still registered (the loop has ended). The kernel would keep each
    /// until the connection is freed, and with FUSE over io_uring that is after the ring's
    /// asynchronous teardown, which may come after this process has ended: the backing folder's
    /// file system was still busy (EBUSY to its umount) now and then right after `coordfs unmount`
    /// had seen the daemon end. The files the kernel's inodes hold were let go at the unmount; the
    /// registry's own references go here, at once.
    private func closeRegisteredBackingFiles() {
        let ids = state.backingIDs.withLock { ids in
            defer { ids.removeAll() }
            return ids
        }
        for id in ids { _ = cfuse_backing_close(fuse_session_fd(session), id) }
    }

    /// The transport requests come through (`.dev` until the kernel's INIT is read): what the INIT
    /// reply takes, decided when INIT is read. The mount counts as started (`onInit`) in libfuse's
    /// INIT callback, before the reply is written (by the session's writev hook, which then starts
    /// the ring): asking only whether the reply was written answered `.dev` now and then right
    /// after the start of a mount that took the ring, on a loaded machine.
    public var transportInUse: FuseTransportInUse {
        state.ringInUse.load(ordering: .acquiring) || state.ringWillBeUsed ? .uring : .dev
    }

    /// Requests served through io_uring so far.
    public var requestsThroughRing: Int { state.ring.served.load(ordering: .relaxed) }

    /// The ring's entries, the parked requests they hold, and what the entries added for them cost.
    var ringUsage: RingTransport.Usage { state.ring.usage }

    /// How often /dev/fuse's reader waited on the device itself (a wake-up of its thread for what
    /// comes there; with the ring, the holder watches the device instead where it can).
    var deviceWaits: Int { state.reader.deviceWaits.load(ordering: .relaxed) }

    /// Sets (nil: removes) work for the worker that holds /dev/fuse to do while it polls the empty
    /// device after a request it served: `work` is called between its looks, each call one small slice
    /// (it returns whether there is more), until it returns false or a request comes. Only while the
    /// reader spins (`spin` > 0). It runs on a FUSE worker between requests, so a slice must never wait
    /// and should take well under a microsecond or two: a request that arrives meanwhile waits for it.
    public func setIdleWork(_ work: (@Sendable () -> Bool)?) {
        let box = work.map(DeviceReader.IdleWork.init)
        state.reader.idleWork.withLock { $0 = box }
        state.ring.reader.idleWork.withLock { $0 = box }
    }

    /// Tells the serving loop to end (from any thread), at once: the reader is woken, whether it waits on the device
    /// or on its bell (the ring watches /dev/fuse for it and serves forgets and interrupts itself),
    /// since with the ring serving nothing else may come to it until the connection ends. (With
    /// `spin=0` the reader blocks in libfuse's own read: the loop ends at its next request.)
    public func exit() {
        fuse_session_exit(session)
        state.reader.end()
    }

    public func unmount() { fuse_session_unmount(session) }

    // MARK: BackingFileRegistry

    public var passthroughEnabled: Bool { state.passthrough.enabled.load(ordering: .acquiring) }

    public var passthroughUnavailable: PassthroughUnavailable? { state.passthrough.unavailable }

    public func openBacking(_ fd: Int32) -> Result<Int32, Errno> {
        let id = cfuse_backing_open(fuse_session_fd(session), fd)
        if id > 0 {
            state.backingIDs.withLock { _ = $0.insert(id) }
            return .success(id)
        }
        let e = Errno(rawValue: id < 0 ? errno : EIO)
        state.passthrough.registrationFailed(e)
        return .failure(e)
    }

    public func closeBacking(_ id: Int32) {
        // Out of the set first: the kernel may give the id to another file once it is closed.
        guard state.backingIDs.withLock({ $0.remove(id) }) != nil else { return }
        _ = cfuse_backing_close(fuse_session_fd(session), id)
    }

    /// Tell the kernel to drop cached data and attributes of `inode` (after a change made outside the
    /// kernel's view, e.g. directly in the backing folder). ENOENT (not cached) is not an error.
    @discardableResult
    public func invalidate(inode: InodeID, offset: Int = 0, length: Int = 0) -> Errno? {
        let rc = fuse_lowlevel_notify_inval_inode(session, inode.rawValue, offset, length)
        return rc == 0 || rc == -ENOENT ? nil : Errno(rawValue: -rc)
    }

    /// Tell the kernel to forget the cached name `name` (a lossless string: `LosslessName`) in `parent`.
    @discardableResult
    public func invalidateEntry(parent: InodeID, name: String) -> Errno? {
        let rc = name.withNameCString { fuse_lowlevel_notify_inval_entry(session, parent.rawValue, $0, strlen($0)) }
        return rc == 0 || rc == -ENOENT ? nil : Errno(rawValue: -rc)
    }
}
