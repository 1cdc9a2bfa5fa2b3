import XCTest
import Foundation
import Glibc
@testable import CoordFS

/// A backing folder on overlayfs (a container's file system): its directories have no file handles
/// that can be opened again, so the watcher keys them by fanotify's identity handles
/// (`AT_HANDLE_FID`), and direct changes are seen as on any other file system.
final class OverlayBackingTests: InProcessMountTestCase {
    private var overlayMounted = false

    override func prepareBacking() throws {
        for d in ["lower", "upper", "work"] { mkdir(root + "/" + d, 0o755) }
        let data = "lowerdir=\(root!)/lower,upperdir=\(root!)/upper,workdir=\(root!)/work"
        guard mount("overlay", backing, "overlay", 0, data) == 0 else {
            throw XCTSkip("cannot mount an overlayfs here: \(String(cString: strerror(errno)))")
        }
        overlayMounted = true
    }

    override func cleanUpBacking() {
        if overlayMounted { umount2(backing, Int32(MNT_DETACH)) }
    }

    func testAChangeInAnOverlayBackingFolderIsToldAndVisibleAtOnce() throws {
        try write("doc.txt", "alpha\n")
        let p = try present("doc.txt")
        XCTAssertEqual(try catThenClear("doc.txt", presentedBy: p), "alpha\n")
        try sh("printf 'beta\\n' > doc.txt; mkdir sub", in: backing)
        XCTAssertEqual(p.waitUntil { $0.contains("didChange") }, ["didChange"], "told once, asked nothing")
        XCTAssertEqual(try sh("cat doc.txt").output, "beta\n", "no stale cache through the mount")
        XCTAssertEqual(try sh("ls").output, "doc.txt\nsub\n")
    }
}
