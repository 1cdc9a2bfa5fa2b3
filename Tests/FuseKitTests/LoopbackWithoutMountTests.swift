import Foundation
import FuseKit
import Glibc
import Loopback
import SystemPackage
import XCTest

/// The Loopback's logic on a temp folder, its requests given by the request double: no /dev/fuse,
/// no mount, milliseconds.
final class LoopbackWithoutMountTests: XCTestCase {
    private var root = ""
    private var loopback: Loopback!
    private let probe = EmbeddedRequest()

    override func setUpWithError() throws {
        var template = Array("/tmp/coordfs-loopback-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw XCTSkip("mkdtemp: \(errno)") }
        root = String(cString: made)
        var options = LoopbackOptions()
        options.hiddenRootNames = [".coordfs"]
        loopback = try Loopback(backingRoot: root, options: options)
    }

    override func tearDownWithError() throws {
        loopback = nil
        try? FileManager.default.removeItem(atPath: root)
    }

    /// The last reply, as the kernel would have got it.
    private var last: Reply { probe.replies.last! }

    private func lookup(_ name: String, in parent: InodeID = .root) -> EntryReply? {
        name.withCString { loopback.lookup(probe.request(), parent: parent, name: FileName($0)) }
        return last.entry
    }

    func testLookupCreateUnlinkRoundTripOnATempFolder() throws {
        XCTAssertEqual(lookup("a")?.inode, InodeID(rawValue: 0), "missing: a negative entry, not an error")

        "a".withCString { loopback.create(probe.request(), parent: .root, name: FileName($0), mode: 0o640, file: FileInfo(flags: O_CREAT | O_RDWR)) }
        guard case .create(let created, let open, let flags) = last else { return XCTFail("create replied \(last)") }
        XCTAssertEqual(flags, O_CREAT | O_RDWR)
        XCTAssertNotEqual(created.inode, InodeID(rawValue: 0))
        XCTAssertEqual(created.attributes.st_mode & 0o7777, 0o640 & ~0o022, "the caller's umask applies")
        var st = stat()
        XCTAssertEqual(lstat(root + "/a", &st), 0, "the file is in the backing folder")
        XCTAssertEqual(st.st_ino, created.attributes.st_ino)

        // Written in the backing folder, read back through the handle the create gave.
        XCTAssertTrue(FileManager.default.createFile(atPath: root + "/b", contents: nil))
        let fd = Glibc.open(root + "/a", O_WRONLY)
        XCTAssertEqual(write(fd, "hello", 5), 5)
        close(fd)
        loopback.read(probe.request(), inode: created.inode, size: 64, offset: 1, file: FileInfo(flags: O_RDWR, handle: open.handle))
        guard case .buffer(let bytes) = last else { return XCTFail("read replied \(last)") }
        XCTAssertEqual(String(decoding: bytes, as: UTF8.self), "ello")
        loopback.release(probe.request(), inode: created.inode, file: FileInfo(flags: O_RDWR, handle: open.handle))
        XCTAssertEqual(last.errorCode, 0)

        let found = try XCTUnwrap(lookup("a"))
        XCTAssertEqual(found.inode, created.inode, "one node per backing item")
        XCTAssertEqual(found.attributes.st_size, 5)

        "a".withCString { loopback.unlink(probe.request(), parent: .root, name: FileName($0)) }
        XCTAssertEqual(last.errorCode, 0)
        XCTAssertNotEqual(lstat(root + "/a", &st), 0, "gone from the backing folder")
        XCTAssertEqual(lookup("a")?.inode, InodeID(rawValue: 0))
        loopback.forget(created.inode, count: 2) // the create's lookup and the second one
        XCTAssertEqual(probe.replies.count, 7, "every request answered once")
    }

    /// FUSE_TMPFILE: an unnamed file in the backing folder, answered as a create (nlink 0), its node
    /// forgotten with its one lookup; linked in, a file of the backing folder; O_EXCL never linked.
    func testAnUnnamedFileIsMadeLinkedAndForgotten() throws {
        let nodes = loopback.inodeCount
        loopback.tmpfile(probe.request(), parent: .root, mode: 0o600, file: FileInfo(flags: O_RDWR | 0o20200000))
        guard case .create(let made, let open, _) = last else { return XCTFail("tmpfile replied \(last)") }
        XCTAssertEqual(made.attributes.st_nlink, 0, "unnamed")
        XCTAssertEqual(made.attributes.st_mode & 0o7777, 0o600)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: root), [], "nothing named in the backing folder")
        XCTAssertEqual(Glibc.write(loopback.openFile(FileInfo(flags: O_RDWR, handle: open.handle)).fd, "unnamed", 7), 7)
        "named".withCString { loopback.link(probe.request(), inode: made.inode, newParent: .root, newName: FileName($0)) }
        XCTAssertEqual(last.entry?.attributes.st_nlink, 1, "linked in: \(last)")
        XCTAssertEqual(try String(contentsOfFile: root + "/named", encoding: .utf8), "unnamed")
        loopback.release(probe.request(), inode: made.inode, file: FileInfo(flags: O_RDWR, handle: open.handle))
        loopback.forget(made.inode, count: 2)
        XCTAssertEqual(loopback.inodeCount, nodes, "forgotten with the kernel's two lookups (the tmpfile's and the link's)")

