import Foundation
import Glibc
import Linux
import LinuxGNU
import XCTest

/// `ActingAsUser`: the kernel judges a system call made in it as the given user's (fsuid, fsgid and
/// supplementary groups), on the calling thread alone, and everything is put back after.
final class ActingAsUserTests: XCTestCase {
    private var folder = ""

    override func setUpWithError() throws {
        guard geteuid() == 0 else { throw XCTSkip("changes credentials: run as root") }
        folder = try XCTUnwrap(String(validatingCString: mkdtemp(strdup(NSTemporaryDirectory() + "/acting-XXXXXX"))))
        XCTAssertEqual(chmod(folder, 0o755), 0)
    }

    override func tearDown() {
        if !folder.isEmpty { try? FileManager.default.removeItem(atPath: folder) }
    }

    private func file(_ name: String, mode: mode_t, group: gid_t) -> String {
        let path = folder + "/" + name
        let fd = open(path, O_CREAT | O_WRONLY | O_CLOEXEC, mode)
        XCTAssertGreaterThanOrEqual(fd, 0)
        close(fd)
        XCTAssertEqual(chown(path, 0, group), 0)
        XCTAssertEqual(chmod(path, mode), 0)
        return path
    }

    /// errno of an open for writing as nobody with `groups` (0: opened).
    private func openAsNobody(_ path: String, groups: [gid_t]) -> Int32? {
        ActingAsUser.run(uid: 65534, gid: 65534, groups: groups) { () -> Int32 in
            let fd = open(path, O_WRONLY | O_CLOEXEC)
            if fd < 0 { return errno }
            close(fd)
            return 0
        }
    }

    func testTheKernelJudgesAsTheUserWithItsSupplementaryGroups() {
        let team = file("team", mode: 0o660, group: 4243)
        let mine = file("mine", mode: 0o600, group: 0)
        XCTAssertEqual(openAsNobody(team, groups: [4243]), 0, "a supplementary group's write bit")
        XCTAssertEqual(openAsNobody(team, groups: [4244]), EACCES, "not in the file's group")
        XCTAssertEqual(openAsNobody(mine, groups: [0]), EACCES, "root's 0600 file: no capability lent")
    }

    func testOnlyTheCallingThreadChangesAndAllIsPutBack() throws {
        let before = try XCTUnwrap(ProcessStatus.read(path: "/proc/thread-self/status"))
        let inside = DispatchSemaphore(value: 0)
        let checked = DispatchSemaphore(value: 0)
        final class Seen: @unchecked Sendable { var status: ProcessStatus? }  // written before `inside` is signalled
        let seen = Seen()
        Thread.detachNewThread {
            _ = ActingAsUser.run(uid: 65534, gid: 65534, groups: [4243, 4244]) {
                seen.status = ProcessStatus.read(path: "/proc/thread-self/status")
                inside.signal()
                checked.wait()
            }
        }
        inside.wait()
        // While the other thread acts as nobody, this one is as it was.
        let meanwhile = ProcessStatus.read(path: "/proc/thread-self/status")
        checked.signal()
        let acting = try XCTUnwrap(seen.status)
        XCTAssertEqual(acting.uids?.filesystem, 65534)
        XCTAssertEqual(acting.gids?.filesystem, 65534)
        XCTAssertEqual(acting.groups, [4243, 4244])
        XCTAssertEqual(meanwhile, before)
        // And on this thread, after: everything back.
        XCTAssertEqual(openAsNobody(folder, groups: []), EISDIR)
        XCTAssertEqual(ProcessStatus.read(path: "/proc/thread-self/status"), before)
        let rootOnly = file("root-only", mode: 0o600, group: 0)
        let fd = open(rootOnly, O_WRONLY | O_CLOEXEC)
        XCTAssertGreaterThanOrEqual(fd, 0, "root's own open after acting as nobody")
        close(fd)
    }
}
