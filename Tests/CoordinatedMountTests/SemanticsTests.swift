import XCTest
import Foundation
import Coordination
import Synchronization
import EventLog
@testable import CoordFS

/// One test per row of docs/semantics.md: what each operation through the mount asks, tells, waits
/// for, and answers at a deadline.
final class SemanticsTests: InProcessMountTestCase {
    func testOpenForReadingAsksRelinquishAndSaveAndReacquiresAtClose() throws {
        try write("doc.txt", "alpha\n")
        let p = try present("doc.txt")
        XCTAssertEqual(try sh("cat doc.txt").output, "alpha\n")
        let log = p.waitUntil { $0.contains("reacquire") }
        XCTAssertEqual(log, ["relinquishToReader", "save", "reacquire"])
    }

    func testOpenForWritingTellsChangeOnlyAfterClose() throws {
        try write("doc.txt", "alpha\n")
        let p = try present("doc.txt")
        let started = Date()
        try sh("python3 -c \"import time; f = open('doc.txt', 'r+'); f.write('beta'); f.flush(); time.sleep(0.8); f.close()\"")
        let log = p.waitUntil { $0.contains("reacquire") }
        XCTAssertEqual(log, ["relinquishToWriter", "didChange", "reacquire"])
        XCTAssertGreaterThan(Date().timeIntervalSince(started), 0.8)
    }

    func testOpenForWritingWithoutWritingTellsNothing() throws {
        try write("doc.txt", "alpha\n")
        let p = try present("doc.txt")
        try sh("python3 -c \"open('doc.txt', 'r+').close()\"")
        let log = p.waitUntil { $0.contains("reacquire") }
        XCTAssertEqual(log, ["relinquishToWriter", "reacquire"])
    }

    func testCreateTellsTheDirectoryASubitemAppeared() throws {
        try FileManager.default.createDirectory(atPath: backing + "/d", withIntermediateDirectories: true)
        let dir = try present("d")
        try sh("echo new > d/new.txt")
        let log = dir.waitUntil { $0.contains("subitemDidAppear d/new.txt") }
        XCTAssertTrue(log.contains("subitemDidAppear d/new.txt"), "\(log)")
        XCTAssertEqual(log.filter { $0.hasPrefix("subitemDidAppear") }.count, 1, "\(log)")
    }

    func testMkdirSymlinkHardLinkAndFifoAppear() throws {
        try FileManager.default.createDirectory(atPath: backing + "/d", withIntermediateDirectories: true)
        try write("d/f", "x")
        let dir = try present("d")
        try sh("mkdir d/sub && ln -s f d/sym && ln d/f d/hard && mkfifo d/fifo")
        let log = dir.waitUntil { $0.contains("subitemDidAppear d/fifo") }
        for name in ["sub", "sym", "hard", "fifo"] {
            XCTAssertTrue(log.contains("subitemDidAppear d/\(name)"), "\(name): \(log)")
        }
    }

    func testTruncateAndChmodByPathAreWrites() throws {
        try write("doc.txt", "alpha\n")
        let p = try present("doc.txt")
        try sh("truncate -s 2 doc.txt")
        var log = p.waitUntil { $0.contains("didChange") }
        XCTAssertEqual(log, ["relinquishToWriter", "didChange", "reacquire"])
        p.clear()
        try sh("chmod 600 doc.txt && touch -m -d '2001-01-01' doc.txt")
        log = p.waitUntil { $0.filter { $0 == "didChange" }.count == 2 }
        XCTAssertEqual(log.filter { $0 == "didChange" }.count, 2, "\(log)")
    }

    func testUnlinkOfAFileInAPresentedDirectoryAsksToAccommodate() throws {
        try FileManager.default.createDirectory(atPath: backing + "/d", withIntermediateDirectories: true)
        try write("d/gone.txt", "x")
        let dir = try present("d")
        try sh("rm d/gone.txt")
        let log = dir.waitUntil { $0.contains { $0.hasPrefix("subitemDidChange") } }
        XCTAssertEqual(log.first, "accommodateSubitemDeletion d/gone.txt", "\(log)")
        XCTAssertTrue(log.contains("subitemDidChange d/gone.txt"), "told after: \(log)")
    }

