import XCTest
import Foundation
import Glibc
import Coordination
import EventLog
@testable import CoordFS

/// The records a mount writes when presenters take part (registered in-process here; the CLI tests
/// cover what unmodified tools alone produce): asks, answers with latency, timeouts, a presenter
/// gone mid-ask, subitem messages, denials.
class EventLogRecordTestCase: InProcessMountTestCase {
    /// Polls the log until `predicate` holds for one record (or the timeout); returns all records.
    @discardableResult
    func waitForRecord(timeout: Double = 10, _ predicate: (EventRecord) -> Bool) throws -> [EventRecord] {
        let deadline = Date().addingTimeInterval(timeout)
        var records = try logged()
        while !records.contains(where: predicate) && Date() < deadline {
            usleep(10_000)
            records = try logged()
        }
        return records
    }

    func assertContinuous(_ records: [EventRecord], file: StaticString = #filePath, line: UInt = #line) {
        for (i, r) in records.enumerated() {
            XCTAssertEqual(r.seq, UInt64(i + 1), "seq \(r.seq) at position \(i)", file: file, line: line)
        }
    }

    func startInBackground(_ command: String) throws -> Process {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/bin/sh")
        p.arguments = ["-c", command]
        p.currentDirectoryURL = URL(fileURLWithPath: mnt)
        p.standardInput = FileHandle.nullDevice
        try p.run()
        return p
    }
}

final class EventLogRecordTests: EventLogRecordTestCase {
    func testAsksAnswersAndPresenterLifecycle() throws {
        let start = EventTime.now().millisecondsSinceEpoch
        try write("doc.txt", "alpha\n")
        let p = try present("doc.txt")
        XCTAssertEqual(try sh("cat doc.txt").output, "alpha\n")
        p.waitUntil(settle: 0) { $0.contains("reacquire") }
        try sh("echo more >> doc.txt")
        p.waitUntil(settle: 0) { $0.contains("didChange") }
        coordinator.removeFilePresenter(p)
        let records = try waitForRecord { $0.kind == .presenterRemoved }
        assertContinuous(records)
        // Wall-clock times (worked out from the coordinator's monotonic ones when formatted), in order.
        let end = EventTime.now().millisecondsSinceEpoch
        let times = records.filter { $0.kind != .mount }.map(\.time.millisecondsSinceEpoch)
        XCTAssertEqual(times, times.sorted())
        XCTAssertTrue(times.allSatisfy { (start...end).contains($0) }, "times \(times.first ?? 0)...\(times.last ?? 0) outside \(start)...\(end)")

        let added = records.filter { $0.kind == .presenterAdded }
        XCTAssertEqual(added.map(\.path), ["/doc.txt"])
        guard let presenter = added.first?.details.presenterID else { return XCTFail("presenterAdded without presenterID") }
        XCTAssertEqual(records.filter { $0.kind == .presenterRemoved }.map(\.details.presenterID), [presenter])

        // The reader `cat` asked the presenter twice (relinquish, save); each answer carries its latency.
        guard let catRequest = records.first(where: { $0.kind == .intentRequested && $0.actor?.executable == "cat" }) else {
            return XCTFail("no request by cat: \(records.map(\.kind))")
        }
        let id = catRequest.details.requestID
        XCTAssertEqual(catRequest.path, "/doc.txt")
        XCTAssertEqual(catRequest.details.intent, .read)
        let asks = records.filter { $0.kind == .presenterAsked && $0.details.requestID == id }
        XCTAssertEqual(asks.map(\.details.ask), [.relinquishToReader, .saveChanges])
        let answers = records.filter { $0.kind == .presenterAnswered && $0.details.requestID == id }
        XCTAssertEqual(answers.map(\.details.ask), [.relinquishToReader, .saveChanges])
        for r in asks + answers {
            XCTAssertEqual(r.details.presenterID, presenter)
            XCTAssertEqual(r.path, "/doc.txt")
            XCTAssertEqual(r.actor?.pid, catRequest.actor?.pid)
        }
        XCTAssertTrue(answers.allSatisfy { $0.details.latencyMicros != nil }, "answers without latency")
        let granted = records.first { $0.kind == .granted && $0.details.requestID == id }
        let released = records.first { $0.kind == .released && $0.details.requestID == id }
        XCTAssertNotNil(granted?.details.latencyMicros)
        XCTAssertEqual(released?.path, "/doc.txt")
        // Order within the request: requested < asked < answered < granted < released.
        let order = [catRequest.seq, asks[0].seq, answers[0].seq, asks[1].seq, answers[1].seq, granted?.seq ?? 0, released?.seq ?? 0]
        XCTAssertEqual(order, order.sorted(), "records of one request out of order")

        // The append was a write the presenter was told about.
        let changed = records.filter { $0.kind == .didChange && $0.path == "/doc.txt" }
        XCTAssertFalse(changed.isEmpty)
        XCTAssertTrue(records.contains { $0.kind == .presenterAsked && $0.details.ask == .relinquishToWriter })
    }

