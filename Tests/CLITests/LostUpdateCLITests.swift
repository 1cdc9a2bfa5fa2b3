// A lost update between two processes that present nothing, through the binary: a Python process
// reads `doc`, `sed -i` (another process) changes it through the mount, and the Python process
// writes back what it had read. `coordfs conflicts`, `versions`, `diff`, `log` show it and
// `coordfs resolve --merge` needs no --from (docs/semantics.md, "Lost updates").
import Foundation
import Glibc
import TestSupport
import XCTest

final class LostUpdateCLITests: CLITestCase {
    private func text(_ relative: String) -> String? { try? String(contentsOfFile: backing + "/" + relative, encoding: .utf8) }

    private func jsonLines(_ r: CommandResult) -> [[String: Any]] {
        r.lines.compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
    }

    func testALateSaveIsListedDiffedLoggedAndMergedFromTheCommandLine() throws {
        try "one\ntwo\nthree\n".write(toFile: backing + "/doc", atomically: false, encoding: .utf8)
        try mount()
        let script = """
        import subprocess, sys
        data = open("doc").read()
        subprocess.run(["sed", "-i", "s/^one$/ONE/", "doc"], check=True)
        with open("doc", "w") as f: f.write(data.replace("three", "THREE"))
        """
        let late = sh("cd '\(mnt!)' && python3 -c '\(script)'")
        XCTAssertEqual(late.status, 0, "\(late)")
        XCTAssertEqual(text("doc"), "one\ntwo\nTHREE\n", "the late save went through")

        let listed = jsonLines(coordfs("conflicts", mnt, "--json"))
        XCTAssertEqual(listed.count, 1, "\(listed)")
        XCTAssertEqual(listed.first?["kind"] as? String, "lostUpdate")
        XCTAssertTrue((listed.first?["presenter"] as? String)?.hasPrefix("process:") == true, "\(listed)")
        let table = coordfs("conflicts", mnt)
        XCTAssertTrue(table.stdout.contains("lostUpdate"), table.stdout)
        let theirs = try XCTUnwrap(listed.first?["theirsVersion"] as? Int, "\(listed)")
        XCTAssertNotNil(listed.first?["baseVersion"] as? Int, "what the reader read was kept before sed replaced it")

        XCTAssertEqual(coordfs("show", mnt + "/doc", "--version", "\(theirs)").stdout, "ONE\ntwo\nthree\n")
        let diff = coordfs("diff", mnt + "/doc", "--version", "\(theirs)")
        XCTAssertTrue(diff.stdout.contains("-ONE") && diff.stdout.contains("+THREE"), diff.stdout)
        let records = jsonLines(coordfs("log", mnt, "--kind", "lostUpdate", "--json"))
        XCTAssertEqual(records.count, 1, "\(records)")

        let merged = coordfs("resolve", mnt + "/doc", "--merge")
        XCTAssertEqual(merged.status, 0, "\(merged)")
        XCTAssertTrue(merged.stdout.contains("merged cleanly"), merged.stdout)
        XCTAssertEqual(text("doc"), "ONE\ntwo\nTHREE\n", "both changes")
        XCTAssertEqual(jsonLines(coordfs("conflicts", mnt, "--json")).count, 0)
    }
    /// A lost update's saving process is shown by `coordfs conflicts` as `coordfs status` shows a
    /// process, program[pid] and uid, while it runs, and `pid N (exited)` after, where the table
    /// printed the store's name for it (`process:PID:START:uid:UID`, which `--json` keeps).
    func testTheSavingProcessIsShownByItsProgramWhileItRunsAndAsExitedAfter() throws {
        try "one\n".write(toFile: backing + "/doc", atomically: false, encoding: .utf8)
        try mount()
        let script = """
        import subprocess, sys, time
        doc = sys.argv[1]
        data = open(doc).read()
        subprocess.run(["sed", "-i", "s/^one$/ONE/", doc], check=True)
        with open(doc, "w") as f: f.write(data + "mine\\n")
        print("saved", flush=True)
        time.sleep(60)
        """
        let saver = try start("/usr/bin/python3", ["-c", script, mnt + "/doc"])
        defer { saver.stop(SIGKILL) }
        XCTAssertTrue(pollUntil(within: 10) { saver.lines.contains("saved") }, saver.stderr)
        XCTAssertTrue(pollUntil(within: 10) { self.jsonLines(self.coordfs("conflicts", self.mnt, "--json")).count == 1 })
        let listed = jsonLines(coordfs("conflicts", mnt, "--json"))
        XCTAssertTrue((listed.first?["presenter"] as? String)?.hasPrefix("process:\(saver.pid):") == true, "\(listed)")
        let process = try XCTUnwrap(listed.first?["presenterProcess"] as? [String: Any], "\(listed)")
        XCTAssertEqual(process["pid"] as? Int, Int(saver.pid), "\(process)")
        XCTAssertEqual(process["executable"] as? String, "python3", "\(process)")
        XCTAssertEqual(process["running"] as? Bool, true, "\(process)")
        XCTAssertEqual(process["uid"] as? Int, 0, "\(process)")
        let table = coordfs("conflicts", mnt)
        XCTAssertTrue(table.stdout.contains("python3[\(saver.pid)] uid 0"), table.stdout)
        XCTAssertFalse(table.stdout.contains("process:"), table.stdout)

        saver.stop(SIGKILL)
        let after = coordfs("conflicts", mnt)
        XCTAssertTrue(after.stdout.contains("pid \(saver.pid) (exited) uid 0"), after.stdout)
        XCTAssertEqual((jsonLines(coordfs("conflicts", mnt, "--json")).first?["presenterProcess"] as? [String: Any])?["running"] as? Bool, false)
    }

