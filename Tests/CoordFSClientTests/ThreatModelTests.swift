import XCTest
import Foundation
import Glibc
import TestSupport
import ControlProtocol
import Coordination
@testable import CoordFS

/// Issue 17's threat model, tested as nobody on an allow_other mount: a user learns of an item
/// (asks, notifications, status, the event log) only if it could find it in the folder itself,
/// may delay or refuse only accesses it could make itself, and what is made for it belongs to it.
final class ThreatModelTests: ClientMountTestCase {
    let nobody = (uid: uid_t(65534), gid: gid_t(65534))

    override func configure(_ options: inout MountOptions) {
        super.configure(&options)
        options.allowOther = true
    }

    /// A hostile presenter in Python: registers PATH (a directory unless `kind` says otherwise, every
    /// ask), prints every message as a JSON line and refuses every ask with an error.
    private func hostilePresenter(_ path: String, kind: String = "directory") throws -> Child {
        let script = root + "/hostile.py"
        try (pythonClientPrelude + """
        sock.settimeout(None)
        send({"type": "hello", "id": 1, "versions": [1], "client": "hostile"})
        send({"type": "register", "id": 2, "path": sys.argv[2], "kind": sys.argv[3],
              "asks": ["save", "relinquishToReader", "relinquishToWriter", "accommodateDeletion", "accommodateSubitemDeletion"]})
        try:
            while True:
                message = receive()
                print(json.dumps(message), flush=True)
                if message["type"] == "ask":
                    send({"type": "answer", "id": message["id"], "error": {"code": "failed", "message": "no"}})
        except (EOFError, ConnectionResetError):
            pass
        """).write(toFile: script, atomically: true, encoding: .utf8)
        let child = try start(["/usr/bin/python3", script, socketPath, path, kind], user: nobody)
        XCTAssertTrue(eventually { child.text.contains("\"registered\"") || !self.isRunning(child) }, child.text)
        return child
    }

    /// Sends one request as nobody over the socket and returns the reply, as JSON text.
    private func request(_ message: String) throws -> String {
        let script = root + "/request.py"
        try (pythonClientPrelude + """
        send({"type": "hello", "id": 1, "versions": [1]})
        receive()
        send(json.loads(sys.argv[2]))
        print(exactly(struct.unpack(">I", exactly(4))[0]).decode(), flush=True)
        """).write(toFile: script, atomically: true, encoding: .utf8)
        let reply = try run(["/usr/bin/python3", script, socketPath, message], user: nobody)
        XCTAssertEqual(reply.status, 0, reply.output)
        return reply.output
    }

    private func sh(_ command: String) throws -> (status: Int32?, output: String) {
        try run(["/bin/sh", "-c", command])
    }

