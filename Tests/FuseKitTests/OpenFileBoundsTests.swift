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

    /// Connections and other things counted in the share (`takeShare`) and opens draw from one
    /// total: a user's connections leave its own opens' bound alone but take from every other
    /// user's room, and root's are not counted.
    func testConnectionsAndOpensShareOneTotal() throws {
        loopback.openFiles.configure(perUser: 100, others: 6)
        let doc = lookup("doc")
        XCTAssertTrue(loopback.openFiles.takeShare(65534, units: 2), "a connection of nobody's")
        XCTAssertTrue(loopback.openFiles.takeShare(65533, units: 2), "one of another user's")
        XCTAssertTrue(loopback.openFiles.takeShare(0, units: 2), "root's: not counted")
        XCTAssertEqual(loopback.openFiles.shareHeld, 4)
        XCTAssertEqual(loopback.openFiles.held(by: 65534), 0, "connections are not opens")
        let first = try open(nobody, doc).get()
        XCTAssertFalse(loopback.openFiles.takeShare(65532, units: 2), "a third user's connection: one descriptor left")
        XCTAssertEqual(loopback.openFiles.shareRefusals, 1)
        let second = try open(other, doc).get()
        XCTAssertEqual(open(nobody, doc).map { _ in 0 }, .failure(.tooManyOpenFilesInSystem), "the share is taken, far below nobody's own bound")
        XCTAssertEqual(loopback.openFiles.heldByOthers, 2, "opens")
        XCTAssertEqual(loopback.openFiles.shareHeld, 6, "opens and connections")
        // Root is served all along.
        release(owner, doc, try open(owner, doc).get())

        loopback.openFiles.giveShare(65533, units: 2)
        XCTAssertTrue(loopback.openFiles.takeShare(65532, units: 2), "given back: the third user's connection")
        loopback.openFiles.giveShare(65532, units: 2)
        loopback.openFiles.giveShare(65534, units: 2)
        loopback.openFiles.giveShare(0, units: 2)
        release(nobody, doc, first)
        release(other, doc, second)
        XCTAssertEqual(loopback.openFiles.shareHeld, 0)
    }

    /// How the descriptors are cut from one limit: half for nodes (at least 256), a 16th (16 to
    /// 512) for each of the two callers' names tables, and of the rest three quarters for users
    /// other than root and the owner (at least 64 kept).
    func testTheSharesOfTheDescriptorLimit() {
        func shares(_ limit: Int) -> [Int] {
            let s = DescriptorShares(limit: limit)
            XCTAssertEqual(s.nodes + 2 * s.callerNames + s.others + s.kept, max(limit, s.nodes + 2 * s.callerNames), "\(limit): the parts add up")
            return [s.nodes, s.callerNames, s.others, s.kept]
        }
        XCTAssertEqual(shares(512), [256, 32, 128, 64])
        XCTAssertEqual(shares(1024), [512, 64, 288, 96])
        XCTAssertEqual(shares(2048), [1024, 128, 576, 192])
        XCTAssertEqual(shares(4096), [2048, 256, 1152, 384])
        XCTAssertEqual(shares(20_000), [10_000, 512, 6732, 2244])
        XCTAssertEqual(shares(1_048_576), [524_288, 512, 392_448, 130_816])
        XCTAssertEqual(shares(300), [256, 18, 0, 8])
        XCTAssertEqual(shares(128)[2], 0)
        // What the Loopback cuts when it is given none: the limit in force.
        var r = rlimit()
        XCTAssertEqual(getrlimit(Int32(RLIMIT_NOFILE.rawValue), &r), 0)
        XCTAssertEqual(loopback.descriptors, DescriptorShares(limit: Int(min(r.rlim_cur, 1 << 30))))
        XCTAssertEqual(loopback.nodeDescriptorBudget, loopback.descriptors.nodes)
    }
}
