import Foundation
import FuseKit
import Glibc
import Loopback
import SystemPackage
import XCTest

/// The Loopback's bounds on what other users' opens hold of the daemon's descriptors
/// (`OpenFileBounds`, `max_user_open_files`; docs/protocol.md, "Limits"), on a temp folder with the
/// request double: opens, creates, unnamed files and directory opens of a user other than root
/// and the owner are counted until their descriptor closes, refused with ENFILE beyond its bound
/// or the others' total (nothing made), and root's are not counted.
final class OpenFileBoundsTests: XCTestCase {
    private var root = ""
    private var loopback: Loopback!
    private let nobody = EmbeddedRequest(context: RequestContext(uid: 65534, gid: 65534, pid: getpid(), umask: 0o022))
    private let other = EmbeddedRequest(context: RequestContext(uid: 65533, gid: 65534, pid: getpid(), umask: 0o022))
    private let owner = EmbeddedRequest()

    override func setUpWithError() throws {
        var template = Array("/tmp/coordfs-openbounds-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw XCTSkip("mkdtemp: \(errno)") }
        root = String(cString: made)
        chmod(root, 0o777)
        XCTAssertTrue(FileManager.default.createFile(atPath: root + "/doc", contents: Data("x".utf8), attributes: [.posixPermissions: 0o666]))
        loopback = try Loopback(backingRoot: root, options: LoopbackOptions())
    }

    override func tearDownWithError() throws {
        loopback = nil
        try? FileManager.default.removeItem(atPath: root)
    }

    private func lookup(_ name: String) -> InodeID {
        name.withCString { loopback.lookup(owner.request(), parent: .root, name: FileName($0)) }
        return owner.replies.last?.entry?.inode ?? InodeID(rawValue: 0)
    }

    /// Opens `doc` as `probe`'s caller: the open's handle, or the errno.
    private func open(_ probe: EmbeddedRequest, _ inode: InodeID) -> Result<OpenReply, Errno> {
        loopback.open(probe.request(), inode: inode, file: FileInfo(flags: O_RDONLY))
        switch probe.replies.last! {
        case .open(let reply, _): return .success(reply)
        case .error(let e): return .failure(e ?? .ioError)
        default: return .failure(.ioError)
        }
    }

    private func release(_ probe: EmbeddedRequest, _ inode: InodeID, _ reply: OpenReply) {
        loopback.release(probe.request(), inode: inode, file: FileInfo(flags: O_RDONLY, handle: reply.handle))
    }

    func testAUsersOpensAreBoundedUntilTheirDescriptorsClose() throws {
        loopback.openFiles.configure(perUser: 3, others: 5)
        let doc = lookup("doc")
        var held: [OpenReply] = []
        for _ in 0..<3 { held.append(try open(nobody, doc).get()) }
        XCTAssertEqual(loopback.openFiles.held(by: 65534), 3)
        XCTAssertEqual(open(nobody, doc).map { _ in 0 }, .failure(.tooManyOpenFilesInSystem), "the user's fourth open")
        // A create and a directory open at the bound: refused, nothing made.
        "new".withCString { loopback.create(nobody.request(), parent: .root, name: FileName($0), mode: 0o644, file: FileInfo(flags: O_CREAT | O_WRONLY)) }
        XCTAssertEqual(nobody.replies.last?.errorCode, ENFILE)
        XCTAssertFalse(FileManager.default.fileExists(atPath: root + "/new"), "a refused create makes nothing")
        loopback.opendir(nobody.request(), inode: .root, file: FileInfo(flags: O_RDONLY))
        XCTAssertEqual(nobody.replies.last?.errorCode, ENFILE)
        XCTAssertEqual(loopback.openFiles.refusals, 3)

        // Another user: its own bound, within the others' total (5).
        let theirs = try open(other, doc).get()
        loopback.opendir(other.request(), inode: .root, file: FileInfo(flags: O_RDONLY))
        guard case .open(let dir, _) = other.replies.last! else { return XCTFail("opendir: \(other.replies.last!)") }
        XCTAssertEqual(loopback.openFiles.heldByOthers, 5)
        XCTAssertEqual(open(other, doc).map { _ in 0 }, .failure(.tooManyOpenFilesInSystem), "the others' total")
        // An unnamed file counts two: refused while one is free.
        loopback.releasedir(other.request(), inode: .root, file: FileInfo(flags: O_RDONLY, handle: dir.handle))
        loopback.tmpfile(other.request(), parent: .root, mode: 0o600, file: FileInfo(flags: O_RDWR | 0o20200000))
        XCTAssertEqual(other.replies.last?.errorCode, ENFILE)

        // Root and the owner are not counted.
        var mine: [OpenReply] = []
        for _ in 0..<10 { mine.append(try open(owner, doc).get()) }
        XCTAssertEqual(loopback.openFiles.heldByOthers, 4)
        for r in mine { release(owner, doc, r) }

        // Given back as the opens are released.
        release(nobody, doc, held.removeLast())
        release(other, doc, theirs)
        XCTAssertEqual(loopback.openFiles.heldByOthers, 2)
        XCTAssertEqual(loopback.openFiles.held(by: 65533), 0)
        "new".withCString { loopback.create(nobody.request(), parent: .root, name: FileName($0), mode: 0o644, file: FileInfo(flags: O_CREAT | O_WRONLY)) }
        guard case .create(let made, let created, _) = nobody.replies.last! else { return XCTFail("create: \(nobody.replies.last!)") }
        XCTAssertEqual(loopback.openFiles.held(by: 65534), 3)
        loopback.release(nobody.request(), inode: made.inode, file: FileInfo(flags: O_WRONLY, handle: created.handle))
        for r in held { release(nobody, doc, r) }
        XCTAssertEqual(loopback.openFiles.heldByOthers, 0)
        loopback.tmpfile(other.request(), parent: .root, mode: 0o600, file: FileInfo(flags: O_RDWR | 0o20200000))
        guard case .create(let unnamed, let open, _) = other.replies.last! else { return XCTFail("tmpfile: \(other.replies.last!)") }
        XCTAssertEqual(loopback.openFiles.held(by: 65533), 2, "an unnamed file: its open and its node")
        loopback.release(other.request(), inode: unnamed.inode, file: FileInfo(flags: O_RDWR, handle: open.handle))
        XCTAssertEqual(loopback.openFiles.heldByOthers, 0)
    }

    /// The others' total: three quarters of what the node budget leaves, at least 64 kept.
    func testTheOthersShareOfTheDescriptorLimit() {
        XCTAssertEqual(OpenFileBounds.pool(descriptorLimit: 512, nodeBudget: 256), 192)
        XCTAssertEqual(OpenFileBounds.pool(descriptorLimit: 1024, nodeBudget: 512), 384)
        XCTAssertEqual(OpenFileBounds.pool(descriptorLimit: 1_048_576, nodeBudget: 512), 786_048)
        XCTAssertEqual(OpenFileBounds.pool(descriptorLimit: 300, nodeBudget: 256), 0)
        XCTAssertEqual(OpenFileBounds.pool(descriptorLimit: 128, nodeBudget: 256), 0)
    }
}
