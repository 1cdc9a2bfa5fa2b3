import XCTest
import Foundation
import Glibc
import Synchronization
import ControlProtocol
import CoordFSClient
import NameBytes
@testable import CoordFS

/// What an app author using NSFileCoordinator expects of the client library (issue 20), through a
/// real mount and its daemon.
final class ClientAPITests: ClientMountTestCase {
    override func configure(_ options: inout MountOptions) {
        super.configure(&options)
        // What an accessor did to the backing folder is seen through the mount at once.
        options.attributeTimeout = 0
        options.entryTimeout = 0
    }

    /// Records every call the library makes, in order.
    final class Recorder: CoordFSClient.FilePresenter, @unchecked Sendable {
        let presentedItemPath: String?
        private let entries = Mutex<[String]>([])
        init(_ path: String) { presentedItemPath = path }
        var log: [String] { entries.withLock { $0 } }
        func record(_ entry: String) { entries.withLock { $0.append(entry) } }

        func accommodatePresentedItemDeletion() async throws { record("accommodateDeletion") }
        func accommodatePresentedSubitemDeletion(at path: String) async throws { record("accommodateSubitemDeletion \(path)") }
        func presentedItemDidChange() async { record("didChange") }
        func presentedItemDidDelete() async { record("didDelete") }
        func presentedItemDidMove(to newPath: String) async { record("didMove \(newPath)") }
        func presentedSubitemDidAppear(at path: String) async { record("subitemDidAppear \(path)") }
        func presentedSubitemDidChange(at path: String) async { record("subitemDidChange \(path)") }
        func presentedSubitemDidDelete(at path: String) async { record("subitemDidDelete \(path)") }
    }

    // MARK: Item 3: deletions reach socket presenters

    func testARemovalThroughTheMountIsToldAsDidDeleteAndSubitemDidDelete() async throws {
        mkdir(backing + "/d", 0o755)
        try writeBacking("d/doc.txt", "x\n")
        let file = Recorder(mnt + "/d/doc.txt"), folder = Recorder(mnt + "/d")
        try await FileCoordinator.addFilePresenter(file)
        try await FileCoordinator.addFilePresenter(folder)
        defer { Task { await FileCoordinator.removeFilePresenter(file); await FileCoordinator.removeFilePresenter(folder) } }
        // An unmodified tool in another process removes the file.
        let result = try run(["/bin/rm", mnt + "/d/doc.txt"])
        XCTAssertEqual(result.status, 0, result.output)
        XCTAssertTrue(eventually { file.log.contains("didDelete") }, "the file's presenter: \(file.log)")
        XCTAssertTrue(eventually { folder.log.contains("subitemDidDelete \(mnt!)/d/doc.txt") }, "the folder's presenter: \(folder.log)")
        XCTAssertFalse(folder.log.contains("subitemDidChange \(mnt!)/d/doc.txt"), "a deletion is told as one: \(folder.log)")
    }

    func testACoordinatedDeletionIsAccommodatedThenToldAsDidDelete() async throws {
        mkdir(backing + "/d", 0o755)
        mkdir(backing + "/d/sub", 0o755)
        try writeBacking("d/sub/inner.txt", "x\n")
        let inner = Recorder(mnt + "/d/sub/inner.txt"), sub = Recorder(mnt + "/d/sub"), folder = Recorder(mnt + "/d")
        for p in [inner, sub, folder] { try await FileCoordinator.addFilePresenter(p) }
        defer { Task { for p in [inner, sub, folder] { await FileCoordinator.removeFilePresenter(p) } } }
        // A coordinated deletion of a folder (in this process, as a second coordinator would do it).
        try await FileCoordinator().coordinate(writingItemAt: mnt + "/d/sub", options: .forDeleting) { _ in
            try FileManager.default.removeItem(atPath: self.backing + "/d/sub")
        }
        XCTAssertTrue(eventually { inner.log.contains("didDelete") && sub.log.contains("didDelete") }, "\(inner.log) \(sub.log)")
        XCTAssertEqual(sub.log, ["accommodateDeletion", "didDelete"], "asked first, told after")
        XCTAssertEqual(inner.log, ["accommodateDeletion", "didDelete"], "an item inside a deleted folder is deleted too")
        XCTAssertTrue(eventually { folder.log.contains("subitemDidDelete \(mnt!)/d/sub") }, "\(folder.log)")
        XCTAssertEqual(folder.log, ["accommodateSubitemDeletion \(mnt!)/d/sub", "subitemDidDelete \(mnt!)/d/sub"])
    }

