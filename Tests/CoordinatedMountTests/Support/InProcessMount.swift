import XCTest
import Foundation
import Glibc
import Synchronization
@testable import CoordFS
import Coordination
import EventLog
import FuseKit

/// A coordinated mount served by this test process, so presenters can be registered on its
/// coordinator directly. Always unmounted in tearDown, also when a test fails.
class InProcessMountTestCase: XCTestCase {
    var root: String!
    var backing: String!
    var mnt: String!
    var daemon: Daemon!

    /// Override to change the mount's coordination options.
    func configure(_ options: inout MountOptions) {
        options.coordination.saveWindow = 0.4
        options.coordination.askTimeout = 2
        options.coordination.writeWait = 2
        options.coordination.readWait = 0.5
    }

    override func setUpWithError() throws {
        let template = "/tmp/coordfs-cm-XXXXXX"
        var buf = Array(template.utf8CString)
        guard let made = mkdtemp(&buf) else { throw XCTSkip("mkdtemp failed") }
        root = String(cString: made)
        backing = root + "/backing"
        mnt = root + "/mnt"
        mkdir(backing, 0o755); mkdir(mnt, 0o755)
        try prepareBacking()
        var options = MountOptions()
        // `make test`'s second pass serves the suites through the other transport.
        if let t = ProcessInfo.processInfo.environment["COORDFS_TEST_TRANSPORT"].flatMap(FuseTransport.init(rawValue:)) {
            options.transport = t
        }
        configure(&options)
        mountOptions = options
        try startDaemon()
    }

    /// The options the daemon mounts with (after ``configure(_:)``).
    private(set) var mountOptions = MountOptions()

    private func startDaemon() throws {
        daemon = try Daemon(plan: try MountPreflight.plan(backing: backing, mountpoint: mnt, options: mountOptions))
        willStart(daemon)
        try daemon.startInProcess()
    }

    /// The daemon stopped (its presenters let go, as at an unmount) and the same folders mounted
    /// again with the same options: what a restart of the daemon finds in its state folder.
    func mountAgain() throws {
        daemon.stopAndWait()
        daemon = nil
        try startDaemon()
    }

    /// Override to set up the daemon before it mounts (a cluster store, ...).
    func willStart(_ daemon: Daemon) {}

    override func tearDownWithError() throws {
        daemon?.stopAndWait()
        // Let go of it: XCTest keeps every test object until the process ends, and a daemon kept
        // holds its /dev/fuse descriptor, its log and store files for the rest of the run.
        daemon = nil
        if let mnt, MountTable.coordfsMount(at: mnt) != nil { umount2(mnt, Int32(MNT_DETACH)) }
        cleanUpBacking()
        if let root { try? FileManager.default.removeItem(atPath: root) }
    }

    /// Override to put something at `backing` before the mount (an overlayfs, ...).
    func prepareBacking() throws {}
    /// Override to take it away again; runs after the unmount, also when the test failed.
    func cleanUpBacking() {}

    var coordinator: Coordinator { daemon.coordinator }

    func write(_ relative: String, _ text: String) throws {
        try text.write(toFile: backing + "/" + relative, atomically: false, encoding: .utf8)
    }

    func read(_ relative: String) throws -> String {
        try String(contentsOfFile: mnt + "/" + relative, encoding: .utf8)
    }

    /// Everything the mount has logged so far (flushed first).
    func logged(file: StaticString = #filePath, line: UInt = #line) throws -> [EventRecord] {
        guard daemon.eventLog != nil else {
            XCTFail("the mount has no event log", file: file, line: line)
            return []
        }
        try daemon.flushEventLog()
        let reader = try EventLogReader(directory: daemon.plan.state.eventLog, position: .start)
        var out: [EventRecord] = []
        while let r = try reader.next() { out.append(r) }
        return out
    }

    /// The `didChange` records of `path` ("/doc.txt") that no access made: changes the backing
    /// watcher saw made beside the mount.
    func besideTheMount(_ path: String) throws -> [EventRecord] {
        try logged().filter { $0.kind == .didChange && $0.path == path && $0.details.requestID == nil }
    }

    /// Reads `relative` through the mount with `cat` (the kernel caches it then), waits for the
    /// read's reacquire at `presenter` (its RELEASE may come after close(2) returned), then clears
    /// the presenter's log.
    func catThenClear(_ relative: String, presentedBy presenter: RecordingPresenter) throws -> String {
        let text = try sh("cat '\(relative)'").output
        presenter.waitUntil(settle: 0) { $0.contains("reacquire") }
        presenter.clear()
        return text
    }

    /// Registers a recording presenter for a mount-relative path.
    @discardableResult
    func present(_ relative: String, behaviour: RecordingPresenter.Behaviour = .init()) throws -> RecordingPresenter {
        let p = RecordingPresenter(path: try ItemPath(relative), behaviour: behaviour)
        _ = try coordinator.addFilePresenter(p)
        return p
    }

    /// Runs a shell command with the mount (or `directory`: the backing folder, for a change made
    /// outside the mount) as working directory; fails the test on a non-zero exit unless `allowFailure`.
    @discardableResult
    func sh(_ command: String, in directory: String? = nil, allowFailure: Bool = false, timeout: Double = 60,
            file: StaticString = #filePath, line: UInt = #line) throws -> (status: Int32, output: String) {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/bin/sh")
        p.arguments = ["-c", command]
        p.currentDirectoryURL = URL(fileURLWithPath: directory ?? mnt)
        var env = ProcessInfo.processInfo.environment
        env["HOME"] = root
        env["TERM"] = "dumb"
        env["GIT_CONFIG_NOSYSTEM"] = "1"
        p.environment = env
        let pipe = Pipe()
        p.standardOutput = pipe
        p.standardError = pipe
        p.standardInput = FileHandle.nullDevice
        try p.run()
        let deadline = Date().addingTimeInterval(timeout)
        while p.isRunning && Date() < deadline { usleep(5_000) }
        if p.isRunning { p.terminate(); XCTFail("timed out: \(command)", file: file, line: line) }
        p.waitUntilExit()
        let out = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        if !allowFailure && p.terminationStatus != 0 {
            XCTFail("`\(command)` exited \(p.terminationStatus): \(out)", file: file, line: line)
        }
        return (p.terminationStatus, out)
    }

