// Running the coordfs binary and system tools (fusermount3, umount) from the tests, with a
// deadline and output captured in files rather than pipes: a daemon that forgets to close an
// inherited pipe must not hang the test that started it.
import Foundation
import Glibc
import Linux

/// What a finished command left behind.
struct CommandResult: CustomStringConvertible {
    var status: Int32          // exit status, or 128+signal, or -1 when it was killed at the deadline
    var stdout: String
    var stderr: String
    var timedOut: Bool

    var output: String { stdout + stderr }
    var description: String {
        "exit \(status)\(timedOut ? " (timed out)" : "")" + (output.isEmpty ? "" : ": " + output.trimmingCharacters(in: .whitespacesAndNewlines))
    }
}

enum Spawn {
    /// Starts `executable` with `arguments`; stdout/stderr go to the given files (or /dev/null).
    /// Returns the child's pid.
    static func start(_ executable: String, _ arguments: [String], stdout: String = "/dev/null",
                      stderr: String = "/dev/null") throws -> pid_t {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, stdout, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        posix_spawn_file_actions_addopen(&actions, 2, stderr, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        let argv: [UnsafeMutablePointer<CChar>?] = ([executable] + arguments).map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, executable, &actions, nil, argv, environ)
        guard rc == 0 else { throw SpawnError(message: "cannot start \(executable): \(String(cString: strerror(rc)))") }
        return pid
    }

    /// Waits for `pid` up to `timeout` seconds; kills it (SIGKILL) at the deadline.
    /// Returns the exit status, 128+signal, or nil when it had to be killed.
    static func wait(_ pid: pid_t, timeout: Double) -> Int32? {
        let deadline = Date().addingTimeInterval(timeout)
        var status: Int32 = 0
        while true {
            let r = waitpid(pid, &status, WNOHANG)
            if r == pid { return decode(status) }
            if r < 0 { return -1 }
            if Date() > deadline {
                kill(pid, SIGKILL)
                _ = waitpid(pid, &status, 0)
                return nil
            }
            usleep(5_000)
        }
    }

    private static func decode(_ status: Int32) -> Int32 {
        // WIFEXITED / WEXITSTATUS / WTERMSIG are macros Swift does not import.
        let sig = status & 0x7f
        return sig == 0 ? (status >> 8) & 0xff : 128 + sig
    }

    /// Runs a command to completion (or `timeout`), capturing its output.
    static func run(_ executable: String, _ arguments: [String], timeout: Double = 30) -> CommandResult {
        let dir = NSTemporaryDirectory()
        let tag = "\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        let out = dir + "/coordfs-mt-out-\(tag)", err = dir + "/coordfs-mt-err-\(tag)"
        defer { unlink(out); unlink(err) }
        let pid: pid_t
        do {
            pid = try start(executable, arguments, stdout: out, stderr: err)
        } catch {
            return CommandResult(status: 127, stdout: "", stderr: "\(error)", timedOut: false)
        }
        let status = wait(pid, timeout: timeout)
        let read = { (p: String) in (try? String(contentsOfFile: p, encoding: .utf8)) ?? "" }
        return CommandResult(status: status ?? -1, stdout: read(out), stderr: read(err), timedOut: status == nil)
    }

    /// The first of `candidates` that is an executable file, searched in PATH when not absolute.
    static func which(_ name: String) -> String? {
        if name.hasPrefix("/") { return access(name, X_OK) == 0 ? name : nil }
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/sbin:/usr/bin:/sbin:/bin"
        for dir in path.split(separator: ":") + ["/usr/sbin", "/sbin", "/usr/bin", "/bin"] {
            let candidate = "\(dir)/\(name)"
            if access(candidate, X_OK) == 0 { return candidate }
        }
        return nil
    }
}

struct SpawnError: Error, CustomStringConvertible {
    var message: String
    var description: String { message }
}

/// The kernel's view of mounts (/proc/mounts), and the processes serving them.
enum Mounts {
    struct Entry {
        var source: String
        var mountpoint: String
        var fstype: String
        var options: String
    }

    static func list() -> [Entry] {
        guard let text = try? String(contentsOfFile: "/proc/mounts", encoding: .utf8) else { return [] }
        return text.split(separator: "\n").compactMap { line in
            let f = line.split(separator: " ").map { unescape(String($0)) }
            guard f.count >= 4 else { return nil }
            return Entry(source: f[0], mountpoint: f[1], fstype: f[2], options: f[3])
        }
    }

