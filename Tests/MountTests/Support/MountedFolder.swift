// The mount fixture: a private temp root holding `backing/`, `native/` and `mnt/`, backing
// mounted on mnt with the real coordfs binary, and a teardown that always leaves the machine
// clean (unmounted, daemon gone, folder removed), even after a failed or crashed test.
import Foundation
import Glibc

/// What the suites mount on `mnt/`. `coordfs` is the default; the others exist to develop and
/// sanity-check the suite itself (`COORDFS_MOUNT_TARGET=native` or `=passthrough:/path/to/passthrough_ll`).
enum MountTarget: CustomStringConvertible {
    /// The real thing: `coordfs mount BACKING MNT -o OPTIONS`.
    case coordfs(binary: String)
    /// libfuse's passthrough_ll example, a reference FUSE passthrough (no state folder).
    case passthrough(binary: String)
    /// No mount at all: `mnt` is the backing folder. Every comparison must hold trivially.
    case native

    var description: String {
        switch self {
        case .coordfs(let b): return "coordfs (\(b))"
        case .passthrough(let b): return "passthrough_ll (\(b))"
        case .native: return "native folder (no mount)"
        }
    }

    var isCoordFS: Bool { if case .coordfs = self { return true }; return false }
    var isMount: Bool { if case .native = self { return false }; return true }

    static func fromEnvironment() throws -> MountTarget {
        let env = ProcessInfo.processInfo.environment
        let spec = env["COORDFS_MOUNT_TARGET"] ?? "coordfs"
        if spec == "native" { return .native }
        if spec.hasPrefix("passthrough:") { return .passthrough(binary: String(spec.dropFirst("passthrough:".count))) }
        guard spec == "coordfs" else { throw SpawnError(message: "COORDFS_MOUNT_TARGET must be coordfs, native or passthrough:PATH, not \(spec)") }
        return .coordfs(binary: try coordfsBinary())
    }

    /// The coordfs executable: $COORDFS_BIN, else next to the test bundle in the build products.
    static func coordfsBinary() throws -> String {
        if let bin = ProcessInfo.processInfo.environment["COORDFS_BIN"], !bin.isEmpty {
            guard access(bin, X_OK) == 0 else { throw SpawnError(message: "COORDFS_BIN=\(bin) is not an executable file") }
            return bin
        }
        let bundle = URL(fileURLWithPath: CommandLine.arguments[0]).standardizedFileURL
        let products = bundle.deletingLastPathComponent().path
        let bin = products + "/coordfs"
        guard access(bin, X_OK) == 0 else {
            throw SpawnError(message: "the coordfs binary is missing at \(bin): run `swift build` first (the mount tests drive the real binary), or set COORDFS_BIN")
        }
        return bin
    }
}

/// A temp root with `backing/`, `native/` and `mnt/`, and the mount of backing on mnt.
final class MountedFolder {
    static let prefix = "coordfs-mounttests-"

    /// Where temp roots go: $COORDFS_TEST_TMPDIR, else /tmp.
    static var base: String {
        let dir = ProcessInfo.processInfo.environment["COORDFS_TEST_TMPDIR"] ?? "/tmp"
        return dir.hasSuffix("/") ? String(dir.dropLast()) : dir
    }

    let target: MountTarget
    let root: String
    let backing: String
    let native: String
    /// Where the suites operate: the mountpoint, or the backing folder itself for `.native`.
    let mnt: String
    /// The folder used as the mountpoint (also for `.native`, where it stays empty).
    let mountpoint: String
    private(set) var daemonPids: [pid_t] = []
    /// The FUSE connection of the main mount (`Mounts.fuseConnection`), for `whereItWaits`.
    private(set) var connection: UInt64?
    private(set) var mounted = false

    init(target: MountTarget) throws {
        self.target = target
        var template = Array("\(Self.base)/\(Self.prefix)\(getpid())-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else {
            throw SpawnError(message: "mkdtemp under \(Self.base): \(String(cString: strerror(errno)))")
        }
        root = String(cString: made)
        // Traversable by the non-root user the permission tests switch to.
        chmod(root, 0o755)
        backing = root + "/backing"
        native = root + "/native"
        mountpoint = root + "/mnt"
        mnt = target.isMount ? mountpoint : backing
        for dir in [backing, native, mountpoint] { mkdir(dir, 0o755); chmod(dir, 0o755) }
    }

