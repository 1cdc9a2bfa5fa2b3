import Coordination
import Dispatch

/// Sits in front of the coordinator's event sink and tells the store about every presenter that
/// registers or goes away, in-process or through the control socket, so each one's base is kept
/// without the registering code having to know about the store.
///
/// The coordinator calls sinks under its lock: this only queues the store work (a SQLite
/// transaction) on a serial queue. The mount's hooks drain that queue before they snapshot, so a
/// presenter registered before a write always has its base kept by that write.
final class StorePresenterTap: CoordinationEventSink, @unchecked Sendable {
    let next: (any CoordinationEventSink)?
    private weak var service: StoreService?
    let queue = DispatchQueue(label: "coordfs.store.presenters")

    init(service: StoreService, next: (any CoordinationEventSink)?) {
        self.service = service
        self.next = next
    }

    func record(_ event: CoordinationEvent) {
        next?.record(event)
        switch event.kind {
        case .presenterRegistered(let id, let path, _):
            queue.async { [weak service] in service?.registerIfNew(id, path: path) }
        case .presenterUnregistered(let id, _):
            queue.async { [weak service] in service?.unregister(id) }
        default:
            break
        }
    }

    /// Waits until every registration queued so far reached the store.
    func drain() { queue.sync {} }
}
