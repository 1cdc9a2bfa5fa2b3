import XCTest
import Glibc

/// The CLI used by another local user on a shared (`allow_other`) mount.
final class SharedMountCLITests: CLITestCase {
    /// nobody's `coordfs unmount` of root's mount is refused with whose mount it is (before,
    /// fusermount3's "entry for ... not found in /etc/mtab" came first), and the mount stays.
    func testAnotherUserCannotUnmountItAndIsToldWhoseItIs() throws {
        chmod(root, 0o755)
        try "kept\n".write(toFile: backing + "/doc.txt", atomically: false, encoding: .utf8)
        try mount(options: ["allow_other"])
        let refused = coordfs(as: 65534, "unmount", mnt)
        XCTAssertEqual(refused.status, 1, "\(refused)")
        XCTAssertTrue(refused.stderr.contains("mounted by uid 0"), "\(refused)")
        XCTAssertFalse(refused.stderr.contains("mtab"), "\(refused)")
        let lazily = coordfs(as: 65534, "unmount", "--lazy", mnt)
        XCTAssertEqual(lazily.status, 1, "\(lazily)")
        XCTAssertFalse(Self.mounts(under: root).isEmpty, "the mount went away")
        XCTAssertEqual(try String(contentsOfFile: mnt + "/doc.txt", encoding: .utf8), "kept\n")
        XCTAssertEqual(coordfs("unmount", mnt).status, 0)
        XCTAssertTrue(Self.mounts(under: root).isEmpty)
    }
}
