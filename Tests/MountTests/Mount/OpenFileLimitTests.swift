import Foundation
import Glibc
import XCTest

/// What one user can exhaust through the mount itself (docs/protocol.md, "Limits"): each file and
/// directory open through the mount holds a descriptor in the daemon, and on an `allow_other`
/// mount `nobody` may open root's world-readable files from as many processes as it likes, each
/// up to its own `ulimit -n`. The daemon runs with RLIMIT_NOFILE at 512 (soft and hard; it
/// cannot raise it), so its node budget is 256, its callers' names tables 64, and the descriptors
/// other users may hold together 128 (`DescriptorShares`: three quarters of the 192 those leave;
/// the rest is kept for root, the owner, the control socket, the store and the log).
///
/// Before the bound, nobody's opens took every descriptor the daemon had: root's opens and
/// creates through the mount failed with EMFILE and root's `coordfs status` could not connect.
final class OpenFileLimitTests: MountTestCase {
    override var descriptorLimit: Int? { 512 }
    override var comparesTreesAtEnd: Bool { false }
    override var mountOptions: [String] {
        let perUser = name.contains("OneUsers") ? "100" : "100000"
        return super.mountOptions + ((try? MountTarget.fromEnvironment().isCoordFS) == true ? ["max_user_open_files=\(perUser)"] : [])
    }

    /// The others' share of a daemon at 512 descriptors (`DescriptorShares`).
    static let othersPool = 128

