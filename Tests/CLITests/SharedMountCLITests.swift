import XCTest
import Glibc
import TestSupport

/// The CLI used by another local user on a shared (`allow_other`) mount.
final class SharedMountCLITests: CLITestCase {
    /// nobody's `coordfs unmount` of root's mount is refused with whose mount it is (before,
    /// fusermount3's "entry for ... not found in /etc/mtab" came first), and the mount stays.
    func testAnotherUserCannotUnmountItAndIsToldWhoseItIs() throws {
        chmod(root, 0o755)
        try "kept\n".write(toFile: backing + "/doc.txt", atomically: false, encoding: .utf8)
        try mount(options: ["allow_other"])
        let refused = coordfs(as: 65534, "unmount", mnt)
        XCTAssertEqual(refused.status, 1, "\(refused)")
        XCTAssertTrue(refused.stderr.contains("mounted by uid 0"), "\(refused)")
        XCTAssertFalse(refused.stderr.contains("mtab"), "\(refused)")
        let lazily = coordfs(as: 65534, "unmount", "--lazy", mnt)
        XCTAssertEqual(lazily.status, 1, "\(lazily)")
        XCTAssertFalse(Self.mounts(under: root).isEmpty, "the mount went away")
        XCTAssertEqual(try String(contentsOfFile: mnt + "/doc.txt", encoding: .utf8), "kept\n")
        XCTAssertEqual(coordfs("unmount", mnt).status, 0)
        XCTAssertTrue(Self.mounts(under: root).isEmpty)
    }

    /// A shared mount of a backing folder inside a folder other users cannot search (as under a
    /// home folder or a `mktemp -d`, 0700): nobody uses the mount, but its `coordfs status` cannot
    /// connect to the control socket, and `coordfs mount` says so once, naming the folder and the
    /// `chmod` that helps (before: nothing, until nobody's commands failed with "Permission
    /// denied"). Once that folder is searchable nobody's command works and the mount says nothing.
    func testAMountOtherUsersCannotReachTheSocketOfSaysSo() throws {
        chmod(root, 0o711)
        chmod(mnt, 0o755)
        let hidden = root + "/private", shared = root + "/private/shared"
        mkdir(hidden, 0o700)
        chmod(hidden, 0o700)
        mkdir(shared, 0o755)
        chmod(shared, 0o755)
        try "kept\n".write(toFile: shared + "/doc.txt", atomically: false, encoding: .utf8)
        let args = ["mount", shared, mnt!, "-o", "allow_other"]
        let first = coordfs(arguments: args)
        XCTAssertEqual(first.status, 0, "\(first)")
        let warnings = first.stderr.components(separatedBy: "\n").filter { $0.contains("not its control socket") }
        XCTAssertEqual(warnings.count, 1, "\(first)")
        XCTAssertTrue(warnings.first?.contains("'\(hidden)' (mode 700)") == true && warnings.first?.contains("chmod o+x") == true, "\(first)")
        XCTAssertEqual(run("/usr/bin/setpriv", user(65534) + ["/bin/cat", mnt + "/doc.txt"]).stdout, "kept\n", "nobody uses the mount")
        let refused = coordfs(as: 65534, "status", mnt)
        XCTAssertNotEqual(refused.status, 0, "\(refused)")
        XCTAssertTrue(refused.stderr.contains("Permission denied"), "\(refused)")
        XCTAssertEqual(coordfs("unmount", mnt).status, 0)

        chmod(hidden, 0o711)
        let second = coordfs(arguments: args)
        XCTAssertEqual(second.status, 0, "\(second)")
        XCTAssertFalse(second.stderr.contains("not its control socket"), "\(second)")
        let status = coordfs(as: 65534, "status", mnt)
        XCTAssertEqual(status.status, 0, "\(status)")
        XCTAssertEqual(coordfs("unmount", mnt).status, 0)

        // A mount only its user may use says nothing of the kind.
        chmod(hidden, 0o700)
        let own = coordfs(arguments: ["mount", shared, mnt!])
        XCTAssertEqual(own.status, 0, "\(own)")
        XCTAssertFalse(own.stderr.contains("not its control socket"), "\(own)")
        XCTAssertEqual(coordfs("unmount", mnt).status, 0)
    }
}

/// What another user's holds and presenters may delay in a sticky folder everyone may write (a
/// 1777 drop folder, `/tmp`-like): natively nobody can neither prevent root's creates there nor
/// touch root's items, so its `coordfs coordinate --write`/`--read` of the folder and its
/// `coordfs present` of it (answering every ask after 2 s) hold up none of them (before, each of
/// root's creates there waited `write_wait` and failed with EBUSY while nobody held the folder for
/// writing, waited for its read hold, and waited for its presenter's answers), while a hold of its
/// own item, a sticky folder it owns and a folder without the sticky bit hold up as before.
final class StickyFolderHoldsCLITests: CLITestCase {
    override func setUpWithError() throws {
        try super.setUpWithError()
        chmod(root, 0o755)
        for (folder, mode, owner) in [("sticky", 0o1777, 0), ("nobodys", 0o1777, 65534), ("open", 0o777, 0)] {
            mkdir(backing + "/" + folder, 0o777)
            chmod(backing + "/" + folder, mode_t(mode))
            chown(backing + "/" + folder, uid_t(owner), gid_t(owner))
            try "root\n".write(toFile: backing + "/\(folder)/roots.txt", atomically: false, encoding: .utf8)
        }
        try mount(options: ["allow_other", "write_wait=2", "read_wait=1", "ask_timeout=2"])
        let own = run("/usr/bin/setpriv", user(65534) + ["/bin/sh", "-c", "echo nobody > '\(mnt!)/sticky/nobodys.txt'"])
        XCTAssertEqual(own.status, 0, "\(own)")
    }