    func testUnlinkOfAPresentedDocumentIsADeletionOnceTheSaveWindowCloses() throws {
        try write("doc.txt", "alpha\n")
        let p = try present("doc.txt")
        try sh("rm doc.txt")
        XCTAssertFalse(FileManager.default.fileExists(atPath: backing + "/doc.txt"))
        // Within the window only the relinquish; after it, the deletion.
        let early = p.waitUntil(timeout: 0.2, settle: 0) { _ in false }
        XCTAssertEqual(early, ["relinquishToWriter"])
        let log = p.waitUntil(timeout: 3) { $0.contains("accommodateDeletion") }
        XCTAssertFalse(log.contains("didChange"), "\(log)")
        XCTAssertEqual(log, ["relinquishToWriter", "reacquire", "relinquishToWriter", "accommodateDeletion", "reacquire"], "\(log)")
    }

    /// The deletion of a presented document is coordinated once `save_window` passed, when its file
    /// is already gone: a presenter that refuses it cannot undo it, nor keep the others from hearing
    /// of it. (Before, the refusal dropped the deletion: no presenter was told, and the log had only
    /// a `denied` record for an `rm` that had succeeded.)
    func testARefusedLateDeletionIsStillToldToEveryPresenterAndLogged() throws {
        try write("doc.txt", "alpha\n")
        let refuser = try present("doc.txt", behaviour: .init(refuseDeletion: true))
        let viewer = DeletionRecorder(path: try ItemPath("doc.txt"))
        _ = try coordinator.addFilePresenter(viewer)
        try sh("rm doc.txt")
        XCTAssertFalse(FileManager.default.fileExists(atPath: backing + "/doc.txt"))
        let refused = refuser.waitUntil(timeout: 5, settle: 0) { $0.contains("accommodateDeletion") }
        XCTAssertTrue(refused.contains("accommodateDeletion"), "\(refused)")
        let deadline = Date().addingTimeInterval(5)
        while !viewer.deleted.withLock({ $0 }) && Date() < deadline { usleep(10_000) }
        XCTAssertTrue(viewer.deleted.withLock { $0 }, "the other presenter heard of the deletion")
        let deletions = try logged().filter { $0.kind == .didDelete && $0.path == "/doc.txt" }
        XCTAssertEqual(deletions.count, 1, "the deletion recorded once: \(deletions)")
    }

    func testRmdirOfAPresentedDirectoryAsksToAccommodateAndARefusalIsEBUSY() throws {
        try FileManager.default.createDirectory(atPath: backing + "/d", withIntermediateDirectories: true)
        let dir = try present("d", behaviour: .init(refuseDeletion: true))
        let r = try sh("rmdir d", allowFailure: true)
        XCTAssertNotEqual(r.status, 0)
        XCTAssertTrue(r.output.contains("Device or resource busy"), r.output)
        XCTAssertTrue(FileManager.default.fileExists(atPath: backing + "/d"), "a refused deletion changes nothing")
        XCTAssertTrue(dir.log.contains("accommodateDeletion"), "\(dir.log)")
    }

    func testRenameMovesThePresenterWithTheDocument() throws {
        try write("doc.txt", "alpha\n")
        let p = try present("doc.txt")
        try sh("mv doc.txt renamed.txt")
        let log = p.waitUntil { $0.contains { $0.hasPrefix("didMove") } }
        XCTAssertTrue(log.contains("didMove renamed.txt"), "\(log)")
        let id = try XCTUnwrap(coordinator.presenterID(of: p))
        XCTAssertEqual(coordinator.presentedPath(of: id)?.string, "renamed.txt")
    }

