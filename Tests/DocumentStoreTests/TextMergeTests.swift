import Foundation
import XCTest
@testable import DocumentStore

final class TextMergeTests: XCTestCase {
    struct MergeResult: Equatable {
        var text: String
        var conflicts: Int
        init(_ text: String, _ conflicts: Int) { self.text = text; self.conflicts = conflicts }
    }

    func merge(_ base: String, _ mine: String, _ theirs: String) -> MergeResult {
        let result = TextMerge.merge(base: Array(base.utf8), mine: Array(mine.utf8), theirs: Array(theirs.utf8))
        return MergeResult(String(decoding: result.text, as: UTF8.self), result.conflicts)
    }

    func testCleanMerges() {
        XCTAssertEqual(merge("a\nb\nc\n", "a\nb\nc\n", "a\nb\nc\n").text, "a\nb\nc\n")
        XCTAssertEqual(merge("a\nb\nc\nd\ne\n", "A\nb\nc\nd\ne\n", "a\nb\nc\nd\nE\n").text, "A\nb\nc\nd\nE\n")
        // One side only.
        XCTAssertEqual(merge("a\nb\n", "a\nb\nmine\n", "a\nb\n").text, "a\nb\nmine\n")
        XCTAssertEqual(merge("a\nb\n", "a\nb\n", "theirs\na\nb\n").text, "theirs\na\nb\n")
        // Both sides made the same change: no conflict.
        XCTAssertEqual(merge("a\nb\nc\n", "a\nX\nc\n", "a\nX\nc\n"), MergeResult("a\nX\nc\n", 0))
        // Deletion on one side, untouched elsewhere.
        XCTAssertEqual(merge("a\nb\nc\nd\ne\nf\n", "a\nc\nd\ne\nf\n", "a\nb\nc\nd\ne\nF\n").text, "a\nc\nd\ne\nF\n")
        // Empty base, one side adds.
        XCTAssertEqual(merge("", "new\n", "").text, "new\n")
    }

    func testOverlappingChangesAreMarked() {
        XCTAssertEqual(merge("a\nb\nc\n", "a\nmine\nc\n", "a\ntheirs\nc\n"),
                       MergeResult("a\n<<<<<<< mine\nmine\n=======\ntheirs\n>>>>>>> theirs\nc\n", 1))
        // Common lines at the edges of the clash stay outside the markers.
        XCTAssertEqual(merge("1\n2\n3\n", "1\nsame\nmine\n3\n", "1\nsame\ntheirs\n3\n"),
                       MergeResult("1\nsame\n<<<<<<< mine\nmine\n=======\ntheirs\n>>>>>>> theirs\n3\n", 1))
        // Two clashes more than 3 lines apart stay separate; closer ones are joined (as git does).
        let merged = merge("a\nb\nc\nd\ne\nf\ng\nh\n", "a\nB1\nc\nd\ne\nf\nG1\nh\n", "a\nB2\nc\nd\ne\nf\nG2\nh\n")
        XCTAssertEqual(merged.conflicts, 2)
        XCTAssertEqual(merged.text, "a\n<<<<<<< mine\nB1\n=======\nB2\n>>>>>>> theirs\nc\nd\ne\nf\n<<<<<<< mine\nG1\n=======\nG2\n>>>>>>> theirs\nh\n")
        let joined = merge("a\nb\nc\nd\ne\n", "a\nB1\nc\nd\nE1\n", "a\nB2\nc\nd\nE2\n")
        XCTAssertEqual(joined, MergeResult("a\n<<<<<<< mine\nB1\nc\nd\nE1\n=======\nB2\nc\nd\nE2\n>>>>>>> theirs\n", 1))
        // Missing final newline inside a conflict: the marker still starts a line.
        XCTAssertEqual(merge("x\n", "mine", "theirs").text, "<<<<<<< mine\nmine\n=======\ntheirs\n>>>>>>> theirs\n")
    }

    func testBinaryDetection() {
        XCTAssertTrue(TextMerge.looksBinary([0x50, 0x44, 0x46, 0x00, 0x01]))
        XCTAssertFalse(TextMerge.looksBinary(Array("plain text ✓\n".utf8)))
    }

