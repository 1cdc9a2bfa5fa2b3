// Files that exist must open (issue 24): past the daemon's descriptor budget a node keeps only a
// kernel file handle, which does not pin its backing inode. When that file is deleted while the
// kernel still knows the node (here: held with O_PATH) and ext4 gives its inode number to a new
// item, the new item must get a node of its own: lstat, open, read, readlink and xattrs through
// the mount answer as the backing folder does. The daemon runs with RLIMIT_NOFILE 1,024 (a budget
// of 512 node descriptors), so a few hundred items fill it.
import Foundation
import Glibc
import XCTest

class InodeIdentityTests: MountTestCase {
    override var comparesTreesAtEnd: Bool { false }
    override var descriptorLimit: Int? { 1024 }
    override var mountsInSetUp: Bool { false }

    /// The backing folder is a fresh ext4 file system of one block group (a 32 MiB image on a loop
    /// device, unmounted by the fixture's teardown): ext4 gives a new item, a directory too, the
    /// lowest free inode number of its group, so the deleted file's number comes back at once. On
    /// a shared disk a directory may be placed in another group. Without loop devices the test's
    /// folder on /tmp is used when it is ext4.
    override func setUpWithError() throws {
        try super.setUpWithError()
        let image = fixture.root + "/backing.ext4"
        if let mkfs = Spawn.which("mkfs.ext4"), let mountTool = Spawn.which("mount"), target.isMount,
           FileManager.default.createFile(atPath: image, contents: nil), truncate(image, 32 << 20) == 0,
           Spawn.run(mkfs, ["-q", "-F", "-N", "2048", "-b", "4096", image]).status == 0,
           Spawn.run(mountTool, ["-o", "loop", image, fixture.backing]).status == 0 {
            chmod(fixture.backing, 0o755)
        }
        do {
            try fixture.mount(options: mountOptions, descriptorLimit: descriptorLimit)
        } catch {
            fixture.destroy()
            fixture = nil
            throw error
        }
    }

    /// Items looked up through the mount before the test's own: past the budget of 512.
    static let filler = 700
    /// New items made at most, waiting for ext4 to hand out the deleted file's number.
    static let attempts = 3000

    enum Kind: String { case file, symlink, device, directory }

    func testRegularFileTakingADeletedFilesNumber() throws { try reuse(as: .file) }
    func testSymlinkTakingADeletedFilesNumber() throws { try reuse(as: .symlink) }
    func testDeviceTakingADeletedFilesNumber() throws { try reuse(as: .device) }
    func testDirectoryTakingADeletedFilesNumber() throws { try reuse(as: .directory) }