    func testRenameOfADirectoryMovesPresentersInside() throws {
        try FileManager.default.createDirectory(atPath: backing + "/a/b", withIntermediateDirectories: true)
        try write("a/b/doc.txt", "x")
        let p = try present("a/b/doc.txt")
        try sh("mv a z")
        let log = p.waitUntil { $0.contains { $0.hasPrefix("didMove") } }
        XCTAssertTrue(log.contains("didMove z/b/doc.txt"), "\(log)")
    }

    func testRenameOverAnotherDocumentAsksThatOneToAccommodateDeletion() throws {
        try write("a.txt", "a")
        try FileManager.default.createDirectory(atPath: backing + "/sub", withIntermediateDirectories: true)
        try write("sub/b", "b")
        let victim = try present("sub/b")
        // A directory is not a document save: replacing something presented by one is a deletion.
        try FileManager.default.createDirectory(atPath: backing + "/dir1", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: backing + "/dir2", withIntermediateDirectories: true)
        let dirVictim = try present("dir2")
        try sh("python3 -c \"import os; os.rename('dir1', 'dir2')\"")
        let log = dirVictim.waitUntil { $0.contains("accommodateDeletion") }
        XCTAssertTrue(log.contains("accommodateDeletion"), "\(log)")
        XCTAssertEqual(victim.log, [])
    }

    func testRenameExchangeChangesBothPaths() throws {
        try write("a.txt", "a")
        try write("b.txt", "b")
        let a = try present("a.txt"), b = try present("b.txt")
        try sh("""
        python3 -c "
        import ctypes, os
        libc = ctypes.CDLL(None, use_errno=True)
        AT_FDCWD = -100; RENAME_EXCHANGE = 2
        r = libc.renameat2(AT_FDCWD, b'a.txt', AT_FDCWD, b'b.txt', RENAME_EXCHANGE)
        assert r == 0, os.strerror(ctypes.get_errno())
        "
        """)
        XCTAssertEqual(a.waitUntil { $0.contains("didChange") }.filter { $0 == "didChange" }.count, 1)
        XCTAssertEqual(b.waitUntil { $0.contains("didChange") }.filter { $0 == "didChange" }.count, 1)
        XCTAssertEqual(try String(contentsOfFile: backing + "/a.txt", encoding: .utf8), "b")
    }

    func testPresenterNeverHearsAboutItsOwnAccess() throws {
        try write("doc.txt", "alpha\n")
        let p = try present("doc.txt")
        let fc = FileCoordinator(filePresenter: p, coordinator: coordinator)
        try awaitValue {
            try await fc.coordinate(writingItemAt: p.path) { _ in }
        }
        usleep(200_000)
        XCTAssertEqual(p.log, [])
    }

    func testAPresentersOwnProcessIsNotAskedAboutItsAccesses() throws {
        try write("doc.txt", "alpha\n")
        let p = try present("doc.txt") // owned by this test process
        XCTAssertEqual(try read("doc.txt"), "alpha\n") // this process reads through the mount
        try "mine\n".write(toFile: mnt + "/doc.txt", atomically: false, encoding: .utf8)
        usleep(300_000)
        XCTAssertEqual(p.log, [], "a presenter is not asked about its own process's access")
        XCTAssertEqual(try sh("cat doc.txt").output, "mine\n") // another process: asked
        XCTAssertEqual(p.waitUntil { $0.contains("reacquire") }, ["relinquishToReader", "save", "reacquire"])
    }

    // MARK: Waits and deadlines

    func testTwoWritersNeverInterleave() throws {
        try write("doc.txt", "")
        // The first writer writes in two halves with a pause; the second appends meanwhile. (The
        // first writes in place, `r+`: a program that only appends holds no append up once it has
        // held its file a second, AppendPastReadersTests.)
        let first = try shInBackground("python3 -c \"import time; f = open('doc.txt', 'r+'); f.write('AAAA'); f.flush(); open('../ready', 'w'); time.sleep(0.6); f.write('aaaa'); f.close()\"")
        try waitForMarker()
        try sh("printf B >> doc.txt")
        first.waitUntilExit()
        XCTAssertEqual(try String(contentsOfFile: backing + "/doc.txt", encoding: .utf8), "AAAAaaaaB")
    }

