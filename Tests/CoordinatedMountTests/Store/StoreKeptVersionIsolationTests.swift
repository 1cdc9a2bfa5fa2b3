import XCTest
import Foundation
import Glibc
@testable import CoordFS
import Coordination
import DocumentStore

/// A kept version never shares its inode with a live file: the base a user would restore or merge
/// from stays as it was when the old inode lives on after the save (a backup name, a descriptor
/// still open for writing) and is written, through the mount or by another program directly in the
/// backing folder.
final class StoreKeptVersionIsolationTests: StoreMountTestCase {
    private func assertBaseIntact(_ conflict: Conflict, _ base: String, file: StaticString = #filePath, line: UInt = #line) throws {
        let version = try XCTUnwrap(conflict.baseVersion, "the conflict knows its base", file: file, line: line)
        XCTAssertEqual(String(decoding: try store.contents(of: version), as: UTF8.self), base, "the kept base", file: file, line: line)
        XCTAssertNotEqual(try store.version(version).method, .link, file: file, line: line)
        var st = stat()
        XCTAssertEqual(lstat(try store.storedFile(of: version), &st), 0, file: file, line: line)
        XCTAssertEqual(st.st_nlink, 1, "the kept file has no other name", file: file, line: line)
    }

    func testABackupRenameSaveKeepsABaseThatWritesToTheBackupDoNotChange() throws {
        try write("doc.txt", "a\nb\nc\n")
        let (p, _) = try presentDocument("doc.txt", unsaved: true)
        // Backup-rename save through the mount: the old inode lives on as doc.txt~.
        try sh("mv doc.txt doc.txt~ && printf 'a\\nb\\nC\\n' > doc.txt")
        let conflict = try conflict(of: p.waitForEvents(1, settle: 0.8))
        try assertBaseIntact(conflict, "a\nb\nc\n")
        // Another program on the host truncates and writes the backup in the backing folder, then
        // a process appends to it through the mount.
        try sh("printf 'scribbled\\n' > doc.txt~", in: backing)
        try sh("printf 'more\\n' >> doc.txt~")
        XCTAssertEqual(backingText("doc.txt~"), "scribbled\nmore\n")
        try assertBaseIntact(conflict, "a\nb\nc\n")
        // The merge still has the base the presenter loaded.
        let merged = try service.resolve(conflict.id, with: .merge, mine: .bytes(Array("A\nb\nc\n".utf8)), by: "test")
        XCTAssertEqual(merged.mergeConflicts, 0)
        XCTAssertEqual(try read("doc.txt"), "A\nb\nC\n")
    }

    func testAFileRenamedOverWhileOpenForWritingKeepsABaseThatLateWritesDoNotChange() throws {
        try write("doc.txt", "a\nb\nc\n")
        // A process opens the document for writing through the mount (before anyone presents it)
        // and writes through that descriptor once told to: by then the file was renamed over, so
        // its write goes in place to the old inode.
        let go = root + "/go-late-writer", ready = root + "/ready-late-writer"
        let writer = Process()
        writer.executableURL = URL(fileURLWithPath: "/bin/sh")
        writer.arguments = ["-c", "exec 3<>doc.txt; : > '\(ready)'; while [ ! -e '\(go)' ]; do sleep 0.02; done; printf 'late write\\n' >&3"]
        writer.currentDirectoryURL = URL(fileURLWithPath: mnt)
        try writer.run()
        defer { if writer.isRunning { writer.terminate() }; writer.waitUntilExit() }
        let deadline = Date().addingTimeInterval(10)
        while access(ready, F_OK) != 0 && Date() < deadline && writer.isRunning { usleep(10_000) }
        XCTAssertEqual(access(ready, F_OK), 0, "the writer opened the document")

        let (p, _) = try presentDocument("doc.txt", unsaved: true)
        try sh("printf 'a\\nb\\nC\\n' > doc.txt.tmp && mv doc.txt.tmp doc.txt")
        let conflict = try conflict(of: p.waitForEvents(1, settle: 0.8))
        try assertBaseIntact(conflict, "a\nb\nc\n")
        FileManager.default.createFile(atPath: go, contents: nil)
        writer.waitUntilExit()
        XCTAssertEqual(writer.terminationStatus, 0)
        try assertBaseIntact(conflict, "a\nb\nc\n")
        XCTAssertEqual(try read("doc.txt"), "a\nb\nC\n")
    }
}
