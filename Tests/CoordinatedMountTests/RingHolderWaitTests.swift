import XCTest
import Foundation
import Glibc
import Coordination
@testable import CoordFS
@testable import FuseKit

/// The ring's holder, once no request comes, waits in io_uring_enter on the one io_uring of every
/// queue (not in poll(2) on an eventfd), and a reply from a thread outside the ring's pool (a parked
/// request answered by a presenter) wakes it through a completion on that ring: the parked request is
/// answered at once, although the mount is otherwise idle.
final class RingHolderWaitTests: KernelRingMountTestCase {
    override func configure(_ options: inout MountOptions) {
        super.configure(&options)
        options.transport = .uring
        options.coordination.askTimeout = 30
    }

    /// Threads of this process blocked in io_uring_enter(2) (system call 426 on x86-64 and arm64:
    /// the first field of /proc/self/task/TID/syscall).
    private func threadsInIOUringEnter() -> Int {
        let tids = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
        return tids.filter { tid in
            let text = (try? String(contentsOfFile: "/proc/self/task/\(tid)/syscall", encoding: .utf8)) ?? ""
            return text.split(separator: " ").first == "426"
        }.count
    }

    func testAParkedRequestAnsweredWhileTheMountIsIdleIsAnsweredAtOnce() throws {
        XCTAssertEqual(daemon.session!.transportInUse, .uring)
        try write("doc.txt", "alpha\n")
        let presenter = GatePresenter(path: try ItemPath("doc.txt"))
        _ = try coordinator.addFilePresenter(presenter)
        defer { presenter.open() }
        let out = Pipe()
        let cat = Process()
        cat.executableURL = URL(fileURLWithPath: "/bin/cat")
        cat.arguments = [mnt + "/doc.txt"]
        cat.standardOutput = out
        cat.standardError = FileHandle.nullDevice
        try cat.run()
        defer { if cat.isRunning { presenter.open(); cat.waitUntilExit() } }
        let deadline = Date().addingTimeInterval(10)
        while presenter.asks.withLock({ $0 }) == 0 && Date() < deadline { usleep(10_000) }
        XCTAssertGreaterThan(presenter.asks.withLock { $0 }, 0, "the open waits for the presenter")

        // Idle: no request for well over the spin, the watchdog asleep; the holder waits in
        // io_uring_enter (and it alone: the other ring threads wait for their turn in user space).
        usleep(1_200_000)
        var waiting = 0
        let idle = Date().addingTimeInterval(10)
        repeat {
            usleep(200_000)
            waiting = threadsInIOUringEnter()
        } while waiting != 1 && Date() < idle
        XCTAssertEqual(waiting, 1, "one thread, the holder, waits in io_uring_enter while the mount is idle")
        XCTAssertTrue(cat.isRunning, "the open is still parked")

        // The presenter answers on its own thread: the reply is queued for the holder, which the
        // no-op's completion wakes. The gate is looked at every 10 ms.
        let answered = Date()
        presenter.open()
        let done = Date().addingTimeInterval(10)
        while cat.isRunning && Date() < done { usleep(2_000) }
        let took = Date().timeIntervalSince(answered)
        XCTAssertFalse(cat.isRunning)
        XCTAssertLessThan(took, 1.0, "the parked open was answered at once, not when another request came")
        XCTAssertEqual(String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self), "alpha\n")
        XCTAssertEqual(try sh("cat doc.txt").output, "alpha\n", "the mount still answers")
    }
}
