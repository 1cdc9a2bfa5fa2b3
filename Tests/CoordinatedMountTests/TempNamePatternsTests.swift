import XCTest
@testable import CoordFS

/// The temp/backup name matcher against fnmatch's own answers for the default patterns.
final class TempNamePatternsTests: XCTestCase {
    func testDefaultsMatchWhatEditorsAndToolsCreate() {
        let t = TempNamePatterns()
        for name in [".doc.txt.swp", ".doc.txt.swx", "doc.txt.swo", "doc.txt~", "4913", "#doc.txt#", ".#doc.txt",
                     ".~lock.doc.odt#", "lu12345.tmp", "x.tmp", "sedAbC123", ".doc.txt.Ab3dEf", ".goutputstream-XYZ12",
                     "movie.part", "file.crdownload"] {
            XCTAssertTrue(t.matches(name), name)
        }
        for name in ["doc.txt", "notes", "4914", "sed", "sedAbC12", "#doc", "report.tmpl", ".hidden", "a.swpx", ""] {
            XCTAssertFalse(t.matches(name), name)
        }
    }

    func testAgreesWithFnmatchOnEveryPatternShape() {
        let patterns = ["*.swp", "*~", "4913", "#*#", ".#*", ".~lock.*#", "lu*.tmp", "sed??????", ".*.??????", ".*.sw?", "[ab]*"]
        let names = ["a.swp", "b~", "4913", "#x#", "#", ".#a", ".~lock.a#", "lu1.tmp", "lu.tmp", "sed123456", "sed12345",
                     ".a.bcdefg", ".a.bcdef", ".x.swo", "apple", "cherry", "", "~", "##"]
        for p in patterns {
            let t = TempNamePatterns([p])
            for n in names { XCTAssertEqual(t.matches(n), fnmatch(p, n, 0) == 0, "\(p) vs \(n)") }
        }
    }
}
