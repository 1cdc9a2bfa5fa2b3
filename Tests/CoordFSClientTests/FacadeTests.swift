import XCTest
import Foundation
import Glibc
import Synchronization
import ControlProtocol
import CoordFSClient

/// The Swift facade (`FileCoordinator`, `FilePresenter`) against a real mount and its daemon.
final class FacadeTests: ClientMountTestCase {
    /// Records what the library delivers, and what the backing file held at each ask.
    final class Document: CoordFSClient.FilePresenter, @unchecked Sendable {
        let presentedItemPath: String?
        let backingFile: String
        private let entries = Mutex<[String]>([])
        init(path: String, backingFile: String) {
            presentedItemPath = path
            self.backingFile = backingFile
        }
        var log: [String] { entries.withLock { $0 } }
        private func record(_ entry: String) { entries.withLock { $0.append(entry) } }
        private var onDisk: String { (try? String(contentsOfFile: backingFile, encoding: .utf8)) ?? "<missing>" }

        func relinquishPresentedItemToWriter() async -> Reacquirer? {
            record("relinquishToWriter content=\(onDisk)")
            return { [self] in record("reacquire") }
        }
        func relinquishPresentedItemToReader() async -> Reacquirer? {
            record("relinquishToReader")
            return nil
        }
        func savePresentedItemChanges() async throws { record("save") }
        func presentedItemDidChange() async { record("didChange content=\(onDisk)") }
        func presentedItemDidMove(to newPath: String) async { record("didMove \(newPath)") }
    }

    func testAPresenterInThisProcessIsAskedBeforeAToolWritesAndToldAfter() async throws {
        try writeBacking("doc.txt", "old\n")
        let document = Document(path: mnt + "/doc.txt", backingFile: backing + "/doc.txt")
        try await FileCoordinator.addFilePresenter(document)
        XCTAssertEqual(presenterCount, 1)
        // An unmodified tool, in another process, writes through the mount.
        let result = try run(["/bin/sh", "-c", "echo new > '\(mnt!)/doc.txt'"])
        XCTAssertEqual(result.status, 0, result.output)
        XCTAssertTrue(eventually { document.log.contains { $0.hasPrefix("didChange") } }, "\(document.log)")
        let log = document.log
        XCTAssertEqual(log.first, "relinquishToWriter content=old\n", "the ask comes before the write lands: \(log)")
        XCTAssertTrue(log.contains("didChange content=new\n"), "\(log)")
        XCTAssertLessThan(log.firstIndex { $0.hasPrefix("relinquishToWriter") }!, log.firstIndex { $0.hasPrefix("didChange") }!)
        await FileCoordinator.removeFilePresenter(document)
        XCTAssertTrue(eventually { presenterCount == 0 })
    }

    func testAFileCoordinatorWriteAsksOtherPresentersAndTellsThemWhatChanged() async throws {
        try writeBacking("doc.txt", "one\n")
        let document = Document(path: mnt + "/doc.txt", backingFile: backing + "/doc.txt")
        try await FileCoordinator.addFilePresenter(document)
        // The accessor writes the backing file so the check does not depend on the thread ids the
        // kernel reports for this multi-threaded process.
        let writer = FileCoordinator()
        try await writer.coordinate(writingItemAt: mnt + "/doc.txt", options: .forMerging) { path in
            XCTAssertEqual(path, mnt + "/doc.txt")
            try "two\n".write(toFile: backing + "/doc.txt", atomically: false, encoding: .utf8)
        }
        XCTAssertTrue(eventually { document.log.contains("reacquire") }, "\(document.log)")
        XCTAssertEqual(Array(document.log.prefix(2)), ["relinquishToWriter content=one\n", "save"])
        XCTAssertTrue(document.log.contains("didChange content=two\n"), "\(document.log)")
        // A coordinator acting for the presenter does not ask it. (The accessor reads the backing
        // file: a read through the mount is a separate access the mount makes for this process,
        // and the mount does not know which presenters a process owns.)
        let before = document.log.count
        let own = FileCoordinator(filePresenter: document)
        let text = try await own.coordinate(readingItemAt: mnt + "/doc.txt") { _ in
            try String(contentsOfFile: self.backing + "/doc.txt", encoding: .utf8)
        }
        XCTAssertEqual(text, "two\n")
        XCTAssertEqual(document.log.count, before, "a presenter never hears about its own access: \(document.log)")
        await FileCoordinator.removeFilePresenter(document)
    }

