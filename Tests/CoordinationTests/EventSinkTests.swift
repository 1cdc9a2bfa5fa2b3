import Coordination
import Synchronization
import Testing

/// Sinks that hand every event on to the next one hold it by reference (`forwardingReference`):
/// a class sink is itself, a value sink is boxed, and either gets every event, in order.
@Suite struct EventSinkTests {
    struct ValueSink: CoordinationEventSink {
        let into: EventRecorder
        func record(_ event: CoordinationEvent) { into.record(event) }
    }

    @Test func aClassSinkIsForwardedToItself() throws {
        let sink = EventRecorder()
        let forward = try #require(forwardingReference(to: sink))
        #expect(forward === sink)
        #expect(forwardingReference(to: nil) == nil)
    }

    @Test func aValueSinkIsBoxedAndGetsEveryEventInOrder() throws {
        let collected = EventRecorder()
        let forward = try #require(forwardingReference(to: ValueSink(into: collected)))
        #expect(forward !== collected)
        let coordinator = Coordinator(eventSink: forward)
        let path = try ItemPath("/a/b")
        let origin = AccessOrigin(pid: 7, uid: 0, gid: 0, executable: "test")
        let access = try #require(coordinator.tryCoordinateImmediately(.writingIntent(with: path), origin: origin))
        access.release()
        let kinds = collected.all.map { event -> String in
            switch event.kind {
            case .requested: "requested"
            case .granted: "granted"
            case .released: "released"
            default: "other"
            }
        }
        #expect(kinds == ["requested", "granted", "released"])
        #expect(collected.all.allSatisfy { $0.origin?.pid == 7 })
    }
}
