import Coordination
import Synchronization
import Testing
import CoordinationTestSupport

/// A fake rule: the user may see everything outside `hidden/` and may make accesses only inside `mine/`.
/// Counts its evaluations.
private final class FakePermissions: PresenterPermissions {
    let calls = Mutex(0)
    func maySee(_ path: ItemPath, as credentials: PresenterCredentials) -> Bool {
        calls.withLock { $0 += 1 }
        return !path.string.hasPrefix("hidden")
    }
    func mayMake(_ intent: FileAccessIntent, as credentials: PresenterCredentials) -> Bool {
        calls.withLock { $0 += 1 }
        return intent.path.string.hasPrefix("mine")
    }
}

private let user = PresenterCredentials(uid: 1000, gid: 1000)
private let root = AccessOrigin(pid: 1, uid: 0, gid: 0, executable: "rm")

/// The coordinator's screening of presenters registered with credentials (docs/protocol.md,
/// "Threat model"): not asked about accesses their user could not make, not told about items it
/// could not see; its own and root's presenters are never screened; one evaluation per user.
@Suite struct PresenterScreenTests {
    private func setUp(_ permissions: FakePermissions) throws -> (Coordinator, Journal) {
        let coordinator = Coordinator()
        coordinator.presenterPermissions = permissions
        let journal = Journal()
        let owner = AccessOrigin(pid: 2, uid: user.uid, gid: user.gid, executable: "hostile")
        try coordinator.addFilePresenter(RecordingPresenter("U", at: .root, journal: journal, behavior: .failDeletion),
                                         at: .root, owner: owner, credentials: user)
        try coordinator.addFilePresenter(RecordingPresenter("R", at: .root, journal: journal), at: .root, owner: root,
                                         credentials: PresenterCredentials(uid: 0, gid: 0))
        return (coordinator, journal)
    }

    private func delete(_ coordinator: Coordinator, _ p: String, as origin: AccessOrigin = root) async throws -> Bool {
        let fc = FileCoordinator(coordinator: coordinator, origin: origin)
        do {
            try await fc.coordinate(writingItemAt: path(p), options: .forDeleting) { _ in }
            return true
        } catch {
            return false
        }
    }

    @Test func aScreenedPresenterIsNeitherAskedNorToldAboutHiddenItems() async throws {
        let permissions = FakePermissions()
        let (coordinator, journal) = try setUp(permissions)
        #expect(try await delete(coordinator, "hidden/secret"), "U may not refuse what it could not do")
        await eventually { journal.view("R").count >= 2 }
        try? await Task.sleep(for: .milliseconds(20))
        #expect(journal.view("U").isEmpty, "\(journal.all)")
        #expect(journal.view("R") == ["accommodateSubitemDeletion(hidden/secret)", "subitemDidChange(hidden/secret)"])
    }

    @Test func aVisibleItemItCannotWriteIsToldAfterNotAsked() async throws {
        let (coordinator, journal) = try setUp(FakePermissions())
        #expect(try await delete(coordinator, "theirs/f"))
        await eventually { journal.view("U").count >= 1 }
        try? await Task.sleep(for: .milliseconds(20))
        #expect(journal.view("U") == ["subitemDidChange(theirs/f)"])
    }

    @Test func whatItCouldDoItselfItMayRefuse() async throws {
        let (coordinator, journal) = try setUp(FakePermissions())
        #expect(try await delete(coordinator, "mine/f") == false, "U refuses a deletion it could make itself")
        #expect(journal.view("U") == ["accommodateSubitemDeletion(mine/f)"])
    }

    @Test func theUsersOwnAccessesAreNotScreenedAndOneUserCostsOneEvaluation() async throws {
        let permissions = FakePermissions()
        let (coordinator, journal) = try setUp(permissions)
        let owner = AccessOrigin(pid: 2, uid: user.uid, gid: user.gid, executable: "hostile")
        for i in 0..<200 {
            try coordinator.addFilePresenter(RecordingPresenter("M\(i)", at: path("hidden/x"), journal: journal),
                                             at: path("hidden/x"), owner: owner, credentials: user)
        }
        // The user's own access to hidden/x: it did it, so its presenters hear of it unscreened.
        let me = AccessOrigin(pid: 3, uid: user.uid, gid: user.gid, executable: "editor")
        let fc = FileCoordinator(coordinator: coordinator, origin: me)
        try await fc.coordinate(writingItemAt: path("hidden/x")) { _ in }
        await eventually { journal.view("M199").contains("didChange") }
        #expect(permissions.calls.withLock { $0 } == 0)
        // Root's write: 200 presenters of one user, one question asked of the rule per kind.
        let asRoot = FileCoordinator(coordinator: coordinator, origin: root)
        try await asRoot.coordinate(writingItemAt: path("hidden/x")) { _ in }
        try? await Task.sleep(for: .milliseconds(20))
        #expect(permissions.calls.withLock { $0 } <= 3, "memoised per user and path")
        for name in ["M0", "M199"] {
            #expect(journal.view(name).filter { $0 == "didChange" }.count == 1, "only its user's own write: \(journal.view(name))")
            #expect(journal.view(name).filter { $0 == "relinquishToWriter" }.count == 1, "\(journal.view(name))")
        }
    }

