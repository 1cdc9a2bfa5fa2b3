// Conflicts resolved in `coordfs web` as a user meets them, in headless chromium through
// chromium-driver's WebDriver API (and HTTP against the real server), each result checked through
// the mount, the backing folder and the CLI: a lost update between two processes that present
// nothing (its three sides, every resolution `coordfs resolve` has, "Save mine" keeping the file),
// a merge with conflicting hunks mended by hand before it is saved, a binary document whose
// "mine" comes from a file byte for byte (never an empty write), a conflict resolved meanwhile
// elsewhere, a file deleted meanwhile, a page run by nobody, and hostile and non-UTF-8 names in
// every place the page shows one.
import Foundation
import Glibc
import TestSupport
import XCTest

final class WebConflictTests: CLITestCase {
    private func text(_ relative: String) -> String? { try? String(contentsOfFile: backing + "/" + relative, encoding: .utf8) }

    private func jsonLines(_ r: CommandResult) -> [[String: Any]] {
        r.lines.compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
    }

    /// A lost update of `relative` ("one two three"): a Python process reads it, `sed -i` makes
    /// "three" "three theirs", and the Python process writes back what it read with "one" made
    /// "ONE mine". `user`: the shell prefix that runs it (as nobody: setpriv).
    private func lostUpdate(_ relative: String, asNobody: Bool = false) throws -> Int {
        let script = """
        import subprocess, sys
        data = open(sys.argv[1]).read()
        subprocess.run(["sed", "-i", "s/^three$/three theirs/", sys.argv[1]], check=True)
        with open(sys.argv[1], "w") as f: f.write(data.replace("one", "ONE mine"))
        """
        let args = ["/usr/bin/python3", "-c", script, mnt + "/" + relative]
        let late = asNobody ? run("/usr/bin/setpriv", ["--reuid=65534", "--regid=65534", "--clear-groups", "--"] + args) : run(args[0], Array(args.dropFirst()))
        XCTAssertEqual(late.status, 0, "\(late)")
        XCTAssertEqual(text(relative), "ONE mine\ntwo\nthree\n", "the late save went through")
        let listed = jsonLines(coordfs("conflicts", mnt, "--json")).filter { ($0["path"] as? String) == mnt + "/" + relative }
        XCTAssertEqual(listed.first?["kind"] as? String, "lostUpdate", "\(listed)")
        return try XCTUnwrap(listed.first?["id"] as? Int, "\(listed)")
    }

    private func openPage(_ url: String) throws -> WebDriver {
        let browser = try WebDriver(test: self, profile: root + "/chromium")
        try browser.open(url)
        XCTAssertNotNil(try browser.wait("return document.getElementById('conn').textContent === 'live'", timeout: 20), "the live connection")
        try browser.click("nav button[data-tab=conflicts]")
        return browser
    }

    /// Opens conflict `id` on the page and waits for its buttons.
    private func openConflict(_ browser: WebDriver, _ id: Int) throws {
        XCTAssertNotNil(try browser.wait("document.querySelector('#conflicts tbody tr[data-id=\"\(id)\"] button') || refreshConflicts(); return !!document.querySelector('#conflicts tbody tr[data-id=\"\(id)\"] button')", timeout: 15),
                        "conflict \(id) is listed")
        try browser.run("document.querySelector('#conflicts tbody tr[data-id=\"\(id)\"] button').click()")
        XCTAssertNotNil(try browser.wait("return document.querySelectorAll('button.resolve').length >= 2"), "conflict \(id) opened")
    }

    private func offered(_ browser: WebDriver) throws -> Set<String> {
        Set((try browser.run("return [...document.querySelectorAll('button.resolve')].map(b => b.dataset.resolution)") as? [String]) ?? [])
    }

    private func sideLines(_ browser: WebDriver, _ side: String) throws -> [String] {
        (try browser.run("return [...document.querySelectorAll('.side.\(side) pre .line')].map(l => l.textContent)") as? [String]) ?? []
    }

    /// Clicks a resolution and waits for the page to say it is done; returns the message.
    @discardableResult
    private func resolve(_ browser: WebDriver, _ resolution: String) throws -> String {
        try browser.run("document.getElementById('last-resolution').textContent = ''")
        try browser.click("button.resolve[data-resolution=\(resolution)]")
        let done = try browser.wait("return document.getElementById('last-resolution').textContent.includes('with ')")
        let message = (try browser.run("return document.getElementById('toast').textContent") as? String) ?? ""
        XCTAssertNotNil(done, "resolved with \(resolution): \(message)")
        return message
    }

