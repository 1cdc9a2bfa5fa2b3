// A CLI test whose backing folder is on a fresh ext4 image of its own on a loop device (root only),
// unmounted and detached at the end, also on failure.
import Foundation
import Glibc
import TestSupport
import XCTest

class LoopImageCLITestCase: CLITestCase {
    /// The image's size (`truncate -s`) and `mkfs.ext4`'s options.
    var imageSize: String { "400M" }
    var mkfsOptions: [String] { [] }

    /// The folder holding the image and its mountpoint (outside `root`, which the base class
    /// empties and whose FUSE mounts it unmounts); the image's file system is mounted at `fs` in it.
    private(set) var imageFolder: String?
    private var loopDevice: String?
    private var imageMounted = false
    /// Where the image's file system is mounted.
    var imageRoot: String { (imageFolder ?? "/nonexistent") + "/fs" }

    override func setUpWithError() throws {
        try super.setUpWithError()
        if geteuid() != 0 { throw XCTSkip("not root (a loop device needs root)") }
        if access("/dev/loop-control", F_OK) != 0 { throw XCTSkip("no /dev/loop-control (loop devices unavailable)") }
        for tool in ["/usr/sbin/mkfs.ext4", "/usr/sbin/losetup", "/usr/bin/mount", "/usr/bin/umount", "/usr/bin/truncate"] where access(tool, X_OK) != 0 {
            throw XCTSkip("\(tool) is not installed (e2fsprogs, mount)")
        }
        var template = Array("/tmp/coordfs-loop-ext4-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw XCTSkip("mkdtemp failed") }
        let folder = String(cString: made)
        imageFolder = folder
        try tool("/usr/bin/truncate", ["-s", imageSize, folder + "/image"])
        loopDevice = try tool("/usr/sbin/losetup", ["-f", "--show", folder + "/image"]).trimmingCharacters(in: .whitespacesAndNewlines)
        try tool("/usr/sbin/mkfs.ext4", ["-q", "-F"] + mkfsOptions + [loopDevice!])
        mkdir(folder + "/fs", 0o755)
        try tool("/usr/bin/mount", ["-t", "ext4", loopDevice!, folder + "/fs"])
        imageMounted = true
        backing = folder + "/fs/backing"
        mkdir(backing, 0o755)
    }

    override func tearDownWithError() throws {
        let daemon = daemonPID()
        var failure: (any Error)?
        do { try super.tearDownWithError() } catch { failure = error } // unmounts the coordfs mount, stops the children
        if let daemon { _ = ProcessEnd.wait(daemon, timeout: 10) }
        // (`run` keeps its output under `root`, gone by now.)
        if imageMounted, let imageFolder {
            if Self.status("/usr/bin/umount", [imageFolder + "/fs"]) != 0 { _ = Self.status("/usr/bin/umount", ["-l", imageFolder + "/fs"]) }
            imageMounted = false
        }
        if let loopDevice { XCTAssertEqual(Self.status("/usr/sbin/losetup", ["-d", loopDevice]), 0, "losetup -d \(loopDevice)") }
        if let imageFolder { try? FileManager.default.removeItem(atPath: imageFolder) }
        if let failure { throw failure }
    }

    /// Runs a command with no output kept; its exit status.
    static func status(_ executable: String, _ arguments: [String]) -> Int32 {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: executable)
        p.arguments = arguments
        p.standardOutput = FileHandle.nullDevice
        p.standardError = FileHandle.nullDevice
        guard (try? p.run()) != nil else { return -1 }
        p.waitUntilExit()
        return p.terminationStatus
    }

    /// Runs a set-up tool; skips the test when it fails.
    @discardableResult
    func tool(_ executable: String, _ arguments: [String]) throws -> String {
        let r = run(executable, arguments)
        guard r.status == 0 else { throw XCTSkip("\(executable) \(arguments.joined(separator: " ")) failed: \(r)") }
        return r.stdout
    }
}
