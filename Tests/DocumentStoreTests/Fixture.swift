import Foundation
import Glibc
import XCTest
@testable import DocumentStore

/// A backing folder with the store's state inside it (`.coordfs/store`), under some parent
/// directory (the machine's own disk, or a mounted XFS image).
final class Fixture {
    let backing: String
    var store: DocumentStore
    let configuration: StoreConfiguration

    init(under parent: String, configuration: StoreConfiguration = StoreConfiguration()) throws {
        backing = parent + "/store-test-\(UInt64.random(in: 0...UInt64.max))"
        try FileSystem.mkdirs(backing)
        self.configuration = configuration
        store = try DocumentStore(backingRoot: backing, stateDirectory: backing + "/.coordfs/store", configuration: configuration)
    }

    deinit { _ = try? Shell.run("/bin/rm", ["-rf", backing]) }

    /// A fixture on the machine's own disk (/tmp).
    static func onDisk(_ configuration: StoreConfiguration = StoreConfiguration()) throws -> Fixture {
        let parent = "/tmp/coordfs-store-tests"
        try FileSystem.mkdirs(parent)
        return try Fixture(under: parent, configuration: configuration)
    }

    /// Drops the store and opens it again on the same state (a daemon restart).
    func reopen() throws {
        store = try DocumentStore(backingRoot: backing, stateDirectory: backing + "/.coordfs/store", configuration: configuration)
    }

    func path(_ relative: String) -> String { backing + "/" + relative }

    func write(_ relative: String, _ text: String) throws {
        try Data(text.utf8).write(to: URL(fileURLWithPath: path(relative)))
    }

    /// Writes in place (same inode), like `sed -i` would not but `cat > file` does.
    func writeInPlace(_ relative: String, _ text: String) throws {
        let fd = open(path(relative), O_WRONLY | O_TRUNC)
        XCTAssertGreaterThanOrEqual(fd, 0)
        defer { close(fd) }
        let bytes = Array(text.utf8)
        XCTAssertEqual(Glibc.write(fd, bytes, bytes.count), bytes.count)
    }

    /// Atomic save: temp file renamed over the document.
    func replace(_ relative: String, _ text: String) throws {
        try write(relative + ".tmp~", text)
        XCTAssertEqual(rename(path(relative + ".tmp~"), path(relative)), 0)
    }

    func read(_ relative: String) throws -> String {
        String(decoding: try Data(contentsOf: URL(fileURLWithPath: path(relative))), as: UTF8.self)
    }

    func exists(_ relative: String) -> Bool { access(path(relative), F_OK) == 0 }

    func identity(_ relative: String) throws -> FileIdentity? { try FileIdentity.of(absolutePath: path(relative)) }

    func text(_ version: VersionID) throws -> String { String(decoding: try store.contents(of: version), as: UTF8.self) }
}

enum Shell {
    struct Failure: Error, CustomStringConvertible {
        let command: String
        let status: Int32
        let output: String
        var description: String { "\(command) exited \(status): \(output)" }
    }

    /// Runs a command; returns stdout, throws on a non-zero exit unless `allowFailure`.
    @discardableResult
    static func run(_ executable: String, _ arguments: [String], allowFailure: Bool = false) throws -> (status: Int32, output: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        try process.run()
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        let output = String(decoding: data, as: UTF8.self)
        if process.terminationStatus != 0 && !allowFailure {
            throw Failure(command: ([executable] + arguments).joined(separator: " "), status: process.terminationStatus, output: output)
        }
        return (process.terminationStatus, output)
    }
}

/// A small XFS filesystem with reflink=1 on a loop device, mounted for the tests of one class.
/// Everything it set up is undone by `destroy()`, which also runs after failures.
final class XFSImage: @unchecked Sendable {
    let directory: String
    let image: String
    let mountPoint: String
    private(set) var device: String?
    private(set) var mounted = false

    /// Why the reflink tests cannot run here, or nil.
    static func unavailableReason() -> String? {
        if geteuid() != 0 { return "not root (mounting a loop device needs root)" }
        if access("/dev/loop-control", F_OK) != 0 { return "no /dev/loop-control (loop devices unavailable)" }
        for tool in ["/usr/sbin/mkfs.xfs", "/usr/sbin/losetup", "/usr/bin/mount", "/usr/bin/umount"] where access(tool, X_OK) != 0 {
            if access("/sbin/" + (tool as NSString).lastPathComponent, X_OK) != 0 && access("/bin/" + (tool as NSString).lastPathComponent, X_OK) != 0 {
                return "\(tool) not installed (xfsprogs / mount)"
            }
        }
        return nil
    }

    init(size: String = "300M") throws {
        directory = "/tmp/coordfs-xfs-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        image = directory + "/image"
        mountPoint = directory + "/mnt"
        try FileSystem.mkdirs(mountPoint)
        do {
            try Shell.run("/usr/bin/truncate", ["-s", size, image])
            device = try Shell.run("/usr/sbin/losetup", ["-f", "--show", image]).output.trimmingCharacters(in: .whitespacesAndNewlines)
            try Shell.run("/usr/sbin/mkfs.xfs", ["-q", "-f", "-m", "reflink=1", device!])
            try Shell.run("/usr/bin/mount", ["-t", "xfs", device!, mountPoint])
            mounted = true
        } catch {
            destroy()
            throw error
        }
    }

    func destroy() {
        if mounted {
            // A lazy unmount as a fallback keeps a busy mount from leaking the loop device.
            if (try? Shell.run("/usr/bin/umount", [mountPoint])) == nil { _ = try? Shell.run("/usr/bin/umount", ["-l", mountPoint]) }
            mounted = false
        }
        if let device {
            _ = try? Shell.run("/usr/sbin/losetup", ["-d", device])
            self.device = nil
        }
        _ = try? Shell.run("/bin/rm", ["-rf", directory])
    }

    deinit { destroy() }
}