    func testSubitemRecordsForADirectoryPresenter() throws {
        try FileManager.default.createDirectory(atPath: backing + "/d", withIntermediateDirectories: true)
        try write("d/f", "x")
        let dir = try present("d")
        try sh("echo new > d/new.txt && echo more >> d/f && mv d/f d/g && rm d/g")
        dir.waitUntil(settle: 0) { $0.contains("subitemDidChange d/g") }
        try waitForRecord { $0.kind == .subitemDeleted }
        // A new file is told once it outlives save_window (SaveRecognitionTests).
        let records = try waitForRecord { $0.kind == .subitemAppeared && $0.path == "/d/new.txt" }
        assertContinuous(records)
        let presenter = records.first { $0.kind == .presenterAdded }?.details.presenterID
        XCTAssertNotNil(presenter)
        func one(_ kind: EventKind, _ path: String, file: StaticString = #filePath, line: UInt = #line) -> EventRecord? {
            let found = records.filter { $0.kind == kind && $0.path == path }
            XCTAssertFalse(found.isEmpty, "no \(kind) for \(path): \(records.map { "\($0.kind) \($0.path)" })", file: file, line: line)
            return found.first
        }
        XCTAssertNotNil(one(.subitemAppeared, "/d/new.txt"))
        XCTAssertEqual(one(.subitemChanged, "/d/f")?.details.presenterID, presenter)
        let moved = one(.subitemMoved, "/d/g")
        XCTAssertEqual(moved?.oldPath, "/d/f")
        XCTAssertEqual(moved?.details.presenterID, presenter)
        XCTAssertEqual(one(.subitemDeleted, "/d/g")?.details.presenterID, presenter)
        XCTAssertNotNil(one(.didMove, "/d/g"))
        XCTAssertNotNil(one(.didDelete, "/d/g"))
        let accommodate = records.first { $0.kind == .presenterAsked && $0.details.ask == .accommodateSubitemDeletion }
        XCTAssertEqual(accommodate?.path, "/d")
        XCTAssertTrue(records.contains { $0.kind == .presenterAnswered && $0.details.ask == .accommodateSubitemDeletion })
    }

    func testAPresenterRemovedWhileAskedIsGone() throws {
        try write("doc.txt", "alpha\n")
        let p = try present("doc.txt", behaviour: .init(hang: true))
        let reader = try startInBackground("cat doc.txt > /dev/null")
        try waitForRecord { $0.kind == .presenterAsked }
        coordinator.removeFilePresenter(p)
        reader.waitUntilExit()
        XCTAssertEqual(reader.terminationStatus, 0)
        let records = try waitForRecord { $0.kind == .released && $0.path == "/doc.txt" }
        let gone = records.filter { $0.kind == .presenterGone }
        XCTAssertEqual(gone.count, 1, "\(records.map(\.kind))")
        XCTAssertEqual(gone.first?.path, "/doc.txt")
        XCTAssertEqual(gone.first?.details.ask, .relinquishToReader)
        XCTAssertFalse(records.contains { $0.kind == .presenterTimedOut })
    }

