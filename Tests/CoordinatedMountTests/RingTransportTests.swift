import XCTest
import Foundation
import Glibc
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

    private func minor(_ dev: UInt) -> UInt { (dev & 0xff) | ((dev >> 12) & 0xffffff00) }
}

/// `transport=dev`: /dev/fuse only, although the kernel offers io_uring.
final class DeviceTransportTests: KernelRingMountTestCase {
    override func configure(_ options: inout MountOptions) {
        super.configure(&options)
        options.transport = .dev
    }

    func testTheDeviceTransportNeverUsesTheRing() throws {
        try sh("echo a > f && cat f && rm f")
        XCTAssertEqual(daemon.session!.transportInUse, .dev)
        XCTAssertEqual(daemon.session!.requestsThroughRing, 0)
    }
}

/// `transport=auto` on a mount other users may use (`allow_other`) stays on /dev/fuse although the
/// kernel offers io_uring: on the ring a request holds its entry until answered and the kernel queues
/// a CPU's requests behind its entries, so one user's parked requests would hold up everyone's.
final class SharedMountTransportTests: KernelRingMountTestCase {
    override func configure(_ options: inout MountOptions) {
        super.configure(&options)
        options.transport = .auto
        options.allowOther = true
    }

    func testAutoKeepsAMountSharedWithOtherUsersOnTheDevice() throws {
        try sh("echo a > f && cat f && rm f")
        XCTAssertEqual(daemon.session!.transportInUse, .dev)
        XCTAssertEqual(daemon.session!.requestsThroughRing, 0)
    }

    func testWhatAutoGivesEachMount() {
        XCTAssertEqual(FuseTransport.auto.resolved(forOptions: ["fsname=x", "allow_other"]).transport, .dev)
        XCTAssertEqual(FuseTransport.auto.resolved(forOptions: ["allow_root"]).transport, .dev)
        XCTAssertNotNil(FuseTransport.auto.resolved(forOptions: ["allow_other"]).why)
        XCTAssertEqual(FuseTransport.auto.resolved(forOptions: ["fsname=x", "default_permissions"]).transport, .auto)
        XCTAssertNil(FuseTransport.auto.resolved(forOptions: []).why)
        XCTAssertEqual(FuseTransport.uring.resolved(forOptions: ["allow_other"]).transport, .uring, "asked for by name: as asked")
        XCTAssertEqual(FuseTransport.dev.resolved(forOptions: []).transport, .dev)
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
        try sh("echo a > f && cat f && rm f")
        XCTAssertEqual(daemon.session!.transportInUse, .uring)
        XCTAssertGreaterThan(daemon.session!.requestsThroughRing, 0)
    }
}
