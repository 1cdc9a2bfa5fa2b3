import XCTest
import Coordination
import LinuxGNU
import Synchronization
@testable import CoordFS

/// A handle of the tests' own making (type 0), written as its bytes.
extension FileHandleKey: ExpressibleByArrayLiteral {
    public init(arrayLiteral bytes: UInt8...) { self.init(type: 0, bytes: bytes) }
}

/// The matching of the mount's own passthrough writes with the backing watcher's events: by what
/// the file is (as the mount's release left it), not by who closed it or when.
final class PassthroughWritesTests: XCTestCase {
    private let file = NSObject(), other = NSObject()
    /// A table the watcher's closures and the test share.
    private final class Box<T: Sendable>: Sendable {
        let table: Mutex<T>
        init(_ value: T) { table = Mutex(value) }
        func withLock<R>(_ body: (inout T) -> R) -> R { table.withLock { body(&$0) } }
    }
    /// The files' states as the watcher would read them now (nil: gone).
    private let states = Box<[ObjectIdentifier: PassthroughWrites.FileState]>([:])

    /// The handles read through the nodes, by node.
    private let handlesRead = Box<[ObjectIdentifier: Int]>([:])
    private let handles = Box<[ObjectIdentifier: FileHandleKey]>([:])

    /// The opens told they wrote, and told to compare with the file as it is now, by open.
    private let wrote = Box<[ObjectIdentifier: Int]>([:]), rebased = Box<[ObjectIdentifier: Int]>([:])
    /// The opens the daemon serves that wrote.
    private let servedWrote = Box<Set<ObjectIdentifier>>([])

