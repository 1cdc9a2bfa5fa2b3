import Coordination
import Synchronization
import Testing
import CoordinationTestSupport

/// One row: presenters at `presenters` (name → path), one access, and what each presenter must
/// see, in order, around the accessor ("ACCESS").
struct PresenterCase: Sendable, CustomStringConvertible {
    let name: String
    let presenters: [(String, String)]
    let intents: [FileAccessIntent]
    /// Presenter name the access is made on behalf of, if any.
    let onBehalfOf: String?
    let expected: [String: [String]]
    var description: String { name }
}

private func r(_ p: String, _ o: FileCoordinator.ReadingOptions = []) -> FileAccessIntent { .readingIntent(with: path(p), options: o) }
private func w(_ p: String, _ o: FileCoordinator.WritingOptions = []) -> FileAccessIntent { .writingIntent(with: path(p), options: o) }

let presenterTable: [PresenterCase] = [
    PresenterCase(name: "read asks to relinquish and save, then reacquire", presenters: [("P", "d/f"), ("D", "d")],
                  intents: [r("d/f")], onBehalfOf: nil,
                  expected: ["P": ["relinquishToReader", "save", "ACCESS", "reacquire"], "D": ["ACCESS"]]),
    PresenterCase(name: "read without changes does not ask to save", presenters: [("P", "d/f")],
                  intents: [r("d/f", .withoutChanges)], onBehalfOf: nil,
                  expected: ["P": ["relinquishToReader", "ACCESS", "reacquire"]]),
    PresenterCase(name: "metadata-only read asks nobody", presenters: [("P", "d/f")],
                  intents: [r("d/f", .immediatelyAvailableMetadataOnly)], onBehalfOf: nil,
                  expected: ["P": ["ACCESS"]]),
    PresenterCase(name: "reading a directory asks presenters inside it", presenters: [("P", "d/f"), ("Q", "d/s/g"), ("X", "e")],
                  intents: [r("d")], onBehalfOf: nil,
                  expected: ["P": ["relinquishToReader", "save", "ACCESS", "reacquire"],
                             "Q": ["relinquishToReader", "save", "ACCESS", "reacquire"], "X": ["ACCESS"]]),
    PresenterCase(name: "plain write: relinquish, did change; parent hears subitem change",
                  presenters: [("P", "d/f"), ("D", "d"), ("R", "")], intents: [w("d/f")], onBehalfOf: nil,
                  expected: ["P": ["relinquishToWriter", "ACCESS", "didChange", "reacquire"],
                             "D": ["ACCESS", "subitemDidChange(d/f)"], "R": ["ACCESS", "subitemDidChange(d/f)"]]),
    PresenterCase(name: "forMerging write asks to save first", presenters: [("P", "f")],
                  intents: [w("f", .forMerging)], onBehalfOf: nil,
                  expected: ["P": ["relinquishToWriter", "save", "ACCESS", "didChange", "reacquire"]]),
    PresenterCase(name: "content-independent metadata write asks nobody", presenters: [("P", "f")],
                  intents: [w("f", .contentIndependentMetadataOnly)], onBehalfOf: nil,
                  expected: ["P": ["ACCESS", "didChange"]]),
    PresenterCase(name: "deleting a file: accommodate; parent accommodates subitem deletion",
                  presenters: [("P", "d/f"), ("D", "d")], intents: [w("d/f", .forDeleting)], onBehalfOf: nil,
                  expected: ["P": ["relinquishToWriter", "accommodateDeletion", "ACCESS", "reacquire"],
                             "D": ["accommodateSubitemDeletion(d/f)", "ACCESS", "subitemDidChange(d/f)"]]),
    PresenterCase(name: "deleting a directory reaches presenters inside and above",
                  presenters: [("D", "d"), ("P", "d/f"), ("Q", "d/s/g"), ("R", ""), ("X", "dx")],
                  intents: [w("d", .forDeleting)], onBehalfOf: nil,
                  expected: ["D": ["relinquishToWriter", "accommodateDeletion", "ACCESS", "reacquire"],
                             "P": ["relinquishToWriter", "accommodateDeletion", "ACCESS", "reacquire"],
                             "Q": ["relinquishToWriter", "accommodateDeletion", "ACCESS", "reacquire"],
                             "R": ["accommodateSubitemDeletion(d)", "ACCESS", "subitemDidChange(d)"],
                             "X": ["ACCESS"]]),
    PresenterCase(name: "replacing is treated as deleting what is there",
                  presenters: [("P", "f")], intents: [w("f", .forReplacing)], onBehalfOf: nil,
                  expected: ["P": ["relinquishToWriter", "accommodateDeletion", "ACCESS", "didChange", "reacquire"]]),
    PresenterCase(name: "a presenter never hears about its own access",
                  presenters: [("P", "f"), ("Q", "f")], intents: [w("f", .forMerging)], onBehalfOf: "P",
                  expected: ["P": ["ACCESS"], "Q": ["relinquishToWriter", "save", "ACCESS", "didChange", "reacquire"]]),
    PresenterCase(name: "read and write in one request: one relinquish per presenter, writer wins",
                  presenters: [("P", "f")], intents: [r("f"), w("f")], onBehalfOf: nil,
                  expected: ["P": ["relinquishToWriter", "save", "ACCESS", "didChange", "reacquire"]]),
    PresenterCase(name: "unrelated presenters hear nothing", presenters: [("P", "a/b"), ("Q", "ab")],
                  intents: [w("a/bc", .forDeleting)], onBehalfOf: nil,
                  expected: ["P": ["ACCESS"], "Q": ["ACCESS"]]),
]

