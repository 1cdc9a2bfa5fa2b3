import XCTest
import Foundation
@testable import CoordFS
import Coordination
import DocumentStore
import EventLog

/// A presented document whose name comes to hold something that is not a regular file (a folder
/// made where it was, a symbolic link renamed over it or made at its name, a FIFO), through the
/// mount or beside it: the document was deleted, and the store says so as for any deletion (a
/// deletion conflict under unsaved changes, its base kept; close without). Before, the store
/// looked at the path, found no regular file there, and dropped the change without a word: the
/// presenter heard "did delete" from the coordinator, but no conflict was opened and nothing was
/// recorded.
final class ReplacedDocumentTests: StoreMountTestCase {
    override func configure(_ options: inout MountOptions) {
        super.configure(&options)
        options.allowOther = true
    }

    static let asNobody = "setpriv --reuid=65534 --regid=65534 --clear-groups"

    /// One store event, a deletion, and one open deletion conflict for `p`, recorded in the log;
    /// `base` (when known) kept and the conflict's base.
    private func assertDeletionConflict(_ p: DocumentRecorder, base: String?, file: StaticString = #filePath, line: UInt = #line) throws {
        let events = p.waitForEvents(1, timeout: 5, settle: 0.8)
        let conflict = try conflict(of: events, file: file, line: line)
        XCTAssertEqual(events.first?.kind, .deletion, "\(events)", file: file, line: line)
        XCTAssertNil(events.first?.after, file: file, line: line)
        XCTAssertEqual(conflict.kind, .deletion, file: file, line: line)
        XCTAssertEqual(conflict.state, .open, file: file, line: line)
        if let base {
            XCTAssertTrue(try keptTexts(p.path.string).contains(base), "the version the presenter loaded is kept", file: file, line: line)
            let baseVersion = try XCTUnwrap(conflict.baseVersion, "the conflict knows its base", file: file, line: line)
            XCTAssertEqual(String(decoding: try store.contents(of: baseVersion), as: UTF8.self), base, file: file, line: line)
        }
        let detected = try logged().filter { $0.kind == .conflictDetected && $0.path == "/" + p.path.string }
        XCTAssertEqual(detected.count, 1, "the conflict is in the log", file: file, line: line)
    }

    func testADocumentReplacedByAFolderIsADeletion() throws {
        try write("doc.txt", "alpha\n")
        let (p, _) = try presentDocument("doc.txt", unsaved: true)
        try sh("rm doc.txt && mkdir doc.txt")
        try assertDeletionConflict(p, base: "alpha\n")
        // Without unsaved changes: closed, as for any deletion.
        try write("other.txt", "beta\n")
        let (q, _) = try presentDocument("other.txt")
        try sh("rm other.txt && mkdir other.txt")
        let events = q.waitForEvents(1, timeout: 5, settle: 0.8)
        XCTAssertEqual(events.map(\.kind), [.deletion], "\(events)")
        XCTAssertEqual(events.map(\.action), [.close], "\(events)")
    }

    /// A link renamed over the document (`ln -s` then `mv -T`, an atomic swap of a link), and one
    /// made at its name right after an unlink (within save_window) by another user in a shared
    /// folder, pointing at root's secret: deletions, and no version of the store holds what the
    /// link points at.
    func testADocumentReplacedByASymbolicLinkIsADeletion() throws {
        try "secret\n".write(toFile: root + "/secret.txt", atomically: false, encoding: .utf8)
        chmod(root + "/secret.txt", 0o600)
        try write("doc.txt", "alpha\n")
        let (p, _) = try presentDocument("doc.txt", unsaved: true)
        try sh("ln -s ../secret.txt link.tmp && mv -T link.tmp doc.txt")
        try assertDeletionConflict(p, base: "alpha\n")

        try FileManager.default.createDirectory(atPath: backing + "/shared", withIntermediateDirectories: true)
        chmod(backing + "/shared", 0o777)
        try write("shared/doc.txt", "beta\n")
        chmod(backing + "/shared/doc.txt", 0o644)
        let (q, _) = try presentDocument("shared/doc.txt", unsaved: true)
        try sh("\(Self.asNobody) sh -c 'rm -f shared/doc.txt && ln -s \(root!)/secret.txt shared/doc.txt'")
        try assertDeletionConflict(q, base: "beta\n")
        for path in ["doc.txt", "shared/doc.txt"] {
            let kept = try keptTexts(path)
            XCTAssertFalse(kept.contains("secret\n"), "nothing read through the link: \(kept)")
        }
        XCTAssertEqual(try String(contentsOfFile: root + "/secret.txt", encoding: .utf8), "secret\n")
    }

    /// The same made in the backing folder: seen by the backing watcher, a deletion.
    func testADocumentReplacedBesideTheMountIsADeletion() throws {
        try write("doc.txt", "alpha\n")
        try write("fifo.txt", "beta\n")
        let (p, _) = try presentDocument("doc.txt", unsaved: true)
        let (q, _) = try presentDocument("fifo.txt", unsaved: true)
        try sh("rm doc.txt && mkdir doc.txt && rm fifo.txt && mkfifo fifo.txt", in: backing)
        try assertDeletionConflict(p, base: nil)
        try assertDeletionConflict(q, base: nil)
    }
}
