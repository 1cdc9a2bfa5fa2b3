import CFuse3
import CURing
import Glibc
import Synchronization
import Linux

/// How the session talks to the kernel (`-o transport=`).
public enum FuseTransport: String, Sendable, CaseIterable {
    /// io_uring when the kernel offers it at INIT, else /dev/fuse; for a mount other users may use
    /// too: one user's parked requests get ring entries of their own (`RingTransport.addedEntries`).
    case auto
    /// io_uring; /dev/fuse (saying why) only when the kernel does not offer it or refuses the ring.
    case uring
    /// read(2) and write(2) on /dev/fuse (`DeviceReader`), as before io_uring.
    case dev
}

/// The transport a mount ended up with (after INIT).
public enum FuseTransportInUse: String, Sendable {
    case dev
    case uring
}

// FUSE over io_uring (Linux 6.14+; docs/architecture.md, "The transport").
//
// The kernel does INIT over /dev/fuse as always. When it offers FUSE_OVER_IO_URING and the session
// wants the ring, the INIT reply (edited by the session's I/O hooks, as for passthrough: libfuse 3.14
// predates both) takes the flag, and the ring's threads register their entries: per CPU queue
// (the kernel sends a request to the queue of the CPU its caller runs on, and uses the ring only once
// every queue has an entry), `entriesPerQueue` entries, each a header buffer (fuse_in_header, the
// operation's header, the ring's own in/out record) and a payload buffer of the negotiated max_write.
// A request arrives as a completion of the entry's command; it is put back together as libfuse's
// reader would have read it (header, operation header and payload, contiguous: the payload stays where
// the kernel put it, the headers are copied in front of it) and handed to libfuse's own processing
// (`fuse_session_process_buf`). Its reply comes back through the writev hook, from this thread or,
// for a parked request, from any thread later: it is copied into the entry and committed with
// COMMIT_AND_FETCH, which also fetches the entry's next request in the same submission.
//
// Forgets, interrupts and the daemon's notifications stay on /dev/fuse (the kernel sends forgets and
// interrupts there, and takes notifications only there), served by libfuse's loop and DeviceReader
// as before.
//
// Threads: one io_uring carries every queue's entries (the kernel takes an entry of any queue through
// any ring: the queue is named in the command), and one pool of threads serves it, sharing it as the
// device's workers share /dev/fuse (one `DeviceReader`: one thread at a time holds the ring, polls its
// completions for `spin` after a request, serves metadata requests itself and passes the ring on
// before a slow one; the watchdog passes it on when a request stalls; idle work runs between looks),
// and then waits in io_uring_enter for the ring's next completion. One holder, not one per queue: the
// kernel picks the queue by the CPU the caller runs on, and a poller per queue took the cores the
// callers needed. Only these threads commit: the kernel delivers an entry's next request in the task of
// whoever committed it (as task work: cooperative, so a holder polling in user space is not
// interrupted for it but sees the ring's IORING_SQ_TASKRUN flag and enters the kernel to run it), and
// cancels an entry whose committer exits; so a reply from another thread (a parked request resumed by
// a presenter's answer) is queued for the holder, who is woken by a completion that thread puts on
// the ring through a message from a small ring of its own (IORING_OP_MSG_RING), never entering the
// holder's ring: the holder leaves its own replies there for its next enter, so that when it blocks
// the commit and the wait for the next request are one system call (`deferCommit`, `submitAndWait`).
final class RingTransport: @unchecked Sendable {
    /// Entries registered per queue at the start.
    static let entriesPerQueue = 32
    /// Entries that may be added, over all queues, while requests are parked: a queue keeps
    /// `entriesPerQueue` entries that are not parked as long as these last. The daemon bounds the
    /// requests one user may have parked (`max_user_waits`), so one user cannot take them all.
    static let addedEntries = 4096
    /// The payload buffer starts this far into an entry's memory; the header buffer is at its start,
    /// and the request's headers are copied just before the payload.
    static let payloadOffset = 4096
    /// FUSE_NOTIFY_REPLY: the kernel's answer to a retrieve notification, here only the ring's pulls.
    static let notifyReply: UInt32 = 41
    /// Set in the unique ids of the ring's pulls (the kernel's own ids count up by 2 from 2, and
    /// never get there). Even, as every id the kernel takes back.
    static let pullMark: UInt64 = 1 << 62

    enum State: Int {
        case idle = 0, starting, running, failed, stopped
    }

    final class Entry: @unchecked Sendable {
        let queue: Int
        let index: Int
        /// [header buffer | ... | payload], mapped at the entry's registration (MAP_NORESERVE: a page
        /// costs memory once it is touched), unmapped at deinit.
        var memory: UnsafeMutableRawPointer?
        var mapped = 0
        let iov: UnsafeMutablePointer<iovec>
        /// The unique id of the request the entry holds (0: none, or its reply is on its way).
        let unique = Atomic<UInt64>(0)
        /// The request it holds as the ring's threads see it: 0 (none, or answered), its unique id
        /// while a thread serves it, the id with `parkedBit` once parked (the serving thread returned
        /// without answering it: a presenter is being asked). Unique ids are even (the kernel keeps
        /// the low bit for interrupts) and never repeat, so a late look at an entry that moved on to
        /// another request changes nothing.
        let phase = Atomic<UInt64>(0)
        /// Bytes at the payload's start that may be resident (an added entry gives back the rest).
        var touched = 0
        /// Where the request taken last starts (its headers, copied in front of the payload).
        var request: UnsafeMutableRawPointer?
        init(queue: Int, index: Int) {
            self.queue = queue
            self.index = index
            iov = .allocate(capacity: 2)
            iov.initialize(repeating: iovec(), count: 2)
        }
        deinit {
            if let memory { munmap(memory, mapped) }
            iov.deallocate()
        }
        var header: UnsafeMutableRawPointer { memory! }
        var payload: UnsafeMutableRawPointer { memory! + RingTransport.payloadOffset }
        /// Registered beyond the queue's first `entriesPerQueue` (while requests were parked).
        var isAdded: Bool { index >= RingTransport.entriesPerQueue }
    }