    /// True when the program is on PATH.
    func have(_ program: String) -> Bool {
        (try? sh("command -v \(program) >/dev/null", allowFailure: true).status) == 0
    }
}

extension InProcessMountTestCase {
    /// One save of `presenter`'s document: asked to relinquish before, told one did change after,
    /// never a deletion or a move, still presenting the same path (and the backing file holding
    /// `content`, when given).
    func assertOneSave(_ presenter: RecordingPresenter, expect content: String? = nil, file: StaticString = #filePath, line: UInt = #line) throws {
        let log = presenter.waitUntil(timeout: 5, settle: 0.8) { $0.contains("didChange") }
        XCTAssertEqual(log.filter { $0 == "didChange" }.count, 1, "one change per save: \(log)", file: file, line: line)
        XCTAssertFalse(log.contains("accommodateDeletion"), "a save is not a deletion: \(log)", file: file, line: line)
        XCTAssertFalse(log.contains { $0.hasPrefix("didMove") }, "a save is not a move: \(log)", file: file, line: line)
        if let before = log.firstIndex(of: "relinquishToWriter"), let after = log.firstIndex(of: "didChange") {
            XCTAssertLessThan(before, after, "asked before, told after: \(log)", file: file, line: line)
        } else {
            XCTFail("no relinquish to writer before the change: \(log)", file: file, line: line)
        }
        let id = try XCTUnwrap(coordinator.presenterID(of: presenter), file: file, line: line)
        XCTAssertEqual(coordinator.presentedPath(of: id), presenter.path, "still presenting the same document", file: file, line: line)
        if let content {
            XCTAssertEqual(try String(contentsOfFile: backing + "/" + presenter.path.string, encoding: .utf8), content, file: file, line: line)
        }
    }
}

/// A presenter that records every call, in order, as short strings ("relinquishToWriter",
/// "didChange", "subitemDidAppear a/b", ...).
final class RecordingPresenter: FilePresenter, @unchecked Sendable {
    struct Behaviour: Sendable {
        /// Seconds to take before answering each ask.
        var delay: Double = 0
        /// Never answer asks (a hung presenter).
        var hang = false
        /// Throw from accommodate deletion (refuse).
        var refuseDeletion = false
        init(delay: Double = 0, hang: Bool = false, refuseDeletion: Bool = false) {
            self.delay = delay; self.hang = hang; self.refuseDeletion = refuseDeletion
        }
    }
    struct Refused: Error {}

    let path: ItemPath
    let behaviour: Behaviour
    private let entries = Mutex<[String]>([])

    init(path: ItemPath, behaviour: Behaviour) { self.path = path; self.behaviour = behaviour }

    var presentedItemPath: ItemPath? { path }
    var log: [String] { entries.withLock { $0 } }
    func record(_ s: String) { entries.withLock { $0.append(s) } }
    func clear() { entries.withLock { $0.removeAll() } }

    private func answer() async {
        if behaviour.hang { try? await Task.sleep(for: .seconds(3600)) }
        if behaviour.delay > 0 { try? await Task.sleep(for: .milliseconds(Int(behaviour.delay * 1000))) }
    }

    func relinquishPresentedItem(toReader reader: AccessOrigin) async -> Reacquirer? {
        record("relinquishToReader"); await answer()
        return { [self] in record("reacquire") }
    }
    func relinquishPresentedItem(toWriter writer: AccessOrigin) async -> Reacquirer? {
        record("relinquishToWriter"); await answer()
        return { [self] in record("reacquire") }
    }
    func savePresentedItemChanges() async throws { record("save"); await answer() }
    func accommodatePresentedItemDeletion() async throws {
        record("accommodateDeletion"); await answer()
        if behaviour.refuseDeletion { throw Refused() }
    }
    func presentedItemDidChange() async { record("didChange") }
    func presentedItemDidMove(to newPath: ItemPath) async { record("didMove \(newPath)") }
    func presentedSubitemDidAppear(at path: ItemPath) async { record("subitemDidAppear \(path)") }
    func presentedSubitemDidChange(at path: ItemPath) async { record("subitemDidChange \(path)") }
    func presentedSubitem(at oldPath: ItemPath, didMoveTo newPath: ItemPath) async { record("subitemDidMove \(oldPath) \(newPath)") }
    func accommodatePresentedSubitemDeletion(at path: ItemPath) async throws { record("accommodateSubitemDeletion \(path)") }

    /// Waits until `predicate` holds for the log (or the timeout), then `settle` seconds more so that
    /// late, unwanted calls would show up too.
    @discardableResult
    func waitUntil(timeout: Double = 5, settle: Double = 0.3, _ predicate: ([String]) -> Bool) -> [String] {
        let deadline = Date().addingTimeInterval(timeout)
        while !predicate(log) && Date() < deadline { usleep(10_000) }
        usleep(UInt32(settle * 1_000_000))
        return log
    }

    func count(_ entry: String) -> Int { log.filter { $0 == entry }.count }
}