    /// Issue 17 case 3: nobody's presenter of the mount root is neither asked nor told about items
    /// inside root's 700 folder, cannot refuse root's deletions of items it could not delete, and
    /// still may refuse (and is asked about) what it could delete itself.
    func testAPresenterOfTheRootLearnsAndBlocksOnlyWhatItsUserCouldSeeAndWrite() throws {
        mkdir(backing + "/private", 0o700)
        try writeBacking("private/secret.txt", "s\n")
        mkdir(backing + "/private/inner", 0o755)
        mkdir(backing + "/shared", 0o777)
        chmod(backing + "/shared", 0o777)
        try writeBacking("shared/open.txt", "o\n", mode: 0o666)
        try writeBacking("public.txt", "p\n")
        mkdir(backing + "/sticky", 0o777)
        chmod(backing + "/sticky", 0o1777)
        try writeBacking("sticky/roots.txt", "r\n", mode: 0o666)
        let hostile = try hostilePresenter(".")
        XCTAssertTrue(isRunning(hostile), hostile.text)

        // Root's deletions in root's folders go through: nobody could not make them.
        let privateRm = try sh("rm '\(mnt!)/private/secret.txt' && rmdir '\(mnt!)/private/inner'")
        XCTAssertEqual(privateRm.status, 0, "root's rm in its 700 folder: \(privateRm.output)")
        let stickyRm = try sh("rm '\(mnt!)/sticky/roots.txt'")
        XCTAssertEqual(stickyRm.status, 0, "in a sticky folder nobody may not delete root's file: \(stickyRm.output)")
        let publicRm = try sh("rm '\(mnt!)/public.txt'")
        XCTAssertEqual(publicRm.status, 0, "nobody cannot write the root folder: \(publicRm.output)")
        // In a folder nobody may write, it is asked and its refusal holds.
        let sharedRm = try sh("rm '\(mnt!)/shared/open.txt'")
        XCTAssertNotEqual(sharedRm.status, 0, "nobody could delete shared/open.txt itself, so it may refuse")
        XCTAssertTrue(eventually { hostile.text.contains("shared/open.txt") }, hostile.text)
        XCTAssertTrue(FileManager.default.fileExists(atPath: backing + "/shared/open.txt"))

        // Told after about what it may see (public.txt went away), never about the private folder.
        XCTAssertTrue(eventually { hostile.text.contains("\"subitemDidDelete\"") && hostile.text.contains("public.txt") }, hostile.text)
        let asked = hostile.lines.filter { $0.contains("\"ask\"") }
        XCTAssertFalse(asked.contains { $0.contains("public.txt") || $0.contains("roots.txt") }, "told after, never asked: \(asked)")
        XCTAssertFalse(hostile.text.contains("secret") || hostile.text.contains("inner"), hostile.text)
    }

    /// Root's `rm` of its own presented file in a sticky folder everyone may write: the unlink goes
    /// through at once, and the deletion is coordinated once `save_window` passed, when the file is
    /// already gone. nobody, who could not have deleted root's file there, is told of it but never
    /// asked, so it can neither refuse it nor hold up root's next access to the name for its ask
    /// deadline (before: the deletion, with no file left to show its owner, asked nobody's presenter,
    /// and root's `echo > name` right after waited 4.5 s for a presenter that did not answer).
    func testAPresenterOfAFileInAStickyFolderIsNotAskedAboutItsOwnersDeletion() throws {
        mkdir(backing + "/sticky", 0o777)
        chmod(backing + "/sticky", 0o1777)
        try writeBacking("sticky/roots.txt", "r\n", mode: 0o644)
        let hostile = try hostilePresenter("sticky/roots.txt", kind: "file")
        XCTAssertTrue(isRunning(hostile), hostile.text)
        let rm = try sh("rm '\(mnt!)/sticky/roots.txt'")
        XCTAssertEqual(rm.status, 0, rm.output)
        XCTAssertFalse(FileManager.default.fileExists(atPath: backing + "/sticky/roots.txt"))
        // The deletion told (after save_window): nobody may see the folder.
        XCTAssertTrue(eventually { hostile.text.contains("\"didDelete\"") }, "told of the deletion: \(hostile.text)")
        let asked = hostile.lines.filter { $0.contains("\"ask\"") }
        XCTAssertEqual(asked, [], "nobody could not delete root's file in a sticky folder: never asked")
    }

    /// In a sticky 1777 folder nobody owns neither of, nobody's `coordinate --write` of the folder
    /// and its presenter of it (refusing every ask) neither delay nor refuse root's creates there,
    /// nor root's rename and deletion of its own file (natively nobody can prevent any of these);
    /// before, each waited `write_wait` and failed with EBUSY while nobody held.
    func testNobodyCannotDelayRootsCreatesInAStickyFolder() throws {
        let bin = try Self.coordfsBinary()
        mkdir(backing + "/shared", 0o777)
        chmod(backing + "/shared", 0o1777)
        try writeBacking("shared/roots.txt", "r\n", mode: 0o644)
        let hostile = try hostilePresenter("shared")
        XCTAssertTrue(isRunning(hostile), hostile.text)
        let hold = try start([bin, "coordinate", "--write", mnt + "/shared", "--", "/bin/sh", "-c", "echo held; exec sleep 60"], user: nobody)
        XCTAssertTrue(eventually { hold.text.contains("held") }, hold.text)
        // nobody's own hold asked its presenter (its own user's access): root's accesses ask nothing more.
        let asks = { hostile.lines.filter { $0.contains("\"ask\"") } }
        let askedBefore = asks()
        let started = Date()
        let s = "'\(mnt!)/shared"
        let made = try sh("echo x > \(s)/new' && touch \(s)/t' && mkdir \(s)/d' && mv \(s)/new' \(s)/moved' && rm \(s)/roots.txt'")
        let elapsed = Date().timeIntervalSince(started)
        XCTAssertEqual(made.status, 0, made.output)
        XCTAssertLessThan(elapsed, 2.5, "not held up by nobody (write_wait is 5 s)")
        XCTAssertTrue(FileManager.default.fileExists(atPath: backing + "/shared/moved"))
        XCTAssertFalse(FileManager.default.fileExists(atPath: backing + "/shared/roots.txt"))
        XCTAssertEqual(asks(), askedBefore, "never asked by root's accesses: \(hostile.text)")
        XCTAssertTrue(isRunning(hold), "nobody's hold still held: \(hold.text)")
    }

