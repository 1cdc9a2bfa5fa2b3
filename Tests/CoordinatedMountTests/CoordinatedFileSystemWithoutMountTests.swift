// The coordinated file system's adapter without a mount: its requests come from the request double
// (EmbeddedRequest), its backing folder is a temp folder, its coordinator and presenter are real.
import Coordination
import CoordFS
import Dispatch
import Foundation
import FuseKit
import Glibc
import Loopback
import SystemPackage
import XCTest

final class CoordinatedFileSystemWithoutMountTests: XCTestCase {
    private var root = ""
    private var fs: CoordinatedFileSystem!
    private var coordinator: Coordinator!
    /// Requests from another process than the presenter's (pid 1), so the presenter is asked.
    private let probe = EmbeddedRequest(context: RequestContext(uid: 0, gid: 0, pid: 1, umask: 0o022))

    /// A folder presenter whose answer to "a subitem is about to be deleted" waits for the test.
    private final class GatedPresenter: FilePresenter, @unchecked Sendable {
        let presentedItemPath: ItemPath?
        let gate = DispatchSemaphore(value: 0)
        let asked = DispatchSemaphore(value: 0)
        let refuse: Bool
        init(_ path: ItemPath, refuse: Bool = false) { presentedItemPath = path; self.refuse = refuse }
        func accommodatePresentedSubitemDeletion(at path: ItemPath) async throws {
            asked.signal()
            await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
                DispatchQueue.global().async { self.gate.wait(); c.resume() }
            }
            if refuse { throw CocoaLikeRefusal() }
        }
    }
    private struct CocoaLikeRefusal: Error {}

    override func setUpWithError() throws {
        var template = Array("/tmp/coordfs-adapter-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw XCTSkip("mkdtemp: \(errno)") }
        root = String(cString: made)
        XCTAssertEqual(mkdir(root + "/dir", 0o755), 0)
        XCTAssertTrue(FileManager.default.createFile(atPath: root + "/dir/other.txt", contents: Data("x".utf8)))
        coordinator = Coordinator()
        fs = CoordinatedFileSystem(loopback: try Loopback(backingRoot: root), coordinator: coordinator, options: CoordinationOptions())
    }

    override func tearDownWithError() throws {
        fs?.finishPendingSaves()
        fs = nil
        try? FileManager.default.removeItem(atPath: root)
    }

    private func lookup(_ name: String, in parent: InodeID = .root) throws -> InodeID {
        name.withCString { fs.lookup(probe.request(), parent: parent, name: FileName($0)) }
        guard case .entry(let e) = probe.replies.last else { throw XCTSkip("lookup replied \(String(describing: probe.replies.last))") }
        return e.inode
    }

    /// Waits until the double holds `count` replies.
    private func waitForReplies(_ count: Int) {
        let deadline = Date().addingTimeInterval(5)
        while probe.replies.count < count && Date() < deadline { usleep(1000) }
    }

    private func errorCode(_ reply: Reply?) -> Int32? {
        if case .error(let e) = reply { return e?.rawValue ?? 0 }
        return nil
    }

    func testAnUnlinkUnderAPresentedFolderIsParkedUntilThePresenterAnswers() throws {
        let presenter = GatedPresenter(try ItemPath("dir"))
        _ = try coordinator.addFilePresenter(presenter)
        let dir = try lookup("dir")
        "other.txt".withCString { fs.unlink(probe.request(), parent: dir, name: FileName($0)) }
        // The worker is back at once, the request parked while the presenter is asked.
        XCTAssertEqual(presenter.asked.wait(timeout: .now() + 5), .success, "the folder's presenter is asked to accommodate")
        XCTAssertEqual(probe.replies.count, 1, "only the lookup answered: the unlink waits, parked")
        XCTAssertEqual(access(root + "/dir/other.txt", F_OK), 0, "nothing removed before the presenter answered")
        presenter.gate.signal()
        waitForReplies(2)
        XCTAssertEqual(probe.replies.count, 2)
        XCTAssertEqual(errorCode(probe.replies.last), 0, "answered once the presenter answered")
        XCTAssertNotEqual(access(root + "/dir/other.txt", F_OK), 0)
    }

    func testAPresenterThatRefusesFailsTheUnlinkWithEBUSYAndNothingChanges() throws {
        let presenter = GatedPresenter(try ItemPath("dir"), refuse: true)
        _ = try coordinator.addFilePresenter(presenter)
        let dir = try lookup("dir")
        "other.txt".withCString { fs.unlink(probe.request(), parent: dir, name: FileName($0)) }
        XCTAssertEqual(presenter.asked.wait(timeout: .now() + 5), .success)
        presenter.gate.signal()
        waitForReplies(2)
        XCTAssertEqual(errorCode(probe.replies.last), EBUSY)
        XCTAssertEqual(access(root + "/dir/other.txt", F_OK), 0)
    }

    func testTheCallersInterruptEndsTheWaitWithEINTRAndNothingDone() throws {
        let presenter = GatedPresenter(try ItemPath("dir"))
        _ = try coordinator.addFilePresenter(presenter)
        let dir = try lookup("dir")
        "other.txt".withCString { fs.unlink(probe.request(), parent: dir, name: FileName($0)) }
        XCTAssertEqual(presenter.asked.wait(timeout: .now() + 5), .success)
        probe.interrupt() // Ctrl-C on the waiting rm
        waitForReplies(2)
        XCTAssertEqual(errorCode(probe.replies.last), EINTR)
        presenter.gate.signal()
        XCTAssertEqual(access(root + "/dir/other.txt", F_OK), 0, "nothing done")
        usleep(50_000)
        XCTAssertEqual(probe.replies.count, 2, "answered once: the presenter's late answer changes nothing")
        XCTAssertEqual(access(root + "/dir/other.txt", F_OK), 0)
    }
}
