// What one unprivileged user of an allow_other mount may make the daemon and the mount owner's disk
// hold, through the real mount and the real CLI as `nobody`: the per-user limits refuse with one
// exit status (75, EX_TEMPFAIL) whatever the command.
import Foundation
import Glibc
import TestSupport
import XCTest

final class UserQuotaCLITests: CLITestCase {
    /// `setpriv`'s arguments that run what follows as `uid` (its own group, no other groups).
    private func user(_ uid: Int) -> [String] { ["--reuid=\(uid)", "--regid=\(uid)", "--clear-groups", "--"] }

    /// `coordfs ARGUMENTS` as `uid`.
    private func coordfs(as uid: Int, _ arguments: String...) -> CommandResult {
        run("/usr/bin/setpriv", user(uid) + [binary] + arguments, timeout: 30)
    }

    /// A folder `shared` (0777) in a mount root every user reaches, with `names` in it (0666).
    private func makeSharedFolder(_ names: [String] = []) {
        chmod(root, 0o755)
        mkdir(backing + "/shared", 0o777)
        chmod(backing + "/shared", 0o777)
        for name in names {
            FileManager.default.createFile(atPath: backing + "/shared/" + name, contents: Data("one\n".utf8), attributes: [.posixPermissions: 0o666])
        }
    }

    /// The accesses `uid` holds, as `coordfs status --json` lists them.
    private func accesses(of uid: Int) -> Int {
        let r = coordfs("status", mnt, "--json")
        let report = (try? JSONSerialization.jsonObject(with: Data(r.stdout.utf8))) as? [String: Any]
        let held = report?["accesses"] as? [[String: Any]] ?? []
        return held.filter { ($0["uid"] as? NSNumber)?.intValue == uid }.count
    }

    // MARK: Exit status on a per-user limit

    /// `coordfs coordinate` refused by `max_user_accesses` exits 75 (try again later), as
    /// `restore`, `resolve` and `present` do on a per-user limit; before, it exited 1, the status
    /// of a presenter's refusal. The command does not run; the owner is not limited.
    func testCoordinateRefusedByAUserLimitExitsTempFail() throws {
        makeSharedFolder(["a.txt", "b.txt"])
        try mount(options: ["allow_other", "max_user_accesses=1"])
        let holder = try start("/usr/bin/setpriv", user(65534) + [binary, "coordinate", "--read", mnt + "/shared/a.txt", "--", "/bin/sleep", "60"])
        defer { _ = holder.stop(SIGKILL) }
        let held = Date().addingTimeInterval(10)
        while accesses(of: 65534) < 1 && Date() < held { usleep(50_000) }
        XCTAssertEqual(accesses(of: 65534), 1, "nobody holds one access: \(holder.stderr)")
        let marker = backing + "/shared/ran"
        let refused = coordfs(as: 65534, "coordinate", "--read", mnt + "/shared/b.txt", "--", "/usr/bin/touch", mnt + "/shared/ran")
        XCTAssertEqual(refused.status, 75, "\(refused)")
        XCTAssertTrue(refused.stderr.contains("max_user_accesses") && refused.stderr.contains("limitExceeded"), "\(refused)")
        XCTAssertFalse(FileManager.default.fileExists(atPath: marker), "the command did not run")
        // The owner is not bound by nobody's accesses.
        let owners = coordfs("coordinate", "--read", mnt + "/shared/b.txt", "--", "/bin/true")
        XCTAssertEqual(owners.status, 0, "\(owners)")
    }
}
