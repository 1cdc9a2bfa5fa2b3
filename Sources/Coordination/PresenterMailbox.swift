/// Delivers messages to one presenter one at a time, in the order they were queued (the role of
/// Apple's `presentedItemOperationQueue`). No task lives while the mailbox is empty.
final class PresenterMailbox: @unchecked Sendable {
    typealias Job = @Sendable () async -> Void

    private let lock = Lock()
    private var jobs: [Job] = []
    private var head = 0
    private var running = false
    private var closed = false

    /// Queues `job`; starts a draining task when none is running. Jobs queued after `close()` are dropped.
    func enqueue(_ job: @escaping Job) {
        lock.lock()
        if closed {
            lock.unlock()
            return
        }
        jobs.append(job)
        let start = !running
        running = true
        lock.unlock()
        if start {
            Task.detached { await self.drain() }
        }
    }

    /// Drops queued jobs and refuses new ones (the presenter was removed). A job already running finishes.
    func close() {
        lock.lock()
        closed = true
        jobs.removeAll()
        head = 0
        lock.unlock()
    }

    private func drain() async {
        while let job = next() {
            await job()
        }
    }

    private func next() -> Job? {
        lock.lock()
        defer { lock.unlock() }
        guard head < jobs.count else {
            jobs.removeAll(keepingCapacity: true)
            head = 0
            running = false
            return nil
        }
        let job = jobs[head]
        head += 1
        return job
    }
}
