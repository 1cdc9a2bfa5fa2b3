import Coordination
import Synchronization
import Testing
import CoordinationTestSupport

/// A presenter whose relinquish to a reader waits until the test opens its gate; logs every ask.
private final class GatedPresenter: FilePresenter, @unchecked Sendable {
    let name: String
    let journal: Journal
    let open = Mutex(false)
    let presentedItemPath: ItemPath?

    init(_ name: String, at path: ItemPath, journal: Journal) {
        self.name = name
        self.journal = journal
        self.presentedItemPath = path
    }

    private func gate() async {
        while !open.withLock({ $0 }) { try? await Task.sleep(for: .milliseconds(2)) }
    }

    func relinquishPresentedItem(toReader reader: AccessOrigin) async -> Reacquirer? {
        journal.log("\(name):relinquishToReader uid=\(reader.uid)")
        await gate()
        let (journal, name) = (journal, name)
        return { journal.log("\(name):reacquire uid=\(reader.uid)") }
    }

    func relinquishPresentedItem(toWriter writer: AccessOrigin) async -> Reacquirer? {
        journal.log("\(name):relinquishToWriter uid=\(writer.uid)")
        await gate()
        let (journal, name) = (journal, name)
        return { journal.log("\(name):reacquire uid=\(writer.uid)") }
    }

    func savePresentedItemChanges() async throws { journal.log("\(name):save") }
}

private final class Counter: Sendable {
    private let n = Mutex(0)
    func add() { n.withLock { $0 += 1 } }
    var value: Int { n.withLock { $0 } }
}

private func origin(_ uid: UInt32, _ pid: Int32) -> AccessOrigin {
    AccessOrigin(pid: pid, uid: uid, gid: uid, executable: "reader")
}

/// The rule that keeps another user's reads from queueing asks ahead of a presenter's own user's
/// (docs/protocol.md, "Who may delay or refuse what"; docs/coordination.md): while an ask chain of
/// a user other than root and the presenter's own is open to a presenter, that user's further
/// reads go on without asking it; root's, the presenter's own user's and other users' reads are
/// asked as before, writes always; every relinquish the presenter answered gets its reacquire.
@Suite struct OtherUserTurnTests {
    private func read(_ coordinator: Coordinator, _ p: String, as who: AccessOrigin, done: Counter) -> Task<Void, any Error> {
        Task {
            try await FileCoordinator(coordinator: coordinator, origin: who).coordinate(readingItemAt: path(p)) { _ in }
            done.add()
        }
    }

    private func count(_ journal: Journal, _ entry: String) -> Int { journal.all.filter { $0 == entry }.count }