    /// Another program's open file is not held against a writer past `write_wait`: programs that
    /// keep a file open for long share it through their own locks (SelfCoordinatingProgramsTests).
    func testASecondWriterGoesAheadPastAnOpenFileAtTheDeadline() throws {
        try write("doc.txt", "")
        // (In place, `r+`: a program that only appends holds no append up after a second.)
        let first = try shInBackground("python3 -c \"import time; f = open('doc.txt', 'r+'); f.write('A'); f.flush(); open('../ready', 'w'); time.sleep(3.5); f.seek(0, 2); f.write('a'); f.close()\"")
        try waitForMarker()
        let started = Date()
        try sh("printf B >> doc.txt")
        let waited = Date().timeIntervalSince(started)
        first.waitUntilExit()
        XCTAssertGreaterThan(waited, 1.5, "waited for write_wait (2 s)")
        XCTAssertLessThan(waited, 3.4, "did not wait for the first writer to finish")
        XCTAssertEqual(try String(contentsOfFile: backing + "/doc.txt", encoding: .utf8), "ABa")
    }

    /// A cooperating app's explicit coordinated write is exclusive: a writer through the mount gets
    /// EBUSY at `write_wait`, and changes nothing.
    func testAWriterGetsEBUSYWhileACoordinatedWriteHoldsPastTheDeadline() throws {
        try write("doc.txt", "A")
        let held = try XCTUnwrap(coordinator.tryCoordinateImmediately(.writingIntent(with: try ItemPath("doc.txt")), origin: .currentProcess))
        defer { held.release() }
        let started = Date()
        let r = try sh("printf B >> doc.txt", allowFailure: true)
        XCTAssertNotEqual(r.status, 0)
        XCTAssertTrue(r.output.contains("Device or resource busy"), r.output)
        XCTAssertGreaterThan(Date().timeIntervalSince(started), 1.5, "waited for write_wait (2 s)")
        XCTAssertEqual(try String(contentsOfFile: backing + "/doc.txt", encoding: .utf8), "A")
    }

    func testAReaderWaitsForAWriterThenProceeds() throws {
        try write("doc.txt", "old")
        let first = try shInBackground("python3 -c \"import time; f = open('doc.txt', 'w'); f.write('new'); f.flush(); open('../ready', 'w'); time.sleep(2.5); f.close()\"")
        try waitForMarker()
        let started = Date()
        let r = try sh("cat doc.txt")
        let waited = Date().timeIntervalSince(started)
        first.waitUntilExit()
        XCTAssertEqual(r.output, "new")
        XCTAssertGreaterThan(waited, 0.4, "waited for read_wait (0.5 s)")
        XCTAssertLessThan(waited, 2.0, "did not wait for the writer to finish")
    }

    func testAWriterWaitsForReadersThenProceeds() throws {
        try write("doc.txt", "old")
        let reader = try shInBackground("python3 -c \"import time; f = open('doc.txt'); open('../ready', 'w'); time.sleep(3); f.close()\"")
        try waitForMarker()
        let started = Date()
        try sh("echo new > doc.txt")
        let waited = Date().timeIntervalSince(started)
        reader.waitUntilExit()
        XCTAssertGreaterThan(waited, 1.5, "waited for write_wait (2 s)")
        XCTAssertEqual(try String(contentsOfFile: backing + "/doc.txt", encoding: .utf8), "new\n")
    }

