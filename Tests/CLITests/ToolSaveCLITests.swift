import Foundation
import Glibc
import XCTest

/// What a user running `coordfs present` sees while real tools save the document through the
/// mount (default options): one `didChange` line per save, never a deletion or a move, and the
/// event log's `didChange` records for the document, one per save.
final class ToolSaveCLITests: CLITestCase {
    func testPresentHearsOneDidChangePerSaveWhateverTheTool() throws {
        FileManager.default.createFile(atPath: backing + "/doc.txt", contents: Data("alpha\n".utf8))
        FileManager.default.createFile(atPath: root + "/src.txt", contents: Data("copied\n".utf8))
        try mount()
        let presenter = try present("doc.txt")
        var saves = [
            "sed -i s/alpha/beta/ doc.txt",
            "cp --backup=simple ../src.txt doc.txt",
            "echo moved > new.txt && mv -b new.txt doc.txt",
            "perl -pi -e s/moved/perl/ doc.txt",
            "python3 -c \"import os; os.unlink('doc.txt'); open('doc.txt', 'w').write('anew')\"",
            "printf X | dd of=doc.txt conv=notrunc status=none",
            "echo teed | tee doc.txt > /dev/null",
        ]
        if sh("command -v rsync").status == 0 {
            saves += ["rsync -b -I ../src.txt doc.txt", "echo inplace > ../src.txt && rsync --inplace -I ../src.txt doc.txt"]
        }
        func didChanges() -> Int { presenter.lines.filter { $0 == "notification didChange doc.txt" }.count }
        for (n, save) in saves.enumerated() {
            XCTAssertEqual(sh("cd '\(mnt!)' && \(save)").status, 0, save)
            let deadline = Date().addingTimeInterval(10)
            while didChanges() < n + 1 && Date() < deadline { usleep(20_000) }
            usleep(700_000)
            XCTAssertEqual(didChanges(), n + 1, "`\(save)` is one change: \(presenter.stdout)")
        }
        XCTAssertFalse(presenter.lines.contains { $0.contains("Delet") || $0.contains("didMove") }, presenter.stdout)
        // The log is written behind the operations: wait until it holds them all, then a little more.
        func logged() -> [Substring] { coordfs("log", mnt, "--kind", "didChange", "--path", "doc.txt").stdout.split(separator: "\n") }
        let deadline = Date().addingTimeInterval(10)
        while logged().count < saves.count && Date() < deadline { usleep(100_000) }
        usleep(500_000)
        XCTAssertEqual(logged().count, saves.count, "\(logged())")
        XCTAssertEqual(presenter.stop(), 0)
    }
}