    func testAMoveThroughTheMountFollowsThePresenter() async throws {
        try writeBacking("draft.txt", "text\n")
        let document = Document(path: mnt + "/draft.txt", backingFile: backing + "/draft.txt")
        try await FileCoordinator.addFilePresenter(document)
        let result = try run(["/bin/mv", mnt + "/draft.txt", mnt + "/final.txt"])
        XCTAssertEqual(result.status, 0, result.output)
        XCTAssertTrue(eventually { document.log.contains("didMove \(mnt!)/final.txt") }, "\(document.log)")
        let (mount, _) = try CoordFSMount.containing(mnt)
        let status = try await mount.status()
        XCTAssertEqual(status.presenters.map(\.path.description), ["final.txt"])
        XCTAssertEqual(status.presenters.first?.pid, getpid())
        await FileCoordinator.removeFilePresenter(document)
    }

    func testStatusShowsHeldAndWaitingAccesses() async throws {
        try writeBacking("a.txt", "a\n")
        let holder = try RawClient(socket: socketPath)
        XCTAssertTrue(holder.hello())
        let path = try MountPath(validating: "a.txt")
        guard case .granted(let granted) = holder.request({ .coordinate(Coordinate(id: $0, intents: [.writing(path)])) }) else {
            return XCTFail("no grant")
        }
        // A second writer, in another process, waits behind the first (all accesses of one
        // process share a purpose and never wait for each other).
        let waiter = try start([try Self.coordfsBinary(), "coordinate", "--write", mnt + "/a.txt", "--", "true"])
        let (mount, _) = try CoordFSMount.containing(mnt)
        var report = try await mount.status()
        for _ in 0..<2500 where report.waiting.isEmpty {
            usleep(2_000)
            report = try await mount.status()
        }
        XCTAssertEqual(report.accesses.map(\.access), [granted.access])
        XCTAssertEqual(report.accesses.first?.intents, [.writing(path)])
        XCTAssertEqual(report.accesses.first?.pid, getpid())
        XCTAssertEqual(report.waiting.count, 1)
        XCTAssertEqual(report.waiting.first?.pid, waiter.pid)
        // Release: the waiter is granted at once.
        guard case .ok = holder.request({ .release(Release(id: $0, access: granted.access, changes: [.changed(path)])) }) else {
            return XCTFail("release failed")
        }
        XCTAssertEqual(wait(waiter), 0, waiter.text)
    }
}

extension FacadeTests {
    /// Names are bytes: a presenter of a name that is not UTF-8 (given losslessly) is asked and told
    /// when a FileCoordinator writes it by its bytes; a file whose name differs by one byte is not it.
    func testANameThatIsNotUTF8IsCoordinatedByItsBytes() async throws {
        let name: [UInt8] = Array("doc".utf8) + [0xFF]
        let backingFile = (Array(backing.utf8) + [UInt8(ascii: "/")] + name + [0]).map { CChar(bitPattern: $0) }
        let fd = open(backingFile, O_CREAT | O_WRONLY, 0o644)
        XCTAssertGreaterThanOrEqual(fd, 0)
        close(fd)
        let path = Array(mnt.utf8) + [UInt8(ascii: "/")] + name
        let document = Document(path: String(nameBytes: path), backingFile: backing + "/none")
        try await FileCoordinator.addFilePresenter(document)
        let other = Array(mnt.utf8) + [UInt8(ascii: "/")] + Array("doc".utf8) + [0xFE]
        try await FileCoordinator().coordinate(writingItemAtPath: other) { given in
            XCTAssertEqual(given, other)
            // The backing file (this multi-threaded process's own writes through the mount are not the point).
            let fd = open((Array(backing.utf8) + given.dropFirst(mnt.utf8.count) + [0]).map { CChar(bitPattern: $0) }, O_CREAT | O_WRONLY, 0o644)
            XCTAssertGreaterThanOrEqual(fd, 0)
            close(fd)
        }
        XCTAssertEqual(document.log, [], "the presenter of doc\\xff was asked about doc\\xfe")
        try await FileCoordinator().coordinate(writingItemAtPath: path, options: .forMerging) { given in
            XCTAssertEqual(given, path)
            let fd = open((Array(backing.utf8) + given.dropFirst(mnt.utf8.count) + [0]).map { CChar(bitPattern: $0) }, O_WRONLY | O_TRUNC)
            XCTAssertGreaterThanOrEqual(fd, 0, "the accessor's bytes name the file")
            _ = "new".withCString { Glibc.write(fd, $0, 3) }
            close(fd)
        }
        XCTAssertTrue(eventually { document.log.contains("reacquire") }, "\(document.log)")
        XCTAssertEqual(document.log.first, "relinquishToWriter content=<missing>")
        XCTAssertTrue(document.log.contains { $0.hasPrefix("didChange") }, "\(document.log)")
        await FileCoordinator.removeFilePresenter(document)
    }
}
