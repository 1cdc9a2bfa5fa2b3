import XCTest
import Foundation
import Glibc
import Synchronization
@testable import FuseKit

/// The reader of /dev/fuse (FuseKit's `DeviceReader`): one worker holds the device, keeps it while it
/// serves a metadata request, passes it on before a slow one, and loses it to the watchdog when a
/// request stalls. The unit tests stand a SOCK_SEQPACKET pair in for the device (one message is one
/// request); `testAStalledLookupDoesNotHoldUpTheMount` runs a real FUSE mount.
final class DeviceReaderTests: XCTestCase {
    private var device: Int32 = -1
    private var kernel: Int32 = -1
    private var reader: DeviceReader!

    private func makeReader(stall: Int = 60_000_000_000, adaptive: Bool = false, runnable: @escaping @Sendable () -> Int? = { 0 }) throws {
        var fds: [Int32] = [0, 0]
        guard socketpair(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue), 0, &fds) == 0 else { throw XCTSkip("socketpair failed") }
        device = fds[0]; kernel = fds[1]
        reader = DeviceReader(spinNanoseconds: 200_000, stallNanoseconds: stall, adaptive: adaptive, runnable: runnable)
        XCTAssertTrue(reader.start(device))
        XCTAssertNotEqual(fcntl(device, F_GETFL) & O_NONBLOCK, 0, "a spinning reader polls a non-blocking device")
    }

    override func tearDown() {
        reader?.stop()
        if device >= 0 { close(device) }
        if kernel >= 0 { close(kernel) }
    }

    /// A request with `opcode` and `unique` (the first 16 bytes of fuse_in_header).
    private func send(_ opcode: UInt32, _ unique: UInt64) {
        var header = (UInt32(40), opcode, unique)
        _ = withUnsafeBytes(of: &header) { Glibc.write(kernel, $0.baseAddress, 16) }
    }

    /// The same, 50 ms from now: the reader finds the device empty at its first look, so the request
    /// does not count as a backlog.
    private func sendLater(_ opcode: UInt32, _ unique: UInt64) {
        let fd = kernel
        DispatchQueue.global().asyncAfter(deadline: .now() + 0.05) {
            var header = (UInt32(40), opcode, unique)
            _ = withUnsafeBytes(of: &header) { Glibc.write(fd, $0.baseAddress, 16) }
        }
    }

    /// One receive on the calling thread: the request's unique id.
    private func receive() -> UInt64? { Self.receive(reader, device) }

    private static func receive(_ reader: DeviceReader, _ fd: Int32) -> UInt64? {
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: 64, alignment: 8)
        defer { buffer.deallocate() }
        let n = reader.receive(fd, into: buffer) { Glibc.read(fd, buffer, 64) }
        return n >= 16 ? buffer.loadUnaligned(fromByteOffset: 8, as: UInt64.self) : nil
    }

    /// Runs `receive` on a new thread; the result arrives in the returned box.
    private func receiveInBackground() -> Pending {
        let pending = Pending()
        let (reader, fd) = (reader!, device)
        Thread.detachNewThread {
            let u = Self.receive(reader, fd)
            pending.unique.withLock { $0 = u }
            pending.done.signal()
        }
        return pending
    }

    func testAWorkerServingAMetadataRequestKeepsTheDeviceAndPassesItOnBeforeASlowOne() throws {
        try makeReader()
        sendLater(1, 1)                              // LOOKUP: served by the holder itself
        XCTAssertEqual(receive(), 1)
        let other = receiveInBackground()            // another worker wants the device meanwhile
        sendLater(3, 2)                              // GETATTR
        XCTAssertEqual(other.done.wait(timeout: .now() + 0.3), .timedOut,
                       "the device stays with the worker serving the lookup")
        XCTAssertEqual(receive(), 2, "the holder takes the next request itself")
        sendLater(15, 3)                             // READ: may take long, the device is passed on
        XCTAssertEqual(receive(), 3)
        send(3, 4)
        XCTAssertEqual(other.done.wait(timeout: .now() + 10), .success, "the waiting worker got the device")
        XCTAssertEqual(other.unique.withLock { $0 }, 4)
    }

    func testTheWatchdogPassesOnADeviceHeldTooLong() throws {
        try makeReader(stall: 5_000_000)
        sendLater(35, 1)                             // CREATE, and this worker then stalls
        XCTAssertEqual(receive(), 1)
        let other = receiveInBackground()
        send(1, 2)
        XCTAssertEqual(other.done.wait(timeout: .now() + 10), .success,
                       "a stalled metadata request does not keep the device")
        XCTAssertEqual(other.unique.withLock { $0 }, 2)
        XCTAssertEqual(reader.takeovers.load(ordering: .relaxed), 1)
        // The stalled worker comes back without the device: it waits like any other, and gets it
        // once the new holder (which never comes back) has kept it too long in turn.
        sendLater(1, 3)
        XCTAssertEqual(receive(), 3)
        XCTAssertEqual(reader.takeovers.load(ordering: .relaxed), 2)
    }

    /// The watchdog looks when the request being served would have kept the device too long (or
    /// `stall` after a look that found none being served): while requests come one after another,
    /// one wake-up per `stall`, not two.
    func testTheWatchdogLooksOncePerStallWhileRequestsCome() throws {
        let stall = 40_000_000
        XCTAssertEqual(DeviceReader.nextLook(now: 1_000, busySince: 900, stall: stall), 900 + stall + 1, "when the request in service would stall")
        XCTAssertEqual(DeviceReader.nextLook(now: 1_000, busySince: 0, stall: stall), 1_000 + stall, "none in service: one begun next stalls no sooner")
        XCTAssertEqual(DeviceReader.nextLook(now: 1_000 + stall + 5, busySince: 1_000, stall: stall), 1_000 + 2 * stall + 5,
                       "one just passed on")
        try makeReader(stall: stall)
        // A tool's requests, one every millisecond, each served in 0.3 ms, for 0.6 s.
        let fd = kernel
        let sending = Atomic<Bool>(true)
        let stopped = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            var u: UInt64 = 1
            while sending.load(ordering: .relaxed) {
                var header = (UInt32(40), UInt32(3), u)
                _ = withUnsafeBytes(of: &header) { Glibc.write(fd, $0.baseAddress, 16) }
                u += 1
                usleep(1_000)
            }
            stopped.signal()
        }
        let start = reader.watchdogLooks.load(ordering: .relaxed)
        let begin = Date()
        var served = 0
        while Date().timeIntervalSince(begin) < 0.6 {
            if receive() != nil { served += 1 }
            usleep(300)
        }
        let elapsed = Date().timeIntervalSince(begin)
        let looks = reader.watchdogLooks.load(ordering: .relaxed) - start
        sending.store(false, ordering: .relaxed)
        // The sender stops before the socket closes (its number may be the next test's).
        XCTAssertEqual(stopped.wait(timeout: .now() + 10), .success)
        XCTAssertGreaterThan(served, 50)
        let perStall = Double(looks) / (elapsed / (Double(stall) / 1e9))
        XCTAssertLessThanOrEqual(perStall, 1.4, "\(looks) looks in \(elapsed) s at a stall of 40 ms (every stall / 2 would be 2 per stall)")
    }

    /// The other worker starts waiting only once this one holds the device (it took the first
    /// request and keeps the device for it): had it won the race for the first request, it would
    /// keep the device in turn and, its thread never asking again, hold it until the watchdog's
    /// stall (60 s here).
    func testQueuedRequestsShareTheDevice() throws {
        try makeReader()
        for u in 1...6 { send(1, UInt64(u)) }        // a backlog: several tools at once
        var got: [UInt64] = []
        if let u = receive() { got.append(u) }
        let other = receiveInBackground()
        for _ in 2...DeviceReader.backlogToShare { if let u = receive() { got.append(u) } }
        XCTAssertEqual(got, Array(1...UInt64(DeviceReader.backlogToShare)), "the holder took the first requests itself")
        XCTAssertEqual(other.done.wait(timeout: .now() + 10), .success,
                       "after \(DeviceReader.backlogToShare) requests found queued, another worker joins in")
        XCTAssertEqual(other.unique.withLock { $0 }, UInt64(DeviceReader.backlogToShare + 1))
    }

    /// The idle work runs on the holder while it polls the empty device after a request, slice after
    /// slice until it says it is done; not while requests are queued, and never without spin.
    func testIdleWorkRunsInSlicesWhileTheDeviceIsEmpty() throws {
        try makeReader()
        let runs = Mutex<[UInt]>([])
        let slicesLeft = Atomic<Int>(0)
        reader.idleWork.withLock {
            $0 = DeviceReader.IdleWork {
                runs.withLock { $0.append(UInt(pthread_self())) }
                return slicesLeft.wrappingSubtract(1, ordering: .relaxed).newValue > 0
            }
        }
        send(1, 1)
        send(1, 2)
        XCTAssertEqual(receive(), 1)
        XCTAssertEqual(receive(), 2)
        XCTAssertEqual(runs.withLock { $0.count }, 0, "requests were waiting: no pause, no idle work")
        sendLater(3, 3)
        XCTAssertEqual(receive(), 3)
        XCTAssertEqual(runs.withLock { $0 }, [UInt(pthread_self())], "once, on the holder, while it waited for request 3")
        sendLater(3, 4)
        XCTAssertEqual(receive(), 4)
        XCTAssertEqual(runs.withLock { $0.count }, 2)
        slicesLeft.store(4, ordering: .relaxed)
        sendLater(3, 6)
        XCTAssertEqual(receive(), 6)
        XCTAssertEqual(runs.withLock { $0.count }, 6, "four slices, then done until the next pause")
        reader.idleWork.withLock { $0 = nil }
        sendLater(3, 5)
        XCTAssertEqual(receive(), 5)
        XCTAssertEqual(runs.withLock { $0.count }, 6, "removed")
    }

    func testWithoutSpinEveryWorkerReadsTheDeviceItself() throws {
        var fds: [Int32] = [0, 0]
        XCTAssertEqual(socketpair(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue), 0, &fds), 0)
        device = fds[0]; kernel = fds[1]
        reader = DeviceReader(spinNanoseconds: 0)
        XCTAssertTrue(reader.start(device))
        XCTAssertEqual(fcntl(device, F_GETFL) & O_NONBLOCK, 0, "libfuse's way: a blocking device")
        let idleRuns = Atomic<Int>(0)
        reader.idleWork.withLock { $0 = DeviceReader.IdleWork { idleRuns.add(1, ordering: .relaxed); return false } }
        send(1, 1)
        XCTAssertEqual(receive(), 1)
        let other = receiveInBackground()
        send(1, 2)
        XCTAssertEqual(other.done.wait(timeout: .now() + 10), .success)
        XCTAssertEqual(other.unique.withLock { $0 }, 2)
        XCTAssertEqual(idleRuns.load(ordering: .relaxed), 0, "no spin, no idle work: the workers sleep in read(2)")
    }

    /// One request on an idle reader: the watchdog looks a few times, then sleeps until the next
    /// request (it kept looking every stall for a second: 500 wake-ups for a lone stat).
    func testTheWatchdogSleepsSoonAfterALoneRequest() throws {
        let stall = 2_000_000
        try makeReader(stall: stall)
        // A worker as libfuse runs one: it serves a request, then asks for the next (and waits).
        let (r, fd) = (reader!, device)
        let served = Mutex<[UInt64]>([])
        let second = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            for _ in 0..<2 { if let u = Self.receive(r, fd) { served.withLock { $0.append(u) } } }
            second.signal()   // and the thread ends holding the device for request 2, as if it stalled
        }
        send(1, 1)
        let first = Date().addingTimeInterval(10)
        while served.withLock({ $0.isEmpty }) && Date() < first { usleep(1_000) }
        XCTAssertEqual(served.withLock { $0 }, [1])
        let linger = Double(stall * DeviceReader.lingerStalls) / 1e9
        usleep(UInt32((linger + 0.3) * 1e6))    // its linger, and room for a loaded machine
        let before = reader.watchdogLooks.load(ordering: .relaxed)
        usleep(500_000)
        let looks = reader.watchdogLooks.load(ordering: .relaxed) - before
        XCTAssertLessThanOrEqual(looks, 1, "the watchdog looked \(looks) times in 0.5 s after a lone request (once per 2 ms would be 250)")
        XCTAssertEqual(reader.takeovers.load(ordering: .relaxed), 0, "the lone request was served at once")
        // Asleep, it still passes on a stalled request: the next request rings it awake.
        send(1, 2)
        XCTAssertEqual(second.wait(timeout: .now() + 10), .success)
        XCTAssertEqual(served.withLock { $0 }, [1, 2])
        send(1, 3)
        XCTAssertEqual(receive(), 3, "the watchdog passed on the device the stalled worker kept")
        XCTAssertEqual(reader.takeovers.load(ordering: .relaxed), 1)
    }

    // MARK: Spinning only while it pays (SpinGovernor)

    /// Sends `count` requests, each `delay` after the last was taken, and takes them.
    private func serveLate(_ count: Int, delay: Double, first: UInt64) {
        for u in 0..<UInt64(count) {
            let fd = kernel
            DispatchQueue.global().asyncAfter(deadline: .now() + delay) {
                var header = (UInt32(40), UInt32(3), first + u)
                _ = withUnsafeBytes(of: &header) { Glibc.write(fd, $0.baseAddress, 16) }
            }
            XCTAssertEqual(receive(), first + u)
        }
    }

    /// Requests that keep coming long after the spin would have ended: after one window of such
    /// waits the reader stops polling and blocks at once (no core spent on a spin that catches
    /// nothing). With `spin_adapt=off` it polls every time.
    func testAReaderWhoseRequestsComeAfterTheSpinStopsPolling() throws {
        try makeReader(adaptive: true)
        serveLate(SpinGovernor.window + 6, delay: 0.02, first: 1)
        let spun = reader.spunWaits.load(ordering: .relaxed)
        let slept = reader.sleptWaits.load(ordering: .relaxed)
        XCTAssertLessThanOrEqual(spun, SpinGovernor.window, "it stopped polling after one window of misses (\(spun) spun, \(slept) slept)")
        XCTAssertGreaterThanOrEqual(slept, 4, "the waits after the window blocked at once (\(spun) spun, \(slept) slept)")

        reader.stop(); close(device); close(kernel)
        try makeReader(adaptive: false)
        serveLate(SpinGovernor.window + 6, delay: 0.02, first: 100)
        XCTAssertEqual(reader.sleptWaits.load(ordering: .relaxed), 0, "spin_adapt=off: every wait polls")
        XCTAssertGreaterThanOrEqual(reader.spunWaits.load(ordering: .relaxed), SpinGovernor.window)
    }

    /// A machine with more runnable tasks than cores: the reader stops polling once most of its recent
    /// samples say so, whatever its catch rate.
    func testOnABusyMachineTheReaderDoesNotPoll() throws {
        let cpus = RunQueue.onlineCPUs
        try makeReader(adaptive: true, runnable: { cpus + 2 })
        serveLate(8, delay: 0.02, first: 1)
        let spun = reader.spunWaits.load(ordering: .relaxed)
        let slept = reader.sleptWaits.load(ordering: .relaxed)
        XCTAssertLessThanOrEqual(spun, 3, "polled only until half of its samples saw the busy machine (\(spun) spun, \(slept) slept)")
        XCTAssertGreaterThanOrEqual(slept, 4, "\(spun) spun, \(slept) slept")
    }

    // MARK: A real mount

    func testAStalledLookupDoesNotHoldUpTheMount() throws {
        try stalledLookup(transport: .dev)
    }

    /// The same through io_uring: a queue's ring is shared as the device is, so its watchdog passes it on.
    func testAStalledLookupDoesNotHoldUpTheRing() throws {
        guard geteuid() == 0 else { throw XCTSkip("needs root") }
        let restore = try KernelRingSwitch.turnOn()
        defer { KernelRingSwitch.restore(restore) }
        try stalledLookup(transport: .uring)
    }

    private func stalledLookup(transport: FuseTransport) throws {
        guard geteuid() == 0, access("/dev/fuse", R_OK | W_OK) == 0 else { throw XCTSkip("needs root and /dev/fuse") }
        let root = NSTemporaryDirectory() + "coordfs-reader-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: root) }
        let fs = StallingFileSystem()
        let session = try FuseSession(fileSystem: fs, options: ["fsname=stall", "subtype=coordfs-test"], spin: .microseconds(200),
                                      transport: transport)
        try session.mount(at: root)
        let served = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            _ = session.run(maxThreads: 8, handleSignals: false)
            served.signal()
        }
        defer {
            fs.release()
            session.exit()
            if umount2(root, Int32(MNT_DETACH)) != 0 { session.unmount() }
            XCTAssertEqual(served.wait(timeout: .now() + 10), .success, "the session's loop ended at unmount")
        }

        // Two directories, looked up now (their names stay cached): the stalled lookup in one must
        // not hold up lookups in the other (the kernel may lock a directory for a lookup in it).
        var dir = stat()
        XCTAssertEqual(lstat(root + "/a", &dir), 0)
        XCTAssertEqual(lstat(root + "/b", &dir), 0)
        let stalled = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            var st = stat()
            _ = lstat(root + "/a/stall", &st)        // LOOKUP that stalls in the file system
            stalled.signal()
        }
        XCTAssertEqual(fs.stalling.wait(timeout: .now() + 10), .success, "the stalling lookup reached the file system")
        // On another thread: were the mount stuck, the test fails instead of hanging (the defer then
        // lets the lookup go and unmounts).
        let answered = DispatchSemaphore(value: 0)
        let results = Mutex<[String]>([])
        Thread.detachNewThread {
            for i in 0..<20 {
                var st = stat()
                let rc = lstat(root + "/b/quick\(i)", &st)
                results.withLock { $0.append(rc == 0 ? "size \(st.st_size)" : String(cString: strerror(errno))) }
            }
            answered.signal()
        }
        XCTAssertEqual(answered.wait(timeout: .now() + 10), .success, "the mount answers while a lookup stalls")
        XCTAssertEqual(session.transportInUse, transport == .dev ? .dev : .uring)
        if transport != .dev { XCTAssertGreaterThan(session.requestsThroughRing, 20) }
        XCTAssertEqual(results.withLock { $0 }, Array(repeating: "size 7", count: 20))
        XCTAssertEqual(stalled.wait(timeout: .now() + 0.2), .timedOut, "the stalled lookup is still waiting")
        fs.release()
        XCTAssertEqual(stalled.wait(timeout: .now() + 10), .success)
    }
}

