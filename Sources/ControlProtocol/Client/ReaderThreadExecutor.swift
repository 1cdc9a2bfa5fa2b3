import Dispatch
import Glibc

/// The task executor of a `ControlSession`'s presenters: a job made ready on a connection's reader
/// thread (an ask or a notification handed to a presenter's inbox, a reply resuming a presenter's
/// request) runs on that thread as soon as the frame that made it ready is handled, before the
/// thread reads again; a job made ready anywhere else runs on Dispatch's global queue, as any task.
///
/// Without it, every ask to a session's presenter woke a thread of the global pool to run the
/// presenter's task and answer: a thread wake-up per ask, about 20 µs of the round trip on a busy
/// machine (docs/benchmarks.md, "Control protocol"). With it, a presenter that answers without
/// suspending answers on the reader thread, as a bare client's delegate does; one that suspends
/// (an actor hop, I/O, a request to the daemon) goes on where it is resumed, as before.
///
/// What runs on the reader thread is the presenter's code up to its first suspension: code that
/// blocks there delays this connection's later frames (as it would block a pool thread before), so
/// presenters keep to `async` work, as Swift concurrency asks anyway.
package final class ReaderThreadExecutor: TaskExecutor, @unchecked Sendable {
    package static let shared = ReaderThreadExecutor()

    /// Jobs made ready on the current reader thread, run by `runReadyJobs`.
    private final class ThreadQueue {
        var jobs: [UnownedJob] = []
    }

    private let key: pthread_key_t

    private init() {
        var k = pthread_key_t()
        pthread_key_create(&k, nil)
        key = k
    }

    package func enqueue(_ job: consuming ExecutorJob) {
        let unowned = UnownedJob(job)
        if let raw = pthread_getspecific(key) {
            Unmanaged<ThreadQueue>.fromOpaque(raw).takeUnretainedValue().jobs.append(unowned)
        } else {
            DispatchQueue.global().async { unowned.runSynchronously(on: self.asUnownedTaskExecutor()) }
        }
    }

    /// Makes the calling thread a reader thread until `endReaderThread`.
    func beginReaderThread() {
        pthread_setspecific(key, Unmanaged.passRetained(ThreadQueue()).toOpaque())
    }

    /// Runs the jobs made ready on this reader thread so far (and those they make ready).
    @inline(__always)
    func runReadyJobs() {
        guard let raw = pthread_getspecific(key) else { return }
        let queue = Unmanaged<ThreadQueue>.fromOpaque(raw).takeUnretainedValue()
        while !queue.jobs.isEmpty {
            let jobs = queue.jobs
            queue.jobs.removeAll(keepingCapacity: true)
            for job in jobs { job.runSynchronously(on: asUnownedTaskExecutor()) }
        }
    }

    /// Runs what is left and stops treating the calling thread as a reader thread.
    func endReaderThread() {
        runReadyJobs()
        guard let raw = pthread_getspecific(key) else { return }
        pthread_setspecific(key, nil)
        Unmanaged<ThreadQueue>.fromOpaque(raw).release()
    }
}