    /// A lost update on the page: base (what the saver read), theirs (the version its save went
    /// over) and mine (the file it left) side by side, and every resolution the CLI has. "Save
    /// mine" with mine untouched keeps the file as `coordfs resolve --save` does (before, the page
    /// sent its editor, which it filled with the base, and wrote the base over the saver's work;
    /// and it showed the file as "theirs" and offered no reload or merge). A second lost update
    /// merged from the page holds both changes; the CLI, the log and the versions say so.
    func testALostUpdateShowsItsThreeSidesAndSaveKeepsTheFile() throws {
        try "one\ntwo\nthree\n".write(toFile: backing + "/doc.txt", atomically: false, encoding: .utf8)
        try mount()
        let first = try lostUpdate("doc.txt")
        let (_, url, _) = try startWeb()
        let browser = try openPage(url)
        defer { browser.quit() }
        try openConflict(browser, first)
        XCTAssertEqual(try offered(browser), ["save", "reload", "keepBoth", "merge", "close"], "what `coordfs resolve` has for a lost update")
        XCTAssertEqual(try sideLines(browser, "base"), ["one", "two", "three"])
        XCTAssertEqual(try sideLines(browser, "theirs"), ["one", "two", "three theirs"], "theirs is the version the late save went over")
        XCTAssertEqual(try browser.run("return document.getElementById('mine').value") as? String, "ONE mine\ntwo\nthree\n", "mine is the file")
        XCTAssertNotNil(try browser.wait("return document.querySelector('.merged pre').textContent === 'ONE mine' + 'two' + 'three theirs'"), "the preview merges the file and theirs")
        let described = try browser.run("return [...document.querySelectorAll('button.resolve')].every(b => document.getElementById(b.getAttribute('aria-describedby')).textContent.length > 20 && b.title.length > 20)") as? Bool
        XCTAssertEqual(described, true, "every button says what it does")

        let saved = try resolve(browser, "save")
        XCTAssertTrue(saved.contains("Resolved conflict \(first) with Save mine"), "\(first): \(saved)")
        XCTAssertEqual(text("doc.txt"), "ONE mine\ntwo\nthree\n", "save keeps the file the late save left")
        XCTAssertEqual(try String(contentsOfFile: mnt + "/doc.txt", encoding: .utf8), "ONE mine\ntwo\nthree\n")
        let resolved = jsonLines(coordfs("log", mnt, "--kind", "conflictResolved", "--json"))
        XCTAssertEqual(resolved.count, 1, "\(resolved)")
        XCTAssertEqual(jsonLines(coordfs("conflicts", mnt, "--json")).count, 0)

        // A second lost update, merged from the page.
        try "one\ntwo\nthree\n".write(toFile: mnt + "/doc.txt", atomically: false, encoding: .utf8)
        let second = try lostUpdate("doc.txt")
        try openConflict(browser, second)
        XCTAssertNotNil(try browser.wait("return document.getElementById('merge-info').textContent === '(merges cleanly)'"))
        let merged = try resolve(browser, "merge")
        XCTAssertTrue(merged.contains("merged cleanly"), merged)
        XCTAssertEqual(text("doc.txt"), "ONE mine\ntwo\nthree theirs\n", "both changes")
        XCTAssertEqual(jsonLines(coordfs("conflicts", mnt, "--json")).count, 0)
        let versions = jsonLines(coordfs("versions", mnt + "/doc.txt", "--json"))
        XCTAssertTrue(versions.contains { ($0["reason"] as? String) == "resolution" && ($0["size"] as? Int) == 19 }, "the file the merge wrote over is kept: \(versions)")
        let records = jsonLines(coordfs("log", mnt, "--kind", "conflictResolved", "--json"))
        XCTAssertEqual(records.count, 2, "\(records)")
        XCTAssertTrue(records.last.map { "\($0)".contains("merge") } == true, "\(records)")
    }

