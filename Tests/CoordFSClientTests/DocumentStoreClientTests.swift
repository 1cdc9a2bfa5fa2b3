import XCTest
import Foundation
import Glibc
import TestSupport
import Synchronization
import ControlProtocol
import CoordFSClient
@testable import CoordFS

/// The document store through the control protocol and the client library, on a real mount: a
/// presenter with unsaved changes, an unmodified tool saving underneath it, one
/// `presentedItemDidChangeUnderneath` with a conflict, and every resolution over the protocol.
final class DocumentStoreClientTests: ClientMountTestCase {
    /// A client-library presenter that records the "underlying file changed" events it gets.
    final class Editor: CoordFSClient.FilePresenter, @unchecked Sendable {
        let presentedItemPath: String?
        private let received = Mutex<[UnderlyingFileChange]>([])
        init(_ path: String) { presentedItemPath = path }
        var changes: [UnderlyingFileChange] { received.withLock { $0 } }
        func presentedItemDidChangeUnderneath(_ change: UnderlyingFileChange) async {
            received.withLock { $0.append(change) }
        }
    }

    private let base = "first\nmiddle\nlast\n"
    private let theirs = "first\nmiddle\nlast theirs\n"
    private let mine = "first mine\nmiddle\nlast\n"

    /// Adds an editor for `name` (in the mount) with unsaved changes, said at registration or after it.
    private func editor(_ name: String, unsaved: Bool = true, atRegistration: Bool = true) async throws -> Editor {
        let editor = Editor(mnt + "/" + name)
        try await FileCoordinator.addFilePresenter(editor, hasUnsavedChanges: unsaved && atRegistration)
        if unsaved && !atRegistration { try await editor.setHasUnsavedChanges(true) }
        return editor
    }

    /// Waits for the editor's first event, then makes sure no second one follows.
    private func onlyChange(of editor: Editor, file: StaticString = #filePath, line: UInt = #line) -> UnderlyingFileChange? {
        XCTAssertTrue(eventually { !editor.changes.isEmpty }, "no documentChanged for \(editor.presentedItemPath!)", file: file, line: line)
        usleep(400_000)
        XCTAssertEqual(editor.changes.count, 1, "one event per save: \(editor.changes)", file: file, line: line)
        return editor.changes.first
    }

    private func conflictID(_ change: UnderlyingFileChange?, file: StaticString = #filePath, line: UInt = #line) throws -> ControlProtocol.ConflictID {
        guard case .conflict(let id)? = change?.action else {
            XCTFail("expected a conflict: \(String(describing: change))", file: file, line: line)
            throw XCTSkip("no conflict")
        }
        return id
    }

    private func code(of body: () async throws -> Void) async -> ErrorCode? {
        do {
            try await body()
            return nil
        } catch let error as CoordFSClientError {
            return error.code
        } catch {
            return nil
        }
    }

    private func cleanUp(_ editors: [Editor]) async {
        for editor in editors { await FileCoordinator.removeFilePresenter(editor) }
    }

