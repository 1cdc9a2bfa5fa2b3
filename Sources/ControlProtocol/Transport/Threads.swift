import Glibc
import Linux

/// Starts a POSIX thread named `name` (/proc/PID/task/TID/comm, at most 15 bytes) running
/// `body`; the returned handle can be joined.
func startThread(name: String, _ body: @escaping @Sendable () -> Void) throws(ControlTransportError) -> pthread_t {
    final class Box {
        let name: String
        let body: @Sendable () -> Void
        init(_ name: String, _ body: @escaping @Sendable () -> Void) { self.name = name; self.body = body }
    }
    let context = Unmanaged.passRetained(Box(name, body)).toOpaque()
    var thread = pthread_t()
    let result = pthread_create(&thread, nil, { raw in
        let box = Unmanaged<Box>.fromOpaque(raw!).takeRetainedValue()
        nameCurrentThread(box.name)
        box.body()
        return nil
    }, context)
    if result != 0 {
        Unmanaged<Box>.fromOpaque(context).release()
        throw .system(operation: "pthread_create", errno: result)
    }
    return thread
}

/// A value guarded by a pthread mutex. Used where the guarded state holds non-Sendable
/// Dispatch objects, which `Synchronization.Mutex`'s `sending` rules reject.
final class Locked<Value>: @unchecked Sendable {
    private var value: Value
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)

    init(_ value: Value) {
        self.value = value
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    func withLock<R>(_ body: (inout Value) throws -> R) rethrows -> R {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value)
    }
}