    /// `status` shows nobody only what it could list: not a presenter inside a folder it may
    /// search but not read.
    func testStatusHidesItemsInFoldersNobodyCannotList() throws {
        let bin = try Self.coordfsBinary()
        mkdir(backing + "/dropbox", 0o711)
        chmod(backing + "/dropbox", 0o711)
        try writeBacking("dropbox/hidden-name.txt", "h\n")
        try writeBacking("listed.txt", "l\n")
        let hidden = try start([bin, "present", mnt + "/dropbox/hidden-name.txt"])
        let listed = try start([bin, "present", mnt + "/listed.txt"])
        XCTAssertTrue(eventually { self.presenterCount == 2 }, hidden.text + listed.text)
        let status = try run([bin, "status", "--json", mnt], user: nobody)
        XCTAssertEqual(status.status, 0, status.output)
        XCTAssertTrue(status.output.contains("listed.txt"), status.output)
        XCTAssertFalse(status.output.contains("hidden-name"), status.output)
        let asRoot = try run([bin, "status", "--json", mnt])
        XCTAssertTrue(asRoot.output.contains("hidden-name"), asRoot.output)

        // An access to a visible and a hidden item is listed with the visible one only.
        let client = try RawClient(socket: socketPath)
        XCTAssertTrue(client.hello())
        let hiddenPath = try MountPath(validating: "dropbox/hidden-name.txt"), listedPath = try MountPath(validating: "listed.txt")
        guard case .granted = client.request({ .coordinate(Coordinate(id: $0, intents: [.reading(hiddenPath), .writing(listedPath)])) }) else {
            return XCTFail("not granted")
        }
        let during = try run([bin, "status", "--json", mnt], user: nobody)
        XCTAssertTrue(during.output.contains("\"accesses\":[{"), during.output)
        XCTAssertFalse(during.output.contains("hidden-name"), during.output)
    }