    /// Opens PATH COUNT times read-only (a folder as a directory: OPENDIR), then, when NEW is not
    /// "-", creates NEW; prints "<opened> <errno name of the first refusal or OK> <errno of the
    /// create or OK>", then holds its descriptors until killed.
    static let holder = #"""
    import os, sys, errno, time
    path, count, new = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    flags = os.O_RDONLY | (os.O_DIRECTORY if os.path.isdir(path) else 0)
    fds, err = [], "OK"
    for i in range(count):
        try:
            fds.append(os.open(path, flags))
        except OSError as e:
            err = errno.errorcode.get(e.errno, str(e.errno))
            break
    made = "-"
    if new != "-":
        try:
            fds.append(os.open(new, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
            made = "OK"
        except OSError as e:
            made = errno.errorcode.get(e.errno, str(e.errno))
    print(len(fds) - (1 if made == "OK" else 0), err, made, flush=True)
    time.sleep(600)
    """#

    /// A process of `uid` running `holder`, and what it printed.
    final class Holder: ScriptAsUser {
        init(uid: uid_t, path: String, count: Int, create: String = "-") throws {
            try super.init(uid: uid, script: OpenFileLimitTests.holder, arguments: [path, "\(count)", create])
        }

        /// The line it printed once its opens are done (nil when none came within a minute).
        func report() -> (opened: Int, refusal: String, create: String)? {
            guard let f = fields(3, within: 60), let n = Int(f[0]) else { return nil }
            return (n, f[1], f[2])
        }
    }

    /// Root through the mount while nobody holds what it may: opens of a file (20 at once), a
    /// create and its write, a listing, and `coordfs status` (a connection to the control socket).
    private func assertRootIsServed(_ what: String, file: StaticString = #filePath, line: UInt = #line) throws {
        var fds: [Int32] = []
        defer { fds.forEach { close($0) } }
        for _ in 0..<20 {
            let fd = open(mnt("shared/doc.txt"), O_RDONLY)
            XCTAssertGreaterThanOrEqual(fd, 0, "\(what): root's open through the mount: \(String(cString: strerror(errno)))", file: file, line: line)
            if fd < 0 { break }
            fds.append(fd)
        }
        var buffer = [UInt8](repeating: 0, count: 64)
        if let first = fds.first { XCTAssertEqual(read(first, &buffer, 64), 6, "\(what): root reads the file", file: file, line: line) }
        let name = "root-\(UInt32.random(in: 0...UInt32.max)).txt"
        let fd = open(mnt(name), O_WRONLY | O_CREAT | O_EXCL, 0o644)
        XCTAssertGreaterThanOrEqual(fd, 0, "\(what): root's create through the mount: \(String(cString: strerror(errno)))", file: file, line: line)
        if fd >= 0 {
            XCTAssertEqual(write(fd, "saved\n", 6), 6, file: file, line: line)
            close(fd)
            XCTAssertEqual(try? String(contentsOfFile: backing(name), encoding: .utf8), "saved\n", "\(what): root's file is in the backing folder", file: file, line: line)
        }
        XCTAssertNotNil(try? FileManager.default.contentsOfDirectory(atPath: mnt("shared")), "\(what): root lists a folder", file: file, line: line)
        guard case .coordfs(let bin) = target else { return }
        let status = Spawn.run(bin, ["status", fixture.mnt])
        XCTAssertEqual(status.status, 0, "\(what): root's `coordfs status` connects: \(status)", file: file, line: line)
    }

    private func makeSharedFiles() {
        mkdir(mnt("shared"), 0o755)
        XCTAssertTrue(FileManager.default.createFile(atPath: mnt("shared/doc.txt"), contents: Data("hello\n".utf8),
                                                     attributes: [.posixPermissions: 0o644]))
        mkdir(mnt("drop"), 0o777)
        chmod(mnt("drop"), 0o777)
    }

    /// `max_user_open_files=100`: nobody's 101st open of root's 0644 file, and its create at the
    /// bound, get ENFILE (nothing created); another uid still opens 20 within the others' share
    /// (100 + 20 of 128); root is served;
    /// once nobody's process is gone, nobody opens again.
    func testOneUsersOpenFilesAreBoundedAndTheBoundIsGivenBack() throws {
        guard target.isCoordFS else { throw XCTSkip("a coordfs daemon's bound") }
        XCTAssertEqual(fixture.daemonDescriptorLimit(), 512)
        makeSharedFiles()

        let greedy = try Holder(uid: 65534, path: mnt("shared/doc.txt"), count: 150, create: mnt("drop/new.txt"))
        let seen = try XCTUnwrap(greedy.report(), "nobody's opens: \(greedy.errors)")
        XCTAssertEqual(seen.opened, 100, "nobody holds max_user_open_files opens")
        XCTAssertEqual(seen.refusal, "ENFILE", "its 101st open is refused with ENFILE")
        XCTAssertEqual(seen.create, "ENFILE", "a create at the bound is refused too")
        XCTAssertFalse(FileManager.default.fileExists(atPath: backing("drop/new.txt")), "a refused create makes nothing")

        // Another process of nobody's: refused at once. Another user: its own bound.
        let more = try Holder(uid: 65534, path: mnt("shared"), count: 1)
        XCTAssertEqual(more.report()?.refusal, "ENFILE", "nobody's other processes share its bound (a folder's open counts too)")
        more.end()
        let other = try Holder(uid: 65533, path: mnt("shared/doc.txt"), count: 20)
        let theirs = try XCTUnwrap(other.report(), "another user's opens: \(other.errors)")
        XCTAssertEqual(theirs.opened, 20, "another user's opens are not held up by nobody's bound")
        XCTAssertEqual(theirs.refusal, "OK")

        try assertRootIsServed("nobody at its bound")
        XCTAssertLessThan(fixture.daemonOpenDescriptors() ?? 512, 400, "the daemon keeps descriptors to spare")
        XCTAssertTrue(daemonLog().contains("max_user_open_files (100)"), "the daemon's log says it: \(daemonLog().suffix(800))")

        // nobody's descriptors come back once its process is gone (the kernel's RELEASEs).
        greedy.end()
        _ = eventually("nobody opens again once its holder exited") {
            let again = try? Holder(uid: 65534, path: mnt("shared/doc.txt"), count: 100)
            defer { again?.end() }
            return again?.report().map { $0.opened == 100 && $0.refusal == "OK" } ?? false
        }
    }

    /// `max_user_open_files=100`: `flock(1)` as nobody on 150 new lock files (each made by an open
    /// for reading with O_CREAT) all run, nobody creates a file after them, and once they are
    /// removed the daemon holds no descriptor of any of them. Before, the daemon kept each such
    /// create's open (three descriptors) and its count in nobody's bound for good: the 101st
    /// `flock` failed with ENFILE, and so did every later open and create of nobody's, and the
    /// removed lock files stayed allocated on disk.
    func testOneUsersReadOnlyCreatesGiveTheirOpensBack() throws {
        guard target.isCoordFS else { throw XCTSkip("a coordfs daemon's bound") }
        guard let setpriv = Spawn.which("setpriv"), Spawn.which("flock") != nil else { throw XCTSkip("setpriv and flock are needed") }
        makeSharedFiles()
        let asNobody = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "/bin/sh", "-c"]
        let locks = Spawn.run(asNobody[0], Array(asNobody.dropFirst()) + [
            "cd \"$1\" && for i in $(seq 1 150); do flock lock$i true || exit 1; done && echo made > after", "sh", mnt("drop")], timeout: 120)
        XCTAssertEqual(locks.status, 0, "every flock(1) on a new lock file runs, and nobody creates a file after them: \(locks)")
        XCTAssertEqual(try? String(contentsOfFile: backing("drop/after"), encoding: .utf8), "made\n")
        for i in 1...150 { unlink(mnt("drop/lock\(i)")) }
        let pid = try XCTUnwrap(fixture.daemonPids.first)
        _ = eventually("the daemon holds no descriptor of a removed lock file") {
            let fds = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd")) ?? []
            return !fds.contains { fd in
                ((try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/fd/\(fd)")) ?? "").contains("/drop/lock")
            }
        }
    }

    /// No per-user bound to speak of (`max_user_open_files=100000`): four of nobody's processes
    /// opening 150 files and folders each take at most the others' share of the daemon's
    /// descriptors, the rest ENFILE, and root is served as before; freed again when they exit.
    func testManyProcessesOfOneUserCannotTakeTheDescriptorsKeptForRoot() throws {
        guard target.isCoordFS else { throw XCTSkip("a coordfs daemon's bound") }
        XCTAssertEqual(fixture.daemonDescriptorLimit(), 512)
        makeSharedFiles()

        let holders = try (0..<4).map { i in
            try Holder(uid: 65534, path: i == 3 ? mnt("shared") : mnt("shared/doc.txt"), count: 150)
        }
        let reports = holders.map { $0.report() }
        for (h, r) in zip(holders, reports) { XCTAssertNotNil(r, "nobody's opens: \(h.errors)") }
        let opened = reports.compactMap { $0?.opened }.reduce(0, +)
        XCTAssertEqual(opened, Self.othersPool, "nobody's processes hold the others' share and no more: \(reports)")
        for r in reports.compactMap({ $0 }) where r.opened < 150 {
            XCTAssertEqual(r.refusal, "ENFILE", "beyond it: ENFILE (\(reports))")
        }

        try assertRootIsServed("nobody's processes holding the others' share")
        XCTAssertLessThan(fixture.daemonOpenDescriptors() ?? 512, 480, "the daemon keeps descriptors to spare")
        XCTAssertTrue(daemonLog().contains("users other than root and the owner hold \(Self.othersPool) of the daemon's descriptors"),
                      "the daemon's log says it: \(daemonLog().suffix(800))")

        holders.forEach { $0.end() }
        _ = eventually("nobody opens again once its holders exited") {
            let again = try? Holder(uid: 65534, path: mnt("shared/doc.txt"), count: Self.othersPool)
            defer { again?.end() }
            return again?.report().map { $0.opened == Self.othersPool && $0.refusal == "OK" } ?? false
        }
    }

}