    // MARK: Item 1: a purpose per coordinator

    /// Steps recorded from several tasks, in order.
    final class Steps: Sendable {
        private let list = Mutex<[String]>([])
        func add(_ step: String) { list.withLock { $0.append(step) } }
        var all: [String] { list.withLock { $0 } }
    }

    func testTwoCoordinatorsOfOneProcessExcludeEachOtherButNotTheProcesssOwnIO() async throws {
        try writeBacking("doc.txt", "0\n")
        let path = mnt + "/doc.txt"
        let steps = Steps()
        let first = Task {
            try await FileCoordinator().coordinate(writingItemAt: path) { _ in
                steps.add("A in")
                // The process's own read through the mount does not wait for its coordinator's write.
                let start = ContinuousClock.now
                let text = try String(contentsOfFile: path, encoding: .utf8)
                steps.add("A read \(text == "0\n") \(ContinuousClock.now - start < .seconds(1))")
                try await Task.sleep(for: .milliseconds(600))
                steps.add("A out")
            }
        }
        XCTAssertTrue(eventually { steps.all.contains("A in") })
        // Another coordinator of this process, in another task: it waits for the first.
        try await FileCoordinator().coordinate(writingItemAt: path) { _ in steps.add("B in") }
        try await first.value
        XCTAssertEqual(steps.all, ["A in", "A read true true", "A out", "B in"])
    }

    func testCoordinatorsWithTheSamePurposeIdentifierDoNotExcludeEachOther() async throws {
        try writeBacking("doc.txt", "0\n")
        let path = mnt + "/doc.txt"
        let steps = Steps()
        let one = FileCoordinator(), two = FileCoordinator()
        XCTAssertNotEqual(one.purposeIdentifier, two.purposeIdentifier, "unique by default")
        one.purposeIdentifier = "editor-save"
        two.purposeIdentifier = "editor-save"
        let first = Task {
            try await one.coordinate(writingItemAt: path) { _ in
                steps.add("one in")
                try await Task.sleep(for: .milliseconds(600))
                steps.add("one out")
            }
        }
        XCTAssertTrue(eventually { steps.all.contains("one in") })
        try await two.coordinate(writingItemAt: path) { _ in steps.add("two in") }
        try await first.value
        XCTAssertEqual(steps.all, ["one in", "two in", "one out"])
    }

    // MARK: Item 2: client parity

    /// Holds a write on `path` from another coordinator until `release` is called.
    private func holdWrite(_ path: String, steps: Steps) -> (Task<Void, any Error>, @Sendable () -> Void) {
        let (gate, open) = AsyncStream<Void>.makeStream()
        let task = Task {
            try await FileCoordinator().coordinate(writingItemAt: path) { _ in
                steps.add("held")
                for await _ in gate { break }
            }
        }
        return (task, { open.yield(); open.finish() })
    }

    private var waitingCount: Int { daemon.coordinator.status().waiting.count }