    /// The command line that mounts `backing` on `mountpoint` with `options`.
    func mountCommand(options: [String], backing: String? = nil, mountpoint: String? = nil) -> (String, [String])? {
        let b = backing ?? self.backing, m = mountpoint ?? self.mountpoint
        switch target {
        case .coordfs(let bin):
            // `make test`'s second pass serves the suites through the other transport.
            var options = options
            if let t = ProcessInfo.processInfo.environment["COORDFS_TEST_TRANSPORT"], !options.contains(where: { $0.hasPrefix("transport=") }) {
                options.append("transport=" + t)
            }
            return (bin, ["mount", b, m] + (options.isEmpty ? [] : ["-o", options.joined(separator: ",")]))
        case .passthrough(let bin):
            return (bin, ["-o", (["source=\(b)", "default_permissions"] + options).joined(separator: ","), m])
        case .native:
            return nil
        }
    }

    /// Mounts backing on mnt and waits until the kernel lists a FUSE mount there.
    /// `descriptorLimit`: the daemon runs with RLIMIT_NOFILE at that (soft and hard, or the soft
    /// limit `softDescriptorLimit` when given), without CAP_SYS_RESOURCE so it cannot raise it
    /// beyond the hard limit (`setpriv`, `prlimit`).
    func mount(options: [String] = ["allow_other"], descriptorLimit: Int? = nil, softDescriptorLimit: Int? = nil) throws {
        guard var (exe, args) = mountCommand(options: options) else { mounted = false; return }
        if let descriptorLimit {
            guard let setpriv = Spawn.which("setpriv"), let prlimit = Spawn.which("prlimit") else {
                throw SpawnError(message: "setpriv and prlimit (util-linux) are needed to mount with a lower descriptor limit")
            }
            args = ["--bounding-set=-sys_resource", prlimit,
                    "--nofile=\(softDescriptorLimit ?? descriptorLimit):\(descriptorLimit)", exe] + args
            exe = setpriv
        }
        let result = Spawn.run(exe, args, timeout: 60)
        guard result.status == 0 else {
            throw SpawnError(message: "`\(([exe] + args).joined(separator: " "))` failed: \(result)")
        }
        guard let entry = Mounts.entry(at: mountpoint), entry.fstype.hasPrefix("fuse") else {
            throw SpawnError(message: "`\(([exe] + args).joined(separator: " "))` exited 0 but \(mountpoint) is not a FUSE mount (/proc/mounts)")
        }
        mounted = true
        daemonPids = Mounts.daemons(servingPath: mountpoint, programs: ["coordfs", "passthrough_ll"])
        connection = Mounts.fuseConnection(at: mountpoint)
    }

    /// The daemon's RLIMIT_NOFILE soft limit (/proc/PID/limits), or nil.
    func daemonDescriptorLimit() -> Int? {
        guard let pid = daemonPids.first, let text = try? String(contentsOfFile: "/proc/\(pid)/limits", encoding: .utf8),
              let line = text.split(separator: "\n").first(where: { $0.hasPrefix("Max open files") }) else { return nil }
        return line.split(separator: " ", omittingEmptySubsequences: true).dropFirst(3).first.flatMap { Int($0) }
    }