    @Test func anotherUsersReadsAskOnePresenterOneChainAtATime() async throws {
        let coordinator = Coordinator()
        let journal = Journal()
        let presenter = GatedPresenter("P", at: path("doc"), journal: journal)
        try coordinator.addFilePresenter(presenter, at: path("doc"), owner: origin(0, 1),
                                         credentials: PresenterCredentials(uid: 0, gid: 0))
        let done = Counter()
        // nobody's first read asks, and waits for the presenter.
        let first = read(coordinator, "doc", as: origin(65534, 10), done: done)
        #expect(await eventually { count(journal, "P:relinquishToReader uid=65534") == 1 })
        // Its next reads, while that ask is out, go on without asking the presenter.
        var others: [Task<Void, any Error>] = []
        for pid in Int32(11)...14 { others.append(read(coordinator, "doc", as: origin(65534, pid), done: done)) }
        for task in others { try await task.value }
        #expect(done.value == 4, "nobody's further reads went ahead while its first waited")
        // Root's read, another user's and a write are asked (queued behind the presenter's answer).
        let rootRead = read(coordinator, "doc", as: origin(0, 20), done: done)
        let otherUser = read(coordinator, "doc", as: origin(1001, 21), done: done)
        try await Task.sleep(for: .milliseconds(50))
        #expect(done.value == 4, "root's and uid 1001's reads wait for the presenter")
        presenter.open.withLock { $0 = true }
        try await first.value
        try await rootRead.value
        try await otherUser.value
        // Once nobody's turn is over (its chain answered, then its reacquire run), its next read
        // asks again; until then its reads go on unasked.
        var asked = false
        for pid in Int32(15)..<515 where !asked {
            try await read(coordinator, "doc", as: origin(65534, pid), done: done).value
            asked = count(journal, "P:relinquishToReader uid=65534") == 2
            if !asked { try await Task.sleep(for: .milliseconds(5)) }
        }
        #expect(asked, "\(journal.all)")
        #expect(await eventually { count(journal, "P:reacquire uid=65534") == 2 })
        #expect(count(journal, "P:relinquishToReader uid=65534") == 2, "\(journal.all)")
        #expect(count(journal, "P:relinquishToReader uid=0") == 1)
        #expect(count(journal, "P:relinquishToReader uid=1001") == 1)
        #expect(await eventually { count(journal, "P:reacquire uid=0") == 1 && count(journal, "P:reacquire uid=1001") == 1 },
                "every relinquish has its reacquire: \(journal.all)")
    }

    @Test func thePresentersOwnUsersAndRootsReadsAndOtherUsersWritesAreAllAsked() async throws {
        let coordinator = Coordinator()
        let journal = Journal()
        let presenter = GatedPresenter("P", at: path("doc"), journal: journal)
        try coordinator.addFilePresenter(presenter, at: path("doc"), owner: origin(1000, 1),
                                         credentials: PresenterCredentials(uid: 1000, gid: 1000))
        let done = Counter()
        var tasks: [Task<Void, any Error>] = []
        for pid in Int32(10)...12 { tasks.append(read(coordinator, "doc", as: origin(1000, pid), done: done)) }
        for pid in Int32(20)...21 { tasks.append(read(coordinator, "doc", as: origin(0, pid), done: done)) }
        // nobody's first read is asked; a write of nobody's is asked too, after its read.
        tasks.append(read(coordinator, "doc", as: origin(65534, 30), done: done))
        #expect(await eventually { count(journal, "P:relinquishToReader uid=1000") == 1 })
        try await Task.sleep(for: .milliseconds(50))
        #expect(done.value == 0, "every read waits for the presenter's answers")
        presenter.open.withLock { $0 = true }
        for task in tasks { try await task.value }
        try await FileCoordinator(coordinator: coordinator, origin: origin(65534, 31)).coordinate(writingItemAt: path("doc")) { _ in }
        #expect(count(journal, "P:relinquishToReader uid=1000") == 3, "\(journal.all)")
        #expect(count(journal, "P:relinquishToReader uid=0") == 2)
        #expect(count(journal, "P:relinquishToReader uid=65534") == 1)
        #expect(count(journal, "P:relinquishToWriter uid=65534") == 1)
        #expect(await eventually { journal.all.filter { $0.hasPrefix("P:reacquire") }.count == 7 }, "\(journal.all)")
    }

    @Test func aPresenterWithoutCredentialsIsAskedByEveryRead() async throws {
        let coordinator = Coordinator()
        let journal = Journal()
        let presenter = GatedPresenter("P", at: path("doc"), journal: journal)
        try coordinator.addFilePresenter(presenter, at: path("doc"), owner: origin(0, 1))
        let done = Counter()
        var tasks: [Task<Void, any Error>] = []
        for pid in Int32(10)...12 { tasks.append(read(coordinator, "doc", as: origin(65534, pid), done: done)) }
        #expect(await eventually { count(journal, "P:relinquishToReader uid=65534") == 1 })
        try await Task.sleep(for: .milliseconds(50))
        #expect(done.value == 0)
        presenter.open.withLock { $0 = true }
        for task in tasks { try await task.value }
        #expect(count(journal, "P:relinquishToReader uid=65534") == 3)
    }
}