    /// Our merge against `git merge-file -p -L mine -L base -L theirs` on cases where git's
    /// refinements agree with plain diff3.
    func testMatchesGitMergeFile() throws {
        guard access("/usr/bin/git", X_OK) == 0 else { throw XCTSkip("git not installed") }
        let cases: [(String, String, String)] = [
            ("a\nb\nc\nd\ne\n", "A\nb\nc\nd\ne\n", "a\nb\nc\nd\nE\n"),
            ("a\nb\nc\n", "a\nmine\nc\n", "a\ntheirs\nc\n"),
            ("1\n2\n3\n4\n5\n6\n7\n8\n9\n", "1\n2\nthree\n4\n5\n6\n7\n8\n9\n", "1\n2\n3\n4\n5\n6\n7\neight\n9\n"),
            ("a\nb\nc\nd\ne\nf\ng\n", "a\nB1\nc\nd\ne\nF1\ng\n", "a\nB2\nc\nd\ne\nF2\ng\n"),
            ("keep\nold\nkeep\n", "keep\nkeep\n", "keep\nold\nkeep\nadded\n"),
            ("x\ny\nz\n", "x\ny\nz\nmine tail\n", "head\nx\ny\nz\n"),
            ("one\ntwo\n", "one\nmine 1\nmine 2\ntwo\n", "one\ntheirs 1\ntwo\n"),
            ("a\nb\nc\nd\ne\nf\ng\nh\n", "a\nB1\nc\nd\ne\nf\nG1\nh\n", "a\nB2\nc\nd\ne\nf\nG2\nh\n"),
            ("p\nq\nr\ns\n", "p\nsame\nM\nsame2\ns\n", "p\nsame\nT\nsame2\ns\n"),
            ("1\n2\n3\n", "1\n2\n3\n4 mine\n", "1\n2\n3\n4 theirs\n"),
        ]
        let directory = NSTemporaryDirectory() + "merge-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        for (index, (base, mine, theirs)) in cases.enumerated() {
            for (name, text) in [("base", base), ("mine", mine), ("theirs", theirs)] {
                try Data(text.utf8).write(to: URL(fileURLWithPath: "\(directory)/\(name)"))
            }
            let git = try Shell.run("/usr/bin/git", ["merge-file", "-p", "-L", "mine", "-L", "base", "-L", "theirs",
                                                     "\(directory)/mine", "\(directory)/base", "\(directory)/theirs"], allowFailure: true)
            let ours = merge(base, mine, theirs)
            XCTAssertEqual(ours.text, git.output, "case \(index)")
            XCTAssertEqual(Int32(ours.conflicts), git.status, "case \(index): git exits with the number of conflicts")
        }
    }

    func testDiffHunksReconstructRandomEdits() {
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<300 {
            let a = (0..<Int.random(in: 0...40, using: &generator)).map { _ in Int.random(in: 0...6, using: &generator) }
            var b = a
            for _ in 0..<Int.random(in: 0...10, using: &generator) {
                switch Int.random(in: 0...2, using: &generator) {
                case 0 where !b.isEmpty: b.remove(at: Int.random(in: 0..<b.count, using: &generator))
                case 1: b.insert(Int.random(in: 0...6, using: &generator), at: Int.random(in: 0...b.count, using: &generator))
                default: if !b.isEmpty { b[Int.random(in: 0..<b.count, using: &generator)] = Int.random(in: 0...6, using: &generator) }
                }
            }
            let hunks = LineDiff.hunks(a, b)
            var rebuilt: [Int] = []
            var position = 0
            for hunk in hunks {
                XCTAssertGreaterThanOrEqual(hunk.aStart, position)
                rebuilt += a[position..<hunk.aStart]
                rebuilt += b[hunk.bStart..<hunk.bEnd]
                position = hunk.aEnd
            }
            rebuilt += a[position...]
            XCTAssertEqual(rebuilt, b, "a \(a) b \(b)")
            // Minimal: equal lines outside hunks equal the LCS length.
            let kept = a.count - hunks.reduce(0) { $0 + $1.aCount }
            XCTAssertEqual(kept, lcsLength(a, b))
        }
    }

    func testBeyondTheEditLimitStillCorrect() {
        let a = Array(0..<5000)
        let b = Array(5000..<10000)
        XCTAssertEqual(LineDiff.hunks(a, b), [DiffHunk(aStart: 0, aCount: 5000, bStart: 0, bCount: 5000)])
    }

    func testUnifiedDiffMatchesDiffU() throws {
        guard access("/usr/bin/diff", X_OK) == 0 else { throw XCTSkip("diff not installed") }
        let old = (1...30).map { "line \($0)\n" }.joined()
        var newLines = (1...30).map { "line \($0)\n" }
        newLines[2] = "changed 3\n"
        newLines.insert("inserted\n", at: 20)
        newLines.removeLast()
        newLines.append("last without newline")
        let new = newLines.joined()
        let directory = NSTemporaryDirectory() + "udiff-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try Data(old.utf8).write(to: URL(fileURLWithPath: directory + "/old"))
        try Data(new.utf8).write(to: URL(fileURLWithPath: directory + "/new"))
        let expected = try Shell.run("/usr/bin/diff", ["-u", "--label", "a", "--label", "b", directory + "/old", directory + "/new"], allowFailure: true).output
        XCTAssertEqual(TextMerge.unifiedDiff(old: Array(old.utf8), new: Array(new.utf8), oldLabel: "a", newLabel: "b"), expected)
        XCTAssertEqual(TextMerge.unifiedDiff(old: [1, 0], new: [2, 0], oldLabel: "a", newLabel: "b"), "Binary files a and b differ\n")
        XCTAssertEqual(TextMerge.unifiedDiff(old: Array(old.utf8), new: Array(old.utf8), oldLabel: "a", newLabel: "b"), "")
    }

    private func lcsLength(_ a: [Int], _ b: [Int]) -> Int {
        var row = [Int](repeating: 0, count: b.count + 1)
        for x in a {
            var previous = 0
            for j in 0..<b.count {
                let saved = row[j + 1]
                row[j + 1] = x == b[j] ? previous + 1 : max(row[j + 1], row[j])
                previous = saved
            }
        }
        return row[b.count]
    }
}