    static let parkedBit: UInt64 = 1

    final class Queue: @unchecked Sendable {
        let id: Int
        /// The entries, `count` of them published (an entry is never removed: the kernel has no
        /// command to take one back).
        private let slots: UnsafeMutablePointer<Entry?>
        let capacity: Int
        let count = Atomic<Int>(0)
        /// Entries holding a parked request.
        let parked = Atomic<Int>(0)
        /// Taken to add entries.
        let growing = Mutex<Void>(())
        /// Entries whose command the kernel ended (teardown).
        let ended = Atomic<Int>(0)
        /// Pulls asked for and not yet sent (`pull`): the node id of each parked request.
        let pullsOwed = Mutex<[UInt64]>([])
        init(id: Int, capacity: Int) {
            self.id = id
            self.capacity = capacity
            slots = .allocate(capacity: capacity)
            slots.initialize(repeating: nil, count: capacity)
        }
        deinit {
            slots.deinitialize(count: capacity)
            slots.deallocate()
        }
        @inline(__always)
        func entry(_ index: Int) -> Entry { slots[index].unsafelyUnwrapped }
        /// Publishes the next entry (one adder at a time: at setup, or under `growing`).
        func append(_ entry: Entry) {
            let n = count.load(ordering: .relaxed)
            slots[n] = entry
            count.store(n + 1, ordering: .releasing)
        }
    }

    let wanted: FuseTransport
    private let spinNanoseconds: Int
    private let adaptiveSpin: Bool
    private let say: @Sendable (String) -> Void
    private(set) var queues: [Queue] = []
    /// The reader of /dev/fuse (the session's): it stops polling while the ring serves the mount, and
    /// polls again if the kernel refuses the ring.
    private let deviceReader: DeviceReader?
    /// The ring threads' one reader: a single holder takes requests from every queue (see `serve`).
    let reader: DeviceReader
    /// The one io_uring of every queue's entries (nil before `prepare` and once closed).
    private var ring: OpaquePointer?
    /// Submissions to `ring`, and its end (`closed`): a late reply finds it closed.
    private let sq = Mutex<Bool>(false)
    /// Commits the holder queued and left for its next io_uring_enter (under `sq`; `commit`).
    private let deferredCommits = Atomic<Int>(0)
    /// Whether the holder leaves its replies for its next enter: only where other threads wake it
    /// without entering `ring` (`waker`).
    private var defersReplies = false
    /// The small ring other threads wake the holder through (`wake`; nil: a no-op on `ring`), and
    /// its lock.
    private var waker: OpaquePointer?
    private let wakerLock = Mutex<Void>(())
    /// Commits made outside the pool (queue, entry index, commit id), for the holder to submit.
    private let pending = Mutex<[(Int, Int, UInt64)]>([])
    private let hasPending = Atomic<Bool>(false)
    /// The user data of the no-op that wakes the holder (an entry's is its queue and index).
    static let wakeUserData = UInt64.max
    /// The user data of the holder's poll of /dev/fuse (`watchTheDevice`).
    static let deviceUserData = UInt64.max - 1
    /// Whether the holder watches /dev/fuse for the session's reader (`watchTheDevice`): set at the
    /// start where that reader's descriptor does not block (it spins), cleared when the device ends
    /// or the ring is refused.
    private let watchesDevice = Atomic<Bool>(false)
    /// The holder's poll of /dev/fuse is queued or under way (only the holder touches it).
    private var devicePollArmed = false
    /// The holder's poll is queued and waits for its next enter (under `sq`).
    private let devicePollQueued = Atomic<Bool>(false)
    /// Where the holder reads what comes to /dev/fuse (as large as libfuse's own buffer must be).
    private var deviceBuffer: UnsafeMutableRawPointer?
    private var deviceBufferSize = 0
    /// Requests the holder took from /dev/fuse (forgets, interrupts) while it served the ring.
    let deviceRequestsTaken = Atomic<Int>(0)
    private var threads: [pthread_t] = []
    private var session: OpaquePointer?
    private var devfd: Int32 = -1
    /// Set once INIT is answered; the payload buffer's size the kernel wants.
    private var payloadSize = 0
    private let go: UnsafeMutablePointer<sem_t>
    let state = Atomic<Int>(State.idle.rawValue)
    /// Why the ring could not be set up before the mount (nil: it could, or it was not wanted).
    private(set) var setupFailure: String?
    /// Requests served through the ring.
    let served = Atomic<Int>(0)
    private let refusalSaid = Atomic<Bool>(false)
    /// Entries that may still be added (`addedEntries` at the start).
    private let addable = Atomic<Int>(RingTransport.addedEntries)
    private let exhaustionSaid = Atomic<Bool>(false)
    /// The thread that sends the pulls (`pull`), woken through `pullWake`.
    private var puller: pthread_t?
    private let pullWake: UnsafeMutablePointer<sem_t>
    private let pullIDs = Atomic<UInt64>(0)
    /// The node id of the last file a pull went through (the puller's own; 0: none yet).
    private var pullTarget: UInt64 = 0
    private let pullFailureSaid = Atomic<Bool>(false)
    /// The holder's replies that went in the io_uring_enter of its wait for the next request, and
    /// those that went in an enter of their own (it polled, or a request had come meanwhile).
    let repliesWithTheWait = Atomic<Int>(0)
    let repliesAlone = Atomic<Int>(0)
    /// Pulls sent, and their requests answered (each a commit on its CPU's queue).
    let pullsSent = Atomic<Int>(0)
    let pullsAnswered = Atomic<Int>(0)

    /// Up to N regular files the kernel holds, from the file system (`FuseFileSystem.regularFilesTheKernelHolds`).
    private let regularFilesHeld: @Sendable (Int) -> [UInt64]