    func testEveryResolutionOfAChangeMadeByAnUnmodifiedTool() async throws {
        let names = ["close", "save", "reload", "keep", "merge"]
        for name in names { try writeBacking("\(name).txt", base) }
        var editors: [Editor] = []
        for (index, name) in names.enumerated() { editors.append(try await editor("\(name).txt", atRegistration: index % 2 == 0)) }
        for name in names {
            let sed = try run(["sed", "-i", "s/^last$/last theirs/", mnt + "/\(name).txt"])
            XCTAssertEqual(sed.status, 0, sed.output)
        }
        var conflicts: [String: ControlProtocol.ConflictID] = [:]
        for (name, editor) in zip(names, editors) {
            let change = onlyChange(of: editor)
            XCTAssertEqual(change?.kind, .change)
            XCTAssertEqual(change?.path, mnt + "/\(name).txt")
            XCTAssertNotNil(change?.before)
            XCTAssertNotNil(change?.after)
            XCTAssertNotEqual(change?.before, change?.after, "sed -i replaced the file")
            let id = try conflictID(change)
            conflicts[name] = id
            let listed = try await editor.conflicts()
            XCTAssertEqual(listed.map(\.id), [id])
            XCTAssertEqual(listed.first?.path, mnt + "/\(name).txt")
            XCTAssertNotNil(listed.first?.baseVersion, "the base was kept")
        }

        // close: the file stays theirs, the conflict is gone.
        let closed = try await editors[0].resolve(conflicts["close"]!, with: .close)
        XCTAssertEqual(closed.resolution, .close)
        XCTAssertEqual(readBacking("close.txt"), theirs)
        let remaining = try await editors[0].conflicts()
        XCTAssertTrue(remaining.isEmpty)
        // save: mine over theirs; theirs is kept as a version, readable over the protocol.
        let saved = try await editors[1].resolve(conflicts["save"]!, with: .save, mine: .bytes(Array(mine.utf8)))
        XCTAssertEqual(readBacking("save.txt"), mine)
        XCTAssertEqual(saved.writtenPath, mnt + "/save.txt")
        let preserved = try XCTUnwrap(saved.preservedVersion)
        let keptTheirs = try await FileCoordinator.contents(ofVersion: preserved, ofItemAt: mnt + "/save.txt")
        XCTAssertEqual(String(decoding: keptTheirs, as: UTF8.self), theirs)
        // reload: theirs, nothing written.
        let reloaded = try await editors[2].resolve(conflicts["reload"]!, with: .reload)
        XCTAssertNil(reloaded.writtenPath)
        XCTAssertEqual(readBacking("reload.txt"), theirs)
        // keep both, with mine in a file outside the mount (read by the library, sent as bytes).
        let mineOutside = root + "/mine.txt"
        try mine.write(toFile: mineOutside, atomically: false, encoding: .utf8)
        let kept = try await editors[3].resolve(conflicts["keep"]!, with: .keepBoth, mine: .file(mineOutside))
        XCTAssertEqual(readBacking("keep.txt"), theirs)
        let copy = try XCTUnwrap(kept.writtenPath)
        XCTAssertTrue(copy.hasPrefix(mnt + "/keep (conflict "), copy)
        XCTAssertEqual(readBacking(String(copy.dropFirst(mnt.count + 1))), mine)
        // merge with the base, mine in a file inside the mount (named to the daemon, which reads it).
        try writeBacking("mine-merge.txt", mine)
        let merged = try await editors[4].resolve(conflicts["merge"]!, with: .merge, mine: .file(mnt + "/mine-merge.txt"))
        XCTAssertEqual(merged.mergeConflicts, 0)
        XCTAssertEqual(readBacking("merge.txt"), "first mine\nmiddle\nlast theirs\n", "a clean three-way merge")

        for editor in editors {
            let open = try await editor.conflicts()
            XCTAssertTrue(open.isEmpty, "\(editor.presentedItemPath!): \(open)")
        }
        // The versions of a document, over the protocol: its base is one of them.
        let versions = try await FileCoordinator.versions(ofItemAt: mnt + "/merge.txt")
        XCTAssertFalse(versions.isEmpty)
        var bases: [String] = []
        for version in versions {
            bases.append(String(decoding: try await FileCoordinator.contents(ofVersion: version.version, ofItemAt: mnt + "/merge.txt"), as: UTF8.self))
        }
        XCTAssertTrue(bases.contains(base), "\(versions) \(bases)")
        await cleanUp(editors)
    }

