// The inode table's identity rule and descriptor budget, without a mount (issue 24): a node that
// keeps only its file handle is handed out for a lookup only while its handle names the item; a
// node whose file is gone answers ENOENT and is kept aside until forgotten; directories beyond the
// budget keep only handles too and still resolve names; descriptors go back when nodes are forgotten.
import Foundation
import FuseKit
import Glibc
import SystemPackage
import XCTest
@testable import Loopback
import LinuxGNU

final class InodeTableTests: XCTestCase {
    private var root = ""
    private var rootFD: Int32 = -1

    override func setUpWithError() throws {
        guard geteuid() == 0 else { throw XCTSkip("open_by_handle_at needs CAP_DAC_READ_SEARCH (root)") }
        var template = Array("/tmp/coordfs-inodetable-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw XCTSkip("mkdtemp: \(errno)") }
        root = String(cString: made)
        rootFD = open(root, LinuxCalls.O_PATH | O_DIRECTORY | O_CLOEXEC)
        XCTAssertGreaterThanOrEqual(rootFD, 0)
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: root)
    }

    /// A table whose budget holds `budget` node descriptors.
    private func table(budget: Int) -> InodeTable {
        var st = stat()
        XCTAssertEqual(fstat(rootFD, &st), 0)
        return InodeTable(rootFD: rootFD, rootStat: st, budget: DescriptorBudget(limit: budget))
    }

    /// One kernel lookup of `name` under `parent`, as Loopback.lookupEntry does it.
    private func lookup(_ t: InodeTable, _ name: String, in parent: BackingNode? = nil) -> BackingNode? {
        let p = parent ?? t.root
        let opened = p.withDescriptor { openat($0, name, LinuxCalls.O_PATH | O_NOFOLLOW | O_CLOEXEC) }
        guard case .success(let fd) = opened, fd >= 0 else { return nil }
        var st = stat()
        guard fstatat(fd, "", &st, LinuxCalls.AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) == 0 else { close(fd); return nil }
        return t.remember(fd: fd, stat: st, parent: p)
    }

    private func inodeNumber(_ name: String) -> ino_t {
        var st = stat()
        XCTAssertEqual(lstat(root + "/" + name, &st), 0, name)
        return st.st_ino
    }

    func testANodeWhoseFileIsGoneIsNotHandedOutForTheItemThatTookItsNumber() throws {
        let t = table(budget: 0)
        XCTAssertTrue(FileManager.default.createFile(atPath: root + "/x", contents: Data("old".utf8)))
        let old = try XCTUnwrap(lookup(t, "x"))
        XCTAssertFalse(old.holdsDescriptor, "a budget of 0: the node keeps only its handle")
        XCTAssertTrue(lookup(t, "x") === old, "a second lookup of the same file finds its node")
        let number = inodeNumber("x")
        XCTAssertEqual(unlink(root + "/x"), 0)
        var taken: String? = nil
        for i in 0..<3000 {
            XCTAssertTrue(FileManager.default.createFile(atPath: root + "/y\(i)", contents: Data("new".utf8)))
            if inodeNumber("y\(i)") == number { taken = "y\(i)"; break }
        }
        guard let y = taken else { throw XCTSkip("the file system did not give inode \(number) again (not ext4?)") }
        let fresh = try XCTUnwrap(lookup(t, y))
        XCTAssertFalse(fresh === old, "\(y) took x's number but is another file: it needs a node of its own")
        XCTAssertEqual(old.withFD { _ in nil }, .noSuchFileOrDirectory, "x's node answers ENOENT, with no call on a bad descriptor")
        var size = stat()
        XCTAssertNil(fresh.withFD { fd in fstatat(fd, "", &size, LinuxCalls.AT_EMPTY_PATH) == 0 ? nil : Errno(rawValue: errno) })
        XCTAssertEqual(size.st_size, 3, "the new node is \(y)")
        XCTAssertEqual(t.count, 2, "x's node is kept aside while the kernel knows it")
        XCTAssertTrue(t.forget(old, count: 2), "forgetting x's node removes it")
        XCTAssertEqual(t.count, 1)
        XCTAssertTrue(lookup(t, y) === fresh, "\(y) keeps its node")
    }