    init(wanted: FuseTransport, spinNanoseconds: Int, adaptiveSpin: Bool = true, deviceReader: DeviceReader? = nil,
         say: @escaping @Sendable (String) -> Void = sayOnStandardError,
         regularFilesHeld: @escaping @Sendable (Int) -> [UInt64] = { _ in [] }) {
        self.wanted = wanted
        self.regularFilesHeld = regularFilesHeld
        // The ring's workers always take turns and poll (a zero spin: they block at once).
        self.spinNanoseconds = max(1, spinNanoseconds)
        self.adaptiveSpin = adaptiveSpin
        self.say = say
        self.deviceReader = deviceReader
        reader = DeviceReader(spinNanoseconds: self.spinNanoseconds, adaptive: adaptiveSpin)
        go = .allocate(capacity: 1)
        sem_init(go, 0, 0)
        pullWake = .allocate(capacity: 1)
        sem_init(pullWake, 0, 0)
    }

    deinit {
        stop()
        if let deviceBuffer { munmap(deviceBuffer, deviceBufferSize) }
        sem_destroy(go)
        go.deallocate()
        sem_destroy(pullWake)
        pullWake.deallocate()
    }

    var isWanted: Bool { wanted != .dev }

    /// The queues: one per possible CPU (the kernel's count; a queue it never uses still needs an
    /// entry before the ring is used).
    static func possibleCPUs() -> Int {
        guard let text = readWholeFile("/sys/devices/system/cpu/possible") else { return Int(sysconf(Int32(_SC_NPROCESSORS_CONF))) }
        var highest = 0
        for part in text.split(whereSeparator: { $0 == "," || $0 == "\n" || $0 == " " }) {
            let bounds = part.split(separator: "-")
            if let last = bounds.last, let n = Int(last) { highest = max(highest, n) }
        }
        return highest + 1
    }

    /// The ring's threads, for all queues together: 16, as libfuse's loop.
    static let threadCount = 16
    /// The names of the ring's threads and of its puller (`top -H`, `perf sched`, /proc/PID/task/TID/comm:
    /// at most 15 bytes), so who wakes whom can be read from the scheduler's events.
    package static let threadName = "fuse-ring"
    package static let pullerThreadName = "fuse-ring-pull"

    /// Sets up the ring and its threads (which wait for INIT) before the mount's INIT is answered.
    /// False (and `setupFailure` says why) when io_uring cannot be used: the INIT reply then does not
    /// take the ring.
    func prepare(session: OpaquePointer, devfd: Int32) -> Bool {
        guard isWanted else { return false }
        self.session = session
        self.devfd = devfd
        let count = Self.possibleCPUs()
        // Completions: one per entry at most (each waits for one request), and the no-ops that wake
        // the holder; beyond, the kernel keeps them aside until there is room (IORING_FEAT_NODROP).
        let completions = UInt32(min(32_768, count * Self.entriesPerQueue + Self.addedEntries + 64))
        var error: Int32 = 0
        guard let ring = curing_create(64, completions, 1, &error) else {
            setupFailure = "io_uring_setup failed: \(String(cString: strerror(-error)))"
            return false
        }
        self.ring = ring
        var wakerError: Int32 = 0
        waker = curing_create_waker(&wakerError)
        defersReplies = waker != nil
        for q in 0..<count {
            let queue = Queue(id: q, capacity: Self.entriesPerQueue + Self.addedEntries)
            for i in 0..<Self.entriesPerQueue { queue.append(Entry(queue: q, index: i)) }
            queues.append(queue)
        }
        guard reader.startWatchdog() else {
            setupFailure = "cannot start the ring's watchdog thread"
            closeRings()
            return false
        }
        for t in 0..<Self.threadCount {
            let work = ThreadStart(transport: self, slot: t, of: Self.threadCount)
            var thread = pthread_t()
            let arg = Unmanaged.passRetained(work).toOpaque()
            guard pthread_create(&thread, nil, { arg in
                let work = Unmanaged<ThreadStart>.fromOpaque(arg!).takeRetainedValue()
                blockAllSignalsInThisThread()
                nameCurrentThread(RingTransport.threadName)
                work.transport.serve(slot: work.slot, of: work.of)
                return nil
            }, arg) == 0 else {
                Unmanaged<ThreadStart>.fromOpaque(arg).release()
                setupFailure = "cannot start the ring's threads"
                stop()
                return false
            }
            threads.append(thread)
        }
        var thread = pthread_t()
        guard pthread_create(&thread, nil, { arg in
            let transport = Unmanaged<RingTransport>.fromOpaque(arg!).takeUnretainedValue()
            blockAllSignalsInThisThread()
            nameCurrentThread(RingTransport.pullerThreadName)
            transport.pull()
            return nil
        }, Unmanaged.passUnretained(self).toOpaque()) == 0 else {
            setupFailure = "cannot start the ring's puller thread"
            stop()
            return false
        }
        puller = thread
        return true
    }

    private final class ThreadStart {
        let transport: RingTransport
        let slot: Int, of: Int
        init(transport: RingTransport, slot: Int, of: Int) {
            self.transport = transport; self.slot = slot; self.of = of
        }
    }

    /// A description for the daemon's log: queues, entries, threads.
    var shape: String {
        "\(queues.count) queue\(queues.count == 1 ? "" : "s") of \(Self.entriesPerQueue) entries on one io_uring, served by \(Self.threadCount) threads of which one at a time takes requests; "
            + "an entry is added while one is parked (up to \(Self.addedEntries) in all)"
    }

    /// INIT was answered with FUSE_OVER_IO_URING: register the entries (payload buffers of
    /// `payloadSize` bytes). From the writev hook, right after the reply was written.
    func start(payloadSize: Int) {
        guard state.compareExchange(expected: State.idle.rawValue, desired: State.starting.rawValue, ordering: .acquiringAndReleasing).exchanged else { return }
        self.payloadSize = payloadSize
        if let deviceReader, deviceReader.spins {
            // /dev/fuse's reader reads a non-blocking descriptor: the holder may look at it too.
            let size = payloadSize + 2 * Self.payloadOffset
            if let memory = mmap(nil, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0),
               memory != MAP_FAILED {
                deviceBuffer = memory
                deviceBufferSize = size
                watchesDevice.store(true, ordering: .releasing)
                deviceReader.watchedElsewhere.store(true, ordering: .releasing)
            }
        }
        state.store(State.running.rawValue, ordering: .releasing)
        deviceReader?.pollsAfterRequests.store(false, ordering: .relaxed)
        for _ in threads { sem_post(go) }
    }