    func testCancelEndsAPendingWaitAtOnceAndTheDaemonForgetsIt() async throws {
        try writeBacking("doc.txt", "0\n")
        let path = mnt + "/doc.txt"
        let steps = Steps()
        let (holder, release) = holdWrite(path, steps: steps)
        XCTAssertTrue(eventually { steps.all.contains("held") })
        let waiter = FileCoordinator()
        let wait = Task { try await waiter.coordinate(writingItemAt: path) { _ in steps.add("accessor ran") } }
        XCTAssertTrue(eventually { waitingCount == 1 }, "the request waits at the daemon")
        let start = ContinuousClock.now
        waiter.cancel()
        do {
            try await wait.value
            XCTFail("a cancelled wait must throw")
        } catch is CancellationError {
        }
        XCTAssertLessThan(ContinuousClock.now - start, .seconds(2), "at once, not at the wait deadline")
        XCTAssertTrue(eventually { waitingCount == 0 }, "the daemon forgot the request")
        release()
        try await holder.value
        XCTAssertFalse(steps.all.contains("accessor ran"), "\(steps.all)")
    }

    func testCancellingTheTaskEndsItsWaitAtOnce() async throws {
        try writeBacking("doc.txt", "0\n")
        let url = URL(fileURLWithPath: mnt + "/doc.txt")
        let steps = Steps()
        let (holder, release) = holdWrite(url.path, steps: steps)
        XCTAssertTrue(eventually { steps.all.contains("held") })
        let wait = Task { try await FileCoordinator().coordinate(readingItemAt: url) { _ in steps.add("accessor ran") } }
        XCTAssertTrue(eventually { waitingCount == 1 })
        wait.cancel()
        let outcome = await wait.result
        XCTAssertThrowsError(try outcome.get()) { XCTAssertTrue($0 is CancellationError, "\($0)") }
        XCTAssertTrue(eventually { waitingCount == 0 })
        release()
        try await holder.value
        // The coordinator is still usable afterwards.
        let text = try await FileCoordinator().coordinate(readingItemAt: url) { try String(contentsOf: $0, encoding: .utf8) }
        XCTAssertEqual(text, "0\n")
        XCTAssertFalse(steps.all.contains("accessor ran"))
    }

    func testABatchOfIntentsIsGrantedTogetherAndAPresenterIsAskedOnce() async throws {
        for name in ["a", "b", "c"] { try writeBacking(name, name) }
        let presenter = Recorder(mnt + "/b")
        try await FileCoordinator.addFilePresenter(presenter)
        defer { Task { await FileCoordinator.removeFilePresenter(presenter) } }
        let coordinator = FileCoordinator()
        let paths = try await coordinator.coordinate(with: [.readingIntent(with: mnt + "/a"), .writingIntent(with: mnt + "/b", options: .forMerging),
                                                            .readingIntent(with: URL(fileURLWithPath: mnt + "/c"))]) { paths in
            XCTAssertEqual(self.daemon.coordinator.status().held.first?.intents.count, 3, "one access for the three")
            return paths
        }
        XCTAssertEqual(paths, [mnt + "/a", mnt + "/b", mnt + "/c"])
        XCTAssertTrue(eventually { presenter.log.contains("didChange") }, "\(presenter.log)")
        // prepare: one access, and the accessor's own calls on the same coordinator are not held up by it.
        let inner = try await coordinator.prepare(forReadingItemsAt: [mnt + "/a"], writingItemsAt: [mnt + "/b", mnt + "/c"]) {
            try await coordinator.coordinate(writingItemAt: mnt + "/b") { _ in "nested write granted" }
        }
        XCTAssertEqual(inner, "nested write granted")
    }