    /// A resolution asked for over the control socket is the caller's step, as a restore is: nobody's
    /// own lost update, resolved by nobody's client over the socket (`resolve`, merge), is logged
    /// (`conflictResolved`, and the merge's coordinated write) with nobody's uid and the client's
    /// pid and executable, never the daemon's.
    private func asNobody(_ executable: String, _ arguments: [String]) -> CommandResult {
        run("/usr/bin/setpriv", ["--reuid=65534", "--regid=65534", "--clear-groups", "--", executable] + arguments)
    }

    /// nobody's own protocol client sends `resolve` (no "mine") and prints the reply.
    private func resolveOverTheSocketAsNobody(_ conflict: Int, _ resolution: String) -> CommandResult {
        let client = pythonClientPrelude + """
        send({"type": "hello", "id": 1, "versions": [1]})
        receive()
        send({"type": "resolve", "id": 2, "conflict": int(sys.argv[2]), "resolution": sys.argv[3]})
        print(json.dumps(receive()))
        """
        return asNobody("/usr/bin/python3", ["-c", client, backing + "/.coordfs/control.sock", String(conflict), resolution])
    }

    /// A lost update of nobody's on an allow_other mount: nobody's Python process reads
    /// `shared/doc` (root's, mode 0666), `sed -i` changes it, and the Python process writes back
    /// what it had read. Returns the conflict's id.
    private func nobodysLostUpdate() throws -> Int {
        chmod(root, 0o755)  // nobody reaches the mount
        mkdir(backing + "/shared", 0o777)
        chmod(backing + "/shared", 0o777)
        FileManager.default.createFile(atPath: backing + "/shared/doc", contents: Data("one\ntwo\nthree\n".utf8), attributes: [.posixPermissions: 0o666])
        try mount(options: ["allow_other"])
        let script = """
        import subprocess
        data = open("doc").read()
        subprocess.run(["sed", "-i", "s/^one$/ONE/", "doc"], check=True)
        with open("doc", "w") as f: f.write(data.replace("three", "THREE"))
        """
        let late = asNobody("/bin/sh", ["-c", "cd '\(mnt!)/shared' && python3 -c '\(script)'"])
        XCTAssertEqual(late.status, 0, "\(late)")
        let conflicts = jsonLines(coordfs("conflicts", mnt, "--json"))
        XCTAssertEqual(conflicts.count, 1, "nobody's late save is a lost update")
        // The store's files are not nobody's to read.
        chmod(backing + "/.coordfs/store", 0o700)
        return try XCTUnwrap(conflicts.first?["id"] as? Int ?? conflicts.first?["conflict"] as? Int, "\(conflicts)")
    }

