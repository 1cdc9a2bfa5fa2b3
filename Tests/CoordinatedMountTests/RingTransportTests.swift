import XCTest
import Foundation
import Glibc
import Synchronization
import Coordination
import Linux
import TestSupport
@testable import CoordFS
@testable import FuseKit

/// The kernel's FUSE over io_uring switch (`enable_uring`), turned on for a test when it is off and
/// put back after. Skips when the kernel has no such queues (built without CONFIG_FUSE_IO_URING).
enum KernelRingSwitch {
    static let path = "/sys/module/fuse/parameters/enable_uring"

    /// Turns the switch on; returns what to put back (nil: nothing to do).
    static func turnOn() throws -> String? {
        guard let value = try? String(contentsOfFile: path, encoding: .utf8) else {
            throw XCTSkip("this kernel has no FUSE over io_uring (\(path) is missing)")
        }
        if value.hasPrefix("Y") { return nil }
        guard (try? "Y".write(toFile: path, atomically: false, encoding: .utf8)) != nil else {
            throw XCTSkip("cannot turn on \(path) (needs root)")
        }
        return value.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    static func restore(_ value: String?) {
        if let value { try? value.write(toFile: path, atomically: false, encoding: .utf8) }
    }
}

/// An in-process mount with the kernel's FUSE over io_uring turned on (and put back after).
class KernelRingMountTestCase: InProcessMountTestCase {
    private var restore: String?

    override func setUpWithError() throws {
        restore = try KernelRingSwitch.turnOn()
        try super.setUpWithError()
    }

    override func tearDownWithError() throws {
        try super.tearDownWithError()
        KernelRingSwitch.restore(restore)
    }

    /// A create, a read and an unlink through the mount went through `transport`: through the ring's
    /// entries on io_uring, none of them on /dev/fuse.
    func assertACreateReadAndUnlinkGo(through transport: FuseTransportInUse,
                                      file: StaticString = #filePath, line: UInt = #line) throws {
        try sh("echo a > f && cat f && rm f")
        XCTAssertEqual(daemon.session!.transportInUse, transport, file: file, line: line)
        if transport == .dev {
            XCTAssertEqual(daemon.session!.requestsThroughRing, 0, file: file, line: line)
        } else {
            XCTAssertGreaterThan(daemon.session!.requestsThroughRing, 0, file: file, line: line)
        }
    }
}

/// Requests through io_uring (`-o transport=uring`, FuseKit's `RingTransport`): they come through the
/// ring's entries, a parked request's reply from another thread goes back through its entry (and the
/// entry serves again), and the kernel ending the connection with a request parked on the ring ends
/// the daemon. (The kernel's interrupt of a parked request: `InterruptTests`, on both transports.)
final class RingTransportTests: KernelRingMountTestCase {
    override func configure(_ options: inout MountOptions) {
        super.configure(&options)
        options.transport = .uring
        options.coordination.askTimeout = 30
    }

    private var session: FuseSession { daemon.session! }

    func testRequestsComeThroughTheRing() throws {
        XCTAssertEqual(session.transportInUse, .uring)
        let before = session.requestsThroughRing
        try sh("mkdir d && for i in $(seq 1 50); do echo $i > d/f$i; done && cat d/f7 d/f50 > d/both && ls d | wc -l > count && rm -r d")
        XCTAssertEqual(try read("count"), "51\n")
        XCTAssertGreaterThanOrEqual(session.requestsThroughRing - before, 200, "creates, writes, lookups and unlinks came through the ring")
        XCTAssertFalse(FileManager.default.fileExists(atPath: backing + "/d"))
        XCTAssertEqual(session.ringUsage.pullsSent, 0, "nothing was parked, so nothing was pulled: \(session.ringUsage)")
    }

