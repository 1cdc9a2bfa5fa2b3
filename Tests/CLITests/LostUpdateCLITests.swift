// A lost update between two processes that present nothing, through the binary: a Python process
// reads `doc`, `sed -i` (another process) changes it through the mount, and the Python process
// writes back what it had read. `coordfs conflicts`, `versions`, `diff`, `log` show it and
// `coordfs resolve --merge` needs no --from (docs/semantics.md, "Lost updates").
import Foundation
import Glibc
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
}
