import Foundation
import Glibc
import XCTest
@testable import DocumentStore
import Linux

/// A store opened through descriptors its process holds (`/proc/self/fd/N`, as the daemon opens
/// it) goes on in its backing folder once that folder is renamed, checks paths against where the
/// folder is now, and never reads or writes another folder put at the old path.
final class HeldBackingStoreTests: XCTestCase {
    /// A backing folder `Docs` (its `doc.txt` reads "one") with a store opened on descriptors of it
    /// and of its `.coordfs` (as the daemon opens it), `doc.txt` registered by a presenter; `body`
    /// gets the store, the folder's path, the path it is to be renamed to, and the root descriptor.
    private func withHeldStore(_ body: (DocumentStore, _ old: String, _ new: String, _ rootFD: Int32) throws -> Void) throws {
        let parent = "/tmp/coordfs-store-tests/held-\(UInt64.random(in: 0...UInt64.max))"
        let old = parent + "/Docs", new = parent + "/Documents"
        try FileSystem.mkdirs(old + "/.coordfs")
        defer { _ = try? Shell.run("/bin/rm", ["-rf", parent]) }
        try Data("one\n".utf8).write(to: URL(fileURLWithPath: old + "/doc.txt"))
        let rootFD = open(old, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        let stateFD = open(old + "/.coordfs", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        XCTAssertGreaterThanOrEqual(rootFD, 0)
        XCTAssertGreaterThanOrEqual(stateFD, 0)
        defer { close(rootFD); close(stateFD) }
        let store = try DocumentStore(backingRoot: "/proc/self/fd/\(rootFD)", stateDirectory: "/proc/self/fd/\(stateFD)/store")
        _ = try store.register(StorePresenterID("alice"), path: "doc.txt")
        try body(store, old, new, rootFD)
    }

    func testAStoreOnHeldDescriptorsFollowsItsRenamedBackingFolderAndNeverTheOldPath() throws { try withHeldStore { store, old, new, _ in
        func put(_ path: String, _ text: String) throws { try Data(text.utf8).write(to: URL(fileURLWithPath: path)) }
        func text(_ path: String) -> String? { try? String(contentsOfFile: path, encoding: .utf8) }

        // `mv Docs Documents`, and another folder made at the old path.
        XCTAssertEqual(rename(old, new), 0)
        try FileSystem.mkdirs(old)
        try put(old + "/doc.txt", "impostor\n")
        XCTAssertEqual(symlink(old, new + "/away"), 0)                 // leads to the folder at the old path
        XCTAssertEqual(symlink(new + "/.coordfs", new + "/state"), 0)  // leads into the store

        // The version kept before a write is the moved folder's, and a restore writes there.
        let kept = try XCTUnwrap(try store.preserveBeforeInPlaceWrite("doc.txt"), "a version kept after the rename")
        XCTAssertEqual(String(decoding: try store.contents(of: kept.version.id), as: UTF8.self), "one\n")
        try put(new + "/doc.txt", "two\n")
        _ = try store.restore(kept.version.id, to: "doc.txt")
        XCTAssertEqual(text(new + "/doc.txt"), "one\n")
        // A conflict copy (keep both) lands beside the document where it is now.
        let copy = try store.writeConflictCopy(.bytes(Array("mine\n".utf8)), beside: "doc.txt")
        XCTAssertTrue(copy.hasPrefix(store.backingRoot + "/doc (conflict "), copy)
        XCTAssertEqual(text(copy), "mine\n")

        // Links are judged against where the folder is now.
        for bad in ["away/doc.txt", "state/store/metadata.sqlite"] {
            XCTAssertThrowsError(try store.preserveBeforeReplace(bad), bad) {
                guard case .invalidPath = $0 as? DocumentStoreError else { return XCTFail("\(bad): \($0)") }
            }
        }
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: old), ["doc.txt"], "nothing written at the old path")
        XCTAssertEqual(text(old + "/doc.txt"), "impostor\n")
    } }

    /// A store error names a file by where its folder is now, never by the held descriptor's
    /// `/proc/self/fd/N` path a person cannot act on.
    func testAStoreErrorNamesTheFolderWhereItIsNotTheHeldDescriptor() throws { try withHeldStore { store, old, new, rootFD in
        let kept = try XCTUnwrap(try store.preserveBeforeInPlaceWrite("doc.txt"))
        XCTAssertEqual(rename(old, new), 0)
        // The version's file goes missing (a disk error, a hand in the state folder).
        let objects = new + "/.coordfs/store/objects"
        for name in try FileManager.default.contentsOfDirectory(atPath: objects) { XCTAssertEqual(unlink(objects + "/" + name), 0) }
        XCTAssertThrowsError(try store.contents(of: kept.version.id)) {
            guard case let .system(_, path, code) = $0 as? DocumentStoreError else { return XCTFail("\($0)") }
            XCTAssertEqual(code, ENOENT)
            XCTAssertTrue(path.hasPrefix(objects + "/"), path)
            XCTAssertFalse("\($0)".contains("/proc/self/fd"), "\($0)")
        }
        // Unchanged: a path not through a held descriptor, and one whose number is no descriptor.
        XCTAssertEqual(HeldPath.shown("/proc/self/fdx/1/a"), "/proc/self/fdx/1/a")
        XCTAssertEqual(HeldPath.shown("/proc/self/fd/99999/a"), "/proc/self/fd/99999/a")
        XCTAssertEqual(HeldPath.shown("/proc/self/fd/\(rootFD)x/a"), "/proc/self/fd/\(rootFD)x/a")
        XCTAssertEqual(HeldPath.shown("/proc/self/fd/\(rootFD)"), new)
    } }
}
