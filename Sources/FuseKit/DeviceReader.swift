import CFuse3
import Glibc
import Synchronization
import Linux

/// Reads requests from /dev/fuse for libfuse's worker threads: one worker at a time holds the
/// device, serves the quick requests itself, and polls the device for a short while before it
/// sleeps.
///
/// Why: with libfuse's own loop every idle worker sleeps in read(2) on the device and the kernel
/// wakes one for each request. On a virtual machine, waking a halted vCPU costs more than the daemon's
/// own work for a lookup or a create, and a tool's create, stat and unlink are a string of such
/// requests, each sent only once the last one is answered.
///
/// Here the worker that holds the device (the reader):
///   - polls the device with non-blocking reads for `spin` after its last request before it blocks
///     in poll(2), so the next request of a tool that is working through files is taken without a
///     wake-up; but only while that pays (`SpinGovernor`: requests mostly come within the spin, and
///     a core is idle), else it blocks at once;
///   - keeps the device while it serves a quick request (lookup, getattr, create, unlink, rename,
///     open, release, readdir, the xattrs, forget: `servesInline`) and passes it on, waking the next
///     worker, before a request that may take long (read, write, fsync, locks, fallocate,
///     copy_file_range) or when requests keep coming queued (the device had one at the first look
///     `backlogToShare` times in a row: several tools at once, which one worker would keep waiting);
///   - loses the device to a watchdog thread when a quick request takes longer than `stall` (a disk
///     that stalls, a lock): the watchdog passes the device to the next worker, so the mount never
///     waits for one request. While requests come, the watchdog looks when the request being served
///     would have kept the device for `stall` (`stall` later after a look that found none being
///     served): once per `stall`. It sleeps until the next request once none has come for
///     `lingerStalls` stalls (20 ms at the default 2 ms), so a lone request (a stat on an idle
///     mount) costs a few looks, not a second of them.
/// The other workers wait for the device on a semaphore, not in the kernel, so the kernel has at most
/// one waiter to wake.
///
/// While the holder polls an empty device after a request, it does the session's idle work between
/// its looks (`FuseSession.setIdleWork`: the daemon formats its event-log records there), a small
/// slice at a time until the work says it is done. With a tool working through files, that is the
/// time the tool takes for its next call: the work is done on a core that would only be polling, and
/// a request that comes meanwhile waits for one slice at most.
///
/// A zero `spin` leaves the device blocking and every worker reading it, as libfuse does.
final class DeviceReader: @unchecked Sendable {
    /// Idle work, boxed: a closure read out of a `Mutex` per request is re-thunked on every read
    /// (measured: the calls grew slower without bound).
    final class IdleWork: Sendable {
        /// One slice; returns whether there is more to do.
        let run: @Sendable () -> Bool
        init(_ run: @escaping @Sendable () -> Bool) { self.run = run }
    }

    /// How long the reader polls the device before it blocks, in nanoseconds (0: libfuse's way).
    let spinNanoseconds: Int
    /// How long a quick request may keep the device before the watchdog passes it on.
    let stallNanoseconds: Int

    /// Value 1 while no worker holds the device.
    private let token: UnsafeMutablePointer<sem_t>
    /// The watchdog sleeps on it once requests have stopped coming.
    private let doorbell: UnsafeMutablePointer<sem_t>
    /// pthread_self of the worker holding the device (0 while it is being passed on).
    private let holder = Atomic<UInt>(0)
    /// When the holder began serving a quick request itself (0: it is reading the device).
    private let busySince = Atomic<Int>(0)
    /// When the last request was read.
    private let lastRequest = Atomic<Int>(0)
    private let watchdogParked = Atomic<Bool>(false)
    private let stopping = Atomic<Bool>(false)
    private let watchdog = Mutex<pthread_t?>(nil)
    /// How often the watchdog passed the device on (for tests and the daemon's log).
    let takeovers = Atomic<Int>(0)
    /// How often the watchdog looked (each a wake-up of its thread; tests).
    let watchdogLooks = Atomic<Int>(0)
    /// Work the holder does in slices while it polls the empty device after a request
    /// (`FuseSession.setIdleWork`).
    let idleWork = Mutex<IdleWork?>(nil)
    /// How many requests in a row the holder found already queued (only the holder touches it).
    private var backlog = 0
    /// Whether the next wait polls (`SpinGovernor`; only the holder touches it).
    private var governor: SpinGovernor
    private let runnable: @Sendable () -> Int?
    /// When the holder's current wait found the device empty (0: it found a request queued).
    private var waitStarted = 0
    /// Waits that polled the empty device for the spin, and waits that blocked at once because the
    /// spin did not pay (`SpinGovernor`) or is 0 (tests, the daemon's log).
    let spunWaits = Atomic<Int>(0)
    let sleptWaits = Atomic<Int>(0)
    /// False: every wait blocks at once, whatever the spin (/dev/fuse once the ring serves the
    /// mount: only forgets and interrupts come there, and a second poller would take the core the
    /// ring's holder or the tool needs).
    let pollsAfterRequests = Atomic<Bool>(true)
    /// After this many, the holder passes the device on: requests are coming faster than one worker serves them.
    static let backlogToShare = 3
    /// The watchdog sleeps (until the next quick request rings) once no request has come for this
    /// many stalls. While requests come closer together it keeps looking once per stall rather than
    /// being rung awake for each; after a longer gap one ring costs less than the looks would. It
    /// was a second: a lone request then cost 500 looks (about 10 ms of CPU on a loaded machine).
    static let lingerStalls = 10
    /// The watchdog thread's name (`top -H`, `perf sched`, /proc/PID/task/TID/comm: at most 15 bytes).
    package static let watchdogThreadName = "fuse-watchdog"

