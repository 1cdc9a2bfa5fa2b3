import Coordination
import Testing

/// Lets two tasks meet before going on.
actor Rendezvous {
    private var arrived = 0
    private var waiting: [CheckedContinuation<Void, Never>] = []
    private let parties: Int
    init(parties: Int) { self.parties = parties }
    func arrive() async {
        arrived += 1
        if arrived == parties {
            waiting.forEach { $0.resume() }
            waiting = []
        } else {
            await withCheckedContinuation { waiting.append($0) }
        }
    }
}

@Suite struct DeadlockTests {
    @Test func nestedWriteOfAnItemTheAccessorHoldsFailsAtOnce() async throws {
        let coordinator = Coordinator()
        let outer = FileCoordinator(coordinator: coordinator)
        let clock = ContinuousClock()
        let start = clock.now
        try await outer.coordinate(writingItemAt: path("f")) { _ in
            // A different coordinator (another purpose): Apple would hang here for ever.
            let inner = FileCoordinator(coordinator: coordinator)
            await #expect {
                try await inner.coordinate(readingItemAt: path("f")) { _ in }
            } throws: { error in
                guard case .deadlock(_, let p, _)? = error as? CoordinationError else { return false }
                return p == path("f")
            }
            // With the same purpose, nesting is fine.
            try await outer.coordinate(readingItemAt: path("f")) { _ in }
        }
        #expect(clock.now - start < .seconds(1))
    }

    @Test func crossedNestedAccessesDoNotHang() async throws {
        let coordinator = Coordinator()
        let meet = Rendezvous(parties: 2)
        let outcomes = ResultCounter()
        let deadlocks = ResultCounter()
        func worker(_ first: String, _ second: String) async {
            let fc = FileCoordinator(coordinator: coordinator)
            do {
                try await fc.coordinate(writingItemAt: path(first)) { _ in
                    await meet.arrive() // both hold their first item now
                    let nested = FileCoordinator(coordinator: coordinator)
                    do {
                        try await nested.coordinate(writingItemAt: path(second)) { _ in }
                        outcomes.increment()
                    } catch let error as CoordinationError {
                        if case .deadlock = error { deadlocks.increment() }
                    }
                }
            } catch {
                Issue.record("outer access failed: \(error)")
            }
        }
        let clock = ContinuousClock()
        let start = clock.now
        async let a: Void = worker("x", "y")
        async let b: Void = worker("y", "x")
        _ = await (a, b)
        #expect(clock.now - start < .seconds(2), "no wait deadline needed")
        #expect(deadlocks.value == 1, "exactly one side is refused")
        #expect(outcomes.value == 1, "and the other one goes ahead")
        #expect(coordinator.status().held.isEmpty)
    }
}
