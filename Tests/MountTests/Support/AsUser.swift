// Running one operation as another user: fork, drop to the given uid/gid in the child, run the
// operation, send the outcome back over a pipe. The child only makes syscalls and writes to the
// pipe before `_exit`, so forking the (multithreaded) test process is safe in practice.
import Foundation
import Glibc
import XCTest

/// The uid/gid of `nobody` on Debian, the unprivileged user the permission tests act as.
let nobodyUID: uid_t = 65534
let nobodyGID: gid_t = 65534

/// What an operation run as another user reported.
struct ChildOutcome: Equatable, CustomStringConvertible {
    var outcome: Outcome
    var data: [UInt8] = []
    var description: String { data.isEmpty ? outcome.description : "\(outcome) data=\(data.count)B" }
}

/// Runs `body` in a child process with credentials uid/gid and supplementary groups `groups` (none
/// unless given) and returns its outcome. A child that could not switch user or crashed yields `ECHILD`.
func asUser(uid: uid_t = nobodyUID, gid: gid_t = nobodyGID, groups: [gid_t] = [], _ body: () -> ChildOutcome) -> ChildOutcome {
    var fds: [Int32] = [-1, -1]
    guard pipe(&fds) == 0 else { return ChildOutcome(outcome: .failure(errno)) }
    let pid = fork()
    if pid == 0 {
        close(fds[0])
        guard setgroups(groups.count, groups) == 0, setgid(gid) == 0, setuid(uid) == 0, getuid() == uid, geteuid() == uid else { _exit(120) }
        let result = body()
        var header: [Int64] = [Int64(result.outcome.ret), Int64(result.outcome.err), Int64(result.data.count)]
        _ = header.withUnsafeMutableBytes { write(fds[1], $0.baseAddress, $0.count) }
        var offset = 0
        while offset < result.data.count {
            let n = result.data.withUnsafeBytes { write(fds[1], $0.baseAddress! + offset, $0.count - offset) }
            if n <= 0 { _exit(121) }
            offset += n
        }
        _exit(0)
    }
    close(fds[1])
    defer { close(fds[0]) }
    guard pid > 0 else { return ChildOutcome(outcome: .failure(errno)) }
    var bytes: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 65536)
    while true {
        let n = chunk.withUnsafeMutableBytes { read(fds[0], $0.baseAddress, $0.count) }
        if n < 0 && errno == EINTR { continue }
        if n <= 0 { break }
        bytes.append(contentsOf: chunk[0..<n])
    }
    var status: Int32 = 0
    while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
    guard status == 0, bytes.count >= 24 else { return ChildOutcome(outcome: .failure(ECHILD)) }
    let header = bytes.withUnsafeBytes { raw in (0..<3).map { raw.load(fromByteOffset: $0 * 8, as: Int64.self) } }
    let data = Array(bytes[24...])
    guard data.count == Int(header[2]) else { return ChildOutcome(outcome: .failure(ECHILD)) }
    return ChildOutcome(outcome: Outcome(ret: Int(header[0]), err: Int32(header[1])), data: data)
}

/// A Python script run as `uid` (group nobody, no supplementary groups) under setpriv, which prints
/// one line of space-separated fields once it has done its part and then holds what it made (its
/// descriptors, its connections) until it is ended. The tests that hold a share of the daemon's
/// descriptors as another user subclass it to name the fields.
class ScriptAsUser {
    let uid: uid_t
    let pid: pid_t
    let output: String

    init(uid: uid_t, script: String, arguments: [String]) throws {
        self.uid = uid
        output = NSTemporaryDirectory() + "/coordfs-as-\(uid)-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        guard let setpriv = Spawn.which("setpriv"), let python = Spawn.which("/usr/bin/python3") ?? Spawn.which("python3") else {
            throw XCTSkip("setpriv and python3 are needed")
        }
        pid = try Spawn.start(setpriv, ["--reuid=\(uid)", "--regid=65534", "--clear-groups", python, "-c", script] + arguments,
                              stdout: output, stderr: output + ".err")
    }

    /// The `count` fields of the line it printed (nil when it printed something else, exited first,
    /// or printed nothing within `timeout` seconds).
    func fields(_ count: Int, within timeout: TimeInterval) -> [String]? {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if let text = try? String(contentsOfFile: output, encoding: .utf8), text.hasSuffix("\n") {
                let f = text.split(separator: " ").map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }
                return f.count == count ? f : nil
            }
            if kill(pid, 0) != 0 { break }
            usleep(20_000)
        }
        return nil
    }

    /// What it wrote to its standard error.
    var errors: String { (try? String(contentsOfFile: output + ".err", encoding: .utf8)) ?? "" }

    private var ended = false
    /// Ends it and waits for it (what it holds closes as it exits); once (its pid is not signalled
    /// again after it was reaped).
    func end() {
        guard !ended else { return }
        ended = true
        kill(pid, SIGKILL)
        _ = Spawn.wait(pid, timeout: 10)
        unlink(output); unlink(output + ".err")
    }
    deinit { end() }
}