    /// Issue 17 case 2: the log's files are the daemon's user's alone; nobody reads, and follows,
    /// only the records naming items it may see, through the daemon.
    func testTheLogIsTheOwnersAndNobodyReadsAndFollowsOnlyWhatItMaySee() throws {
        let bin = try Self.coordfsBinary()
        mkdir(backing + "/private", 0o700)
        XCTAssertEqual(try sh("echo s > '\(mnt!)/private/secret-name.txt' && echo p > '\(mnt!)/public.txt'").status, 0)
        XCTAssertTrue(eventually {
            let all = (try? self.run([bin, "log", "--json", self.mnt]))?.output ?? ""
            return all.contains("secret-name.txt") && all.contains("public.txt")
        }, "root reads every record")

        var st = stat()
        let log = backing + "/.coordfs/log"
        XCTAssertEqual(stat(log, &st), 0)
        XCTAssertEqual(st.st_mode & 0o777, 0o700, "the log folder is the owner's")
        let files = try FileManager.default.contentsOfDirectory(atPath: log)
        XCTAssertFalse(files.isEmpty)
        for file in files {
            XCTAssertEqual(stat(log + "/" + file, &st), 0)
            XCTAssertEqual(st.st_mode & 0o077, 0, "\(file) is not readable by others")
        }

        let history = try run([bin, "log", "--json", mnt], user: nobody)
        XCTAssertEqual(history.status, 0, history.output)
        XCTAssertTrue(history.output.contains("public.txt"), history.output)
        XCTAssertFalse(history.output.contains("secret-name") || history.output.contains("/private/"), history.output)

        // Following live: nobody's watcher shows the next public record, never the private ones.
        // It shows records written once it follows; when that is, on a loaded machine, only the
        // records it shows tell: a public write is repeated until one shows, then a private and a
        // public write follow, written while it follows for sure.
        let watcher = try start([bin, "watch", "--json", mnt], user: nobody)
        var n = 0
        XCTAssertTrue(eventually(timeout: 30) {
            n += 1
            XCTAssertEqual((try? self.sh("echo y > '\(self.mnt!)/public-\(n).txt'"))?.status, 0)
            return watcher.text.contains("public-\(n).txt") || self.eventually(timeout: 0.5) { watcher.text.contains("public-") }
        }, "the watcher follows: \(watcher.text)")
        XCTAssertEqual(try sh("echo x > '\(mnt!)/private/other-secret.txt' && echo y > '\(mnt!)/public-last.txt'").status, 0)
        XCTAssertTrue(eventually { watcher.text.contains("public-last.txt") }, watcher.text)
        XCTAssertFalse(watcher.text.contains("other-secret") || watcher.text.contains("/private/"), watcher.text)
        kill(watcher.pid, SIGINT)
        XCTAssertEqual(wait(watcher), 0, watcher.text)
    }

    /// `coordfs log --last N` as nobody prints the last N records nobody may see, also when the
    /// log's newest records name items it may not (before, it took the last N seqs and then left
    /// out those: nothing was printed).
    func testNobodysLastRecordsAreTheLastItMaySee() throws {
        let bin = try Self.coordfsBinary()
        mkdir(backing + "/private", 0o700)
        let secrets = (1...8).map { "'\(mnt!)/private/secret-\($0).txt'" }
        XCTAssertEqual(try sh(secrets.map { "echo s > \($0)" }.joined(separator: " && ")).status, 0)
        XCTAssertEqual(try sh("echo p > '\(mnt!)/public-a.txt' && echo p > '\(mnt!)/public-b.txt'").status, 0)
        // The log's newest records: writes of the private files (no create, so not even their folder).
        XCTAssertEqual(try sh(secrets.map { "echo t > \($0)" }.joined(separator: " && ")).status, 0)
        XCTAssertTrue(eventually {
            let tail = (try? self.run([bin, "log", "--json", "--last", "1", self.mnt]))?.output ?? ""
            return tail.contains("secret-8.txt") && tail.contains("released")
        }, "root reads the last private record")

        let all = try run([bin, "log", "--json", mnt], user: nobody)
        XCTAssertEqual(all.status, 0, all.output)
        let visible = all.output.split(separator: "\n")
        XCTAssertTrue(visible.count >= 3 && visible.last?.contains("public-b.txt") == true, all.output)
        XCTAssertFalse(all.output.contains("secret-"), all.output)
        for n in [1, 3] {
            let last = try run([bin, "log", "--json", "--last", String(n), mnt], user: nobody)
            XCTAssertEqual(last.status, 0, last.output)
            XCTAssertEqual(last.output.split(separator: "\n"), Array(visible.suffix(n)), "--last \(n): \(last.output)")
        }
        // With a filter too, and in text.
        let kind = try run([bin, "log", "--last", "1", "--kind", "released", mnt], user: nobody)
        XCTAssertTrue(kind.output.contains("public-b.txt"), kind.output)
    }