    /// Each unlink waits for the presenter, whose answer comes on another thread: the reply goes back
    /// through the entry the request came in. More unlinks than a queue has entries: were an entry
    /// not given back, the mount would stop answering.
    func testRepliesToParkedRequestsGoBackThroughTheirEntries() throws {
        try FileManager.default.createDirectory(atPath: backing + "/d", withIntermediateDirectories: true)
        let count = RingTransport.entriesPerQueue * 2 + 8
        for i in 0..<count { try write("d/f\(i)", "x") }
        let presenter = try present("d", behaviour: .init(delay: 0.005))
        let before = session.requestsThroughRing
        try sh("for i in $(seq 0 \(count - 1)); do rm d/f$i; done", timeout: 60)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: backing + "/d"), [])
        XCTAssertGreaterThanOrEqual(presenter.log.filter { $0.hasPrefix("accommodateSubitemDeletion") }.count, count,
                                    "every unlink waited for the presenter: \(presenter.log.prefix(5))")
        XCTAssertGreaterThanOrEqual(session.requestsThroughRing - before, count)
        XCTAssertEqual(try sh("echo after > e && cat e").output, "after\n", "the mount still answers")
    }

    /// The kernel ends the connection (as at the end of an unmount, here at once through
    /// /sys/fs/fuse/connections/N/abort) while a request is parked on the ring: its caller gets an
    /// error, every entry is ended, and the daemon's loop and the ring's threads end.
    func testEndingTheConnectionWithARequestParkedOnTheRingEndsTheDaemon() throws {
        try write("doc.txt", "alpha\n")
        _ = try present("doc.txt", behaviour: .init(hang: true))
        let cat = Process()
        cat.executableURL = URL(fileURLWithPath: "/bin/cat")
        cat.arguments = [mnt + "/doc.txt"]
        cat.standardOutput = FileHandle.nullDevice
        cat.standardError = FileHandle.nullDevice
        try cat.run()
        let deadline = Date().addingTimeInterval(10)
        func parked() -> Int { let s = coordinator.status(); return s.waiting.count + s.held.count }
        while parked() == 0 && Date() < deadline { usleep(10_000) }
        XCTAssertGreaterThan(parked(), 0, "the open waits for the presenter")
        var st = stat()
        XCTAssertEqual(stat(mnt, &st), 0)
        // The FUSE control file system, mounted for the test when it is not (and unmounted after).
        let control = "/sys/fs/fuse/connections"
        var mountedControl = false
        if access(control + "/\(minor(st.st_dev))", F_OK) != 0 {
            XCTAssertEqual(Glibc.mount("fusectl", control, "fusectl", 0, nil), 0, "mount fusectl: \(String(cString: strerror(errno)))")
            mountedControl = true
        }
        defer { if mountedControl { umount2(control, Int32(MNT_DETACH)) } }
        let abort = control + "/\(minor(st.st_dev))/abort"
        let started = Date()
        XCTAssertNoThrow(try "1".write(toFile: abort, atomically: false, encoding: .utf8), abort)
        let stopped = DispatchSemaphore(value: 0)
        let d = daemon!
        Thread.detachNewThread {
            d.stopAndWait()
            stopped.signal()
        }
        XCTAssertEqual(stopped.wait(timeout: .now() + 20), .success)
        XCTAssertTrue(d.hasFinished, "the daemon's loop ended with a request parked on the ring")
        XCTAssertLessThan(Date().timeIntervalSince(started), 10)
        let waited = Date().addingTimeInterval(10)
        while cat.isRunning && Date() < waited { usleep(10_000) }
        XCTAssertFalse(cat.isRunning, "the waiting cat got its answer when the mount went away")
        if cat.isRunning { cat.terminate() }
        XCTAssertNil(MountTable.coordfsMount(at: mnt))
    }

    /// The daemon told to end (in process, `stopAndWait`: not a signal's detach-and-serve) while a
    /// file stays open in the detached mount: its serving loop ends within the wait. Before, with
    /// the ring's holder watching /dev/fuse for the reader (and serving the forgets and interrupts
    /// that used to wake it), the reader slept on its bell, or (watching off) on the device, and
    /// the loop lasted until the connection ended: the file's last close.
    func testTheDaemonToldToEndWithAFileHeldOpenEnds() throws {
        XCTAssertEqual(session.transportInUse, .uring)
        try assertTheDaemonToldToEndWithAFileHeldOpenEnds(self)
    }

    private func minor(_ dev: UInt) -> UInt { (dev & 0xff) | ((dev >> 12) & 0xffffff00) }
}

/// A presenter that answers no ask until it is opened: the accesses that ask it stay parked.
final class GatePresenter: FilePresenter, @unchecked Sendable {
    let path: ItemPath
    private let opened = Mutex(false)
    let asks = Mutex(0)
    init(path: ItemPath) { self.path = path }
    var presentedItemPath: ItemPath? { path }
    func open() { opened.withLock { $0 = true } }
    private func waitUntilOpen() async {
        asks.withLock { $0 += 1 }
        while !opened.withLock({ $0 }) { try? await Task.sleep(for: .milliseconds(10)) }
    }
    func relinquishPresentedItem(toReader reader: AccessOrigin) async -> Reacquirer? { await waitUntilOpen(); return nil }
    func relinquishPresentedItem(toWriter writer: AccessOrigin) async -> Reacquirer? { await waitUntilOpen(); return nil }
    func accommodatePresentedSubitemDeletion(at path: ItemPath) async throws { await waitUntilOpen() }
}

/// `count` processes of `nobody`'s, each pinned to CPU 0, each reading `file` into `out`/N (and its
/// errors into `out`/N.err), started at once; the returned process ends when they all have.
func startNobodysReadersOnCPU0(_ count: Int, of file: String, into out: String) throws -> Process {
    let readers = Process()
    readers.executableURL = URL(fileURLWithPath: "/bin/sh")
    readers.arguments = ["-c", "for i in $(seq 1 \(count)); do taskset -c 0 setpriv --reuid=65534 --regid=65534 --clear-groups "
                         + "cat '\(file)' > '\(out)/'$i 2> '\(out)/'$i.err & done; wait"]
    readers.standardOutput = FileHandle.nullDevice
    readers.standardError = FileHandle.nullDevice
    try readers.run()
    return readers
}