@Suite struct PresenterTests {
    @Test(arguments: presenterTable)
    func presenterMessages(_ c: PresenterCase) async throws {
        let coordinator = Coordinator()
        let journal = Journal()
        var byName: [String: RecordingPresenter] = [:]
        for (name, p) in c.presenters {
            let presenter = RecordingPresenter(name, at: path(p), journal: journal)
            try coordinator.addFilePresenter(presenter)
            byName[name] = presenter
        }
        let fc = FileCoordinator(filePresenter: c.onBehalfOf.flatMap { byName[$0] }, coordinator: coordinator)
        try await fc.coordinate(with: c.intents) { _ in journal.log("ACCESS") }
        let total = c.expected.values.reduce(0) { $0 + $1.filter { $0 != "ACCESS" }.count } + 1
        await eventually { journal.all.count >= total }
        try? await Task.sleep(for: .milliseconds(20)) // nothing extra arrives late
        for (name, expected) in c.expected {
            #expect(journal.view(name) == expected, "\(name)")
        }
        #expect(journal.all.count == total, "\(journal.all)")
    }

    @Test func fastPathRefusesWhenSomeoneMustBeAsked() throws {
        let coordinator = Coordinator()
        let journal = Journal()
        try coordinator.addFilePresenter(RecordingPresenter("P", at: path("d/f"), journal: journal))
        try coordinator.addFilePresenter(RecordingPresenter("D", at: path("d"), journal: journal))
        #expect(coordinator.tryCoordinateImmediately(.writingIntent(with: path("d/f")), origin: testOrigin) == nil)
        #expect(coordinator.tryCoordinateImmediately(.readingIntent(with: path("d/f")), origin: testOrigin) == nil)
        // A directory presenter is only told afterwards about a plain write inside: no ask, fast path.
        let sibling = try #require(coordinator.tryCoordinateImmediately(.writingIntent(with: path("d/g")), origin: testOrigin))
        sibling.release()
        // Nothing was asked, and the refused attempts left no trace.
        #expect(journal.all.isEmpty)
        #expect(coordinator.status().held.isEmpty)
    }