    func testAHungPresenterTimesOutAndTheMountStaysResponsive() throws {
        try write("doc.txt", "alpha\n")
        try write("other.txt", "other\n")
        _ = try present("doc.txt", behaviour: .init(hang: true))
        let started = Date()
        let waiters = try (0..<20).map { _ in try shInBackground("cat doc.txt > /dev/null") }
        usleep(200_000)
        // Meanwhile other files are served at once.
        let otherStart = Date()
        for _ in 0..<20 { XCTAssertEqual(try read("other.txt"), "other\n") }
        try sh("echo more >> other.txt && ls > /dev/null")
        XCTAssertLessThan(Date().timeIntervalSince(otherStart), 1.0, "other files are not held up")
        for w in waiters { w.waitUntilExit(); XCTAssertEqual(w.terminationStatus, 0) }
        let elapsed = Date().timeIntervalSince(started)
        XCTAssertGreaterThan(elapsed, 1.5, "the reads waited for the ask deadline (2 s)")
        XCTAssertLessThan(elapsed, 30, "every read completed at its deadline")
    }

    // MARK: Helpers

    /// Waits for a background process to say (by creating `root/ready`) that it holds its access.
    func waitForMarker(timeout: Double = 20) throws {
        let deadline = Date().addingTimeInterval(timeout)
        while !FileManager.default.fileExists(atPath: root + "/ready") {
            guard Date() < deadline else { throw XCTSkip("the background process did not start") }
            usleep(5_000)
        }
    }

    func shInBackground(_ command: String) throws -> Process {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/bin/sh")
        p.arguments = ["-c", command]
        p.currentDirectoryURL = URL(fileURLWithPath: mnt)
        p.standardInput = FileHandle.nullDevice
        try p.run()
        return p
    }

    func awaitValue(_ body: @escaping @Sendable () async throws -> Void) throws {
        let done = DispatchSemaphore(value: 0)
        let failure = Mutex<(any Error)?>(nil)
        Task {
            do { try await body() } catch { failure.withLock { $0 = error } }
            done.signal()
        }
        XCTAssertEqual(done.wait(timeout: .now() + 10), .success)
        if let e = failure.withLock({ $0 }) { throw e }
    }
}

/// With `-o strict`, a presenter that misses its deadline fails the operation with ETIMEDOUT.
final class StrictSemanticsTests: InProcessMountTestCase {
    override func configure(_ options: inout MountOptions) {
        super.configure(&options)
        options.coordination.strict = true
        options.coordination.askTimeout = 0.5
    }

    func testAHungPresenterFailsTheOpenWithETIMEDOUT() throws {
        try write("doc.txt", "alpha\n")
        _ = try present("doc.txt", behaviour: .init(hang: true))
        let r = try sh("cat doc.txt", allowFailure: true)
        XCTAssertNotEqual(r.status, 0)
        XCTAssertTrue(r.output.contains("timed out"), r.output)
    }
}

/// A waiting process that gets a signal stops waiting at once.
final class InterruptTests: InProcessMountTestCase {
    override func configure(_ options: inout MountOptions) {
        super.configure(&options)
        options.coordination.askTimeout = 30
    }

    func testCtrlCEndsAWaitAtOnce() throws {
        try write("doc.txt", "alpha\n")
        _ = try present("doc.txt", behaviour: .init(hang: true))
        let started = Date()
        // timeout sends SIGINT after 0.5 s to a cat blocked on a hung presenter (deadline 30 s).
        let r = try sh("timeout -s INT 0.5 cat doc.txt", allowFailure: true)
        XCTAssertNotEqual(r.status, 0)
        XCTAssertLessThan(Date().timeIntervalSince(started), 5, "the wait ended with the signal, not at the deadline")
        usleep(100_000)
        let status = coordinator.status()
        XCTAssertEqual(status.waiting.count + status.held.count, 0, "the request was cancelled: \(status.held.map(\.intents))")
    }
}

