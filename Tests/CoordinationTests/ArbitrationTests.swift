import Coordination
import Testing

/// One row of the arbitration table: with `held` granted, must `requested` wait?
struct ArbitrationCase: Sendable, CustomStringConvertible {
    let held: FileAccessIntent
    let heldPurpose: String?
    let requested: FileAccessIntent
    let requestedPurpose: String?
    let waits: Bool
    var description: String { "\(held) / \(requested) -> \(waits ? "waits" : "proceeds")" }
}

private func r(_ p: String, _ o: FileCoordinator.ReadingOptions = []) -> FileAccessIntent { .readingIntent(with: path(p), options: o) }
private func w(_ p: String, _ o: FileCoordinator.WritingOptions = []) -> FileAccessIntent { .writingIntent(with: path(p), options: o) }
private func row(_ held: FileAccessIntent, _ requested: FileAccessIntent, waits: Bool,
                 purposes: (String?, String?) = (nil, nil)) -> ArbitrationCase {
    ArbitrationCase(held: held, heldPurpose: purposes.0, requested: requested, requestedPurpose: purposes.1, waits: waits)
}

let arbitrationTable: [ArbitrationCase] = [
    // same item
    row(r("a"), r("a"), waits: false),
    row(r("a"), w("a"), waits: true),
    row(w("a"), r("a"), waits: true),
    row(w("a"), w("a"), waits: true),
    row(r("a", .withoutChanges), w("a", .contentIndependentMetadataOnly), waits: true),
    row(w("a"), w("b"), waits: false),
    // plain directory access does not block items inside, nor the other way round
    row(w("d"), w("d/f"), waits: false),
    row(r("d"), w("d/f"), waits: false),
    row(w("d/f"), w("d"), waits: false),
    row(w("d/f"), r("d"), waits: false),
    // forDeleting / forMoving / forReplacing hold off the subtree ...
    row(w("d", .forDeleting), r("d/f"), waits: true),
    row(w("d", .forMoving), w("d/f"), waits: true),
    row(w("d", .forReplacing), r("d/x/y"), waits: true),
    row(w("d", .forDeleting), r("e/f"), waits: false),
    row(w("d", .forDeleting), r("dd"), waits: false),
    // ... and wait for it
    row(r("d/f"), w("d", .forDeleting), waits: true),
    row(w("d/x/y"), w("d", .forMoving), waits: true),
    row(r("d/f"), w("d", .forReplacing), waits: true),
    row(w("d/f", .forDeleting), w("d"), waits: false),
    row(w("d/f", .forDeleting), w("", .forMoving), waits: true),
    // purposes
    row(w("a"), w("a"), waits: false, purposes: ("p", "p")),
    row(w("d", .forDeleting), w("d/f"), waits: false, purposes: ("p", "p")),
    row(w("a"), w("a"), waits: true, purposes: ("p", "q")),
    row(w("a"), w("a"), waits: true, purposes: ("p", nil)),
    // a process's purpose and its coordinators' sub-purposes (the control socket's rule)
    row(w("a"), w("a"), waits: false, purposes: ("pid:7/fc-1", "pid:7")),
    row(w("a"), w("a"), waits: false, purposes: ("pid:7", "pid:7/fc-1")),
    row(w("a"), w("a"), waits: true, purposes: ("pid:7/fc-1", "pid:7/fc-2")),
    row(w("a"), w("a"), waits: true, purposes: ("pid:7/fc-1", "pid:71")),
    row(w("a"), w("a"), waits: true, purposes: ("pid:7/fc-1", "pid:8")),
    row(w("a"), w("a"), waits: true, purposes: ("pid:7", "pid:71")),
]

