import Foundation
import Glibc
import XCTest

/// A mount nobody uses costs nothing: a second after the last request, the daemon's threads (the
/// readers that poll after a request, their watchdogs, the ring's threads, the log writer) all sleep.
/// Measured from outside, as a user would see it: the CPU time the kernel charged the daemon's
/// threads (/proc/PID/task/*/schedstat, in nanoseconds, and utime+stime in /proc/PID/stat) over two
/// seconds of idleness after a burst of metadata requests. Through /dev/fuse and through io_uring.
final class IdleDaemonTests: MountTestCase {
    override var mountsInSetUp: Bool { false }
    override var comparesTreesAtEnd: Bool { false }

    /// The most CPU two idle seconds may cost: well under what one poll of the spin takes per request
    /// (a reader that kept polling would take the whole two seconds; a watchdog that kept looking,
    /// every millisecond, about 2,000 wake-ups).
    private let idleBudgetNanoseconds = 2_000_000

    func testAnIdleMountOverDevFuseUsesNoCPUAfterASecond() throws {
        try idleMountUsesNoCPU(options: ["transport=dev"], expect: "requests come through /dev/fuse", ring: false)
    }

    func testAnIdleMountOverTheRingUsesNoCPUAfterASecond() throws {
        let path = "/sys/module/fuse/parameters/enable_uring"
        guard let saved = try? String(contentsOfFile: path, encoding: .utf8) else {
            throw XCTSkip("this kernel has no FUSE over io_uring (\(path) is missing)")
        }
        if !saved.hasPrefix("Y") {
            guard (try? "Y".write(toFile: path, atomically: false, encoding: .utf8)) != nil else { throw XCTSkip("cannot turn on \(path)") }
        }
        defer { if !saved.hasPrefix("Y") { try? saved.trimmingCharacters(in: .whitespacesAndNewlines).write(toFile: path, atomically: false, encoding: .utf8) } }
        try idleMountUsesNoCPU(options: ["transport=uring"], expect: "requests come through io_uring", ring: true)
    }

    /// A machine whose idle CPUs halt at once (cpuidle-haltpoll, `guest_halt_poll_ns` 0: every round
    /// trip that wakes a CPU pays an exit to the host) is said in the daemon's log at mount, and one
    /// whose idle CPUs poll is not; the daemon changes nothing (`IdleCPUs`). Only where the machine's
    /// idle driver is haltpoll and root may set its polling for the test (restored after).
    func testTheDaemonSaysWhenIdleCPUsHaltAtOnce() throws {
        try daemonLogAboutIdleCPUs(haltPollNanoseconds: "0", said: true)
    }

    func testTheDaemonSaysNothingWhenIdleCPUsPoll() throws {
        try daemonLogAboutIdleCPUs(haltPollNanoseconds: "200000", said: false)
    }

    private func daemonLogAboutIdleCPUs(haltPollNanoseconds: String, said: Bool) throws {
        guard target.isCoordFS else { throw XCTSkip("a coordfs daemon's log is read") }
        let driver = (try? String(contentsOfFile: "/sys/devices/system/cpu/cpuidle/current_driver", encoding: .utf8)) ?? ""
        let path = "/sys/module/haltpoll/parameters/guest_halt_poll_ns"
        guard driver.hasPrefix("haltpoll"), let saved = try? String(contentsOfFile: path, encoding: .utf8),
              (try? haltPollNanoseconds.write(toFile: path, atomically: false, encoding: .utf8)) != nil else {
            throw XCTSkip("this machine's idle driver is not cpuidle-haltpoll, or its polling cannot be set (\(driver))")
        }
        defer { try? saved.trimmingCharacters(in: .whitespacesAndNewlines).write(toFile: path, atomically: false, encoding: .utf8) }
        try fixture.mount(options: [])
        let log = (try? String(contentsOfFile: fixture.backing + "/.coordfs/daemon.log", encoding: .utf8)) ?? ""
        XCTAssertTrue(log.contains("requests come through"), "the mount's log is read: \(log.suffix(600))")
        XCTAssertEqual(log.contains("idle CPUs halt at once (cpuidle-haltpoll with guest_halt_poll_ns 0"), said,
                       "guest_halt_poll_ns \(haltPollNanoseconds): \(log.suffix(900))")
        XCTAssertEqual(try String(contentsOfFile: path, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines), haltPollNanoseconds,
                       "the daemon changed the machine's setting")
    }

