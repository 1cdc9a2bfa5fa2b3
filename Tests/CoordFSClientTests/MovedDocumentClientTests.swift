import XCTest
import Foundation
import Glibc
import Synchronization
import ControlProtocol
import CoordFSClient
@testable import CoordFS

/// A client-library presenter with unsaved changes (`addFilePresenter(_:hasUnsavedChanges:)`)
/// whose document is moved through the mount and, at once, changed by another user: one
/// `presentedItemDidChangeUnderneath` with a conflict at the new path, resolvable there. And the
/// hostile side: a user who may not write the name a document was just renamed to cannot, by
/// trying, turn a save in progress into a move.
final class MovedDocumentClientTests: ClientMountTestCase {
    override func configure(_ options: inout MountOptions) {
        super.configure(&options)
        options.allowOther = true  // nobody works in the mount
        options.coordination.saveWindow = 3  // the steps below all happen inside it, however loaded the machine
    }

    private let nobody = "/usr/bin/setpriv --reuid=65534 --regid=65534 --clear-groups --"

    /// Records the store's events and the moves it is told.
    final class Editor: CoordFSClient.FilePresenter, @unchecked Sendable {
        let presentedItemPath: String?
        private let received = Mutex<(changes: [UnderlyingFileChange], moves: [String])>(([], []))
        init(_ path: String) { presentedItemPath = path }
        var changes: [UnderlyingFileChange] { received.withLock { $0.changes } }
        var moves: [String] { received.withLock { $0.moves } }
        func presentedItemDidChangeUnderneath(_ change: UnderlyingFileChange) async {
            received.withLock { $0.changes.append(change) }
        }
        func presentedItemDidMove(to newPath: String) async {
            received.withLock { $0.moves.append(newPath) }
        }
    }

    func testAnotherUsersChangeRightAfterAMoveIsAConflictAtTheNewPath() async throws {
        try writeBacking("doc.txt", "alpha\n", mode: 0o666)  // nobody may write it, not rename it
        let editor = Editor(mnt + "/doc.txt")
        try await FileCoordinator.addFilePresenter(editor, hasUnsavedChanges: true)
        let script = "mv doc.txt doc2.txt && \(nobody) sh -c 'echo theirs > doc2.txt'"
        XCTAssertEqual(try run(["/bin/sh", "-c", "cd '\(mnt!)' && \(script)"]).status, 0)
        XCTAssertTrue(eventually { !editor.changes.isEmpty }, "no documentChanged: moves \(editor.moves)")
        usleep(400_000)
        XCTAssertEqual(editor.changes.count, 1, "\(editor.changes)")
        let change = try XCTUnwrap(editor.changes.first)
        XCTAssertEqual(change.kind, .change)
        guard case .conflict(let id) = change.action else { return XCTFail("expected a conflict: \(change)") }
        XCTAssertTrue(eventually { editor.moves == [mnt + "/doc2.txt"] }, "\(editor.moves)")
        XCTAssertEqual(readBacking("doc2.txt"), "theirs\n")
        try await editor.resolve(id, with: .save, mine: .bytes(Array("mine\n".utf8)))
        XCTAssertEqual(readBacking("doc2.txt"), "mine\n", "resolved at the new path")
        XCTAssertEqual(readBacking("doc.txt"), "<missing>")
        await FileCoordinator.removeFilePresenter(editor)
    }

    /// Root renames its document to a backup name and writes the new one (a save); meanwhile nobody
    /// tries to write, touch, remove and rename the backup and is refused: the save stays a save.
    func testAUserWhoMayNotWriteTheNewNameCannotTurnASaveIntoAMove() async throws {
        try writeBacking("doc.txt", "alpha\n", mode: 0o644)
        let editor = Editor(mnt + "/doc.txt")
        try await FileCoordinator.addFilePresenter(editor, hasUnsavedChanges: true)
        let hostile = "echo x > doc.orig; touch doc.orig; truncate -s 0 doc.orig; rm -f doc.orig; mv doc.orig y; exit 0"
        let script = "mv doc.txt doc.orig && \(nobody) sh -c '\(hostile)' && printf 'new\\n' > doc.txt"
        XCTAssertEqual(try run(["/bin/sh", "-c", "cd '\(mnt!)' && \(script)"]).status, 0)
        XCTAssertTrue(eventually { !editor.changes.isEmpty }, "no documentChanged: moves \(editor.moves)")
        usleep(400_000)
        XCTAssertEqual(editor.changes.count, 1, "\(editor.changes)")
        guard case .conflict = editor.changes.first?.action else { return XCTFail("expected a conflict: \(editor.changes)") }
        XCTAssertEqual(editor.changes.first?.path, mnt + "/doc.txt")
        XCTAssertEqual(editor.moves, [], "the save stays a save")
        XCTAssertEqual(readBacking("doc.txt"), "new\n")
        XCTAssertEqual(readBacking("doc.orig"), "alpha\n", "nobody changed nothing")
        await FileCoordinator.removeFilePresenter(editor)
    }
}
