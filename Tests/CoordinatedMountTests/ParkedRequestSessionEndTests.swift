import XCTest
import Foundation
import Glibc
import Coordination
@testable import CoordFS
import FuseKit

/// A daemon served in this process (`startInProcess`: tests, embedding) ended while a request of its
/// mount is parked (an open waiting for a presenter that does not answer; the kernel's connection
/// aborted, so the waiting `cat` fails and the loop ends), then let go, and what holds the parked
/// request (the coordinator's wait for the presenter) let go too, in both orders, on /dev/fuse and on
/// io_uring. Letting go of the daemon first ends its session: the parked request is answered then,
/// and the presenter's late answer finds nothing to answer (its access is let go at once). Before,
/// the session was freed under the parked request, whose later resume and answer wrote into the
/// freed session (a `cat` of another test then hung for good in the clean-clone CI).
final class ParkedRequestSessionEndTests: XCTestCase {
    private var restore: String?
    private var root: String!
    private var presenter: GatePresenter?
    private var cat: Process?

    override func setUpWithError() throws {
        guard geteuid() == 0, access("/dev/fuse", R_OK | W_OK) == 0 else { throw XCTSkip("needs root and /dev/fuse") }
        let template = "/tmp/coordfs-parkedend-XXXXXX"
        var buf = Array(template.utf8CString)
        guard let made = mkdtemp(&buf) else { throw XCTSkip("mkdtemp failed") }
        root = String(cString: made)
    }

    override func tearDownWithError() throws {
        presenter?.open()
        if let cat, cat.isRunning { cat.terminate() }
        for entry in MountTable.entries() where entry.mountpoint.hasPrefix(root + "/") {
            umount2(entry.mountpoint, Int32(MNT_DETACH))
        }
        try? FileManager.default.removeItem(atPath: root)
        KernelRingSwitch.restore(restore)
    }

    func testTheDaemonLetGoBeforeWhatHoldsItsParkedRequestThroughDevFuse() throws {
        try endWithARequestParked(transport: .dev, daemonFirst: true)
    }

    func testWhatHoldsTheParkedRequestLetGoBeforeTheDaemonThroughDevFuse() throws {
        try endWithARequestParked(transport: .dev, daemonFirst: false)
    }

    func testTheDaemonLetGoBeforeWhatHoldsItsParkedRequestThroughTheRing() throws {
        restore = try KernelRingSwitch.turnOn()
        try endWithARequestParked(transport: .uring, daemonFirst: true)
    }

    func testWhatHoldsTheParkedRequestLetGoBeforeTheDaemonThroughTheRing() throws {
        restore = try KernelRingSwitch.turnOn()
        try endWithARequestParked(transport: .uring, daemonFirst: false)
    }

