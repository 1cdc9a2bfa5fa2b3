import Coordination
import Synchronization

/// Collects coordinator events.
final class EventRecorder: CoordinationEventSink {
    private let events = Mutex<[CoordinationEvent]>([])
    func record(_ event: CoordinationEvent) { events.withLock { $0.append(event) } }
    var all: [CoordinationEvent] { events.withLock { $0 } }
}

/// Result box for callback-based requests.
final class ResultBox: Sendable {
    private let value = Mutex<Result<CoordinatedAccess, CoordinationError>?>(nil)
    func set(_ result: Result<CoordinatedAccess, CoordinationError>) { value.withLock { $0 = result } }
    var result: Result<CoordinatedAccess, CoordinationError>? { value.withLock { $0 } }
    var access: CoordinatedAccess? {
        if case .success(let a)? = result { return a }
        return nil
    }
    var error: CoordinationError? {
        if case .failure(let e)? = result { return e }
        return nil
    }
}

func path(_ s: String) -> ItemPath { try! ItemPath(s) }

let testOrigin = AccessOrigin(pid: 4242, uid: 1000, gid: 1000, executable: "test")

/// Polls `condition` until it holds or `timeout` passes; returns whether it held.
@discardableResult
func eventually(timeout: Duration = .seconds(3), _ condition: () -> Bool) async -> Bool {
    let clock = ContinuousClock()
    let end = clock.now + timeout
    while clock.now < end {
        if condition() { return true }
        try? await Task.sleep(for: .milliseconds(2))
    }
    return condition()
}

/// Requests `intents` through the callback API and returns the box the completion fills.
@discardableResult
func request(_ coordinator: Coordinator, _ intents: [FileAccessIntent], purpose: String? = nil, sharing: [String] = [],
             origin: AccessOrigin = testOrigin, policy: CoordinationPolicy? = nil) -> (RequestID, ResultBox) {
    let box = ResultBox()
    let id = coordinator.coordinate(intents, origin: origin, purpose: purpose, sharing: sharing, policy: policy) { box.set($0) }
    return (id, box)
}