    /// A write that waits past `write_wait` for another program's open file goes ahead: its
    /// `granted` record says so (and nothing is recorded as denied).
    func testAWriterPastAnOpenFileGoesAheadAndIsRecorded() throws {
        try write("doc.txt", "")
        // A program holds the file open for writing and has written in place; another program's
        // write waits, then goes on. (Not this process: a process never waits for the processes
        // that started it. Not an append: a program that only appends holds no append up after a
        // second.)
        // It keeps setting the file's times through its open: writing now, not a program that
        // stopped writing a while ago.
        let holder = try startInBackground("exec 3<>doc.txt; printf A >&3; exec python3 -c 'import os, time\nwhile True: os.utime(3); time.sleep(0.3)'")
        defer { holder.terminate(); holder.waitUntilExit() }
        XCTAssertNotNil(try waitForRecord { $0.kind == .granted && $0.actor?.pid == holder.processIdentifier }.first { $0.kind == .granted && $0.actor?.pid == holder.processIdentifier })
        try sh("printf B >> doc.txt")
        let records = try waitForRecord { $0.kind == .granted && $0.details.reason != nil }
        XCTAssertFalse(records.contains { $0.kind == .denied }, "\(records.map(\.kind))")
        let ahead = records.filter { $0.kind == .granted && $0.details.reason != nil }
        XCTAssertEqual(ahead.count, 1)
        XCTAssertEqual(ahead.first?.path, "/doc.txt")
        XCTAssertEqual(ahead.first?.details.intent, .write)
        XCTAssertEqual(ahead.first?.details.reason, "waitDeadline")
        XCTAssertTrue(ahead.first?.details.message?.contains("without exclusion") == true, "\(String(describing: ahead.first))")
        XCTAssertGreaterThanOrEqual(ahead.first?.details.latencyMicros ?? 0, 2_000_000)
        XCTAssertNotEqual(ahead.first?.actor?.pid, holder.processIdentifier)
    }

    /// A write refused at `write_wait` (an explicit coordinated write holds the item) is recorded
    /// with the errno the program got: EBUSY.
    func testAWriterRefusedAtTheDeadlineIsRecordedWithTheErrnoItGot() throws {
        try write("doc.txt", "")
        let held = try XCTUnwrap(coordinator.tryCoordinateImmediately(.writingIntent(with: try ItemPath("doc.txt")), origin: .currentProcess))
        defer { held.release() }
        let r = try sh("printf B >> doc.txt", allowFailure: true)
        XCTAssertNotEqual(r.status, 0)
        XCTAssertTrue(r.output.contains("Device or resource busy"), r.output)
        let records = try waitForRecord { $0.kind == .denied }
        let denied = records.filter { $0.kind == .denied }
        XCTAssertEqual(denied.count, 1)
        XCTAssertEqual(denied.first?.path, "/doc.txt")
        XCTAssertEqual(denied.first?.details.intent, .write)
        XCTAssertEqual(denied.first?.details.errno, EBUSY)
        XCTAssertEqual(denied.first?.details.reason, "busy")
        XCTAssertNotNil(denied.first?.details.message)
        XCTAssertNotEqual(denied.first?.actor?.pid, getpid())
    }
}

