import XCTest
import Foundation
import Glibc
import Synchronization
import TestSupport
@testable import CoordFS
import Coordination
import ControlProtocol

/// A coordinated mount served by this test process (daemon, coordinator and control socket), with
/// helpers to run the coordfs binary and shell commands against it. Always unmounted in tearDown.
class ClientMountTestCase: XCTestCase {
    var root: String!
    var backing: String!
    var mnt: String!
    var daemon: Daemon!
    /// Every coordinator event, for checks on what the event log records.
    final class EventBox: Sendable { let list = Mutex<[CoordinationEvent]>([]) }
    let events = EventBox()
    private var children: [pid_t] = []
    private var sequence = 0

    /// Override to change the mount's options.
    func configure(_ options: inout MountOptions) {
        options.coordination.askTimeout = 10
        options.coordination.writeWait = 10
        options.coordination.readWait = 2
        options.coordination.saveWindow = 0.2
    }

    override func setUpWithError() throws {
        var template = Array("/tmp/coordfs-client-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw XCTSkip("mkdtemp failed") }
        root = String(cString: made)
        chmod(root, 0o755)  // the permission tests run children as nobody
        backing = root + "/backing"
        mnt = root + "/mnt"
        mkdir(backing, 0o755)
        mkdir(mnt, 0o755)
        var options = MountOptions()
        configure(&options)
        let plan = try MountPreflight.plan(backing: backing, mountpoint: mnt, options: options)
        daemon = try Daemon(plan: plan)
        try daemon.startInProcess()
        let recorder = daemon.coordinator.eventSink
        let events = self.events
        daemon.coordinator.eventSink = ClosureEventSink { event in
            events.list.withLock { $0.append(event) }
            recorder?.record(event)
        }
    }

    override func tearDownWithError() throws {
        for pid in children {
            kill(pid, SIGKILL)
            var status: Int32 = 0
            _ = waitpid(pid, &status, 0)
        }
        children = []
        daemon?.stopAndWait()
        // Let go of it: XCTest keeps every test object until the process ends, and a daemon kept
        // holds its /dev/fuse descriptor, its log and store files for the rest of the run.
        daemon = nil
        if let mnt, MountTable.coordfsMount(at: mnt) != nil { umount2(mnt, Int32(MNT_DETACH)) }
        if let root {
            try? FileManager.default.removeItem(atPath: root)
            // Paths past PATH_MAX (DeepPathTests) are beyond FileManager: rm walks them by descriptor.
            if access(root, F_OK) == 0 {
                let rm = Process()
                rm.executableURL = URL(fileURLWithPath: "/bin/rm")
                rm.arguments = ["-rf", "--one-file-system", root]
                try? rm.run()
                rm.waitUntilExit()
            }
            XCTAssertNotEqual(access(root, F_OK), 0, "the test's folder \(root) is removed")
        }
    }

    var socketPath: String { daemon.plan.state.controlSocket }

    func writeBacking(_ relative: String, _ text: String, mode: mode_t = 0o644) throws {
        let path = backing + "/" + relative
        try text.write(toFile: path, atomically: false, encoding: .utf8)
        chmod(path, mode)
    }

    func readBacking(_ relative: String) -> String {
        (try? String(contentsOfFile: backing + "/" + relative, encoding: .utf8)) ?? "<missing>"
    }

    // MARK: Processes

    /// The coordfs executable next to the test bundle (same scratch path), or $COORDFS_BIN.
    static func coordfsBinary() throws -> String {
        if let bin = ProcessInfo.processInfo.environment["COORDFS_BIN"], !bin.isEmpty { return bin }
        let bundle = URL(fileURLWithPath: CommandLine.arguments[0]).standardizedFileURL
        var directory = bundle.deletingLastPathComponent()
        // xctest bundles on Linux are files next to the products; walk up out of a bundle directory.
        while !FileManager.default.isExecutableFile(atPath: directory.path + "/coordfs") && directory.path != "/" {
            directory = directory.deletingLastPathComponent()
        }
        let bin = directory.path + "/coordfs"
        guard access(bin, X_OK) == 0 else {
            throw XCTSkip("the coordfs binary is missing next to the tests: build it with the same --scratch-path, or set COORDFS_BIN")
        }
        return bin
    }

    /// A child process whose output goes to a file.
    struct Child {
        let pid: pid_t
        let output: String
        var text: String { (try? String(contentsOfFile: output, encoding: .utf8)) ?? "" }
        /// Its whole lines so far (`writtenLines`: a line still being written is not one yet).
        var lines: [String] { writtenLines(of: pid) { text } }
    }

    /// Starts `arguments[0]` (searched in PATH) with stdout and stderr in one file.
    func start(_ arguments: [String], user: (uid: uid_t, gid: gid_t)? = nil) throws -> Child {
        sequence += 1
        let output = root + "/child-\(sequence).out"
        var argv = arguments
        if let user {
            argv = ["/usr/bin/setpriv", "--reuid=\(user.uid)", "--regid=\(user.gid)", "--clear-groups", "--"] + argv
        }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, output, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        let cArgs: [UnsafeMutablePointer<CChar>?] = argv.map { strdup($0) } + [nil]
        defer { cArgs.forEach { free($0) } }
        var pid: pid_t = 0
        let rc = posix_spawnp(&pid, argv[0], &actions, nil, cArgs, environ)
        guard rc == 0 else { throw XCTSkip("cannot start \(argv[0]): \(String(cString: strerror(rc)))") }
        children.append(pid)
        return Child(pid: pid, output: output)
    }

    /// Waits for a child; nil if it is still running at the timeout (then it is killed).
    @discardableResult
    func wait(_ child: Child, timeout: Double = 20) -> Int32? {
        let deadline = Date().addingTimeInterval(timeout)
        var status: Int32 = 0
        while true {
            let r = waitpid(child.pid, &status, WNOHANG)
            if r == child.pid {
                children.removeAll { $0 == child.pid }
                let signal = status & 0x7f
                return signal == 0 ? (status >> 8) & 0xff : 128 + signal
            }
            if r < 0 { return nil }
            if Date() > deadline {
                kill(child.pid, SIGKILL)
                _ = waitpid(child.pid, &status, 0)
                children.removeAll { $0 == child.pid }
                return nil
            }
            usleep(2_000)
        }
    }

    /// Whether the child still runs (a zombie does not); never reaps it, so `wait` still gets its status.
    func isRunning(_ child: Child) -> Bool {
        guard let stat = try? String(contentsOfFile: "/proc/\(child.pid)/stat", encoding: .utf8),
              let close = stat.lastIndex(of: ")") else { return false }
        return stat[stat.index(after: close)...].dropFirst().first != "Z"
    }

    /// Runs a command to completion and returns (status, output).
    func run(_ arguments: [String], user: (uid: uid_t, gid: gid_t)? = nil, timeout: Double = 20) throws -> (status: Int32?, output: String) {
        let child = try start(arguments, user: user)
        let status = wait(child, timeout: timeout)
        return (status, child.text)
    }

    /// Polls `condition` until true or the timeout; returns whether it became true.
    @discardableResult
    func eventually(timeout: Double = 10, _ condition: () -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while !condition() {
            if Date() > deadline { return false }
            usleep(2_000)
        }
        return true
    }

    /// The presenters the coordinator knows.
    var presenterCount: Int { daemon.coordinator.presenterCount }

    func recorded(_ match: (CoordinationEvent.Kind) -> Bool) -> [CoordinationEvent] {
        events.list.withLock { $0.filter { match($0.kind) } }
    }
}

/// A raw protocol client for tests that need full control (no answers, hostile frames).
final class RawClient {
    /// The connection's descriptor; -1 once `disconnect()`ed.
    private(set) var fd: Int32
    private var decoder = FrameDecoder()
    private var nextID: UInt64 = 1

