import XCTest
import Coordination
import Synchronization
@testable import CoordFS

/// The matching of the mount's own passthrough writes with the backing watcher's events: by what
/// the file is (as the mount's release left it), not by who closed it or when.
final class PassthroughWritesTests: XCTestCase {
    private let file = NSObject(), other = NSObject()
    /// The files' states as the watcher would read them now (nil: gone).
    private final class States: Sendable {
        let table = Mutex<[ObjectIdentifier: PassthroughWrites.FileState]>([:])
        func withLock<R>(_ body: (inout [ObjectIdentifier: PassthroughWrites.FileState]) -> R) -> R { table.withLock { body(&$0) } }
    }
    private let states = States()

    private func make(kept: Int = 1024) -> PassthroughWrites {
        PassthroughWrites(keptReleases: kept) { [states] node in states.withLock { $0[ObjectIdentifier(node)] } }
    }
    private func set(_ node: AnyObject, _ ctime: Int, size: Int64 = 6) -> PassthroughWrites.FileState {
        let s = PassthroughWrites.FileState(size: size, ctime: (ctime, 0))
        states.withLock { $0[ObjectIdentifier(node)] = s }
        return s
    }
    private func gone(_ node: AnyObject) { _ = states.withLock { $0.removeValue(forKey: ObjectIdentifier(node)) } }

    func testEventsOfTheWriterWhileItHoldsTheFileOpenAreOwn() {
        let w = make()
        _ = set(file, 1)
        w.opened(file, by: 10)
        XCTAssertTrue(w.isOwn(file, pid: 10, close: false))
        _ = set(file, 2)
        XCTAssertFalse(w.isOwn(file, pid: 11, close: false), "another process writing the backing file")
        XCTAssertFalse(w.isOwn(other, pid: 10, close: false), "another file")
    }

    /// A child that inherited the descriptor closes last: its pid opened nothing, the file is still
    /// as the release left it.
    func testACloseByAnotherProcessOfTheFileAsReleasedIsOwnHoweverLate() {
        let w = make()
        w.opened(file, by: 10)
        let s = set(file, 2)
        w.released(file, by: 10, state: s)
        w.reads.add(100, ordering: .relaxed) // read long after
        XCTAssertTrue(w.isOwn(file, pid: 99, close: false), "its last MODIFY")
        XCTAssertTrue(w.isOwn(file, pid: 99, close: true))
    }

    /// The file changed after the release: a change beside the mount, and the rest forgotten.
    func testAChangedFileIsAChangeBesideTheMount() {
        let w = make()
        w.opened(file, by: 10)
        w.released(file, by: 10, state: set(file, 2))
        w.reads.add(5, ordering: .relaxed)
        _ = set(file, 3)
        XCTAssertFalse(w.isOwn(file, pid: 11, close: true), "written beside the mount")
        _ = set(file, 2)
        XCTAssertFalse(w.isOwn(file, pid: 11, close: true), "forgotten once changed")
    }

    /// The writer's own close, read in the read that followed its release, after a change beside
    /// the mount right after: still its own; the change beside the mount is not.
    func testTheWritersCloseReadRightAfterItsReleaseIsOwnEvenIfChangedSince() {
        let w = make()
        w.opened(file, by: 10)
        w.released(file, by: 10, state: set(file, 2))
        _ = set(file, 3)
        w.reads.add(1, ordering: .relaxed)
        XCTAssertTrue(w.isOwn(file, pid: 10, close: true))
        XCTAssertFalse(w.isOwn(file, pid: 11, close: true))
        XCTAssertFalse(w.isOwn(file, pid: 10, close: true), "matched once")
    }

    /// Its close read reads later, with the file changed: a change beside the mount.
    func testAReleasesPidMatchesOnlyInTheReadsRightAfterIt() {
        let w = make()
        w.opened(file, by: 10)
        w.released(file, by: 10, state: set(file, 2))
        _ = set(file, 3)
        w.reads.add(3, ordering: .relaxed)
        XCTAssertFalse(w.isOwn(file, pid: 10, close: true))
    }

    func testACloseEventBeforeItsReleaseIsMatchedAndTheReleaseLeavesNothing() {
        let w = make()
        w.opened(file, by: 10)
        _ = set(file, 2)
        XCTAssertTrue(w.isOwn(file, pid: 10, close: true))
        w.released(file, by: 10, state: set(file, 2))
        XCTAssertFalse(w.needsHandle(file), "nothing kept of it")
    }

    /// A file the mount still has open for writing, written beside the mount by another process.
    func testAWriteBesideTheMountWhileTheMountHoldsTheFileIsNotOwn() {
        let w = make()
        w.opened(file, by: 10)
        _ = set(file, 2)
        XCTAssertTrue(w.isOwn(file, pid: 10, close: false), "its own write")
        _ = set(file, 3)
        XCTAssertFalse(w.isOwn(file, pid: 11, close: false))
        XCTAssertFalse(w.isOwn(file, pid: 11, close: true))
    }

    /// Found by the file's handle, whatever its name is now (renamed after the release).
    func testARenamedFileIsFoundByItsHandle() {
        let w = make()
        w.opened(file, by: 10)
        w.released(file, by: 10, state: set(file, 2), handle: [1, 2, 3])
        XCTAssertTrue(w.isOwn(handle: [1, 2, 3], nil, pid: 99, close: true))
        XCTAssertFalse(w.isOwn(handle: [4], nil, pid: 99, close: true), "another file")
    }

    /// The kernel forgot the file before the watcher read the close: matched by the path it was
    /// opened by, and a file gone is no change to tell.
    func testAForgottenFileIsMatchedByItsPath() throws {
        let w = make()
        let path = try ItemPath("d/a.txt")
        w.opened(file, by: 10, at: path)
        w.released(file, by: 10, state: set(file, 2))
        gone(file)
        XCTAssertFalse(w.isOwn(nil, path: try ItemPath("d/b.txt"), pid: 10, close: true), "another path")
        XCTAssertTrue(w.isOwn(nil, path: path, pid: 77, close: true))
        XCTAssertFalse(w.isOwn(nil, pid: 10, close: true), "neither file nor path")
    }

    /// What is remembered is bounded: files whose close event never came are dropped, oldest first,
    /// and with them their nodes.
    func testUnmatchedEntriesAreBoundedAndDropped() {
        let w = make(kept: 16)
        weak var gone: NSObject?
        do {
            let node = NSObject()
            gone = node
            w.opened(node, by: 10)
            w.released(node, by: 10, state: set(node, 1))
        }
        XCTAssertNotNil(gone, "kept while its close event may come")
        let others = (0..<40).map { _ in NSObject() }
        for n in others {
            w.opened(n, by: 10)
            w.released(n, by: 10, state: set(n, 1))
        }
        states.withLock { $0.removeAll() }
        XCTAssertNil(gone, "dropped, oldest first")
    }
}