    @Test func coreAnnouncementsDriveDidMessages() async throws {
        let coordinator = Coordinator()
        let journal = Journal()
        try coordinator.addFilePresenter(RecordingPresenter("D", at: path("d"), journal: journal))
        try coordinator.addFilePresenter(RecordingPresenter("N", at: path("d/new"), journal: journal))
        // Creating inside d is a write on d's parent directory entry list; here the root, which nobody presents.
        let access = try #require(coordinator.tryCoordinateImmediately(.writingIntent(with: .root), origin: testOrigin))
        access.subitemDidAppear(path("d/new"))
        access.didDelete(path("d/old"))
        #expect(journal.all.isEmpty, "did messages wait for the release")
        access.release()
        await eventually { journal.all.count == 3 }
        #expect(journal.view("D") == ["subitemDidAppear(d/new)", "subitemDidChange(d/old)"])
        #expect(journal.view("N") == ["didChange"])
    }

    /// A presenter registered while an access is held is not told that the access changed the item,
    /// whichever way the access was granted: at once with nobody nearby, or after a wait (another
    /// holder, or a presenter elsewhere in the tree). Presenters registered before it are told;
    /// a move still reaches the late one (its path changes).
    @Test func aPresenterRegisteredWhileAnAccessIsHeldIsNotToldItsChange() async throws {
        let coordinator = Coordinator()
        let journal = Journal()
        // Granted at once, nobody near.
        let quick = try #require(coordinator.tryCoordinateImmediately(.writingIntent(with: path("a")), origin: testOrigin))
        try coordinator.addFilePresenter(RecordingPresenter("A", at: path("a"), journal: journal))
        quick.didChange(path("a"))
        quick.release()
        // Granted after waiting for a reader of another process.
        let reader = try #require(coordinator.tryCoordinateImmediately(.readingIntent(with: path("b")), origin: testOrigin))
        let (_, box) = request(coordinator, [.writingIntent(with: path("b"))],
                               origin: AccessOrigin(pid: 99, uid: 0, gid: 0, executable: "writer"))
        #expect(box.access == nil, "the write waits for the reader")
        try coordinator.addFilePresenter(RecordingPresenter("Early", at: path("b"), journal: journal))
        reader.release()
        #expect(await eventually { box.access != nil })
        let waited = try #require(box.access)
        try coordinator.addFilePresenter(RecordingPresenter("B", at: path("b"), journal: journal))
        try coordinator.addFilePresenter(RecordingPresenter("Folder", at: .root, journal: journal))
        waited.didChange(path("b"))
        waited.release()
        // A move by an access granted before the presenter registered: it follows.
        let mover = try #require(coordinator.tryCoordinateImmediately(.writingIntent(with: path("c"), options: .forMoving), origin: testOrigin))
        try coordinator.addFilePresenter(RecordingPresenter("C", at: path("c"), journal: journal))
        mover.didMove(from: path("c"), to: path("c2"))
        mover.release()
        #expect(await eventually { journal.view("Early").contains("didChange") && journal.view("C").contains("didMove(c2)") })
        try await Task.sleep(for: .milliseconds(100))
        #expect(journal.view("A") == [], "\(journal.all)")
        #expect(journal.view("B") == [], "\(journal.all)")
        #expect(!journal.view("Folder").contains("subitemDidChange(b)"), "\(journal.all)")
        #expect(journal.view("Early").filter { $0 == "didChange" }.count == 1, "\(journal.all)")
    }

    /// The holder of an access granted before a presenter registered says it changed the item after
    /// that presenter registered: the presenter is told its change (once), as is a folder presenter,
    /// but for those it names as having seen the change; the registration watcher hears of each
    /// registration before and after it is made.
    /// A change told late (a new file's appearance once it outlived the save window) reaches only
    /// the presenters registered before the mark taken when it was made.
    @Test func aChangeToldLateReachesOnlyThePresentersRegisteredBeforeItWasMade() async throws {
        let coordinator = Coordinator()
        let journal = Journal()
        try coordinator.addFilePresenter(RecordingPresenter("Before", at: path("d"), journal: journal))
        let mark = coordinator.presenterMark
        try coordinator.addFilePresenter(RecordingPresenter("After", at: path("d"), journal: journal))
        try coordinator.addFilePresenter(RecordingPresenter("File", at: path("d/new"), journal: journal))
        coordinator.announce(.subitemAppeared(path("d/new")), origin: testOrigin, toPresentersRegisteredBefore: mark)
        #expect(await eventually { !journal.view("Before").isEmpty })
        try await Task.sleep(for: .milliseconds(100))
        #expect(journal.view("Before") == ["subitemDidAppear(d/new)"], "\(journal.all)")
        #expect(journal.view("After") == [], "\(journal.all)")
        #expect(journal.view("File") == [], "\(journal.all)")
        // Without a mark, as before: all of them.
        coordinator.announce(.subitemAppeared(path("d/new")), origin: testOrigin)
        #expect(await eventually { journal.view("File") == ["didChange"] && journal.view("After") == ["subitemDidAppear(d/new)"] })
    }