/// The document store's records: a version kept before an outside write, the conflict with the
/// presenter's unsaved changes, and its resolution (by whom, how).
final class EventLogStoreRecordTests: EventLogRecordTestCase {
    func testSnapshotConflictAndResolutionRecords() throws {
        guard let store = daemon.store else { throw XCTSkip("this mount runs without a document store") }
        try write("doc.txt", "ours\n")
        let p = try present("doc.txt")
        guard let id = coordinator.presenterID(of: p) else { return XCTFail("presenter not registered") }
        // The store learns presenters from the coordinator; wait for it, then mark unsaved changes.
        let deadline = Date().addingTimeInterval(5)
        while (try? store.setUnsavedChanges(id, true)) == nil && Date() < deadline { usleep(20_000) }
        try store.setUnsavedChanges(id, true)
        try sh("printf 'theirs\\n' > doc.txt")
        var conflicts = try store.conflicts(of: id)
        while conflicts.isEmpty && Date() < deadline.addingTimeInterval(5) { usleep(20_000); conflicts = try store.conflicts(of: id) }
        guard let conflict = conflicts.first else { return XCTFail("no conflict") }
        try store.resolve(conflict.id, with: .reload, by: "tester")
        let records = try waitForRecord { $0.kind == .conflictResolved }
        assertContinuous(records)
        let snapshot = records.first { $0.kind == .snapshotTaken }
        XCTAssertEqual(snapshot?.path, "/doc.txt")
        XCTAssertNotNil(snapshot?.details.snapshotMethod)
        XCTAssertEqual(snapshot?.details.bytes, 5)
        XCTAssertNotNil(snapshot?.documentID)
        let detected = records.first { $0.kind == .conflictDetected }
        XCTAssertEqual(detected?.path, "/doc.txt")
        XCTAssertEqual(detected?.documentID, snapshot?.documentID, "one document id across the records")
        let resolved = records.first { $0.kind == .conflictResolved }
        XCTAssertEqual(resolved?.path, "/doc.txt")
        XCTAssertEqual(resolved?.documentID, snapshot?.documentID)
        XCTAssertTrue(resolved?.details.message?.contains("tester") == true, "who resolved: \(String(describing: resolved))")
        XCTAssertEqual(resolved?.details.resolution?.rawValue, "reload", "how it was resolved: \(String(describing: resolved))")
    }
}

/// A presenter that never answers: timed out after the ask deadline; with `strict` the access is
/// denied as well.
final class EventLogTimeoutRecordTests: EventLogRecordTestCase {
    override func configure(_ options: inout MountOptions) {
        super.configure(&options)
        options.coordination.strict = true
        options.coordination.askTimeout = 0.5
    }

    func testTimedOutAndDeniedRecords() throws {
        try write("doc.txt", "alpha\n")
        _ = try present("doc.txt", behaviour: .init(hang: true))
        let r = try sh("cat doc.txt", allowFailure: true)
        XCTAssertNotEqual(r.status, 0)
        let records = try waitForRecord { $0.kind == .denied }
        assertContinuous(records)
        let timedOut = records.filter { $0.kind == .presenterTimedOut }
        XCTAssertEqual(timedOut.count, 1, "\(records.map(\.kind))")
        XCTAssertEqual(timedOut.first?.path, "/doc.txt")
        XCTAssertEqual(timedOut.first?.details.ask, .relinquishToReader)
        XCTAssertEqual(timedOut.first?.details.latencyMicros, 500_000)
        XCTAssertEqual(timedOut.first?.details.reason, "deadline")
        let denied = records.filter { $0.kind == .denied }
        XCTAssertEqual(denied.first?.path, "/doc.txt")
        XCTAssertEqual(denied.first?.details.errno, ETIMEDOUT)
        XCTAssertEqual(denied.first?.details.reason, "presenterTimedOut")
        XCTAssertEqual(denied.first?.details.requestID, timedOut.first?.details.requestID)
        XCTAssertFalse(records.contains { $0.kind == .granted && $0.details.requestID == timedOut.first?.details.requestID })
    }
}

/// `MountLocator` (how `coordfs watch PATH` finds the log) against synthetic mount tables.
final class MountLocatorTests: XCTestCase {
    private let base = "/nonexistent-coordfs-locator"
    private func entry(_ mountpoint: String, _ type: String, _ source: String) -> MountEntry {
        MountEntry(mountpoint: mountpoint, fsType: type, source: source, options: "rw")
    }