    /// Ends the threads and closes the ring (after the session's loop returned; idempotent).
    func stop() {
        let previous = state.exchange(State.stopped.rawValue, ordering: .acquiringAndReleasing)
        guard previous != State.stopped.rawValue else { return }
        stopWatchingTheDevice()
        for _ in threads { sem_post(go) }
        wake()
        for t in threads { pthread_join(t, nil) }
        threads = []
        if let puller {
            sem_post(pullWake)
            pthread_join(puller, nil)
            self.puller = nil
        }
        closeRings()
    }

    /// Closes the ring (under its submission lock, so a late reply submits nothing). The queues and
    /// their entries' memory stay until deinit: a parked request's late reply may look at them until
    /// the session's end answers the requests still parked (`ParkedRequests.end`), which is before
    /// the session lets go of the ring.
    private func closeRings() {
        reader.stop()
        // The waker first: a wake under way still finds `ring` open.
        wakerLock.withLock { _ in
            if let waker { curing_destroy(waker) }
            waker = nil
        }
        sq.withLock { closed in
            guard !closed else { return }
            closed = true
            if let ring { curing_destroy(ring) }
        }
    }

    @inline(__always)
    private var isStopping: Bool {
        let s = state.load(ordering: .acquiring)
        return s == State.stopped.rawValue || s == State.failed.rawValue
    }

    /// Wakes the holder waiting in io_uring_enter, from a thread that is not the ring's: a message
    /// from the small waker ring puts a completion on `ring` (IORING_OP_MSG_RING), without touching
    /// `ring`'s submission queue, where the holder may have left a commit for its next enter (an
    /// enter of this thread would submit it, and the kernel would deliver that entry's next request
    /// in this thread's task, which may end). Where the kernel cannot send one, a no-op on `ring`
    /// (it completes at once, in the caller's system call), after the holder's commits.
    private func wake() {
        let sent: Bool = wakerLock.withLock { _ in
            guard let waker, sq.withLock({ closed in !closed }), let ring else { return false }
            return curing_send_wake(waker, ring, Self.wakeUserData) == 0
        }
        guard !sent else { return }
        sq.withLock { closed in
            guard !closed, let ring else { return }
            // This submit also sends what the holder queued for its next enter (its deferred
            // commits, the poll of /dev/fuse), from this thread, as a non-holder's commit does.
            _ = curing_submit_nop(ring, Self.wakeUserData)
        }
    }

    /// Submits the commits the holder left for its next enter (before it polls, hands the ring on or
    /// takes a request that came meanwhile).
    @inline(__always)
    private func submitDeferred() {
        guard deferredCommits.load(ordering: .relaxed) > 0 || devicePollQueued.load(ordering: .relaxed) else { return }   // only the holder leaves any
        let rc: Int32 = sq.withLock { closed in
            guard !closed, let ring else { return 0 }
            let replies = deferredCommits.exchange(0, ordering: .relaxed)
            let poll = devicePollQueued.exchange(false, ordering: .relaxed)
            guard replies > 0 || poll else { return 0 }
            repliesAlone.add(replies, ordering: .relaxed)
            return curing_flush(ring) > 0 ? curing_submit(ring) : 0
        }
        refuseIfCommitFailed(rc)
    }

    /// The holder's wait for the ring's next completion: the commits it left go in the same
    /// io_uring_enter (one system call for the reply and the wait for the next request).
    private func submitAndWait() -> Int32 {
        let toSubmit: UInt32? = sq.withLock { closed in
            guard !closed, let ring else { return nil }
            repliesWithTheWait.add(deferredCommits.exchange(0, ordering: .relaxed), ordering: .relaxed)
            devicePollQueued.store(false, ordering: .relaxed)
            return curing_flush(ring)
        }
        guard let toSubmit, let ring else { return -ESHUTDOWN }
        return curing_submit_and_wait(ring, toSubmit)
    }

    // MARK: /dev/fuse, watched by the holder

    // Once the ring serves the mount, the kernel still sends forgets and interrupts to /dev/fuse:
    // with the ring, an unlinked file's forget came there after each unlink, and woke libfuse's
    // worker asleep in poll(2) on the device, a thread of its own that took a core from the tool or
    // the polling holder. So the holder watches the device as it watches the ring: a one-shot poll
    // of /dev/fuse on the ring (queued, it goes with the holder's next enter), whose completion the
    // holder takes among the entries' (the kernel delivers it by task work, as a request); it then
    // reads the device once (non-blocking: the session's reader spins) and serves what it read
    // there and then (a forget or an interrupt is answered on /dev/fuse, or not at all), and polls
    // again. The session's reader meanwhile waits for its bell, not on the device
    // (`DeviceReader.watchedElsewhere`); the holder rings it when the device fails (the connection's
    // end: the reader then reads the error, and libfuse's loop ends as before) and when the ring
    // stops or is refused.

    /// Queues the poll of /dev/fuse for the holder's next enter.
    private func armDevicePoll() {
        let queued: Bool = sq.withLock { closed in
            guard !closed, let ring else { return false }
            guard curing_queue_poll_in(ring, devfd, Self.deviceUserData) == 0 else { return false }
            devicePollQueued.store(true, ordering: .relaxed)
            return true
        }
        devicePollArmed = queued
    }