    func testItemDidMoveToReachesTheDaemonInsideTheAccessor() async throws {
        mkdir(backing + "/d", 0o755)
        try writeBacking("d/old.txt", "x\n")
        let presenter = Recorder(mnt + "/d/old.txt")
        try await FileCoordinator.addFilePresenter(presenter)
        defer { Task { await FileCoordinator.removeFilePresenter(presenter) } }
        let coordinator = FileCoordinator()
        let old = mnt + "/d/old.txt", new = mnt + "/d/new.txt"
        let seenInside = try await coordinator.coordinate(writingItemAt: old, options: .forMoving, writingItemAt: new, options: .forReplacing) { from, to in
            coordinator.item(at: from, willMoveTo: to)
            XCTAssertEqual(rename(self.backing + "/d/old.txt", self.backing + "/d/new.txt"), 0)
            coordinator.item(at: URL(fileURLWithPath: from), didMoveTo: URL(fileURLWithPath: to))
            // The daemon follows the move now, before the access ends.
            return self.eventually(timeout: 5) { self.daemon.coordinator.status().presenters.contains { $0.path.string == "d/new.txt" } }
        }
        XCTAssertTrue(seenInside, "the presenter followed the move during the access")
        XCTAssertTrue(eventually { presenter.log.contains("didMove \(new)") }, "\(presenter.log)")
        XCTAssertFalse(recorded { if case .willMove = $0 { return true }; return false }.isEmpty, "willMove is recorded")
    }

    // MARK: Item 5: forUploading and resolvesSymbolicLink

    func testForUploadingGivesASnapshotCopyWhileOthersMayWrite() async throws {
        try writeBacking("doc.txt", "before\n")
        mkdir(backing + "/folder", 0o755)
        try writeBacking("folder/inner.txt", "inner\n")
        let path = mnt + "/doc.txt"
        var copyPath = ""
        let seen = try await FileCoordinator().coordinate(readingItemAt: path, options: .forUploading) { copy in
            copyPath = copy
            // The access is over: another coordinator of this process writes the document now.
            try await FileCoordinator().coordinate(writingItemAt: path) { _ in
                try "after\n".write(toFile: self.backing + "/doc.txt", atomically: false, encoding: .utf8)
            }
            return try String(contentsOfFile: copy, encoding: .utf8)
        }
        XCTAssertNotEqual(copyPath, path, "a copy, not the document")
        XCTAssertEqual(seen, "before\n", "the snapshot keeps what was read")
        XCTAssertEqual(readBacking("doc.txt"), "after\n")
        XCTAssertFalse(FileManager.default.fileExists(atPath: copyPath), "the copy is gone after the accessor")
        // A folder is copied with what is inside it.
        let inner = try await FileCoordinator().coordinate(readingItemAt: mnt + "/folder", options: .forUploading) { copy in
            try String(contentsOfFile: copy + "/inner.txt", encoding: .utf8)
        }
        XCTAssertEqual(inner, "inner\n")
    }

    func testTheSnapshotCopyIsMadeUnderATMPDIRWhoseNameIsNotUTF8() async throws {
        try writeBacking("doc.txt", "before\n")
        // A temp folder named with the byte 0xFF: its name must reach mkdtemp byte for byte.
        let parent = NSTemporaryDirectory() + "coordfs-tmpdir-" + UUID().uuidString
        var raw = Array(parent.utf8) + [0x2F, 0x74, 0xFF]
        XCTAssertEqual(mkdir(parent, 0o700), 0)
        raw.append(0)
        XCTAssertEqual(raw.withUnsafeBufferPointer { $0.withMemoryRebound(to: CChar.self) { mkdir($0.baseAddress!, 0o700) } }, 0)
        defer {
            _ = raw.withUnsafeBufferPointer { $0.withMemoryRebound(to: CChar.self) { rmdir($0.baseAddress!) } }
            rmdir(parent)
        }
        let old = getenv("TMPDIR").map { String(cString: $0) }
        raw.withUnsafeBufferPointer { $0.withMemoryRebound(to: CChar.self) { _ = setenv("TMPDIR", $0.baseAddress!, 1) } }
        defer { if let old { setenv("TMPDIR", old, 1) } else { unsetenv("TMPDIR") } }
        let seen = try await FileCoordinator().coordinate(readingItemAt: mnt + "/doc.txt", options: .forUploading) { copy in
            XCTAssertTrue(copy.nameBytes.starts(with: raw.dropLast()), "the copy is under the TMPDIR given, byte for byte")
            let fd = copy.withNameCString { open($0, O_RDONLY) }
            XCTAssertGreaterThanOrEqual(fd, 0, "the copy opens by its bytes")
            defer { close(fd) }
            var buffer = [UInt8](repeating: 0, count: 64)
            let n = read(fd, &buffer, buffer.count)
            return String(decoding: buffer[0..<max(0, n)], as: UTF8.self)
        }
        XCTAssertEqual(seen, "before\n")
    }

