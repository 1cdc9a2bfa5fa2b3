// The CLI tests drive the built `coordfs` binary: a real background mount of a temp folder, the
// `watch` and `log` commands as child processes with their output in files (never pipes, so a
// child that keeps a descriptor open cannot hang a test), and a teardown that always unmounts.
import Foundation
import Glibc
import Linux
import TestSupport
import XCTest

/// What a finished command left behind.
struct CommandResult: CustomStringConvertible {
    var status: Int32  // exit status, 128+signal, or -1 when killed at the deadline
    var stdout: String
    var stderr: String

    var lines: [String] { stdout.split(separator: "\n", omittingEmptySubsequences: true).map(String.init) }
    var description: String {
        "exit \(status)" + (stdout.isEmpty ? "" : "\nstdout: \(stdout.prefix(2000))") + (stderr.isEmpty ? "" : "\nstderr: \(stderr.prefix(2000))")
    }
}

/// A child process started in the background (a watcher, a load generator).
final class Child {
    let pid: pid_t
    let stdoutPath: String
    let stderrPath: String
    private(set) var status: Int32?

    init(pid: pid_t, stdoutPath: String, stderrPath: String) {
        self.pid = pid
        self.stdoutPath = stdoutPath
        self.stderrPath = stderrPath
    }

    var stdout: String { (try? String(contentsOfFile: stdoutPath, encoding: .utf8)) ?? "" }
    var stderr: String { (try? String(contentsOfFile: stderrPath, encoding: .utf8)) ?? "" }
    /// Its whole lines of stdout so far (`writtenLines`: a line still being written is not one yet).
    var lines: [String] { status != nil ? stdout.split(separator: "\n").map(String.init) : writtenLines(of: pid) { stdout } }

    /// Waits up to `timeout` seconds for the child to exit; returns its status or nil if it runs on.
    @discardableResult
    func wait(timeout: Double) -> Int32? {
        if let status { return status }
        let deadline = Date().addingTimeInterval(timeout)
        var raw: Int32 = 0
        while true {
            let r = waitpid(pid, &raw, WNOHANG)
            if r == pid {
                let sig = raw & 0x7f
                status = sig == 0 ? (raw >> 8) & 0xff : 128 + sig
                return status
            }
            if r < 0 { status = -1; return status }
            if Date() > deadline { return nil }
            usleep(5_000)
        }
    }

    /// Sends `signal` and waits for the exit (SIGKILL after `timeout`).
    @discardableResult
    func stop(_ signal: Int32 = SIGTERM, timeout: Double = 5) -> Int32 {
        if let status { return status }
        kill(pid, signal)
        if let s = wait(timeout: timeout) { return s }
        kill(pid, SIGKILL)
        return wait(timeout: 5) ?? -1
    }

    /// The last complete line of stdout, read from the file's tail (cheap on a large output).
    var lastLine: String? {
        let fd = open(stdoutPath, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        let size = lseek(fd, 0, SEEK_END)
        let start = max(0, size - 8192)
        var buf = [UInt8](repeating: 0, count: Int(size - start))
        guard pread(fd, &buf, buf.count, start) == buf.count, buf.last == 10 else { return nil }
        let body = buf.dropLast()
        let from = body.lastIndex(of: 10).map { $0 + 1 } ?? body.startIndex
        return String(decoding: body[from...], as: UTF8.self)
    }

    /// Waits until the last line of stdout starts with `prefix` (or the timeout).
    @discardableResult
    func waitForLastLine(prefix: String, timeout: Double) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if lastLine?.hasPrefix(prefix) == true { return true }
            usleep(50_000)
        }
        return false
    }

    /// Waits until stdout holds at least `count` lines (or the timeout); returns them.
    @discardableResult
    func waitForLines(_ count: Int, timeout: Double = 10) -> [String] {
        let deadline = Date().addingTimeInterval(timeout)
        var l = lines
        while l.count < count && Date() < deadline {
            usleep(10_000)
            l = lines
        }
        return l
    }
}

struct CLIError: Error, CustomStringConvertible {
    var description: String
    init(_ d: String) { description = d }
}

/// A temp root with `backing/` and `mnt/`, and helpers to mount, run coordfs and clean up.
class CLITestCase: XCTestCase {
    static let prefix = "coordfs-cli-"
    var root: String!
    var backing: String!
    var mnt: String!
    var binary: String!
    private var children: [Child] = []
    private var sequence = 0