    func testFindsTheInnermostMountAndThePathInside() throws {
        let table = [
            entry("/", "ext4", "/dev/vda"),
            entry(base + "/docs", "fuse.coordfs", "/srv/shared"),
            entry(base + "/docs/scratch", "tmpfs", "tmpfs"),
        ]
        let root = try MountLocator.locate(base + "/docs", in: table)
        XCTAssertEqual(root.backing, "/srv/shared")
        XCTAssertEqual(root.mountpoint, base + "/docs")
        XCTAssertEqual(root.pathInMount, "/")
        XCTAssertEqual(root.eventLog, "/srv/shared/.coordfs/log")
        let inner = try MountLocator.locate(base + "/docs/reports/./q1/../q2/", in: table)
        XCTAssertEqual(inner.pathInMount, "/reports/q2")
        // Another filesystem mounted inside the coordfs mount is not part of it.
        XCTAssertThrowsError(try MountLocator.locate(base + "/docs/scratch/x", in: table)) { error in
            XCTAssertTrue("\(error)".contains("tmpfs"), "\(error)")
        }
        // A name that merely starts like the mountpoint is not inside it.
        XCTAssertThrowsError(try MountLocator.locate(base + "/docs2", in: table)) { error in
            XCTAssertTrue("\(error)".contains("not in a coordfs mount"), "\(error)")
        }
        XCTAssertThrowsError(try MountLocator.locate("", in: table))
    }

    func testStackedMountsUseTheTopmost() throws {
        let table = [
            entry(base + "/docs", "fuse.coordfs", "/srv/old"),
            entry(base + "/docs", "fuse.coordfs", "/srv/new"),
        ]
        XCTAssertEqual(try MountLocator.locate(base + "/docs/a", in: table).backing, "/srv/new")
    }

    func testBackingFolderNeedsALog() throws {
        let dir = "/tmp/coordfs-locator-\(getpid())"
        mkdir(dir, 0o755)
        defer { rmdir(dir + "/.coordfs/log"); rmdir(dir + "/.coordfs"); rmdir(dir) }
        XCTAssertThrowsError(try MountLocator.locate(backing: dir)) { error in
            XCTAssertTrue("\(error)".contains("no coordfs event log"), "\(error)")
        }
        mkdir(dir + "/.coordfs", 0o700)
        mkdir(dir + "/.coordfs/log", 0o700)
        let found = try MountLocator.locate(backing: dir)
        XCTAssertEqual(found.eventLog, dir + "/.coordfs/log")
        XCTAssertNil(found.mountpoint)
        XCTAssertThrowsError(try MountLocator.locate(backing: dir + "/missing"))
    }
}

/// The actor of a record is the program that made the call, also after an `exec` under the same pid.
final class EventLogActorTests: EventLogRecordTestCase {
    /// The worker polling /dev/fuse formats the records of the requests it serves between them (the
    /// writer thread is left the write): they reach the log complete and in order all the same.
    func testTheReaderFormatsRecordsBetweenRequests() throws {
        let recorder = try XCTUnwrap(daemon.recorder)
        XCTAssertGreaterThan(daemon.plan.options.spinMicroseconds, 0, "the default mount spins")
        try sh("""
            python3 -c "
            import os
            for i in range(50):
                fd = os.open('f%d' % i, os.O_CREAT | os.O_WRONLY, 0o644); os.close(fd); os.unlink('f%d' % i)
            "
            """)
        XCTAssertGreaterThan(recorder.helped.load(ordering: .relaxed), 0, "steps were formatted between requests")
        let records = try logged()
        assertContinuous(records)
        for i in 0..<50 {
            let kinds = records.filter { $0.path == "/f\(i)" }.map(\.kind)
            XCTAssertEqual(kinds.filter { $0 == .didDelete }.count, 1, "/f\(i): \(kinds)")
            XCTAssertEqual(kinds.first, .intentRequested, "/f\(i)")
            XCTAssertEqual(kinds.last, .released, "/f\(i)")
        }
    }

    func testTheActorIsTheExecutableAtTheTimeOfTheCall() throws {
        try write("a.txt", "a\n")
        // sh appends with a builtin, then execs mv in the same process.
        try sh("sh -c 'echo more >> a.txt; exec mv a.txt b.txt'")
        let records = try waitForRecord { $0.kind == .didMove }
        let append = records.first { $0.kind == .didChange && $0.path == "/a.txt" }
        let move = records.first { $0.kind == .didMove }
        XCTAssertEqual(append?.actor?.executable, "sh")
        XCTAssertEqual(move?.actor?.executable, "mv")
        XCTAssertEqual(append?.actor?.pid, move?.actor?.pid, "one process, two programs")
    }
}