@Suite struct ArbitrationTests {
    @Test(arguments: arbitrationTable)
    func arbitration(_ c: ArbitrationCase) async throws {
        let coordinator = Coordinator()
        let held = try #require(coordinator.tryCoordinateImmediately(c.held, origin: testOrigin, purpose: c.heldPurpose))
        // The fast path agrees with the slow path.
        let fast = coordinator.tryCoordinateImmediately(c.requested, origin: testOrigin, purpose: c.requestedPurpose)
        #expect((fast == nil) == c.waits)
        fast?.release()

        let (_, box) = request(coordinator, [c.requested], purpose: c.requestedPurpose)
        if c.waits {
            #expect(box.result == nil)
            #expect(coordinator.status().waiting.count == 1)
            held.release()
            #expect(await eventually { box.access != nil })
        } else {
            #expect(box.access != nil, "granted synchronously")
            held.release()
        }
        box.access?.release()
        let status = coordinator.status()
        #expect(status.held.isEmpty && status.waiting.isEmpty)
    }

    @Test func releaseIsIdempotent() throws {
        let coordinator = Coordinator()
        let a = try #require(coordinator.tryCoordinateImmediately(w("x"), origin: testOrigin))
        a.release()
        a.release()
        let b = try #require(coordinator.tryCoordinateImmediately(w("x"), origin: testOrigin))
        a.release() // must not release b's hold
        #expect(coordinator.tryCoordinateImmediately(r("x"), origin: testOrigin) == nil)
        b.release()
        #expect(a.currentPhase == .released)
    }

    @Test func writersAreNotStarvedByReaders() async throws {
        let coordinator = Coordinator()
        let firstReader = try #require(coordinator.tryCoordinateImmediately(r("f"), origin: testOrigin))
        let (_, writer) = request(coordinator, [w("f")])
        #expect(writer.result == nil)
        // A reader arriving after the waiting writer queues behind it.
        #expect(coordinator.tryCoordinateImmediately(r("f"), origin: testOrigin) == nil)
        let (_, lateReader) = request(coordinator, [r("f")])
        #expect(lateReader.result == nil)
        firstReader.release()
        #expect(writer.access != nil)
        #expect(lateReader.result == nil)
        writer.access?.release()
        #expect(lateReader.access != nil)
        lateReader.access?.release()
    }

    @Test func queueOrderIsPerConflictOnly() throws {
        let coordinator = Coordinator()
        let holder = try #require(coordinator.tryCoordinateImmediately(w("a"), origin: testOrigin))
        let (_, waiter) = request(coordinator, [w("a")])
        // Unrelated items are not held up by someone else's queue.
        let other = try #require(coordinator.tryCoordinateImmediately(w("b"), origin: testOrigin))
        other.release()
        holder.release()
        #expect(waiter.access != nil)
        waiter.access?.release()
    }

    @Test func severalIntentsAreGrantedTogetherWithoutDeadlock() async throws {
        let coordinator = Coordinator()
        let counter = ResultCounter()
        await withTaskGroup(of: Void.self) { group in
            for i in 0..<40 {
                group.addTask {
                    let fc = FileCoordinator(coordinator: coordinator)
                    let (first, second) = i % 2 == 0 ? ("x", "y") : ("y", "x")
                    try? await fc.coordinate(writingItemAt: path(first), writingItemAt: path(second)) { _, _ in
                        counter.increment()
                        try? await Task.sleep(for: .microseconds(200))
                    }
                }
            }
        }
        #expect(counter.value == 40)
    }

    @Test func waitingThenGrantedAllAtOnce() throws {
        let coordinator = Coordinator()
        let holdB = try #require(coordinator.tryCoordinateImmediately(w("b"), origin: testOrigin))
        let (_, both) = request(coordinator, [w("a"), w("b")])
        #expect(both.result == nil)
        // `a` is not half-held by the waiting request: a reader arriving later still queues behind it
        // (fairness), but nothing is granted piecemeal.
        let status = coordinator.status()
        #expect(status.waiting.map(\.intents.count) == [2])
        holdB.release()
        let access = try #require(both.access)
        #expect(access.intents.map(\.path) == [path("a"), path("b")])
        access.release()
    }

    @Test func emptyIntentsAreRejected() {
        let coordinator = Coordinator()
        let (_, box) = request(coordinator, [])
        guard case .invalidRequest? = box.error else {
            Issue.record("expected invalidRequest, got \(String(describing: box.result))")
            return
        }
        #expect(coordinator.tryCoordinateImmediately([], origin: testOrigin) == nil)
    }

