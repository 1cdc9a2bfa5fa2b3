import XCTest
import Foundation
import Glibc
@testable import CoordFS
import FuseKit

/// A daemon served in this process (`startInProcess`: tests, embedding) that was stopped and let go
/// keeps nothing of its backing folder: no descriptor on it, so a backing folder on another FUSE
/// mount lets that mount end at its unmount, with its serving loop and its io_uring threads. (The
/// control service's path resolver held a descriptor on the backing folder for the process's life:
/// a mount over a folder of another in-process mount kept that mount's connection, its loop, its
/// ring and its threads alive after its lazy unmount, one of them waiting in io_uring_enter for
/// good, which `RingHolderWaitTests` later counted in `make test`.)
final class EndedDaemonTests: XCTestCase {
    private var restore: String?
    private var root: String!

    override func setUpWithError() throws {
        guard geteuid() == 0, access("/dev/fuse", R_OK | W_OK) == 0 else { throw XCTSkip("needs root and /dev/fuse") }
        restore = try KernelRingSwitch.turnOn()
        let template = "/tmp/coordfs-ended-XXXXXX"
        var buf = Array(template.utf8CString)
        guard let made = mkdtemp(&buf) else { throw XCTSkip("mkdtemp failed") }
        root = String(cString: made)
    }

    override func tearDownWithError() throws {
        // Whatever a failed test left mounted goes (lazily: a daemon that never ended keeps it open).
        for entry in MountTable.entries() where entry.mountpoint.hasPrefix(root + "/") {
            umount2(entry.mountpoint, Int32(MNT_DETACH))
        }
        try? FileManager.default.removeItem(atPath: root)
        KernelRingSwitch.restore(restore)
    }

    /// This process's descriptors on `folder` or anything below it (by the path the kernel shows).
    private func descriptors(under folder: String) -> [String] {
        let fds = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
        return fds.compactMap { try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\($0)") }
            .filter { $0 == folder || $0.hasPrefix(folder + "/") || $0.hasPrefix(folder + " ") }
    }

    /// What `look` returns once it is `expected`, or its last answer after 10 s: a daemon let go is
    /// freed when the last of its threads (its serving thread, its services') lets go of it, a
    /// moment after its loop ended.
    private func eventually<T: Equatable>(_ expected: T, _ look: () -> T) -> T {
        let deadline = Date().addingTimeInterval(10)
        var seen = look()
        while seen != expected && Date() < deadline {
            usleep(10_000)
            seen = look()
        }
        return seen
    }

    /// This process's io_urings, and its threads waiting in io_uring_enter(2) (system call 426).
    private struct Rings: Equatable { var open: Int, waiting: Int }
    private func rings() -> Rings {
        let fds = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
        let open = fds.filter { (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\($0)")) == "anon_inode:[io_uring]" }.count
        let tids = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
        let waiting = tids.filter { tid in
            ((try? String(contentsOfFile: "/proc/self/task/\(tid)/syscall", encoding: .utf8)) ?? "").split(separator: " ").first == "426"
        }.count
        return Rings(open: open, waiting: waiting)
    }

    /// Mounts `backing` on `mountpoint` in this process through io_uring.
    private func start(_ backing: String, on mountpoint: String, configure: (inout MountOptions) -> Void = { _ in }) throws -> Daemon {
        var options = MountOptions()
        options.transport = .uring
        configure(&options)
        let daemon = try Daemon(plan: MountPreflight.plan(backing: backing, mountpoint: mountpoint, options: options))
        try daemon.startInProcess()
        XCTAssertEqual(daemon.session?.transportInUse, .uring)
        return daemon
    }

    /// Three daemons in turn over one folder, each with its services (control socket, store, event
    /// log) and a file written and read through its mount, stopped and let go: none leaves a
    /// descriptor on the folder, an io_uring or a thread in io_uring_enter behind.
    func testAnEndedDaemonLeavesNothingOpenBehind() throws {
        let backing = root + "/backing", mnt = root + "/mnt"
        mkdir(backing, 0o755); mkdir(mnt, 0o755)
        let before = rings()
        for round in 0..<3 {
            do {
                let daemon = try start(backing, on: mnt)
                defer { daemon.stopAndWait() }
                try "round \(round)\n".write(toFile: mnt + "/doc.txt", atomically: false, encoding: .utf8)
                XCTAssertEqual(try String(contentsOfFile: mnt + "/doc.txt", encoding: .utf8), "round \(round)\n")
                XCTAssertFalse(descriptors(under: backing).isEmpty, "the daemon holds its backing folder while it serves")
                daemon.stopAndWait()
                XCTAssertTrue(daemon.hasFinished, "round \(round): the daemon's loop ended at its unmount")
            }
            XCTAssertEqual(eventually([]) { descriptors(under: backing) }, [], "round \(round): nothing of the ended daemon's backing folder is open")
            let after = eventually(before) { rings() }
            XCTAssertEqual(after.open, before.open, "round \(round): the ended daemon's io_urings are closed")
            XCTAssertEqual(after.waiting, before.waiting, "round \(round): none of its threads waits in io_uring_enter")
        }
    }

    /// A daemon over a folder of another in-process mount, ended and let go, lets that mount end at
    /// its unmount: the kernel ends its connection, its loop returns, its ring is closed and its
    /// threads are gone. (Before: the second daemon's resolver held that folder, so the detached
    /// mount lived on, and its loop with it unless a late request happened to wake it.)
    func testAMountOverAFolderOfAnotherMountLetsThatMountEnd() throws {
        let backing = root + "/backing", mnt = root + "/mnt", outer = root + "/outer"
        mkdir(backing, 0o755); mkdir(mnt, 0o755); mkdir(outer, 0o755)
        let before = rings()
        var connection: Int32 = -1
        defer { if connection >= 0 { close(connection) } }
        do {
            let first = try start(backing, on: mnt)
            defer { first.stopAndWait() }
            // The first mount's FUSE connection, seen through a descriptor of its own (which keeps
            // the device open, not the mount): the kernel ends it when the mount's last user is gone.
            connection = dup(first.session!.fileDescriptor)
            mkdir(mnt + "/inner", 0o755)
            do {
                let second = try start(mnt + "/inner", on: outer) { options in
                    options.store.enabled = false
                    options.eventLog.enabled = false
                    // The backing files the kernel holds for a passthrough open would keep the first
                    // mount busy until this connection is gone.
                    options.passthrough = false
                }
                defer { second.stopAndWait() }
                try "nested\n".write(toFile: outer + "/doc.txt", atomically: false, encoding: .utf8)
                XCTAssertEqual(try String(contentsOfFile: backing + "/inner/doc.txt", encoding: .utf8), "nested\n")
                second.stopAndWait()
                XCTAssertTrue(second.hasFinished, "the mount over the other mount's folder ended")
            }
            first.stopAndWait()
            XCTAssertTrue(first.hasFinished, "the mount whose folder the ended daemon served ended at its unmount")
        }
        XCTAssertTrue(eventually(true) {
            var poller = pollfd(fd: connection, events: Int16(POLLIN), revents: 0)
            return poll(&poller, 1, 0) == 1 && poller.revents & Int16(POLLERR) != 0
        }, "the kernel ended the first mount's connection: nothing holds its unmounted file system")
        XCTAssertEqual(eventually([]) { descriptors(under: backing) }, [], "nothing of the first mount's backing folder is open")
        let after = eventually(before) { rings() }
        XCTAssertEqual(after.open, before.open, "both daemons' io_urings are closed")
        XCTAssertEqual(after.waiting, before.waiting, "none of their threads waits in io_uring_enter")
    }
}