    /// `adaptive`: poll only while it pays (`SpinGovernor`); false: for the whole spin every time.
    /// `runnable`: the machine's runnable tasks (`RunQueue`; the tests pass their own).
    init(spinNanoseconds: Int, stallNanoseconds: Int = 2_000_000, adaptive: Bool = true,
         runnable: @escaping @Sendable () -> Int? = RunQueue.runnable) {
        self.runnable = runnable
        self.spinNanoseconds = max(0, spinNanoseconds)
        self.stallNanoseconds = max(100_000, stallNanoseconds)
        // Below a microsecond a spin is only the ring's way of taking turns (`RingTransport`).
        governor = SpinGovernor(cap: spinNanoseconds >= 1_000 ? spinNanoseconds : 0, cpus: RunQueue.onlineCPUs, adaptive: adaptive)
        token = .allocate(capacity: 1)
        doorbell = .allocate(capacity: 1)
        bell = .allocate(capacity: 1)
        sem_init(bell, 0, 0)
        sem_init(token, 0, 1)
        sem_init(doorbell, 0, 0)
    }

    deinit {
        stop()
        sem_destroy(token)
        sem_destroy(doorbell)
        sem_destroy(bell)
        bell.deallocate()
        token.deallocate()
        doorbell.deallocate()
    }

    var spins: Bool { spinNanoseconds > 0 }

    /// The session, for `fuse_session_exited` (set by `start`).
    private var session: OpaquePointer?

    /// Make `fd` ready for this reader (non-blocking when it spins) and start the watchdog. False when
    /// either fails. `session`: the reader stops polling once it has exited (a signal handled on the
    /// polling thread interrupts no system call).
    func start(_ fd: Int32, session: OpaquePointer? = nil) -> Bool {
        guard spins else { return true }
        self.session = session
        let flags = fcntl(fd, F_GETFL)
        guard flags >= 0, fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0 else { return false }
        return startWatchdog()
    }

    /// Starts the watchdog (for a source other than a descriptor this reader polls: `RingTransport`).
    func startWatchdog() -> Bool {
        guard spins else { return true }
        return watchdog.withLock { thread in
            if thread != nil { return true }
            var t = pthread_t()
            let me = Unmanaged.passRetained(self).toOpaque()
            guard pthread_create(&t, nil, { arg in
                let reader = Unmanaged<DeviceReader>.fromOpaque(arg!).takeRetainedValue()
                blockAllSignalsInThisThread()
                nameCurrentThread(DeviceReader.watchdogThreadName)
                reader.watch()
                return nil
            }, me) == 0 else {
                Unmanaged<DeviceReader>.fromOpaque(me).release()
                return false
            }
            thread = t
            return true
        }
    }

    /// Ends the watchdog (after the session's loop has returned).
    func stop() {
        guard let thread = watchdog.withLock({ t in defer { t = nil }; return t }) else { return }
        stopping.store(true, ordering: .sequentiallyConsistent)
        sem_post(doorbell)
        pthread_join(thread, nil)
    }

    /// One request from `fd` through `attempt` (a read of the device into `buffer` that returns -1 and
    /// sets errno, EAGAIN when nothing is queued). Returns what `attempt` returned; errno is its. The
    /// waits are cancellation points (libfuse cancels idle workers at the end of its loop).
    @inline(__always)
    func receive(_ fd: Int32, into buffer: UnsafeMutableRawPointer?, _ attempt: () -> Int) -> Int {
        receive(opcode: { buffer?.loadUnaligned(fromByteOffset: 4, as: UInt32.self) }, wait: {
            // EINTR: libfuse looks at the session's state.
            if watchedElsewhere.load(ordering: .acquiring) { return waitForTheBell() }
            deviceWaits.add(1, ordering: .relaxed)
            // The device, and `ending` (the session told to end: with the ring serving, nothing
            // else may come to the device until the connection ends).
            var p = (pollfd(fd: fd, events: Int16(POLLIN), revents: 0), pollfd(fd: ending.descriptor, events: Int16(POLLIN), revents: 0))
            return withUnsafeMutableBytes(of: &p) { poll($0.baseAddress!.assumingMemoryBound(to: pollfd.self), ending.descriptor >= 0 ? 2 : 1, -1) } < 0 ? -1 : 0
        }, attempt)
    }

