#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// One thread that fires deadlines (presenter asks, arbitration waits). Cheaper than a sleeping
/// task per wait, and it never runs on a caller's thread. Actions must be short: they run one after
/// another on the scheduler thread.
final class DeadlineScheduler: @unchecked Sendable {
    /// A scheduled action; cancel it through the scheduler.
    final class Token: @unchecked Sendable {
        let deadline: UInt64
        let action: @Sendable () -> Void
        var cancelled = false // guarded by the scheduler's mutex

        init(deadline: UInt64, action: @escaping @Sendable () -> Void) {
            self.deadline = deadline
            self.action = action
        }
    }

    /// Shared by every coordinator in the process: timers are infrastructure, not coordination state.
    static let shared = DeadlineScheduler()

    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private let cond: UnsafeMutablePointer<pthread_cond_t>
    private var heap: [Token] = []
    private var cancelledInHeap = 0
    private var started = false

    private init() {
        mutex = .allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        pthread_mutex_init(mutex, nil)
        cond = .allocate(capacity: 1)
        cond.initialize(to: pthread_cond_t())
        var attr = pthread_condattr_t()
        pthread_condattr_init(&attr)
        #if canImport(Glibc)
        pthread_condattr_setclock(&attr, CLOCK_MONOTONIC)
        #endif
        pthread_cond_init(cond, &attr)
        pthread_condattr_destroy(&attr)
    }

    /// Runs `action` once `delay` has passed, unless cancelled first.
    func schedule(after delay: Duration, _ action: @escaping @Sendable () -> Void) -> Token {
        let token = Token(deadline: MonotonicClock.now() &+ delay.nanosecondsClamped, action: action)
        pthread_mutex_lock(mutex)
        if !started {
            started = true
            startThread()
        }
        push(token)
        if heap[0] === token { pthread_cond_signal(cond) }
        pthread_mutex_unlock(mutex)
        return token
    }

    /// Prevents `token` from firing (no effect once it has fired).
    func cancel(_ token: Token) {
        pthread_mutex_lock(mutex)
        if !token.cancelled {
            token.cancelled = true
            cancelledInHeap += 1
            // Lazy deletion, with a rebuild when cancelled entries dominate.
            if cancelledInHeap > 1024 && cancelledInHeap > heap.count / 2 {
                heap.removeAll { $0.cancelled }
                cancelledInHeap = 0
                heapify()
            }
        }
        pthread_mutex_unlock(mutex)
    }

    private func startThread() {
        var thread = pthread_t()
        let context = Unmanaged.passRetained(self).toOpaque()
        let rc = pthread_create(&thread, nil, { raw in
            #if canImport(Glibc)
            let scheduler = Unmanaged<DeadlineScheduler>.fromOpaque(raw!).takeRetainedValue()
            #else
            let scheduler = Unmanaged<DeadlineScheduler>.fromOpaque(raw).takeRetainedValue()
            #endif
            scheduler.loop()
            return nil
        }, context)
        precondition(rc == 0, "cannot start the deadline thread: \(rc)")
        pthread_detach(thread)
    }

    private func loop() {
        pthread_mutex_lock(mutex)
        while true {
            guard let top = heap.first else {
                pthread_cond_wait(cond, mutex)
                continue
            }
            if top.cancelled {
                _ = pop()
                cancelledInHeap -= 1
                continue
            }
            let now = MonotonicClock.now()
            if top.deadline <= now {
                _ = pop()
                top.cancelled = true // fired: a later cancel is a no-op
                pthread_mutex_unlock(mutex)
                top.action()
                pthread_mutex_lock(mutex)
                continue
            }
            var ts = timespec(tv_sec: Int(top.deadline / 1_000_000_000), tv_nsec: Int(top.deadline % 1_000_000_000))
            pthread_cond_timedwait(cond, mutex, &ts)
        }
    }

    // Binary min-heap on deadline.
    private func push(_ token: Token) {
        heap.append(token)
        var i = heap.count - 1
        while i > 0 {
            let parent = (i - 1) / 2
            if heap[parent].deadline <= heap[i].deadline { break }
            heap.swapAt(parent, i)
            i = parent
        }
    }

    private func pop() -> Token {
        let top = heap[0]
        let last = heap.removeLast()
        if !heap.isEmpty {
            heap[0] = last
            siftDown(0)
        }
        return top
    }

    private func siftDown(_ start: Int) {
        var i = start
        while true {
            let l = 2 * i + 1, r = l + 1
            var m = i
            if l < heap.count && heap[l].deadline < heap[m].deadline { m = l }
            if r < heap.count && heap[r].deadline < heap[m].deadline { m = r }
            if m == i { return }
            heap.swapAt(i, m)
            i = m
        }
    }

    private func heapify() {
        var i = heap.count / 2
        while i > 0 {
            i -= 1
            siftDown(i)
        }
    }
}