/// How the readers of `startNobodysReadersOnCPU0` ended: how many read `text`, and how many failed with
/// EAGAIN; anything else fails the test.
func outcomesOfNobodysReaders(_ count: Int, in out: String, expecting text: String,
                              file: StaticString = #filePath, line: UInt = #line) -> (read: Int, refused: Int) {
    var read = 0, refused = 0
    for i in 1...count {
        let got = (try? String(contentsOfFile: "\(out)/\(i)", encoding: .utf8)) ?? ""
        let error = (try? String(contentsOfFile: "\(out)/\(i).err", encoding: .utf8)) ?? ""
        if got == text && error.isEmpty { read += 1 }
        else if got.isEmpty && error.contains("Resource temporarily unavailable") { refused += 1 }
        else { XCTFail("reader \(i): \(got.debugDescription) \(error.debugDescription)", file: file, line: line) }
    }
    return (read, refused)
}

/// nobody's processes named `name` waiting in the kernel for an answer of the daemon
/// (`request_wait_answer`): parked in the daemon, delivered to an entry and not taken yet, or queued
/// in the kernel.
func nobodysProcessesWaiting(named name: String) -> Int {
    var n = 0
    for pid in (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? [] where Int(pid) != nil {
        guard let status = readWholeFile("/proc/\(pid)/status"),
              status.contains("Name:\t\(name)\n"), status.contains("Uid:\t65534\t"),
              let stack = readWholeFile("/proc/\(pid)/stack") else { continue }
        if stack.contains("request_wait_answer") { n += 1 }
    }
    return n
}

/// The ring's holder held in the idle work it runs while it polls after a request (the mount's last
/// one, or a statfs made here when it polls no more), as if it had lost its core, until `open()`:
/// requests that come meanwhile wait in the kernel, in the queue's free entries or queued behind
/// them. (For a mount with a fixed spin: `spin_adapt=off`.)
final class RingHolderGate: Sendable {
    private let state = Mutex<(closed: Bool, entered: Bool)>((true, false))

    init(_ session: FuseSession, at mountpoint: String, file: StaticString = #filePath, line: UInt = #line) {
        session.setIdleWork { [self] in
            while self.state.withLock({ $0.entered = true; return $0.closed }) { usleep(1_000) }
            return false
        }
        // A holder still polling after the last request enters it at once; a statfs would wait
        // behind it. One that no longer polls (the spin is over) is woken by a statfs, which it
        // answers before it polls again.
        let polling = Date().addingTimeInterval(0.5)
        while !state.withLock({ $0.entered }) && Date() < polling { usleep(1_000) }
        if !state.withLock({ $0.entered }) {
            var fs = statvfs()
            XCTAssertEqual(statvfs(mountpoint, &fs), 0, file: file, line: line)   // a statfs(2): the daemon answers every one
        }
        let held = Date().addingTimeInterval(10)
        while !state.withLock({ $0.entered }) && Date() < held { usleep(1_000) }
        XCTAssertTrue(state.withLock { $0.entered }, "the holder runs its idle work after a request", file: file, line: line)
    }

    func open() { state.withLock { $0.closed = false } }
}

/// An `allow_other` mount through io_uring that `nobody` can reach (the test's folder is mkdtemp's,
/// 0700), for tests that pin nobody's processes to CPU 0 (taskset, setpriv).
class NobodyOnTheRingTestCase: KernelRingMountTestCase {
    override func configure(_ options: inout MountOptions) {
        super.configure(&options)
        options.transport = .uring
        options.allowOther = true
    }

    override func setUpWithError() throws {
        try super.setUpWithError()
        chmod(root, 0o755)
        guard access("/usr/bin/taskset", X_OK) == 0, access("/usr/bin/setpriv", X_OK) == 0 else {
            throw XCTSkip("needs taskset and setpriv (util-linux)")
        }
    }

    var session: FuseSession { daemon.session! }

    /// Opens `presenter`, waits (up to 20 s) for `readers` (`startNobodysReadersOnCPU0`, `count` of
    /// them) to end, and returns how they ended (`outcomesOfNobodysReaders`).
    func answer(_ presenter: GatePresenter, thenCollect readers: Process, _ count: Int, in out: String,
                file: StaticString = #filePath, line: UInt = #line) -> (read: Int, refused: Int) {
        presenter.open()
        let done = Date().addingTimeInterval(20)
        while readers.isRunning && Date() < done { usleep(10_000) }
        XCTAssertFalse(readers.isRunning, "the readers ended once answered", file: file, line: line)
        return outcomesOfNobodysReaders(count, in: out, expecting: "held\n", file: file, line: line)
    }
}

/// One local user's parked requests on one CPU never hold up another user's requests on that CPU
/// through io_uring (an `allow_other` mount, `transport=uring`): the kernel gives a CPU's requests
/// to that CPU's queue's free entries only, so the ring adds an entry for each parked request; one
/// user's parked requests are bounded by `max_user_waits`, and so are the entries added for them.
final class RingParkedRequestsTests: NobodyOnTheRingTestCase {
    static let maxUserWaits = RingTransport.entriesPerQueue + 8
    static let parkers = RingTransport.entriesPerQueue + 16

    override func configure(_ options: inout MountOptions) {
        super.configure(&options)
        options.coordination.askTimeout = 30
        options.limits.maxUserWaits = Self.maxUserWaits
    }

    /// Runs `command` (pinned to CPU 0) and returns how long it took; fails the test when it failed.
    private func timed(_ command: String, file: StaticString = #filePath, line: UInt = #line) throws -> Double {
        let started = Date()
        try sh("taskset -c 0 " + command, timeout: 20, file: file, line: line)
        return Date().timeIntervalSince(started)
    }

    func testOneUsersParkedRequestsOnACPUDoNotHoldUpAnotherUsersRequestsThere() throws {
        try write("held.txt", "held\n")
        try write("other.txt", "other\n")
        chmod(backing + "/held.txt", 0o644)
        chmod(backing + "/other.txt", 0o644)
        let out = root + "/out"
        mkdir(out, 0o755)
        XCTAssertEqual(session.transportInUse, .uring)
        let presenter = GatePresenter(path: try ItemPath("held.txt"))
        _ = try coordinator.addFilePresenter(presenter)
        defer { presenter.open() }

        // nobody opens the presented file from `parkers` processes, all on CPU 0: each open waits
        // for the presenter (up to ask_timeout, 30 s), max_user_waits of them parked.
        let parkers = try startNobodysReadersOnCPU0(Self.parkers, of: mnt + "/held.txt", into: out)
        defer { if parkers.isRunning { presenter.open(); parkers.waitUntilExit() } }
        let deadline = Date().addingTimeInterval(20)
        while session.ringUsage.parked < Self.maxUserWaits && Date() < deadline { usleep(10_000) }
        XCTAssertEqual(session.ringUsage.parked, Self.maxUserWaits,
                       "nobody's opens are parked on the ring, as many as max_user_waits: \(session.ringUsage)")
        XCTAssertEqual(daemon.coordinated!.waits.count(65534), Self.maxUserWaits)
        usleep(200_000)  // the opens beyond the bound have failed by now
        XCTAssertTrue(parkers.isRunning, "the parked opens wait for the presenter")

        // Another user's requests on the same CPU are answered at once, not at the ask's deadline.
        let stat = try timed("stat other.txt")
        let read = try timed("cat other.txt")
        let create = try timed("sh -c 'echo new > created.txt'")
        let list = try timed("ls -l")
        for (what, seconds) in [("stat", stat), ("read", read), ("create", create), ("list", list)] {
            XCTAssertLessThan(seconds, 5, "\(what) on CPU 0 waited behind nobody's parked requests")
        }
        XCTAssertEqual(try String(contentsOfFile: backing + "/created.txt", encoding: .utf8), "new\n")

        // Bounded: an entry was added for each parked request (queue 0's) and no more; those entries
        // hold a page or two each, not their 1 MiB payload buffers.
        let usage = session.ringUsage
        XCTAssertGreaterThanOrEqual(usage.added, Self.maxUserWaits, "\(usage)")
        XCTAssertLessThanOrEqual(usage.added, Self.maxUserWaits + 4, "\(usage)")
        XCTAssertLessThanOrEqual(usage.addedResident, usage.added * 2 * Int(sysconf(Int32(_SC_PAGESIZE))), "\(usage)")
        XCTAssertEqual(usage.parked, Self.maxUserWaits)

        // Answered: the parked opens complete and read the file; those beyond the bound got EAGAIN.
        let (read_, refused) = answer(presenter, thenCollect: parkers, Self.parkers, in: out)
        XCTAssertEqual(read_, Self.maxUserWaits, "every parked open read the file once answered")
        XCTAssertEqual(refused, Self.parkers - Self.maxUserWaits, "the opens beyond max_user_waits failed at once")
        XCTAssertEqual(session.ringUsage.parked, 0)
        XCTAssertEqual(daemon.coordinated!.waits.count(65534), 0)
        XCTAssertEqual(try sh("cat held.txt other.txt").output, "held\nother\n", "the mount still answers")
    }
}

/// Requests the kernel queued on a CPU while that CPU's queue had no free entry are handed out although
/// every request before them is parked and nothing else comes on that CPU. The kernel hands a queued
/// request only to an entry that commits (registering a new one does not take it), and a parked
/// request's entry does not commit until the presenter answers: so a burst of opens larger than the
/// queue's free entries, all parked, left the rest in the kernel, neither parked nor refused, until
/// some other request on that CPU was answered (the ask's deadline at the latest), with free entries
/// in the daemon. Here the ring's holder is held up (in the idle work it runs between its looks, as if
/// it had lost its core) while nobody's opens, all on CPU 0, come, more than the queue's entries;
/// then every open is parked within a bound, and each reads the file once the presenter answers.
final class RingQueuedRequestsTests: NobodyOnTheRingTestCase {
    static let opens = RingTransport.entriesPerQueue * 2 + 8

    override func configure(_ options: inout MountOptions) {
        super.configure(&options)
        options.coordination.askTimeout = 60
        options.limits.maxUserWaits = Self.opens
        // The holder spins (running idle work) after each request.
        options.spinMicroseconds = 100_000
        options.adaptiveSpin = false
    }


    func testRequestsQueuedBehindParkedOnesAreHandedOut() throws {
        XCTAssertEqual(session.transportInUse, .uring)
        let out = root + "/out"
        mkdir(out, 0o755)
        try sh("echo held > held.txt && chmod 644 held.txt")
        let presenter = GatePresenter(path: try ItemPath("held.txt"))
        _ = try coordinator.addFilePresenter(presenter)
        defer { presenter.open() }

        // The holder stops in its idle work after the next request, until the burst is in the kernel.
        let gate = RingHolderGate(session, at: mnt)
        defer { gate.open() }

        let readers = try startNobodysReadersOnCPU0(Self.opens, of: mnt + "/held.txt", into: out)
        defer { if readers.isRunning { presenter.open(); readers.waitUntilExit() } }
        let arrived = Date().addingTimeInterval(20)
        while nobodysProcessesWaiting(named: "cat") < Self.opens && Date() < arrived { usleep(20_000) }
        XCTAssertEqual(nobodysProcessesWaiting(named: "cat"), Self.opens, "nobody's readers all wait in the kernel")
        XCTAssertEqual(session.ringUsage.parked, 0, "the holder took none of them yet")
        gate.open()

        // Every open is parked (none may be refused: max_user_waits is the burst), with nothing else
        // coming on CPU 0.
        let deadline = Date().addingTimeInterval(10)
        while session.ringUsage.parked < Self.opens && Date() < deadline { usleep(10_000) }
        let usage = session.ringUsage
        XCTAssertEqual(usage.parked, Self.opens, "every open is parked, none left queued in the kernel: \(usage)")
        XCTAssertEqual(daemon.coordinated!.waits.count(65534), Self.opens)
        XCTAssertLessThanOrEqual(usage.added, Self.opens + 4, "an entry added per parked request, no more: \(usage)")

        // Answered: every open reads the file.
        let (read, refused) = answer(presenter, thenCollect: readers, Self.opens, in: out)
        XCTAssertEqual(read, Self.opens, "every open read the file once answered")
        XCTAssertEqual(refused, 0)
        XCTAssertEqual(session.ringUsage.parked, 0)
        XCTAssertEqual(try sh("cat held.txt").output, "held\n", "the mount still answers")
        // What the daemon did to hand the queued requests out was answered too: nothing of it is
        // left in the kernel.
        let settled = Date().addingTimeInterval(5)
        while session.ringUsage.pullsAnswered < session.ringUsage.pullsSent && Date() < settled { usleep(10_000) }
        XCTAssertEqual(session.ringUsage.pullsAnswered, session.ringUsage.pullsSent, "\(session.ringUsage)")
    }
}

/// The same for parked requests whose node is a folder: unlinks, renames and creates by nobody,
/// pinned to CPU 0, more than the queue's free entries, each in a folder of its own (the kernel
/// lets one such change at a time into a folder) and each waiting for a presenter (the folder's,
/// or the renamed file's). The kernel takes a retrieve notification (the ring's pull) only of a
/// regular file it holds, and a folder is none: such a park pulled only through a file an earlier
/// pull went through, and in a mount where nothing was parked before there was none, so the
/// requests queued behind the first 32 stayed in the kernel until the ask's deadline. Now the pull
/// goes through a regular file the file system says the kernel holds (the unlinked and renamed
/// files among them), and every request reaches the daemon while no presenter has answered yet.
final class RingQueuedFolderRequestsTests: NobodyOnTheRingTestCase {
    static let each = RingTransport.entriesPerQueue - 8
    static let operations = each * 3

    override func configure(_ options: inout MountOptions) {
        super.configure(&options)
        options.coordination.askTimeout = 60
        options.limits.maxUserWaits = Self.operations
        options.spinMicroseconds = 100_000
        options.adaptiveSpin = false
        // The names the burst uses stay cached, present or missing, so the burst is its unlinks,
        // renames and creates alone, every one of them parked.
        options.entryTimeout = 120
        options.attributeTimeout = 120
        options.negativeTimeout = 120
    }

    func testFolderRequestsQueuedBehindParkedOnesAreHandedOut() throws {
        XCTAssertEqual(session.transportInUse, .uring)
        let n = Self.each
        try sh("for i in $(seq 1 \(n)); do mkdir -p u$i r$i c$i && echo u > u$i/f && echo r > r$i/f; done "
               + "&& chown -R 65534:65534 . && stat */f > /dev/null")
        // The missing names the renames and creates ask for, cached as missing.
        for i in 1...n {
            var st = stat()
            XCTAssertNotEqual(lstat(mnt + "/r\(i)/moved", &st), 0)
            XCTAssertNotEqual(lstat(mnt + "/c\(i)/new", &st), 0)
        }
        // An unlink asks its folder's presenters, a create its folder's, a rename its file's.
        var presenters: [GatePresenter] = []
        for i in 1...n {
            for path in ["u\(i)", "c\(i)", "r\(i)/f"] {
                let presenter = GatePresenter(path: try ItemPath(path))
                _ = try coordinator.addFilePresenter(presenter)
                presenters.append(presenter)
            }
        }
        func answer() { for p in presenters { p.open() } }
        defer { answer() }

        let gate = RingHolderGate(session, at: mnt)
        defer { gate.open() }
        let burst = Process()
        burst.executableURL = URL(fileURLWithPath: "/bin/sh")
        let asNobody = "taskset -c 0 setpriv --reuid=65534 --regid=65534 --clear-groups"
        // (From outside the mount, by paths whose every step the kernel has cached.)
        burst.currentDirectoryURL = URL(fileURLWithPath: root)
        burst.arguments = ["-c", "m='\(mnt!)'; for i in $(seq 1 \(n)); do \(asNobody) unlink $m/u$i/f & "
                           + "\(asNobody) mv -T $m/r$i/f $m/r$i/moved & \(asNobody) touch $m/c$i/new & done; wait"]
        burst.standardOutput = FileHandle.nullDevice
        burst.standardError = FileHandle.nullDevice
        try burst.run()
        defer { if burst.isRunning { answer(); burst.waitUntilExit() } }
        func waiting() -> Int { ["unlink", "mv", "touch"].map(nobodysProcessesWaiting(named:)).reduce(0, +) }
        let arrived = Date().addingTimeInterval(20)
        while waiting() < Self.operations && Date() < arrived { usleep(20_000) }
        XCTAssertEqual(waiting(), Self.operations, "nobody's unlinks, renames and creates all wait in the kernel")
        XCTAssertEqual(session.ringUsage.parked, 0, "the holder took none of them yet")
        gate.open()

        // Every one reaches the daemon and is parked there, its presenter asked, with nothing else
        // coming on CPU 0.
        let deadline = Date().addingTimeInterval(10)
        func asked() -> Int { presenters.filter { $0.asks.withLock { $0 } > 0 }.count }
        while (session.ringUsage.parked < Self.operations || asked() < Self.operations) && Date() < deadline { usleep(10_000) }
        let usage = session.ringUsage
        XCTAssertEqual(usage.parked, Self.operations, "every folder request is parked, none left queued in the kernel: \(usage)")
        XCTAssertEqual(asked(), Self.operations, "each one's presenter was asked")
        XCTAssertTrue(burst.isRunning, "none was answered before its presenter")

        // Answered: every unlink, rename and create is done.
        answer()
        let done = Date().addingTimeInterval(20)
        while burst.isRunning && Date() < done { usleep(10_000) }
        XCTAssertFalse(burst.isRunning, "the burst ended once answered")
        for i in 1...n {
            XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: backing + "/u\(i)"), [])
            XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: backing + "/r\(i)"), ["moved"])
            XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: backing + "/c\(i)"), ["new"])
        }
        XCTAssertEqual(session.ringUsage.parked, 0)
        let settled = Date().addingTimeInterval(5)
        while session.ringUsage.pullsAnswered < session.ringUsage.pullsSent && Date() < settled { usleep(10_000) }
        XCTAssertEqual(session.ringUsage.pullsAnswered, session.ringUsage.pullsSent, "\(session.ringUsage)")
    }
}

