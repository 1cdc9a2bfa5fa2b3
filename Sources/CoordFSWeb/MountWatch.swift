import Linux
import Synchronization

/// Whether the mount `coordfs web` shows is still there. The command watches the mount (its
/// daemon's control socket and the mount table) and says here when it is gone; the server then
/// tells every live page why (`{"gone":"…"}` on the event stream), answers the API with 503, and
/// stops, so the command exits with a message and a non-zero status (docs/web.md, "When the
/// mount goes away"). Nothing polls it: the server waits in ``gone()``.
public final class MountWatch: Sendable {
    private struct State {
        var reason: String?
        var nextWaiter: UInt64 = 0
        var waiters: [UInt64: CheckedContinuation<String?, Never>] = [:]
        /// Waiters cancelled before they were added.
        var cancelled: Set<UInt64> = []
    }
    private let state = Mutex(State())
    /// Readable, and stays so, once the mount is gone: the event streams' reader threads sleep on
    /// it beside the log (`EventStream`), so none has to look every while.
    private let goneWakeUp = WakeUp()
    var goneDescriptor: Int32 { goneWakeUp.descriptor }

    public init() {}

    /// Why the mount is gone; nil while it is there.
    public var goneReason: String? { state.withLock { $0.reason } }

    /// Records that the mount is gone (the first reason stays) and wakes those waiting in ``gone()``.
    public func markGone(_ reason: String) {
        let (waiters, first) = state.withLock { s -> ([CheckedContinuation<String?, Never>], String) in
            if s.reason == nil { s.reason = reason }
            defer { s.waiters = [:] }
            return (Array(s.waiters.values), s.reason!)
        }
        goneWakeUp.signal()
        for waiter in waiters { waiter.resume(returning: first) }
    }

    /// Returns why once the mount is gone; nil when the task is cancelled first.
    public func gone() async -> String? {
        let id = state.withLock { s -> UInt64 in
            s.nextWaiter += 1
            return s.nextWaiter
        }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let now = state.withLock { s -> String?? in
                    if let reason = s.reason { return .some(reason) }
                    if s.cancelled.remove(id) != nil { return .some(nil) }
                    s.waiters[id] = continuation
                    return .none
                }
                if case .some(let reason) = now { continuation.resume(returning: reason) }
            }
        } onCancel: {
            let waiter = state.withLock { s -> CheckedContinuation<String?, Never>? in
                guard let waiter = s.waiters.removeValue(forKey: id) else {
                    if s.reason == nil { s.cancelled.insert(id) }
                    return nil
                }
                return waiter
            }
            waiter?.resume(returning: nil)
        }
    }
}
