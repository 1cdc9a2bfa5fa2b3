// The document store through the binary: `coordfs versions`, `show`, `diff`, `restore` (a
// coordinated, undoable write through the mount), `conflicts` and every `resolve` for a change and
// for a deletion, and a daemon killed with SIGKILL mid-conflict: nothing lost, the conflict still
// resolvable after a fresh `coordfs mount`.
//
// Presenters are `coordfs present` children (out-of-process, through the control socket); the
// store learns them from the coordinator, and `--unsaved` tells it they have unsaved changes (the
// protocol's `register` with `unsaved`), so a change underneath them is a conflict.
import Foundation
import Glibc
import TestSupport
import XCTest

final class StoreCLITests: CLITestCase {
    private var storeDatabase: String { backing + "/.coordfs/store/metadata.sqlite" }

    /// `coordfs present PATH [--unsaved]` in the background, once it is registered.
    /// Queries the store's database (Python's sqlite3); returns the first column of the first row.
    @discardableResult
    private func sql(_ statement: String, file: StaticString = #filePath, line: UInt = #line) -> String {
        let script = "import sqlite3,sys; c=sqlite3.connect(sys.argv[1], timeout=10); r=c.execute(sys.argv[2]).fetchone(); c.commit(); print(r[0] if r else '')"
        let r = run("/usr/bin/python3", ["-c", script, storeDatabase, statement])
        XCTAssertEqual(r.status, 0, "sql \(statement): \(r)", file: file, line: line)
        return r.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// The store has `count` presenters with unsaved changes (`--unsaved` said so at registration).
    private func assertUnsaved(interests count: Int, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertEqual(Int(sql("SELECT COUNT(*) FROM interest WHERE hasUnsavedChanges = 1")), count, "unsaved interests", file: file, line: line)
    }

    /// Waits for the presenter's documentChanged line and returns it.
    private func documentChanged(_ presenter: Child, file: StaticString = #filePath, line: UInt = #line) -> String? {
        let deadline = Date().addingTimeInterval(10)
        while !presenter.lines.contains(where: { $0.hasPrefix("notification documentChanged") }) && Date() < deadline { usleep(20_000) }
        let lines = presenter.lines.filter { $0.hasPrefix("notification documentChanged") }
        XCTAssertEqual(lines.count, 1, "one documentChanged: \(presenter.stdout)", file: file, line: line)
        return lines.first
    }

    private func text(_ relative: String) -> String? { try? String(contentsOfFile: backing + "/" + relative, encoding: .utf8) }

    private func openConflicts(file: StaticString = #filePath, line: UInt = #line) -> [[String: Any]] {
        let r = coordfs("conflicts", mnt, "--json")
        XCTAssertEqual(r.status, 0, "\(r)", file: file, line: line)
        return r.lines.compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
    }

    /// Waits for `count` open conflicts.
    @discardableResult
    private func waitForConflicts(_ count: Int, timeout: Double = 8, file: StaticString = #filePath, line: UInt = #line) -> [[String: Any]] {
        let deadline = Date().addingTimeInterval(timeout)
        var c = openConflicts(file: file, line: line)
        while c.count < count && Date() < deadline { usleep(100_000); c = openConflicts(file: file, line: line) }
        XCTAssertEqual(c.count, count, "open conflicts: \(c)", file: file, line: line)
        return c
    }

    private func versions(_ relative: String, file: StaticString = #filePath, line: UInt = #line) -> [[String: Any]] {
        let r = coordfs("versions", mnt + "/" + relative, "--json")
        XCTAssertEqual(r.status, 0, "\(r)", file: file, line: line)
        return r.lines.compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
    }

    /// `coordfs present PATH --unsaved` as nobody, once it is registered.
    private func presentAsNobody(_ relative: String, file: StaticString = #filePath, line: UInt = #line) throws -> Child {
        let child = try start("/usr/bin/setpriv", user(65534) + [binary, "present", mnt + "/" + relative, "--unsaved"])
        let registered = Date().addingTimeInterval(10)
        while !child.lines.contains(where: { $0.hasPrefix("registered") }) && Date() < registered { usleep(20_000) }
        XCTAssertTrue(child.lines.contains { $0.hasPrefix("registered") }, "\(child.stdout) \(child.stderr)", file: file, line: line)
        return child
    }

    /// The store's files made unreadable to any other user (a CLI that opened them would fail).
    private func lockStoreFromOthers() {
        chmod(backing + "/.coordfs/store/metadata.sqlite", 0o600)
        chmod(backing + "/.coordfs/store", 0o700)
    }

    /// A folder `shared` (0777) in a mount root every user reaches.
    private func makeSharedFolder() {
        chmod(root, 0o755)
        mkdir(backing + "/shared", 0o777)
        chmod(backing + "/shared", 0o777)
    }

    /// A Python client as nobody that sends `count` restores of `version` over shared/doc.txt at
    /// once through the control socket, then runs `after` (Python, `time` imported).
    private func startRestoreFlood(_ count: Int, of version: Int64, then after: String) throws -> Child {
        let script = pythonClientPrelude + """
        import time
        send({"type": "hello", "id": 1, "versions": [1]})
        receive()
        for i in range(\(count)):
            send({"type": "restore", "id": 10 + i, "version": int(sys.argv[2]), "path": "shared/doc.txt"})

        """ + after
        return try start("/usr/bin/setpriv", user(65534) + ["/usr/bin/python3", "-c", script, backing + "/.coordfs/control.sock", String(version)])
    }

    /// The oldest kept version of the document, once there is one (up to 5 s).
    private func firstVersion(_ relative: String) -> Int64? {
        var kept = versions(relative)
        let deadline = Date().addingTimeInterval(5)
        while kept.isEmpty && Date() < deadline { usleep(50_000); kept = versions(relative) }
        return (kept.last?["version"] as? NSNumber)?.int64Value
    }

    // MARK: Versions

    func testVersionsShowDiffAndAnUndoableRestore() throws {
        FileManager.default.createFile(atPath: backing + "/doc.txt", contents: Data("one\n".utf8))
        try mount()
        let presenter = try present("doc.txt")
        XCTAssertEqual(sh("echo two > '\(mnt!)/doc.txt'").status, 0)
        XCTAssertEqual(sh("sed -i s/two/three/ '\(mnt!)/doc.txt'").status, 0)
        var kept = versions("doc.txt")
        let deadline = Date().addingTimeInterval(5)
        while kept.count < 2 && Date() < deadline { usleep(50_000); kept = versions("doc.txt") }
        XCTAssertEqual(kept.map { $0["reason"] as? String }, ["replaced", "beforeWrite"], "\(kept)")
        // Copies on ext4, clones where the backing folder clones; never links.
        XCTAssertEqual(Set(kept.compactMap { $0["method"] as? String }).count, 1, "\(kept)")
        XCTAssertTrue(kept.allSatisfy { ["copy", "reflink"].contains($0["method"] as? String) }, "\(kept)")
        // Nothing unsaved: each change underneath the presenter is a reload.
        let reloaded = Date().addingTimeInterval(5)
        while presenter.lines.filter({ $0.hasPrefix("notification documentChanged") }).count < 2 && Date() < reloaded { usleep(20_000) }
        XCTAssertEqual(presenter.lines.filter { $0.hasPrefix("notification documentChanged doc.txt kind=change action=reload document=") }.count, 2,
                       presenter.stdout)
        let one = try XCTUnwrap((kept.last?["version"] as? NSNumber)?.int64Value)
        let two = try XCTUnwrap((kept.first?["version"] as? NSNumber)?.int64Value)

        let table = coordfs("versions", mnt + "/doc.txt")
        XCTAssertEqual(table.status, 0, "\(table)")
        XCTAssertTrue(table.lines.first?.hasPrefix("VERSION  TIME") == true, table.stdout)
        XCTAssertTrue(table.stdout.contains("replaced") && table.stdout.contains("copy") && table.stdout.contains("4 B"), table.stdout)

        XCTAssertEqual(coordfs("show", mnt + "/doc.txt", "--version", String(one)).stdout, "one\n")
        XCTAssertEqual(coordfs("show", mnt + "/doc.txt", "--version", String(two)).stdout, "two\n")
        let diff = coordfs("diff", mnt + "/doc.txt", "--version", String(one))
        XCTAssertEqual(diff.status, 0, "\(diff)")
        XCTAssertTrue(diff.stdout.contains("-one\n+three\n"), diff.stdout)

        // Restore is a coordinated write through the mount: the presenter is asked and told.
        let notifiedBefore = presenter.lines.filter { $0.hasPrefix("notification didChange") }.count
        let restore = coordfs("restore", mnt + "/doc.txt", "--version", String(one))
        XCTAssertEqual(restore.status, 0, "\(restore)")
        XCTAssertEqual(text("doc.txt"), "one\n")
        XCTAssertEqual(FileOps.get(mnt + "/doc.txt"), "one\n")
        let told = Date().addingTimeInterval(5)
        while presenter.lines.filter({ $0.hasPrefix("notification didChange") }).count <= notifiedBefore && Date() < told { usleep(20_000) }
        XCTAssertEqual(presenter.lines.filter { $0.hasPrefix("notification didChange") }.count, notifiedBefore + 1, presenter.stdout)
        XCTAssertTrue(presenter.lines.contains { $0.contains("relinquishToWriter") }, presenter.stdout)
        // ... and undoable: the file it replaced ("three") is a version now.
        let three = try XCTUnwrap(versions("doc.txt").first { v in
            let id = (v["version"] as? NSNumber)?.int64Value ?? 0
            return self.coordfs("show", self.mnt + "/doc.txt", "--version", String(id)).stdout == "three\n"
        }.flatMap { ($0["version"] as? NSNumber)?.int64Value })
        XCTAssertTrue(restore.stdout.contains("--version \(three) undoes this"), restore.stdout)
        XCTAssertEqual(coordfs("restore", mnt + "/doc.txt", "--version", String(three)).status, 0)
        XCTAssertEqual(text("doc.txt"), "three\n")
        XCTAssertFalse(try FileManager.default.contentsOfDirectory(atPath: backing).contains { $0.contains("coordfs-restore") }, "no temp file left")
    }

    /// A restore that re-creates a deleted document gives it the mode the file had when the version
    /// was kept (before: 0666, writable by every user, the daemon's umask being 0).
    func testARestoredDeletedDocumentHasTheModeItWasKeptWith() throws {
        FileManager.default.createFile(atPath: backing + "/doc.txt", contents: Data("one\n".utf8))
        chmod(backing + "/doc.txt", 0o640)
        try mount()
        let presenter = try present("doc.txt")
        XCTAssertEqual(sh("rm '\(mnt!)/doc.txt'").status, 0)
        var kept = versions("doc.txt")
        let deadline = Date().addingTimeInterval(5)
        while kept.isEmpty && Date() < deadline { usleep(50_000); kept = versions("doc.txt") }
        let id = try XCTUnwrap((kept.first?["version"] as? NSNumber)?.int64Value, "\(kept)")
        let restore = coordfs("restore", mnt + "/doc.txt", "--version", String(id))
        XCTAssertEqual(restore.status, 0, "\(restore)")
        XCTAssertEqual(text("doc.txt"), "one\n")
        var st = stat()
        XCTAssertEqual(stat(backing + "/doc.txt", &st), 0)
        XCTAssertEqual(st.st_mode & 0o7777, 0o640, String(st.st_mode & 0o7777, radix: 8))
        _ = presenter
    }

    /// `coordfs restore` run as nobody (issue 18 item 5): the daemon restores for it over the
    /// socket (the CLI never opens the store: its database is unreadable to nobody), a coordinated
    /// write whose presenter is asked and told, and it is refused a document nobody could not write.
    func testRestoreIsARequestToTheDaemonWithTheCallersRights() throws {
        makeSharedFolder()  // nobody reaches the mount
        FileManager.default.createFile(atPath: backing + "/shared/doc.txt", contents: Data("one\n".utf8), attributes: [.posixPermissions: 0o666])
        FileManager.default.createFile(atPath: backing + "/secret.txt", contents: Data("root only\n".utf8), attributes: [.posixPermissions: 0o600])
        try mount(options: ["allow_other"])
        let presenter = try present("shared/doc.txt")
        XCTAssertEqual(sh("echo two > '\(mnt!)/shared/doc.txt'").status, 0)
        let one = try XCTUnwrap(firstVersion("shared/doc.txt"))
        // The store's database is nobody's to read in no way: a CLI that opened it would fail.
        lockStoreFromOthers()
        // versions, show and diff ask the daemon instead, for a document nobody may read.
        let listed = coordfs(as: 65534, "versions", mnt + "/shared/doc.txt", "--json")
        XCTAssertEqual(listed.status, 0, "\(listed)")
        XCTAssertTrue(listed.stdout.contains("\"version\":\(one)"), "\(listed)")
        XCTAssertEqual(coordfs(as: 65534, "show", mnt + "/shared/doc.txt", "--version", String(one)).stdout, "one\n")
        let diffed = coordfs(as: 65534, "diff", mnt + "/shared/doc.txt", "--version", String(one))
        XCTAssertEqual(diffed.status, 0, "\(diffed)")
        XCTAssertTrue(diffed.stdout.contains("-one\n+two\n"), "\(diffed)")
        // ... and refuse nobody a document it may not read, or another document's version.
        let secretVersions = coordfs(as: 65534, "versions", mnt + "/secret.txt")
        XCTAssertNotEqual(secretVersions.status, 0, "\(secretVersions)")
        XCTAssertTrue(secretVersions.stderr.contains("permissionDenied") || secretVersions.stderr.contains("may not read"), "\(secretVersions)")
        let secretShow = coordfs(as: 65534, "show", mnt + "/secret.txt", "--version", String(one))
        XCTAssertNotEqual(secretShow.status, 0, "\(secretShow)")
        XCTAssertEqual(secretShow.stdout, "", "\(secretShow)")

        let askedBefore = presenter.lines.filter { $0.contains("relinquishToWriter") }.count
        let toldBefore = presenter.lines.filter { $0.hasPrefix("notification didChange") }.count
        let restore = coordfs(as: 65534, "restore", mnt + "/shared/doc.txt", "--version", String(one))
        XCTAssertEqual(restore.status, 0, "\(restore)")
        XCTAssertEqual(text("shared/doc.txt"), "one\n")
        XCTAssertTrue(restore.stdout.contains("undoes this"), restore.stdout)
        let told = Date().addingTimeInterval(5)
        while presenter.lines.filter({ $0.hasPrefix("notification didChange") }).count <= toldBefore && Date() < told { usleep(20_000) }
        XCTAssertEqual(presenter.lines.filter { $0.contains("relinquishToWriter") }.count, askedBefore + 1, presenter.stdout)
        XCTAssertEqual(presenter.lines.filter { $0.hasPrefix("notification didChange") }.count, toldBefore + 1, presenter.stdout)
        // The log shows who asked for the restore (nobody's `coordfs restore` process), not the
        // daemon: its coordinated write and the version it kept first.
        let restored = log().filter { $0.path == "/shared/doc.txt" && $0.uid == 65534 }
        XCTAssertFalse(restored.isEmpty, "no record of the restore names its requester: \(log().filter { $0.path == "/shared/doc.txt" })")
        XCTAssertTrue(restored.contains { $0.kind == "snapshotTaken" }, "\(restored)")
        XCTAssertTrue(restored.contains { $0.kind != "snapshotTaken" }, "the write itself: \(restored)")
        for record in restored {
            XCTAssertTrue(record.executable?.hasSuffix("coordfs") == true, "\(record)")
            XCTAssertNotNil(record.pid, "\(record)")
        }
        // The contents it replaced ("two") were kept as a version.
        XCTAssertTrue(versions("shared/doc.txt").contains { v in
            let id = (v["version"] as? NSNumber)?.int64Value ?? 0
            return self.coordfs("show", self.mnt + "/shared/doc.txt", "--version", String(id)).stdout == "two\n"
        })

        let refused = coordfs(as: 65534, "restore", mnt + "/secret.txt", "--version", String(one))
        XCTAssertNotEqual(refused.status, 0)
        XCTAssertTrue(refused.stderr.contains("permissionDenied") || refused.stderr.contains("may not write"), "\(refused)")
        XCTAssertEqual(text("secret.txt"), "root only\n")
        let unknown = coordfs(as: 65534, "restore", mnt + "/shared/doc.txt", "--version", "424242")
        XCTAssertNotEqual(unknown.status, 0)
        XCTAssertTrue(unknown.stderr.contains("unknownVersion") || unknown.stderr.contains("has no version#424242"), "\(unknown)")
    }

    /// `shared/d/x` of nobody's (holding `text`), a link `shared/s` of nobody's to root's 0700
    /// folder `private`, whose 0600 `x` holds the secret returned.
    private func makeSwappableFolder(holding text: String, file: StaticString = #filePath, line: UInt = #line) -> String {
        makeSharedFolder()
        let secret = "root's secret, never nobody's\n"
        mkdir(backing + "/private", 0o700)
        FileManager.default.createFile(atPath: backing + "/private/x", contents: Data(secret.utf8), attributes: [.posixPermissions: 0o600])
        let made = run("/usr/bin/setpriv", user(65534) + ["/bin/sh", "-c",
            "mkdir '\(backing!)/shared/d' && echo \(text) > '\(backing!)/shared/d/x' && ln -s ../private '\(backing!)/shared/s'"])
        XCTAssertEqual(made.status, 0, "\(made)", file: file, line: line)
        return secret
    }

    /// nobody exchanging `shared/d` and `shared/s` (renameat2 RENAME_EXCHANGE) as fast as it can
    /// for a second more than `seconds`, leaving `d` the folder.
    private func startSwapping(for seconds: Int) throws -> Child {
        let swapper = """
            import ctypes, os, sys, time
            libc = ctypes.CDLL(None, use_errno=True)
            d, s = sys.argv[1].encode(), sys.argv[2].encode()
            end = time.time() + \(seconds) + 1
            while time.time() < end:
                libc.renameat2(-100, d, -100, s, 2)
            if os.path.islink(d):
                libc.renameat2(-100, d, -100, s, 2)
            """
        return try start("/usr/bin/setpriv", user(65534) + ["/usr/bin/python3", "-c", swapper, backing + "/shared/d", backing + "/shared/s"])
    }

    /// A user who may write a folder on a document's path can swap a name between the store's
    /// check of the file and its copy (here nobody exchanges its folder `d` with a link to root's
    /// 0700 folder, over and over, while it replaces `d/x` through the mount). The store kept what
    /// the link led to (root's 0600 file) with the access of the file it checked (nobody's 0644),
    /// so nobody's `coordfs show` printed root's secret. The bytes kept and the access recorded
    /// are now one opened file's, or nothing is kept.
    func testAFolderSwappedWhileItsFileIsKeptNeverGivesNobodyAnotherFilesBytes() throws {
        let secret = makeSwappableFolder(holding: "first")
        // No watcher: the presenter stays at shared/d/x whatever the folder's name is meanwhile.
        try mount(options: ["allow_other", "backing_watcher=off", "keep_versions=100000"])
        let presenter = try present("shared/d/x")
        defer { _ = presenter.stop() }
        let seconds = 4
        let writer = """
            import os, sys, time
            folder = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
            end, n = time.time() + \(seconds), 0
            while time.time() < end:
                fd = os.open("tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644, dir_fd=folder)
                os.write(fd, b"nobody's %d\\n" % n)
                os.close(fd)
                os.rename("tmp", "x", src_dir_fd=folder, dst_dir_fd=folder)
                n += 1
            print(n)
            """
        let writing = try start("/usr/bin/setpriv", user(65534) + ["/usr/bin/python3", "-c", writer, mnt + "/shared/d"])
        let swapping = try startSwapping(for: seconds)
        XCTAssertEqual(writing.wait(timeout: 60), 0, "\(writing.stdout) \(writing.stderr)")
        XCTAssertEqual(swapping.wait(timeout: 60), 0, "\(swapping.stderr)")
        var st = stat()
        XCTAssertTrue(lstat(backing + "/shared/d", &st) == 0 && (st.st_mode & S_IFMT) == S_IFDIR)
        // Every version kept of nobody's file (readable by nobody: recorded as nobody's) whose bytes
        // are root's secret is one nobody's `coordfs show` prints.
        let kept = Int(sql("SELECT COUNT(*) FROM version WHERE srcUid = 65534")) ?? 0
        XCTAssertGreaterThan(kept, 10, "too few replacements kept to race (\(writing.stdout))")
        let leaked = sql("SELECT group_concat(id || ':' || storedName) FROM version WHERE srcUid = 65534").split(separator: ",").compactMap { row in
            let parts = row.split(separator: ":")
            let bytes = try? String(contentsOfFile: backing + "/.coordfs/store/objects/" + parts[1], encoding: .utf8)
            return bytes == secret ? String(parts[0]) : nil
        }
        XCTAssertEqual(leaked, [], "versions of nobody's file holding root's secret (of \(kept) kept)")
        if let first = leaked.first {
            let shown = coordfs(as: 65534, "show", mnt + "/shared/d/x", "--version", String(first))
            XCTAssertNotEqual(shown.stdout, secret, "nobody's coordfs show printed root's 0600 file")
        }
    }

    /// The same swap during nobody's restores of its own document: the daemon checked nobody may
    /// write `shared/d/x`, then wrote by path, through the link `d` had become meanwhile, over root's
    /// 0600 `private/x`. The store now writes into the folder it opened without following a link.
    func testAFolderSwappedDuringRestoresNeverGetsAnotherUsersFileWritten() throws {
        let secret = makeSwappableFolder(holding: "one")
        try mount(options: ["allow_other", "backing_watcher=off"])
        let presenter = try present("shared/d/x")
        defer { _ = presenter.stop() }
        XCTAssertEqual(run("/usr/bin/setpriv", user(65534) + ["/bin/sh", "-c", "echo two > '\(mnt!)/shared/d/x'"]).status, 0)
        let one = try XCTUnwrap(firstVersion("shared/d/x"))
        lockStoreFromOthers()
        let seconds = 4
        let restorer = pythonClientPrelude + """
            import time
            send({"type": "hello", "id": 1, "versions": [1]})
            receive()
            end, n, done = time.time() + \(seconds), 0, 0
            while time.time() < end:
                n += 1
                send({"type": "restore", "id": 10 + n, "version": int(sys.argv[2]), "path": "shared/d/x"})
                while True:
                    m = receive()
                    if m.get("id") == 10 + n: break
                done += m.get("type") != "error"
            print(n, done)
            """
        let swapping = try startSwapping(for: seconds)
        let restoring = try start("/usr/bin/setpriv", user(65534) + ["/usr/bin/python3", "-c", restorer, backing + "/.coordfs/control.sock", String(one)])
        XCTAssertEqual(restoring.wait(timeout: 60), 0, "\(restoring.stdout) \(restoring.stderr)")
        XCTAssertEqual(swapping.wait(timeout: 60), 0, "\(swapping.stderr)")
        let counts = restoring.stdout.split(separator: " ").compactMap { Int($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
        XCTAssertGreaterThan(counts.first ?? 0, 100, "too few restores asked to race: \(restoring.stdout)")
        XCTAssertEqual(text("private/x"), secret, "nobody's restores wrote over root's 0600 file (\(restoring.stdout))")
        var st = stat()
        XCTAssertEqual(lstat(backing + "/private/x", &st), 0)
        XCTAssertEqual(st.st_uid, 0)
        XCTAssertEqual(st.st_mode & 0o777, 0o600)
    }

    // MARK: Conflicts of several users on one allow_other mount

    /// `coordfs conflicts` and `coordfs resolve` run as nobody on an allow_other mount whose store
    /// nobody may not read: the CLI asks the daemon, which lists and resolves only nobody's own
    /// conflicts (its presenter's, from another terminal than the presenter's), with nobody's
    /// rights. nobody resolves its conflict (logged as nobody); root's conflict on the same
    /// document, root's conflict on a document nobody may not see, a crafted id and a path through
    /// a symbolic link are refused clearly, change nothing and name nothing of root's.
    func testNobodyResolvesItsOwnConflictsAndNoOneElses() throws {
        makeSharedFolder()  // nobody reaches the mount
        mkdir(backing + "/private", 0o700)
        FileManager.default.createFile(atPath: backing + "/shared/doc.txt", contents: Data("base\n".utf8), attributes: [.posixPermissions: 0o666])
        FileManager.default.createFile(atPath: backing + "/private/hidden-plan.txt", contents: Data("root base\n".utf8), attributes: [.posixPermissions: 0o666])
        XCTAssertEqual(symlink("../private/hidden-plan.txt", backing + "/shared/link.txt"), 0)
        let mine = root + "/mine.txt"
        FileManager.default.createFile(atPath: mine, contents: Data("nobody's version\n".utf8), attributes: [.posixPermissions: 0o644])
        try mount(options: ["allow_other"])
        // nobody's presenter with unsaved changes, and root's on the same document and on root's own.
        let nobodys = try presentAsNobody("shared/doc.txt")
        let roots = try present("shared/doc.txt", unsaved: true)
        let rootsHidden = try present("private/hidden-plan.txt", unsaved: true)
        assertUnsaved(interests: 3)
        XCTAssertEqual(sh("echo theirs > '\(mnt!)/shared/doc.txt' && echo root theirs > '\(mnt!)/private/hidden-plan.txt'").status, 0)
        let all = waitForConflicts(3)
        // The store's files are not nobody's to read: a CLI that opened them would fail.
        lockStoreFromOthers()
        let nobodysChange = Date().addingTimeInterval(10)
        while !nobodys.lines.contains(where: { $0.hasPrefix("notification didGainConflict") }) && Date() < nobodysChange { usleep(20_000) }
        let gained = try XCTUnwrap(nobodys.lines.first { $0.hasPrefix("notification didGainConflict") }, nobodys.stdout)
        let own = try XCTUnwrap(Int64(gained.split(separator: "=").last ?? ""), gained)
        let others = all.compactMap { ($0["id"] as? NSNumber)?.int64Value }.filter { $0 != own }
        XCTAssertEqual(others.count, 2, "\(all)")

        // nobody lists its own conflict only: nothing of root's, not even the hidden name.
        let listed = coordfs(as: 65534, "conflicts", mnt, "--json")
        XCTAssertEqual(listed.status, 0, "\(listed)")
        XCTAssertEqual(listed.lines.count, 1, "\(listed)")
        XCTAssertTrue(listed.stdout.contains("\"id\":\(own)") && listed.stdout.contains("/shared/doc.txt"), "\(listed)")
        XCTAssertFalse(listed.stdout.contains("hidden-plan"), "\(listed)")

        // Refused, and nothing changes: root's conflict on the same document (by id), a crafted
        // id, root's conflict on its own document named through a symbolic link, and directly.
        let refusals = [
            coordfs(as: 65534, "resolve", mnt + "/shared/doc.txt", "--save", "--from", mine, "--conflict", String(others[0])),
            coordfs(as: 65534, "resolve", mnt + "/shared/doc.txt", "--save", "--from", mine, "--conflict", String(others[1])),
            coordfs(as: 65534, "resolve", mnt + "/shared/doc.txt", "--close", "--conflict", "987654321"),
            coordfs(as: 65534, "resolve", mnt + "/shared/link.txt", "--save", "--from", mine),
            coordfs(as: 65534, "resolve", mnt + "/private/hidden-plan.txt", "--close"),
        ]
        for refused in refusals {
            XCTAssertNotEqual(refused.status, 0, "\(refused)")
            XCTAssertFalse(refused.stdout.contains("resolved"), "\(refused)")
            XCTAssertFalse(refused.stderr.contains("presenter#") || refused.stderr.contains("root base") || refused.stderr.contains("root theirs"),
                           "nothing of root's leaks: \(refused)")
        }
        XCTAssertTrue(refusals[0].stderr.contains("no open conflict \(others[0]) that you may resolve"), "\(refusals[0])")
        XCTAssertTrue(refusals[2].stderr.contains("no open conflict 987654321"), "\(refusals[2])")
        XCTAssertEqual(text("shared/doc.txt"), "theirs\n")
        XCTAssertEqual(text("private/hidden-plan.txt"), "root theirs\n")
        XCTAssertEqual(waitForConflicts(3).count, 3, "every conflict still open")
        // The daemon itself refuses another user's conflict, whatever the client, naming nothing,
        // and an id that names no conflict alike (the same refusal but for the id).
        let client = pythonClientPrelude + """
        send({"type": "hello", "id": 1, "versions": [1]})
        receive()
        import re
        for n, c in enumerate(sys.argv[2:]):
            send({"type": "resolve", "id": 2 + n, "conflict": int(c), "resolution": "close"})
            r = receive()
            print(json.dumps({"code": r.get("code"), "message": re.sub(r"\\b%s\\b" % c, "ID", r.get("message", ""))}))
        """
        let direct = run("/usr/bin/setpriv", user(65534) + ["/usr/bin/python3", "-c", client,
                                              backing + "/.coordfs/control.sock"] + others.map(String.init) + ["987654321"])
        XCTAssertEqual(direct.status, 0, "\(direct)")
        XCTAssertEqual(direct.lines.filter { $0.contains("\"permissionDenied\"") }.count, 3, "\(direct)")
        XCTAssertEqual(Set(direct.lines).count, 1, "another's conflict and no conflict are refused alike (but for the id): \(direct)")
        XCTAssertFalse(direct.stdout.contains("hidden-plan") || direct.stdout.contains("presenter#"), "\(direct)")
        XCTAssertEqual(waitForConflicts(3).count, 3, "every conflict still open")

        // nobody resolves its own, from another terminal than its presenter's: written as nobody.
        let resolved = coordfs(as: 65534, "resolve", mnt + "/shared/doc.txt", "--save", "--from", mine)
        XCTAssertEqual(resolved.status, 0, "\(resolved)")
        XCTAssertTrue(resolved.stdout.hasPrefix("resolved conflict \(own) of"), "\(resolved)")
        XCTAssertEqual(text("shared/doc.txt"), "nobody's version\n")
        let open = waitForConflicts(2).compactMap { ($0["id"] as? NSNumber)?.int64Value }
        XCTAssertEqual(Set(open), Set(others), "root's stay open")
        let told = Date().addingTimeInterval(10)
        while !nobodys.lines.contains(where: { $0.hasPrefix("notification didResolveConflict") }) && Date() < told { usleep(20_000) }
        XCTAssertTrue(nobodys.lines.contains { $0.hasPrefix("notification didResolveConflict") && $0.contains("conflict=\(own)") }, nobodys.stdout)
        let record = try XCTUnwrap(log(["--kind", "conflictResolved"]).first, "the resolution is logged")
        XCTAssertEqual(record.uid, 65534, "logged as nobody's: \(record)")
        XCTAssertTrue(record.executable?.hasSuffix("coordfs") == true, "\(record)")
        _ = (roots, rootsHidden)
    }

    /// nobody's `present --unsaved` of `shared/doc.txt` (0666, "base"), root's write under it
    /// ("theirs"), then the presenter killed (no goodbye) and its interest gone: nobody's open
    /// conflict, and a file outside the mount with nobody's version of the document.
    private func nobodysConflictWithItsPresenterGone(file: StaticString = #filePath, line: UInt = #line) throws -> (mine: String, conflict: Int64) {
        makeSharedFolder()  // nobody reaches the mount
        FileManager.default.createFile(atPath: backing + "/shared/doc.txt", contents: Data("base\n".utf8), attributes: [.posixPermissions: 0o666])
        let mine = root + "/mine.txt"
        FileManager.default.createFile(atPath: mine, contents: Data("nobody's version\n".utf8), attributes: [.posixPermissions: 0o644])
        try mount(options: ["allow_other"])
        let presenter = try presentAsNobody("shared/doc.txt", file: file, line: line)
        assertUnsaved(interests: 1, file: file, line: line)
        XCTAssertEqual(sh("echo theirs > '\(mnt!)/shared/doc.txt'").status, 0, file: file, line: line)
        let conflict = try XCTUnwrap((waitForConflicts(1, file: file, line: line).first?["id"] as? NSNumber)?.int64Value, file: file, line: line)
        _ = presenter.stop(SIGKILL)
        let gone = Date().addingTimeInterval(10)
        while sql("SELECT COUNT(*) FROM interest") != "0" && Date() < gone { usleep(50_000) }
        XCTAssertEqual(sql("SELECT COUNT(*) FROM interest"), "0", "the presenter let go", file: file, line: line)
        return (mine, conflict)
    }

    /// nobody's conflict stays nobody's once its presenter is gone: the store recorded its owner, so
    /// nobody lists and resolves it from a new process through the daemon, with its own rights,
    /// while another user (a throwaway uid) neither sees it nor may resolve it, and learns nothing
    /// of whose it is. Before, only a live presenter of the same user made it resolvable: once the
    /// presenter exited, only root could.
    func testNobodyResolvesItsConflictAfterItsPresenterIsGone() throws {
        let (mine, conflict) = try nobodysConflictWithItsPresenterGone()
        XCTAssertEqual(sql("SELECT ownerUid FROM conflict WHERE id = \(conflict)"), "65534", "the store records whose it is")
        // The store's files are not the other users' to read: their CLI asks the daemon.
        lockStoreFromOthers()

        // Another user: nothing listed, the resolution refused naming nothing of it, nothing changed.
        let stranger = 4242
        let listed = coordfs(as: stranger, "conflicts", mnt, "--json")
        XCTAssertEqual(listed.status, 0, "\(listed)")
        XCTAssertEqual(listed.lines, [], "\(listed)")
        let refusals = [
            coordfs(as: stranger, "resolve", mnt + "/shared/doc.txt", "--close"),
            coordfs(as: stranger, "resolve", mnt + "/shared/doc.txt", "--close", "--conflict", String(conflict)),
            coordfs(as: stranger, "resolve", mnt + "/shared/doc.txt", "--save", "--from", mine, "--conflict", String(conflict)),
        ]
        for refused in refusals {
            XCTAssertNotEqual(refused.status, 0, "\(refused)")
            XCTAssertFalse(refused.stdout.contains("resolved"), "\(refused)")
            XCTAssertFalse(["65534", "nobody", "presenter#", "process:"].contains { refused.stderr.contains($0) }, "nothing of the owner: \(refused)")
        }
        XCTAssertTrue(refusals[1].stderr.contains("no open conflict \(conflict) that you may resolve"), "\(refusals[1])")
        XCTAssertEqual(text("shared/doc.txt"), "theirs\n")
        XCTAssertEqual(waitForConflicts(1).count, 1, "still open")

        // nobody, from a new process: listed, and resolved with its own rights.
        let own = coordfs(as: 65534, "conflicts", mnt, "--json")
        XCTAssertEqual(own.status, 0, "\(own)")
        XCTAssertEqual(own.lines.count, 1, "\(own)")
        XCTAssertTrue(own.stdout.contains("\"id\":\(conflict)") && own.stdout.contains("/shared/doc.txt"), "\(own)")
        let resolved = coordfs(as: 65534, "resolve", mnt + "/shared/doc.txt", "--save", "--from", mine)
        XCTAssertEqual(resolved.status, 0, "\(resolved)")
        XCTAssertTrue(resolved.stdout.hasPrefix("resolved conflict \(conflict) of"), "\(resolved)")
        XCTAssertEqual(text("shared/doc.txt"), "nobody's version\n")
        XCTAssertEqual(waitForConflicts(0).count, 0)
        let record = try XCTUnwrap(log(["--kind", "conflictResolved"]).first, "the resolution is logged")
        XCTAssertEqual(record.uid, 65534, "logged as nobody's: \(record)")
    }

    /// A presenter saying it has unsaved changes takes over only its own user's gone presenter's
    /// conflict (`DocumentStore.setUnsavedChanges`), as the users meet it on an `allow_other` mount:
    /// root's two `present --unsaved` of a shared 0666 document each get a conflict, one of them is
    /// killed. nobody's `present --unsaved` of the document, of a hard link to it and of its new
    /// name once renamed takes nothing (root's conflict stays its gone presenter's, nobody is told
    /// of none and lists none), and root's third presenter from another process takes the gone
    /// one's, never the one of root's presenter that still runs.
    func testOnlyItsOwnUsersEditorTakesOverAGonePresentersConflict() throws {
        makeSharedFolder()  // nobody reaches the mount
        FileManager.default.createFile(atPath: backing + "/shared/doc.txt", contents: Data("base\n".utf8), attributes: [.posixPermissions: 0o666])
        try mount(options: ["allow_other"])
        let gone = try present("shared/doc.txt", unsaved: true), live = try present("shared/doc.txt", unsaved: true)
        XCTAssertEqual(sh("echo theirs > '\(mnt!)/shared/doc.txt'").status, 0)
        let gained = { (p: Child) in p.lines.filter { $0.contains("didGainConflict") }.compactMap { $0.split(separator: "=").last.map(String.init) } }
        XCTAssertTrue(pollUntil(within: 10) { gained(gone).count == 1 && gained(live).count == 1 }, "\(gone.stdout) \(live.stdout)")
        let gonesConflict = try XCTUnwrap(gained(gone).first), livesConflict = try XCTUnwrap(gained(live).first)
        XCTAssertNotEqual(gonesConflict, livesConflict)
        let owner = { (id: String) in self.sql("SELECT presenter FROM conflict WHERE id = \(id)") }
        let gonesPresenter = owner(gonesConflict), livesPresenter = owner(livesConflict)
        _ = gone.stop(SIGKILL)
        XCTAssertTrue(pollUntil(within: 10) { self.sql("SELECT COUNT(*) FROM interest") == "1" }, "the killed presenter let go")

        // nobody: the document, a hard link to it, the document under a new name.
        XCTAssertEqual(link(backing + "/shared/doc.txt", backing + "/shared/link.txt"), 0)
        var nobodys = [try presentAsNobody("shared/doc.txt"), try presentAsNobody("shared/link.txt")]
        XCTAssertEqual(rename(mnt + "/shared/doc.txt", mnt + "/shared/moved.txt"), 0, String(cString: strerror(errno)))
        // A rename may be the first half of a save (to a backup name) for save_window: then it moved.
        XCTAssertTrue(pollUntil(within: 10) {
            self.sql("SELECT d.path FROM conflict c JOIN document d ON d.id = c.documentId WHERE c.id = \(gonesConflict)") == "shared/moved.txt"
        }, "the conflict's document moved")
        nobodys.append(try presentAsNobody("shared/moved.txt"))
        // The takeover is decided before `registered` is sent: the store says what it did.
        XCTAssertEqual(owner(gonesConflict), gonesPresenter, "root's conflict is not nobody's presenter's")
        XCTAssertEqual(owner(livesConflict), livesPresenter)
        let listed = coordfs(as: 65534, "conflicts", mnt, "--json")
        XCTAssertEqual(listed.status, 0, "\(listed)")
        XCTAssertEqual(listed.lines, [], "nobody lists none of root's: \(listed)")

        // root's editor from another process: the gone presenter's, not the live one's.
        let again = try present("shared/moved.txt", unsaved: true)
        XCTAssertTrue(pollUntil(within: 10) { gained(again) == [gonesConflict] }, "told of the gone presenter's conflict: \(again.stdout)")
        XCTAssertNotEqual(owner(gonesConflict), gonesPresenter, "now the new presenter's")
        XCTAssertEqual(owner(livesConflict), livesPresenter, "the live presenter keeps its own")
        XCTAssertEqual(gained(live), [livesConflict])
        for n in nobodys {
            XCTAssertEqual(gained(n), [], "nobody told of nothing: \(n.stdout)")
            XCTAssertEqual(n.stop(), 0)
        }
        XCTAssertEqual(again.stop(), 0)
        XCTAssertEqual(live.stop(), 0)
    }

    /// Its rights still bound what a resolution of its own conflict writes: nobody's conflict on a
    /// document it may no longer write (root made it read-only after the presenter left) is closed
    /// but not saved over.
    func testAGonePresentersConflictIsResolvedOnlyWithItsUsersRights() throws {
        let (mine, _) = try nobodysConflictWithItsPresenterGone()
        chmod(backing + "/shared/doc.txt", 0o644)
        chmod(backing + "/shared", 0o755)
        let save = coordfs(as: 65534, "resolve", mnt + "/shared/doc.txt", "--save", "--from", mine)
        XCTAssertNotEqual(save.status, 0, "\(save)")
        XCTAssertTrue(save.stderr.contains("may not"), "\(save)")
        XCTAssertEqual(text("shared/doc.txt"), "theirs\n")
        XCTAssertEqual(waitForConflicts(1).count, 1)
        let close = coordfs(as: 65534, "resolve", mnt + "/shared/doc.txt", "--close")
        XCTAssertEqual(close.status, 0, "\(close)")
        XCTAssertEqual(waitForConflicts(0).count, 0)
        XCTAssertEqual(text("shared/doc.txt"), "theirs\n")
    }

    /// A user's restores waiting for their write (here 300 of nobody's, of a document another of
    /// nobody's processes holds open for writing) hold no thread of the daemon: root's restore of
    /// another document goes through at once. Before, each waited on a thread of a pool of about
    /// 64, and root's restore waited some 50 s behind them.
    func testAnotherUsersWaitingRestoresHoldUpNoOneElse() throws {
        makeSharedFolder()  // nobody reaches the mount
        FileManager.default.createFile(atPath: backing + "/shared/doc.txt", contents: Data("one\n".utf8), attributes: [.posixPermissions: 0o666])
        FileManager.default.createFile(atPath: backing + "/other.txt", contents: Data("first\n".utf8))
        try mount(options: ["allow_other"])
        let presenters = [try present("shared/doc.txt"), try present("other.txt")]
        XCTAssertEqual(sh("echo two > '\(mnt!)/shared/doc.txt' && echo second > '\(mnt!)/other.txt'").status, 0)
        let doc = try XCTUnwrap(firstVersion("shared/doc.txt"))
        let other = try XCTUnwrap(firstVersion("other.txt"))
        let nobody = user(65534)
        let holder = try start("/usr/bin/setpriv", nobody + [binary, "coordinate", "--write", mnt + "/shared/doc.txt", "--", "/bin/sleep", "30"])
        defer { _ = holder.stop(SIGKILL) }
        usleep(500_000)
        let flooder = try startRestoreFlood(300, of: doc, then: """
        print("sent", flush=True)
        time.sleep(20)
        """)
        defer { _ = flooder.stop(SIGKILL) }
        let sent = Date().addingTimeInterval(10)
        while !flooder.stdout.contains("sent") && Date() < sent { usleep(20_000) }
        XCTAssertTrue(flooder.stdout.contains("sent"), "\(flooder.stdout) \(flooder.stderr)")
        usleep(1_000_000)  // the daemon has taken them
        let start = Date()
        let restored = coordfs("restore", mnt + "/other.txt", "--version", String(other), timeout: 30)
        let took = Date().timeIntervalSince(start)
        XCTAssertEqual(restored.status, 0, "\(restored)")
        XCTAssertLessThan(took, 3, "root's restore waited \(took) s behind nobody's")
        XCTAssertEqual(text("other.txt"), "first\n")
        XCTAssertEqual(text("shared/doc.txt"), "two\n", "nobody's restores wait for the access nobody holds")
        _ = presenters
    }

    /// A user's waiting restores and resolutions count as accesses it waits for
    /// (`max_user_accesses`): here 4 of nobody's restores wait for an access root holds, a fifth
    /// and nobody's `coordfs restore` are refused at once saying which limit and to try again,
    /// while root's and another user's restores go on. When nobody's connection closes its waits
    /// end with it: the count is free again and nothing is written once root lets go. Before,
    /// nobody could queue restores without bound, and a restore whose client had left still wrote.
    func testAUsersWaitingRestoresAreBoundedAndEndWithItsConnection() throws {
        makeSharedFolder()  // nobody reaches the mount
        for name in ["doc", "other", "third"] {
            FileManager.default.createFile(atPath: backing + "/shared/\(name).txt", contents: Data("one\n".utf8), attributes: [.posixPermissions: 0o666])
        }
        try mount(options: ["allow_other", "max_user_accesses=4", "write_wait=60"])
        let presenters = try ["doc", "other", "third"].map { try present("shared/\($0).txt") }
        XCTAssertEqual(sh("for f in doc other third; do echo two > '\(mnt!)/shared/'$f.txt; done").status, 0)
        let doc = try XCTUnwrap(firstVersion("shared/doc.txt"))
        let other = try XCTUnwrap(firstVersion("shared/other.txt"))
        let third = try XCTUnwrap(firstVersion("shared/third.txt"))
        func nobodysWaits() -> Int {
            let r = coordfs("status", mnt, "--json")
            let report = (try? JSONSerialization.jsonObject(with: Data(r.stdout.utf8))) as? [String: Any]
            let waiting = report?["waiting"] as? [[String: Any]] ?? []
            return waiting.filter { ($0["uid"] as? NSNumber)?.intValue == 65534 }.count
        }
        // Root holds the document: nobody's restores of it wait.
        let holder = try start(binary, ["coordinate", "--write", mnt + "/shared/doc.txt", "--", "/bin/sleep", "60"])
        defer { _ = holder.stop(SIGKILL) }
        usleep(500_000)
        let flooder = try startRestoreFlood(6, of: doc, then: """
        sock.settimeout(5)
        for i in range(2):
            print(json.dumps(receive()), flush=True)
        print("answered", flush=True)
        time.sleep(60)
        """)
        defer { _ = flooder.stop(SIGKILL) }
        let answered = Date().addingTimeInterval(10)
        while !flooder.stdout.contains("answered") && Date() < answered { usleep(20_000) }
        let refusals = flooder.lines.filter { $0.contains("limitExceeded") }
        XCTAssertEqual(refusals.count, 2, "two beyond the bound, refused at once: \(flooder.stdout) \(flooder.stderr)")
        XCTAssertTrue(refusals.allSatisfy { $0.contains("max_user_accesses") && ($0.contains("\"id\": 14") || $0.contains("\"id\": 15")) }, "\(refusals)")
        XCTAssertEqual(nobodysWaits(), 4, "four wait")
        // nobody's CLI: refused at once, saying which bound and to try again (EX_TEMPFAIL, as EAGAIN).
        let started = Date()
        let refused = coordfs(as: 65534, "restore", mnt + "/shared/other.txt", "--version", String(other))
        XCTAssertLessThan(Date().timeIntervalSince(started), 10)
        XCTAssertEqual(refused.status, 75, "\(refused)")
        XCTAssertTrue(refused.stderr.contains("max_user_accesses") && refused.stderr.contains("try again"), "\(refused)")
        XCTAssertEqual(text("shared/other.txt"), "two\n")
        // Others' restores go on: root's, and another user's.
        let roots = coordfs("restore", mnt + "/shared/other.txt", "--version", String(other), timeout: 30)
        XCTAssertEqual(roots.status, 0, "\(roots)")
        XCTAssertEqual(text("shared/other.txt"), "one\n")
        let strangers = coordfs(as: 4242, "restore", mnt + "/shared/third.txt", "--version", String(third))
        XCTAssertEqual(strangers.status, 0, "\(strangers)")
        XCTAssertEqual(text("shared/third.txt"), "one\n")
        // nobody's connection closes: its waits end with it and its count is free again.
        _ = flooder.stop(SIGKILL)
        let freed = Date().addingTimeInterval(10)
        while nobodysWaits() > 0 && Date() < freed { usleep(50_000) }
        XCTAssertEqual(nobodysWaits(), 0, "nothing of nobody's left waiting")
        let again = coordfs(as: 65534, "restore", mnt + "/shared/third.txt", "--version", String(try XCTUnwrap(firstVersion("shared/third.txt"))))
        XCTAssertEqual(again.status, 0, "nobody's count is free again: \(again)")
        // Root lets go: none of the restores whose client left writes the document.
        _ = holder.stop(SIGKILL)
        usleep(1_500_000)
        XCTAssertEqual(text("shared/doc.txt"), "two\n", "a restore whose connection closed wrote nothing")
        _ = presenters
    }

    /// A version is for those who could read its file when it was kept: root's private document
    /// (0600), kept when a readable file is renamed over it, stays root's although the document is
    /// readable now. nobody does not see it in `versions` and cannot `show`, `diff` or `restore`
    /// it (an unknown version, as one of another document), while the readable versions stay
    /// nobody's to read. Before, whoever may read the document now read every earlier version.
    func testAVersionKeptFromAFileNobodyCouldReadStaysUnreadableToIt() throws {
        makeSharedFolder()
        FileManager.default.createFile(atPath: backing + "/shared/plan.txt", contents: Data("the secret plan\n".utf8), attributes: [.posixPermissions: 0o600])
        try mount(options: ["allow_other"])
        let presenter = try present("shared/plan.txt")
        // Root publishes a new plan over the private one, then nobody-readable edits follow.
        XCTAssertEqual(sh("printf 'the public plan\\n' > '\(mnt!)/public.tmp' && chmod 666 '\(mnt!)/public.tmp' && mv '\(mnt!)/public.tmp' '\(mnt!)/shared/plan.txt' && echo 'public, edited' > '\(mnt!)/shared/plan.txt'").status, 0)
        var kept = versions("shared/plan.txt")
        let deadline = Date().addingTimeInterval(5)
        while kept.count < 2 && Date() < deadline { usleep(50_000); kept = versions("shared/plan.txt") }
        let ids = kept.compactMap { ($0["version"] as? NSNumber)?.int64Value }
        XCTAssertEqual(ids.count, 2, "\(kept)")
        let secret = try XCTUnwrap(ids.min()), published = try XCTUnwrap(ids.max())
        XCTAssertEqual(coordfs("show", mnt + "/shared/plan.txt", "--version", String(secret)).stdout, "the secret plan\n", "root reads every version")
        lockStoreFromOthers()
        let listed = coordfs(as: 65534, "versions", mnt + "/shared/plan.txt", "--json")
        XCTAssertEqual(listed.status, 0, "\(listed)")
        XCTAssertEqual(listed.lines.count, 1, "\(listed)")
        XCTAssertTrue(listed.stdout.contains("\"version\":\(published)"), "\(listed)")
        XCTAssertEqual(coordfs(as: 65534, "show", mnt + "/shared/plan.txt", "--version", String(published)).stdout, "the public plan\n")
        for refused in [coordfs(as: 65534, "show", mnt + "/shared/plan.txt", "--version", String(secret)),
                        coordfs(as: 65534, "diff", mnt + "/shared/plan.txt", "--version", String(secret)),
                        coordfs(as: 65534, "restore", mnt + "/shared/plan.txt", "--version", String(secret))] {
            XCTAssertNotEqual(refused.status, 0, "\(refused)")
            XCTAssertFalse(refused.stdout.contains("secret") || refused.stderr.contains("secret"), "\(refused)")
            XCTAssertTrue(refused.stderr.contains("\(secret)"), "\(refused)")
        }
        XCTAssertEqual(text("shared/plan.txt"), "public, edited\n")
        _ = presenter
    }

    /// A version of a document nobody may not read is refused as one that does not exist: version
    /// ids are sequential, and the refusal used to name the document, so asking for every id named
    /// the files of a folder nobody may search but not list (0711).
    func testReadingAnotherUsersVersionByIdNamesNothing() throws {
        makeSharedFolder()
        mkdir(backing + "/dropbox", 0o711)
        chmod(backing + "/dropbox", 0o711)
        FileManager.default.createFile(atPath: backing + "/dropbox/merger-with-acme.txt", contents: Data("draft\n".utf8), attributes: [.posixPermissions: 0o600])
        try mount(options: ["allow_other"])
        let presenter = try present("dropbox/merger-with-acme.txt")
        XCTAssertEqual(sh("echo final > '\(mnt!)/dropbox/merger-with-acme.txt'").status, 0)
        let kept = try XCTUnwrap(firstVersion("dropbox/merger-with-acme.txt"))
        lockStoreFromOthers()
        let client = pythonClientPrelude + """
        send({"type": "hello", "id": 1, "versions": [1]})
        receive()
        import re
        for n, v in enumerate(sys.argv[2:]):
            send({"type": "readVersion", "id": 2 + n, "version": int(v)})
            r = receive()
            print(json.dumps({"code": r.get("code"), "message": re.sub(r"\\b%s\\b" % v, "ID", r.get("message", ""))}))
        """
        let direct = run("/usr/bin/setpriv", user(65534) + ["/usr/bin/python3", "-c", client, backing + "/.coordfs/control.sock",
                                                             String(kept), "987654321"])
        XCTAssertEqual(direct.status, 0, "\(direct)")
        XCTAssertEqual(direct.lines.count, 2, "\(direct)")
        XCTAssertFalse(direct.stdout.contains("merger") || direct.stdout.contains("draft"), "\(direct)")
        XCTAssertTrue(direct.lines.allSatisfy { $0.contains("\"unknownVersion\"") }, "\(direct)")
        XCTAssertEqual(Set(direct.lines).count, 1, "a version nobody may not read and no version are refused alike (but for the id): \(direct)")
        _ = presenter
    }

    func testStoreCommandsRefuseBadInputClearly() throws {
        FileManager.default.createFile(atPath: backing + "/doc.txt", contents: Data("one\n".utf8))
        try mount()
        let unknown = coordfs("show", mnt + "/doc.txt", "--version", "424242")
        XCTAssertNotEqual(unknown.status, 0)
        XCTAssertTrue(unknown.stderr.contains("no kept version 424242"), "\(unknown)")
        let outside = coordfs("versions", root + "/elsewhere.txt")
        XCTAssertNotEqual(outside.status, 0)
        XCTAssertTrue(outside.stderr.contains("not in a coordfs mount"), "\(outside)")
        let noConflict = coordfs("resolve", mnt + "/doc.txt", "--reload")
        XCTAssertNotEqual(noConflict.status, 0)
        XCTAssertTrue(noConflict.stderr.contains("no open conflict"), "\(noConflict)")
        let noMine = coordfs("resolve", mnt + "/doc.txt", "--save")
        XCTAssertNotEqual(noMine.status, 0)
        XCTAssertTrue(noMine.stderr.contains("--from FILE"), "\(noMine)")
        let two = coordfs("resolve", mnt + "/doc.txt", "--save", "--reload")
        XCTAssertNotEqual(two.status, 0, "one resolution at a time: \(two)")
        // No resolution named: the error and the usage say to pick one of the five.
        let none = coordfs("resolve", mnt + "/doc.txt")
        XCTAssertEqual(none.status, 64, "\(none)")
        XCTAssertTrue(none.stderr.contains("(--close | --save | --reload | --keep-both | --merge)"), "\(none)")
        XCTAssertFalse(none.stderr.contains("<close>"), "\(none)")
        let help = coordfs("resolve", "--help")
        XCTAssertTrue(help.stdout.contains("USAGE: coordfs resolve <path> (--close | --save"), "\(help)")
        XCTAssertTrue(help.stdout.contains("Take theirs, drop yours."), "\(help)")
        let mountRoot = coordfs("resolve", mnt, "--close")
        XCTAssertNotEqual(mountRoot.status, 0)
        XCTAssertEqual(text("doc.txt"), "one\n", "nothing changed")
        XCTAssertEqual(coordfs("conflicts", mnt).stdout, "no open conflicts\n")
    }

    /// `coordfs versions` of a path that names nothing, and never had a version kept, says so and
    /// fails (it printed "no kept versions" and exited 0, as for a document with none kept); a
    /// document with none kept still exits 0, and a deleted document's versions are listed.
    func testVersionsOfAPathThatNamesNothingSaysSoAndFails() throws {
        FileManager.default.createFile(atPath: backing + "/doc.txt", contents: Data("one\n".utf8))
        FileManager.default.createFile(atPath: backing + "/gone.txt", contents: Data("gone\n".utf8))
        try mount()
        for missing in ["nope.txt", "nodir/nope.txt", "doc.txt/below"] {
            for json in [false, true] {
                let r = json ? coordfs("versions", mnt + "/" + missing, "--json") : coordfs("versions", mnt + "/" + missing)
                XCTAssertEqual(r.status, 1, "\(missing): \(r)")
                XCTAssertTrue(r.stderr.contains("'\(mnt!)/\(missing)' does not exist, and no version of it was kept"), "\(missing): \(r)")
                XCTAssertEqual(r.stdout, "", missing)
            }
        }
        // The mount itself is no document (it said "invalid path '': empty").
        let mountItself = coordfs("versions", mnt)
        XCTAssertEqual(mountItself.status, 1, "\(mountItself)")
        XCTAssertTrue(mountItself.stderr.contains("is the mount itself; name a document inside it"), "\(mountItself)")
        let none = coordfs("versions", mnt + "/doc.txt")
        XCTAssertEqual(none.status, 0, "\(none)")
        XCTAssertTrue(none.stderr.contains("no kept versions of"), "\(none)")
        // A presented document deleted: its versions are listed under the path that names nothing now.
        let presenter = try present("gone.txt")
        XCTAssertEqual(sh("rm '\(mnt!)/gone.txt'").status, 0)
        XCTAssertTrue(pollUntil(within: 10) { coordfs("versions", mnt + "/gone.txt", "--json").status == 0 }, "no version of the deleted document listed")
        XCTAssertFalse(versions("gone.txt").isEmpty)
        _ = presenter
    }

    /// `coordfs conflicts` shows a conflict's presenter as `coordfs status` shows presenters: its
    /// number, program[pid] and uid while it is registered, `(gone)` after, where it printed the
    /// store's long internal name (`coordfs-PID-START-BOOT/presenter#N`); `--json` keeps that name
    /// and adds `presenterProcess`.
    func testConflictsShowThePresenterAsStatusDoes() throws {
        FileManager.default.createFile(atPath: backing + "/doc.txt", contents: Data("one\n".utf8))
        try mount()
        let presenter = try present("doc.txt", unsaved: true)
        let registered = try XCTUnwrap(presenter.lines.first { $0.hasPrefix("registered ") }, presenter.stdout)
        let name = String(registered.split(separator: " ")[1])  // presenter#N
        let number = try XCTUnwrap(Int(name.dropFirst("presenter#".count)), registered)
        XCTAssertEqual(sh("echo two > '\(mnt!)/doc.txt'").status, 0)
        let conflict = try XCTUnwrap(waitForConflicts(1).first)
        XCTAssertTrue((conflict["presenter"] as? String)?.hasPrefix("coordfs-") == true, "the store's name kept: \(conflict)")
        let process = try XCTUnwrap(conflict["presenterProcess"] as? [String: Any], "\(conflict)")
        XCTAssertEqual(process["presenter"] as? Int, number, "\(process)")
        XCTAssertEqual(process["pid"] as? Int, Int(presenter.pid), "\(process)")
        XCTAssertEqual(process["executable"] as? String, "coordfs", "\(process)")
        XCTAssertEqual(process["uid"] as? Int, 0, "\(process)")
        XCTAssertEqual(process["running"] as? Bool, true, "\(process)")
        let table = coordfs("conflicts", mnt)
        XCTAssertTrue(table.stdout.contains("\(name) coordfs[\(presenter.pid)] uid 0"), table.stdout)
        XCTAssertFalse(table.stdout.contains(try XCTUnwrap(conflict["presenter"] as? String)), "the internal name: \(table.stdout)")

        presenter.stop()
        XCTAssertTrue(pollUntil(within: 10) { self.coordfs("conflicts", self.mnt).stdout.contains("\(name) (gone) uid 0") },
                      coordfs("conflicts", mnt).stdout)
        let gone = try XCTUnwrap(openConflicts().first?["presenterProcess"] as? [String: Any])
        XCTAssertEqual(gone["running"] as? Bool, false, "\(gone)")
        XCTAssertNil(gone["pid"], "\(gone)")
        XCTAssertEqual(gone["uid"] as? Int, 0, "\(gone)")
    }

    // MARK: Conflicts and every resolution

    func testEveryResolutionOfAChangeThroughTheCLI() throws {
        let base = "first\nmiddle\nlast\n"
        let names = ["close", "save", "reload", "keep-both", "merge"]
        for n in names { FileManager.default.createFile(atPath: backing + "/\(n).txt", contents: Data(base.utf8)) }
        try mount()
        let presenters = try names.map { try present("\($0).txt", unsaved: true) }
        assertUnsaved(interests: names.count)
        for n in names { XCTAssertEqual(sh("printf 'first\\nmiddle\\nlast theirs\\n' > '\(mnt!)/\(n).txt'").status, 0) }
        let listed = waitForConflicts(names.count)
        for (n, presenter) in zip(names, presenters) {
            let line = documentChanged(presenter)
            XCTAssertTrue(line?.hasPrefix("notification documentChanged \(n).txt kind=change action=conflict conflict=") == true, line ?? presenter.stdout)
        }
        XCTAssertEqual(Set(listed.map { $0["kind"] as? String }), ["change"])
        XCTAssertTrue(listed.allSatisfy { $0["baseVersion"] != nil }, "each has its base: \(listed)")
        let table = coordfs("conflicts", mnt)
        XCTAssertTrue(table.lines.first?.hasPrefix("ID  PATH") == true, table.stdout)

        let mine = root + "/mine.txt"
        try "first mine\nmiddle\nlast\n".write(toFile: mine, atomically: false, encoding: .utf8)
        for n in names {
            var args = ["resolve", mnt + "/\(n).txt", "--\(n)"]
            if ["save", "keep-both", "merge"].contains(n) { args += ["--from", mine] }
            let r = coordfs(arguments: args)
            XCTAssertEqual(r.status, 0, "\(n): \(r)")
            XCTAssertTrue(r.stdout.hasPrefix("resolved conflict"), r.stdout)
        }
        XCTAssertEqual(text("close.txt"), "first\nmiddle\nlast theirs\n")
        XCTAssertEqual(text("save.txt"), "first mine\nmiddle\nlast\n")
        XCTAssertEqual(text("reload.txt"), "first\nmiddle\nlast theirs\n")
        XCTAssertEqual(text("keep-both.txt"), "first\nmiddle\nlast theirs\n")
        let copies = try FileManager.default.contentsOfDirectory(atPath: backing).filter { $0.hasPrefix("keep-both (conflict ") }
        XCTAssertEqual(copies.count, 1, "\(copies)")
        XCTAssertEqual(copies.first.flatMap(text), "first mine\nmiddle\nlast\n")
        XCTAssertEqual(text("merge.txt"), "first mine\nmiddle\nlast theirs\n", "a clean three-way merge")
        XCTAssertEqual(openConflicts().count, 0)
        let history = coordfs("conflicts", mnt, "--all", "--json").lines
        XCTAssertEqual(history.count, names.count)
        // Resolved through the daemon (the mount is live): by this user over the control socket, and
        // recorded in the event log.
        XCTAssertTrue(history.allSatisfy { $0.contains("\"resolvedBy\":\"control:uid:\(getuid()):") }, "\(history)")
        let resolved = coordfs("log", mnt, "--kind", "conflictResolved", "--json").lines
        XCTAssertEqual(resolved.count, names.count, "\(resolved)")
        // The file save replaced (theirs) is kept.
        XCTAssertTrue(versions("save.txt").contains { v in
            (v["reason"] as? String) == "resolution"
        })
        _ = presenters
    }

    func testEveryResolutionOfADeletionThroughTheCLI() throws {
        let names = ["close", "save", "keep-both"]
        for n in names { FileManager.default.createFile(atPath: backing + "/\(n).txt", contents: Data("base\n".utf8)) }
        try mount(options: ["save_window=0.2"])
        let presenters = try names.map { try present("\($0).txt", unsaved: true) }
        assertUnsaved(interests: names.count)
        for n in names { XCTAssertEqual(sh("rm '\(mnt!)/\(n).txt'").status, 0) }
        let listed = waitForConflicts(names.count)
        for presenter in presenters {
            XCTAssertTrue(documentChanged(presenter)?.contains("kind=deletion action=conflict") == true, presenter.stdout)
        }
        XCTAssertEqual(Set(listed.map { $0["kind"] as? String }), ["deletion"])
        let mine = root + "/mine.txt"
        try "mine\n".write(toFile: mine, atomically: false, encoding: .utf8)

        let reload = coordfs("resolve", mnt + "/close.txt", "--reload")
        XCTAssertNotEqual(reload.status, 0)
        XCTAssertTrue(reload.stderr.contains("cannot reload") && reload.stderr.contains("deleted"), "\(reload)")
        let merge = coordfs("resolve", mnt + "/close.txt", "--merge", "--from", mine)
        XCTAssertNotEqual(merge.status, 0)
        XCTAssertTrue(merge.stderr.contains("cannot merge"), "\(merge)")
        XCTAssertEqual(openConflicts().count, names.count, "a refused resolution changes nothing")

        XCTAssertEqual(coordfs("resolve", mnt + "/close.txt", "--close").status, 0)
        XCTAssertEqual(coordfs("resolve", mnt + "/save.txt", "--save", "--from", mine).status, 0)
        XCTAssertEqual(coordfs("resolve", mnt + "/keep-both.txt", "--keep-both", "--from", mine).status, 0)
        XCTAssertNil(text("close.txt"), "stays deleted")
        XCTAssertEqual(text("save.txt"), "mine\n", "save restores the deleted file")
        var saved = stat()
        XCTAssertEqual(stat(backing + "/save.txt", &saved), 0)
        XCTAssertEqual(saved.st_mode & 0o022, 0, "writable by others: \(String(saved.st_mode & 0o7777, radix: 8))")
        XCTAssertNil(text("keep-both.txt"))
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: backing).filter { $0.hasPrefix("keep-both (conflict ") }.count, 1)
        XCTAssertEqual(openConflicts().count, 0)
        // The deleted file itself is kept (a copy or a clone of it, never a link to its inode).
        XCTAssertTrue(["copy", "reflink"].contains(versions("close.txt").first?["method"] as? String), "\(versions("close.txt"))")
        XCTAssertEqual(versions("close.txt").count, 1)
        _ = presenters
    }

    // MARK: A moved document

    /// `coordfs present --unsaved` on a document moved through the mount and written at once by
    /// another process (inside save_window): the presenter hears didMove and one documentChanged (a
    /// conflict), `conflicts` lists it at the new path, `versions` by the new path lists the base,
    /// and `resolve` by the new path writes there.
    func testAMovedDocumentKeepsItsConflictAndVersionsThroughTheCLI() throws {
        FileManager.default.createFile(atPath: backing + "/doc.txt", contents: Data("alpha\n".utf8))
        try mount()
        let presenter = try present("doc.txt", unsaved: true)
        assertUnsaved(interests: 1)
        XCTAssertEqual(sh("mv '\(mnt!)/doc.txt' '\(mnt!)/doc2.txt' && echo theirs > '\(mnt!)/doc2.txt'").status, 0)
        let listed = waitForConflicts(1)
        XCTAssertEqual(listed.first?["path"] as? String, mnt + "/doc2.txt", "\(listed)")
        XCTAssertEqual(listed.first?["kind"] as? String, "change")
        let line = documentChanged(presenter)
        XCTAssertTrue(line?.contains("kind=change action=conflict conflict=") == true, line ?? presenter.stdout)
        XCTAssertTrue(presenter.lines.contains("notification didMove doc2.txt newPath=doc2.txt"), presenter.stdout)
        let base = try XCTUnwrap((listed.first?["baseVersion"] as? NSNumber)?.int64Value, "the conflict has its base: \(listed)")
        XCTAssertTrue(versions("doc2.txt").contains { ($0["version"] as? NSNumber)?.int64Value == base }, "the base is listed by the new path")
        XCTAssertEqual(coordfs("show", mnt + "/doc2.txt", "--version", String(base)).stdout, "alpha\n")

        let mine = root + "/mine.txt"
        try "mine\n".write(toFile: mine, atomically: false, encoding: .utf8)
        let resolved = coordfs("resolve", mnt + "/doc2.txt", "--save", "--from", mine)
        XCTAssertEqual(resolved.status, 0, "\(resolved)")
        XCTAssertEqual(text("doc2.txt"), "mine\n")
        XCTAssertNil(text("doc.txt"))
        XCTAssertEqual(openConflicts().count, 0)
        _ = presenter
    }

    // MARK: A daemon killed mid-conflict

    func testDaemonKilledMidConflictLosesNothingAndTheConflictIsResolvableAfterAFreshMount() throws {
        FileManager.default.createFile(atPath: backing + "/doc.txt", contents: Data("a\nb\nc\n".utf8))
        try mount()
        let presenter = try present("doc.txt", unsaved: true)
        assertUnsaved(interests: 1)
        XCTAssertEqual(sh("printf 'a\\nb\\nc theirs\\n' > '\(mnt!)/doc.txt'").status, 0)
        let before = waitForConflicts(1)
        let pid = try XCTUnwrap(daemonPID())
        kill(pid, SIGKILL)
        presenter.stop(SIGKILL)
        // Ended, not yet reaped (init reaps it seconds later here): the next daemon takes the
        // zombie for the dead daemon it is.
        XCTAssertTrue(ProcessEnd.wait(pid, timeout: 5), "the daemon outlived SIGKILL")

        // The stale mount still names the store: the conflict is listed from the backing folder.
        let stale = openConflicts()
        XCTAssertEqual(stale.map { $0["id"] as? NSNumber }, before.map { $0["id"] as? NSNumber })
        try mount()
        let after = openConflicts()
        XCTAssertEqual(after.map { $0["id"] as? NSNumber }, before.map { $0["id"] as? NSNumber }, "still open after the restart")
        XCTAssertEqual(sql("SELECT COUNT(*) FROM interest"), "0", "the dead daemon's presenters are dropped")
        // Merge still has its base.
        let mine = root + "/mine.txt"
        try "a mine\nb\nc\n".write(toFile: mine, atomically: false, encoding: .utf8)
        let r = coordfs("resolve", mnt + "/doc.txt", "--merge", "--from", mine)
        XCTAssertEqual(r.status, 0, "\(r)")
        XCTAssertTrue(r.stdout.contains("merged cleanly"), r.stdout)
        XCTAssertEqual(text("doc.txt"), "a mine\nb\nc theirs\n")
        XCTAssertEqual(openConflicts().count, 0)
    }
}