    func testAnOverlappingMergeIsMarkedAndBinaryIsRefused() async throws {
        try writeBacking("doc.txt", base)
        let editor = try await editor("doc.txt")
        XCTAssertEqual(try run(["sed", "-i", "s/^middle$/middle theirs/", mnt + "/doc.txt"]).status, 0)
        let id = try conflictID(onlyChange(of: editor))
        let binary = await code { try await editor.resolve(id, with: .merge, mine: .bytes([0x66, 0, 0x0A])) }
        XCTAssertEqual(binary, .binaryContents)
        let stillOpen = try await editor.conflicts()
        XCTAssertEqual(stillOpen.map(\.id), [id], "a refused resolution changes nothing")
        let merged = try await editor.resolve(id, with: .merge, mine: .bytes(Array("first\nmiddle mine\nlast\n".utf8)))
        XCTAssertEqual(merged.mergeConflicts, 1)
        let text = readBacking("doc.txt")
        XCTAssertTrue(text.contains("<<<<<<< mine\nmiddle mine\n=======\nmiddle theirs\n>>>>>>> theirs\n"), text)
        await cleanUp([editor])
    }

    func testADeletionUnderUnsavedChangesRefusesReloadAndSaveRestores() async throws {
        try writeBacking("gone.txt", base)
        let editor = try await editor("gone.txt", atRegistration: false)
        XCTAssertEqual(try run(["rm", mnt + "/gone.txt"]).status, 0)
        let change = onlyChange(of: editor)
        XCTAssertEqual(change?.kind, .deletion)
        XCTAssertNotNil(change?.before)
        XCTAssertNil(change?.after)
        let id = try conflictID(change)
        do {
            try await editor.resolve(id, with: .reload)
            XCTFail("reload of a deletion was accepted")
        } catch let error as CoordFSClientError {
            XCTAssertEqual(error.code, .notApplicable)
            XCTAssertTrue(error.description.contains("cannot reload") && error.description.contains("deleted"), error.description)
        }
        let merge = await code { try await editor.resolve(id, with: .merge, mine: .bytes(Array(self.mine.utf8))) }
        XCTAssertEqual(merge, .notApplicable)
        let stillOpen = try await editor.conflicts()
        XCTAssertEqual(stillOpen.map(\.id), [id])
        XCTAssertEqual(stillOpen.first?.kind, .deletion)
        XCTAssertEqual(readBacking("gone.txt"), "<missing>", "a refusal writes nothing")
        try await editor.resolve(id, with: .save, mine: .bytes(Array(mine.utf8)))
        XCTAssertEqual(readBacking("gone.txt"), mine, "save restores the deleted file")
        let afterSave = try await editor.conflicts()
        XCTAssertTrue(afterSave.isEmpty)
        await cleanUp([editor])
    }

    func testWithoutUnsavedChangesTheDefaultActionsApply() async throws {
        try writeBacking("changed.txt", base)
        try writeBacking("deleted.txt", base)
        let changed = try await editor("changed.txt", unsaved: false)
        let deleted = try await editor("deleted.txt", unsaved: false)
        XCTAssertEqual(try run(["sed", "-i", "s/first/1st/", mnt + "/changed.txt"]).status, 0)
        XCTAssertEqual(try run(["rm", mnt + "/deleted.txt"]).status, 0)
        XCTAssertEqual(onlyChange(of: changed)?.action, .reload)
        XCTAssertEqual(onlyChange(of: deleted)?.action, .close)
        let none = try await changed.conflicts()
        XCTAssertTrue(none.isEmpty)
        // Unsaved again, then cleared: still a reload.
        try await changed.setHasUnsavedChanges(true)
        try await changed.setHasUnsavedChanges(false)
        XCTAssertEqual(try run(["sed", "-i", "s/middle/mid/", mnt + "/changed.txt"]).status, 0)
        XCTAssertTrue(eventually { changed.changes.count == 2 })
        XCTAssertEqual(changed.changes.last?.action, .reload)
        // The closed presenter has no document any more: its flag cannot be set.
        let closed = await code { try await deleted.setHasUnsavedChanges(true) }
        XCTAssertEqual(closed, .notADocument)
        await cleanUp([changed, deleted])
    }