    /// The holder's poll of /dev/fuse completed with `polled` (its events, or an error): one read of
    /// the device, served at once.
    private func takeFromTheDevice(polled: Int32) {
        // Watching stopped since the poll was armed (the ring refused, or stopped): the reader,
        // rung then, reads the device itself; a read here would serve its request outside it.
        guard watchesDevice.load(ordering: .acquiring) else { return }
        guard polled >= 0, let buffer = deviceBuffer else { return stopWatchingTheDevice() }
        let n = Glibc.read(devfd, buffer, deviceBufferSize)
        if n > 0 {
            deviceRequestsTaken.add(1, ordering: .relaxed)
            var buf = fuse_buf()
            buf.size = n
            buf.mem = buffer
            buf.fd = -1
            TmpfileRequest.readAsCreate(buffer, length: n)
            fuse_session_process_buf(session, &buf)
        } else if n < 0 && errno != EAGAIN && errno != EINTR {
            stopWatchingTheDevice()   // the session's reader reads the error (ENODEV: the end)
        }
    }

    /// The session's reader goes back to waiting on the device itself.
    private func stopWatchingTheDevice() {
        guard watchesDevice.exchange(false, ordering: .acquiringAndReleasing) else { return }
        deviceReader?.watchedElsewhere.store(false, ordering: .releasing)
        deviceReader?.ringBell()
    }

    // MARK: a queue's thread

    private func serve(slot: Int, of count: Int) {
        pthread_setspecific(ringThreadKey, UnsafeRawPointer(bitPattern: 1))
        _ = retryingEINTR { sem_wait(go) }
        guard state.load(ordering: .acquiring) == State.running.rawValue else { return }
        // This thread registers its share of every queue's first entries.
        for queue in queues {
            for index in stride(from: slot, to: Self.entriesPerQueue, by: count) {
                guard register(queue.entry(index), in: queue) else { return }
            }
        }
        var taken: Entry?
        while true {
            taken = nil
            let n = reader.receive(opcode: {
                taken.map { $0.header.loadUnaligned(fromByteOffset: 4, as: UInt32.self) }
            }, wait: {
                let rc = submitAndWait()
                if rc == 0 || rc == -EINTR { return 0 }
                errno = -rc
                return -1
            }, flush: { submitDeferred() }) { attempt(&taken) }
            if n > 0, let entry = taken {
                let id = entry.phase.load(ordering: .acquiring)
                process(entry, length: n)
                // Returned unanswered: parked until a presenter answers. The kernel gives this
                // queue's next requests to its free entries only, so one is added for it; and it
                // hands out requests it queued while the queue had no free entry only when one of
                // the queue's entries commits, which this one will not do for a while: a pull does.
                // (The request's node is read before it is marked parked: until then nothing was
                // committed through the entry, so its headers are still this request's.)
                if id != 0, entry.phase.load(ordering: .acquiring) == id, let request = entry.request {
                    let node = request.loadUnaligned(fromByteOffset: 16, as: UInt64.self)
                    if entry.phase.compareExchange(expected: id, desired: id | Self.parkedBit, ordering: .acquiringAndReleasing).exchanged {
                        let queue = queues[entry.queue]
                        queue.parked.add(1, ordering: .acquiringAndReleasing)
                        addEntries(queue)
                        queue.pullsOwed.withLock { $0.append(node) }
                        sem_post(pullWake)
                    }
                }
            } else if isStopping {
                return
            }
        }
    }

    /// Adds entries to `queue` until it has `entriesPerQueue` that hold no parked request (or
    /// `addedEntries` are used up). A new entry only takes requests that come after it is registered:
    /// the kernel gives those already queued to entries that commit.
    private func addEntries(_ queue: Queue) {
        queue.growing.withLock { _ in
            while queue.count.load(ordering: .acquiring) - queue.parked.load(ordering: .acquiring) < Self.entriesPerQueue {
                guard queue.count.load(ordering: .relaxed) < queue.capacity,
                      addable.wrappingSubtract(1, ordering: .relaxed).oldValue > 0 else {
                    addable.store(0, ordering: .relaxed)
                    if !exhaustionSaid.exchange(true, ordering: .relaxed) {
                        say("coordfs: the ring's \(Self.addedEntries) added entries are in use; a CPU whose queue's entries are all "
                            + "parked holds its further requests until one is answered")
                    }
                    return
                }
                let entry = Entry(queue: queue.id, index: queue.count.load(ordering: .relaxed))
                guard map(entry) else { return }
                queue.append(entry)
                guard register(entry, in: queue) else { return }
            }
        }
    }

    /// Sends the pulls the parks asked for, each from the CPU of the park's queue: a retrieve
    /// notification of nothing, which the kernel answers with a request (FUSE_NOTIFY_REPLY) on the
    /// queue of the CPU the writer runs on, at once and without waiting for anyone. The kernel takes
    /// one of a regular file it holds only: the parked request's own node (the file of an open or a
    /// truncate, which the kernel holds while the request waits), else the last file a pull went
    /// through, else one the file system names (`pullThroughAFile`). It comes to a free entry, or is
    /// queued behind the requests already queued there; the holder answers it at once
    /// (`attempt`), and that commit hands the queue's first queued request to the entry.
    ///
    /// Why this is enough: the kernel queues a request only while every entry of its queue holds
    /// one. Each such entry commits (which hands out the first queued request) or is parked; a park
    /// registers the entries that keep the queue's free ones at `entriesPerQueue` and then owes a
    /// pull, written after that. A pull that finds no free entry is queued only because requests came
    /// after the park and took them all, and they in turn commit or are parked (and owe pulls): so
    /// a queued request always has a commit coming, until the added entries run out (then the queue
    /// waits for an answer, as the log says). One pull per park, each a write(2) that never blocks
    /// and a commit: bounded work, and none while nothing is parked. A park whose node is a folder
    /// (an unlink's, a rename's, a create's) pulls through a regular file the file system says the
    /// kernel holds (the unlinked or renamed file itself among them: the kernel looked it up), when
    /// the last file a pull went through is gone; only while the kernel holds no regular file of the
    /// mount at all does it pull nothing (its queue then waits for a commit there, the ask's
    /// deadline at the latest).
    private func pull() {
        var pinned = -1
        while true {
            _ = retryingEINTR { sem_wait(pullWake) }
            if state.load(ordering: .acquiring) == State.stopped.rawValue { return }
            for queue in queues {
                let owed: [UInt64] = queue.pullsOwed.withLock { list in
                    defer { list.removeAll(keepingCapacity: true) }
                    return list
                }
                guard !owed.isEmpty else { continue }
                if pinned != queue.id {
                    let rc = curing_pin_to_cpu(Int32(queue.id))
                    guard rc == 0 else {
                        pullFailed("cannot run on CPU \(queue.id): \(String(cString: strerror(-rc)))")
                        continue
                    }
                    pinned = queue.id
                }
                for node in owed {
                    let rc = pullThroughAFile(first: node)
                    if rc != 0, !isStopping, rc != -ENOENT, rc != -EINVAL, rc != -ENODEV, rc != -ENOTCONN {
                        pullFailed("the kernel refused a retrieve notification: \(String(cString: strerror(-rc)))")
                    }
                }
            }
        }
    }

