import XCTest
import Coordination
import Synchronization
@testable import CoordFS

/// Another node's changes among the backing watcher's events (`ClusterEchoes`, docs/cluster.md
/// "Every save one change"), by what the file is: a change record that finds the file as the
/// watcher told it (read before the record came) tells nothing more; a file changed since is told.
final class ClusterEchoesTests: XCTestCase {
    /// The files' states as the watcher would read them now (nil: gone).
    private final class States: Sendable {
        let table = Mutex<[ItemPath: PassthroughWrites.FileState]>([:])
        func withLock<R>(_ body: (inout [ItemPath: PassthroughWrites.FileState]) -> R) -> R { table.withLock { body(&$0) } }
    }
    private let states = States()
    private let doc = try! ItemPath("dir/doc.txt")
    private let origin = AccessOrigin(pid: 7, uid: 0, gid: 0, executable: "cp")

    private func make() -> ClusterEchoes {
        ClusterEchoes { [states] path in states.withLock { $0[path] } }
    }
    private func write(_ ctime: Int) { states.withLock { $0[doc] = PassthroughWrites.FileState(size: 4, ctime: (ctime, 0)) } }
    private func watcherTells(_ e: ClusterEchoes) -> Bool { !e.isEcho([doc], decidedBy: [doc], origin: origin) }

    func testARecordAfterTheWatcherToldTheFileAsItIsTellsNothingMore() {
        let e = make()
        write(1)
        XCTAssertTrue(watcherTells(e), "the watcher reads the other node's write first: told")
        XCTAssertEqual(e.told([doc], matching: true), [doc], "its record finds the file as told: heard already")
        XCTAssertFalse(watcherTells(e), "a late event of it (a kept descriptor let go): not told")
        // The next record, with the file as the record left it, is a change of its own.
        XCTAssertEqual(e.told([doc], matching: true), [])
    }

    func testARecordOfAFileChangedSinceTheWatcherToldIsTold() {
        let e = make()
        write(1)
        XCTAssertTrue(watcherTells(e), "a change beside the mounts")
        write(2)
        XCTAssertEqual(e.told([doc], matching: true), [], "the record's change came after: told")
        XCTAssertFalse(watcherTells(e), "its event read after the record: not again")
        write(3)
        XCTAssertTrue(watcherTells(e), "a change beside the mounts after the record: told")
    }

    func testAWritesModifyReadBeforeItsRecordTakesNothingForTold() {
        let e = make()
        write(1)
        XCTAssertFalse(e.isEcho([doc], decidedBy: [], origin: origin), "a MODIFY: the watcher tells nothing of it")
        XCTAssertEqual(e.told([doc], matching: true), [], "the record tells the change (the watcher did not)")
        write(2)
        XCTAssertFalse(e.isEcho([doc], decidedBy: [], origin: origin))
        XCTAssertTrue(watcherTells(e), "a write beside the mounts whose MODIFY was read before its close: the close tells it")
    }

    func testARecordAfterAProxyRanHereIsNeverMatched() {
        let e = make()
        write(1)
        XCTAssertTrue(watcherTells(e))
        XCTAssertEqual(e.told([doc], matching: false), [], "asked here: the proxy's release tells it")
    }

    func testADeleteToldByTheWatcherIsHeardWhenItsRecordComes() {
        let e = make()
        write(1)
        XCTAssertEqual(e.told([doc], matching: true), [])
        states.withLock { $0[doc] = nil }
        XCTAssertTrue(watcherTells(e), "gone: told")
        XCTAssertEqual(e.told([doc], matching: true), [doc])
    }

    func testThisNodesOwnChangeIsNotToldAgainWhenAnotherNodeLetsGoOfTheFile() {
        let e = make()
        write(1)
        XCTAssertTrue(watcherTells(e))
        write(2)
        e.changedHere([doc])
        XCTAssertFalse(watcherTells(e), "another node's daemon closing a descriptor it kept: the file as this node's access left it")
        write(3)
        XCTAssertTrue(watcherTells(e), "a change beside the mounts after it: told")
        XCTAssertEqual(e.told([doc], matching: true), [doc], "and a record finding the file so: heard")
    }

    /// A `mkdir` or a link through another node whose access asked a folder presenter here (a
    /// proxy writing the folder runs here): the name appearing in the folder is that node's, held
    /// until its record tells it through the proxy; a change of a file already in the folder is not.
    func testANameMadeInAFolderAnotherNodeWritesHereIsHeldForItsRecord() {
        let e = make()
        let folder = try! ItemPath("dir"), made = try! ItemPath("dir/made")
        e.began([.writingIntent(with: folder)])
        states.withLock { $0[made] = PassthroughWrites.FileState(size: 0, ctime: (1, 0)) }
        XCTAssertTrue(e.isEcho([made], decidedBy: [made], names: true, origin: origin), "a name made in it: held")
        write(1)
        XCTAssertTrue(watcherTells(e), "a write to a file in it (no name made): told")
        XCTAssertTrue(e.ended([.writingIntent(with: folder)], told: true).isEmpty, "its record told it: dropped")
        XCTAssertFalse(e.isEcho([try! ItemPath("dir/other")], decidedBy: [try! ItemPath("dir/other")], names: true, origin: origin),
                       "once the proxy ended, a name made there is told")
        e.began([.writingIntent(with: folder)])
        XCTAssertTrue(e.isEcho([made], decidedBy: [made], names: true, origin: origin))
        XCTAssertEqual(e.ended([.writingIntent(with: folder)], told: false).map(\.path), [made], "its record told nothing: told now")
    }
}
