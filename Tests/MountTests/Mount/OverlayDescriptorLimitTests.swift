import Foundation
import Glibc
import TestSupport
import XCTest

/// A backing folder on overlayfs (a container's file system, without `nfs_export`): its items have
/// no file handles to open again by, so a node the kernel knows holds a descriptor on its item for
/// as long as the kernel knows it, whatever the node budget. Such nodes stop short of the numbers
/// the daemon keeps for its own files (`DescriptorReserve`), as opens do: a lookup that would take
/// one fails with ENFILE and the daemon lives (before, root's lookups took every descriptor, lookups
/// then failed with EMFILE, and libdispatch, unable to open /proc/TID/stat, could end the daemon).
/// Lookups work again once the kernel forgets the nodes.
final class OverlayDescriptorLimitTests: MountTestCase {
    override var descriptorLimit: Int? { 128 }
    override var mountsInSetUp: Bool { false }
    override var comparesTreesAtEnd: Bool { false }

    func testLookupsOnAnOverlayBackingLeaveTheDaemonItsOwnDescriptors() throws {
        guard target.isCoordFS else { throw XCTSkip("a coordfs daemon's descriptors") }
        let layers = fixture.root + "/layers"
        for d in ["", "/lower", "/upper", "/work"] { mkdir(layers + d, 0o755) }
        let data = "lowerdir=\(layers)/lower,upperdir=\(layers)/upper,workdir=\(layers)/work"
        guard Glibc.mount("overlay", fixture.backing, "overlay", 0, data) == 0 else {
            throw XCTSkip("cannot mount an overlayfs here: \(String(cString: strerror(errno)))")
        }
        // The fixture unmounts it after the daemon (a file system mounted under its root).
        let count = 300
        for i in 0..<count {
            XCTAssertTrue(FileManager.default.createFile(atPath: fixture.backing + "/f\(i)", contents: Data([1])))
        }
        try fixture.mount(options: mountOptions, descriptorLimit: descriptorLimit)
        guard let pid = fixture.daemonPids.first else { return XCTFail("no daemon serves \(fixture.mountpoint)") }

        var looked = 0
        var refused: Int32 = 0
        for i in 0..<count {
            var st = stat()
            if lstat(fixture.mountpoint + "/f\(i)", &st) != 0 { refused = errno; break }
            looked += 1
        }
        XCTAssertEqual(refused, ENFILE, "a lookup beyond what the daemon has for nodes fails with ENFILE (after \(looked))")
        XCTAssertGreaterThan(looked, 40, "the daemon looks items up while it has descriptors for them")
        let holds = try XCTUnwrap(fixture.daemonOpenDescriptors())
        XCTAssertLessThanOrEqual(holds, 128 - 16, "the daemon keeps descriptors for its own files")
        // libdispatch's workqueue monitor opens /proc/TID/stat about once a second.
        usleep(2_500_000)
        XCTAssertEqual(kill(pid, 0), 0, "the daemon lives")
        XCTAssertTrue(daemonLog().contains("which it keeps for its own files"), "the daemon's log says why: \(daemonLog().suffix(600))")

        // The kernel forgets the nodes (its dentries dropped): lookups work again.
        let dropped = (try? "2\n".write(toFile: "/proc/sys/vm/drop_caches", atomically: false, encoding: .utf8)) != nil
        if dropped {
            var st = stat()
            eventually("a lookup once the kernel forgot others", within: 10) { lstat(fixture.mountpoint + "/f\(count - 1)", &st) == 0 }
        }
    }
}