    override func setUpWithError() throws {
        try super.setUpWithError()
        guard access("/dev/fuse", R_OK | W_OK) == 0 else { throw XCTSkip("no /dev/fuse") }
        binary = try Self.coordfsBinary()
        Self.cleanLeftovers()
        var template = Array("/tmp/\(Self.prefix)\(getpid())-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw CLIError("mkdtemp: \(String(cString: strerror(errno)))") }
        root = String(cString: made)
        backing = root + "/backing"
        mnt = root + "/mnt"
        mkdir(backing, 0o755)
        mkdir(mnt, 0o755)
    }

    override func tearDownWithError() throws {
        for c in children { c.stop(SIGKILL) }
        children = []
        if let root {
            let problems = Self.unmountEverything(under: root, binary: binary)
            if Self.mounts(under: root).isEmpty {
                try? FileManager.default.removeItem(atPath: root)
            }
            XCTAssertTrue(problems.isEmpty, "teardown: " + problems.joined(separator: "; "))
        }
        try super.tearDownWithError()
    }

    // MARK: Running coordfs

    /// The coordfs executable: $COORDFS_BIN, else next to the test bundle (same scratch path).
    static func coordfsBinary() throws -> String {
        if let bin = ProcessInfo.processInfo.environment["COORDFS_BIN"], !bin.isEmpty {
            guard access(bin, X_OK) == 0 else { throw CLIError("COORDFS_BIN=\(bin) is not an executable file") }
            return bin
        }
        let bundle = URL(fileURLWithPath: CommandLine.arguments[0]).standardizedFileURL
        let bin = bundle.deletingLastPathComponent().path + "/coordfs"
        guard access(bin, X_OK) == 0 else {
            throw CLIError("the coordfs binary is missing at \(bin): build it with the same --scratch-path first, or set COORDFS_BIN")
        }
        return bin
    }

    private func outputPaths() -> (String, String) {
        sequence += 1
        return (root + "/out-\(sequence)", root + "/err-\(sequence)")
    }

    /// Starts `executable` with stdout/stderr in files under the temp root.
    func start(_ executable: String, _ arguments: [String], environment: [String: String] = [:]) throws -> Child {
        let (out, err) = outputPaths()
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, out, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        posix_spawn_file_actions_addopen(&actions, 2, err, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        let argv: [UnsafeMutablePointer<CChar>?] = ([executable] + arguments).map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        var env = ProcessInfo.processInfo.environment
        env["NO_COLOR"] = nil
        for (k, v) in environment { env[k] = v }
        let envp: [UnsafeMutablePointer<CChar>?] = env.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { envp.forEach { free($0) } }
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, executable, &actions, nil, argv, envp)
        guard rc == 0 else { throw CLIError("cannot start \(executable): \(String(cString: strerror(rc)))") }
        let child = Child(pid: pid, stdoutPath: out, stderrPath: err)
        children.append(child)
        return child
    }

    /// Starts `coordfs ARGS...` in the background.
    func startCoordfs(_ arguments: [String]) throws -> Child { try start(binary, arguments) }

    /// Starts `executable` in a mount namespace of its own, a private copy of this one (so mounts
    /// coming and going elsewhere do not show in it), where every FUSE mount but `mountpoint` is
    /// detached before `executable` starts. A copy of another test's mount would keep that mount's
    /// daemon alive after its own `coordfs unmount` until this namespace ends (the kernel ends a
    /// FUSE connection with its last mount), which disturbs tests running alongside.
    func startInOwnMountNamespace(keeping mountpoint: String, _ executable: String, _ arguments: [String]) throws -> Child {
        try start("/usr/bin/unshare", ["--mount", "--propagation", "private", "--"]
                  + OwnMountNamespace.detachingOtherFUSEMounts(keeping: mountpoint, executable, arguments))
    }

    /// Runs a command to completion (killed after `timeout`).
    func run(_ executable: String, _ arguments: [String], timeout: Double = 60) -> CommandResult {
        let child: Child
        do { child = try start(executable, arguments) } catch {
            return CommandResult(status: 127, stdout: "", stderr: "\(error)")
        }
        let status = child.wait(timeout: timeout) ?? child.stop(SIGKILL)
        return CommandResult(status: status, stdout: child.stdout, stderr: child.stderr)
    }

    @discardableResult
    func coordfs(_ arguments: String..., timeout: Double = 60) -> CommandResult { run(binary, arguments, timeout: timeout) }
    func coordfs(arguments: [String], timeout: Double = 60) -> CommandResult { run(binary, arguments, timeout: timeout) }

    /// `setpriv`'s arguments that run what follows as `uid` (its own group, no other groups).
    func user(_ uid: Int) -> [String] { ["--reuid=\(uid)", "--regid=\(uid)", "--clear-groups", "--"] }

    /// `coordfs ARGUMENTS` as `uid`.
    func coordfs(as uid: Int, _ arguments: String...) -> CommandResult {
        run("/usr/bin/setpriv", user(uid) + [binary] + arguments, timeout: 30)
    }

    /// Runs `/bin/sh -c script` (for pipes: `coordfs ... | jq ...`) with $COORDFS set.
    func sh(_ script: String, timeout: Double = 60) -> CommandResult {
        run("/bin/sh", ["-c", "COORDFS='\(binary!)'; " + script], timeout: timeout)
    }

    /// `coordfs present MNT/relative [--unsaved]` in the background, once it has registered.
    func present(_ relative: String, unsaved: Bool = false) throws -> Child {
        let child = try startCoordfs(["present", mnt + "/" + relative] + (unsaved ? ["--unsaved"] : []))
        let deadline = Date().addingTimeInterval(10)
        while !child.lines.contains(where: { $0.hasPrefix("registered") }) && Date() < deadline { usleep(20_000) }
        guard child.lines.contains(where: { $0.hasPrefix("registered") }) else {
            throw CLIError("coordfs present \(relative) did not register: \(child.stdout) \(child.stderr)")
        }
        return child
    }

    // MARK: Mounting

    /// `coordfs mount BACKING MNT [-o options]` (background daemon); fails the test if it fails.
    func mount(options: [String] = [], file: StaticString = #filePath, line: UInt = #line) throws {
        // `make test`'s second pass serves the suites through the other transport.
        var options = options
        if let t = ProcessInfo.processInfo.environment["COORDFS_TEST_TRANSPORT"], !options.contains(where: { $0.hasPrefix("transport=") }) {
            options.append("transport=" + t)
        }
        let args = ["mount", backing!, mnt!] + (options.isEmpty ? [] : ["-o", options.joined(separator: ",")])
        let r = coordfs(arguments: args)
        guard r.status == 0, Self.mounts(under: root).contains(mnt) else {
            throw CLIError("`coordfs \(args.joined(separator: " "))` failed: \(r)")
        }
    }

    func unmount() {
        let r = coordfs("unmount", mnt)
        XCTAssertEqual(r.status, 0, "coordfs unmount: \(r)")
    }

    /// The pid file in the state folder `state` (the one-host `BACKING/.coordfs` by default) as
    /// the CLI reads it (`DaemonPIDFile`: the pid, its start and boot), nil without one.
    func daemonPIDFile(in state: String? = nil) -> DaemonPIDFile? {
        DaemonPIDFile.read((state ?? backing + "/.coordfs") + "/daemon.pid")
    }

    /// The running daemon's pid (from BACKING/.coordfs/daemon.pid).
    func daemonPID() -> pid_t? {
        guard let daemon = daemonPIDFile(), daemon.isRunning else { return nil }
        return daemon.pid
    }

    /// Every FUSE mountpoint at or under `root` (/proc/self/mountinfo).
    static func mounts(under root: String) -> [String] {
        guard let text = try? String(contentsOfFile: "/proc/self/mountinfo", encoding: .utf8) else { return [] }
        return text.split(separator: "\n").compactMap { line -> String? in
            let f = line.split(separator: " ")
            guard f.count > 4 else { return nil }
            let m = unescapeMountInfo(f[4])
            return m == root || m.hasPrefix(root + "/") ? m : nil
        }
    }

    /// A mountinfo field with its octal escapes (`\040` space, `\011` tab, `\012` newline, `\134`
    /// backslash) decoded.
    static func unescapeMountInfo(_ field: Substring) -> String {
        let u = Array(field.utf8)
        var bytes: [UInt8] = []
        var i = 0
        while i < u.count {
            if u[i] == UInt8(ascii: "\\"), i + 3 < u.count, u[(i + 1)...(i + 3)].allSatisfy({ (48...55).contains($0) }) {
                bytes.append(u[(i + 1)...(i + 3)].reduce(0) { $0 &* 8 &+ ($1 - 48) })
                i += 4
            } else {
                bytes.append(u[i])
                i += 1
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// `coordfs unmount`, then harder; waits for the daemons to exit. Returns what did not work.
    static func unmountEverything(under root: String, binary: String?) -> [String] {
        var problems: [String] = []
        for m in mounts(under: root).reversed() {
            let daemon = DaemonPIDFile.read(root + "/backing/.coordfs/daemon.pid")
            var proper = false
            if let binary {
                var child: pid_t = 0
                let argv: [UnsafeMutablePointer<CChar>?] = [strdup(binary), strdup("unmount"), strdup(m), nil]
                defer { argv.forEach { free($0) } }
                if posix_spawn(&child, binary, nil, nil, argv, environ) == 0 {
                    var st: Int32 = 0
                    waitpid(child, &st, 0)
                    proper = st == 0
                }
            }
            if !proper || mounts(under: root).contains(m) {
                problems.append("`coordfs unmount \(m)` did not unmount")
                if umount2(m, Int32(MNT_DETACH)) != 0 { problems.append("umount -l \(m): \(String(cString: strerror(errno)))") }
            }
            if let daemon {
                // Ended, not reaped: init reaps the daemon when it gets to it (seconds later here). By
                // pid and start: a killed daemon's pid may be another process's by now.
                if !ProcessEnd.wait(daemon.pid, startedAt: daemon.start, timeout: 10) {
                    kill(daemon.pid, SIGKILL); problems.append("daemon \(daemon.pid) outlived its unmount")
                }
            }
        }
        return problems
    }

    /// Detaches mounts left under /tmp by earlier runs whose test process is gone.
    static func cleanLeftovers() {
        guard let items = try? FileManager.default.contentsOfDirectory(atPath: "/tmp") else { return }
        for item in items where item.hasPrefix(prefix) {
            let pidPart = item.dropFirst(prefix.count).split(separator: "-").first.flatMap { pid_t($0) }
            guard let owner = pidPart, owner != getpid(), kill(owner, 0) != 0 else { continue }
            let dir = "/tmp/" + item
            for m in mounts(under: dir).reversed() { umount2(m, Int32(MNT_DETACH)) }
            if mounts(under: dir).isEmpty { try? FileManager.default.removeItem(atPath: dir) }
        }
    }

    // MARK: Records

    /// Parses `--json` output: one object per line; fails the test on a line that is not one.
    func records(_ lines: [String], file: StaticString = #filePath, line: UInt = #line) -> [Record] {
        lines.compactMap { text in
            guard let data = text.data(using: .utf8),
                  let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
                  let r = Record(object) else {
                XCTFail("not a JSON record: \(text.prefix(300))", file: file, line: line)
                return nil
            }
            return r
        }
    }

    /// `coordfs log ARGS --json`, parsed.
    func log(_ arguments: [String] = [], file: StaticString = #filePath, line: UInt = #line) -> [Record] {
        let r = coordfs(arguments: ["log", mnt] + arguments + ["--json"])
        XCTAssertEqual(r.status, 0, "coordfs log: \(r)", file: file, line: line)
        return records(r.lines, file: file, line: line)
    }

    /// Asserts seqs increase by exactly one (gap records stand for their whole range).
    func assertContinuous(_ records: [Record], from first: UInt64? = nil, _ context: String,
                          file: StaticString = #filePath, line: UInt = #line) {
        guard var expected = first ?? records.first.map({ $0.rangeStart }) else { return }
        for r in records {
            let start = r.rangeStart
            if start != expected {
                return XCTFail("\(context): record \(r.seq) (\(r.kind)) follows \(expected - 1)", file: file, line: line)
            }
            expected = r.seq + 1
        }
    }
}

/// One JSON record as the tests look at it.
struct Record: CustomStringConvertible {
    var seq: UInt64
    var time: String
    var kind: String
    var path: String
    var oldPath: String?
    var pid: Int32?
    var uid: UInt32?
    var executable: String?
    var details: [String: Any]
    var json: [String: Any]

    init?(_ o: [String: Any]) {
        guard let seq = (o["seq"] as? NSNumber)?.uint64Value, let time = o["time"] as? String,
              let kind = o["kind"] as? String, let path = o["path"] as? String else { return nil }
        self.seq = seq
        self.time = time
        self.kind = kind
        self.path = path
        oldPath = o["oldPath"] as? String
        let actor = o["actor"] as? [String: Any]
        pid = (actor?["pid"] as? NSNumber)?.int32Value
        uid = (actor?["uid"] as? NSNumber)?.uint32Value
        executable = actor?["executable"] as? String
        details = o["details"] as? [String: Any] ?? [:]
        json = o
    }

    var requestID: UInt64? { (details["requestID"] as? NSNumber)?.uint64Value }
    var gapFrom: UInt64? { (details["gapFrom"] as? NSNumber)?.uint64Value }
    var gapTo: UInt64? { (details["gapTo"] as? NSNumber)?.uint64Value }
    /// The first seq this record stands for: a `gap` record covers gapFrom...seq.
    var rangeStart: UInt64 { kind == "gap" ? (gapFrom ?? seq) : seq }
    var reason: String? { details["reason"] as? String }
    var intent: String? { details["intent"] as? String }
    var options: [String] { details["options"] as? [String] ?? [] }

    var description: String { "\(seq) \(kind) \(oldPath.map { $0 + " -> " } ?? "")\(path)" }
}