    func testALinkIsResolvedOnlyWhenTheReaderAsks() async throws {
        try writeBacking("doc.txt", "x\n")
        symlink("doc.txt", backing + "/link")
        func heldPath(_ options: FileCoordinator.ReadingOptions) async throws -> String? {
            try await FileCoordinator().coordinate(readingItemAt: mnt + "/link", options: options) { _ in
                self.daemon.coordinator.status().held.first?.intents.first?.path.string
            }
        }
        let plain = try await heldPath([])
        XCTAssertEqual(plain, "link", "without resolvesSymbolicLink the link itself is read")
        let resolved = try await heldPath(.resolvesSymbolicLink)
        XCTAssertEqual(resolved, "doc.txt")
    }

    // MARK: Item 4: versions as NSFileVersion

    /// A presenter that records the conflict versions it is told of.
    final class Editor: CoordFSClient.FilePresenter, @unchecked Sendable {
        let presentedItemPath: String?
        private let entries = Mutex<[String]>([])
        init(_ path: String) { presentedItemPath = path }
        var log: [String] { entries.withLock { $0 } }
        func presentedItemDidGainConflictVersion(_ version: FileVersion) async {
            if case .conflict(let id) = version.persistentIdentifier { entries.withLock { $0.append("gained \(id.rawValue) \(version.isResolved)") } }
        }
        func presentedItemDidResolveConflictVersion(_ version: FileVersion, how: Resolution) async {
            if case .conflict(let id) = version.persistentIdentifier { entries.withLock { $0.append("resolved \(id.rawValue) \(how.rawValue)") } }
        }
    }

    func testConflictVersionsAreGainedListedAndResolvedByAnotherProcessAsFoundationSays() async throws {
        try writeBacking("doc.txt", "base\n")
        let path = mnt + "/doc.txt"
        let editor = Editor(path)
        try await FileCoordinator.addFilePresenter(editor, hasUnsavedChanges: true)
        defer { Task { await FileCoordinator.removeFilePresenter(editor) } }
        XCTAssertEqual(try run(["/bin/sh", "-c", "echo theirs > '\(path)'"]).status, 0)
        XCTAssertTrue(eventually { editor.log.contains { $0.hasPrefix("gained") } }, "presentedItemDidGainConflictVersion: \(editor.log)")
        let open = try await FileVersion.unresolvedConflictVersionsOfItem(at: URL(fileURLWithPath: path))
        XCTAssertEqual(open.count, 1)
        guard case .conflict(let id)? = open.first?.persistentIdentifier else { return XCTFail("\(open)") }
        XCTAssertEqual(editor.log, ["gained \(id.rawValue) false"])
        XCTAssertTrue(open[0].isConflict && !open[0].isResolved)
        // Someone else resolves it (coordfs resolve, another process): the presenter is told.
        let resolved = try run([try Self.coordfsBinary(), "resolve", path, "--reload"])
        XCTAssertEqual(resolved.status, 0, resolved.output)
        XCTAssertTrue(eventually { editor.log.contains("resolved \(id.rawValue) reload") }, "presentedItemDidResolveConflictVersion: \(editor.log)")
        let left = try await FileVersion.unresolvedConflictVersionsOfItem(at: path)
        XCTAssertTrue(left.isEmpty)

        // Another conflict, marked resolved through FileVersion (Foundation's isResolved = true).
        // (A reload took theirs: the editor says again that it has unsaved changes.)
        try await editor.setHasUnsavedChanges(true)
        XCTAssertEqual(try run(["/bin/sh", "-c", "echo again > '\(path)'"]).status, 0)
        XCTAssertTrue(eventually { editor.log.filter { $0.hasPrefix("gained") }.count == 2 }, "\(editor.log)")
        let second = try await FileVersion.unresolvedConflictVersionsOfItem(at: path)
        let marked = try await XCTUnwrap(second.first).markResolved()
        XCTAssertTrue(marked.isResolved)
        XCTAssertTrue(eventually { editor.log.filter { $0.hasPrefix("resolved") }.count == 2 }, "\(editor.log)")
        XCTAssertEqual(readBacking("doc.txt"), "again\n", "the document on disk stays")
    }