    /// How many of the file system's regular files a pull tries when the park's node and the last
    /// file a pull went through are not (or no longer) files the kernel holds.
    static let pullCandidates = 4

    /// One pull through a regular file the kernel holds: `node` (the parked request's), else the
    /// last file a pull went through, else one the file system names (`regularFilesHeld`: the
    /// kernel may forget any of them meanwhile, so a few are tried). 0, or the last error: -EINVAL
    /// or -ENOENT when none was taken (the kernel holds no regular file of the mount).
    private func pullThroughAFile(first node: UInt64) -> Int32 {
        var rc = sendPull(through: node)
        guard rc == -EINVAL || rc == -ENOENT else {
            if rc == 0 { pullTarget = node }
            return rc
        }
        if pullTarget != 0, pullTarget != node {
            rc = sendPull(through: pullTarget)
            guard rc == -EINVAL || rc == -ENOENT else { return rc }
        }
        for file in regularFilesHeld(Self.pullCandidates) where file != node && file != pullTarget {
            rc = sendPull(through: file)
            if rc == 0 { pullTarget = file }
            guard rc == -EINVAL || rc == -ENOENT else { return rc }
        }
        return rc
    }

    /// One pull through the regular file `node`: 0, or the kernel's error (-EINVAL: not a regular
    /// file; -ENOENT: not in the kernel).
    private func sendPull(through node: UInt64) -> Int32 {
        let rc = curing_notify_retrieve(devfd, node, Self.pullMark | (pullIDs.add(1, ordering: .relaxed).newValue << 1))
        if rc == 0 { pullsSent.add(1, ordering: .relaxed) }
        return rc
    }

    private func pullFailed(_ why: String) {
        guard !pullFailureSaid.exchange(true, ordering: .relaxed) else { return }
        say("coordfs: requests the kernel queued behind parked ones on a CPU may wait until a request there is answered (\(why))")
    }

