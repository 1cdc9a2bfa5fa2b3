import Coordination
import Synchronization
import Testing
import CoordinationTestSupport

/// A presenter that logs every ask and reacquire ("relinquishToWriter uid=N", "subitemDeletion dir/a",
/// "reacquire uid=N") and answers each once the test opens its gate (each gate apart).
private final class TurnPresenter: FilePresenter, @unchecked Sendable {
    let journal = Journal()
    let asks = Mutex(true)
    let reacquires = Mutex(true)
    let presentedItemPath: ItemPath?

    init(at path: ItemPath) { self.presentedItemPath = path }

    private func answerWhenOpen() async {
        while !asks.withLock({ $0 }) { try? await Task.sleep(for: .milliseconds(2)) }
    }

    private func reacquirer(_ uid: UInt32) -> Reacquirer {
        return { [self] in
            journal.log("reacquire uid=\(uid)")
            while !reacquires.withLock({ $0 }) { try? await Task.sleep(for: .milliseconds(2)) }
        }
    }

    func relinquishPresentedItem(toReader reader: AccessOrigin) async -> Reacquirer? {
        journal.log("relinquishToReader uid=\(reader.uid)")
        await answerWhenOpen()
        return reacquirer(reader.uid)
    }

    func relinquishPresentedItem(toWriter writer: AccessOrigin) async -> Reacquirer? {
        journal.log("relinquishToWriter uid=\(writer.uid)")
        await answerWhenOpen()
        return reacquirer(writer.uid)
    }

    func accommodatePresentedSubitemDeletion(at path: ItemPath) async throws {
        journal.log("subitemDeletion \(path)")
        await answerWhenOpen()
    }

    func count(_ prefix: String) -> Int { journal.all.filter { $0.hasPrefix(prefix) }.count }
}

private func origin(_ uid: UInt32, _ pid: Int32) -> AccessOrigin {
    AccessOrigin(pid: pid, uid: uid, gid: uid, executable: "fair")
}

private func delete(_ p: String) -> [FileAccessIntent] { [.writingIntent(with: path(p), options: .forDeleting)] }
private func write(_ p: String) -> [FileAccessIntent] { [.writingIntent(with: path(p))] }

/// Root's presenter of a folder in a shared folder everyone may write.
private func rootPresenting(_ p: String) throws -> (Coordinator, TurnPresenter, EventRecorder) {
    let recorder = EventRecorder()
    let coordinator = Coordinator(eventSink: recorder)
    let presenter = TurnPresenter(at: path(p))
    try coordinator.addFilePresenter(presenter, at: path(p), owner: origin(0, 1), credentials: PresenterCredentials(uid: 0, gid: 0))
    return (coordinator, presenter, recorder)
}

/// Root's presenter of `dir`, holding its answers, asked by nobody's deletion of `dir/a`; nobody's
/// deletions of `dir/b` and `dir/c` wait for nobody's turn (`bRequest`: the one of `dir/b`, to cancel).
private func nobodysDeletionsWaitingTheirTurn() async throws
    -> (Coordinator, TurnPresenter, ResultBox, ResultBox, ResultBox, bRequest: RequestID) {
    let (coordinator, presenter, _) = try rootPresenting("dir")
    presenter.asks.withLock { $0 = false }
    let (_, a) = request(coordinator, delete("dir/a"), origin: origin(65534, 10))
    #expect(await eventually { presenter.count("subitemDeletion") == 1 })
    let (bRequest, b) = request(coordinator, delete("dir/b"), origin: origin(65534, 11))
    let (_, c) = request(coordinator, delete("dir/c"), origin: origin(65534, 12))
    return (coordinator, presenter, a, b, c, bRequest)
}

/// Every access granted (then released), within a generous bound.
private func grantedAll(_ boxes: [ResultBox]) async -> Bool {
    await eventually(timeout: .seconds(10)) { boxes.allSatisfy { $0.access != nil } }
}

