// flock, POSIX record locks seen from a second process (F_SETLK / F_GETLK), and OFD locks.
import Glibc
import XCTest

final class LockTests: MountTestCase {
    private func lock(_ type: Int32, start: Int = 0, len: Int = 0) -> flock {
        var l = flock()
        l.l_type = Int16(type)
        l.l_whence = Int16(SEEK_SET)
        l.l_start = off_t(start)
        l.l_len = off_t(len)
        return l
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

    func testPosixRecordLocksAcrossProcesses() {
        prepare("put f") { s in Sys.put(s("f"), [UInt8](repeating: 0, count: 1000)) }
        guard let fds = openBoth("f", O_RDWR) else { return }
        same("F_SETLK write lock on 100..199", on: fds, expect: Outcome.success()) { fd in
            var l = lock(F_WRLCK, start: 100, len: 100)
            return Sys.call { fcntl(fd, F_SETLK, &l) }
        }
        same("F_SETLK read lock on 500..", on: fds, expect: Outcome.success()) { fd in
            var l = lock(F_RDLCK, start: 500, len: 0)
            return Sys.call { fcntl(fd, F_SETLK, &l) }
        }
        let me = Int(getpid())
        for (start, len, type, name) in [(150, 10, F_WRLCK, "overlapping the write lock"), (0, 50, F_WRLCK, "a free range"),
                                         (600, 10, F_RDLCK, "read over the read lock"), (600, 10, F_WRLCK, "write over the read lock")] {
            same("F_GETLK from another process: \(name)") { s in
                let child = asUser(uid: getuid(), gid: getgid()) {
                    let fd = open(s("f"), O_RDWR)
                    var l = self.lock(type, start: start, len: len)
                    let o = Sys.call { fcntl(fd, F_GETLK, &l) }
                    let report = "type=\(l.l_type) start=\(l.l_start) len=\(l.l_len) pid=\(Int(l.l_pid) == me ? "parent" : "\(l.l_pid)")"
                    return ChildOutcome(outcome: o, data: Array(report.utf8))
                }
                return "\(child.outcome) " + String(decoding: child.data, as: UTF8.self)
            }
            same("F_SETLK from another process: \(name)") { s in
                childOutcome {
                    let fd = open(s("f"), O_RDWR)
                    var l = self.lock(type, start: start, len: len)
                    return Sys.call { fcntl(fd, F_SETLK, &l) }
                }
            }
        }
        same("F_UNLCK", on: fds, expect: Outcome.success()) { fd in
            var l = lock(F_UNLCK, start: 0, len: 0)
            return Sys.call { fcntl(fd, F_SETLK, &l) }
        }
        same("another process locks after unlock", expect: Outcome.success()) { s in
            childOutcome {
                let fd = open(s("f"), O_RDWR)
                var l = self.lock(F_WRLCK, start: 0, len: 0)
                return Sys.call { fcntl(fd, F_SETLK, &l) }
            }
        }
        same("F_SETLK write lock on a read-only fd", expect: Outcome.failure(EBADF)) { s in
            let fd = open(s("f"), O_RDONLY)
            defer { close(fd) }
            var l = lock(F_WRLCK)
            return Sys.call { fcntl(fd, F_SETLK, &l) }
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