    init(socket path: String) throws {
        fd = UnixSocket.connect(path)
        guard fd >= 0 else { throw XCTSkip("connect \(path): \(String(cString: strerror(errno)))") }
        var timeout = timeval(tv_sec: 10, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    }

    /// Closes the connection, as a client that goes away does; its descriptor is closed once.
    /// Before, a test's own `close(fd)` and then the deinit's closed the number twice: in between
    /// the kernel had handed it out again, in this process that runs the daemon, to one of the
    /// daemon's own descriptors (under strace: the inode table's mount anchor, opened 2 ms after
    /// the test's close; the daemon's close of it at unmount then failed with EBADF), and the
    /// daemon's later close of such a number closes whatever holds it by then, another test's
    /// socket included (CI: a fresh `RawClient`'s hello failed at once).
    func disconnect() {
        guard fd >= 0 else { return }
        close(fd)
        fd = -1
    }

    deinit { disconnect() }

    func id() -> ControlProtocol.RequestID {
        nextID += 1
        return ControlProtocol.RequestID(nextID)
    }

    func send(_ message: ControlMessage) { sendBytes(message.encodedFrame()) }

    func sendBytes(_ bytes: [UInt8]) {
        _ = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
    }

    /// The next message, or nil when the connection closed or 10 s passed.
    func receive() -> ControlMessage? {
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            if let payload = try? decoder.nextFrame() { return try? ControlMessage.decode(payload: payload) }
            let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            // A signal handled anywhere in the test process (a child's SIGCHLD) can land on this
            // thread: with SO_RCVTIMEO set, a socket read is then never restarted (signal(7)).
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { return nil }
            decoder.append(buffer[0..<n])
        }
    }

    /// Sends a request and returns the reply that echoes its id (skipping asks and notifications).
    func request(_ build: (ControlProtocol.RequestID) -> ControlMessage) -> ControlMessage? {
        let id = id()
        send(build(id))
        while let message = receive() {
            if message.requestID == id { return message }
        }
        return nil
    }

    func hello() -> Bool {
        if case .welcome = request({ .hello(Hello(id: $0, client: "test")) }) { return true }
        return false
    }
}