    /// A presenter that records, in order, the asks it gets (with the file as it was then) and what it is told.
    final class Witness: CoordFSClient.FilePresenter, @unchecked Sendable {
        let presentedItemPath: String?
        let backingFile: String
        private let seen = Mutex<[String]>([])
        init(_ path: String, backing: String) { presentedItemPath = path; backingFile = backing }
        var log: [String] { seen.withLock { $0 } }
        func relinquishPresentedItemToWriter() async -> Reacquirer? {
            let now = (try? String(contentsOfFile: backingFile, encoding: .utf8)) ?? "?"
            seen.withLock { $0.append("asked while \(now.debugDescription)") }
            return nil
        }
        func presentedItemDidChange() async { seen.withLock { $0.append("told didChange") } }
        func presentedItemDidChangeUnderneath(_ change: UnderlyingFileChange) async {
            seen.withLock { $0.append("told \(change.action.name)") }
        }
    }

    /// Issue 18 item 5: a restore is a request to the daemon (the only writer of its store), a
    /// coordinated write whose presenters are asked first and told after, and undoable.
    func testARestoreOverTheSocketIsACoordinatedUndoableWrite() async throws {
        try writeBacking("doc.txt", "one\n")
        try writeBacking("other.txt", "other\n")
        let witness = Witness(mnt + "/doc.txt", backing: backing + "/doc.txt")
        try await FileCoordinator.addFilePresenter(witness)
        XCTAssertEqual(try run(["sh", "-c", "echo two > '\(mnt!)/doc.txt'"]).status, 0)
        XCTAssertTrue(eventually { witness.log.contains("told reload") }, witness.log.description)
        let kept = try await FileCoordinator.versions(ofItemAt: mnt + "/doc.txt")
        var one: ControlProtocol.VersionID?
        for v in kept where try await FileCoordinator.contents(ofVersion: v.version, ofItemAt: mnt + "/doc.txt") == Array("one\n".utf8) { one = v.version }
        let version = try XCTUnwrap(one, "the version \"one\" is kept: \(kept)")
        let before = witness.log.count

        let result = try await FileCoordinator.restore(version, toItemAt: mnt + "/doc.txt")
        XCTAssertEqual(readBacking("doc.txt"), "one\n")
        XCTAssertEqual(result.path, mnt + "/doc.txt")
        XCTAssertEqual(result.version, version)
        XCTAssertTrue(eventually { witness.log.count >= before + 3 }, witness.log.description)
        let during = Array(witness.log.dropFirst(before))
        XCTAssertEqual(during.first, "asked while \"two\\n\"", "asked first, before anything was written: \(during)")
        XCTAssertEqual(Set(during.dropFirst()), ["told didChange", "told reload"], "told after: \(during)")
        // The replaced contents are a version, itself restorable (undo).
        let preserved = try XCTUnwrap(result.preservedVersion)
        let replaced = try await FileCoordinator.contents(ofVersion: preserved, ofItemAt: mnt + "/doc.txt")
        XCTAssertEqual(replaced, Array("two\n".utf8))
        let undo = try await FileCoordinator.restore(preserved, toItemAt: mnt + "/doc.txt")
        XCTAssertEqual(readBacking("doc.txt"), "two\n")
        XCTAssertNotNil(undo.preservedVersion)

        // Clear errors, and nothing written: an unknown version, and a version of another document.
        let unknown = await code { try await FileCoordinator.restore(ControlProtocol.VersionID(4242), toItemAt: self.mnt + "/doc.txt") }
        XCTAssertEqual(unknown, .unknownVersion)
        let elsewhere = await code { try await FileCoordinator.restore(version, toItemAt: self.mnt + "/other.txt") }
        XCTAssertEqual(elsewhere, .unknownVersion)
        XCTAssertEqual(readBacking("other.txt"), "other\n")
        XCTAssertEqual(readBacking("doc.txt"), "two\n")
        await FileCoordinator.removeFilePresenter(witness)
    }

