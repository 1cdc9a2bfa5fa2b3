import XCTest
import Foundation
@testable import CoordFS
import Coordination
import DocumentStore
import Linux

/// The store learns every presenter the coordinator registers, whoever registers it (an
/// in-process `addFilePresenter`, the control socket), and lets go when it is removed.
final class StorePresenterRegistrationTests: StoreMountTestCase {
    private func waitUntil(_ timeout: Double = 3, _ condition: () throws -> Bool) rethrows -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while try !condition() && Date() < deadline { usleep(10_000) }
        return try condition()
    }

    func testAPlainPresenterIsRegisteredWithTheStoreAndHeardThroughObservers() throws {
        try write("doc.txt", "alpha\n")
        let seen = ObservedEvents()
        service.addObserver { seen.append($0) }
        let plain = RecordingPresenter(path: try ItemPath("doc.txt"), behaviour: .init())
        let id = try coordinator.addFilePresenter(plain)
        XCTAssertTrue(try waitUntil { try self.store.document(atPath: "doc.txt")?.presenters.count == 1 }, "registered with the store")
        XCTAssertEqual(try store.document(atPath: "doc.txt")?.presenters.first?.presenter, service.storeID(of: id))
        try service.setUnsavedChanges(id, true)
        try sh("echo theirs > doc.txt")
        XCTAssertTrue(waitUntil { seen.all.count == 1 })
        usleep(300_000)
        let event = try XCTUnwrap(seen.all.first)
        XCTAssertEqual(seen.all.count, 1, "\(seen.all)")
        XCTAssertEqual(event.presenter, id)
        guard case .conflict(let conflict) = event.action else { return XCTFail("\(event)") }
        XCTAssertEqual(try service.conflicts(of: id).map(\.id), [conflict])

        coordinator.removeFilePresenter(plain)
        XCTAssertTrue(try waitUntil { try self.store.document(atPath: "doc.txt")?.presenters.isEmpty ?? true }, "let go")
        XCTAssertEqual(try service.conflicts().map(\.id), [conflict], "its conflict stays, resolvable")
        try service.resolve(conflict, with: .reload, by: "test")
    }

    /// A daemon's presenters recorded in the store outlive it only while it runs: at start the
    /// mount drops the interests (and so the pinned bases) of daemons that are gone, and a daemon
    /// whose pid the kernel handed to another process after it crashed is gone. A process is its
    /// pid and its start time: here a live `sleep` stands for a daemon that still runs (its pid and
    /// start), and for one that had the same pid before it (its pid, another start). Before, the pid
    /// alone decided, and the crashed daemon's presenter and its base stayed as long as the pid's
    /// new owner ran.
    func testPresentersOfADaemonWhosePidWasHandedOutAgainAreDropped() throws {
        try write("doc.txt", "alpha\n")
        let other = Process()
        other.executableURL = URL(fileURLWithPath: "/bin/sleep")
        other.arguments = ["60"]
        try other.run()
        defer { other.terminate(); other.waitUntilExit() }
        let pid = other.processIdentifier
        let start = try XCTUnwrap(ProcessLife.startTime(pid))
        let running = StorePresenterID(StoreService.instanceName(pid: pid, start: start) + "/presenter#1")
        let crashed = StorePresenterID(StoreService.instanceName(pid: pid, start: start - 1) + "/presenter#1")
        // An older daemon's names (coordfs-PID-BOOTSECONDS, named once it had started): one that
        // still runs (a daemon of the previous version on the same backing), one whose pid went to a
        // process that started after it named its presenters, and one from before a reboot.
        let seconds = start / UInt64(sysconf(Int32(_SC_CLK_TCK)))
        let olderRunning = StorePresenterID("coordfs-\(pid)-\(seconds)/presenter#1")
        let olderCrashed = StorePresenterID("coordfs-\(pid)-\(seconds - 1)/presenter#1")
        let olderBoot = StorePresenterID("coordfs-\(pid)-\(UInt64(Int32.max))/presenter#1")
        for name in [running, crashed, olderRunning, olderCrashed, olderBoot] { try store.register(name, path: "doc.txt", owner: 0) }
        try mountAgain()
        XCTAssertEqual(Set(try store.presenters()), [running, olderRunning], "the live daemons' presenters stay, the others' are dropped")
    }

    func testFoldersAndMissingFilesAreNoDocuments() throws {
        try FileManager.default.createDirectory(atPath: backing + "/notes", withIntermediateDirectories: true)
        let folder = DocumentRecorder(path: try ItemPath("notes"))
        _ = try daemon.addDocumentPresenter(folder)
        let missing = DocumentRecorder(path: try ItemPath("not-yet.txt"))
        _ = try daemon.addDocumentPresenter(missing)
        try sh("echo x > notes/a.txt && echo y > not-yet.txt")
        usleep(300_000)
        XCTAssertEqual(try store.presenters(), [], "nothing to keep for a folder or a file that did not exist")
        XCTAssertEqual(try store.allVersions(), [])
        XCTAssertTrue(folder.events.isEmpty && missing.events.isEmpty)
    }

    func testARegistrationAfterAWriteKeepsTheBaseItHas() throws {
        try write("doc.txt", "alpha\n")
        let (p, id) = try presentDocument("doc.txt", unsaved: true)
        XCTAssertNil(try service.register(id, path: try ItemPath("doc.txt"), presenter: p), "already registered: the base stays")
        try sh("echo theirs > doc.txt")
        let conflict = try conflict(of: p.waitForEvents(1, settle: 0.3))
        XCTAssertEqual(String(decoding: try store.contents(of: try XCTUnwrap(conflict.baseVersion)), as: UTF8.self), "alpha\n")
        // A presenter that saves (its own write, on its behalf) takes what it wrote as its base.
        try service.resolve(conflict.id, with: .save, mine: .bytes(Array("mine\n".utf8)))
        let interest = try XCTUnwrap(try store.document(atPath: "doc.txt")?.presenters.first)
        XCTAssertFalse(interest.hasUnsavedChanges)
        XCTAssertEqual(try store.document(atPath: "doc.txt")?.identity?.size, 5)
    }
}