    /// Mine and theirs change the same line: the preview marks the hunk, the user puts the merged
    /// text in mine's editor, mends it, and saves; the file is exactly that text, the presenter is
    /// told (didResolveConflict) and the log records the resolution.
    func testAMergeWithAConflictingHunkIsMendedByHandBeforeItIsSaved() throws {
        try "title\nbody\nend\n".write(toFile: backing + "/doc.txt", atomically: false, encoding: .utf8)
        try mount()
        let presenter = try present("doc.txt", unsaved: true)
        XCTAssertEqual(sh("printf 'title theirs\\nbody\\nend\\n' > '\(mnt!)/doc.txt'").status, 0)
        let listed = jsonLines(coordfs("conflicts", mnt, "--json"))
        let id = try XCTUnwrap(listed.first?["id"] as? Int, "\(listed)")
        let (_, url, _) = try startWeb()
        let browser = try openPage(url)
        defer { browser.quit() }
        try openConflict(browser, id)
        try browser.run("const t = document.getElementById('mine'); t.value = 'title mine\\nbody\\nend mine\\n'; t.dispatchEvent(new Event('input'))")
        XCTAssertNotNil(try browser.wait("return document.getElementById('merge-info').textContent.startsWith('(1 conflicting hunk')"), "the hunk is marked")
        XCTAssertNotNil(try browser.wait("return !document.getElementById('edit-merge').hidden"), "the merged text can be edited")
        try browser.click("#edit-merge")
        let editor = try browser.run("return document.getElementById('mine').value") as? String
        XCTAssertTrue(editor?.contains("<<<<<<< mine\ntitle mine\n=======\ntitle theirs\n>>>>>>> theirs\n") == true, "\(editor ?? "")")
        XCTAssertTrue(editor?.hasSuffix("body\nend mine\n") == true, "\(editor ?? "")")
        try browser.run("const t = document.getElementById('mine'); t.value = t.value.replace(/<<<<<<< mine\\n[^]*>>>>>>> theirs\\n/, 'title both\\n'); t.dispatchEvent(new Event('input'))")
        XCTAssertEqual(try browser.run("return document.getElementById('mine').value") as? String, "title both\nbody\nend mine\n")
        try resolve(browser, "save")
        XCTAssertEqual(text("doc.txt"), "title both\nbody\nend mine\n", "the mended merge")
        XCTAssertEqual(try String(contentsOfFile: mnt + "/doc.txt", encoding: .utf8), "title both\nbody\nend mine\n")
        XCTAssertTrue(presenter.waitForLastLine(prefix: "notification didResolveConflict doc.txt conflict=\(id) resolution=save", timeout: 5)
                      || presenter.lines.contains { $0.hasPrefix("notification didResolveConflict doc.txt conflict=\(id)") }, presenter.stdout)
        XCTAssertEqual(jsonLines(coordfs("conflicts", mnt, "--json")).count, 0)
        let versions = jsonLines(coordfs("versions", mnt + "/doc.txt", "--json"))
        XCTAssertTrue(versions.contains { ($0["reason"] as? String) == "resolution" }, "theirs is kept: \(versions)")
    }

