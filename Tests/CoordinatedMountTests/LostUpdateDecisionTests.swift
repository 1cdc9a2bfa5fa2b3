import XCTest
import Glibc
import Synchronization
@testable import CoordFS
import Coordination
import DocumentStore

/// The lost-update rule (a pure function) and the implicit-reader table, without a mount.
final class LostUpdateDecisionTests: XCTestCase {
    let v1 = FileIdentity(device: 1, inode: 10, size: 5, modificationTimeNanoseconds: 1_000)
    let v2 = FileIdentity(device: 1, inode: 11, size: 7, modificationTimeNanoseconds: 2_000)
    let v1Touched = FileIdentity(device: 1, inode: 10, size: 5, modificationTimeNanoseconds: 1_001)

    func testAChangeSinceTheReadIsALostUpdateKeptByDefault() {
        XCTAssertEqual(LostUpdateDecision.decide(mode: .keep, presented: false, read: v1, current: v2), .keep(read: v1, current: v2))
        // The same inode written in place since (only its mtime moved) is a change too.
        XCTAssertEqual(LostUpdateDecision.decide(mode: .keep, presented: false, read: v1, current: v1Touched), .keep(read: v1, current: v1Touched))
        XCTAssertEqual(LostUpdateDecision.decide(mode: .refuse, presented: false, read: v1, current: v2), .refuse(read: v1, current: v2))
        XCTAssertEqual(LostUpdateDecision.refusal, ECANCELED)
    }

    func testNoLostUpdateWhenUnchangedNeverReadGoneOffOrPresented() {
        for mode in LostUpdateMode.allCases {
            XCTAssertEqual(LostUpdateDecision.decide(mode: mode, presented: false, read: v1, current: v1), .save, "unchanged, \(mode)")
            XCTAssertEqual(LostUpdateDecision.decide(mode: mode, presented: false, read: nil, current: v2), .save, "never read, \(mode)")
            XCTAssertEqual(LostUpdateDecision.decide(mode: mode, presented: false, read: v1, current: nil), .save, "no file now, \(mode)")
            XCTAssertEqual(LostUpdateDecision.decide(mode: mode, presented: true, read: v1, current: v2), .save, "presented, \(mode)")
        }
        XCTAssertEqual(LostUpdateDecision.decide(mode: .off, presented: false, read: v1, current: v2), .save)
    }

    func testAProcessKeyIsStableAndNoneForAProcessThatIsNot() {
        // The key of a live process is stable, and differs between two processes.
        XCTAssertEqual(ProcessKey.current(getpid()), ProcessKey.current(getpid()))
        XCTAssertNotNil(processStart(1))
        XCTAssertNil(processStart(0))
        XCTAssertNil(processStart(Int32.max), "no such process")
    }

    /// Simulated processes: pid → start time, changed by the test.
    final class Live: Sendable {
        let table: Mutex<[pid_t: UInt64]>
        init(_ t: [pid_t: UInt64]) { table = Mutex(t) }
        func withLock<T>(_ body: (inout [pid_t: UInt64]) -> T) -> T { table.withLock { body(&$0) } }
    }

    private func table() -> (ImplicitReaders, Live) {
        let live = Live([100: 1, 200: 2])
        let readers = ImplicitReaders(sweepInterval: 0) { pid in live.withLock { $0[pid] } }
        return (readers, live)
    }

    func testAReaderIsKeyedByProcessAndPathAndUpdatedBySavesOnly() throws {
        let (readers, _) = table()
        let doc = try ItemPath("doc"), other = try ItemPath("other")
        readers.noteRead(doc, identity: v1, by: 100)
        XCTAssertEqual(readers.readVersion(at: doc, by: 100), v1)
        XCTAssertNil(readers.readVersion(at: doc, by: 200), "200 never read it")
        XCTAssertNil(readers.readVersion(at: other, by: 100))
        // Re-read after a change: the newer version.
        readers.noteRead(doc, identity: v2, by: 100)
        XCTAssertEqual(readers.readVersion(at: doc, by: 100), v2)
        XCTAssertEqual(readers.count, 1)
        // A save by a reader moves its version; a writer that never read gets no record.
        readers.noteSaved(doc, identity: v1Touched, by: 100)
        XCTAssertEqual(readers.readVersion(at: doc, by: 100), v1Touched)
        readers.noteSaved(doc, identity: v1Touched, by: 200)
        XCTAssertNil(readers.readVersion(at: doc, by: 200))
        XCTAssertEqual(readers.count, 1)
    }

    func testOthersReadingTheCurrentVersionAreFoundAndTheWriterItselfIsNot() throws {
        let (readers, _) = table()
        let doc = try ItemPath("doc")
        readers.noteRead(doc, identity: v1, by: 100)
        readers.noteRead(doc, identity: v1, by: 200)
        XCTAssertTrue(readers.othersRead(doc, current: v1, except: 200))
        XCTAssertFalse(readers.othersRead(doc, current: v2, except: 200), "nobody read v2")
        readers.noteRead(doc, identity: v2, by: 100)
        XCTAssertFalse(readers.othersRead(doc, current: v1, except: 200), "100 moved on to v2")
        XCTAssertTrue(readers.hasReaders(doc))
        XCTAssertFalse(readers.hasReaders(try ItemPath("nobody")))
    }