    /// Maps the entry's memory: its header buffer, then at `payloadOffset` a payload buffer of
    /// `payloadSize`. MAP_NORESERVE: only the pages a request or reply touches cost memory.
    private func map(_ entry: Entry) -> Bool {
        guard entry.memory == nil else { return true }
        let size = (Self.payloadOffset + payloadSize + 4095) & ~4095
        let mapped = mmap(nil, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
        guard let memory = mapped, memory != MAP_FAILED else {
            refused("cannot map the ring's buffers: \(String(cString: strerror(errno)))")
            return false
        }
        entry.mapped = size
        entry.memory = memory
        entry.iov[0] = iovec(iov_base: memory, iov_len: MemoryLayout<curing_req_header>.size)
        entry.iov[1] = iovec(iov_base: memory + Self.payloadOffset, iov_len: payloadSize)
        return true
    }

    private func register(_ entry: Entry, in queue: Queue) -> Bool {
        guard map(entry) else { return false }
        let rc: Int32 = sq.withLock { closed in
            guard !closed, let ring else { return -ESHUTDOWN }
            return curing_submit_fuse_cmd(ring, devfd, UInt32(CURING_CMD_REGISTER), UInt16(queue.id), 0,
                                                         entry.iov, Self.userData(entry))
        }
        if rc < 0 {
            refused("submitting a registration failed: \(String(cString: strerror(-rc)))")
            return false
        }
        return true
    }

    /// The kernel refused the ring (or the daemon could not set it up after INIT): say so once. A
    /// refused registration makes the kernel serve the mount over /dev/fuse.
    private func refused(_ why: String) {
        guard !refusalSaid.exchange(true, ordering: .relaxed) else { return }
        deviceReader?.pollsAfterRequests.store(true, ordering: .relaxed)
        stopWatchingTheDevice()
        say("coordfs: the kernel's io_uring queues could not be used (\(why)); requests keep coming through /dev/fuse")
    }

    /// An entry's completions carry its queue and index.
    @inline(__always)
    private static func userData(_ entry: Entry) -> UInt64 { UInt64(entry.queue) << 32 | UInt64(entry.index) }

    /// Takes a fetched request, whichever queue it came through (after submitting commits queued by
    /// other threads). The request's length, or -1 with errno EAGAIN (nothing yet) or ESHUTDOWN
    /// (stopping). Only the reader's holder calls it.
    @inline(__always)
    private func attempt(_ taken: inout Entry?) -> Int {
        if hasPending.load(ordering: .acquiring) { submitPending() }
        if !devicePollArmed, watchesDevice.load(ordering: .relaxed) { armDevicePoll() }
        let ring = self.ring.unsafelyUnwrapped
        // A request came meanwhile: the reply left for the next enter goes before it is served.
        if deferredCommits.load(ordering: .relaxed) > 0, curing_has_news(ring) != 0 { submitDeferred() }
        var userData: UInt64 = 0
        var res: Int32 = 0
        while curing_take_cqe(ring, &userData, &res) != 0 {
            if userData == Self.wakeUserData {
                // Another thread queued a commit (or the ring stops): queued before its no-op.
                if hasPending.load(ordering: .acquiring) { submitPending() }
                continue
            }
            if userData == Self.deviceUserData {
                devicePollArmed = false
                takeFromTheDevice(polled: res)
                continue
            }
            let queue = queues[Int(userData >> 32)]
            let entry = queue.entry(Int(userData & 0xffff_ffff))
            if res < 0 {
                switch -res {
                case ENOTCONN, ECONNABORTED, ECANCELED:
                    queue.ended.add(1, ordering: .relaxed)  // the connection ends
                    // The session's reader looks at the device itself now: the connection's end
                    // reaches it even when the poll of /dev/fuse never completes (a daemon that
                    // outlived its unmount, waiting for that poll, was seen in CI).
                    stopWatchingTheDevice()
                default:
                    refused("an entry's command failed: \(String(cString: strerror(-res)))")
                }
                continue
            }
            let n = reassemble(entry)
            if n > 0 {
                // A pull (`pull`): its commit is what it is for.
                if entry.header.loadUnaligned(fromByteOffset: 4, as: UInt32.self) == Self.notifyReply,
                   entry.unique.load(ordering: .relaxed) & Self.pullMark != 0 {
                    pullsAnswered.add(1, ordering: .relaxed)
                    answerError(entry, unique: entry.unique.load(ordering: .relaxed), error: 0)
                    continue
                }
                taken = entry
                return n
            }
        }
        errno = isStopping ? ESHUTDOWN : EAGAIN
        return -1
    }

    /// Puts the request in `entry` back together in front of its payload, as libfuse reads one from
    /// /dev/fuse: fuse_in_header, the operation's header, the payload. Its length, or 0 when the
    /// kernel's lengths do not add up (answered EIO then).
    private func reassemble(_ entry: Entry) -> Int {
        let header = entry.header
        let length = Int(header.loadUnaligned(fromByteOffset: 0, as: UInt32.self))
        let unique = header.loadUnaligned(fromByteOffset: 8, as: UInt64.self)
        let record = header + MemoryLayout<curing_req_header>.offset(of: \.ring_ent_in_out)!
        let commitID = record.loadUnaligned(fromByteOffset: 8, as: UInt64.self)
        let payloadLength = Int(record.loadUnaligned(fromByteOffset: 16, as: UInt32.self))
        let inHeader = 40
        let operationHeader = length - inHeader - payloadLength
        entry.phase.store(commitID & ~Self.parkedBit, ordering: .relaxed)
        entry.touched = max(entry.touched, payloadLength)
        entry.unique.store(commitID, ordering: .releasing)
        guard commitID == unique, operationHeader >= 0, operationHeader <= 128, payloadLength <= payloadSize else {
            answerError(entry, unique: commitID, error: EIO)
            return 0
        }
        let start = entry.payload - operationHeader - inHeader
        memcpy(start, header, inHeader)
        if operationHeader > 0 { memcpy(start + inHeader, header + 128, operationHeader) }
        entry.request = start
        return length
    }

    private func process(_ entry: Entry, length: Int) {
        served.add(1, ordering: .relaxed)
        pthread_setspecific(currentEntryKey, Unmanaged.passUnretained(entry).toOpaque())
        defer { pthread_setspecific(currentEntryKey, nil) }
        var buf = fuse_buf()
        buf.size = length
        buf.mem = entry.request
        buf.fd = -1
        TmpfileRequest.readAsCreate(entry.request, length: length)
        fuse_session_process_buf(session, &buf)
    }

    /// Commits an answer of only a header: `error` (0: success, for a pull).
    private func answerError(_ entry: Entry, unique: UInt64, error: Int32) {
        var out = (UInt32(16), -error, unique)
        withUnsafeMutableBytes(of: &out) { raw in
            var iov = iovec(iov_base: raw.baseAddress, iov_len: 16)
            _ = commit(entry, &iov, 1)
        }
    }

    // MARK: replies

    /// The ring entry holding the request with `unique`, if the ring holds it.
    @inline(__always)
    func entry(holding unique: UInt64) -> Entry? {
        guard unique != 0, state.load(ordering: .acquiring) == State.running.rawValue else { return nil }
        if let raw = pthread_getspecific(currentEntryKey) {
            let current = Unmanaged<Entry>.fromOpaque(raw).takeUnretainedValue()
            if current.unique.load(ordering: .acquiring) == unique { return current }
        }
        for queue in queues {
            for i in 0..<queue.count.load(ordering: .acquiring) {
                let entry = queue.entry(i)
                if entry.unique.load(ordering: .acquiring) == unique { return entry }
            }
        }
        return nil
    }

    /// Sends a reply (fuse_out_header, then its arguments) through `entry` with COMMIT_AND_FETCH.
    /// Returns the reply's length, as writev(2) would.
    func commit(_ entry: Entry, _ iov: UnsafePointer<iovec>, _ count: Int32) -> Int {
        var total = 0
        for i in 0..<Int(count) { total += iov[i].iov_len }
        guard count >= 1, iov[0].iov_len == 16, let out = iov[0].iov_base else { errno = EINVAL; return -1 }
        let header = entry.header
        memcpy(header, out, 16)
        var copied = 0
        for i in 1..<Int(count) where iov[i].iov_len > 0 {
            guard copied + iov[i].iov_len <= payloadSize else {
                // Larger than the kernel can take: the caller gets EIO, as from a short write.
                header.storeBytes(of: UInt32(16), toByteOffset: 0, as: UInt32.self)
                header.storeBytes(of: -EIO, toByteOffset: 4, as: Int32.self)
                copied = 0
                break
            }
            memmove(entry.payload + copied, iov[i].iov_base, iov[i].iov_len)
            copied += iov[i].iov_len
        }
        let record = header + MemoryLayout<curing_req_header>.offset(of: \.ring_ent_in_out)!
        record.storeBytes(of: UInt32(copied), toByteOffset: 16, as: UInt32.self)
        let queue = queues[entry.queue]
        if entry.isAdded { giveBack(entry, keeping: copied) }
        if entry.phase.exchange(0, ordering: .acquiringAndReleasing) & Self.parkedBit != 0 {
            queue.parked.subtract(1, ordering: .acquiringAndReleasing)
        }
        let id = entry.unique.exchange(0, ordering: .acquiringAndReleasing)
        if pthread_getspecific(ringThreadKey) != nil {
            if defersReplies, reader.isHeld(by: UInt(pthread_self())) {
                // The holder's reply goes with its next enter: the wait for the next request when it
                // blocks (one system call), else before it polls or serves again (`submitDeferred`).
                deferCommit(queue, entry: entry.index, id: id)
            } else {
                submitCommit(queue, entry: entry.index, id: id)
            }
        } else {
            pending.withLock { $0.append((queue.id, entry.index, id)) }
            hasPending.store(true, ordering: .releasing)
            wake()
        }
        return total
    }

    /// A commit's submission returned `rc`: below 0 (and not while stopping) the ring is refused.
    private func refuseIfCommitFailed(_ rc: Int32) {
        if rc < 0, !isStopping { refused("submitting a commit failed: \(String(cString: strerror(-rc)))") }
    }

    private func deferCommit(_ queue: Queue, entry: Int, id: UInt64) {
        let rc: Int32 = sq.withLock { closed in
            guard !closed, let ring else { return 0 }
            let queued = queueCommit(ring, queue.entry(entry), id: id)
            if queued == 0 { deferredCommits.add(1, ordering: .relaxed) }
            return queued
        }
        refuseIfCommitFailed(rc)
    }

    /// Queues `entry`'s COMMIT_AND_FETCH of `id` without submitting it (under `sq`), submitting what
    /// the submission queue holds first when it is full. 0, or a negative errno.
    private func queueCommit(_ ring: OpaquePointer, _ entry: Entry, id: UInt64) -> Int32 {
        let enqueue = { curing_queue_fuse_cmd(ring, self.devfd, UInt32(CURING_CMD_COMMIT_AND_FETCH), UInt16(entry.queue), id, entry.iov, Self.userData(entry)) }
        var queued = enqueue()
        if queued == -EBUSY {
            let submitted = curing_submit(ring)
            if submitted < 0 { return submitted }
            queued = enqueue()
        }
        return queued
    }

    private func submitCommit(_ queue: Queue, entry: Int, id: UInt64) {
        let rc: Int32 = sq.withLock { closed in
            guard !closed, let ring else { return 0 }
            return curing_submit_fuse_cmd(ring, devfd, UInt32(CURING_CMD_COMMIT_AND_FETCH), UInt16(queue.id), id,
                                                queue.entry(entry).iov, Self.userData(queue.entry(entry)))
        }
        refuseIfCommitFailed(rc)
    }

    /// An added entry keeps no more payload memory than its reply uses: the pages past it that a
    /// request or reply touched go back to the system (they read as zeros when touched again). Before
    /// the commit, which may bring the entry's next request at once.
    private func giveBack(_ entry: Entry, keeping bytes: Int) {
        let kept = (bytes + 4095) & ~4095
        let touched = (entry.touched + 4095) & ~4095
        entry.touched = bytes
        guard touched > kept else { return }
        _ = madvise(entry.payload + kept, touched - kept, MADV_DONTNEED)
    }

    /// What the ring holds: entries registered over all queues, the parked requests among them,
    /// the entries added while requests were parked, and the bytes of those added entries' memory
    /// that are resident (mincore); and the pulls sent and answered so far (`pull`).
    struct Usage: Sendable {
        var entries = 0, parked = 0, added = 0, addedResident = 0
        var pullsSent = 0, pullsAnswered = 0
        /// The holder's replies sent with its wait for the next request, and alone.
        var repliesWithTheWait = 0, repliesAlone = 0
        /// Requests the holder took from /dev/fuse (forgets, interrupts: `takeFromTheDevice`).
        var deviceRequestsTaken = 0
    }

    var usage: Usage {
        var u = Usage()
        u.pullsSent = pullsSent.load(ordering: .relaxed)
        u.pullsAnswered = pullsAnswered.load(ordering: .relaxed)
        u.repliesWithTheWait = repliesWithTheWait.load(ordering: .relaxed)
        u.repliesAlone = repliesAlone.load(ordering: .relaxed)
        u.deviceRequestsTaken = deviceRequestsTaken.load(ordering: .relaxed)
        let page = Int(sysconf(Int32(_SC_PAGESIZE)))
        var vector = [UInt8]()
        for queue in queues {
            let n = queue.count.load(ordering: .acquiring)
            u.entries += n
            u.parked += queue.parked.load(ordering: .relaxed)
            for i in Self.entriesPerQueue..<max(Self.entriesPerQueue, n) {
                let entry = queue.entry(i)
                u.added += 1
                guard let memory = entry.memory else { continue }
                let pages = entry.mapped / page
                if vector.count < pages { vector = [UInt8](repeating: 0, count: pages) }
                guard mincore(memory, entry.mapped, &vector) == 0 else { continue }
                u.addedResident += vector.prefix(pages).reduce(0) { $0 + Int($1 & 1) } * page
            }
        }
        return u
    }

    private func submitPending() {
        let commits: [(Int, Int, UInt64)] = pending.withLock { list in
            hasPending.store(false, ordering: .releasing)
            defer { list.removeAll(keepingCapacity: true) }
            return list
        }
        guard !commits.isEmpty else { return }
        // Several replies answered elsewhere (a presenter's answer resumes every request waiting
        // for it): their commits go in one io_uring_enter, as many as the submission queue holds.
        let rc: Int32 = sq.withLock { closed in
            guard !closed, let ring else { return 0 }
            for (q, index, id) in commits {
                let queued = queueCommit(ring, queues[q].entry(index), id: id)
                if queued < 0 { return queued }
            }
            return curing_submit(ring)
        }
        refuseIfCommitFailed(rc)
    }
}

/// Set on the ring's own threads (they may commit through the ring).
private let ringThreadKey: pthread_key_t = {
    var key = pthread_key_t()
    pthread_key_create(&key, nil)
    return key
}()

/// The entry the calling ring thread is serving (its reply usually comes on the same thread).
private let currentEntryKey: pthread_key_t = {
    var key = pthread_key_t()
    pthread_key_create(&key, nil)
    return key
}()
