// CallerSystemCall without a mount: which system call a blocked thread is in (/proc/TID/syscall),
// and when Linux refuses chown(f, -1, -1) (EPERM). Through the mount:
// PermissionTests.testFileCapabilitiesAreRemovedAsNatively.
import Foundation
import FuseKit
import Glibc
import Synchronization
import XCTest
@testable import Loopback

final class CallerSystemCallTests: XCTestCase {
    /// A thread that runs for `spin` nanoseconds, then blocks in read(2) on a pipe until `release`
    /// is called; `tid` is its id, known once the thread started.
    final class ReadingThread: @unchecked Sendable {
        private var fds: [Int32] = [-1, -1]
        private let id = Mutex<pid_t>(0)

        init(spin: UInt64 = 0) {
            XCTAssertEqual(pipe(&fds), 0)
            let reader = fds[0]
            Thread { [self] in
                id.withLock { $0 = CallerSystemCallTests.threadID() }
                let until = DispatchTime.now().uptimeNanoseconds + spin
                while DispatchTime.now().uptimeNanoseconds < until {}
                var byte: UInt8 = 0
                _ = read(reader, &byte, 1)
            }.start()
        }

        var tid: pid_t {
            var t: pid_t = 0
            while t == 0 { t = id.withLock { $0 } }
            return t
        }

        func release() {
            var one: UInt8 = 1
            XCTAssertEqual(write(fds[1], &one, 1), 1)
        }

        deinit { close(fds[0]); close(fds[1]) }
    }

    func testAThreadBlockedInAReadIsNotInAChownAndAMissingThreadIsUnknown() throws {
        let thread = ReadingThread()
        defer { thread.release() }
        var answer: Bool?
        let deadline = Date().addingTimeInterval(10)
        while answer == nil, Date() < deadline {
            answer = CallerSystemCall.isChown(thread.tid)   // nil while it runs (asked again for 200 ms)
        }
        XCTAssertEqual(answer, false, "a thread blocked in read(2)")
        XCTAssertNil(CallerSystemCall.isChown(0), "pid 0: a caller outside the daemon's pid namespace")
        XCTAssertNil(CallerSystemCall.isChown(Int32.max), "no such thread")
    }

    /// A caller still running when its request is read (it sends the request, then sleeps waiting
    /// for the answer; on the io_uring transport the daemon reads it at once, from the other
    /// processor) is asked again until it sleeps: here a thread that runs for 5 ms, then blocks in
    /// read(2), is read as in read(2) at the first ask, not as unknown. (CI saw a nobody's
    /// chown(-1, -1) taken for a write's removal of privileges this way, and allowed.)
    func testACallerStillRunningIsAskedAgainUntilItSleeps() throws {
        let thread = ReadingThread(spin: 5_000_000)
        defer { thread.release() }
        #if arch(x86_64)
        let readCall = 0
        #else
        let readCall = 63
        #endif
        XCTAssertEqual(CallerSystemCall.blockedCall(thread.tid), readCall, "read(2), once the thread sleeps in it")
    }

    /// The calling thread's id, from /proc/thread-self ("PID/task/TID").
    static func threadID() -> pid_t {
        var buffer = [CChar](repeating: 0, count: 64)
        let n = readlink("/proc/thread-self", &buffer, buffer.count - 1)
        guard n > 0 else { return -1 }
        let text = String(decoding: buffer.prefix(n).map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return pid_t(text.split(separator: "/").last ?? "") ?? -1
    }

    func testChownOfSetIDBitsIsRefusedToANonOwnerWhoIsNotRoot() {
        func file(_ mode: mode_t, uid: uid_t = 0, gid: gid_t = 0) -> stat {
            var st = stat()
            st.st_mode = mode
            st.st_uid = uid
            st.st_gid = gid
            return st
        }
        // The caller's own group is its only one here (pid 0: no /proc entry to read groups from).
        let nobody = RequestContext(uid: 65534, gid: 65534, pid: 0, umask: 0)
        let root = RequestContext(uid: 0, gid: 0, pid: 0, umask: 0)
        XCTAssertTrue(CallerSystemCall.chownIsRefused(file(S_IFREG | 0o4755), caller: nobody), "set-user-ID")
        XCTAssertTrue(CallerSystemCall.chownIsRefused(file(S_IFREG | 0o2775), caller: nobody), "set-group-ID, group execute")
        XCTAssertTrue(CallerSystemCall.chownIsRefused(file(S_IFREG | 0o2764), caller: nobody), "set-group-ID of a group the caller is not in")
        XCTAssertFalse(CallerSystemCall.chownIsRefused(file(S_IFREG | 0o2764, gid: 65534), caller: nobody), "set-group-ID of the caller's group, no group execute")
        XCTAssertFalse(CallerSystemCall.chownIsRefused(file(S_IFREG | 0o755), caller: nobody), "no set-ID bit: nothing to change")
        XCTAssertFalse(CallerSystemCall.chownIsRefused(file(S_IFREG | 0o4755, uid: 65534), caller: nobody), "the owner")
        XCTAssertFalse(CallerSystemCall.chownIsRefused(file(S_IFREG | 0o6755), caller: root), "root")
        XCTAssertFalse(CallerSystemCall.chownIsRefused(file(S_IFDIR | 0o2775), caller: nobody), "a folder keeps its bits on chown")
    }
}