/// A holder that does not poll (`spin=0` here; a loaded machine, for the adaptive spin) sends its
/// reply to a request in the io_uring_enter that waits for the next one: one system call per
/// request where the commit and the wait took one each. Replies answered on other threads wake it
/// through a message from a ring of their own, never by entering the holder's ring
/// (`RingHolderWaitTests`), so its reply waits there for its enter alone.
final class RingReplyWithTheWaitTests: KernelRingMountTestCase {
    override func configure(_ options: inout MountOptions) {
        super.configure(&options)
        options.transport = .uring
        options.spinMicroseconds = 0
    }

    func testTheHoldersReplyGoesWithItsWaitForTheNextRequest() throws {
        let session = daemon.session!
        XCTAssertEqual(session.transportInUse, .uring)
        let before = session.ringUsage
        try sh("mkdir d && for i in $(seq 1 100); do echo x > d/f$i; done && ls -l d > /dev/null && rm -r d")
        XCTAssertFalse(FileManager.default.fileExists(atPath: backing + "/d"))
        let after = session.ringUsage
        let withTheWait = after.repliesWithTheWait - before.repliesWithTheWait
        let alone = after.repliesAlone - before.repliesAlone
        XCTAssertGreaterThanOrEqual(withTheWait, 300, "the creates, lookups and unlinks the holder served: \(after)")
        // Alone only when a completion or task work was already there (the kernel's own requests,
        // a slow moment under load: 88% went with the wait in one run at load 10).
        XCTAssertGreaterThan(withTheWait, (withTheWait + alone) / 2,
                             "most of the holder's replies went with its wait: \(after)")
    }
}