    /// Readable once the session is told to end (`end()`): wakes a reader waiting on the device,
    /// and every wait after.
    private let ending = WakeUp()

    /// The session is told to end: the reader, waiting on the device or on its bell, wakes and
    /// finds `fuse_session_exited` (its loop ends without another request).
    func end() {
        ending.signal()
        ringBell()
    }

    /// Set while another thread watches the device for this reader (`RingTransport`: once the ring
    /// serves the mount, only forgets and interrupts come to /dev/fuse, and the ring's holder takes
    /// them through a poll on its ring, without a wake-up of a thread of its own for each). The
    /// reader then waits for `ringBell` instead of the device (a wait on the device is woken by every
    /// request that comes there, whoever takes it), and looks at the device when it rings.
    let watchedElsewhere = Atomic<Bool>(false)
    /// The watcher rings when it leaves something on the device for the reader (the connection's
    /// end) or stops watching; the session rings when it is told to end (`FuseSession.exit`).
    private let bell: UnsafeMutablePointer<sem_t>
    /// Waits of the reader on the device itself (each a wake-up of its thread when something comes;
    /// tests).
    let deviceWaits = Atomic<Int>(0)

    /// Makes the reader look at the device (see `watchedElsewhere`).
    func ringBell() { sem_post(bell) }

    /// A cancellation point, as poll(2) (libfuse cancels idle workers at the end of its loop).
    private func waitForTheBell() -> Int32 { sem_wait(bell) == 0 ? 0 : -1 }

    /// `receive` for any source: `opcode` gives the opcode of what `attempt` took (nil: none), and
    /// `wait` blocks until `attempt` may find something (poll(2) of the device; for `RingTransport`,
    /// io_uring_enter until the ring has a completion), 0, or -1 with errno set to end the wait.
    /// `flush`: sends what the holder left for `wait` to send (`RingTransport`'s reply, which goes
    /// with its wait when it blocks), before it polls or waits for its turn.
    @inline(__always)
    func receive(opcode: () -> UInt32?, wait: () -> Int32, flush: () -> Void = {}, _ attempt: () -> Int) -> Int {
        guard spins else { return attempt() }
        let me = UInt(pthread_self())
        if !keepsDevice(me) {
            flush()
            // EINTR: libfuse looks at the session's state and calls again.
            if sem_wait(token) != 0 { return -1 }
            holder.store(me, ordering: .relaxed)
        }
        var queued = false
        let n = read(attempt, wait: wait, flush: flush, queued: &queued)
        if queued { backlog &+= 1 } else { backlog = 0 }
        guard n >= 8, let opcode = opcode() else {
            let saved = errno
            passOn()
            errno = saved
            return n
        }
        let now = Self.now()
        if waitStarted != 0 {
            governor.record(waited: now &- waitStarted)
            waitStarted = 0
        }
        lastRequest.store(now, ordering: .relaxed)
        if backlog >= Self.backlogToShare || !Self.servesInline(opcode) {
            passOn()
        } else {
            busySince.store(now, ordering: .sequentiallyConsistent)
            if watchdogParked.load(ordering: .relaxed), watchdogParked.exchange(false, ordering: .sequentiallyConsistent) {
                sem_post(doorbell)
            }
        }
        return n
    }

    /// Whether the thread `me` holds the device now.
    @inline(__always)
    func isHeld(by me: UInt) -> Bool { holder.load(ordering: .relaxed) == me }

    /// Whether the calling worker still holds the device it kept for a quick request (the watchdog
    /// may have passed it on meanwhile).
    @inline(__always)
    private func keepsDevice(_ me: UInt) -> Bool {
        guard holder.load(ordering: .relaxed) == me else { return false }
        let since = busySince.load(ordering: .sequentiallyConsistent)
        return since != 0 && busySince.compareExchange(expected: since, desired: 0, ordering: .sequentiallyConsistent).exchanged
    }

    @inline(__always)
    private func passOn() {
        holder.store(0, ordering: .relaxed)
        sem_post(token)
    }