    func testRefusalsOverTheRawProtocolChangeNothing() throws {
        try writeBacking("doc.txt", base)
        mkdir(backing + "/folder", 0o755)
        let client = try RawClient(socket: socketPath)
        XCTAssertTrue(client.hello())
        func code(_ message: ControlMessage?) -> ErrorCode? {
            if case .error(let error) = message { return error.code }
            return nil
        }
        let doc = try MountPath(validating: "doc.txt"), folder = try MountPath(validating: "folder")
        XCTAssertEqual(code(client.request { .setUnsavedChanges(SetUnsavedChanges(id: $0, presenter: PresenterID(999), unsaved: true)) }), .unknownPresenter)
        XCTAssertEqual(code(client.request { .register(Register(id: $0, path: folder, kind: .directory, unsaved: true)) }), .notADocument)
        XCTAssertEqual(code(client.request { .register(Register(id: $0, path: try! MountPath(validating: "new.txt"), kind: .file, unsaved: true)) }), .notADocument)
        XCTAssertEqual(presenterCount, 0, "a refused registration leaves nothing registered")
        XCTAssertEqual(code(client.request { .resolve(Resolve(id: $0, conflict: ControlProtocol.ConflictID(4242), resolution: .close)) }), .unknownConflict)
        XCTAssertEqual(code(client.request { .readVersion(ReadVersion(id: $0, version: ControlProtocol.VersionID(4242))) }), .unknownVersion)
        guard case .versionList(let empty) = client.request({ .versions(VersionsQuery(id: $0, path: doc)) }) else { return XCTFail("versions") }
        XCTAssertTrue(empty.versions.isEmpty, "nothing kept for a file nobody presents")

        guard case .registered(let registered) = client.request({ .register(Register(id: $0, path: doc, kind: .file, asks: [], unsaved: true)) }) else {
            return XCTFail("register")
        }
        XCTAssertEqual(try run(["sh", "-c", "echo theirs > '\(mnt!)/doc.txt'"]).status, 0)
        var conflict: ControlProtocol.ConflictID?
        while conflict == nil, let message = client.receive() {
            if case .notification(let n) = message, n.presenter == registered.presenter, case .documentChanged(let change) = n.event,
               case .conflict(let id) = change.action {
                conflict = id
            }
        }
        let id = try XCTUnwrap(conflict)
        XCTAssertEqual(code(client.request { .resolve(Resolve(id: $0, conflict: id, resolution: .save)) }), .invalidValue, "save needs mine")
        XCTAssertEqual(code(client.request { .resolve(Resolve(id: $0, conflict: id, resolution: .save, mine: .path(try! MountPath(validating: "absent.txt")))) }), .notFound)
        XCTAssertEqual(code(client.request { .resolve(Resolve(id: $0, conflict: id, resolution: .save, mine: .path(folder))) }), .invalidValue)
        XCTAssertEqual(readBacking("doc.txt"), "theirs\n", "nothing written")
        guard case .resolved(let resolved) = client.request({ .resolve(Resolve(id: $0, conflict: id, resolution: .reload)) }) else {
            return XCTFail("reload")
        }
        XCTAssertEqual(resolved.path, doc)
        XCTAssertEqual(code(client.request { .resolve(Resolve(id: $0, conflict: id, resolution: .close)) }), .alreadyResolved)
    }
}

/// What another user may do: nobody's connection may not resolve root's conflicts, and may not
/// make the daemon write (or read) what it could not itself.
final class DocumentStorePermissionTests: ClientMountTestCase {
    override func configure(_ options: inout MountOptions) {
        super.configure(&options)
        options.allowOther = true  // nobody connects to the socket
    }

    private let nobody = (uid: uid_t(65534), gid: gid_t(65534))

