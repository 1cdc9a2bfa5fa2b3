import Foundation
import Glibc
import XCTest
@testable import Linux

/// `NoLinkRead`, the read of a document's file below a mount point that follows no symbolic link
/// (`coordfs web`'s file "now", `coordfs diff`): a file, a missing one, a link in place of the file
/// or of a folder on its way (said to be one, with its target, never read through), something
/// that is not a file, and the size limit.
final class NoLinkReadTests: XCTestCase {
    private var dir = ""

    override func setUpWithError() throws {
        dir = NSTemporaryDirectory() + "/nolinkread-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: dir + "/sub", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: dir + "/elsewhere", withIntermediateDirectories: true)
        FileManager.default.createFile(atPath: dir + "/sub/doc.txt", contents: Data("doc\n".utf8))
        FileManager.default.createFile(atPath: dir + "/elsewhere/secret.txt", contents: Data("secret\n".utf8))
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: dir)
    }

    func testAFileIsReadAndAMissingOneIsMissing() {
        XCTAssertEqual(NoLinkRead.read("sub/doc.txt", below: dir), .bytes(Array("doc\n".utf8)))
        XCTAssertEqual(NoLinkRead.read("/sub//doc.txt", below: dir), .bytes(Array("doc\n".utf8)), "slashes as a path has them")
        XCTAssertEqual(NoLinkRead.read("sub/none.txt", below: dir), .missing)
        XCTAssertEqual(NoLinkRead.read("none/doc.txt", below: dir), .missing)
        XCTAssertEqual(NoLinkRead.read("sub/doc.txt/x", below: dir), .missing, "a file on the way is no folder")
    }

    func testALinkInPlaceOfTheFileOrOfAFolderIsSaidToBeOneAndNotRead() throws {
        try FileManager.default.createSymbolicLink(atPath: dir + "/sub/link.txt", withDestinationPath: "../elsewhere/secret.txt")
        XCTAssertEqual(NoLinkRead.read("sub/link.txt", below: dir), .link(path: "sub/link.txt", target: "../elsewhere/secret.txt"))
        try FileManager.default.createSymbolicLink(atPath: dir + "/folder", withDestinationPath: dir + "/elsewhere")
        XCTAssertEqual(NoLinkRead.read("folder/secret.txt", below: dir), .link(path: "folder", target: dir + "/elsewhere"))
        try FileManager.default.createSymbolicLink(atPath: dir + "/dangling", withDestinationPath: "/nonexistent")
        XCTAssertEqual(NoLinkRead.read("dangling", below: dir), .link(path: "dangling", target: "/nonexistent"))
    }

    func testWhatIsNoFileAndWhatIsTooLarge() {
        XCTAssertEqual(NoLinkRead.read("sub", below: dir), .notAFile)
        XCTAssertEqual(NoLinkRead.read("", below: dir), .notAFile, "the folder itself")
        XCTAssertEqual(mkfifo(dir + "/fifo", 0o600), 0)
        XCTAssertEqual(NoLinkRead.read("fifo", below: dir), .notAFile, "a FIFO is opened without waiting for a writer, and not read")
        XCTAssertEqual(NoLinkRead.read("sub/doc.txt", below: dir, atMost: 3), .tooLarge)
        XCTAssertEqual(NoLinkRead.read("sub/doc.txt", below: dir, atMost: 4), .bytes(Array("doc\n".utf8)))
    }
}
