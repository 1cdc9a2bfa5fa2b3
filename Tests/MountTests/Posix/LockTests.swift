// flock, POSIX record locks seen from a second process (F_SETLK / F_GETLK), and OFD locks.
import Foundation
import Glibc
import XCTest

final class LockTests: MountTestCase {
    /// Reads wait long for a writer in the test of `flock(1)`, so that a wait cannot pass for a
    /// quick answer.
    override var mountOptions: [String] {
        let long = name.contains("LockFileItMade") && (try? MountTarget.fromEnvironment().isCoordFS) == true
        return super.mountOptions + (long ? ["read_wait=10"] : [])
    }

    private func lock(_ type: Int32, start: Int = 0, len: Int = 0) -> flock {
        var l = flock()
        l.l_type = Int16(type)
        l.l_whence = Int16(SEEK_SET)
        l.l_start = off_t(start)
        l.l_len = off_t(len)
        return l
    }

    /// `flock FILE CMD` makes FILE (an open for reading with O_CREAT) and holds its lock while CMD
    /// runs: another `flock -n FILE` is refused at once (exit 1) and `cat FILE` reads it at once,
    /// as natively. Before, the create held a write on the file for as long as `flock` kept it
    /// open: both waited `read_wait` (10 s here) first.
    func testFlockOfALockFileItMadeIsRefusedAtOnce() throws {
        guard let flockTool = Spawn.which("flock") else { throw XCTSkip("flock(1) is needed") }
        for side in [native!, mnt!] {
            let ready = NSTemporaryDirectory() + "/coordfs-flock-\(getpid())-\(side)"
            defer { unlink(ready) }
            // CMD writes its pid (that of the `sleep` holding the lock) to `ready`.
            let holder = try Spawn.start(flockTool, [side("lock"), "/bin/sh", "-c", "echo $$ > \"$0\"; exec sleep 60", ready])
            var sleeper: pid_t?
            defer {
                if let sleeper { kill(sleeper, SIGKILL) }
                kill(holder, SIGKILL)
                _ = Spawn.wait(holder, timeout: 10)
            }
            XCTAssertTrue(eventually("\(side): flock holds the lock file it made") {
                sleeper = (try? String(contentsOfFile: ready, encoding: .utf8)).flatMap { pid_t($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
                return sleeper != nil
            })
            let started = Date()
            let tried = Spawn.run(flockTool, ["-n", side("lock"), "true"])
            let read = Spawn.run("/bin/cat", [side("lock")])
            let took = Date().timeIntervalSince(started)
            XCTAssertEqual(tried.status, 1, "\(side): flock -n of the held lock file is refused: \(tried)")
            XCTAssertEqual(read.status, 0, "\(side): cat reads the lock file: \(read)")
            XCTAssertLessThan(took, 3, "\(side): flock -n and cat answer at once")
        }
    }

    func testFlock() {
        prepare("put f") { s in Sys.put(s("f"), [1]) }
        guard let a = openBoth("f", O_RDWR), let b = openBoth("f", O_RDWR) else { return }
        same("flock LOCK_EX on the first open", on: a, expect: Outcome.success()) { fd in Sys.call { flock(fd, LOCK_EX | LOCK_NB) } }
        same("flock LOCK_EX|NB on a second open", on: b, expect: Outcome.failure(EWOULDBLOCK)) { fd in Sys.call { flock(fd, LOCK_EX | LOCK_NB) } }
        same("flock LOCK_SH|NB on a second open", on: b, expect: Outcome.failure(EWOULDBLOCK)) { fd in Sys.call { flock(fd, LOCK_SH | LOCK_NB) } }
        same("downgrade to LOCK_SH", on: a, expect: Outcome.success()) { fd in Sys.call { flock(fd, LOCK_SH | LOCK_NB) } }
        same("a second shared lock", on: b, expect: Outcome.success()) { fd in Sys.call { flock(fd, LOCK_SH | LOCK_NB) } }
        same("upgrade blocked by the other shared", on: a, expect: Outcome.failure(EWOULDBLOCK)) { fd in Sys.call { flock(fd, LOCK_EX | LOCK_NB) } }
        same("unlock", on: b, expect: Outcome.success()) { fd in Sys.call { flock(fd, LOCK_UN) } }
        same("upgrade after the other unlocked", on: a, expect: Outcome.success()) { fd in Sys.call { flock(fd, LOCK_EX | LOCK_NB) } }
        // Closing the last fd of an open file description drops its lock.
        closeBoth(a)
        same("lock free after close", on: b, expect: Outcome.success()) { fd in Sys.call { flock(fd, LOCK_EX | LOCK_NB) } }
        // The lock is seen by another process.
        same("another process cannot take it", expect: Outcome.failure(EWOULDBLOCK)) { s in
            childOutcome { Sys.call { let fd = open(s("f"), O_RDONLY); return flock(fd, LOCK_EX | LOCK_NB) } }
        }
        closeBoth(b)
    }

    /// Runs `body` in a forked child (same user) and returns its outcome.
    private func childOutcome(_ body: () -> Outcome) -> Outcome {
        asUser(uid: getuid(), gid: getgid()) { ChildOutcome(outcome: body()) }.outcome
    }

    /// In a second process: opens `path` read-only (reading is what a lock query needs, and
    /// the least a coordinated mount makes wait), runs `probes`, and reports each result.
    private func probeLocks(_ path: String, _ probes: [(String, Int32, Int32, Int, Int)]) -> String {
        let me = Int(getpid())
        let child = asUser(uid: getuid(), gid: getgid()) {
            let fd = open(path, O_RDONLY)
            guard fd >= 0 else { return ChildOutcome(outcome: .failure(errno), data: Array("open O_RDONLY failed".utf8)) }
            var lines: [String] = []
            for (name, cmd, type, start, len) in probes {
                var l = self.lock(type, start: start, len: len)
                let o = Sys.call { fcntl(fd, cmd, &l) }
                let owner = Int(l.l_pid) == me ? "parent" : Int(l.l_pid) == 0 ? "0" : "other"
                lines.append(cmd == F_GETLK ? "\(name): \(o) type=\(l.l_type) start=\(l.l_start) len=\(l.l_len) pid=\(owner)" : "\(name): \(o)")
            }
            return ChildOutcome(outcome: .success(), data: Array(lines.joined(separator: "; ").utf8))
        }
        return "\(child.outcome) " + String(decoding: child.data, as: UTF8.self)
    }

    func testPosixRecordLocksAcrossProcesses() {
        prepare("put f") { s in Sys.put(s("f"), [UInt8](repeating: 0, count: 1000)) }
        guard let fds = openBoth("f", O_RDWR) else { return }
        same("F_SETLK write lock on 100..199", on: fds, expect: Outcome.success()) { fd in
            var l = lock(F_WRLCK, start: 100, len: 100)
            return Sys.call { fcntl(fd, F_SETLK, &l) }
        }
        same("F_SETLK read lock on 500..EOF", on: fds, expect: Outcome.success()) { fd in
            var l = lock(F_RDLCK, start: 500, len: 0)
            return Sys.call { fcntl(fd, F_SETLK, &l) }
        }
        let probes: [(String, Int32, Int32, Int, Int)] = [
            ("GETLK write over the write lock", F_GETLK, F_WRLCK, 150, 10),
            ("GETLK read over the write lock", F_GETLK, F_RDLCK, 150, 10),
            ("GETLK write on a free range", F_GETLK, F_WRLCK, 0, 50),
            ("GETLK read over the read lock", F_GETLK, F_RDLCK, 600, 10),
            ("GETLK write over the read lock", F_GETLK, F_WRLCK, 600, 10),
            ("SETLK read over the write lock", F_SETLK, F_RDLCK, 150, 10),
            ("SETLK read on a free range", F_SETLK, F_RDLCK, 0, 50),
            ("SETLK read over the read lock", F_SETLK, F_RDLCK, 600, 10),
            ("SETLK write with a read-only fd", F_SETLK, F_WRLCK, 0, 10),
        ]
        let report = same("record locks seen from a second process") { s in probeLocks(s("f"), probes) }
        XCTAssertTrue(report.contains("GETLK write over the write lock: ok(0) type=1 start=100 len=100 pid=parent"), report)
        same("F_UNLCK everything", on: fds, expect: Outcome.success()) { fd in
            var l = lock(F_UNLCK, start: 0, len: 0)
            return Sys.call { fcntl(fd, F_SETLK, &l) }
        }
        same("a second process after the unlock") { s in
            probeLocks(s("f"), [("GETLK write", F_GETLK, F_WRLCK, 0, 0), ("SETLK read", F_SETLK, F_RDLCK, 0, 0)])
        }
        closeBoth(fds)
    }

    func testOpenFileDescriptionLocks() {
        prepare("put f") { s in Sys.put(s("f"), [UInt8](repeating: 0, count: 100)) }
        guard let a = openBoth("f", O_RDWR), let b = openBoth("f", O_RDWR) else { return }
        same("F_OFD_SETLK write 0..9 on the first", on: a, expect: Outcome.success()) { fd in
            var l = lock(F_WRLCK, start: 0, len: 10)
            return Sys.call { fcntl(fd, Linux.F_OFD_SETLK, &l) }
        }
        same("F_OFD_SETLK write 5..14 on the second conflicts", on: b, expect: Outcome.failure(EAGAIN)) { fd in
            var l = lock(F_WRLCK, start: 5, len: 10)
            return Sys.call { fcntl(fd, Linux.F_OFD_SETLK, &l) }
        }
        same("F_OFD_GETLK reports the conflict", on: b, expect: "1 0 10 -1") { fd in
            var l = lock(F_WRLCK, start: 5, len: 10)
            let o = Sys.call { fcntl(fd, Linux.F_OFD_GETLK, &l) }
            return o.ok ? "\(l.l_type) \(l.l_start) \(l.l_len) \(l.l_pid)" : "\(o)"
        }
        same("F_OFD_SETLK on a free range", on: b, expect: Outcome.success()) { fd in
            var l = lock(F_RDLCK, start: 20, len: 10)
            return Sys.call { fcntl(fd, Linux.F_OFD_SETLK, &l) }
        }
        closeBoth(a)
        same("free after the first closed", on: b, expect: Outcome.success()) { fd in
            var l = lock(F_WRLCK, start: 0, len: 10)
            return Sys.call { fcntl(fd, Linux.F_OFD_SETLK, &l) }
        }
        closeBoth(b)
    }
}
