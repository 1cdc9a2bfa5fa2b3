import XCTest
import Coordination
import FuseKit
@testable import CoordFS

/// Unnamed files (open(2) of a folder with O_TMPFILE) through the coordinated mount: nobody hears
/// of one never linked; linked in, it is a new file of its linker's (its folder's presenters told
/// once it outlives save_window); linked under a temp name and renamed over a presented document,
/// it is one save.
final class TmpfileCoordinationTests: InProcessMountTestCase {
    /// Python helpers: `tmp(folder, data)` makes and writes an unnamed file, `name(fd, path)` links
    /// it in by /proc/self/fd with AT_SYMLINK_FOLLOW, `name_empty(fd, path)` by AT_EMPTY_PATH.
    private let helpers = """
    import os, ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    def tmp(d, data):
        fd = os.open(d, os.O_TMPFILE | os.O_RDWR, 0o644); os.write(fd, data); return fd
    def name(fd, path):
        if libc.linkat(-100, b'/proc/self/fd/%d' % fd, -100, path.encode(), 0x400) != 0: raise OSError(ctypes.get_errno(), path)
    def name_empty(fd, path):
        if libc.linkat(fd, b'', -100, path.encode(), 0x1000) != 0: raise OSError(ctypes.get_errno(), path)

    """

    private func python(_ script: String, file: StaticString = #filePath, line: UInt = #line) throws {
        let path = root + "/script.py"
        try (helpers + script).write(toFile: path, atomically: false, encoding: .utf8)
        try sh("python3 '\(path)'", file: file, line: line)
    }

    /// What a presenter heard, without the asks around accesses.
    private func told(_ presenter: RecordingPresenter) -> [String] {
        presenter.log.filter { !$0.hasPrefix("relinquish") && $0 != "reacquire" && $0 != "save" }
    }

    func testAnUnnamedFileLinkedAsATempNameThenRenamedOverADocumentIsOneSave() throws {
        try write("doc.txt", "alpha\n")
        let p = try present("doc.txt")
        try python("""
        fd = tmp('.', b'beta\\n'); os.fsync(fd)
        name(fd, 'doc.txt.tmp'); os.close(fd)
        os.replace('doc.txt.tmp', 'doc.txt')
        """)
        try assertOneSave(p)
        XCTAssertEqual(try String(contentsOfFile: backing + "/doc.txt", encoding: .utf8), "beta\n")
        XCTAssertFalse(FileManager.default.fileExists(atPath: backing + "/doc.txt.tmp"))
    }

    /// The unnamed file linked under a name of no temp pattern (AT_EMPTY_PATH), then renamed over
    /// the document by its linker within save_window: the document's save, and its folder's
    /// presenter hears of the document only.
    func testAnUnnamedFileOfAnyNameRenamedOverADocumentIsOneSaveAndNoNewFile() throws {
        try FileManager.default.createDirectory(atPath: backing + "/notes", withIntermediateDirectories: true)
        try write("notes/doc.txt", "alpha\n")
        let p = try present("notes/doc.txt")
        let dir = try present("notes")
        try python("""
        fd = tmp('notes', b'gamma\\n')
        name_empty(fd, 'notes/doc.txt.saving'); os.close(fd)
        os.replace('notes/doc.txt.saving', 'notes/doc.txt')
        """)
        try assertOneSave(p)
        let log = dir.waitUntil(settle: 0.8) { $0.contains("subitemDidChange notes/doc.txt") }
        XCTAssertEqual(told(dir), ["subitemDidChange notes/doc.txt"], "\(log)")
        XCTAssertEqual(try String(contentsOfFile: backing + "/notes/doc.txt", encoding: .utf8), "gamma\n")
    }

    func testAnUnnamedFileNeverLinkedTellsNoOneAndLeavesNothing() throws {
        try FileManager.default.createDirectory(atPath: backing + "/notes", withIntermediateDirectories: true)
        try write("notes/doc.txt", "alpha\n")
        let dir = try present("notes")
        let doc = try present("notes/doc.txt")
        try python("""
        fd = tmp('notes', b'x' * 200000); os.fsync(fd); os.close(fd)
        fd = tmp('notes', b'y'); os.close(fd)
        """)
        usleep(1_000_000) // past save_window (0.4 s) and the backing watcher's reports
        XCTAssertEqual(dir.log, [], "the folder's presenter is neither asked nor told")
        XCTAssertEqual(doc.log, [], "nor is a document's")
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: backing + "/notes"), ["doc.txt"])
    }

    func testAnUnnamedFileLinkedInAppearsToItsFolderOnce() throws {
        try FileManager.default.createDirectory(atPath: backing + "/notes", withIntermediateDirectories: true)
        let dir = try present("notes")
        try python("""
        fd = tmp('notes', b'new\\n'); name(fd, 'notes/new.txt'); os.close(fd)
        """)
        let log = dir.waitUntil(settle: 0.5) { $0.contains("subitemDidAppear notes/new.txt") }
        XCTAssertEqual(told(dir), ["subitemDidAppear notes/new.txt"], "\(log)")
        XCTAssertTrue(log.contains("relinquishToWriter"), "the folder's presenter is asked before the name is made: \(log)")
        XCTAssertEqual(try String(contentsOfFile: backing + "/notes/new.txt", encoding: .utf8), "new\n")
        // Then a normal file: an open that writes it is coordinated and told.
        let p = try present("notes/new.txt")
        try sh("echo again > notes/new.txt")
        let after = p.waitUntil(settle: 0.5) { $0.contains("didChange") }
        XCTAssertEqual(after.filter { $0 == "didChange" }.count, 1, "\(after)")
    }

    private func descriptorCount() -> Int {
        (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd"))?.count ?? -1
    }

    /// The daemon serves this test process: its descriptors are /proc/self/fd, its nodes the
    /// Loopback's table.
    func testTenThousandUnnamedFilesLeaveNoNodesOrDescriptorsBehind() throws {
        try FileManager.default.createDirectory(atPath: backing + "/notes", withIntermediateDirectories: true)
        let dir = try present("notes")
        _ = try sh("ls notes >/dev/null")
        let nodes = daemon.loopback.inodeCount, fds = descriptorCount()
        try python("""
        for i in range(10000):
            fd = tmp('notes', b'%d' % i); os.close(fd)
        """)
        var nodesAfter = daemon.loopback.inodeCount, fdsAfter = descriptorCount()
        let deadline = Date().addingTimeInterval(5)
        while (nodesAfter > nodes || fdsAfter > fds + 4) && Date() < deadline {
            usleep(50_000)
            nodesAfter = daemon.loopback.inodeCount; fdsAfter = descriptorCount()
        }
        XCTAssertEqual(nodesAfter, nodes, "every unnamed file's node is forgotten")
        XCTAssertLessThanOrEqual(fdsAfter, fds + 4, "descriptors: \(fds) before, \(fdsAfter) after")
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: backing + "/notes"), [])
        XCTAssertEqual(told(dir), [], "nobody is told of unnamed files")
        XCTAssertEqual(daemon.requestCounters?.value(.tmpfile), 10_000, "each one a FUSE_TMPFILE")
    }
}