/// The rule that keeps another user's accesses from queueing asks ahead of root's and the
/// presenter's own user's (docs/protocol.md, "Who may delay or refuse what"; docs/coordination.md,
/// "Other users' turns" and "Fair queues"): each user other than root and the presenter's own has
/// one turn at a presenter (one ask chain or one reacquire queued there or being answered); its
/// further chains and reacquires wait for it, behind what others queued meanwhile. And waiting
/// requests are served by rank: each user's first access in a queue before any user's second.
@Suite struct FairTurnTests {
    @Test func anotherUsersDeletionsAskThePresenterOneAtATimeBehindRootsAndOtherUsers() async throws {
        // nobody's first deletion in root's presented folder is asked; its next two wait for its turn.
        let (coordinator, presenter, a, b, c, _) = try await nobodysDeletionsWaitingTheirTurn()
        // uid 1001 has a turn of its own; root's deletion takes none.
        let (_, d) = request(coordinator, delete("dir/d"), origin: origin(1001, 13))
        let (_, r) = request(coordinator, delete("dir/r"), origin: origin(0, 20))
        try await Task.sleep(for: .milliseconds(50))
        #expect(presenter.journal.all == ["subitemDeletion dir/a"], "the presenter answers one ask at a time")
        presenter.asks.withLock { $0 = true }
        #expect(await grantedAll([a, b, c, d, r]))
        for box in [a, b, c, d, r] { box.access?.release() }
        // Root's ask went ahead of nobody's second and third (before: a, b, c, d, r).
        #expect(presenter.journal.all == ["subitemDeletion dir/a", "subitemDeletion dir/d", "subitemDeletion dir/r",
                                          "subitemDeletion dir/b", "subitemDeletion dir/c"], "\(presenter.journal.all)")
    }

    @Test func anotherNodesAccessesOfAUserTakeThatUsersTurnHere() async throws {
        // A cluster runs another node's access that asks a presenter here as an access of its own,
        // with the asking user's uid and one purpose per node (they never wait for each other).
        let (coordinator, presenter, _) = try rootPresenting("dir")
        presenter.asks.withLock { $0 = false }
        let (_, a) = request(coordinator, delete("dir/a"), purpose: "cluster-proxy:b", origin: origin(65534, 10))
        #expect(await eventually { presenter.count("subitemDeletion") == 1 })
        let (_, b) = request(coordinator, delete("dir/b"), purpose: "cluster-proxy:b", origin: origin(65534, 11))
        let (_, r) = request(coordinator, delete("dir/r"), purpose: "cluster-proxy:b", origin: origin(0, 20))
        try await Task.sleep(for: .milliseconds(20))
        presenter.asks.withLock { $0 = true }
        #expect(await grantedAll([a, b, r]))
        for box in [a, b, r] { box.access?.release() }
        #expect(presenter.journal.all == ["subitemDeletion dir/a", "subitemDeletion dir/r", "subitemDeletion dir/b"], "\(presenter.journal.all)")
    }

    @Test func aReacquireHoldsItsUsersTurnAndItsReadsGoOnUnaskedAndLogged() async throws {
        let (coordinator, presenter, recorder) = try rootPresenting("dir")
        presenter.reacquires.withLock { $0 = false }
        // nobody writes the folder itself (a create in it): relinquish, access, then its reacquire,
        // which the presenter takes its time over.
        let (_, w) = request(coordinator, write("dir"), origin: origin(65534, 10))
        #expect(await grantedAll([w]))
        w.access?.release()
        #expect(await eventually { presenter.count("reacquire uid=65534") == 1 })
        // nobody's deletion waits for its turn; root's is queued behind the reacquire at once.
        let (_, a) = request(coordinator, delete("dir/a"), origin: origin(65534, 11))
        try await Task.sleep(for: .milliseconds(20))
        let (_, r) = request(coordinator, delete("dir/r"), origin: origin(0, 20))
        // nobody's reads of the folder meanwhile are not asked: they go on at once, and the log says so.
        for pid in Int32(30)...32 {
            let (_, read) = request(coordinator, [.readingIntent(with: path("dir"))], origin: origin(65534, pid))
            #expect(await grantedAll([read]), "nobody's read went on without asking")
            read.access?.release()
        }
        presenter.reacquires.withLock { $0 = true }
        #expect(await grantedAll([a, r]))
        for box in [a, r] { box.access?.release() }
        #expect(presenter.journal.all == ["relinquishToWriter uid=65534", "reacquire uid=65534",
                                          "subitemDeletion dir/r", "subitemDeletion dir/a"], "\(presenter.journal.all)")
        let notAsked = recorder.all.compactMap { event -> (Int, UInt32?, Bool)? in
            if case .presenterNotAsked(_, let reads, let p) = event.kind, p == path("dir") {
                return (reads, event.origin?.uid, event.requestID != nil)
            }
            return nil
        }
        // The first read of the turn with its request, then one record counting the other two.
        #expect(notAsked.count == 2, "\(notAsked)")
        #expect(notAsked.first.map { $0.0 == 1 && $0.1 == 65534 && $0.2 } == true)
        #expect(notAsked.last.map { $0.0 == 2 && $0.1 == 65534 && !$0.2 } == true)
    }

    @Test func aChainWhoseAccessHoldsUpAnotherUsersGoesFirstInItsUsersTurn() async throws {
        // nobody's deletions: the first asked, two waiting for nobody's turn.
        let (coordinator, presenter, a, b, c, _) = try await nobodysDeletionsWaitingTheirTurn()
        // nobody's create in the folder holds it (a write of the folder) and waits for its turn too;
        // root's create waits for it.
        let (_, w) = request(coordinator, write("dir"), origin: origin(65534, 13))
        let (_, r) = request(coordinator, write("dir"), origin: origin(0, 20))
        try await Task.sleep(for: .milliseconds(20))
        presenter.asks.withLock { $0 = true }
        #expect(await grantedAll([w]))
        w.access?.release()
        #expect(await grantedAll([a, b, c, r]))
        for box in [a, b, c, r] { box.access?.release() }
        // Before: a, b, c, then nobody's create, root's create behind all of them.
        #expect(Array(presenter.journal.all.prefix(2)) == ["subitemDeletion dir/a", "relinquishToWriter uid=65534"], "\(presenter.journal.all)")
    }

    @Test func everyRelinquishGetsItsReacquireAndEveryAccessIsGranted() async throws {
        let (coordinator, presenter, _) = try rootPresenting("dir")
        presenter.asks.withLock { $0 = false }
        var boxes: [ResultBox] = []
        // Writes of the folder (creates in it) of three users and root, deletions in it: all asked.
        for i in 0..<24 {
            let uid: UInt32 = [65534, 65534, 1001, 0][i % 4]
            let intents = i % 3 == 0 ? delete("dir/f\(i)") : write("dir")
            let (_, box) = request(coordinator, intents, origin: origin(uid, Int32(100 + i)))
            boxes.append(box)
        }
        try await Task.sleep(for: .milliseconds(20))
        presenter.asks.withLock { $0 = true }
        // Each write of the folder waits for the one before (one item): release as granted.
        let done = await eventually(timeout: .seconds(20)) {
            for box in boxes { box.access?.release() }
            return boxes.allSatisfy { $0.access?.currentPhase == .released }
        }
        #expect(done)
        #expect(await eventually { presenter.count("reacquire") == presenter.count("relinquishToWriter") })
        #expect(presenter.count("relinquishToWriter") == 16)
        #expect(presenter.count("subitemDeletion") == 8)
        try await Task.sleep(for: .milliseconds(50)) // the last reacquire's turn passes once it returned
        // Once every turn is over, nobody's next read asks again.
        let (_, read) = request(coordinator, [.readingIntent(with: path("dir"))], origin: origin(65534, 300))
        #expect(await grantedAll([read]))
        read.access?.release()
        #expect(presenter.count("relinquishToReader uid=65534") == 1)
    }

    @Test func aChainWaitingForItsTurnEndsWithItsRequestOrItsPresenter() async throws {
        let (coordinator, presenter, a, b, c, cancelled) = try await nobodysDeletionsWaitingTheirTurn()
        coordinator.cancel(cancelled)
        #expect(await eventually { b.error != nil })
        presenter.asks.withLock { $0 = true }
        #expect(await grantedAll([a, c]))
        for box in [a, c] { box.access?.release() }
        #expect(presenter.journal.all == ["subitemDeletion dir/a", "subitemDeletion dir/c"], "the cancelled one was never asked")

        // Chains waiting for a turn at a presenter that goes away: their accesses go on.
        presenter.asks.withLock { $0 = false }
        let (_, d) = request(coordinator, delete("dir/d"), origin: origin(65534, 13))
        #expect(await eventually { presenter.count("subitemDeletion dir/d") == 1 })
        let (_, e) = request(coordinator, delete("dir/e"), origin: origin(65534, 14))
        let (_, f) = request(coordinator, delete("dir/f"), origin: origin(65534, 15))
        coordinator.removeFilePresenter(presenter)
        #expect(await grantedAll([d, e, f]))
        for box in [d, e, f] { box.access?.release() }
        presenter.asks.withLock { $0 = true }
        #expect(presenter.count("subitemDeletion dir/e") == 0 && presenter.count("subitemDeletion dir/f") == 0)
    }

    @Test func aTurnHeldPastItsAskDeadlinePassesOn() async throws {
        let (coordinator, presenter, _) = try rootPresenting("dir")
        presenter.asks.withLock { $0 = false }
        let policy = CoordinationPolicy(askDeadline: .milliseconds(200), onAskTimeout: .proceed)
        let (_, a) = request(coordinator, delete("dir/a"), origin: origin(65534, 10), policy: policy)
        let (_, b) = request(coordinator, delete("dir/b"), origin: origin(65534, 11), policy: policy)
        // The presenter never answers a: at its deadline a goes on, b is asked (queued behind a's
        // ask, which the presenter is still on) and goes on at its own deadline.
        #expect(await grantedAll([a, b]))
        #expect(presenter.journal.all == ["subitemDeletion dir/a"])
        for box in [a, b] { box.access?.release() }
        presenter.asks.withLock { $0 = true }
    }

    // MARK: Fair queues

    @Test func waitingRequestsAreServedEachUsersFirstBeforeAnyUsersSecond() async throws {
        let coordinator = Coordinator()
        // nobody holds the item; two more of its writes wait, and two of root's.
        let (_, w1) = request(coordinator, write("doc"), origin: origin(65534, 10))
        #expect(w1.access != nil)
        let (_, w2) = request(coordinator, write("doc"), origin: origin(65534, 11))
        let (_, w3) = request(coordinator, write("doc"), origin: origin(65534, 12))
        let (_, r1) = request(coordinator, write("doc"), origin: origin(0, 20))
        let (_, r2) = request(coordinator, write("doc"), origin: origin(0, 21))
        let boxes = ["w2": w2, "w3": w3, "r1": r1, "r2": r2]
        var order: [String] = []
        var holder = w1
        for _ in 0..<4 {
            holder.access?.release()
            let next = await eventually { boxes.values.contains { $0.access?.currentPhase == .granted } }
            #expect(next)
            guard let found = boxes.first(where: { $0.value.access?.currentPhase == .granted }) else { break }
            #expect(boxes.values.filter { $0.access?.currentPhase == .granted }.count == 1, "one write at a time")
            order.append(found.key)
            holder = found.value
        }
        holder.access?.release()
        // Before: arrival order, w2 w3 r1 r2 (root's save behind all of nobody's queued writes).
        #expect(order == ["r1", "w2", "r2", "w3"])
    }

    @Test func oneUsersOwnQueueKeepsItsOrderAndReadersDoNotPassAWaitingWriter() async throws {
        let coordinator = Coordinator()
        // Root reads; nobody's write waits for it; root's later read waits behind that write (its first).
        let (_, read1) = request(coordinator, [.readingIntent(with: path("doc"))], origin: origin(0, 10))
        #expect(read1.access != nil)
        let (_, write) = request(coordinator, write("doc"), origin: origin(65534, 11))
        let (_, read2) = request(coordinator, [.readingIntent(with: path("doc"))], origin: origin(0, 12))
        try await Task.sleep(for: .milliseconds(20))
        #expect(write.access == nil && read2.access == nil)
        read1.access?.release()
        #expect(await eventually { write.access != nil })
        #expect(read2.access == nil)
        write.access?.release()
        #expect(await eventually { read2.access != nil })
        read2.access?.release()
    }
}