    /// A held read of another user (not root, not the writer's) holds up a write only when that user
    /// could make the write itself (docs/protocol.md, "Who may delay or refuse what").
    @Test func aReaderWhoCouldNotMakeTheWriteDoesNotHoldItUp() throws {
        let coordinator = Coordinator()
        coordinator.presenterPermissions = FakePermissions()
        let hostile = AccessOrigin(pid: 2, uid: user.uid, gid: user.gid, executable: "sleep")
        let writer = AccessOrigin(pid: 3, uid: 1001, gid: 1001, executable: "sed")
        for p in ["theirs/f", "mine/f"] {
            let read = try #require(coordinator.tryCoordinateImmediately(.readingIntent(with: path(p)), origin: hostile))
            let write = coordinator.tryCoordinateImmediately(.writingIntent(with: path(p)), origin: root)
            #expect((write != nil) == (p == "theirs/f"), "root's write of \(p)")
            write?.release()
            let other = coordinator.tryCoordinateImmediately(.writingIntent(with: path(p), options: .forDeleting), origin: writer)
            #expect((other != nil) == (p == "theirs/f"), "another user's deletion of \(p)")
            other?.release()
            let own = coordinator.tryCoordinateImmediately(.writingIntent(with: path(p)), origin: AccessOrigin(pid: 4, uid: user.uid, gid: user.gid, executable: "vim"))
            #expect(own == nil, "the reader's own user's write of \(p) waits as before")
            read.release()
        }
        // Root's reads, and any user's writes of what it could write, still hold up everyone's writes
        // (a write hold of what its user could not write: `HoldUpRuleTests`).
        let rootRead = try #require(coordinator.tryCoordinateImmediately(.readingIntent(with: path("theirs/f")), origin: root))
        #expect(coordinator.tryCoordinateImmediately(.writingIntent(with: path("theirs/f")), origin: writer) == nil)
        rootRead.release()
        let hostileWrite = try #require(coordinator.tryCoordinateImmediately(.writingIntent(with: path("mine/f")), origin: hostile))
        #expect(coordinator.tryCoordinateImmediately(.writingIntent(with: path("mine/f")), origin: root) == nil)
        hostileWrite.release()
        // Without a permissions screen (the library in an app) every hold excludes.
        let plain = Coordinator()
        let read = try #require(plain.tryCoordinateImmediately(.readingIntent(with: path("theirs/f")), origin: hostile))
        #expect(plain.tryCoordinateImmediately(.writingIntent(with: path("theirs/f")), origin: root) == nil)
        read.release()
    }
}

/// ``HoldUpRule`` for holds of another user (neither root nor the requester's): a writing hold
/// holds up only a request one of whose items its user could write or replace (the fake rule:
/// items under `mine/`), a reading hold only a request one of whose writes its user could make.
/// Before, a writing hold held up everything it met: a user's write hold of a sticky folder it
/// could only add its own names to held up every other user's creates there.
@Suite struct HoldUpRuleTests {
    private let holderOrigin = AccessOrigin(pid: 2, uid: user.uid, gid: user.gid, executable: "coordfs")

    private func heldUp(holding held: FileAccessIntent, request requested: FileAccessIntent, by origin: AccessOrigin) async throws -> Bool {
        let coordinator = Coordinator()
        coordinator.presenterPermissions = FakePermissions()
        let holder = try #require(coordinator.tryCoordinateImmediately(held, origin: holderOrigin))
        let (_, box) = request(coordinator, [requested], origin: origin)
        try await Task.sleep(for: .milliseconds(100))
        let waited = box.result == nil
        holder.release()
        #expect(await eventually { box.result != nil })
        box.access?.release()
        return waited
    }

    @Test func anotherUsersWriteHoldHoldsUpOnlyWhatItsUserCouldWriteOrReplace() async throws {
        #expect(try await !heldUp(holding: .writingIntent(with: path("drop")), request: .writingIntent(with: path("drop")), by: root),
                "its user could not write drop")
        #expect(try await !heldUp(holding: .writingIntent(with: path("drop/f")), request: .readingIntent(with: path("drop/f")), by: root))
        #expect(try await heldUp(holding: .writingIntent(with: path("mine")), request: .writingIntent(with: path("mine")), by: root))
        #expect(try await heldUp(holding: .writingIntent(with: path("mine/f")), request: .readingIntent(with: path("mine/f")), by: root))
        // Its own user's requests, and any request under root's hold, wait as ever.
        #expect(try await heldUp(holding: .writingIntent(with: path("drop")), request: .writingIntent(with: path("drop")), by: holderOrigin))
    }

    @Test func anotherUsersReadHoldHoldsUpOnlyWritesItsUserCouldMake() async throws {
        #expect(try await !heldUp(holding: .readingIntent(with: path("drop/f")), request: .writingIntent(with: path("drop/f")), by: root))
        #expect(try await heldUp(holding: .readingIntent(with: path("mine/f")), request: .writingIntent(with: path("mine/f")), by: root))
    }
}