    func testDirectoriesBeyondTheBudgetKeepOnlyHandlesAndStillResolveNames() throws {
        let t = table(budget: 2)
        var dirs: [BackingNode] = []
        for i in 0..<6 {
            XCTAssertEqual(mkdir(root + "/d\(i)", 0o755), 0)
            XCTAssertTrue(FileManager.default.createFile(atPath: root + "/d\(i)/f", contents: Data("\(i)".utf8)))
            dirs.append(try XCTUnwrap(lookup(t, "d\(i)")))
        }
        XCTAssertEqual(dirs.filter(\.holdsDescriptor).count, 2, "two directories within the budget hold descriptors")
        XCTAssertEqual(t.descriptorsInUse, 2)
        for (i, d) in dirs.enumerated() {
            let f = try XCTUnwrap(lookup(t, "f", in: d), "f in d\(i)")
            var st = stat()
            XCTAssertNil(f.withFD { fd in fstatat(fd, "", &st, LinuxCalls.AT_EMPTY_PATH) == 0 ? nil : Errno(rawValue: errno) })
            XCTAssertEqual(st.st_size, 1, "d\(i)/f")
            t.forget(f, count: 1)
        }
        // The kernel forgets the first two: their descriptors go back, and a directory that kept
        // only its handle takes one at its next use.
        XCTAssertTrue(t.forget(dirs[0], count: 1))
        XCTAssertTrue(t.forget(dirs[1], count: 1))
        dirs.removeFirst(2)
        XCTAssertEqual(t.descriptorsInUse, 0, "forgotten nodes give their descriptors back")
        XCTAssertNil(dirs[0].withFD { _ in nil })
        XCTAssertTrue(dirs[0].holdsDescriptor, "a node past the budget takes a descriptor once there is room")
        XCTAssertEqual(t.descriptorsInUse, 1)
        // A directory whose file is gone answers ENOENT.
        XCTAssertEqual(unlink(root + "/d5/f"), 0)
        XCTAssertEqual(rmdir(root + "/d5"), 0)
        XCTAssertFalse(dirs[3].holdsDescriptor)
        XCTAssertEqual(dirs[3].withFD { _ in nil }, .noSuchFileOrDirectory)
    }

    /// The regular files the kernel holds, for FUSE over io_uring's pulls: only regular files (no
    /// folder, symlink or fifo), only while looked up and not forgotten, at most as many as asked.
    func testRegularFilesAreTheFilesTheKernelStillHolds() throws {
        let t = table(budget: 16)
        XCTAssertEqual(mkdir(root + "/d", 0o755), 0)
        XCTAssertEqual(symlink("d", root + "/l"), 0)
        XCTAssertEqual(mkfifo(root + "/p", 0o644), 0)
        XCTAssertTrue(t.regularFiles(limit: 4).isEmpty, "nothing looked up")
        let folder = try XCTUnwrap(lookup(t, "d"))
        _ = try XCTUnwrap(lookup(t, "l"))
        _ = try XCTUnwrap(lookup(t, "p"))
        XCTAssertTrue(t.regularFiles(limit: 4).isEmpty, "a folder, a symlink and a fifo are no regular files")
        for name in ["a", "b", "c"] {
            XCTAssertTrue(FileManager.default.createFile(atPath: root + "/d/" + name, contents: Data("x".utf8)))
        }
        let a = try XCTUnwrap(lookup(t, "a", in: folder))
        let b = try XCTUnwrap(lookup(t, "b", in: folder))
        XCTAssertTrue(lookup(t, "b", in: folder) === b)
        XCTAssertEqual(Set(t.regularFiles(limit: 4).map(ObjectIdentifier.init)), [ObjectIdentifier(a), ObjectIdentifier(b)])
        XCTAssertEqual(t.regularFiles(limit: 1).count, 1, "no more than asked")
        t.forget(a, count: 1)
        t.forget(b, count: 1)
        XCTAssertTrue(t.regularFiles(limit: 4).map(ObjectIdentifier.init) == [ObjectIdentifier(b)], "a forgotten file is not held; b still once")
        t.forget(b, count: 1)
        XCTAssertTrue(t.regularFiles(limit: 4).isEmpty)
    }
}