    /// A protocol client in Python run as nobody: each step sends a request (`$conflict` and
    /// `$presenter` stand for what it learned) and prints the reply, or waits for a documentChanged.
    private static let script = pythonClientPrelude + #"""
    known = {"conflict": int(sys.argv[3]) if len(sys.argv) > 3 else 0, "presenter": 0}
    def fill(v):
        if isinstance(v, dict): return {k: fill(x) for k, x in v.items()}
        if isinstance(v, str) and v.startswith("$"): return known[v[1:]]
        return v
    pending = []
    def reply_to(i):
        while True:
            m = receive()
            if m.get("id") == i and m["type"] not in ("ask", "notification"): return m
            if m["type"] == "ask": send({"type": "answer", "id": m["id"]})
            if m["type"] == "notification": pending.append(m)
    send({"type": "hello", "id": 1, "versions": [1]}); reply_to(1)
    for n, step in enumerate(json.loads(sys.argv[2])):
        if step == "wait":
            # The store's documentChanged; the coordinator's didChange may come before or after it.
            while True:
                while not pending:
                    m = receive()
                    if m["type"] == "ask": send({"type": "answer", "id": m["id"]})
                    elif m["type"] == "notification": pending.append(m)
                m = pending.pop(0)
                if m.get("event") == "documentChanged": break
            if m.get("action") == "conflict": known["conflict"] = m["conflict"]
            print(json.dumps(m), flush=True)
            continue
        step["id"] = 10 + n
        send(fill(step))
        r = reply_to(10 + n)
        if r["type"] == "registered": known["presenter"] = r["presenter"]
        print(json.dumps(r), flush=True)
    """#

    private func python(_ steps: String, conflict: UInt64? = nil, after: ((Child) throws -> Void)? = nil) throws -> [[String: Any]] {
        let path = root + "/client.py"
        try Self.script.write(toFile: path, atomically: false, encoding: .utf8)
        chmod(path, 0o644)
        var arguments = ["/usr/bin/python3", path, socketPath, steps]
        if let conflict { arguments.append(String(conflict)) }
        let child = try start(arguments, user: nobody)
        try after?(child)
        XCTAssertEqual(wait(child, timeout: 30), 0, child.text)
        return child.lines.compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
    }

    func testAnotherUsersConnectionMayNotResolveOrListAConflict() async throws {
        try writeBacking("doc.txt", "a\n", mode: 0o666)
        let editor = DocumentStoreClientTests.Editor(mnt + "/doc.txt")
        try await FileCoordinator.addFilePresenter(editor, hasUnsavedChanges: true)
        XCTAssertEqual(try run(["sed", "-i", "s/a/b/", mnt + "/doc.txt"]).status, 0)
        XCTAssertTrue(eventually { !editor.changes.isEmpty })
        guard case .conflict(let id)? = editor.changes.first?.action else { return XCTFail("no conflict: \(editor.changes)") }
        let replies = try python(#"""
            [{"type":"conflicts"},
             {"type":"resolve","conflict":"$conflict","resolution":"close"},
             {"type":"resolve","conflict":"$conflict","resolution":"save","mine":"bWluZQo="}]
            """#, conflict: id.rawValue)
        XCTAssertEqual(replies.count, 3, "\(replies)")
        XCTAssertEqual((replies.first?["conflicts"] as? [Any])?.count, 0, "nobody sees only its own user's conflicts, not root's: \(replies)")
        XCTAssertEqual(replies.dropFirst().map { $0["code"] as? String }, ["permissionDenied", "permissionDenied"], "\(replies)")
        XCTAssertEqual(readBacking("doc.txt"), "b\n")
        let open = try await editor.conflicts()
        XCTAssertEqual(open.map(\.id), [id], "still open, still the editor's")
        try await editor.resolve(id, with: .save, mine: .bytes(Array("mine\n".utf8)))
        XCTAssertEqual(readBacking("doc.txt"), "mine\n")
        await FileCoordinator.removeFilePresenter(editor)
    }

    /// Issue 17 case 10: the conflict copy a keep-both resolution creates for nobody belongs to nobody.
    func testAKeepBothCopyBelongsToTheUserWhoResolved() throws {
        mkdir(backing + "/shared", 0o777)
        chmod(backing + "/shared", 0o777)
        try writeBacking("shared/doc.txt", "base\n", mode: 0o666)
        let replies = try python(#"""
            [{"type":"register","path":"shared/doc.txt","kind":"file","asks":[],"unsaved":true},
             "wait",
             {"type":"resolve","conflict":"$conflict","resolution":"keepBoth","mine":"bWluZQo="}]
            """#) { child in
            XCTAssertTrue(self.eventually { child.text.contains("\"registered\"") }, child.text)
            XCTAssertEqual(try self.run(["sh", "-c", "echo theirs > '\(self.mnt!)/shared/doc.txt'"]).status, 0)
        }
        XCTAssertEqual(replies.map { ($0["type"] as? String) ?? "" }, ["registered", "notification", "resolved"], "\(replies)")
        guard let written = replies.last?["writtenPath"] as? String else { return XCTFail("nothing written: \(replies)") }
        XCTAssertTrue(written.hasPrefix("shared/doc (conflict "), written)
        var st = stat()
        XCTAssertEqual(lstat(backing + "/" + written, &st), 0)
        XCTAssertEqual(st.st_uid, nobody.uid, "the copy is nobody's, as if nobody had made it")
        XCTAssertEqual(st.st_gid, nobody.gid)
        XCTAssertEqual(readBacking(written), "mine\n")
        XCTAssertEqual(lstat(backing + "/shared/doc.txt", &st), 0)
        XCTAssertEqual(st.st_uid, 0, "the document written over keeps its owner")
    }

    /// removeVersions (Foundation's removeOtherVersionsOfItem) needs the permission to replace the
    /// document: nobody, who may read root's 0644 document but not write it, cannot drop its versions.
    func testRemovingVersionsIsRefusedToAUserWhoCouldNotWriteTheDocument() async throws {
        try writeBacking("doc.txt", "one\n", mode: 0o644)
        let editor = DocumentStoreClientTests.Editor(mnt + "/doc.txt")
        try await FileCoordinator.addFilePresenter(editor)
        XCTAssertEqual(try run(["/bin/sh", "-c", "echo two > '\(mnt!)/doc.txt'"]).status, 0)
        XCTAssertTrue(eventually { !editor.changes.isEmpty })
        await FileCoordinator.removeFilePresenter(editor)
        let store = try XCTUnwrap(daemon.store).documentStore
        let before = try store.versions(ofPath: "doc.txt")
        XCTAssertFalse(before.isEmpty)
        let replies = try python(#"[{"type":"versions","path":"doc.txt"},{"type":"removeVersions","path":"doc.txt"}]"#)
        XCTAssertEqual(replies.map { ($0["type"] as? String) ?? "" }, ["versionList", "error"], "\(replies)")
        XCTAssertEqual(replies.last?["code"] as? String, "permissionDenied", "\(replies)")
        XCTAssertEqual(try store.versions(ofPath: "doc.txt").map(\.id), before.map(\.id), "nothing removed")
    }

    /// A restore acts with the caller's credentials: nobody may not restore a document it could not
    /// write (nor learn of versions of one it may not see); in a folder it may write, a deleted
    /// document it restores is re-created as its own.
    func testARestoreIsRefusedToAUserWhoCouldNotWriteTheDocument() async throws {
        try writeBacking("secret.txt", "root only\n", mode: 0o600)
        mkdir(backing + "/shared", 0o777)
        chmod(backing + "/shared", 0o777)
        try writeBacking("shared/doc.txt", "one\n", mode: 0o666)
        let editors = [DocumentStoreClientTests.Editor(mnt + "/secret.txt"), DocumentStoreClientTests.Editor(mnt + "/shared/doc.txt")]
        for editor in editors { try await FileCoordinator.addFilePresenter(editor) }
        XCTAssertEqual(try run(["sh", "-c", "echo changed > '\(mnt!)/secret.txt'; echo two > '\(mnt!)/shared/doc.txt'"]).status, 0)
        for editor in editors { XCTAssertTrue(eventually { !editor.changes.isEmpty }) }
        let secret = try await FileCoordinator.versions(ofItemAt: mnt + "/secret.txt")
        let shared = try await FileCoordinator.versions(ofItemAt: mnt + "/shared/doc.txt")
        let secretVersion = try XCTUnwrap(secret.first?.version.rawValue), sharedVersion = try XCTUnwrap(shared.last?.version.rawValue)
        for editor in editors { await FileCoordinator.removeFilePresenter(editor) }
        XCTAssertEqual(unlink(backing + "/shared/doc.txt"), 0)
        let replies = try python("""
            [{"type":"restore","version":\(secretVersion),"path":"secret.txt"},
             {"type":"restore","version":\(secretVersion),"path":"shared/doc.txt"},
             {"type":"restore","version":\(sharedVersion),"path":"shared/doc.txt"}]
            """)
        XCTAssertEqual(replies.map { ($0["type"] as? String) ?? "" }, ["error", "error", "restored"], "\(replies)")
        guard replies.count == 3 else { return }
        XCTAssertEqual(replies[0]["code"] as? String, "permissionDenied", "nobody may not write secret.txt")
        XCTAssertEqual(replies[1]["code"] as? String, "unknownVersion", "a version of a document nobody may not see is unknown to it")
        XCTAssertEqual(readBacking("secret.txt"), "changed\n", "nothing written")
        XCTAssertEqual(readBacking("shared/doc.txt"), "one\n", "the deleted document is re-created")
        var st = stat()
        XCTAssertEqual(lstat(backing + "/shared/doc.txt", &st), 0)
        XCTAssertEqual(st.st_uid, nobody.uid, "re-created for nobody, it is nobody's")
    }

    func testTheDaemonNeverWritesOrReadsForAPeerWhatThePeerCouldNot() throws {
        try writeBacking("readonly.txt", "base\n", mode: 0o644)   // nobody reads, cannot write
        try writeBacking("secret.txt", "root only\n", mode: 0o600)
        try writeBacking("public-mine.txt", "mine\n", mode: 0o644)
        let replies = try python(#"""
            [{"type":"register","path":"readonly.txt","kind":"file","asks":[],"unsaved":true},
             "wait",
             {"type":"conflicts","presenter":"$presenter"},
             {"type":"resolve","conflict":"$conflict","resolution":"save","mine":"bWluZQo="},
             {"type":"resolve","conflict":"$conflict","resolution":"merge","minePath":"public-mine.txt"},
             {"type":"resolve","conflict":"$conflict","resolution":"keepBoth","minePath":"secret.txt"},
             {"type":"versions","path":"secret.txt"},
             {"type":"resolve","conflict":"$conflict","resolution":"reload"}]
            """#) { child in
            XCTAssertTrue(self.eventually { child.text.contains("\"registered\"") }, child.text)
            // Root changes the file underneath nobody's presenter.
            XCTAssertEqual(try self.run(["sh", "-c", "echo theirs > '\(self.mnt!)/readonly.txt'"]).status, 0)
        }
        XCTAssertEqual(replies.map { ($0["type"] as? String) ?? "" },
                       ["registered", "notification", "conflictList", "error", "error", "error", "error", "resolved"], "\(replies)")
        guard replies.count == 8 else { return }
        XCTAssertEqual(replies[1]["event"] as? String, "documentChanged")
        XCTAssertEqual(replies[1]["action"] as? String, "conflict")
        XCTAssertEqual((replies[2]["conflicts"] as? [Any])?.count, 1)
        XCTAssertEqual(replies[3]["code"] as? String, "permissionDenied", "save would write a file nobody may not write")
        XCTAssertEqual(replies[4]["code"] as? String, "permissionDenied", "merge too")
        XCTAssertEqual(replies[5]["code"] as? String, "permissionDenied", "keep both in a folder nobody may not write")
        XCTAssertEqual(replies[6]["code"] as? String, "permissionDenied", "versions of a file nobody may not read")
        XCTAssertEqual(readBacking("readonly.txt"), "theirs\n")
        XCTAssertFalse(try FileManager.default.contentsOfDirectory(atPath: backing).contains { $0.contains("conflict") })
    }
}
