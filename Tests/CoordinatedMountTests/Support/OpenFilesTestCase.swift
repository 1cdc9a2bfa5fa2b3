import XCTest
import Foundation
@testable import CoordFS

/// Another program's file open through the mount while a change waits for it (docs/semantics.md,
/// "Waits and deadlines"): `write_wait` is 30 s and every command runs under `timeout 10`, so a
/// change that completes exits 0 and one that waits is still waiting at 10 s (exit 124).
class OpenFilesTestCase: InProcessMountTestCase {
    override func configure(_ options: inout MountOptions) {
        super.configure(&options)
        options.coordination.writeWait = 30
    }

    /// A shell in the mount that opens `relative` as descriptor 3 with `redirect` (`<` to read,
    /// `>>` to append, `<>` to read and write), runs `first` (`printf A >&3; `: writes through it),
    /// then `then`; returned once the file is open and `first` done.
    func holdOpen(_ relative: String, _ redirect: String = "<", first: String = "", then: String = "exec sleep 60") throws -> Process {
        unlink(root + "/ready")
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/bin/sh")
        p.arguments = ["-c", "exec 3\(redirect) '\(relative)'; \(first): > ../ready; \(then)"]
        p.currentDirectoryURL = URL(fileURLWithPath: mnt)
        p.standardInput = FileHandle.nullDevice
        try p.run()
        let deadline = Date().addingTimeInterval(20)
        while !FileManager.default.fileExists(atPath: root + "/ready") {
            guard Date() < deadline, p.isRunning else {
                p.terminate(); p.waitUntilExit()
                throw XCTSkip("the shell did not open \(relative)")
            }
            usleep(5_000)
        }
        return p
    }

    func end(_ p: Process) {
        if p.isRunning { p.terminate() }
        p.waitUntilExit()
    }

    /// Runs `command` through the mount under `timeout 10`; its exit status (124: still waiting at 10 s).
    func within10s(_ command: String) throws -> Int32 {
        try sh("timeout 10 sh -c \"\(command)\"", allowFailure: true, timeout: 40).status
    }

    func backingText(_ relative: String) throws -> String {
        try String(contentsOfFile: backing + "/" + relative, encoding: .utf8)
    }
}