    func testOtherVersionsAreKeptVersionsAndReplaceItemIsACoordinatedWrite() async throws {
        try writeBacking("doc.txt", "one\n")
        let path = mnt + "/doc.txt"
        let editor = Recorder(path)
        try await FileCoordinator.addFilePresenter(editor)
        defer { Task { await FileCoordinator.removeFilePresenter(editor) } }
        XCTAssertEqual(try run(["/bin/sh", "-c", "echo two > '\(path)'"]).status, 0)
        var kept: FileVersion?
        for _ in 0..<100 where kept == nil {
            for version in try await FileVersion.otherVersionsOfItem(at: path) where try await version.contents() == Array("one\n".utf8) {
                kept = version
            }
            if kept == nil { try await Task.sleep(for: .milliseconds(50)) }
        }
        let version = try XCTUnwrap(kept, "the replaced contents are kept as a version")
        XCTAssertFalse(version.isConflict)
        try await version.replaceItem(at: path)
        XCTAssertEqual(readBacking("doc.txt"), "one\n")
        XCTAssertTrue(eventually { editor.log.filter { $0 == "didChange" }.count >= 2 }, "told as a write: \(editor.log)")
        // removeOtherVersionsOfItem forgets every version nothing holds on to.
        let before = try await FileVersion.otherVersionsOfItem(at: path)
        let stored = try XCTUnwrap(daemon.store).documentStore.versions(ofPath: "doc.txt")
        XCTAssertGreaterThan(stored.filter { !$0.isPinned }.count, 0, "\(stored)")
        try await FileVersion.removeOtherVersionsOfItem(at: URL(fileURLWithPath: path))
        let after = try await FileVersion.otherVersionsOfItem(at: path)
        XCTAssertEqual(after.count, stored.filter { $0.isPinned }.count, "only what a presenter's base holds stays: \(before) -> \(after)")
        XCTAssertEqual(readBacking("doc.txt"), "one\n", "the document itself is untouched")
    }

    @MainActor private var ranOnMainThread: [Bool] = []

    /// Swift 6: a @MainActor caller passes an accessor that touches main-actor state and calls
    /// other code; it runs on the caller's actor. Before the `isolation` parameter this did not
    /// compile ("sending value of non-Sendable type ... risks causing data races").
    @MainActor func testCallableFromTheMainActor() async throws {
        try writeBacking("doc.txt", "0\n")
        let coordinator = FileCoordinator()
        try await coordinator.coordinate(writingItemAt: mnt + "/doc.txt") { _ in ranOnMainThread.append(onMainThread()) }
        try await coordinator.coordinate(readingItemAt: URL(fileURLWithPath: mnt + "/doc.txt")) { _ in ranOnMainThread.append(onMainThread()) }
        XCTAssertEqual(ranOnMainThread, [true, true])
    }
}

/// Whether this is the process's main thread (where the main actor runs).
private func onMainThread() -> Bool {
    var buffer = [CChar](repeating: 0, count: 64)
    let n = readlink("/proc/thread-self", &buffer, 63)
    return String(decoding: buffer[0..<max(0, n)].map { UInt8(bitPattern: $0) }, as: UTF8.self) == "\(getpid())/task/\(getpid())"
}
