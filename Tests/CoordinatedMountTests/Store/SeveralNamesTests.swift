import XCTest
import Foundation
@testable import CoordFS
import Coordination
import DocumentStore
import EventLog

/// A presented document with several names (hard links) is one file: a change made through any of
/// its names, through the mount or beside it, is a change of the document (docs/semantics.md,
/// "Several names for one file"). An open or a setattr reaches the daemon with the file's node
/// only, whose path was the name the kernel last looked up: after `cat other.txt`, a save through
/// `doc.txt` itself (its entry cached by the kernel, no lookup) was coordinated as `other.txt`,
/// and the document's presenter was neither asked nor told, and its store kept no version.
final class SeveralNamesTests: StoreMountTestCase {
    override func configure(_ options: inout MountOptions) {
        super.configure(&options)
        options.allowOther = true
    }

    static let asNobody = "setpriv --reuid=65534 --regid=65534 --clear-groups"

    /// Waits for the presenter's `count`th store event, and `settle` more; asserts it has `count`
    /// (a failure says `what` first, then the events and the presenter's log).
    @discardableResult
    private func assertEvents(_ p: DocumentRecorder, _ count: Int, _ what: String = "",
                              file: StaticString = #filePath, line: UInt = #line) -> [DocumentChangeEvent] {
        let events = p.waitForEvents(count, settle: 0.8)
        XCTAssertEqual(events.count, count, "\(what)\(events) \(p.log)", file: file, line: line)
        return events
    }

    /// One change of the presenter's document with unsaved changes: one conflict whose base is
    /// what the presenter had loaded, the file as `content`, told once, and one `didChange`
    /// record for the document since it was presented (of `actor`'s uid when given).
    private func assertOneConflict(_ p: DocumentRecorder, base: String, content: String, actor: UInt32? = nil,
                                   file: StaticString = #filePath, line: UInt = #line) throws {
        let events = p.waitForEvents(1, settle: 0.8)
        let conflict = try conflict(of: events, file: file, line: line)
        XCTAssertEqual(conflict.kind, .change, file: file, line: line)
        XCTAssertEqual(p.log.filter { $0 == "didChange" }.count, 1, "told once: \(p.log)", file: file, line: line)
        XCTAssertFalse(p.log.contains("accommodateDeletion"), "\(p.log)", file: file, line: line)
        XCTAssertEqual(backingText(p.path.string), content, file: file, line: line)
        if let baseVersion = conflict.baseVersion {
            XCTAssertEqual(String(decoding: try store.contents(of: baseVersion), as: UTF8.self), base, file: file, line: line)
        }
        let all = try logged()
        let since = all.lastIndex { $0.kind == .presenterAdded && $0.path == "/" + p.path.string } ?? 0
        let changes = all[since...].filter { $0.kind == .didChange && $0.path == "/" + p.path.string }
        XCTAssertEqual(changes.count, 1, "one didChange record for the document: \(all[since...].map { "\($0.kind) \($0.path)" })",
                       file: file, line: line)
        if let actor, let record = changes.first {
            XCTAssertEqual(record.actor?.uid, actor, "recorded as its writer's change", file: file, line: line)
        }
    }

    /// After the kernel looked the other name up, a save through the document's own name (its
    /// entry cached, so no lookup comes) is the document's: asked, told, its base kept.
    func testASaveThroughTheDocumentsNameAfterAnotherNameWasLookedUp() throws {
        try write("doc.txt", "alpha\n")
        try sh("ln doc.txt other.txt", in: backing)
        let (p, _) = try presentDocument("doc.txt", unsaved: true)
        // The kernel looks both names up, `other.txt` last; `doc.txt`'s entry stays cached.
        try sh("cat doc.txt other.txt > /dev/null && echo saved > doc.txt")
        try assertOneConflict(p, base: "alpha\n", content: "saved\n")
        XCTAssertTrue(p.log.contains("relinquishToWriter"), "asked before: \(p.log)")
        XCTAssertTrue(try keptTexts("doc.txt").contains("alpha\n"), "the base is kept")
    }

    /// Written and truncated through the other name, through the mount: each a change of the
    /// document, whichever name the kernel looked up last.
    func testWritesAndTruncatesThroughAnotherNameAreTheDocuments() throws {
        try write("doc.txt", "alpha\n")
        try sh("ln doc.txt other.txt", in: backing)
        let (p, _) = try presentDocument("doc.txt")
        try sh("cat doc.txt other.txt > /dev/null && echo through > other.txt")
        let events = assertEvents(p, 1)
        XCTAssertEqual(try store.document(atPath: "doc.txt")?.identity, events.last?.after, "the store's base is the saved file")
        try sh("truncate -s 3 other.txt")
        assertEvents(p, 2)
        XCTAssertEqual(p.log.filter { $0 == "didChange" }.count, 2, "\(p.log)")
        XCTAssertEqual(backingText("doc.txt"), "thr")
    }

