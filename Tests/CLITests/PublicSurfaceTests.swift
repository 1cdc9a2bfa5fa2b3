import XCTest
import Foundation

/// What an app linking `CoordFSClient` sees: the built modules, type-checked by `swiftc` as another
/// package would (without this package's name, so `package` declarations are hidden). The app's
/// side of docs/protocol.md ("From Swift") compiles; the protocol's plumbing (messages, framing,
/// the server, the raw session) are not part of its API.
final class PublicSurfaceTests: XCTestCase {
    private var modules: String {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("Modules").path
    }

    /// The folders of the C modules the package's dependencies bring (swift-system's CSystem, ...),
    /// as SwiftPM passes them to a client package's build.
    private func cModuleSearchPaths() -> [String] {
        let repo = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path
        var folders: [String] = []
        for root in [repo + "/.build/checkouts", repo + "/Sources"] {
            guard let walker = FileManager.default.enumerator(atPath: root) else { continue }
            while let item = walker.nextObject() as? String {
                if item.hasSuffix("/module.modulemap") { folders.append(root + "/" + String(item.dropLast("/module.modulemap".count))) }
            }
        }
        return folders
    }

    private func typecheck(_ source: String) throws -> (status: Int32, output: String) {
        guard FileManager.default.fileExists(atPath: modules + "/CoordFSClient.swiftmodule") else {
            throw XCTSkip("no built modules at \(modules)")
        }
        let directory = NSTemporaryDirectory() + "coordfs-surface-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try source.write(toFile: directory + "/main.swift", atomically: true, encoding: .utf8)
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        p.arguments = ["swiftc", "-typecheck", "-I", modules] + cModuleSearchPaths().flatMap { ["-Xcc", "-I" + $0] }
            + ["-module-name", "SomeApp", directory + "/main.swift"]
        let pipe = Pipe()
        p.standardOutput = pipe
        p.standardError = pipe
        try p.run()
        let output = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        p.waitUntilExit()
        return (p.terminationStatus, output)
    }

    func testAnAppCompilesAgainstTheClientLibrary() throws {
        let result = try typecheck("""
            import CoordFSClient

            final class Document: FilePresenter, @unchecked Sendable {
                let presentedItemPath: String? = "/mnt/docs/report.txt"
                func savePresentedItemChanges() async throws {}
                func presentedItemDidChangeUnderneath(_ change: UnderlyingFileChange) async {
                    switch change.action {
                    case .reload, .close: break
                    case .conflict(let id): print(id)
                    case .failed(let message): print(message)
                    }
                }
                func presentedItemDidReceive(_ event: PresenterEvent) async { print(event.name) }
            }

            func app() async throws {
                let event: PresenterEvent = .didChange
                print(event.name)
                let document = Document()
                try await FileCoordinator.addFilePresenter(document, hasUnsavedChanges: false)
                let text = try await FileCoordinator(filePresenter: document)
                    .coordinate(readingItemAt: "/mnt/docs/report.txt", options: .withoutChanges) { path in path }
                try await FileCoordinator().coordinate(writingItemAt: text, options: [.forReplacing]) { _ in }
                try await document.setHasUnsavedChanges(true)
                let open = try await document.conflicts()
                let result = try await document.resolve(open[0].id, with: .merge, mine: .bytes(Array("mine".utf8)))
                print(result.mergeConflicts, result.writtenPath ?? "", result.after?.size ?? 0)
                let versions = try await FileCoordinator.versions(ofItemAt: "/mnt/docs/report.txt")
                let bytes = try await FileCoordinator.contents(ofVersion: versions[0].version, ofItemAt: "/mnt/docs/report.txt")
                print(bytes.count, versions[0].path, versions[0].reason, versions[0].pinned)
                let (mount, relative) = try CoordFSMount.containing("/mnt/docs/report.txt")
                let report = try await mount.status()
                for p in report.presenters { print(p.presenter, p.path, p.kind, p.pid, p.uid) }
                for a in report.accesses { print(a.access, a.intents.map(\\.path), a.heldMs) }
                print(mount.absolutePath(relative), mount.mountPoint)
                do { _ = try CoordFSMount.containing("/elsewhere") } catch { print(error.code as Any, error.description) }
            }
            """)
        XCTAssertEqual(result.status, 0, result.output)
    }

    func testTheProtocolsPlumbingIsNotPublic() throws {
        let hidden = ["ControlMessage", "Hello", "Framing", "FrameDecoder", "JSONParser", "JSONWriter", "ControlServer",
                      "ControlConnection", "ControlClient", "ControlSession"]
        let result = try typecheck("""
            import CoordFSClient
            import ControlProtocol

            func app(_ mount: CoordFSMount) {
                _ = mount.session
            \(hidden.map { "    _ = \($0).self" }.joined(separator: "\n"))
            }
            """)
        XCTAssertNotEqual(result.status, 0, result.output)
        XCTAssertTrue(result.output.contains("'session' is inaccessible due to 'package' protection level"), result.output)
        for name in hidden {
            XCTAssertTrue(result.output.contains("cannot find '\(name)' in scope") || result.output.contains("'\(name)' is inaccessible"),
                          "\(name) is visible to an app:\n\(result.output)")
        }
    }
}