    @Test func aPresenterRegisteredWhileAnAccessIsHeldIsToldAChangeItsHolderSawAfter() async throws {
        final class Watcher: PresenterRegistrationWatcher, @unchecked Sendable {
            let calls = Mutex<[String]>([])
            func willRegister(at path: ItemPath) -> (any Sendable)? { calls.withLock { $0.append("will \(path)") }; return 7 }
            func registered(_ id: PresenterID, at path: ItemPath, before: (any Sendable)?) {
                calls.withLock { $0.append("did \(path) \(before as? Int ?? 0)") }
            }
        }
        let coordinator = Coordinator()
        let watcher = Watcher()
        coordinator.presenterRegistrationWatcher = watcher
        let journal = Journal()
        // Granted at once, nobody near.
        let quick = try #require(coordinator.tryCoordinateImmediately(.writingIntent(with: path("a")), origin: testOrigin))
        #expect(!quick.presenterRegisteredSinceGrant)
        let late = try coordinator.addFilePresenter(RecordingPresenter("A", at: path("a"), journal: journal))
        let saw = try coordinator.addFilePresenter(RecordingPresenter("Saw", at: path("a"), journal: journal))
        try coordinator.addFilePresenter(RecordingPresenter("Folder", at: .root, journal: journal))
        #expect(quick.presenterRegisteredSinceGrant && quick.wasGranted(before: late) && quick.wasGranted(before: saw))
        quick.tellPresentersRegisteredSinceGrant(except: [saw])
        // Registered after the holder looked: it read the change.
        try coordinator.addFilePresenter(RecordingPresenter("After", at: path("a"), journal: journal))
        quick.didChange(path("a"))
        quick.release()
        #expect(await eventually { journal.view("A").contains("didChange") && journal.view("Folder").contains("subitemDidChange(a)") })
        try await Task.sleep(for: .milliseconds(100))
        #expect(journal.view("A") == ["didChange"], "\(journal.all)")
        #expect(journal.view("Folder") == ["subitemDidChange(a)"], "\(journal.all)")
        #expect(journal.view("Saw") == [], "\(journal.all)")
        #expect(journal.view("After") == [], "\(journal.all)")
        #expect(watcher.calls.withLock { $0 } == ["will a", "did a 7", "will a", "did a 7", "will /", "did / 7", "will a", "did a 7"])
    }

    @Test func registrationErrors() throws {
        let coordinator = Coordinator()
        let journal = Journal()
        let p = RecordingPresenter("P", at: path("f"), journal: journal)
        let id = try coordinator.addFilePresenter(p)
        #expect(throws: CoordinationError.self) { try coordinator.addFilePresenter(p) }
        #expect(coordinator.presenterCount == 1)
        coordinator.removeFilePresenter(p)
        coordinator.removeFilePresenter(p) // unknown: ignored
        coordinator.removeFilePresenter(id: id)
        #expect(coordinator.presenterCount == 0)
        #expect(coordinator.filePresenters.isEmpty)
    }