/// `transport=dev`: /dev/fuse only, although the kernel offers io_uring.
final class DeviceTransportTests: KernelRingMountTestCase {
    override func configure(_ options: inout MountOptions) {
        super.configure(&options)
        options.transport = .dev
    }

    func testTheDeviceTransportNeverUsesTheRing() throws {
        try assertACreateReadAndUnlinkGo(through: .dev)
    }
}

/// `transport=auto` on a mount other users may use (`allow_other`) takes the ring the kernel offers
/// too (their parked requests get entries of their own: `RingParkedRequestsTests`), and says so.
final class SharedMountTransportTests: KernelRingMountTestCase {
    override func configure(_ options: inout MountOptions) {
        super.configure(&options)
        options.transport = .auto
        options.allowOther = true
    }

    func testAutoTakesTheRingForAMountSharedWithOtherUsers() throws {
        try assertACreateReadAndUnlinkGo(through: .uring)
    }
}

/// `transport=auto` on a mount of its owner alone takes the ring the kernel offers.
final class PrivateMountTransportTests: KernelRingMountTestCase {
    override func configure(_ options: inout MountOptions) {
        super.configure(&options)
        options.transport = .auto
        options.allowOther = false
    }

    func testAutoTakesTheRingForAMountOfItsOwnerAlone() throws {
        try assertACreateReadAndUnlinkGo(through: .uring)
    }
}

