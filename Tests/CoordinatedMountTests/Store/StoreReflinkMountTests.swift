import XCTest
import Foundation
import Glibc
@testable import CoordFS
import Coordination
import DocumentStore

/// The mount over a backing folder on XFS with reflink=1 (a small image on a loop device), so the
/// clone path runs for real: an in-place write to a presented document is kept with FICLONE and
/// recorded as `snapshotTaken` with method `reflink`. Skipped, saying why, without loop devices.
final class StoreReflinkMountTests: StoreMountTestCase {
    private var xfs: String?
    private var loopDevice: String?
    private var xfsMounted = false

    override func setUpWithError() throws {
        if let reason = Self.unavailableReason() { throw XCTSkip("no reflink filesystem: \(reason)") }
        var template = Array("/tmp/coordfs-cm-xfs-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw XCTSkip("mkdtemp failed") }
        let dir = String(cString: made)
        xfs = dir
        try run("/usr/bin/truncate", ["-s", "300M", dir + "/image"])
        loopDevice = try run("/usr/sbin/losetup", ["-f", "--show", dir + "/image"]).trimmingCharacters(in: .whitespacesAndNewlines)
        try run("/usr/sbin/mkfs.xfs", ["-q", "-f", "-m", "reflink=1", loopDevice!])
        mkdir(dir + "/fs", 0o755)
        try run("/usr/bin/mount", ["-t", "xfs", loopDevice!, dir + "/fs"])
        xfsMounted = true
        root = dir + "/fs"
        backing = dir + "/fs/backing"
        mnt = dir + "/mnt"
        mkdir(backing, 0o755); mkdir(mnt, 0o755)
        var options = MountOptions()
        configure(&options)
        daemon = try Daemon(plan: try MountPreflight.plan(backing: backing, mountpoint: mnt, options: options))
        try daemon.startInProcess()
    }

    override func tearDownWithError() throws {
        daemon?.stopAndWait()
        if let mnt, MountTable.coordfsMount(at: mnt) != nil { umount2(mnt, Int32(MNT_DETACH)) }
        root = nil // nothing for the base class to remove: the image goes below
        if xfsMounted, let xfs {
            if (try? run("/usr/bin/umount", [xfs + "/fs"])) == nil { _ = try? run("/usr/bin/umount", ["-l", xfs + "/fs"]) }
        }
        if let loopDevice { _ = try? run("/usr/sbin/losetup", ["-d", loopDevice]) }
        if let xfs { try? FileManager.default.removeItem(atPath: xfs) }
        try super.tearDownWithError()
    }

    static func unavailableReason() -> String? {
        if geteuid() != 0 { return "not root (a loop device needs root)" }
        if access("/dev/loop-control", F_OK) != 0 { return "no /dev/loop-control (loop devices unavailable)" }
        for tool in ["/usr/sbin/mkfs.xfs", "/usr/sbin/losetup", "/usr/bin/mount", "/usr/bin/umount", "/usr/bin/truncate"] where access(tool, X_OK) != 0 {
            return "\(tool) is not installed (xfsprogs, mount)"
        }
        return nil
    }

    @discardableResult
    private func run(_ executable: String, _ arguments: [String]) throws -> String {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: executable)
        p.arguments = arguments
        let pipe = Pipe()
        p.standardOutput = pipe
        p.standardError = pipe
        try p.run()
        let out = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        p.waitUntilExit()
        guard p.terminationStatus == 0 else {
            throw XCTSkip("\(executable) \(arguments.joined(separator: " ")) failed (\(p.terminationStatus)): \(out)")
        }
        return out
    }

    func testInPlaceWriteOfAPresentedDocumentIsCloned() throws {
        XCTAssertTrue(store.cloneSupported, "XFS reflink=1 clones")
        XCTAssertEqual(store.filesystemName, "xfs")
        try write("doc.txt", "alpha\n")
        let (p, id) = try presentDocument("doc.txt", unsaved: true)
        // Where cloning is O(1) the base is cloned at registration.
        let base = try XCTUnwrap(try store.versions(ofPath: "doc.txt").first)
        XCTAssertEqual(base.method, .reflink)
        XCTAssertEqual(base.reason, .base)
        try sh("echo theirs > doc.txt")
        let conflict = try conflict(of: p.waitForEvents(1, settle: 0.3))
        XCTAssertEqual(conflict.baseVersion, base.id)
        XCTAssertEqual(try keptTexts("doc.txt"), ["alpha\n"])
        let snapshots = try daemon.storeLogRecords().filter { $0.kind == "snapshotTaken" }
        XCTAssertEqual(snapshots.map(\.snapshotMethod), ["reflink"], "\(snapshots)")
        XCTAssertEqual(snapshots.first?.versionID, String(base.id.rawValue))
        // And a merge works from the cloned base.
        try service.resolve(conflict.id, with: .keepBoth, mine: .bytes(Array("mine\n".utf8)))
        XCTAssertEqual(try service.conflicts(of: id), [])
    }

    func testRenameOverReusesTheBaseCloneAndAnUnpresentedFileCostsNothing() throws {
        try write("doc.txt", "alpha\n")
        try write("plain.txt", "nobody presents me\n")
        let (p, _) = try presentDocument("doc.txt")
        try sh("echo plain > plain.txt && printf 'new\\n' > doc.tmp && mv doc.tmp doc.txt")
        p.waitForEvents(1, settle: 0.3)
        XCTAssertEqual(try store.versions(ofPath: "plain.txt"), [], "unpresentedFiles: never")
        // The registration clone is reused for the rename over (same file identity, no link
        // needed); the reload then cloned the new file as the presenter's new base.
        XCTAssertEqual(try store.versions(ofPath: "doc.txt").map(\.method), [.reflink, .reflink])
        XCTAssertEqual(try store.versions(ofPath: "doc.txt").map(\.reason), [.base, .base])
        XCTAssertEqual(try keptTexts("doc.txt"), ["new\n", "alpha\n"])
    }
}