    /// Visibility follows the kernel, POSIX ACLs included (set with setfacl on the backing folders):
    /// a folder whose mode bits shut nobody out but whose ACL lets nobody (by name, or its group)
    /// list it shows in nobody's `status` and `log`; one whose mode bits let nobody in but whose ACL
    /// does not (a named entry without r-x, or a mask that takes the grant away) does not, except
    /// where the kernel itself looks at the mode bits alone (a mask of ---). Each folder is checked
    /// natively as nobody first, so the rule is the kernel's.
    func testACLsDecideWhatNobodySeesInStatusAndLog() throws {
        let bin = try Self.coordfsBinary()
        let folders: [(name: String, mode: mode_t, acl: String, visible: Bool)] = [
            ("user-granted", 0o700, "u:nobody:rx", true),
            ("group-granted", 0o700, "g:nogroup:rx", true),
            ("user-denied", 0o755, "u:nobody:---", false),
            ("mask-denied", 0o755, "u:nobody:rx,m::w", false),
            // The kernel consults no ACL whose mask is empty (the mode's group bits clear).
            ("mask-empty", 0o755, "u:nobody:---,m::---", true),
        ]
        for folder in folders {
            XCTAssertEqual(mkdir(backing + "/" + folder.name, folder.mode), 0)
            chmod(backing + "/" + folder.name, folder.mode)
            let set = try run(["/usr/bin/setfacl", "-m", folder.acl, backing + "/" + folder.name])
            XCTAssertEqual(set.status, 0, "setfacl \(folder.acl): \(set.output)")
            try writeBacking("\(folder.name)/doc-\(folder.name).txt", "d\n")
            let native = try run(["/bin/ls", backing + "/" + folder.name], user: nobody)
            XCTAssertEqual(native.status == 0, folder.visible, "nobody lists \(folder.name) natively: \(native.output)")
        }
        let presenters = try folders.map { try start([bin, "present", mnt + "/\($0.name)/doc-\($0.name).txt"]) }
        XCTAssertTrue(eventually { self.presenterCount == folders.count }, presenters.map(\.text).joined())
        XCTAssertEqual(try sh(folders.map { "echo w > '\(mnt!)/\($0.name)/written-\($0.name).txt'" }.joined(separator: " && ")).status, 0)
        XCTAssertTrue(eventually {
            let all = (try? self.run([bin, "log", "--json", self.mnt]))?.output ?? ""
            return folders.allSatisfy { all.contains("written-\($0.name).txt") }
        }, "root reads every record")

        let status = try run([bin, "status", "--json", mnt], user: nobody)
        XCTAssertEqual(status.status, 0, status.output)
        let log = try run([bin, "log", "--json", mnt], user: nobody)
        XCTAssertEqual(log.status, 0, log.output)
        for folder in folders {
            XCTAssertEqual(status.output.contains("doc-\(folder.name).txt"), folder.visible, "status, \(folder.acl): \(status.output)")
            XCTAssertEqual(log.output.contains("written-\(folder.name).txt"), folder.visible, "log, \(folder.acl): \(log.output)")
        }
    }

    /// A document's versions kept while it was in root's 700 folder do not tell nobody the name it
    /// had there: they show the name nobody asked for.
    func testVersionsDoNotNameFoldersNobodyCannotSee() throws {
        let bin = try Self.coordfsBinary()
        mkdir(backing + "/private", 0o700)
        try writeBacking("private/draft-name.txt", "one\n")
        let presenter = try start([bin, "present", mnt + "/private/draft-name.txt"])
        XCTAssertTrue(eventually { presenter.text.contains("registered presenter#") }, presenter.text)
        XCTAssertEqual(try sh("echo two > '\(mnt!)/private/draft-name.txt' && mv '\(mnt!)/private/draft-name.txt' '\(mnt!)/report.txt'").status, 0)
        XCTAssertTrue(eventually {
            ((try? self.run([bin, "versions", "--json", self.mnt + "/report.txt"]))?.output ?? "").contains("draft-name")
        }, "root sees where the versions were kept")
        // Over the socket (the store's files are the owner's; `coordfs versions` reads them).
        let versions = try request(#"{"type": "versions", "id": 2, "path": "report.txt"}"#)
        XCTAssertTrue(versions.contains("versionList") && versions.contains("report.txt"), versions)
        XCTAssertFalse(versions.contains("draft-name") || versions.contains("private"), versions)
    }
}