/// A receive running on another thread.
private final class Pending: Sendable {
    let done = DispatchSemaphore(value: 0)
    let unique = Mutex<UInt64?>(nil)
}

/// A root directory with directories "a" and "b" (names cached a minute); in them, looking up
/// "stall" waits until `release()`, and any other name is a 7-byte file (nothing cached).
private final class StallingFileSystem: FuseFileSystem, @unchecked Sendable {
    let stalling = DispatchSemaphore(value: 0)
    private let gate = DispatchSemaphore(value: 0)
    private let released = Atomic<Bool>(false)
    private let next = Atomic<UInt64>(3)

    func release() {
        if !released.exchange(true, ordering: .acquiringAndReleasing) { gate.signal() }
    }

    /// Inodes 1 (the root), 2 ("a") and 3 ("b") are directories.
    private func attributes(_ inode: UInt64) -> stat {
        var st = stat()
        let directory = inode <= 3
        st.st_ino = UInt(inode)
        st.st_nlink = directory ? 2 : 1
        st.st_mode = directory ? S_IFDIR | 0o755 : S_IFREG | 0o644
        st.st_size = directory ? 0 : 7
        return st
    }

    func initialize(connection: inout ConnectionInfo) {
        // Lookups in one directory at once (without it the kernel holds the directory's lock).
        connection.want.insert(.parallelDirectoryOps)
    }

    func getattr(_ request: consuming Request, inode: InodeID, file: FileInfo?) {
        request.reply(attributes: attributes(inode.rawValue), timeout: 0)
    }

    func lookup(_ request: consuming Request, parent: InodeID, name: FileName) {
        if parent.rawValue == 1 {
            let inode: UInt64? = strcmp(name.cString, "a") == 0 ? 2 : strcmp(name.cString, "b") == 0 ? 3 : nil
            guard let inode else { return request.reply(error: .noSuchFileOrDirectory) }
            return request.reply(entry: EntryReply(inode: InodeID(rawValue: inode), attributes: attributes(inode), attributeTimeout: 60, entryTimeout: 60))
        }
        if strcmp(name.cString, "stall") == 0 {
            stalling.signal()
            gate.wait()
            request.reply(error: .noSuchFileOrDirectory)
            return
        }
        let inode = next.add(1, ordering: .relaxed).newValue
        request.reply(entry: EntryReply(inode: InodeID(rawValue: inode), attributes: attributes(inode), attributeTimeout: 0, entryTimeout: 0))
    }
}
