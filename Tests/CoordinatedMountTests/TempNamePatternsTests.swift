import XCTest
@testable import CoordFS
import NameBytes

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

    /// Names are bytes: `?` stands for one byte of a name that is not UTF-8, as fnmatch sees it.
    func testANameThatIsNotUTF8IsMatchedByItsBytes() {
        let rsyncTemp = String(nameBytes: Array(".doc.txt.".utf8) + [0x41, 0xFF, 0x62, 0x33, 0x64, 0x45])
        XCTAssertTrue(TempNamePatterns().matches(rsyncTemp))
        XCTAssertTrue(TempNamePatterns(["sed??????"]).matches(String(nameBytes: Array("sed".utf8) + [0x80, 0x81, 0x82, 0x83, 0x84, 0x85])))
        XCTAssertFalse(TempNamePatterns(["sed??????"]).matches(String(nameBytes: Array("sed".utf8) + [0x80, 0x81])))
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