    /// Also: each of the daemon's own threads says what it is (`top -H`, `perf sched`,
    /// /proc/PID/task/TID/comm), so who wakes whom can be read from the scheduler's events: the
    /// watchdogs, the log writer, the backing watcher and the signal thread on both transports, and
    /// the ring's 16 threads and its puller on the ring.
    private func idleMountUsesNoCPU(options: [String], expect: String, ring: Bool) throws {
        guard target.isCoordFS else { throw XCTSkip("a coordfs daemon's CPU is measured") }
        try fixture.mount(options: options)
        guard let pid = fixture.daemonPids.first else { return XCTFail("no daemon serves \(fixture.mountpoint)") }
        let log = (try? String(contentsOfFile: fixture.backing + "/.coordfs/daemon.log", encoding: .utf8)) ?? ""
        XCTAssertTrue(log.contains(expect), "the daemon's log says \(expect): \(log.suffix(600))")

        // A burst of metadata requests: the readers poll after each, the log records them.
        for i in 0..<300 {
            let path = mnt("f\(i)")
            let fd = open(path, O_CREAT | O_WRONLY, 0o644)
            XCTAssertGreaterThanOrEqual(fd, 0, "create \(path): \(String(cString: strerror(errno)))")
            if fd >= 0 { _ = write(fd, "x", 1); close(fd) }
            var st = stat()
            XCTAssertEqual(stat(path, &st), 0)
        }
        for i in 0..<300 { XCTAssertEqual(unlink(mnt("f\(i)")), 0) }

        let names = Self.threadNames(of: pid)
        let count = { (name: String) in names.filter { $0 == name }.count }
        XCTAssertGreaterThanOrEqual(count("fuse-watchdog"), 1, "the daemon's threads: \(names.sorted())")
        XCTAssertEqual(count("eventlog-writer"), 1, "the daemon's threads: \(names.sorted())")
        XCTAssertEqual(count("backing-watcher"), 1, "the daemon's threads: \(names.sorted())")
        XCTAssertEqual(count("coordfs-signals"), 1, "the daemon's threads: \(names.sorted())")
        XCTAssertEqual(count("fuse-ring"), ring ? 16 : 0, "the daemon's threads: \(names.sorted())")
        XCTAssertEqual(count("fuse-ring-pull"), ring ? 1 : 0, "the daemon's threads: \(names.sorted())")

        Thread.sleep(forTimeInterval: 1.2)   // "after a second"
        let before = try XCTUnwrap(Self.cpu(of: pid))
        Thread.sleep(forTimeInterval: 2)
        let after = try XCTUnwrap(Self.cpu(of: pid))
        let used = after.nanoseconds - before.nanoseconds
        XCTAssertLessThan(used, idleBudgetNanoseconds,
                          "the idle daemon used \(used / 1000) µs of CPU in 2 s (\(after.ticks - before.ticks) clock ticks); its busiest threads: \(Self.busiest(of: pid, since: before.perThread))")
        XCTAssertLessThanOrEqual(after.ticks - before.ticks, 1, "utime+stime grew by \(after.ticks - before.ticks) ticks in 2 idle seconds")
    }

    /// The names of the daemon's threads (/proc/PID/task/TID/comm).
    private static func threadNames(of pid: pid_t) -> [String] {
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []
        return tasks.compactMap { task in
            (try? String(contentsOfFile: "/proc/\(pid)/task/\(task)/comm", encoding: .utf8))?
                .trimmingCharacters(in: .whitespacesAndNewlines)
        }
    }

    /// The daemon's CPU time: every thread's runtime (schedstat, ns) and utime+stime (clock ticks).
    private static func cpu(of pid: pid_t) -> (nanoseconds: Int, ticks: Int, perThread: [String: Int])? {
        guard let tasks = try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task"),
              let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let close = stat.lastIndex(of: ")") else { return nil }
        // Fields after the command's closing parenthesis: state is field 3, utime 14, stime 15.
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        guard fields.count > 13, let utime = Int(fields[11]), let stime = Int(fields[12]) else { return nil }
        var perThread: [String: Int] = [:]
        for task in tasks {
            guard let text = try? String(contentsOfFile: "/proc/\(pid)/task/\(task)/schedstat", encoding: .utf8),
                  let first = text.split(separator: " ").first, let ns = Int(first) else { continue }
            let name = ((try? String(contentsOfFile: "/proc/\(pid)/task/\(task)/comm", encoding: .utf8)) ?? "?")
                .trimmingCharacters(in: .whitespacesAndNewlines)
            perThread["\(task) \(name)"] = ns
        }
        return (perThread.values.reduce(0, +), utime + stime, perThread)
    }

    private static func busiest(of pid: pid_t, since: [String: Int]) -> String {
        guard let now = cpu(of: pid) else { return "?" }
        return now.perThread.map { ($0.key, $0.value - (since[$0.key] ?? 0)) }
            .filter { $0.1 > 0 }.sorted { $0.1 > $1.1 }.prefix(4)
            .map { "\($0.0): \($0.1 / 1000) µs" }.joined(separator: ", ")
    }
}