    /// /proc/mounts writes space, tab, newline and backslash as \ooo.
    private static func unescape(_ s: String) -> String {
        guard s.contains("\\") else { return s }
        var out = [UInt8]()
        let b = Array(s.utf8)
        var i = 0
        while i < b.count {
            if b[i] == UInt8(ascii: "\\"), i + 4 <= b.count,
               let v = UInt8(String(decoding: b[(i + 1)..<(i + 4)], as: UTF8.self), radix: 8) {
                out.append(v); i += 4
            } else {
                out.append(b[i]); i += 1
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// The mount entry whose mountpoint is exactly `path`, the last one when stacked.
    static func entry(at path: String) -> Entry? {
        list().last { $0.mountpoint == path }
    }

    static func isMounted(_ path: String) -> Bool { entry(at: path) != nil }

    /// Pids (other than ours) whose command line names `path` and whose argv[0] ends in one of
    /// `programs`: the daemon serving a mount.
    static func daemons(servingPath path: String, programs: [String]) -> [pid_t] {
        guard let items = try? FileManager.default.contentsOfDirectory(atPath: "/proc") else { return [] }
        var pids: [pid_t] = []
        for item in items {
            guard let pid = pid_t(item), pid != getpid(),
                  let data = FileManager.default.contents(atPath: "/proc/\(item)/cmdline"), !data.isEmpty else { continue }
            let args = data.split(separator: 0).map { String(decoding: $0, as: UTF8.self) }
            guard let argv0 = args.first, programs.contains(where: { argv0.hasSuffix($0) }) else { continue }
            if args.dropFirst().contains(where: { $0 == path || $0.hasSuffix("=" + path) }) { pids.append(pid) }
        }
        return pids
    }

    /// The FUSE connection number (`/sys/fs/fuse/connections/N`) of the mount at `path`: the minor
    /// of its device (major 0); nil when `path` is not there.
    static func fuseConnection(at path: String) -> UInt64? {
        var st = stat()
        guard stat(path, &st) == 0 else { return nil }
        let dev = UInt64(st.st_dev)
        return (dev & 0xff) | ((dev >> 12) & 0xffff_ff00)
    }

    /// Whether the FUSE connection `connection` outlived its unmount, for a daemon that did not end:
    /// its directory in /sys/fs/fuse/connections and its `waiting` count (requests the kernel has
    /// not seen answered), and the mount namespaces that still list the mount (/proc/PID/mountinfo:
    /// the kernel ends the connection only once its last mount goes, and a namespace copied while
    /// it was mounted keeps a mount of its own), each with one process in it.
    static func connectionState(_ connection: UInt64) -> String {
        let connections = "/sys/fs/fuse/connections"
        let kernel: String
        if !isMounted(connections) {
            kernel = "FUSE connection \(connection): \(connections) not mounted (fusectl), cannot tell"
        } else if let waiting = try? String(contentsOfFile: "\(connections)/\(connection)/waiting", encoding: .utf8) {
            kernel = "FUSE connection \(connection) still there, waiting \(waiting.trimmingCharacters(in: .whitespacesAndNewlines))"
        } else {
            kernel = "FUSE connection \(connection) gone"
        }
        var holders: [String: String] = [:]
        let device = "0:\(connection)"
        for item in (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? [] where pid_t(item) != nil {
            guard let ns = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(item)/ns/mnt"), holders[ns] == nil,
                  let info = try? String(contentsOfFile: "/proc/\(item)/mountinfo", encoding: .utf8),
                  info.split(separator: "\n").contains(where: { $0.split(separator: " ").dropFirst(2).first.map(String.init) == device })
            else { continue }
            let comm = ((try? String(contentsOfFile: "/proc/\(item)/comm", encoding: .utf8)) ?? "?").trimmingCharacters(in: .whitespacesAndNewlines)
            holders[ns] = "pid \(item) (\(comm))"
        }
        let held = holders.isEmpty ? "no mount namespace lists the mount" : "the mount is still listed in " + holders.sorted { $0.key < $1.key }.map { "\($0.key) by \($0.value)" }.joined(separator: ", ")
        return kernel + "; " + held
    }

    /// A zombie is dead for our purposes once every thread of it is gone (its other threads share
    /// the descriptor table, so its locks, the event log's writer.lock, are held until the last
    /// ends): the daemon's own rule, `ProcessLife.isRunning`.
    static func isAlive(_ pid: pid_t) -> Bool { ProcessLife.isRunning(pid) }
}

/// A value shared between test threads, guarded by a lock.
final class Mutexed<T>: @unchecked Sendable {
    private var stored: T
    private let lock = NSLock()
    init(_ value: T) { stored = value }
    var value: T { lock.lock(); defer { lock.unlock() }; return stored }
    func mutate(_ body: (inout T) -> Void) { lock.lock(); defer { lock.unlock() }; body(&stored) }
}