    /// Written through the other name beside the mount: the document's presenters are told, as
    /// its writer's change.
    func testAWriteThroughAnotherNameBesideTheMountIsTheDocuments() throws {
        try write("doc.txt", "alpha\n")
        try sh("ln doc.txt other.txt", in: backing)
        let (p, _) = try presentDocument("doc.txt", unsaved: true)
        try sh("echo beside > other.txt", in: backing)
        try assertOneConflict(p, base: "alpha\n", content: "beside\n")
    }

    /// Removing the other name, or renaming a file over it, leaves the document as it was: its
    /// presenter hears nothing and the store does nothing.
    func testRemovingOrReplacingTheOtherNameLeavesTheDocumentAlone() throws {
        try write("doc.txt", "alpha\n")
        try sh("ln doc.txt other.txt && ln doc.txt third.txt && cat other.txt third.txt > /dev/null")
        let (p, _) = try presentDocument("doc.txt")
        try sh("rm other.txt && echo new > new.txt && mv new.txt third.txt")
        XCTAssertEqual(p.waitForEvents(1, timeout: 1.5, settle: 0), [], "\(p.log)")
        XCTAssertFalse(p.log.contains("didChange"), "\(p.log)")
        XCTAssertEqual(backingText("doc.txt"), "alpha\n")
    }

    /// The document saved by a rename (a file of its own now), then linked under another name,
    /// and written through that name through the mount: the document's change (its presented name
    /// is looked at again once told of the save; it was looked at before, for another file).
    func testALinkToTheDocumentMadeAfterASaveByRenameIsTheDocument() throws {
        try write("doc.txt", "alpha\n")
        try write("x.txt", "x\n")
        try sh("ln x.txt y.txt", in: backing)
        let (p, _) = try presentDocument("doc.txt")
        // An open of another file with two names: the presented names looked at (doc.txt's file).
        try sh("cat x.txt > /dev/null")
        try sh("echo beta > doc.tmp && mv doc.tmp doc.txt")
        assertEvents(p, 1)
        try sh("ln doc.txt other.txt", in: backing)
        try sh("cat other.txt > /dev/null && echo gamma > other.txt")
        assertEvents(p, 2, "the write through the new name is the document's: ")
        XCTAssertEqual(p.log.filter { $0 == "didChange" }.count, 2, "\(p.log)")
        XCTAssertEqual(backingText("doc.txt"), "gamma\n")
    }

    /// With thousands of presenters, an open of a file with two names that nobody presents looks
    /// at the presented paths changed since the last such open, not at every one each time: with
    /// 10,000 presenters each such open took about 100 ms when it looked at all of them.
    func testOpensOfALinkedFileDoNotLookAtEveryPresentedPath() throws {
        try write("doc.txt", "alpha\n")
        try write("a.txt", "a\n")
        try sh("ln a.txt b.txt", in: backing)
        let (p, _) = try presentDocument("doc.txt")
        let many = (0..<2_000).map { RecordingPresenter(path: try! ItemPath("elsewhere/f\($0)"), behaviour: .init()) }
        for presenter in many { _ = try coordinator.addFilePresenter(presenter) }
        defer { for presenter in many { coordinator.removeFilePresenter(presenter) } }
        let fs = try XCTUnwrap(daemon.coordinated)
        try sh("cat a.txt > /dev/null") // the first look: every presenter registered since
        let before = fs.presentedPathLooks.load(ordering: .relaxed)
        try sh("for i in $(seq 50); do cat a.txt b.txt > /dev/null; done")
        let looks = fs.presentedPathLooks.load(ordering: .relaxed) - before
        XCTAssertLessThan(looks, 500, "100 opens looked at \(looks) presented paths (2,001 presented)")
        XCTAssertEqual(p.waitForEvents(1, timeout: 1, settle: 0), [], "the document heard nothing: \(p.log)")
    }

    /// `nobody` links root's world-writable presented document into a shared sticky folder (as
    /// fs.protected_hardlinks permits a file it may read and write) and writes through its link
    /// through the mount:
    /// root's presenter is asked and told, the store keeps root's base, the log records nobody.
    func testAnotherUsersHardLinkToAPresentedDocumentIsTheDocument() throws {
        chmod(root, 0o755)
        try FileManager.default.createDirectory(atPath: backing + "/shared", withIntermediateDirectories: false)
        chmod(backing + "/shared", 0o1777)
        try write("shared/doc.txt", "alpha\n")
        chmod(backing + "/shared/doc.txt", 0o666)
        let (p, _) = try presentDocument("shared/doc.txt", unsaved: true)
        try sh("\(Self.asNobody) ln doc.txt mine.txt", in: backing + "/shared")
        try sh("\(Self.asNobody) sh -c 'cat shared/doc.txt shared/mine.txt > /dev/null && echo nobody > shared/mine.txt'")
        try assertOneConflict(p, base: "alpha\n", content: "nobody\n", actor: 65534)
        XCTAssertTrue(p.log.contains("relinquishToWriter"), "asked before: \(p.log)")
    }
}
