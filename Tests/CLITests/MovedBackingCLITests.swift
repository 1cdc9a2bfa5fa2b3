// Every command after the backing folder was renamed while mounted: the mount table keeps the old
// path, the daemon goes on serving the folder (and keeps its socket, log and store there) by
// descriptor. Each command finds the daemon where the folder is now and says so; a user who cannot
// see where it went is told that, never "cannot connect".
import Foundation
import Glibc
import TestSupport
import XCTest

final class MovedBackingCLITests: CLITestCase {
    private func asNobody(_ arguments: [String]) -> CommandResult {
        run("/usr/bin/setpriv", ["--reuid=65534", "--regid=65534", "--clear-groups", "--", binary] + arguments, timeout: 30)
    }

    private func keptVersions(_ relative: String) -> [Int64] {
        let r = coordfs("versions", mnt + "/" + relative, "--json")
        return r.lines.compactMap { line in
            (try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])?["version"].flatMap { ($0 as? NSNumber)?.int64Value }
        }
    }

    func testEveryCommandFindsTheDaemonOfAMountWhoseBackingFolderWasRenamedWhileMounted() throws {
        chmod(root, 0o755)  // nobody reaches the mount and the folder's parent
        FileManager.default.createFile(atPath: backing + "/doc.txt", contents: Data("one\n".utf8))
        FileManager.default.createFile(atPath: backing + "/conflict.txt", contents: Data("base\n".utf8))
        try mount(options: ["allow_other"])
        let daemon = try XCTUnwrap(daemonPID())
        // A kept version of doc.txt, made before the rename.
        let presenter = try present("doc.txt")
        XCTAssertEqual(sh("echo two > '\(mnt!)/doc.txt'").status, 0)
        var kept = keptVersions("doc.txt")
        let deadline = Date().addingTimeInterval(10)
        while kept.isEmpty && Date() < deadline { usleep(50_000); kept = keptVersions("doc.txt") }
        let version = try XCTUnwrap(kept.last, "a kept version of doc.txt")

        let moved = root + "/moved"
        FileOps.check(rename(backing, moved), "rename the backing folder")
        var renamedBack = false
        defer { if !renamedBack { _ = rename(moved, backing) } }  // the fixture unmounts and cleans by the old name
        XCTAssertTrue(Self.mounts(under: root).contains(mnt), "still mounted")
        FileOps.put(mnt + "/after.txt", "after")
        let note = "moved from '\(backing!)' to '\(moved)' while mounted"

        // A presenter started after the rename.
        let after = try present("conflict.txt")
        XCTAssertTrue(after.stderr.contains(note), "present says where: \(after.stderr)")

        // Each command: its arguments and what its output must hold.
        let cases: [(arguments: [String], output: String)] = [
            (["status", mnt], "doc.txt"),
            (["status", mnt, "--json"], "\"eventLog\""),
            (["log", mnt, "--json", "--path", "/after.txt"], "/after.txt"),
            (["watch", mnt, "--json", "--since", "1", "--limit", "1"], "\"seq\""),
            (["coordinate", "--read", mnt + "/doc.txt", "--", "cat", mnt + "/doc.txt"], "two"),
            (["versions", mnt + "/doc.txt"], "beforeWrite"),
            (["show", mnt + "/doc.txt", "--version", String(version)], "one"),
            (["diff", mnt + "/doc.txt", "--version", String(version)], "-one"),
            (["conflicts", mnt, "--json"], ""),
            // The version from before the rename written back through the daemon's store, which
            // reaches the folder by the descriptor it holds (resolve: the next test).
            (["restore", mnt + "/doc.txt", "--version", String(version)], "restored"),
            (["coordinate", "--read", mnt + "/doc.txt", "--", "cat", mnt + "/doc.txt"], "one"),
        ]
        for c in cases {
            let r = coordfs(arguments: c.arguments)
            let name = c.arguments.prefix(2).joined(separator: " ")
            XCTAssertEqual(r.status, 0, "\(name) after the rename: \(r)")
            XCTAssertTrue(c.output.isEmpty || r.stdout.contains(c.output), "\(name): \(r)")
            XCTAssertTrue(r.stderr.contains(note), "\(name) says where the folder is: \(r.stderr)")
            XCTAssertEqual(r.stderr.components(separatedBy: note).count - 1, 1, "\(name) says it once: \(r.stderr)")
        }
        // Both presenters, the one from before the rename and the one after, are the daemon's.
        let status = coordfs("status", mnt)
        XCTAssertTrue(status.stdout.contains("doc.txt") && status.stdout.contains("conflict.txt"), "\(status)")

        // coordfs web serves the mount: its status API answers from the daemon.
        let (web, url, port) = try startWeb()
        let token = String(url.split(separator: "=").last!)
        let api = HTTP.request(port: port, "GET", "/api/status", headers: ["Cookie": "coordfs_web_\(port)=\(token)"])
        XCTAssertEqual(api?.status, 200, "\(String(describing: api))")
        XCTAssertTrue(api?.text.contains("doc.txt") == true, "\(String(describing: api))")
        XCTAssertTrue(web.stderr.contains(note), "web says where: \(web.stderr)")
        web.stop()

        // nobody cannot look at root's daemon's descriptors: every command says the folder moved.
        let nobodyCases: [[String]] = [
            ["status", mnt], ["status", mnt, "--cluster"], ["log", mnt], ["watch", mnt], ["present", mnt + "/doc.txt"],
            ["coordinate", "--read", mnt + "/doc.txt", "--", "true"], ["versions", mnt + "/doc.txt"],
            ["show", mnt + "/doc.txt", "--version", String(version)], ["diff", mnt + "/doc.txt", "--version", String(version)],
            ["conflicts", mnt], ["resolve", mnt + "/conflict.txt", "--close"],
            ["restore", mnt + "/doc.txt", "--version", String(version)], ["web", mnt],
        ]
        for arguments in nobodyCases {
            let r = asNobody(arguments)
            let name = arguments.prefix(2).joined(separator: " ")
            XCTAssertNotEqual(r.status, 0, "\(name) as nobody: \(r)")
            XCTAssertTrue(r.stderr.contains("'\(backing!)', was renamed or moved while mounted"), "\(name) as nobody: \(r)")
            for confusing in ["cannot connect", "cannot reach", "cannot ask", "No such file", "log=off", "no document store"] {
                XCTAssertFalse(r.stderr.contains(confusing), "\(name) as nobody: \(r)")
            }
        }
        XCTAssertTrue(asNobody(["log", mnt]).stderr.contains("--backing"), "log offers --backing")
        XCTAssertEqual(asNobody(["status", mnt]).status, 69)

        // unmount waits for the daemon, whose pid file is in the moved folder.
        presenter.stop()
        after.stop()
        let unmount = coordfs("unmount", mnt)
        XCTAssertEqual(unmount.status, 0, "\(unmount)")
        XCTAssertFalse(Self.mounts(under: root).contains(mnt))
        XCTAssertTrue(ProcessEnd.hasEnded(daemon), "the daemon ended before unmount returned")
        if rename(moved, backing) == 0 { renamedBack = true }
    }

    /// The document store after the rename, with another folder put at the old path: a presenter
    /// has versions kept of the saves under it, a restore writes one back, `present --unsaved`
    /// gets its conflict and each resolution (close, save over, reload, keep both, merge) is done
    /// in the moved folder; nothing of the mount's lands in the folder at the old path.
    func testTheStoreWorksInTheMovedFolderAndNothingLandsAtTheOldPath() throws {
        let kinds: [(flag: String, mine: String?, expected: String)] = [
            ("--close", nil, "a\nb\nc theirs\n"),
            ("--save", "a\nb mine\nc\n", "a\nb mine\nc\n"),
            ("--reload", nil, "a\nb\nc theirs\n"),
            ("--keep-both", "a\nb mine\nc\n", "a\nb\nc theirs\n"),
            ("--merge", "a mine\nb\nc\n", "a mine\nb\nc theirs\n"),
        ]
        func name(_ flag: String) -> String { "c" + flag.dropFirst(1) + ".txt" }
        for k in kinds { FileOps.put(backing + "/" + name(k.flag), "a\nb\nc\n") }
        FileOps.put(backing + "/doc.txt", "one\n")
        try mount()
        let presenter = try present("doc.txt")

        let moved = root + "/moved"
        FileOps.check(rename(backing, moved), "rename the backing folder")
        // Another folder at the old path: the mount's store must not write there.
        FileOps.check(mkdir(backing, 0o755), "a folder at the old path")
        FileOps.put(backing + "/doc.txt", "impostor\n")
        defer {
            // The fixture unmounts and cleans by the old name.
            if CLITestCase.mounts(under: root).contains(mnt) { coordfs("unmount", mnt) }
            _ = try? FileManager.default.removeItem(atPath: backing)
            _ = rename(moved, backing)
        }
        func movedText(_ relative: String) -> String? { try? String(contentsOfFile: moved + "/" + relative, encoding: .utf8) }
        func conflicts() -> [[String: Any]] {
            coordfs("conflicts", mnt, "--json").lines.compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        }

        // A save under a presenter after the rename: the version it went over is kept.
        XCTAssertEqual(sh("echo two > '\(mnt!)/doc.txt'").status, 0)
        var kept = keptVersions("doc.txt")
        let deadline = Date().addingTimeInterval(10)
        while kept.isEmpty && Date() < deadline { usleep(50_000); kept = keptVersions("doc.txt") }
        if let version = kept.last {
            XCTAssertEqual(coordfs("show", mnt + "/doc.txt", "--version", String(version)).stdout, "one\n")
            let restore = coordfs("restore", mnt + "/doc.txt", "--version", String(version))
            XCTAssertEqual(restore.status, 0, "restore after the rename: \(restore)")
            XCTAssertEqual(movedText("doc.txt"), "one\n", "restored in the moved folder")
        } else {
            XCTFail("no version of doc.txt kept after the rename: \(coordfs("versions", mnt + "/doc.txt"))")
        }
        presenter.stop()

        // Each resolution of a presenter's conflict, the presenter registered after the rename.
        for k in kinds {
            let document = name(k.flag)
            let unsaved = try present(document, unsaved: true)
            XCTAssertEqual(sh("printf 'a\\nb\\nc theirs\\n' > '\(mnt!)/\(document)'").status, 0)
            let end = Date().addingTimeInterval(10)
            var open = conflicts().filter { $0["path"] as? String == mnt + "/" + document }
            while open.isEmpty && Date() < end { usleep(100_000); open = conflicts().filter { $0["path"] as? String == mnt + "/" + document } }
            XCTAssertEqual(open.count, 1, "present --unsaved \(document) gets its conflict after the rename: \(conflicts())")
            var arguments = ["resolve", mnt + "/" + document, k.flag]
            if let mine = k.mine {
                let file = root + "/mine-" + document
                FileOps.put(file, mine)
                arguments += ["--from", file]
            }
            let r = coordfs(arguments: arguments)
            XCTAssertEqual(r.status, 0, "resolve \(k.flag) after the rename: \(r)")
            XCTAssertEqual(movedText(document), k.expected, "resolve \(k.flag)")
            XCTAssertTrue(conflicts().filter { $0["path"] as? String == mnt + "/" + document }.isEmpty, "resolve \(k.flag) closed it")
            unsaved.stop()
        }
        let copies = try FileManager.default.contentsOfDirectory(atPath: moved).filter { $0.hasPrefix("c-keep-both (conflict ") }
        XCTAssertEqual(copies.count, 1, "keep both wrote its copy in the moved folder: \(copies)")
        XCTAssertEqual(copies.first.flatMap { movedText($0) }, "a\nb mine\nc\n")

        // Nothing of the mount's in the folder at the old path.
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: backing), ["doc.txt"])
        XCTAssertEqual(try String(contentsOfFile: backing + "/doc.txt", encoding: .utf8), "impostor\n")
        let unmount = coordfs("unmount", mnt)
        XCTAssertEqual(unmount.status, 0, "\(unmount)")
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: backing), ["doc.txt"], "nothing at unmount either")
    }

    /// The mount table's path taken by another folder after the rename: commands do not talk to
    /// what is there now (a state folder of another mount, say), they find the mount's own.
    func testAnotherFolderAtTheOldPathIsNotTakenForTheMountsOwn() throws {
        try mount()
        FileOps.put(mnt + "/mine.txt", "mine")
        let moved = root + "/moved"
        FileOps.check(rename(backing, moved), "rename the backing folder")
        defer {
            _ = rmdir(backing + "/.coordfs")
            _ = rmdir(backing)
            _ = rename(moved, backing)
        }
        // An impostor at the old path, with a state folder of root's (as an earlier mount leaves).
        mkdir(backing, 0o755)
        mkdir(backing + "/.coordfs", 0o700)
        let status = coordfs("status", mnt, "--json")
        XCTAssertEqual(status.status, 0, "\(status)")
        XCTAssertTrue(status.stderr.contains("moved from '\(backing!)' to '\(moved)'"), "\(status.stderr)")
        XCTAssertTrue(status.stdout.contains("\"eventLog\""), "the log's state from the moved folder: \(status)")
        let log = coordfs("log", mnt, "--json", "--path", "/mine.txt")
        XCTAssertEqual(log.status, 0, "\(log)")
        XCTAssertTrue(log.stdout.contains("/mine.txt"), "\(log)")
    }
}