    @Test func symbolicLinksResolveForReadsThatAskForIt() throws {
        let config = CoordinatorConfiguration(symbolicLinkResolver: { p in p == path("link") ? path("target/file") : nil })
        let coordinator = Coordinator(configuration: config)
        let writer = try #require(coordinator.tryCoordinateImmediately(w("target/file"), origin: testOrigin))
        #expect(coordinator.tryCoordinateImmediately(r("link", .resolvesSymbolicLink), origin: testOrigin) == nil)
        let plain = try #require(coordinator.tryCoordinateImmediately(r("link"), origin: testOrigin))
        plain.release()
        writer.release()
        let resolved = try #require(coordinator.tryCoordinateImmediately(r("link", .resolvesSymbolicLink), origin: testOrigin))
        #expect(resolved.intents[0].path == path("target/file"))
        resolved.release()
    }
}

final class ResultCounter: @unchecked Sendable {
    private let lock = NSLockLike()
    private var count = 0
    func increment() { lock.run { count += 1 } }
    var value: Int { lock.run { count } }
}

import Synchronization
final class NSLockLike: Sendable {
    private let m = Mutex(())
    func run<T>(_ body: () -> T) -> T { m.withLock { _ in body() } }
}

/// The mount's request of a process passes the accesses of the processes that started it (`sharing`
/// their purposes): `flock doc sh -c '... > doc'`, a script holding `doc` open that runs `cp new doc`.
@Suite struct SharedPurposeTests {
    @Test func aRequestPassesTheAccessesOfThePurposesItSharesAndNoOthers() async throws {
        let coordinator = Coordinator()
        let parentRead = try #require(coordinator.tryCoordinateImmediately(.readingIntent(with: path("a")), origin: testOrigin, purpose: "pid:7"))
        let parentClient = try #require(coordinator.tryCoordinateImmediately(.writingIntent(with: path("b")), origin: testOrigin, purpose: "pid:7/fc-1"))
        // The child (pid 9, started by 7) writes both at once: nothing of its parent's is in its way.
        let (_, child) = request(coordinator, [.writingIntent(with: path("a"))], purpose: "pid:9", sharing: ["pid:7", "pid:1000"])
        #expect(child.access != nil, "granted past its parent's read")
        let (_, childB) = request(coordinator, [.writingIntent(with: path("b"))], purpose: "pid:9", sharing: ["pid:7"])
        #expect(childB.access != nil, "granted past its parent's coordinated write")
        // Its parent's later request waits for the child as for anyone.
        let (_, parentWrite) = request(coordinator, [.writingIntent(with: path("a"))], purpose: "pid:7")
        #expect(parentWrite.result == nil)
        // Another process (pid 8, started by 70) waits for all of them.
        let (_, other) = request(coordinator, [.readingIntent(with: path("b"))], purpose: "pid:8", sharing: ["pid:70", "pid:71"])
        #expect(other.result == nil)
        child.access?.release()
        parentRead.release()
        #expect(await eventually { parentWrite.access != nil })
        parentWrite.access?.release()
        childB.access?.release()
        #expect(other.result == nil, "still held by pid 7's client")
        parentClient.release()
        #expect(await eventually { other.access != nil })
        other.access?.release()
    }

    /// A waiting request of the parent's is no obstacle either: it never waits for its own child.
    @Test func aRequestPassesAWaitingRequestOfAPurposeItShares() async throws {
        let coordinator = Coordinator()
        let holder = try #require(coordinator.tryCoordinateImmediately(.readingIntent(with: path("a")), origin: testOrigin, purpose: "pid:5"))
        let (_, parent) = request(coordinator, [.writingIntent(with: path("a"))], purpose: "pid:7")
        #expect(parent.result == nil)
        let (_, child) = request(coordinator, [.readingIntent(with: path("a"))], purpose: "pid:9", sharing: ["pid:7"])
        #expect(child.access != nil, "a read beside the other reader, not queued behind its parent's write")
        child.access?.release()
        holder.release()
        #expect(await eventually { parent.access != nil })
        parent.access?.release()
    }
}
