import XCTest
@testable import CoordFS
import ControlProtocol
import LinuxGNU
import NameBytes

/// `/proc/self/mountinfo` is read one way (`Linux.MountInfo`): the daemon's mount table (unmount,
/// pre-flight, `coordfs watch PATH`) and the client's socket locator see the same mounts, names
/// byte for byte. Before, both got a name that is not UTF-8 and has an escape wrong: the mount
/// table decoded it lossily (U+FFFD), the locator unescaped the UTF-8 of its lossless form.
final class MountInfoTests: XCTestCase {
    /// A mount point with a space (escaped `\040` by the kernel), a backslash (`\134`) and the byte
    /// 0xE9 alone (Latin-1 "é", not UTF-8), as the kernel writes it: raw bytes but for the escapes.
    private func mountinfo() -> [UInt8] {
        var line = Array("36 35 0:42 / /mnt/a\\040b\\134c".utf8) + [0xE9]
        line += Array(" rw,nosuid,nodev,relatime shared:1 - fuse.coordfs /srv/back\\040ing rw,user_id=0,group_id=0\n".utf8)
        line += Array("22 1 8:1 / / rw,relatime - ext4 /dev/vda1 rw\n".utf8)
        return line
    }

    func testTheMountTableAndTheLocatorReadTheSameMountsByteForByte() throws {
        let text = String(nameBytes: mountinfo())
        let table = MountTable.entries(from: text)
        let located = ControlSocketLocator.parseMountInfo(text)
        XCTAssertEqual(table.count, 2)
        XCTAssertEqual(table.map(\.mountpoint), located.map(\.mountPoint))
        XCTAssertEqual(table.map(\.fsType), located.map(\.fileSystemType))
        XCTAssertEqual(table.map(\.source), located.map(\.source))
        XCTAssertEqual(table[0].mountpoint.nameBytes, Array("/mnt/a b\\c".utf8) + [0xE9])
        XCTAssertEqual(table[0].source, "/srv/back ing")
        XCTAssertEqual(table[0].options, "rw,nosuid,nodev,relatime")
        XCTAssertEqual(MountTable.coordfsMount(at: String(nameBytes: Array("/mnt/a b\\c".utf8) + [0xE9]), in: table)?.source,
                       "/srv/back ing")
    }

    /// A mount point is found by its bytes: NFC and NFD spellings of one word are two mount points
    /// (Swift's String `==` takes them for one), and a name that is not UTF-8 is found only by
    /// exactly its bytes.
    func testACoordfsMountIsFoundByItsBytesOnly() {
        let nfd = "/mnt/cafe\u{301}", nfc = "/mnt/caf\u{E9}"
        let latin1 = String(nameBytes: Array("/mnt/caf".utf8) + [0xE9])
        let table = [
            MountEntry(mountpoint: nfd, fsType: "fuse.coordfs", source: "/srv/nfd", options: "rw"),
            MountEntry(mountpoint: latin1, fsType: "fuse.coordfs", source: "/srv/latin1", options: "rw"),
        ]
        XCTAssertEqual(MountTable.coordfsMount(at: nfd, in: table)?.source, "/srv/nfd")
        XCTAssertNil(MountTable.coordfsMount(at: nfc, in: table), "the NFC spelling is another folder, with nothing mounted")
        XCTAssertEqual(MountTable.coordfsMount(at: latin1, in: table)?.source, "/srv/latin1")
        let text = "40 1 0:50 / /mnt/cafe\u{301} rw - fuse.coordfs /srv/nfd rw\n"
        XCTAssertEqual(MountTable.coordfsMountID(at: nfd, text: text), 40)
        XCTAssertNil(MountTable.coordfsMountID(at: nfc, text: text))
    }

    func testLinesThatAreNotMountinfoAreSkippedAndBadEscapesKept() {
        let entries = MountInfo.parse("garbage\n\n1 2 3\n36 35 0:42 / /x\\09y rw - tmpfs none rw\n")
        XCTAssertEqual(entries.map(\.mountPoint), ["/x\\09y"])
        XCTAssertEqual(MountInfo.unescape("a\\0401\\777"), "a 1\\777")
    }

    /// The live table of this process: "/" is always there.
    func testTheCurrentTableHasTheRoot() {
        XCTAssertTrue(MountInfo.current().contains { $0.mountPoint == "/" })
        XCTAssertTrue(MountTable.entries().contains { $0.mountpoint == "/" })
    }
}