    private func make(kept: Int = 1024) -> PassthroughWrites {
        PassthroughWrites(keptReleases: kept, stateOf: { [states] node in states.withLock { $0[ObjectIdentifier(node)] } },
                          handleOf: { [handles, handlesRead] node in
                              handlesRead.withLock { $0[ObjectIdentifier(node), default: 0] += 1 }
                              return handles.withLock { $0[ObjectIdentifier(node)] }
                          },
                          wrote: { [wrote] open in wrote.withLock { $0[ObjectIdentifier(open), default: 0] += 1 } },
                          rebase: { [rebased] open in rebased.withLock { $0[ObjectIdentifier(open), default: 0] += 1 } },
                          servedWrote: { [servedWrote] open in servedWrote.withLock { $0.contains(ObjectIdentifier(open)) } })
    }
    private func count(_ box: Box<[ObjectIdentifier: Int]>, _ open: AnyObject) -> Int { box.withLock { $0[ObjectIdentifier(open)] ?? 0 } }
    private func times(_ s: PassthroughWrites.FileState) -> PassthroughWrites.Times { .init(s) }
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
        XCTAssertTrue(w.remembers(file), "until the daemon's own descriptor of the open is closed")
        w.closedByDaemon(file)
        XCTAssertFalse(w.remembers(file), "nothing kept of it")
    }

    /// The daemon's own descriptor of a released open, dropped last by another process that shared
    /// it (a child of the daemon's process between its fork and its exec): its close event comes
    /// with that process's pid, after the release, the file as the release left it.
    func testTheDaemonsDescriptorClosedLastByAnotherProcessIsTheMounts() {
        let w = make()
        let a = NSObject()
        w.opened(file, by: 10, open: a, atOpen: times(set(file, 1)), flushes: true)
        w.flushed(file, open: a, by: 10)
        _ = set(file, 2)
        XCTAssertEqual(w.whose(file, pid: 10, close: true), .mounts, "the writer's close, read before its release")
        w.released(file, by: 10, open: a, state: set(file, 2))
        w.reads.add(5, ordering: .relaxed) // read long after
        XCTAssertEqual(w.whose(file, pid: 77, close: true), .mounts, "the daemon's descriptor, closed last by another process")
        XCTAssertFalse(w.remembers(file), "nothing more to come")
        _ = set(file, 3)
        XCTAssertEqual(w.whose(file, pid: 78, close: true), .beside, "a write beside the mount after it")
        // A write beside the mount before the daemon's descriptor was closed is still told.
        w.opened(file, by: 11, open: a, atOpen: nil, flushes: true)
        w.flushed(file, open: a, by: 11)
        _ = set(file, 4)
        XCTAssertEqual(w.whose(file, pid: 11, close: true), .mounts)
        w.released(file, by: 11, open: a, state: set(file, 4))
        _ = set(file, 5)
        XCTAssertEqual(w.whose(file, pid: 79, close: true), .beside, "changed since the release")
        XCTAssertFalse(w.remembers(file), "changed: nothing left to match")
    }

    /// An open the daemon serves itself (an append of a presented document, `passthrough=off`): the
    /// daemon's descriptor, dropped last by a process the daemon's process spawned, closes after the
    /// release, with that process's pid: the mount's, also once the next such open wrote the file
    /// (its release tells that change); a change beside the mount is still one.
    func testTheDaemonsDescriptorOfAServedOpenDroppedLastByAnotherProcessIsTheMounts() {
        let w = make()
        let a = NSObject(), b = NSObject()
        w.servedOpened(file, open: a)
        w.servedReleased(file, open: a, state: set(file, 1))
        XCTAssertEqual(w.whose(file, pid: 77, close: true), .mounts, "as the release left it")
        XCTAssertFalse(w.remembers(file), "nothing more to come")
        // The next served open wrote before the close of the first one's descriptor was read.
        w.servedOpened(file, open: a)
        w.servedReleased(file, open: a, state: set(file, 2))
        w.servedOpened(file, open: b)
        servedWrote.withLock { _ = $0.insert(ObjectIdentifier(b)) }
        _ = set(file, 3)
        XCTAssertEqual(w.whose(file, pid: 78, close: true), .mountsWhileHeld, "b's release tells the change")
        w.servedReleased(file, open: b, state: set(file, 3))
        XCTAssertTrue(w.closedByDaemon(file), "b's descriptor, closed by the daemon")
        XCTAssertFalse(w.remembers(file), "nothing more to come")
        // A served open that wrote nothing tells nothing: a close that finds the file changed is beside the mount.
        w.servedOpened(file, open: a)
        w.servedReleased(file, open: a, state: set(file, 4))
        w.servedOpened(file, open: b)
        servedWrote.withLock { $0 = [] }
        _ = set(file, 5)
        XCTAssertEqual(w.whose(file, pid: 79, close: true), .beside)
        XCTAssertEqual(w.whose(other, pid: 79, close: true), .beside, "another file")
    }

    /// A file the mount still has open for writing, written beside the mount by another process.
    func testAWriteBesideTheMountWhileTheMountHoldsTheFileIsNotOwn() {
        let w = make()
        w.opened(file, by: 10)
        _ = set(file, 2)
        XCTAssertTrue(w.isOwn(file, pid: 10, close: false), "its own write")
        _ = set(file, 3)
        XCTAssertFalse(w.isOwn(file, pid: 11, close: false))
        // Its close cannot be told from the last close of the mount's open by a process that
        // inherited the descriptor: the open's release tells the change (the file changed since
        // the open), and the watcher only drops the kernel's cached attributes.
        XCTAssertEqual(w.whose(file, pid: 11, close: true), .mountsWhileHeld)
    }

    /// A child that inherited the descriptor closes it last, and the watcher reads that close before
    /// the daemon handles the open's RELEASE: the mount's own, whoever closed it.
    func testACloseByAnyProcessWhileTheMountHoldsTheFileOpenIsTheMounts() {
        let w = make()
        let open = NSObject()
        w.opened(file, by: 10, open: open, atOpen: times(set(file, 1)))
        _ = set(file, 2) // the child's write
        XCTAssertEqual(w.whose(file, pid: 99, close: false), .beside, "a write alone is not told, and not known whose")
        XCTAssertEqual(w.whose(file, pid: 99, close: true), .mountsWhileHeld)
        XCTAssertEqual(w.whose(file, pid: 98, close: true), .mountsWhileHeld, "whoever closed it")
        w.released(file, by: 10, open: open, state: set(file, 2))
        XCTAssertEqual(w.whose(file, pid: 97, close: true), .mounts, "as the release left it")
        _ = set(file, 3)
        XCTAssertEqual(w.whose(file, pid: 97, close: true), .beside, "changed after the release: beside the mount")
    }

    /// A close read while the mount holds the file, but the file is as it was when every open held
    /// began: none of them will tell a change, so this one was made beside the mount before.
    func testACloseWhileHeldOfAFileUnchangedSinceEachOpenBeganIsBesideTheMount() {
        let w = make()
        let a = NSObject(), b = NSObject()
        let s = set(file, 2) // written beside the mount, its close not read yet
        w.opened(file, by: 10, open: a, atOpen: times(s))
        w.opened(file, by: 11, open: b, atOpen: times(s))
        XCTAssertEqual(w.whose(file, pid: 99, close: true), .beside)
        w.released(file, by: 11, open: b, state: s)
        _ = set(file, 3) // written beside the mount again
        w.opened(file, by: 12, open: b, atOpen: nil) // an O_TRUNC open: a change by itself
        XCTAssertEqual(w.whose(file, pid: 99, close: true), .mountsWhileHeld, "that open's release tells it")
    }

    /// Every open held flushes (a presented file): who closed a descriptor of it is known, so a
    /// close by any other process is a write beside the mount, told at once, and the open's release
    /// tells only what changed after it (or that it wrote itself); a close by a process that
    /// flushed it is the mount's, as before.
    func testWhenEveryHeldOpenFlushesACloseByAProcessThatFlushedNoneIsBesideTheMount() {
        let w = make()
        let a = NSObject()
        w.opened(file, by: 10, open: a, atOpen: times(set(file, 1)), flushes: true)
        _ = set(file, 2)
        XCTAssertEqual(w.whose(file, pid: 10, close: false), .mounts, "the holder's write")
        XCTAssertEqual(count(wrote, a), 1, "and its release tells it, whatever is told meanwhile")
        _ = set(file, 3)
        XCTAssertEqual(w.whose(file, pid: 11, close: false), .beside)
        XCTAssertEqual(w.whose(file, pid: 11, close: true), .beside, "flushed nothing: beside the mount, told now")
        XCTAssertEqual(count(rebased, a), 1, "the release compares with the file as it was told")
        w.flushed(file, open: a, by: 99) // a child that inherited the descriptor closes it
        _ = set(file, 4)
        XCTAssertEqual(w.whose(file, pid: 99, close: true), .mountsWhileHeld, "its last close: the mount's")
        XCTAssertEqual(count(rebased, a), 1)
        w.flushed(file, open: a, by: 10)
        w.released(file, by: 10, open: a, state: set(file, 4))
        XCTAssertEqual(w.whose(file, pid: 99, close: true), .mounts, "as the release left it")
    }

    /// One open held without FLUSH (opened before its file was presented): who closed it is not
    /// known, and a close by another process while it is held waits for the releases, as before.
    func testAHeldOpenWithoutFlushKeepsTheHeldRule() {
        let w = make()
        let a = NSObject(), b = NSObject()
        let s = set(file, 1)
        w.opened(file, by: 10, open: a, atOpen: times(s), flushes: true)
        w.opened(file, by: 12, open: b, atOpen: times(s), flushes: false)
        _ = set(file, 2)
        XCTAssertEqual(w.whose(file, pid: 11, close: true), .mountsWhileHeld)
        XCTAssertEqual(count(rebased, a) + count(rebased, b), 0)
        w.released(file, by: 12, open: b, state: set(file, 2))
        _ = set(file, 3)
        XCTAssertEqual(w.whose(file, pid: 11, close: true), .beside, "once only opens that flush are held")
    }

    /// A write read from a process that closed nothing yet (a child writing through an inherited
    /// descriptor, or a writer beside the mount): a close beside the mount told meanwhile leaves the
    /// release's comparison alone; once that process flushes the open, its write is the open's.
    func testAWriteOfAProcessThatHasNotClosedYetKeepsTheReleasesComparison() {
        let w = make()
        let a = NSObject()
        w.opened(file, by: 10, open: a, atOpen: times(set(file, 1)), flushes: true)
        _ = set(file, 2)
        XCTAssertEqual(w.whose(file, pid: 99, close: false), .beside, "not known whose yet")
        _ = set(file, 3)
        XCTAssertEqual(w.whose(file, pid: 11, close: true), .beside)
        XCTAssertEqual(count(rebased, a), 0, "the child's write is still the release's to tell")
        XCTAssertEqual(count(wrote, a), 0)
        w.flushed(file, open: a, by: 99)
        XCTAssertEqual(count(wrote, a), 1, "the child wrote through the open")
    }

    /// The closers of an open released while another is held: the close event of its last closer
    /// may be read after its release, and is still the mount's.
    func testTheLastCloserOfAReleasedOpenIsTheMountsWhileAnotherIsHeld() {
        let w = make()
        let a = NSObject(), b = NSObject()
        let s = set(file, 1)
        w.opened(file, by: 10, open: a, atOpen: times(s), flushes: true)
        w.opened(file, by: 12, open: b, atOpen: times(s), flushes: true)
        w.flushed(file, open: a, by: 99)
        w.released(file, by: 10, open: a, state: set(file, 2))
        _ = set(file, 3) // b's holder writes meanwhile (its event not read yet)
        XCTAssertEqual(w.whose(file, pid: 99, close: true), .mountsWhileHeld)
        w.reads.add(3, ordering: .relaxed)
        XCTAssertEqual(w.whose(file, pid: 99, close: true), .beside, "read long after: no longer")
    }

    /// More processes flushed an open than are remembered: its closers are no longer known.
    func testAnOpenWithMoreClosersThanRememberedKeepsTheHeldRule() {
        let w = make()
        let a = NSObject()
        w.opened(file, by: 10, open: a, atOpen: times(set(file, 1)), flushes: true)
        for pid in 1000..<Int32(1000 + PassthroughWrites.maxPids + 1) { w.flushed(file, open: a, by: pid) }
        _ = set(file, 2)
        XCTAssertEqual(w.whose(file, pid: 11, close: true), .mountsWhileHeld)
    }

    /// A release reads no file handle: the watcher learns it from the events that find the file by
    /// its name, and reads it through the node only for an event whose handle it does not know,
    /// once per file.
    func testAReleaseReadsNoHandleAndTheWatcherReadsEachAtMostOnce() {
        let w = make()
        handles.withLock { $0[ObjectIdentifier(file)] = [1, 2, 3] }
        w.opened(file, by: 10)
        w.released(file, by: 10, state: set(file, 2))
        XCTAssertEqual(handlesRead.withLock { $0 }, [:], "none read at the release")
        XCTAssertEqual(w.whose(handle: [9], nil, pid: 99, close: true), .beside, "another file")
        XCTAssertEqual(handlesRead.withLock { $0[ObjectIdentifier(file)] }, 1)
        XCTAssertEqual(w.whose(handle: [8], nil, pid: 99, close: true), .beside)
        XCTAssertEqual(handlesRead.withLock { $0[ObjectIdentifier(file)] }, 1, "read once")
        XCTAssertEqual(w.whose(handle: [1, 2, 3], nil, pid: 99, close: true), .mounts, "renamed since: found by its handle")
        // A file whose first event finds it by name takes the handle the event reports.
        w.opened(other, by: 10)
        w.released(other, by: 10, state: set(other, 2))
        XCTAssertEqual(w.whose(handle: [4, 5], other, pid: 10, close: false), .mounts)
        XCTAssertEqual(w.whose(handle: [4, 5], nil, pid: 99, close: true), .mounts)
        XCTAssertNil(handlesRead.withLock { $0[ObjectIdentifier(other)] })
    }

    /// `zip`'s probe: a file written and released at a name, then removed, and another written,
    /// released, renamed to that name and chmodded, before the first one's close is read. That
    /// close finds the second file's node at its name, but reports another handle: the node's,
    /// read then (it was opened by another name), says it is another file, and the close is the
    /// first one's. Before, it was taken for the second file's (whose entry took its handle), and
    /// the second file's own close, read after, was a change beside the mount.
    func testACloseOfAFileRemovedIsNotTakenForTheFileRenamedToItsNameSince() throws {
        let w = make()
        let probe = NSObject(), temp = NSObject()
        handles.withLock { $0[ObjectIdentifier(probe)] = [1]; $0[ObjectIdentifier(temp)] = [2] }
        let archive = try ItemPath("d/z.zip"), tempName = try ItemPath("d/ziAbCd")
        w.opened(probe, by: 10, at: archive)
        w.released(probe, by: 10, state: set(probe, 1))
        w.opened(temp, by: 10, at: tempName)
        w.released(temp, by: 10, state: set(temp, 2))
        _ = set(temp, 3) // renamed to the archive's name and chmodded through the mount
        XCTAssertEqual(w.whose(handle: [1], temp, name: "z.zip", pid: 10, close: true), .mounts, "the probe's close")
        XCTAssertEqual(handlesRead.withLock { $0[ObjectIdentifier(temp)] }, 1, "the node's handle read once")
        XCTAssertEqual(w.whose(handle: [2], nil, path: tempName, pid: 10, close: true), .mounts, "the temp file's close")
    }

    /// A file whose close events were all matched (its entry let go) is written again through
    /// another node of the same file (the kernel looked it up anew, under the name it was renamed
    /// to beside the mount): its events are still the mount's own. Before, the handle learned by
    /// the event that let the entry go stayed mapped to it, and every later event of the file found
    /// nothing there: a change beside the mount. The same for a handle learned at a release.
    func testAHandleLearnedAsItsEntryIsLetGoDoesNotOutliveIt() {
        let w = make()
        let renamed = NSObject()
        w.opened(file, by: 10)
        w.released(file, by: 10, state: set(file, 2))
        w.closedByDaemon(file) // the daemon's own descriptor of the open
        XCTAssertEqual(w.whose(handle: [1, 2, 3], file, pid: 10, close: true), .mounts)
        XCTAssertFalse(w.remembers(file), "all its closes matched")
        w.opened(renamed, by: 11)
        w.released(renamed, by: 11, state: set(renamed, 3))
        w.closedByDaemon(renamed)
        XCTAssertEqual(w.whose(handle: [1, 2, 3], renamed, pid: 11, close: true), .mounts)
        XCTAssertFalse(w.remembers(renamed))
        // The close event read before the release, which learns the handle (as in a test).
        let early = NSObject(), again = NSObject()
        w.opened(early, by: 12)
        XCTAssertEqual(w.whose(early, pid: 12, close: true), .mounts, "the writer's own close, read early")
        w.released(early, by: 12, state: set(early, 4), handle: [7])
        w.closedByDaemon(handle: [7], nil)
        XCTAssertFalse(w.remembers(early))
        w.opened(again, by: 13)
        w.released(again, by: 13, state: set(again, 5))
        XCTAssertEqual(w.whose(handle: [7], again, pid: 13, close: true), .mounts)
    }

    /// The kernel forgot a file after its release and looked it up again: a new node, while the
    /// entry of the old one (kept for a close still to come: a child's last close read before the
    /// release) knows the file's handle. The new open's events, which report that handle, are its
    /// own, and the two entries become one; a write beside the mount after is still told.
    func testAFileTheKernelForgotAndLookedUpAgainIsOneFile() {
        let w = make()
        let old = NSObject(), new = NSObject(), a = NSObject(), b = NSObject()
        handles.withLock { $0[ObjectIdentifier(old)] = [1, 2]; $0[ObjectIdentifier(new)] = [1, 2] }
        func both(_ ctime: Int) -> PassthroughWrites.FileState { _ = set(old, ctime); return set(new, ctime) }
        w.opened(old, by: 10, open: a, atOpen: times(both(1)), flushes: true)
        _ = both(2)
        XCTAssertEqual(w.whose(handle: [1, 2], old, pid: 10, close: false), .mounts)
        w.flushed(old, open: a, by: 10)
        _ = both(3) // a child writes through the descriptor it inherited, and closes it last
        w.flushed(old, open: a, by: 11)
        XCTAssertEqual(w.whose(handle: [1, 2], nil, pid: 11, close: true), .mountsWhileHeld, "the child's last close, before the release")
        w.released(old, by: 10, open: a, state: both(3))
        XCTAssertTrue(w.remembers(old))
        w.opened(new, by: 20, open: b, atOpen: nil, flushes: true)
        _ = both(4)
        XCTAssertEqual(w.whose(handle: [1, 2], new, pid: 20, close: false), .mounts, "the new open's write")
        XCTAssertFalse(w.remembers(old), "one entry, the new node's")
        XCTAssertEqual(handlesRead.withLock { $0[ObjectIdentifier(new)] }, 1, "its handle read once")
        w.flushed(new, open: b, by: 20)
        XCTAssertEqual(w.whose(handle: [1, 2], new, pid: 20, close: true), .mounts, "its close")
        w.released(new, by: 20, open: b, state: both(4))
        w.closedByDaemon(handle: [1, 2], new)
        _ = both(5)
        XCTAssertEqual(w.whose(handle: [1, 2], new, pid: 30, close: true), .beside, "a write beside the mount")
        XCTAssertEqual(handlesRead.withLock { $0[ObjectIdentifier(new)] }, 1)
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