    /// How many descriptors the daemon holds now (/proc/PID/fd), or nil.
    func daemonOpenDescriptors() -> Int? {
        guard let pid = daemonPids.first else { return nil }
        return (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd"))?.count
    }

    /// How many of the daemon's descriptors are on items in the backing folder (nodes, open files,
    /// directory streams), the state folder left out; nil when the daemon is unknown.
    func daemonDescriptorsInBacking() -> Int? {
        guard let pid = daemonPids.first, let fds = try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd") else { return nil }
        let state = backing + "/.coordfs"
        return fds.filter { fd in
            guard let target = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/fd/\(fd)") else { return false }
            return (target == backing || target.hasPrefix(backing + "/")) && target != state && !target.hasPrefix(state + "/")
        }.count
    }

    /// Unmounts everything under `root` (the main mount and any a test added) and hands the
    /// daemons to `Exiting`, which makes sure they end. The kernel unmount is done directly
    /// (`fusermount3 -u`): `coordfs unmount` also waits for its daemon to exit, which costs
    /// seconds per test; MountCommandTests covers `coordfs unmount` itself. Returns a problem
    /// description when the plain unmount did not work (a test left files open, say).
    @discardableResult
    func unmount() -> [String] {
        var problems: [String] = []
        let mine = Mounts.list().filter { $0.mountpoint == root || $0.mountpoint.hasPrefix(root + "/") }
        var unmountedDaemons: [pid_t] = []
        for entry in mine.reversed() where Mounts.isMounted(entry.mountpoint) {
            let daemons = Mounts.daemons(servingPath: entry.mountpoint, programs: ["coordfs", "passthrough_ll"])
            // A file system a test mounted itself (a loop-mounted image as the backing folder): once
            // the daemons above it have ended.
            let tool = entry.fstype.hasPrefix("fuse") ? "fusermount3" : "umount"
            if tool == "umount" {
                let deadline = Date().addingTimeInterval(10)
                while unmountedDaemons.contains(where: Mounts.isAlive) && Date() < deadline { usleep(10_000) }
            }
            var r = Spawn.which(tool).map { Spawn.run($0, tool == "umount" ? [entry.mountpoint] : ["-u", entry.mountpoint], timeout: 20) }
            // The kernel lets go of an ended daemon's fanotify marks a moment later (EBUSY until then).
            for _ in 0..<50 where tool == "umount" && r?.status != 0 && Mounts.isMounted(entry.mountpoint) {
                usleep(100_000)
                r = Spawn.which(tool).map { Spawn.run($0, [entry.mountpoint], timeout: 20) }
            }
            if Mounts.isMounted(entry.mountpoint) {
                problems.append("`\(tool) \(entry.mountpoint)`: \(r.map(String.init(describing:)) ?? "\(tool) not found")")
                // A daemon above it that has not ended: where its threads wait, for the next engineer.
                for pid in Set(unmountedDaemons) where Mounts.isAlive(pid) { problems.append(Self.whereItWaits(pid, log: backing + "/.coordfs/daemon.log", connection: connection)) }
                Self.forceUnmount(entry.mountpoint)
            }
            Exiting.add(daemons + (entry.mountpoint == mountpoint ? daemonPids : []), log: backing + "/.coordfs/daemon.log",
                        connection: entry.mountpoint == mountpoint ? connection : nil)
            unmountedDaemons += daemons + (entry.mountpoint == mountpoint ? daemonPids : [])
        }
        mounted = false
        return problems
    }

    /// A daemon still running after its unmount: each thread's name and the kernel function it
    /// sleeps in (`/proc/PID/task/TID/comm` and `wchan`), the last lines of its log, and whether its
    /// FUSE connection outlived the unmount (`Mounts.connectionState`).
    static func whereItWaits(_ pid: pid_t, log: String, connection: UInt64? = nil) -> String {
        func read(_ path: String) -> String {
            ((try? String(contentsOfFile: path, encoding: .utf8)) ?? "?").trimmingCharacters(in: .whitespacesAndNewlines)
        }
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []
        var waits: [String: Int] = [:]
        for tid in tasks { waits[read("/proc/\(pid)/task/\(tid)/comm") + " in " + read("/proc/\(pid)/task/\(tid)/wchan"), default: 0] += 1 }
        let threads = waits.sorted { $0.key < $1.key }.map { "\($0.value)x \($0.key)" }.joined(separator: ", ")
        let last = read(log).split(separator: "\n").suffix(5).joined(separator: " | ")
        let state = connection.map { "; " + Mounts.connectionState($0) } ?? ""
        return "daemon \(pid) still running after its unmount; threads: \(threads)\(state); its log ends: \(last)"
    }

    /// Unmounts, makes sure no daemon is left, and removes the temp root (only once nothing is
    /// mounted under it: removing through a live mount would delete backing files).
    @discardableResult
    func destroy() -> [String] {
        var problems = unmount()
        let stillMounted = Mounts.list().filter { $0.mountpoint == root || $0.mountpoint.hasPrefix(root + "/") }
        if stillMounted.isEmpty {
            Self.removeTree(root)
        } else {
            problems.append("still mounted, left in place: \(stillMounted.map(\.mountpoint))")
        }
        return problems
    }

    /// fusermount3 -u, then lazy variants, then umount -l; ignores errors, checks /proc/mounts.
    static func forceUnmount(_ path: String) {
        let attempts: [(String, [String])] = [
            ("fusermount3", ["-u", path]), ("fusermount3", ["-uz", path]),
            ("umount", [path]), ("umount", ["-l", path]),
        ]
        for (tool, args) in attempts {
            guard Mounts.isMounted(path) else { return }
            if let exe = Spawn.which(tool) { _ = Spawn.run(exe, args, timeout: 10) }
        }
    }

    /// Waits up to 10 s for each daemon to exit after its unmount, then kills it, saying on stderr
    /// where it waited (`whereItWaits`; callers assert that it ended).
    static func reap(_ pids: [pid_t]) {
        let deadline = Date().addingTimeInterval(10)
        for pid in Set(pids) {
            while Mounts.isAlive(pid) && Date() < deadline { usleep(10_000) }
            if Mounts.isAlive(pid) {
                FileHandle.standardError.write(Data("MountTests: \(whereItWaits(pid, log: "?", connection: nil)); killed\n".utf8))
                kill(pid, SIGKILL)
            }
            var status: Int32 = 0
            _ = waitpid(pid, &status, WNOHANG)   // ours only when started with -f
        }
    }

    static func removeTree(_ path: String) {
        // Make everything writable/traversable first: tests leave 0000 folders behind.
        if let walker = FileManager.default.enumerator(atPath: path) {
            for case let rel as String in walker {
                var st = stat()
                if lstat(path + "/" + rel, &st) == 0 && (st.st_mode & S_IFMT) == S_IFDIR { chmod(path + "/" + rel, 0o755) }
            }
        }
        try? FileManager.default.removeItem(atPath: path)
    }

    /// Cleans what crashed runs left: mounts and temp roots under our prefix whose test process
    /// is gone (or is this process: a previous test of ours that could not unmount). Mounts of
    /// other live test processes are left alone, so two runs can share a machine.
    static func cleanLeftovers() {
        Exiting.check()
        func ownerPid(_ path: String) -> pid_t? {
            guard let r = path.range(of: "/" + prefix) else { return nil }
            let rest = path[r.upperBound...]
            return pid_t(rest.prefix(while: { $0 != "-" }))
        }
        func abandoned(_ path: String) -> Bool {
            guard let pid = ownerPid(path) else { return false }
            return pid == getpid() || !Mounts.isAlive(pid)
        }
        let stale = Mounts.list().filter { $0.mountpoint.hasPrefix(base + "/" + prefix) && abandoned($0.mountpoint) }
        for entry in stale.reversed() {
            let daemons = Mounts.daemons(servingPath: entry.mountpoint, programs: ["coordfs", "passthrough_ll"])
            forceUnmount(entry.mountpoint)
            for pid in daemons { kill(pid, SIGKILL) }
        }
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: base) else { return }
        let mounts = Mounts.list()
        for name in names where name.hasPrefix(prefix) {
            let path = base + "/" + name
            guard abandoned(path), !mounts.contains(where: { $0.mountpoint.hasPrefix(path + "/") || $0.mountpoint == path }) else { continue }
            removeTree(path)
        }
    }
}

