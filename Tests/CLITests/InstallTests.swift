import XCTest
import Foundation
import Glibc

/// `make install-files` / `make uninstall` (PREFIX and DESTDIR), and the mount(8) helper
/// `mount.coordfs` mounting for real with the arguments mount(8) passes.
final class InstallTests: XCTestCase {
    private var root: String!
    private var repo: String { URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path }
    private var binary: String {
        if let b = ProcessInfo.processInfo.environment["COORDFS_BIN"] { return b }
        return URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("coordfs").path
    }

    override func setUpWithError() throws {
        guard FileManager.default.fileExists(atPath: binary) else { throw XCTSkip("no coordfs binary at \(binary): run `swift build` first") }
        var template = Array("/tmp/coordfs-install-XXXXXX".utf8CString)
        root = String(cString: mkdtemp(&template))
    }

    override func tearDownWithError() throws {
        let mnt = root + "/mnt"
        if (try? String(contentsOfFile: "/proc/mounts", encoding: .utf8))?.contains(" \(mnt) ") == true {
            _ = try? run(binary, ["unmount", mnt])
            umount2(mnt, Int32(MNT_DETACH))
        }
        try? FileManager.default.removeItem(atPath: root)
    }

    @discardableResult
    private func run(_ exe: String, _ args: [String], env: [String: String] = [:]) throws -> (status: Int32, output: String) {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: exe)
        p.arguments = args
        p.environment = ProcessInfo.processInfo.environment.merging(env) { $1 }
        let pipe = Pipe()
        p.standardOutput = pipe; p.standardError = pipe; p.standardInput = FileHandle.nullDevice
        try p.run()
        let out = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        p.waitUntilExit()
        return (p.terminationStatus, out)
    }

    func testInstallAndUninstallHonourPrefixAndDestdir() throws {
        let dest = root + "/dest"
        let install = try run("/usr/bin/make", ["-C", repo, "install-files", "DESTDIR=\(dest)", "PREFIX=/opt/cfs", "BIN=\(binary)"])
        XCTAssertEqual(install.status, 0, install.output)
        let fm = FileManager.default
        XCTAssertTrue(fm.isExecutableFile(atPath: dest + "/opt/cfs/bin/coordfs"))
        XCTAssertTrue(fm.isExecutableFile(atPath: dest + "/opt/cfs/sbin/mount.coordfs"))
        XCTAssertEqual(try fm.destinationOfSymbolicLink(atPath: dest + "/opt/cfs/sbin/mount.fuse.coordfs"), "mount.coordfs")
        let helper = try String(contentsOfFile: dest + "/opt/cfs/sbin/mount.coordfs", encoding: .utf8)
        XCTAssertTrue(helper.contains("/opt/cfs/bin/coordfs"), "the helper points at the installed binary")
        let unit = try String(contentsOfFile: dest + "/opt/cfs/lib/systemd/system/coordfs@.service", encoding: .utf8)
        XCTAssertTrue(unit.contains("ExecStart=/opt/cfs/bin/coordfs mount -f"), unit)
        XCTAssertFalse(unit.contains("@BINDIR@"))
        // coordfs web's page, where the installed binary looks for it (BIN/../share/coordfs/web).
        for f in ["index.html", "app.js", "app.css"] {
            XCTAssertEqual(fm.contents(atPath: dest + "/opt/cfs/share/coordfs/web/" + f), fm.contents(atPath: repo + "/Sources/CoordFSWeb/Assets/" + f), f)
        }
        let uninstall = try run("/usr/bin/make", ["-C", repo, "uninstall", "DESTDIR=\(dest)", "PREFIX=/opt/cfs"])
        XCTAssertEqual(uninstall.status, 0, uninstall.output)
        for f in ["bin/coordfs", "sbin/mount.coordfs", "sbin/mount.fuse.coordfs", "lib/systemd/system/coordfs@.service", "share/coordfs/web"] {
            XCTAssertFalse(fm.fileExists(atPath: dest + "/opt/cfs/" + f), f)
        }
    }

    /// mount(8) runs `mount.fuse.coordfs SOURCE MOUNTPOINT -o OPTIONS` (and may add -n, -s, -v).
    func testMountHelperMountsWithMountsArguments() throws {
        let backing = root + "/backing", mnt = root + "/mnt"
        try FileManager.default.createDirectory(atPath: backing, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: mnt, withIntermediateDirectories: true)
        try "through fstab\n".write(toFile: backing + "/a.txt", atomically: false, encoding: .utf8)
        let helper = repo + "/mount-scripts/mount.coordfs"
        let r = try run(helper, [backing, mnt, "-n", "-o", "rw,noatime,nofail,_netdev,x-systemd.automount"], env: ["COORDFS": binary])
        XCTAssertEqual(r.status, 0, r.output)
        XCTAssertEqual(try String(contentsOfFile: mnt + "/a.txt", encoding: .utf8), "through fstab\n")
        let line = try String(contentsOfFile: "/proc/mounts", encoding: .utf8).split(separator: "\n").first { $0.contains(" \(mnt) ") }
        XCTAssertTrue(line?.contains("fuse.coordfs") == true && line?.contains("noatime") == true, "\(line ?? "not mounted")")
        XCTAssertEqual(try run(binary, ["unmount", mnt]).status, 0)
        // mount -f (fake) does nothing; a bad option is refused with coordfs's message.
        XCTAssertEqual(try run(helper, [backing, mnt, "-f"], env: ["COORDFS": binary]).status, 0)
        let bad = try run(helper, [backing, mnt, "-o", "frobnicate"], env: ["COORDFS": binary])
        XCTAssertNotEqual(bad.status, 0)
        XCTAssertTrue(bad.output.contains("unknown mount option 'frobnicate'"), bad.output)
    }
}