    /// Runs `command` as root through /bin/sh: its status and how long it took.
    private func timed(_ command: String) -> (status: Int32, seconds: Double) {
        let start = Date()
        let r = run("/bin/sh", ["-c", command])
        return (r.status, Date().timeIntervalSince(start))
    }

    /// Root's creates of new names, a `mkdir`, an append to and a removal of its own file, and a
    /// save by temp file and rename in `folder`: each done at once (`free`) or each held up at
    /// least most of `write_wait`.
    private func assertRootsChanges(in folder: String, free: Bool, _ context: String, file: StaticString = #filePath, line: UInt = #line) {
        let d = mnt + "/" + folder
        var commands = ["echo x > '\(d)/new-\(UUID().uuidString)'", "mkdir '\(d)/dir-\(UUID().uuidString)'"]
        if free {
            commands += ["echo y >> '\(d)/roots.txt'", "echo z > '\(d)/tmp' && mv '\(d)/tmp' '\(d)/saved.txt'", "rm '\(d)/saved.txt'"]
        }
        for command in commands {
            let r = timed(command)
            if free {
                XCTAssertEqual(r.status, 0, "\(context): \(command)", file: file, line: line)
                XCTAssertLessThan(r.seconds, 1.5, "\(context): \(command) was held up", file: file, line: line)
            } else {
                XCTAssertGreaterThan(r.seconds, 1.8, "\(context): \(command) was not held up", file: file, line: line)
            }
        }
    }

    /// nobody's `coordfs coordinate MODE FOLDER` holding (its command says so), stopped at the end.
    private func nobodyHolds(_ mode: String, _ folder: String) throws -> Child {
        let child = try start("/usr/bin/setpriv", user(65534) + [binary, "coordinate", mode, mnt + "/" + folder, "--", "/bin/sh", "-c", "echo held; exec sleep 60"])
        XCTAssertTrue(child.waitForLastLine(prefix: "held", timeout: 10), "\(child.stdout) \(child.stderr)")
        return child
    }

    func testAnotherUsersHoldOfAStickyFolderItDoesNotOwnHoldsUpNoneOfRootsCreatesOrItems() throws {
        for mode in ["--write", "--read"] {
            let hold = try nobodyHolds(mode, "sticky")
            assertRootsChanges(in: "sticky", free: true, "nobody's \(mode) hold of root's sticky folder")
            _ = hold.stop()
        }
    }

    func testAHoldOfTheStickyFoldersOwnerOrOfAFolderWithoutTheStickyBitHoldsUpAsBefore() throws {
        // nobody's own file in root's sticky folder is still its own: root's save waits for its hold.
        var hold = try nobodyHolds("--write", "sticky/nobodys.txt")
        let r = timed("echo root > '\(mnt!)/sticky/nobodys.txt'")
        XCTAssertGreaterThan(r.seconds, 1.8, "root's write of nobody's own file waits for nobody's write hold of it")
        _ = hold.stop()
        hold = try nobodyHolds("--write", "nobodys")
        assertRootsChanges(in: "nobodys", free: false, "nobody's write hold of its own sticky folder")
        _ = hold.stop()
        // Without the sticky bit nobody could delete or replace root's items there itself.
        hold = try nobodyHolds("--write", "open")
        assertRootsChanges(in: "open", free: false, "nobody's write hold of a 0777 folder")
        _ = hold.stop()
    }

    func testAnotherUsersPresenterOfAStickyFolderIsToldOfRootsCreatesButNeverAsked() throws {
        let presenter = try start("/usr/bin/setpriv", user(65534) + [binary, "present", "--delay", "2", mnt + "/sticky"])
        XCTAssertTrue(presenter.waitForLastLine(prefix: "registered", timeout: 10), "\(presenter.stdout) \(presenter.stderr)")
        let r = timed("echo x > '\(mnt!)/sticky/report.txt' && mkdir '\(mnt!)/sticky/photos'")
        XCTAssertEqual(r.status, 0)
        XCTAssertLessThan(r.seconds, 1.5, "root's create and mkdir waited for nobody's presenter")
        XCTAssertTrue(pollUntil(within: 10) {
            presenter.lines.contains { $0.contains("subitemDidAppear") && $0.contains("sticky/report.txt") }
                && presenter.lines.contains { $0.contains("subitemDidAppear") && $0.contains("sticky/photos") }
        }, "told after: \(presenter.stdout)")
        XCTAssertFalse(presenter.lines.contains { $0.hasPrefix("ask") }, "never asked: \(presenter.stdout)")
        _ = presenter.stop()
    }
}