/// Daemons whose mount is gone and that are on their way out. Checked at every set-up and at
/// exit: one still alive 10 s after its unmount is killed (and reported on stderr), so no
/// test run leaves a daemon behind.
enum Exiting {
    private static let pending = Mutexed<[(pid: pid_t, since: Date, log: String, connection: UInt64?)]>([])
    private static let atExitInstalled = Mutexed(false)

    /// `log` and `connection`: the daemons' log and FUSE connection, for `whereItWaits`.
    static func add(_ pids: [pid_t], log: String = "?", connection: UInt64? = nil) {
        guard !pids.isEmpty else { return }
        atExitInstalled.mutate { installed in
            if !installed { atexit { Exiting.finish() }; installed = true }
        }
        pending.mutate { list in for pid in Set(pids) where !list.contains(where: { $0.pid == pid }) { list.append((pid, Date(), log, connection)) } }
    }

    /// Forgets daemons that exited; kills those past their 10 s.
    static func check() {
        pending.mutate { list in
            list.removeAll { entry in
                if !Mounts.isAlive(entry.pid) { return true }
                guard Date().timeIntervalSince(entry.since) > 10 else { return false }
                let said = MountedFolder.whereItWaits(entry.pid, log: entry.log, connection: entry.connection)
                FileHandle.standardError.write(Data("MountTests: 10 s after its unmount: \(said); killed\n".utf8))
                kill(entry.pid, SIGKILL)
                return true
            }
        }
    }

    /// At exit: waits for the remaining daemons (10 s at most), then kills what is left.
    static func finish() {
        let deadline = Date().addingTimeInterval(10)
        while !pending.value.isEmpty && Date() < deadline {
            check()
            usleep(20_000)
        }
        for entry in pending.value { kill(entry.pid, SIGKILL) }
    }
}
