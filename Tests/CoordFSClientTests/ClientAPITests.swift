import XCTest
import Foundation
import Glibc
import Synchronization
import ControlProtocol
import CoordFSClient
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
}
