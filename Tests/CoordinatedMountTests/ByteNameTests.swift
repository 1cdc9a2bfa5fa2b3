import XCTest
import Foundation
import Glibc
import Coordination
import NameBytes
@testable import CoordFS

/// Linux names are bytes: names that are not UTF-8, and names that are the same text in two
/// Unicode normal forms, are different items through the mount, byte for byte (docs/architecture.md,
/// "Names are bytes").
final class ByteNameTests: InProcessMountTestCase {
    /// The names in `folder` (a path given as bytes), as the kernel's bytes.
    func names(in folder: [UInt8]) -> Set<[UInt8]> {
        guard let dir = opendir(c(folder)) else { return [] }
        defer { closedir(dir) }
        var out = Set<[UInt8]>()
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in Array(raw.prefix { $0 != 0 }) }
            if name != Array(".".utf8) && name != Array("..".utf8) && name != Array(".coordfs".utf8) { out.insert(name) }
        }
        return out
    }
    func names(in folder: String) -> Set<[UInt8]> { names(in: Array(folder.utf8)) }

    /// A NUL-terminated C path of `bytes`.
    func c(_ bytes: [UInt8]) -> [CChar] { (bytes + [0]).map { CChar(bitPattern: $0) } }
    /// `folder/name` as bytes.
    func join(_ folder: String, _ names: [UInt8]...) -> [UInt8] {
        names.reduce(Array(folder.utf8)) { $0 + [UInt8(ascii: "/")] + $1 }
    }

    func contents(_ path: [UInt8]) -> String? {
        let fd = open(c(path), O_RDONLY)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var buf = [UInt8](repeating: 0, count: 4096)
        let n = Glibc.read(fd, &buf, buf.count)
        return n < 0 ? nil : String(decoding: buf[0..<n], as: UTF8.self)
    }

    func testTwoNamesThatAreNotUTF8AreTwoFilesWithTheirOwnBytes() throws {
        try sh("printf one > \"$(printf 'col\\377')\" && printf two > \"$(printf 'col\\376')\"")
        let ff = Array("col".utf8) + [0xFF], fe = Array("col".utf8) + [0xFE]
        XCTAssertEqual(names(in: backing), [ff, fe])
        XCTAssertEqual(contents(join(backing, ff)), "one")
        XCTAssertEqual(contents(join(backing, fe)), "two")
        XCTAssertEqual(names(in: mnt), [ff, fe])
        XCTAssertEqual(contents(join(mnt, ff)), "one")
        XCTAssertEqual(contents(join(mnt, fe)), "two")
    }

    func testANameMadeInTheBackingFolderListsReadsAndIsRemovedThroughTheMount() throws {
        let name = Array("d".utf8) + [0xFF]
        let fd = open(c(join(backing, name)), O_CREAT | O_WRONLY, 0o644)
        XCTAssertGreaterThanOrEqual(fd, 0)
        _ = "data".withCString { Glibc.write(fd, $0, 4) }
        close(fd)
        XCTAssertEqual(names(in: mnt), [name])
        XCTAssertEqual(try sh("cat \"$(printf 'd\\377')\"").output, "data")
        try sh("rm \"$(printf 'd\\377')\"")
        XCTAssertEqual(names(in: backing), [])
    }

    func testDirectoriesLinksAndRenamesKeepTheirBytes() throws {
        // A directory, a symlink whose target is not UTF-8, a hard link, a rename: all byte-exact.
        try sh("""
            d=$(printf 'dir\\351'); f=$(printf 'f\\200\\201'); g=$(printf 'g\\377')
            mkdir "$d" && printf x > "$d/$f" && ln -s "$f" "$d/sym" && ln "$d/$f" "$d/$(printf 'hard\\377')" && mv "$d/$f" "$d/$g"
            """)
        let dir = Array("dir".utf8) + [0xE9]
        XCTAssertEqual(names(in: backing), [dir])
        XCTAssertEqual(names(in: join(backing, dir)), [Array("g".utf8) + [0xFF], Array("sym".utf8), Array("hard".utf8) + [0xFF]])
        XCTAssertEqual(contents(join(mnt, dir, Array("hard".utf8) + [0xFF])), "x")
        var target = [CChar](repeating: 0, count: 64)
        let n = readlink(c(join(mnt, dir, Array("sym".utf8))), &target, 64)
        XCTAssertEqual(n, 3)
        XCTAssertEqual(target.prefix(3).map { UInt8(bitPattern: $0) }, Array("f".utf8) + [0x80, 0x81])
        try sh("rm -r \"$(printf 'dir\\351')\"")
        XCTAssertEqual(names(in: backing), [])
    }

    func testNFCAndNFDNamesAreTwoFilesAndAPresenterOfOneIsNotAskedAboutTheOther() throws {
        let nfc = "caf\u{E9}", nfd = "cafe\u{301}"
        try write(nfc, "nfc")
        let p = try present(nfc)
        try sh("printf nfd > '\(nfd)'")
        XCTAssertEqual(names(in: backing), [Array(nfc.utf8), Array(nfd.utf8)])
        XCTAssertEqual(contents(join(backing, Array(nfc.utf8))), "nfc")
        XCTAssertEqual(contents(join(backing, Array(nfd.utf8))), "nfd")
        try sh("rm '\(nfd)'")
        XCTAssertEqual(p.waitUntil(timeout: 1) { !$0.isEmpty }, [], "the NFC presenter was told about the NFD file")
        try sh("printf more >> '\(nfc)'")
        XCTAssertEqual(p.waitUntil { $0.contains("reacquire") }, ["relinquishToWriter", "didChange", "reacquire"])
    }

    func testAPresenterOfANameThatIsNotUTF8IsAskedAndTold() throws {
        let name = String(nameBytes: Array("doc".utf8) + [0xFF])
        let other = String(nameBytes: Array("doc".utf8) + [0xFE])
        let fd = open(c(join(backing, name.nameBytes)), O_CREAT | O_WRONLY, 0o644)
        XCTAssertGreaterThanOrEqual(fd, 0)
        close(fd)
        let dir = try present("")
        let p = try present(name)
        try sh("printf one > \"$(printf 'doc\\376')\"")
        try sh("printf two >> \"$(printf 'doc\\377')\"")
        XCTAssertEqual(p.waitUntil { $0.contains("reacquire") }, ["relinquishToWriter", "didChange", "reacquire"])
        try sh("rm \"$(printf 'doc\\377')\"")
        let log = p.waitUntil { $0.contains("accommodateDeletion") }
        XCTAssertTrue(log.contains("accommodateDeletion"), "\(log)")
        let dirLog = dir.waitUntil { $0.contains("accommodateSubitemDeletion \(name)") }
        XCTAssertTrue(dirLog.contains("subitemDidAppear \(other)"), "\(dirLog)")
        XCTAssertTrue(dirLog.contains("accommodateSubitemDeletion \(name)"), "\(dirLog)")
    }

    /// The backing watcher decodes an event's name in place from the fanotify record: a change made
    /// directly in the backing folder to a file whose name is not UTF-8 reaches that file's
    /// presenter (a did-change), and not the presenter of the name one byte apart.
    func testAChangeMadeInTheBackingFolderToANameThatIsNotUTF8ReachesItsPresenterOnly() throws {
        let name = String(nameBytes: Array("doc".utf8) + [0xFF])
        let other = String(nameBytes: Array("doc".utf8) + [0xFE])
        for n in [name, other] {
            let fd = open(c(join(backing, n.nameBytes)), O_CREAT | O_WRONLY, 0o644)
            XCTAssertGreaterThanOrEqual(fd, 0)
            close(fd)
        }
        let p = try present(name)
        let q = try present(other)
        // Another process (the daemon skips its own changes), beside the mount.
        try sh("printf direct >> \"$(printf 'doc\\377')\"", in: backing)
        XCTAssertTrue(p.waitUntil { $0.contains("didChange") }.contains("didChange"), "\(p.log)")
        XCTAssertFalse(q.log.contains("didChange"), "\(q.log)")
    }
}