    func testAnExitedProcessIsDroppedByTheSweepAndAReusedPidIsAnotherProcess() throws {
        let (readers, live) = table()
        let doc = try ItemPath("doc"), b = try ItemPath("dir/b")
        readers.noteRead(doc, identity: v1, by: 100)
        readers.noteRead(b, identity: v2, by: 100)
        readers.noteRead(doc, identity: v1, by: 200)
        XCTAssertEqual(readers.count, 3)
        // 100 exits and its pid goes to a new process (start time 9): its records are not the new one's.
        live.withLock { $0[100] = 9 }
        XCTAssertNil(readers.readVersion(at: doc, by: 100), "a reused pid never inherits a read")
        XCTAssertFalse(readers.othersRead(b, current: v2, except: 1))
        XCTAssertEqual(readers.count, 1, "checking dropped all of 100's records")
        // The sweep drops processes that are gone.
        live.withLock { $0[200] = nil }
        XCTAssertEqual(readers.sweep(), 1)
        XCTAssertEqual(readers.count, 0)
        XCTAssertEqual(readers.processCount, 0)
        XCTAssertFalse(readers.hasReaders(doc))
    }

    /// Several readers of one path, read again and again, then leaving one by one: each (process,
    /// path) is one record, and the others' versions stay as they read them.
    func testReadersOfOnePathAreCountedOnceAndOutliveEachOther() throws {
        let live = Live([100: 1, 200: 2, 300: 3])
        let readers = ImplicitReaders(sweepInterval: 0) { pid in live.withLock { $0[pid] } }
        let doc = try ItemPath("doc"), b = try ItemPath("dir/b")
        for _ in 0..<3 {
            for pid: pid_t in [100, 200, 300] { readers.noteRead(doc, identity: pid == 300 ? v2 : v1, by: pid) }
            readers.noteRead(b, identity: v1, by: 200)
        }
        XCTAssertEqual(readers.count, 4)
        XCTAssertEqual(readers.processCount, 3)
        live.withLock { $0[100] = nil }   // the first reader of doc leaves
        XCTAssertEqual(readers.sweep(), 1)
        XCTAssertEqual(readers.count, 3)
        XCTAssertEqual(readers.readVersion(at: doc, by: 200), v1)
        XCTAssertEqual(readers.readVersion(at: doc, by: 300), v2)
        XCTAssertEqual(readers.liveReaders(doc, current: v1, except: 0), [ProcessKey(pid: 200, start: 2)])
        live.withLock { $0[300] = nil }
        XCTAssertEqual(readers.sweep(), 1)
        XCTAssertEqual(readers.count, 2)
        XCTAssertEqual(readers.readVersion(at: doc, by: 200), v1)
        live.withLock { $0[200] = nil }
        XCTAssertEqual(readers.sweep(), 1)
        XCTAssertEqual(readers.count, 0)
        XCTAssertFalse(readers.hasReaders(doc))
        XCTAssertFalse(readers.hasReaders(b))
    }

    func testTheNewProcessBehindAReusedPidStartsItsOwnRecords() throws {
        let (readers, live) = table()
        let doc = try ItemPath("doc")
        readers.noteRead(doc, identity: v1, by: 100)
        live.withLock { $0[100] = 9 }
        readers.sweep()
        readers.noteRead(doc, identity: v2, by: 100)
        XCTAssertEqual(readers.readVersion(at: doc, by: 100), v2)
        XCTAssertEqual(readers.count, 1)
    }

    func testTheSweepTimerDropsExitedProcessesWithinASecond() throws {
        let live = Live([300: 3])
        let readers = ImplicitReaders(sweepInterval: 0.1) { pid in live.withLock { $0[pid] } }
        readers.noteRead(try ItemPath("doc"), identity: v1, by: 300)
        live.withLock { $0[300] = nil }
        let deadline = Date().addingTimeInterval(1)
        while readers.count > 0 && Date() < deadline { usleep(10_000) }
        XCTAssertEqual(readers.count, 0)
    }

    func testLostUpdatesOptionIsParsedAndChecked() throws {
        XCTAssertEqual(try MountOptions.parse([]).store.lostUpdates, .keep)
        XCTAssertEqual(try MountOptions.parse(["lost_updates=off"]).store.lostUpdates, .off)
        XCTAssertEqual(try MountOptions.parse(["lost_updates=refuse"]).store.lostUpdates, .refuse)
        XCTAssertThrowsError(try MountOptions.parse(["lost_updates=maybe"]))
        XCTAssertThrowsError(try MountOptions.parse(["lost_updates"]))
        XCTAssertTrue(MountOptions.documentation.contains("lost_updates=keep|off|refuse"))
    }
}