        loopback.tmpfile(probe.request(), parent: .root, mode: 0o600, file: FileInfo(flags: O_WRONLY | O_EXCL | 0o20200000))
        guard case .create(let excl, let exclOpen, _) = last else { return XCTFail("tmpfile replied \(last)") }
        "never".withCString { loopback.link(probe.request(), inode: excl.inode, newParent: .root, newName: FileName($0)) }
        XCTAssertEqual(last.errorCode, ENOENT, "O_EXCL: never linked")
        loopback.release(probe.request(), inode: excl.inode, file: FileInfo(flags: O_WRONLY, handle: exclOpen.handle))
        loopback.forget(excl.inode, count: 1)
        XCTAssertEqual(loopback.inodeCount, nodes)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: root), ["named"])
    }

    func testErrorsAreRepliedAsTheBackingFolderGivesThem() throws {
        "gone".withCString { loopback.unlink(probe.request(), parent: .root, name: FileName($0)) }
        XCTAssertEqual(last.errorCode, ENOENT)
        "d".withCString { loopback.mkdir(probe.request(), parent: .root, name: FileName($0), mode: 0o755) }
        let d = try XCTUnwrap(last.entry)
        "d".withCString { loopback.mkdir(probe.request(), parent: .root, name: FileName($0), mode: 0o755) }
        XCTAssertEqual(last.errorCode, EEXIST)
        "f".withCString { loopback.create(probe.request(), parent: d.inode, name: FileName($0), mode: 0o644, file: FileInfo(flags: O_CREAT | O_WRONLY)) }
        guard case .create(let f, let open, _) = last else { return XCTFail("create replied \(last)") }
        loopback.release(probe.request(), inode: f.inode, file: FileInfo(flags: O_WRONLY, handle: open.handle))
        "d".withCString { loopback.rmdir(probe.request(), parent: .root, name: FileName($0)) }
        XCTAssertEqual(last.errorCode, ENOTEMPTY)
        "f".withCString { loopback.rmdir(probe.request(), parent: d.inode, name: FileName($0)) }
        XCTAssertEqual(last.errorCode, ENOTDIR)
        "f".withCString { n in "g".withCString { loopback.rename(probe.request(), parent: d.inode, name: FileName(n), newParent: .root, newName: FileName($0), flags: 0) } }
        XCTAssertEqual(last.errorCode, 0)
        XCTAssertEqual(access(root + "/g", F_OK), 0, "renamed in the backing folder")
        // The state folder's name: not found, and nothing can be made there.
        XCTAssertEqual(lookup(".coordfs")?.inode, InodeID(rawValue: 0))
        ".coordfs".withCString { loopback.mkdir(probe.request(), parent: .root, name: FileName($0), mode: 0o755) }
        XCTAssertEqual(last.errorCode, EPERM)
        XCTAssertNotEqual(access(root + "/.coordfs", F_OK), 0)
    }
}
