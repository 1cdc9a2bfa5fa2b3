import Glibc

/// A pthread mutex with condition variables, for the writer's hand-off between appending threads,
/// the background writer thread and `flush()` waiters. (Synchronization's `Mutex` has no
/// condition variables.) Heap-allocated so the pthread objects never move.
final class ConditionLock: @unchecked Sendable {
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let conditions: UnsafeMutablePointer<pthread_cond_t>
    private let conditionCount: Int

    init(conditions count: Int) {
        pthread_mutex_init(mutex, nil)
        conditionCount = count
        conditions = .allocate(capacity: count)
        var attr = pthread_condattr_t()
        pthread_condattr_init(&attr)
        // Timed waits measure a monotonic clock so a wall-clock jump cannot stall the writer.
        pthread_condattr_setclock(&attr, CLOCK_MONOTONIC)
        for i in 0..<count { pthread_cond_init(conditions + i, &attr) }
        pthread_condattr_destroy(&attr)
    }

    deinit {
        for i in 0..<conditionCount { pthread_cond_destroy(conditions + i) }
        pthread_mutex_destroy(mutex)
        conditions.deallocate()
        mutex.deallocate()
    }

    func lock() { pthread_mutex_lock(mutex) }
    func unlock() { pthread_mutex_unlock(mutex) }

    func withLock<T>(_ body: () throws -> T) rethrows -> T {
        lock()
        defer { unlock() }
        return try body()
    }

    func signal(_ c: Int) { pthread_cond_signal(conditions + c) }
    func broadcast(_ c: Int) { pthread_cond_broadcast(conditions + c) }

    /// Waits on condition `c` (the lock must be held).
    func wait(_ c: Int) { pthread_cond_wait(conditions + c, mutex) }

    /// Waits on condition `c` until `deadline` (CLOCK_MONOTONIC nanoseconds); false on timeout.
    func wait(_ c: Int, untilMonotonicNanos deadline: UInt64) -> Bool {
        var ts = timespec(tv_sec: Int(deadline / 1_000_000_000), tv_nsec: Int(deadline % 1_000_000_000))
        return pthread_cond_timedwait(conditions + c, mutex, &ts) != ETIMEDOUT
    }

    static func monotonicNanos() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
    }
}