    /// A binary document: no editor, and Save mine, Keep both and Merge wait for mine from a file
    /// (before, the page sent its empty editor and Save mine wrote an empty file over the
    /// document). The file loaded is sent byte for byte (bytes that are not UTF-8 and NULs).
    func testABinaryDocumentsMineComesFromAFileByteForByte() throws {
        let base: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0, 1, 2, 0xFF]
        FileManager.default.createFile(atPath: backing + "/pic.bin", contents: Data(base))
        try mount()
        let presenter = try present("pic.bin", unsaved: true)
        let theirs: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0, 9, 9, 0xFE]
        FileManager.default.createFile(atPath: root + "/theirs.bin", contents: Data(theirs))
        XCTAssertEqual(sh("cat '\(root!)/theirs.bin' > '\(mnt!)/pic.bin'").status, 0)
        let id = try XCTUnwrap(jsonLines(coordfs("conflicts", mnt, "--json")).first?["id"] as? Int)
        let (_, url, _) = try startWeb()
        let browser = try openPage(url)
        defer { browser.quit() }
        try openConflict(browser, id)
        XCTAssertEqual(try offered(browser), ["save", "reload", "keepBoth", "close"])
        XCTAssertEqual(try browser.run("return document.getElementById('mine').hidden") as? Bool, true, "no text editor for bytes")
        XCTAssertEqual(try browser.run("return document.querySelector('button.resolve[data-resolution=save]').disabled") as? Bool, true, "nothing to save yet")
        XCTAssertEqual(try browser.run("return document.getElementById('needs-mine').hidden") as? Bool, false, "the page says why")
        // A click on the disabled button writes nothing.
        try browser.run("document.querySelector('button.resolve[data-resolution=save]').click()")
        usleep(500_000)
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: backing + "/pic.bin")), Data(theirs), "nothing written")

        let mine: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0, 0xC3, 0x28, 0x80, 0x0D, 0x0A, 0xFF]
        FileManager.default.createFile(atPath: root + "/mine.bin", contents: Data(mine))
        try browser.type("#mine-file", root + "/mine.bin")
        XCTAssertNotNil(try browser.wait("return !document.querySelector('button.resolve[data-resolution=save]').disabled"), "mine loaded")
        XCTAssertTrue((try browser.run("return document.getElementById('mine-loaded').textContent") as? String)?.contains("byte for byte") == true)
        try resolve(browser, "save")
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: backing + "/pic.bin")), Data(mine), "mine, byte for byte")
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: mnt + "/pic.bin")), Data(mine))
        let versions = jsonLines(coordfs("versions", mnt + "/pic.bin", "--json"))
        XCTAssertTrue(versions.contains { ($0["reason"] as? String) == "resolution" && ($0["size"] as? Int) == theirs.count }, "theirs kept: \(versions)")
        XCTAssertTrue(presenter.waitForLastLine(prefix: "notification didResolveConflict pic.bin", timeout: 5)
                      || presenter.lines.contains { $0.hasPrefix("notification didResolveConflict pic.bin") }, presenter.stdout)
    }

    /// Resolved meanwhile elsewhere: the page that shows the conflict says so, and its own click
    /// then is refused clearly and writes nothing; two resolutions sent at once: one wins, the
    /// other is refused, one write. A file deleted meanwhile: no reload or merge offered, and the
    /// page says why.
    func testAConflictResolvedOrDeletedMeanwhileIsSaidSoAndWrittenOnce() throws {
        for name in ["a.txt", "b.txt", "c.txt"] { try "base\n".write(toFile: backing + "/" + name, atomically: false, encoding: .utf8) }
        try mount()
        let presenters = try ["a.txt", "b.txt", "c.txt"].map { try present($0, unsaved: true) }
        for name in ["a.txt", "b.txt", "c.txt"] { XCTAssertEqual(sh("echo theirs > '\(mnt!)/\(name)'").status, 0) }
        var ids: [String: Int] = [:]
        for c in jsonLines(coordfs("conflicts", mnt, "--json")) { ids[((c["path"] as? String) ?? "").split(separator: "/").last.map(String.init) ?? ""] = c["id"] as? Int }
        let (_, url, port) = try startWeb()
        let browser = try openPage(url)
        defer { browser.quit() }

        // a.txt: open on the page, resolved by the CLI.
        let a = try XCTUnwrap(ids["a.txt"])
        try openConflict(browser, a)
        XCTAssertEqual(coordfs("resolve", mnt + "/a.txt", "--reload").status, 0)
        XCTAssertNotNil(try browser.wait("return document.getElementById('toast').textContent.includes('Conflict \(a) was resolved elsewhere')", timeout: 10),
                        "the page says so: \(String(describing: try? browser.run("return document.getElementById('toast').textContent")))")
        XCTAssertEqual(try browser.run("return document.querySelectorAll('button.resolve').length") as? Int, 0, "its buttons are gone")

        // b.txt: the page's click after the CLI resolved it (before the page heard) is refused.
        let b = try XCTUnwrap(ids["b.txt"])
        try openConflict(browser, b)
        // The page does not hear of it in time: its refreshes of the list never answer.
        try browser.run("const f = window.fetch; window.fetch = (u, i) => u === '/api/conflicts' ? new Promise(() => {}) : f(u, i)")
        XCTAssertEqual(coordfs("resolve", mnt + "/b.txt", "--close").status, 0)
        try browser.click("button.resolve[data-resolution=save]")
        XCTAssertNotNil(try browser.wait("return document.getElementById('toast').textContent.startsWith('Not resolved: conflict \(b) is no longer open')"),
                        "\(String(describing: try? browser.run("return document.getElementById('toast').textContent")))")
        XCTAssertEqual(text("b.txt"), "theirs\n", "nothing written")

        // c.txt: two resolutions at once over HTTP.
        let c = try XCTUnwrap(ids["c.txt"])
        let token = String(url.split(separator: "=").last!)
        let headers = ["X-CoordFS-Token": token, "Content-Type": "application/json", "Origin": "http://127.0.0.1:\(port)"]
        let statuses = Statuses()
        let senders = ["save", "keepBoth"].map { resolution in
            Thread {
                let body = #"{"id":\#(c),"resolution":"\#(resolution)","mine":"mine\n"}"#
                statuses.add(HTTP.request(port: port, "POST", "/api/resolve", headers: headers, body: Array(body.utf8))?.status ?? 0)
            }
        }
        for t in senders { t.start() }
        let sent = Date().addingTimeInterval(30)
        while statuses.all.count < 2 && Date() < sent { usleep(20_000) }
        // The other is refused: 409 when the daemon found it resolved, 404 when it was no longer listed.
        XCTAssertTrue([[200, 404], [200, 409]].contains(statuses.all.sorted()), "one wins, the other is refused: \(statuses.all)")
        let records = jsonLines(coordfs("log", mnt, "--kind", "conflictResolved", "--json")).filter { "\($0)".contains("c.txt") }
        XCTAssertEqual(records.count, 1, "one resolution: \(records)")
        let copies = try FileManager.default.contentsOfDirectory(atPath: backing).filter { $0.hasPrefix("c (conflict ") }
        XCTAssertEqual(copies.count + (text("c.txt") == "mine\n" ? 1 : 0), 1, "one write: \(copies), \(text("c.txt") ?? "-")")

        // A file deleted after its conflict opened: the page offers what applies and says why.
        try "base\n".write(toFile: backing + "/d.txt", atomically: false, encoding: .utf8)
        let d = try present("d.txt", unsaved: true)
        XCTAssertEqual(sh("echo theirs > '\(mnt!)/d.txt' && rm '\(mnt!)/d.txt'").status, 0)
        let dID = try XCTUnwrap(jsonLines(coordfs("conflicts", mnt, "--json")).first { ($0["path"] as? String)?.hasSuffix("/d.txt") == true }?["id"] as? Int)
        try browser.run("location.reload()")
        XCTAssertNotNil(try browser.wait("return document.getElementById('conn').textContent === 'live'", timeout: 20))
        try openConflict(browser, dID)
        XCTAssertEqual(try offered(browser), ["save", "keepBoth", "close"], "reload and merge need the file")
        XCTAssertTrue((try browser.run("return document.getElementById('conflict-view').textContent") as? String)?.contains("deleted") == true, "the page says why")
        _ = (presenters, d)
    }

    /// Huge and empty documents over HTTP against the real server: a side past 8 MiB gets no
    /// side-by-side view or merge (a merge preview says to use the CLI) and the other resolutions
    /// stay; a mine larger than one protocol message is refused saying what to do instead (before:
    /// "pass a file inside the mount instead", which a page cannot), with nothing written; an
    /// empty base is no lines, not one empty line.
    func testHugeAndEmptyDocumentsAreSaidSo() throws {
        FileManager.default.createFile(atPath: backing + "/big.txt", contents: Data(repeating: 0x61, count: 9 << 20))
        FileManager.default.createFile(atPath: backing + "/empty.txt", contents: Data())
        try mount()
        let presenters = try ["big.txt", "empty.txt"].map { try present($0, unsaved: true) }
        XCTAssertEqual(sh("echo more >> '\(mnt!)/big.txt' && echo x > '\(mnt!)/empty.txt'").status, 0)
        var ids: [String: Int] = [:]
        for c in jsonLines(coordfs("conflicts", mnt, "--json")) { ids[((c["path"] as? String) ?? "").split(separator: "/").last.map(String.init) ?? ""] = c["id"] as? Int }
        let (_, url, port) = try startWeb()
        let headers = ["X-CoordFS-Token": String(url.split(separator: "=").last!), "Content-Type": "application/json"]
        func post(_ path: String, _ body: [String: Any]) throws -> HTTPResponse? {
            HTTP.request(port: port, "POST", path, headers: headers, body: Array(try JSONSerialization.data(withJSONObject: body)), timeout: 30)
        }
        let big = try XCTUnwrap(ids["big.txt"])
        let view = try post("/api/conflict", ["id": big])
        let object = (try? JSONSerialization.jsonObject(with: Data(view?.body ?? []))) as? [String: Any]
        XCTAssertEqual(object?["tooLarge"] as? Bool, true, "\(String(describing: view))")
        XCTAssertEqual(object?["resolutions"] as? [String], ["save", "reload", "keepBoth", "close"])
        XCTAssertNil(object?["theirs"], "no side-by-side view")
        let preview = try post("/api/merge-preview", ["id": big, "mine": "a"])
        XCTAssertEqual(preview?.status, 413)
        XCTAssertTrue(preview?.text.contains("coordfs resolve --merge") == true, "\(String(describing: preview))")
        let huge = try post("/api/resolve", ["id": big, "resolution": "save", "mineBase64": Data(repeating: 0x62, count: 1 << 20).base64EncodedString()])
        XCTAssertEqual(huge?.status, 413, "\(String(describing: huge))")
        XCTAssertTrue(huge?.text.contains("coordfs resolve --from FILE") == true, "\(String(describing: huge))")
        var st = stat()
        XCTAssertEqual(stat(backing + "/big.txt", &st), 0)
        XCTAssertEqual(Int(st.st_size), (9 << 20) + 5, "nothing written")
        XCTAssertEqual(jsonLines(coordfs("conflicts", mnt, "--json")).count, 2, "still open")

        let empty = try post("/api/conflict", ["id": try XCTUnwrap(ids["empty.txt"])])
        let e = (try? JSONSerialization.jsonObject(with: Data(empty?.body ?? []))) as? [String: Any]
        XCTAssertEqual((e?["base"] as? [String: Any])?["lines"] as? [String], [], "\(String(describing: empty))")
        XCTAssertEqual((e?["theirs"] as? [String: Any])?["lines"] as? [String], ["x"])
        XCTAssertEqual(e?["mineText"] as? String, "")
        _ = presenters
    }

    /// A kept version far larger than the page shows (96 MiB) is never read into the server's
    /// memory: its conflict view says it is too large, View says so with its size, a diff against
    /// it is refused naming `coordfs diff`, and the server's peak memory grows by less than half
    /// the version's size. Before, each of them read the whole version through the daemon (and
    /// View then showed its first 8 MiB), so a click on a large document's version took its size
    /// in memory, and more.
    func testALargeVersionIsNeverReadWholeByTheServer() throws {
        let size = 96 << 20
        FileManager.default.createFile(atPath: backing + "/large.txt", contents: Data(repeating: 0x61, count: size))
        try mount()
        let presenter = try present("large.txt", unsaved: true)
        XCTAssertEqual(sh("echo more >> '\(mnt!)/large.txt'").status, 0)
        let conflict = try XCTUnwrap(jsonLines(coordfs("conflicts", mnt, "--json")).first)
        let id = try XCTUnwrap(conflict["id"] as? Int, "\(conflict)")
        let base = try XCTUnwrap(conflict["baseVersion"] as? Int, "the loaded version is kept: \(conflict)")
        let (web, url, port) = try startWeb()
        let headers = ["X-CoordFS-Token": String(url.split(separator: "=").last!), "Content-Type": "application/json"]
        func post(_ path: String, _ body: [String: Any]) throws -> (Int, [String: Any]?, String) {
            let r = HTTP.request(port: port, "POST", path, headers: headers, body: Array(try JSONSerialization.data(withJSONObject: body)), timeout: 60)
            return (r?.status ?? 0, (try? JSONSerialization.jsonObject(with: Data(r?.body ?? []))) as? [String: Any], r?.text ?? "")
        }
        /// The server's peak resident memory, in KiB.
        func peak() -> Int {
            let status = (try? String(contentsOfFile: "/proc/\(web.pid)/status", encoding: .utf8)) ?? ""
            let line = status.split(separator: "\n").first { $0.hasPrefix("VmHWM:") } ?? ""
            return Int(line.split(separator: " ").dropFirst().first ?? "") ?? -1
        }
        XCTAssertEqual(try post("/api/versions", ["path": "large.txt"]).0, 200)
        let before = peak()
        XCTAssertGreaterThan(before, 0)
        let view = try post("/api/conflict", ["id": id])
        XCTAssertEqual(view.0, 200, view.2)
        XCTAssertEqual(view.1?["tooLarge"] as? Bool, true, view.2)
        let shown = try post("/api/version", ["version": base])
        XCTAssertEqual(shown.0, 200, shown.2)
        XCTAssertEqual(shown.1?["tooLarge"] as? Bool, true, shown.2)
        XCTAssertEqual(shown.1?["size"] as? Int, size, "its size is said")
        XCTAssertTrue(shown.1?["text"] is NSNull, "none of it sent: \(shown.2.prefix(200))")
        let diff = try post("/api/diff", ["path": "large.txt", "version": base])
        XCTAssertEqual(diff.0, 413, diff.2)
        XCTAssertTrue(diff.2.contains("coordfs diff"), diff.2)
        let grown = peak() - before
        XCTAssertLessThan(grown, (size >> 10) / 2, "the server's peak memory grew by \(grown) KiB for a version of \(size >> 10) KiB")
        _ = presenter
    }

    /// `coordfs web` run by nobody on an allow_other mount: its page lists and resolves nobody's
    /// own lost update, never root's conflicts (not listed, and a crafted request for one is
    /// refused without a word about it), as the control protocol rules.
    func testAPageRunByNobodyResolvesOnlyItsOwnConflicts() throws {
        chmod(root, 0o755)
        mkdir(backing + "/shared", 0o777)
        chmod(backing + "/shared", 0o777)
        FileManager.default.createFile(atPath: backing + "/shared/doc.txt", contents: Data("one\ntwo\nthree\n".utf8), attributes: [.posixPermissions: 0o666])
        FileManager.default.createFile(atPath: backing + "/root.txt", contents: Data("one\ntwo\nthree\n".utf8), attributes: [.posixPermissions: 0o644])
        try mount(options: ["allow_other"])
        let rootsConflict = try lostUpdate("root.txt")
        let nobodys = try lostUpdate("shared/doc.txt", asNobody: true)
        chmod(backing + "/.coordfs/store", 0o700)
        let (_, url, port) = try startWeb(asNobody: true)
        let browser = try openPage(url)
        defer { browser.quit() }
        try openConflict(browser, nobodys)
        XCTAssertEqual(try browser.run("return [...document.querySelectorAll('#conflicts tbody tr')].map(tr => Number(tr.dataset.id))") as? [Int], [nobodys],
                       "only nobody's own conflict")
        XCTAssertEqual(try sideLines(browser, "theirs"), ["one", "two", "three theirs"])
        let merged = try resolve(browser, "merge")
        XCTAssertTrue(merged.contains("merged cleanly"), merged)
        XCTAssertEqual(text("shared/doc.txt"), "ONE mine\ntwo\nthree theirs\n")
        let token = String(url.split(separator: "=").last!)
        let headers = ["X-CoordFS-Token": token, "Content-Type": "application/json"]
        let crafted = HTTP.request(port: port, "POST", "/api/resolve", headers: headers, body: Array(#"{"id":\#(rootsConflict),"resolution":"reload"}"#.utf8))
        XCTAssertEqual(crafted?.status, 404, "\(String(describing: crafted))")
        XCTAssertFalse(crafted?.text.contains("root.txt") ?? true)
        XCTAssertEqual(text("root.txt"), "ONE mine\ntwo\nthree\n", "root's file untouched")
        let open = jsonLines(coordfs("conflicts", mnt, "--json"))
        XCTAssertEqual(open.compactMap { $0["id"] as? Int }, [rootsConflict], "root's conflict still open")
        XCTAssertEqual(jsonLines(coordfs("log", mnt, "--kind", "conflictResolved", "--json")).first?["actor"].map { "\($0)".contains("65534") }, true,
                       "the resolution is nobody's")
    }

    /// Another user puts a symbolic link in place of its document: nobody's lost update on a
    /// shared document, then nobody makes the document a link to root's 0600 file (inside the
    /// mount, in a root-only folder; the daemon resolves that for root). Root's page shows the
    /// conflict saying the file is a link and where it points, with none of that file's bytes as
    /// mine, and the merge preview merges none of them either. Before, the page read the file
    /// through the mount as root, following the link: root's secret stood in mine's side and
    /// editor as nobody's document (one click of Save mine away from being written into nobody's
    /// folder) and in the merge preview. Re-pointed out of the mount, root's `coordfs diff` says
    /// it is a link (it said "not a regular file"); nobody's gets no byte of root's file.
    func testALinkInPlaceOfADocumentIsSaidToBeOneAndNeverRead() throws {
        chmod(root, 0o755)
        mkdir(backing + "/shared", 0o777)
        chmod(backing + "/shared", 0o777)
        mkdir(backing + "/private", 0o700)
        let secret = "ROOT SECRET \(getpid())"
        FileManager.default.createFile(atPath: backing + "/shared/doc.txt", contents: Data("one\ntwo\nthree\n".utf8), attributes: [.posixPermissions: 0o666])
        FileManager.default.createFile(atPath: backing + "/private/secret.txt", contents: Data((secret + "\n").utf8), attributes: [.posixPermissions: 0o600])
        try mount(options: ["allow_other"])
        let id = try lostUpdate("shared/doc.txt", asNobody: true)
        let nobody = ["/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"]
        let relink = #"import os, sys; os.unlink(sys.argv[1]); os.symlink(sys.argv[2], sys.argv[1])"#
        let linked = run(nobody[0], Array(nobody.dropFirst()) + ["/usr/bin/python3", "-c", relink, mnt + "/shared/doc.txt", "../private/secret.txt"])
        XCTAssertEqual(linked.status, 0, "\(linked)")
        XCTAssertEqual(try? FileManager.default.destinationOfSymbolicLink(atPath: backing + "/shared/doc.txt"), "../private/secret.txt")

        let (_, url, port) = try startWeb()
        let headers = ["X-CoordFS-Token": String(url.split(separator: "=").last!), "Content-Type": "application/json"]
        func post(_ path: String, _ body: [String: Any]) throws -> (Int, [String: Any]?, String) {
            let r = HTTP.request(port: port, "POST", path, headers: headers, body: Array(try JSONSerialization.data(withJSONObject: body)), timeout: 30)
            return (r?.status ?? 0, (try? JSONSerialization.jsonObject(with: Data(r?.body ?? []))) as? [String: Any], r?.text ?? "")
        }
        let view = try post("/api/conflict", ["id": id])
        XCTAssertEqual(view.0, 200, view.2)
        XCTAssertFalse(view.2.contains(secret), "none of root's file in the conflict view: \(view.2)")
        let link = view.1?["link"] as? [String: Any]
        XCTAssertEqual(link?["path"] as? String, "shared/doc.txt", view.2)
        XCTAssertEqual(link?["target"] as? String, "../private/secret.txt", view.2)
        XCTAssertTrue((link?["message"] as? String)?.contains("symbolic link") == true, view.2)
        XCTAssertEqual(view.1?["mineExists"] as? Bool, false, "the link is not mine: \(view.2)")
        XCTAssertEqual(view.1?["mineText"] as? String ?? "", "", view.2)
        let preview = try post("/api/merge-preview", ["id": id])
        XCTAssertFalse(preview.2.contains(secret), "none of root's file merged: \(preview.2)")
        XCTAssertNotEqual(preview.0, 200, preview.2)

        // The page says so in a browser too, in place of the "deleted" note.
        let browser = try openPage(url)
        defer { browser.quit() }
        try openConflict(browser, id)
        XCTAssertTrue((try browser.run("return document.getElementById('conflict-view').textContent") as? String)?.contains("is a symbolic link (to ../private/secret.txt)") == true)
        XCTAssertEqual(try browser.run("return document.getElementById('conflict-view').textContent.includes(arguments[0])", [secret]) as? Bool, false)

        // Out of the mount: root's diff says it is a link; nobody's shows nothing of root's file.
        let outside = root + "/outside.txt"
        FileManager.default.createFile(atPath: outside, contents: Data((secret + "\n").utf8), attributes: [.posixPermissions: 0o600])
        let outward = run(nobody[0], Array(nobody.dropFirst()) + ["/usr/bin/python3", "-c", relink, mnt + "/shared/doc.txt", outside])
        XCTAssertEqual(outward.status, 0, "\(outward)")
        let theirs = try XCTUnwrap(jsonLines(coordfs("conflicts", mnt, "--json")).first?["theirsVersion"] as? Int)
        let rootsDiff = coordfs("diff", mnt + "/shared/doc.txt", "--version", "\(theirs)")
        XCTAssertNotEqual(rootsDiff.status, 0, "\(rootsDiff)")
        XCTAssertTrue(rootsDiff.stderr.contains("shared/doc.txt is a symbolic link (to \(outside))"), "\(rootsDiff)")
        XCTAssertFalse(rootsDiff.stdout.contains(secret))
        let nobodysDiff = run(nobody[0], Array(nobody.dropFirst()) + [binary, "diff", mnt + "/shared/doc.txt", "--version", "\(theirs)"])
        XCTAssertFalse(nobodysDiff.stdout.contains(secret) || nobodysDiff.stderr.contains(secret), "\(nobodysDiff)")
    }

    /// Hostile and non-UTF-8 names in every place the page shows one (events, status, the conflict
    /// list and view, the versions timeline and its seen names, the diff header, the toast after a
    /// resolution): text, never markup, and a byte that is not UTF-8 shown as `\xNN` as the CLI does.
    func testHostileAndNonUTF8NamesAreTextEverywhere() throws {
        let hostile = "<img src=x onerror=alert(1)>\"'&<svg onload=alert(2)>&lt;"
        let hostileBytes = Array(hostile.utf8)
        let latin: [UInt8] = Array("caf".utf8) + [0xE9] + Array(".txt".utf8)
        for name in [hostileBytes, latin] {
            let path = Array(backing.utf8) + [0x2F] + name
            let fd = (path + [0]).withUnsafeBufferPointer { $0.withMemoryRebound(to: CChar.self) { open($0.baseAddress!, O_CREAT | O_WRONLY, 0o644) } }
            XCTAssertGreaterThanOrEqual(fd, 0)
            _ = write(fd, "base\n", 5)
            close(fd)
        }
        try mount()
        let p1 = try present(hostile, unsaved: true)
        XCTAssertEqual(run("/bin/sh", ["-c", "for f in '\(mnt!)'/*; do echo theirs > \"$f\"; done"]).status, 0)
        let (_, url, _) = try startWeb()
        let browser = try openPage(url)
        defer { browser.quit() }
        let id = try XCTUnwrap(jsonLines(coordfs("conflicts", mnt, "--json")).first?["id"] as? Int)
        try openConflict(browser, id)
        XCTAssertEqual(try browser.run("return document.querySelector('#conflict-view h2 .path').textContent") as? String, hostile)
        XCTAssertTrue((try browser.run("return [...document.querySelectorAll('#conflicts td.path')].map(t => t.textContent)") as? [String])?.contains(hostile) == true)
        try resolve(browser, "save")
        XCTAssertTrue((try browser.run("return document.getElementById('toast').textContent") as? String)?.contains(hostile) == true, "the toast names it as text")
        try browser.click("nav button[data-tab=events]")
        XCTAssertNotNil(try browser.wait("return [...document.querySelectorAll('#events td.path')].some(td => td.textContent === '/caf\\\\xe9.txt')"),
                        "a byte that is not UTF-8 as \\xNN: \(String(describing: try? browser.run("return [...document.querySelectorAll('#events td.path')].map(t => t.textContent).slice(0, 20)")))")
        try browser.click("nav button[data-tab=versions]")
        try browser.run("[...document.querySelectorAll('#v-known button')].find(b => b.textContent === 'caf\\\\xe9.txt').click()")
        XCTAssertNotNil(try browser.wait("return document.querySelector('#timeline li.current .path')?.textContent === 'caf\\\\xe9.txt'"), "the timeline names it")
        try browser.run("[...document.querySelectorAll('#v-known button')].find(b => b.textContent === arguments[0]).click()", [hostile])
        XCTAssertNotNil(try browser.wait("return document.querySelector('#timeline li.current .path')?.textContent === arguments[0] && document.querySelectorAll('#timeline button.diff').length > 0", [hostile]))
        try browser.click("#timeline button.diff")
        XCTAssertNotNil(try browser.wait("return (document.getElementById('diff')?.textContent || '').includes('--- a/' + arguments[0])", [hostile]))
        try browser.click("nav button[data-tab=status]")
        usleep(500_000)
        // Nothing was ever made of a name: no element, no handler, no script run.
        XCTAssertEqual(try browser.run("return document.querySelectorAll('img, svg, script:not([src]), [onerror], [onload]').length") as? Int, 0)
        XCTAssertEqual(try browser.run("return document.title") as? String, "coordfs")
        _ = p1
    }
}

/// HTTP statuses collected from several threads.
private final class Statuses: @unchecked Sendable {
    private let lock = NSLock()
    private var values: [Int] = []
    func add(_ v: Int) { lock.lock(); values.append(v); lock.unlock() }
    var all: [Int] { lock.lock(); defer { lock.unlock() }; return values }
}