    /// nobody's own lost update through `coordfs conflicts` and `coordfs resolve` as nobody (the CLI
    /// asks the daemon; the store is not nobody's to read). Once root made the document its own
    /// (mode 0644), the reload that would write theirs back over it is refused, by the daemon too
    /// (a crafted request), and changes nothing; keep both, which writes in the shared folder, is
    /// nobody's to do.
    func testNobodyResolvesItsLostUpdateOnlyWithItsOwnRights() throws {
        let conflict = try nobodysLostUpdate()
        let listed = jsonLines(asNobody(binary, ["conflicts", mnt, "--json"]))
        XCTAssertEqual(listed.compactMap { $0["id"] as? Int }, [conflict], "\(listed)")
        XCTAssertEqual(listed.first?["kind"] as? String, "lostUpdate")
        // sed -i left a file of nobody's: root takes it.
        XCTAssertEqual(chown(backing + "/shared/doc", 0, 0), 0)
        chmod(backing + "/shared/doc", 0o644)
        let refused = asNobody(binary, ["resolve", mnt + "/shared/doc", "--reload"])
        XCTAssertNotEqual(refused.status, 0, "\(refused)")
        XCTAssertTrue(refused.stderr.contains("permissionDenied") || refused.stderr.contains("may not write"), "\(refused)")
        let direct = resolveOverTheSocketAsNobody(conflict, "reload")
        XCTAssertTrue(direct.stdout.contains("\"permissionDenied\""), "\(direct)")
        XCTAssertEqual(text("shared/doc"), "one\ntwo\nTHREE\n", "nothing written")
        XCTAssertEqual(jsonLines(coordfs("conflicts", mnt, "--json")).count, 1, "still open")

        let kept = asNobody(binary, ["resolve", mnt + "/shared/doc", "--keep-both"])
        XCTAssertEqual(kept.status, 0, "\(kept)")
        XCTAssertEqual(text("shared/doc"), "one\ntwo\nTHREE\n", "the file stays nobody's save")
        let copies = try FileManager.default.contentsOfDirectory(atPath: backing + "/shared").filter { $0.hasPrefix("doc (conflict ") }
        XCTAssertEqual(copies.count, 1, "\(copies)")
        XCTAssertEqual(copies.first.flatMap { text("shared/" + $0) }, "ONE\ntwo\nthree\n", "theirs beside it")
        var st = stat()
        XCTAssertEqual(stat(backing + "/shared/" + (copies.first ?? ""), &st), 0)
        XCTAssertEqual(st.st_uid, 65534, "the copy is nobody's")
        XCTAssertEqual(jsonLines(coordfs("conflicts", mnt, "--json")).count, 0)
        XCTAssertEqual(log(["--kind", "conflictResolved"]).first?.uid, 65534, "logged as nobody's")
    }

    func testAResolutionThroughTheSocketIsLoggedAsTheCallers() throws {
        let conflict = try nobodysLostUpdate()
        let daemonPID = try XCTUnwrap(daemonPIDFile()?.pid, "the daemon's pid file")

        // nobody's own client (the protocol's `resolve`; the store's files are not nobody's to read).
        let merged = resolveOverTheSocketAsNobody(conflict, "merge")
        XCTAssertEqual(merged.status, 0, "\(merged)")
        XCTAssertTrue(merged.stdout.contains("\"resolved\""), "\(merged)")
        XCTAssertEqual(text("shared/doc"), "ONE\ntwo\nTHREE\n", "merged")
        let resolved = log(["--kind", "conflictResolved"])
        XCTAssertEqual(resolved.count, 1, "\(resolved)")
        for record in resolved {
            XCTAssertEqual(record.uid, 65534, "the caller's uid, not the daemon's: \(record)")
            XCTAssertTrue(record.executable?.contains("python") == true, "the caller's executable: \(record)")
            XCTAssertNotNil(record.pid)
            XCTAssertNotEqual(record.pid, daemonPID, "the caller's pid, not the daemon's: \(record)")
        }
        // The merge's coordinated write: the grants after the lost update was recorded.
        let records = log().filter { $0.path == "/shared/doc" }
        let lost = try XCTUnwrap(records.first { $0.kind == "lostUpdate" }, "\(records)")
        let granted = records.filter { $0.kind == "granted" && $0.seq > lost.seq }
        XCTAssertFalse(granted.isEmpty, "the merge's write: \(records)")
        XCTAssertTrue(granted.allSatisfy { $0.uid == 65534 && $0.pid != daemonPID && $0.executable?.contains("python") == true },
                      "the merge's write is nobody's access: \(granted)")
    }
}