    private func reuse(as kind: Kind) throws {
        try requireMount()
        guard let magic = Sys.filesystemType(backing.root), magic == 0xEF53 else {
            throw XCTSkip("the backing folder is not on ext4 (which reuses inode numbers at once); set COORDFS_TEST_TMPDIR to an ext4 folder")
        }
        XCTAssertEqual(fixture.daemonDescriptorLimit(), 1024, "the daemon must run with the lowered descriptor limit")
        // The fillers stay open (O_PATH) so that the kernel cannot forget them: a forgotten node
        // gives its descriptor back to the budget, and x could then take one at its next use, pin
        // its inode and keep its number from being reused (the scenario would not arise).
        let fillers = fill(mnt("fill"), count: Self.filler)
        defer { fillers.forEach { close($0) } }

        // x: a file the kernel keeps knowing (held with O_PATH) after it is deleted. Made with
        // mknod, never opened: a file opened with kernel passthrough stays registered (and its
        // inode in use) until the kernel forgets it.
        XCTAssertEqual(Sys.call { mknod(mnt("x"), S_IFREG | 0o644, 0) }, .success())
        let held = open(mnt("x"), Linux.O_PATH | O_NOFOLLOW)
        XCTAssertGreaterThanOrEqual(held, 0, "O_PATH open of x: \(errnoName(errno))")
        defer { if held >= 0 { close(held) } }
        let number = inodeNumber(backing("x"))
        XCTAssertEqual(Sys.call { unlink(mnt("x")) }, .success())

        // New items through the mount until one takes x's number.
        var name: String? = nil
        for i in 0..<Self.attempts {
            let candidate = "y\(i)"
            XCTAssertEqual(make(kind, mnt(candidate)), .success(), "making \(kind) \(candidate) through the mount")
            if inodeNumber(backing(candidate)) == number { name = candidate; break }
        }
        guard let y = name else {
            return XCTFail("ext4 did not give inode \(number ?? 0) to any of \(Self.attempts) new items")
        }

        // lstat, listxattr and setxattr answer as on the backing folder.
        let (m, mo) = Sys.lstat(mnt(y)), (b, bo) = Sys.lstat(backing(y))
        XCTAssertEqual(mo, bo, "lstat \(y)")
        if let m, let b { XCTAssertTrue(m.sameShape(as: b), "lstat \(y): mount \(m.shape), backing \(b.shape)") }
        XCTAssertEqual(m?.type, kind.type, "lstat \(y) through the mount")
        let (mx, mxo) = Sys.xattrs(mnt(y)), (bx, bxo) = Sys.xattrs(backing(y))
        XCTAssertEqual(mxo, bxo, "listxattr \(y)")
        XCTAssertEqual(mx, bx, "xattrs of \(y)")
        let value = Array("v".utf8)
        let set = Sys.setxattr(mnt(y), "user.identity", value)
        // user.* xattrs are for files and directories; symlinks and devices refuse them (EPERM).
        XCTAssertEqual(set, kind == .file || kind == .directory ? .success() : .failure(EPERM), "setxattr \(y) through the mount")
        if set.ok { XCTAssertEqual(Sys.getxattr(backing(y), "user.identity").0, value, "the xattr set through the mount is in backing") }

        switch kind {
        case .file:
            let o = Sys.open(mnt(y), O_RDWR | O_APPEND)
            XCTAssertTrue(o.ok, "open \(y) through the mount: \(o)")
            if o.ok {
                XCTAssertEqual(Sys.write(Int32(o.ret), Array("new".utf8)), .success(3), "append to \(y)")
                XCTAssertEqual(Sys.call { close(Int32(o.ret)) }, .success())
            }
            XCTAssertEqual(Sys.contents(mnt(y)).0, Array("new".utf8), "read \(y) through the mount")
            XCTAssertEqual(Sys.contents(backing(y)).0, Array("new".utf8), "\(y) in backing")
        case .symlink:
            XCTAssertEqual(Sys.readlink(mnt(y)).0, "target-\(y)", "readlink \(y) through the mount")
        case .device:
            let (d, _) = Sys.lstat(mnt(y))
            XCTAssertEqual(d?.rdev, UInt(makedev(1, 3)), "the device number of \(y)")
        case .directory:
            XCTAssertEqual(Sys.put(mnt(y + "/inside"), Array("in".utf8)), .success(), "create in \(y) through the mount")
            XCTAssertEqual(Sys.readdir(mnt(y)).0.map(\.name), ["inside"], "list \(y) through the mount")
            XCTAssertEqual(Sys.contents(backing(y + "/inside")).0, Array("in".utf8), "\(y)/inside in backing")
        }
        // And the whole tree, item by item, as `find` and `ls -lR` would see it.
        let diff = Tree.diff(Tree.snapshot(backing.root, skipTopLevel: [".coordfs"]), Tree.snapshot(mnt.root), labels: ("backing", "mount"))
        XCTAssertTrue(diff.isEmpty, "the mount differs from its backing folder:\n" + diff.joined(separator: "\n"))
    }

    /// `count` files made through the mount and held open with O_PATH (so the kernel keeps knowing
    /// them); returns the descriptors.
    func fill(_ dir: String, count: Int) -> [Int32] {
        XCTAssertEqual(Sys.call { mkdir(dir, 0o755) }, .success())
        var held: [Int32] = []
        for i in 0..<count {
            let put = Sys.put("\(dir)/f\(i)", [])
            if !put.ok { XCTFail("creating filler \(i) through the mount: \(put)"); return held }
            let fd = open("\(dir)/f\(i)", Linux.O_PATH | O_NOFOLLOW)
            if fd < 0 { XCTFail("O_PATH open of filler \(i): \(errnoName(errno))"); return held }
            held.append(fd)
        }
        return held
    }

    private func make(_ kind: Kind, _ path: String) -> Outcome {
        switch kind {
        case .file: return Sys.put(path, [])
        case .symlink: return Sys.call { symlink("target-" + (path as NSString).lastPathComponent, path) }
        case .device: return Sys.call { mknod(path, S_IFCHR | 0o600, makedev(1, 3)) }
        case .directory: return Sys.call { mkdir(path, 0o755) }
        }
    }

    private func inodeNumber(_ path: String) -> ino_t? {
        var st = stat()
        return lstat(path, &st) == 0 ? st.st_ino : nil
    }
}

extension InodeIdentityTests.Kind {
    var type: mode_t {
        switch self {
        case .file: return S_IFREG
        case .symlink: return S_IFLNK
        case .device: return S_IFCHR
        case .directory: return S_IFDIR
        }
    }
}

/// The same with every read and write through the daemon.
final class InodeIdentityTestsWithoutPassthrough: InodeIdentityTests {
    override var mountOptions: [String] {
        (try? MountTarget.fromEnvironment().isCoordFS) == true ? super.mountOptions + ["passthrough=off"] : super.mountOptions
    }

    // XCTest on Linux runs a subclass's inherited tests only when it declares them itself.
    override func testRegularFileTakingADeletedFilesNumber() throws { try super.testRegularFileTakingADeletedFilesNumber() }
    override func testSymlinkTakingADeletedFilesNumber() throws { try super.testSymlinkTakingADeletedFilesNumber() }
    override func testDeviceTakingADeletedFilesNumber() throws { try super.testDeviceTakingADeletedFilesNumber() }
    override func testDirectoryTakingADeletedFilesNumber() throws { try super.testDirectoryTakingADeletedFilesNumber() }
}