    private func endWithARequestParked(transport: FuseTransport, daemonFirst: Bool) throws {
        let backing = root + "/backing", mnt = root + "/mnt"
        mkdir(backing, 0o755); mkdir(mnt, 0o755)
        try "alpha\n".write(toFile: backing + "/doc.txt", atomically: false, encoding: .utf8)
        var options = MountOptions()
        options.transport = transport
        // The presenter's ask never reaches its deadline during the test: only the presenter's
        // answer (the gate) ends the wait.
        options.coordination.askTimeout = 3600
        options.coordination.readWait = 3600
        var daemon: Daemon? = try Daemon(plan: MountPreflight.plan(backing: backing, mountpoint: mnt, options: options))
        try daemon!.startInProcess()
        XCTAssertEqual(daemon!.session?.transportInUse, transport == .uring ? .uring : .dev)
        let coordinator = daemon!.coordinator
        let gate = GatePresenter(path: try ItemPath("doc.txt"))
        presenter = gate
        _ = try coordinator.addFilePresenter(gate)
        weak var session = daemon!.session

        // An open that waits for the presenter: parked in the daemon.
        let cat = Process()
        cat.executableURL = URL(fileURLWithPath: "/bin/cat")
        cat.arguments = [mnt + "/doc.txt"]
        cat.currentDirectoryURL = URL(fileURLWithPath: root)
        cat.standardOutput = FileHandle.nullDevice
        let errors = Pipe()
        cat.standardError = errors
        self.cat = cat
        try cat.run()
        XCTAssertTrue(eventually { gate.asks.withLock { $0 } > 0 && session?.requestsWaiting == 1 }, "the open waits for the presenter, parked")

        // The kernel ends the connection: the cat fails, the loop ends; the request stays parked in
        // the coordinator's wait for the presenter.
        try abortConnection(of: mnt)
        XCTAssertTrue(eventually { !cat.isRunning }, "the waiting cat got an error when the connection ended")
        if cat.isRunning { cat.terminate() }
        cat.waitUntilExit()
        XCTAssertNotEqual(cat.terminationStatus, 0)
        let said = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        XCTAssertTrue(said.contains("connection abort"), said)
        daemon!.stopAndWait()
        XCTAssertTrue(daemon!.hasFinished, "the daemon's loop ended")
        XCTAssertEqual(session?.requestsWaiting, 1, "the parked request outlives the connection")

        let answeredBefore = FuseSession.requestsAnsweredAtTheirSessionsEnd
        if daemonFirst {
            daemon = nil
            XCTAssertTrue(eventually { session == nil }, "the daemon let go ends its session")
            // The weak reference is nil once the session's deinit has begun, which may run on the
            // serving thread as it lets go of its closure: the answer may come a moment later.
            _ = eventually { FuseSession.requestsAnsweredAtTheirSessionsEnd - answeredBefore >= 1 }
            XCTAssertEqual(FuseSession.requestsAnsweredAtTheirSessionsEnd - answeredBefore, 1,
                           "the session's end answered the request still parked")
            // The presenter answers now: the wait ends and finds the request answered already, so
            // the access it was granted is let go at once (it answers no open: no RELEASE will
            // come for it), and nothing of the coordinator waits.
            gate.open()
            XCTAssertTrue(eventually {
                let status = coordinator.status()
                return status.held.isEmpty && status.waiting.isEmpty
            }, "the access granted after the session's end is let go: \(coordinator.status())")
        } else {
            gate.open()
            XCTAssertTrue(eventually { session?.requestsWaiting == 0 }, "the presenter's answer answered the parked request")
            daemon = nil
            XCTAssertTrue(eventually { session == nil }, "the daemon let go ends its session")
            XCTAssertEqual(FuseSession.requestsAnsweredAtTheirSessionsEnd - answeredBefore, 0,
                           "nothing was left for the session's end to answer")
        }
        presenter = nil
        XCTAssertNil(MountTable.coordfsMount(at: mnt))
    }

    /// Ends the FUSE connection of the mount at `mnt` as the kernel does at an unmount's end, through
    /// the FUSE control file system (mounted for it when it is not, and unmounted after).
    private func abortConnection(of mnt: String) throws {
        var st = stat()
        XCTAssertEqual(stat(mnt, &st), 0)
        let minor = (st.st_dev & 0xff) | ((st.st_dev >> 12) & 0xffffff00)
        let control = "/sys/fs/fuse/connections"
        var mountedControl = false
        if access(control + "/\(minor)", F_OK) != 0 {
            XCTAssertEqual(Glibc.mount("fusectl", control, "fusectl", 0, nil), 0, "mount fusectl: \(String(cString: strerror(errno)))")
            mountedControl = true
        }
        defer { if mountedControl { umount2(control, Int32(MNT_DETACH)) } }
        try "1".write(toFile: control + "/\(minor)/abort", atomically: false, encoding: .utf8)
    }

    /// Whether `condition` holds within 20 s (a generous bound: each step here takes milliseconds).
    private func eventually(_ condition: () -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(20)
        while !condition() {
            guard Date() < deadline else { return false }
            usleep(10_000)
        }
        return true
    }
}