    /// Polls the device for `spin`, then blocks in `wait` until a request comes. `queued`: the first
    /// look found one.
    private func read(_ attempt: () -> Int, wait: () -> Int32, flush: () -> Void, queued: inout Bool) -> Int {
        waitStarted = 0
        var n = attempt()
        if n >= 0 || errno != EAGAIN {
            queued = n > 0
            return n
        }
        var work = idleWork.withLock { $0 }
        let start = Self.now()
        waitStarted = start
        let spin = pollsAfterRequests.load(ordering: .relaxed) ? governor.budget(now: start, runnable: runnable) : 0
        if spin > 0 {
            spunWaits.add(1, ordering: .relaxed)
            flush()   // what comes next may wait for it
        } else {
            sleptWaits.add(1, ordering: .relaxed)
        }
        let deadline = start &+ spin
        while true {
            if let w = work, !w.run() { work = nil }
            n = attempt()
            if n >= 0 || errno != EAGAIN { return n }
            if Self.now() >= deadline { break }
        }
        if let session, fuse_session_exited(session) != 0 {
            errno = EINTR   // libfuse then sees the session's end
            return -1
        }
        while true {
            if wait() < 0 { return -1 }
            n = attempt()
            if n >= 0 || errno != EAGAIN { return n }
            // Woken with nothing to take: the session's end rings too (`FuseSession.exit`, for a
            // reader waiting on the bell while the ring watches the device: the ring's holder serves
            // the forgets and interrupts that would otherwise wake it).
            if let session, fuse_session_exited(session) != 0 {
                errno = EINTR
                return -1
            }
        }
    }

    /// The watchdog's loop.
    private func watch() {
        while !stopping.load(ordering: .sequentiallyConsistent) {
            watchdogLooks.add(1, ordering: .relaxed)
            let now = Self.now()
            let since = busySince.load(ordering: .sequentiallyConsistent)
            if since != 0, now - since > stallNanoseconds,
               busySince.compareExchange(expected: since, desired: 0, ordering: .sequentiallyConsistent).exchanged {
                takeovers.add(1, ordering: .relaxed)
                passOn()
            }
            if now - lastRequest.load(ordering: .relaxed) > stallNanoseconds * Self.lingerStalls && busySince.load(ordering: .sequentiallyConsistent) == 0 {
                // Idle: sleep until the reader's next quick request rings.
                watchdogParked.store(true, ordering: .sequentiallyConsistent)
                if busySince.load(ordering: .sequentiallyConsistent) != 0 || stopping.load(ordering: .sequentiallyConsistent) {
                    // A request came meanwhile: unpark, or take the ring that was already sent.
                    if !watchdogParked.exchange(false, ordering: .sequentiallyConsistent) { sem_wait(doorbell) }
                    continue
                }
                _ = retryingEINTR { sem_wait(doorbell) }
                continue
            }
            // On the doorbell, so that `stop` need not wait out the pause (a ring meanwhile only
            // brings the next look forward). tv_nsec must stay below a second (the wait fails at once
            // otherwise, and this would spin). The next look: just when the request being served
            // now would have kept the device too long, or in `stall` while none is being served (one
            // that begins meanwhile cannot have kept it too long before then). Either way a look
            // finds any request served since the last one begun less than `stall` before, and the
            // next is when that one would stall: a stalled request is passed on `stall` after it
            // began, and requests that come one after another wake the watchdog once per `stall`.
            let next = Self.nextLook(now: now, busySince: since, stall: stallNanoseconds)
            var until = timespec(tv_sec: next / 1_000_000_000, tv_nsec: next % 1_000_000_000)
            _ = cfuse_sem_clockwait_monotonic(doorbell, &until)
        }
    }

    /// When the watchdog looks next, having looked at `now` and found the holder serving a request
    /// since `busySince` (0: none; or one it just passed on, begun more than `stall` before).
    @inline(__always)
    static func nextLook(now: Int, busySince since: Int, stall: Int) -> Int {
        since != 0 && now &- since <= stall ? since &+ stall &+ 1 : now &+ stall
    }

    /// Requests a reader serves without passing the device on: they touch metadata only. Forgets
    /// stay too: passing the device on for each (a wake-up) costs more than the close they do.
    @inline(__always)
    static func servesInline(_ opcode: UInt32) -> Bool {
        switch opcode {
        case 1, 2, 3, 4, 5, 6, 8, 9, 10, 11, 12, 13, 14, // lookup, forget, getattr, setattr, readlink,
                                                         // symlink, mknod, mkdir, unlink, rmdir,
                                                         // rename, link, open
             17, 18, 21, 22, 23, 24, 25,                 // statfs, release, the xattrs, flush
             27, 28, 29, 34, 35, 36, 42, 44, 45, 51, 52: // opendir, readdir, releasedir, access, create,
                                                         // interrupt, batch forget, readdirplus,
                                                         // rename2, tmpfile, statx
            true
        default:
            false
        }
    }

    @inline(__always)
    private static func now() -> Int {
        var t = timespec()
        clock_gettime(CLOCK_MONOTONIC, &t)
        return t.tv_sec &* 1_000_000_000 &+ t.tv_nsec
    }
}