/// On the ring one daemon thread at a time polls for requests, whichever CPU's queue they came
/// through, as on /dev/fuse: a poller per queue (and /dev/fuse's, after a forget) each took a core
/// the tool needed on a quiet machine (docs/architecture.md, "The transport"). A spin of 100 ms polled
/// after every request (`spin_adapt=off`), so every thread that would poll still does when the
/// test looks: after requests from CPU 0 and from CPU 1 (this thread pinned to each in turn: a
/// create, a stat and an unlink, whose forget comes through /dev/fuse), the threads of this process
/// that are running or runnable in most of 20 looks over the next few milliseconds are counted, the
/// fewest over four rounds whose looks took under 60 ms. (Before: 2-3 in every round, the holders
/// of both queues and /dev/fuse's reader.)
final class RingPollingThreadTests: KernelRingMountTestCase {
    override func configure(_ options: inout MountOptions) {
        super.configure(&options)
        options.transport = .uring
        options.spinMicroseconds = 100_000
        options.adaptiveSpin = false
    }

    override func setUpWithError() throws {
        try super.setUpWithError()
        guard RunQueue.onlineCPUs >= 2 else { throw XCTSkip("needs two CPUs") }
    }

    /// sched_setaffinity(2) and sched_getaffinity(2) of the calling thread (GNU calls Glibc's module
    /// hides), looked up in the C library.
    private typealias Affinity = @convention(c) (pid_t, Int, UnsafeMutableRawPointer) -> Int32
    private let setAffinity = unsafeBitCast(dlsym(nil, "sched_setaffinity"), to: Affinity.self)
    private let getAffinity = unsafeBitCast(dlsym(nil, "sched_getaffinity"), to: Affinity.self)