    @Test func statusShowsPresentersHoldsAndWaits() throws {
        let coordinator = Coordinator()
        let journal = Journal()
        let owner = AccessOrigin(pid: 7, uid: 501, gid: 20, executable: "editor")
        let id = try coordinator.addFilePresenter(RecordingPresenter("P", at: path("docs/a.txt"), journal: journal), owner: owner)
        let held = try #require(coordinator.tryCoordinateImmediately(.readingIntent(with: path("x")), origin: testOrigin))
        let (_, waiting) = request(coordinator, [.writingIntent(with: path("x"))])
        let status = coordinator.status()
        #expect(status.presenters.map(\.id) == [id])
        #expect(status.presenters.first?.path == path("docs/a.txt"))
        #expect(status.presenters.first?.owner == owner)
        #expect(status.held.map(\.id) == [held.id])
        #expect(status.held.first?.phase == .granted)
        #expect(status.waiting.count == 1)
        #expect(status.waiting.first?.blockedBy == held.id)
        held.release()
        waiting.access?.release()
    }
    /// `rm -rf f` deletes children before their folders: a presenter inside whose item was deleted
    /// (asked, told) is neither asked nor told again for the folders above it, until its item
    /// exists again; the folder's presenter hears of each subitem once.
    @Test func aDeletedItemsPresenterIsToldOfItsDeletionOnce() async throws {
        let recorder = EventRecorder()
        let coordinator = Coordinator(eventSink: recorder)
        let journal = Journal()
        let folder = try coordinator.addFilePresenter(RecordingPresenter("F", at: path("f"), journal: journal))
        let x = try coordinator.addFilePresenter(RecordingPresenter("X", at: path("f/x"), journal: journal))
        let y = try coordinator.addFilePresenter(RecordingPresenter("Y", at: path("f/sub/y"), journal: journal))
        func write(_ p: String, options: FileCoordinator.WritingOptions = .forDeleting,
                   _ body: (CoordinatedAccess) -> Void) async throws {
            let access = try await withCheckedThrowingContinuation { (c: CheckedContinuation<CoordinatedAccess, any Error>) in
                coordinator.coordinate([.writingIntent(with: path(p), options: options)], origin: testOrigin) {
                    c.resume(with: $0.mapError { $0 as any Error })
                }
            }
            body(access)
            access.release()
        }
        func delete(_ p: String) async throws { try await write(p) { $0.didDelete(path(p)) } }
        func told(_ id: PresenterID) -> [PresenterNotification] {
            recorder.all.compactMap { if case .notified(id, let note) = $0.kind { note } else { nil } }
        }
        func asked(_ name: String) -> Int { journal.view(name).filter { $0 == "accommodateDeletion" }.count }
        for p in ["f/x", "f/sub/y", "f/sub", "f"] { try await delete(p) }
        await eventually { told(folder).contains(.itemDidDelete(path("f"))) }
        #expect(asked("X") == 1 && asked("Y") == 1 && asked("F") == 1)
        #expect(told(x) == [.itemDidDelete(path("f/x"))])
        #expect(told(y) == [.itemDidDelete(path("f/sub/y"))])
        #expect(told(folder) == [.subitemDeleted(path("f/x")), .subitemDeleted(path("f/sub/y")),
                                 .subitemDeleted(path("f/sub")), .itemDidDelete(path("f"))])
        // Deleted again where nothing was made since (a presented document's late deletion):
        // X is neither asked nor told; F still hears of the subitem.
        try await delete("f/x")
        await eventually { told(folder).count == 5 }
        #expect(asked("X") == 1 && told(x) == [.itemDidDelete(path("f/x"))])
        #expect(told(folder).last == .subitemDeleted(path("f/x")))
        // Once its item exists again (made anew), the next deletion above it asks and tells it again.
        try await write("f", options: []) { $0.subitemDidAppear(path("f")) }
        try await write("f", options: []) { $0.subitemDidAppear(path("f/x")) }
        try await delete("f")
        await eventually { told(x).count == 3 }
        #expect(asked("X") == 2 && asked("Y") == 1)
        #expect(told(x) == [.itemDidDelete(path("f/x")), .itemDidChange(path("f/x")), .itemDidDelete(path("f/x"))])
        #expect(told(y) == [.itemDidDelete(path("f/sub/y"))])
    }
}
