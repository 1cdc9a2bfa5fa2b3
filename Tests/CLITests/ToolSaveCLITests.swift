import Foundation
import Glibc
import TestSupport
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
    /// `rm -rf F` deletes F's children before F: the presenters of F, of `F/x.txt` and of
    /// `F/sub/y.txt` are each asked to accommodate their item's deletion once and told `didDelete`
    /// once (not again for each folder above them, nor when the unlinks of the presented documents
    /// become deletions after save_window), F hears of each subitem once; once the items are made
    /// again, the next `rm -rf` tells each presenter again.
    func testRmRfTellsEachPresenterOfItsDeletionOnce() throws {
        try FileManager.default.createDirectory(atPath: backing + "/F/sub", withIntermediateDirectories: true)
        FileManager.default.createFile(atPath: backing + "/F/x.txt", contents: Data("x\n".utf8))
        FileManager.default.createFile(atPath: backing + "/F/sub/y.txt", contents: Data("y\n".utf8))
        try mount()
        let folder = try present("F"), x = try present("F/x.txt"), y = try present("F/sub/y.txt")
        func count(_ child: Child, _ line: String) -> Int { child.lines.filter { $0 == line }.count }
        func asks(_ child: Child, _ item: String) -> Int {
            child.lines.filter { $0.hasPrefix("ask ") && $0.contains(" accommodateDeletion \(item) ") }.count
        }
        for round in 1...3 {
            XCTAssertEqual(sh("rm -rf '\(mnt!)/F'").status, 0)
            if round == 3 {
                // Not made again within save_window: the documents' unlinks become deletions, told
                // late to F; their presenters heard of them with F's already.
                for item in ["F/x.txt", "F/sub/y.txt"] {
                    XCTAssertTrue(pollUntil(within: 20) { count(folder, "notification subitemDidDelete F subitem=\(item)") == 1 }, folder.stdout)
                }
            }
            // Made again: each presenter's didChange comes after whatever the deletion told it.
            XCTAssertEqual(sh("mkdir -p '\(mnt!)/F/sub' && echo x > '\(mnt!)/F/x.txt' && echo y > '\(mnt!)/F/sub/y.txt'").status, 0)
            for (child, item) in [(folder, "F"), (x, "F/x.txt"), (y, "F/sub/y.txt")] {
                XCTAssertTrue(pollUntil(within: 10) { count(child, "notification didChange \(item)") >= round }, child.stdout)
                XCTAssertEqual(count(child, "notification didDelete \(item)"), round, "\(item): \(child.stdout)")
                XCTAssertEqual(asks(child, item), round, "\(item): \(child.stdout)")
            }
            // The unlinks of the presented documents are saves until save_window passes (made
            // again here, they were saves); the folder inside is a deletion, told once.
            XCTAssertEqual(count(folder, "notification subitemDidDelete F subitem=F/sub"), round, folder.stdout)
        }
        for child in [folder, x, y] { XCTAssertEqual(child.stop(), 0) }
    }
}
