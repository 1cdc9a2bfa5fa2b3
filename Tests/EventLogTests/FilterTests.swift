import XCTest

@testable import EventLog

final class FilterTests: XCTestCase {
    func testGlobs() throws {
        let cases: [(String, String, Bool)] = [
            ("*.txt", "/a.txt", true),
            ("*.txt", "/docs/deep/a.txt", true),  // no slash: matches the last component anywhere
            ("*.txt", "/a.txt/b", false),
            ("/docs/*.txt", "/docs/a.txt", true),
            ("docs/*.txt", "/docs/a.txt", true),
            ("/docs/*.txt", "/docs/sub/a.txt", false),
            ("/docs/**", "/docs/sub/a.txt", true),
            ("/docs/**", "/docs", false),
            ("/docs/**/a.txt", "/docs/a.txt", true),
            ("/docs/**/a.txt", "/docs/x/y/a.txt", true),
            ("**/a.txt", "/a.txt", true),
            ("/d?cs/a.txt", "/docs/a.txt", true),
            ("/d?cs/a.txt", "/d/cs/a.txt", false),
            ("/r?sumé", "/résumé", true),
            ("/[abc]*.md", "/b1.md", true),
            ("/[!abc]*.md", "/b1.md", false),
            ("/[a-c]x", "/bx", true),
            ("/\\*", "/*", true),
            ("/\\*", "/a", false),
            ("/", "/", true),
            ("/", "/a", false),
            ("/**/**/**/**/**/**/z", "/a/b/c/d/e/f/g/h/i/j/k/l/m/n/o/p/q/r/s/t/u/v/w/x/y", false),
        ]
        for (pattern, path, expected) in cases {
            XCTAssertEqual(try PathGlob(pattern).matches(path), expected, "\(pattern) vs \(path)")
        }
        XCTAssertThrowsError(try PathGlob(""))
        XCTAssertThrowsError(try PathGlob("/a[bc"))
    }

    func testFilterCombinesCriteriaAndAlwaysPassesGaps() throws {
        let f = try EventFilter(kindNames: ["granted,did-move"], pids: [7], pathPatterns: ["/docs/**"])
        let base = EventRecord(kind: .granted, path: "/docs/a", actor: EventActor(pid: 7, uid: 0))
        XCTAssertTrue(f.matches(base))
        var r = base
        r.kind = .released
        XCTAssertFalse(f.matches(r), "kind")
        r = base
        r.actor?.pid = 8
        XCTAssertFalse(f.matches(r), "pid")
        r.actor = nil
        XCTAssertFalse(f.matches(r), "no actor")
        r = base
        r.path = "/other"
        XCTAssertFalse(f.matches(r), "path")
        r.kind = .didMove
        r.oldPath = "/docs/was-here"
        XCTAssertTrue(f.matches(r), "a move out of the pattern still matches by its old path")
        let gap = EventRecord(kind: .gap, path: "/", details: EventDetails(gapFrom: 1, gapTo: 2))
        XCTAssertTrue(f.matches(gap))
        XCTAssertThrowsError(try EventFilter(kindNames: ["nope"], pids: [], pathPatterns: [])) { e in
            XCTAssertTrue("\(e)".contains("unknown event kind nope"))
        }
        XCTAssertTrue(EventFilter().isEmpty)
    }
}