/// Changes made directly in the backing folder (not through the mount) are seen through the mount at
/// once and told to presenters, as if made through the mount (without the asks: nobody could ask).
final class BackingChangeTests: InProcessMountTestCase {
    func testAChangeInTheBackingFolderIsToldAndVisibleAtOnce() throws {
        try write("doc.txt", "alpha\n")
        let p = try present("doc.txt")
        XCTAssertEqual(try catThenClear("doc.txt", presentedBy: p), "alpha\n")
        try sh("printf 'beta, longer\\n' > doc.txt", in: backing)
        let log = p.waitUntil { $0.contains("didChange") }
        XCTAssertEqual(log, ["didChange"], "told once, asked nothing")
        XCTAssertEqual(try sh("cat doc.txt").output, "beta, longer\n", "no stale cache through the mount")
    }

    func testItemsAppearingMovingAndVanishingInTheBackingFolderAreTold() throws {
        try FileManager.default.createDirectory(atPath: backing + "/d", withIntermediateDirectories: true)
        let dir = try present("d")
        XCTAssertEqual(try sh("ls d").output, "")
        try sh("cd d && echo 1 > a && mv a b && rm b", in: backing)
        let log = dir.waitUntil { $0.contains("subitemDidChange d/b") }
        // Created, written, renamed, removed (a deletion reaches a directory's presenters as a change).
        XCTAssertEqual(log, ["subitemDidAppear d/a", "subitemDidChange d/a", "subitemDidMove d/a d/b", "subitemDidChange d/b"], "\(log)")
        XCTAssertEqual(try sh("ls d").output, "")
    }

    /// Directory paths are kept between operations; a rename made in the backing folder must end
    /// them, or a file made in the moved directory would be told under its old path.
    func testADirectoryRenamedInTheBackingFolderIsToldUnderItsNewPath() throws {
        try FileManager.default.createDirectory(atPath: backing + "/a/sub", withIntermediateDirectories: true)
        try sh("touch a/sub/one") // the directories' paths are read (and kept) here
        // An open directory keeps the kernel's nodes (and so the kept paths) across the move.
        let held = open(mnt + "/a/sub", O_RDONLY | O_DIRECTORY)
        XCTAssertGreaterThanOrEqual(held, 0)
        defer { close(held) }
        let old = try present("a")
        let other = Process()
        other.executableURL = URL(fileURLWithPath: "/bin/mv")
        other.arguments = [backing + "/a", backing + "/b"]
        try other.run(); other.waitUntilExit()
        XCTAssertEqual(old.waitUntil(settle: 0) { $0.contains("didMove b") }, ["didMove b"], "the watcher saw the move")
        try assertAFileMadeInBSubIsToldThere()
    }

    func testADirectoryRenamedThroughTheMountIsToldUnderItsNewPath() throws {
        try sh("mkdir -p a/sub && touch a/sub/one && mv a b")
        try assertAFileMadeInBSubIsToldThere()
    }

    /// After `a` became `b`: a presenter of `b/sub` hears of a file made there, and nothing names `a/sub`.
    private func assertAFileMadeInBSubIsToldThere(file: StaticString = #filePath, line: UInt = #line) throws {
        let moved = try present("b/sub")
        try sh("touch b/sub/two")
        let log = moved.waitUntil { $0.contains("subitemDidAppear b/sub/two") }
        XCTAssertTrue(log.contains("subitemDidAppear b/sub/two"), "\(log)", file: file, line: line)
        XCTAssertFalse(log.contains { $0.contains("a/sub") }, "\(log)", file: file, line: line)
    }

    func testTheMountsOwnChangesAreNotToldTwice() throws {
        try write("doc.txt", "alpha\n")
        let p = try present("doc.txt")
        try sh("echo through-the-mount > doc.txt")
        let log = p.waitUntil(settle: 0.5) { $0.contains("didChange") }
        XCTAssertEqual(log.filter { $0 == "didChange" }.count, 1, "\(log)")
    }
}

/// A presenter that only notes whether it was told its item was deleted.
private final class DeletionRecorder: FilePresenter, @unchecked Sendable {
    let path: ItemPath
    let deleted = Mutex(false)
    init(path: ItemPath) { self.path = path }
    var presentedItemPath: ItemPath? { path }
    func presentedItemDidDelete() async { deleted.withLock { $0 = true } }
}