    /// Pins the calling thread to `cpu`.
    private func pin(_ cpu: Int) {
        var set = cpu_set_t()
        withUnsafeMutableBytes(of: &set) { $0[cpu / 8] |= UInt8(1 << (cpu % 8)) }
        XCTAssertEqual(setAffinity(0, MemoryLayout<cpu_set_t>.size, &set), 0, "pin to CPU \(cpu)")
    }

    /// A create, a stat and an unlink through the mount, from this thread.
    private func touchStatRemove(_ name: String) {
        let path = mnt + "/" + name
        let fd = open(path, O_CREAT | O_WRONLY | O_EXCL, 0o644)
        XCTAssertGreaterThanOrEqual(fd, 0, "create \(name): \(String(cString: strerror(errno)))")
        close(fd)
        var st = stat()
        XCTAssertEqual(stat(path, &st), 0)
        XCTAssertEqual(unlink(path), 0)
    }

    /// Threads of this process (the test's own excepted) in state R at `looks` looks, back to back
    /// (plain reads of /proc, so that all of them fall well inside the spin), and how long they took.
    private func runningCounts(looks: Int) -> (counts: [String: Int], seconds: Double) {
        // This thread's id: /proc/thread-self links to PID/task/TID.
        let me = ((try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/thread-self")) ?? "").split(separator: "/").last.map(String.init)
        let tids = ((try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []).filter { $0 != me }
        var counts: [String: Int] = [:]
        var buffer = [UInt8](repeating: 0, count: 512)
        let started = Date()
        for _ in 0..<looks {
            for tid in tids {
                let fd = Glibc.open("/proc/self/task/\(tid)/stat", O_RDONLY)
                guard fd >= 0 else { continue }
                let n = Glibc.read(fd, &buffer, buffer.count)
                Glibc.close(fd)
                // "TID (name) S ...": the state follows the last ')'.
                guard n > 0, let close = buffer[..<n].lastIndex(of: UInt8(ascii: ")")), close + 2 < n else { continue }
                if buffer[close + 2] == UInt8(ascii: "R") { counts[tid, default: 0] += 1 }
            }
            usleep(200)
        }
        return (counts, Date().timeIntervalSince(started))
    }

    func testOneThreadPollsWhicheverCPUsTheRequestsCameFrom() throws {
        XCTAssertEqual(daemon.session!.transportInUse, .uring)
        var saved = cpu_set_t()
        XCTAssertEqual(getAffinity(0, MemoryLayout<cpu_set_t>.size, &saved), 0)
        defer { _ = setAffinity(0, MemoryLayout<cpu_set_t>.size, &saved) }
        // The mount's start (and the previous test's end) done: they would show as running threads.
        touchStatRemove("warm")
        usleep(300_000)
        // Threads that woke up for something else are runnable too, for a while on a loaded
        // machine: they only add to a round's count, so the fewest over the rounds is the pollers.
        // A round counts when its looks took under 60 ms, well inside the spin (a loaded machine
        // may stretch them past it, and then nothing seems to poll).
        var perRound: [Int] = []
        var seen: [String] = []
        for round in 0..<12 where perRound.count < 4 {
            pin(0)
            touchStatRemove("a\(round)")
            pin(1)
            touchStatRemove("b\(round)")
            _ = setAffinity(0, MemoryLayout<cpu_set_t>.size, &saved)
            let looks = 20
            let (counts, seconds) = runningCounts(looks: looks)
            if seconds < 0.06 { perRound.append(counts.filter { $0.value * 4 >= looks * 3 }.count) }
            seen.append("round \(round) (\(looks) looks in \(seconds) s): \(counts)")
            usleep(150_000)   // the spin of this round is over
        }
        XCTAssertFalse(perRound.isEmpty, "no round's looks took under 60 ms: \(seen)")
        XCTAssertEqual(perRound.min(), 1, "threads running in at least 3/4 of the looks, per round: \(perRound); \(seen)")
    }
}

/// Once the ring serves the mount, the kernel still sends an evicted file's forget to /dev/fuse
/// (after each unlink): the ring's holder takes it through its poll of the device on the ring, and
/// /dev/fuse's reader does not wake for it. Before, each forget woke that reader, a thread of its
/// own that took a core from the tool or the polling holder (smallfiles with polling idle CPUs:
/// the ring slower than /dev/fuse; docs/benchmarks.md).
final class RingForgetTests: KernelRingMountTestCase {
    override func configure(_ options: inout MountOptions) {
        super.configure(&options)
        options.transport = .uring
    }

    func testTheForgetsOfUnlinkedFilesWakeNoThreadOfDevFuse() throws {
        let session = daemon.session!
        XCTAssertEqual(session.transportInUse, .uring)
        try sh("mkdir d && for i in $(seq 1 200); do echo x > d/f$i; done")
        let nodes = daemon.loopback.inodeCount
        let waits = session.deviceWaits, taken = session.ringUsage.deviceRequestsTaken
        try sh("rm d/f*")
        XCTAssertTrue(pollUntil(within: 10) { daemon.loopback.inodeCount <= nodes - 200 },
                      "the 200 files' forgets reached the file system: \(nodes) nodes, now \(daemon.loopback.inodeCount)")
        XCTAssertGreaterThan(session.ringUsage.deviceRequestsTaken - taken, 0, "the holder took the forgets from /dev/fuse")
        XCTAssertLessThanOrEqual(session.deviceWaits - waits, 2,
                                 "/dev/fuse's reader waited on the device \(session.deviceWaits - waits) times (a wake-up each)")
        XCTAssertEqual(try sh("echo after > e && cat e && rm e && rmdir d").output, "after\n", "the mount still answers")
    }
}

/// The same end through /dev/fuse, where the reader waits on the device itself (and the detach's
/// forgets come to it too).
final class DeviceTransportEndTests: InProcessMountTestCase {
    override func configure(_ options: inout MountOptions) {
        options.transport = .dev
    }

    func testTheDaemonToldToEndWithAFileHeldOpenEnds() throws {
        XCTAssertEqual(daemon.session?.transportInUse, .dev)
        try assertTheDaemonToldToEndWithAFileHeldOpenEnds(self)
    }
}

/// A file held open in `test`'s mount, the daemon told to end (`stopAndWait`): its loop has ended.
func assertTheDaemonToldToEndWithAFileHeldOpenEnds(_ test: InProcessMountTestCase,
                                                    file: StaticString = #filePath, line: UInt = #line) throws {
    try test.write("doc.txt", "alpha\n")
    let fd = open(test.mnt + "/doc.txt", O_RDONLY)
    XCTAssertGreaterThanOrEqual(fd, 0, String(cString: strerror(errno)), file: file, line: line)
    defer { if fd >= 0 { Glibc.close(fd) } }
    let stopped = DispatchSemaphore(value: 0)
    let d = test.daemon!
    Thread.detachNewThread {
        d.stopAndWait(timeoutSeconds: 10)
        stopped.signal()
    }
    XCTAssertEqual(stopped.wait(timeout: .now() + 20), .success, file: file, line: line)
    XCTAssertTrue(d.hasFinished, "the daemon's loop ended with a file held open in the detached mount", file: file, line: line)
}
