import Glibc
import FuseKit
import LinuxGNU
import NameBytes

/// Starts a daemon in the foreground or in the background.
///
/// Background: `coordfs mount` checks everything, then starts the daemon as a new program
/// (`/proc/self/exe mount BACKING MOUNTPOINT -f --ready-fd N`, in a session of its own, stdio to the
/// daemon log) and waits until the daemon says through that descriptor that the kernel's INIT is
/// answered, so `coordfs mount` returns only when the mount answers.
///
/// Why exec and not a bare fork: the Swift runtime's once-locks are priority-inheritance futexes that
/// hold their owner's thread id, and each thread caches its id in thread-local storage. A forked child's
/// main thread keeps its parent's id, so the first time another thread waits on a lock that thread holds,
/// the kernel cannot find the owner (ESRCH for the waiter, EPERM for the holder's unlock) and both spin
/// forever at full CPU. A new program image starts with a fresh runtime.
public enum DaemonLauncher {
    /// Runs the daemon here until unmounted; returns the exit status. With `readyFD`, says "ok" there
    /// once the mount answers, or why its services could not start (the background starter waits
    /// for either).
    public static func runInForeground(_ daemon: Daemon, readyFD: Int32? = nil) throws(MountError) -> Int32 {
        let mountpoint = daemon.plan.mountpoint, backing = daemon.plan.backing
        try daemon.mount(onReady: {
            sayOnStandardError("coordfs: mounted \(backing) on \(mountpoint) (pid \(getpid()))")
            if let readyFD { tell(readyFD, "ok") }
        })
        return daemon.serve(onStartFailure: { why in if let readyFD { tell(readyFD, why) } })
    }

    /// Ends a daemon process once `serve()` returned: everything durable is done by then (log closed,
    /// pid file removed), so the process goes without running exit handlers or unwinding Swift objects
    /// while threads of the services may still be finishing.
    public static func end(_ status: Int32) -> Never {
        fflush(nil)
        _exit(status)
    }

    /// Closes every descriptor above stderr that this process inherited, but `keeping`. A daemon must
    /// not keep its starter's pipes open (a caller reading our output would wait for EOF forever),
    /// sockets or files. Call it first, before the daemon opens anything of its own.
    public static func closeInheritedDescriptors(keeping: Int32? = nil) {
        guard let dir = opendir("/proc/self/fd") else { return }
        let own = dirfd(dir)
        var inherited: [Int32] = []
        while let entry = readdir(dir) {
            let name = withUnsafePointer(to: &entry.pointee.d_name) { $0.withMemoryRebound(to: CChar.self, capacity: 256) { String(cString: $0) } }
            if let fd = Int32(name), fd > 2, fd != own, fd != keeping { inherited.append(fd) }
        }
        closedir(dir)
        for fd in inherited { close(fd) }
    }

    /// The first steps of a daemon started by `startInBackground`: a session of its own (no terminal's
    /// SIGHUP or Ctrl-C reaches it) and no hold on the starter's working directory.
    public static func detach() {
        setsid()
        chdir("/")
    }

    /// Writes `text` to the starter's descriptor and closes it: "ok", or why the daemon could not mount.
    public static func tell(_ fd: Int32, _ text: String) {
        var bytes = Array(text.utf8)
        while !bytes.isEmpty {
            let n = retryingEINTR { write(fd, bytes, bytes.count) }
            if n <= 0 { break }
            bytes.removeFirst(n)
        }
        close(fd)
    }

    /// Starts the daemon for `plan` as a new program in the background and waits until its mount
    /// answers. `options` are the `-o` lists as the user gave them.
    public static func startInBackground(_ plan: MountPlan, options: [String], timeoutSeconds: Int32 = 30) throws(MountError) {
        var state = plan.state
        if let warning = try state.hold() { sayOnStandardError("coordfs: warning: \(warning)") }
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else { throw .system("pipe: \(String(cString: strerror(errno)))") }
        let readEnd = fds[0], writeEnd = fds[1]
        for fd in fds { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) } // only the daemon's copy (dup2) stays open
        defer { close(readEnd) }
        // The daemon finds the pipe's write end at this number (dup2 clears close-on-exec).
        let childReady: Int32 = 3
        var words = ["coordfs", "mount", plan.backing, plan.mountpoint]
        for o in options { words += ["-o", o] }
        words += ["-f", "--ready-fd", String(childReady)]
        let pid: pid_t
        do {
            pid = try spawn(words, readyFD: writeEnd, as: childReady, log: state.io.daemonLog)
        } catch {
            close(writeEnd)
            throw error
        }
        close(writeEnd)

        var answer: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        var pfd = pollfd(fd: readEnd, events: Int16(POLLIN), revents: 0)
        let deadline = ContinuousClock.now + .seconds(Int(timeoutSeconds))
        var ended = false   // the daemon closed its end: it answered, or died
        while case let left = deadline - .now, left > .zero {
            let r = poll(&pfd, 1, Int32(left.components.seconds * 1000 + left.components.attoseconds / 1_000_000_000_000_000 + 1))
            if r < 0 && errno == EINTR { continue }
            if r <= 0 { break }
            let n = read(readEnd, &buffer, buffer.count)
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { ended = true; break }
            answer += buffer[0..<n]
        }
        let said = String(decoding: answer, as: UTF8.self)
        if said == "ok" { return }
        // The daemon could not mount, died or hung before answering: make sure it is gone, take down
        // whatever it mounted, and say why.
        if !ended || said.isEmpty { kill(pid, SIGKILL) }
        var status: Int32 = 0
        _ = retryingEINTR { waitpid(pid, &status, 0) }
        if MountTable.coordfsMount(at: plan.mountpoint) != nil { _ = plan.mountpoint.withNameCString { umount2($0, Int32(MNT_DETACH)) } }
        if !said.isEmpty { throw .system(said) }
        let tail = readWholeFile(state.io.daemonLog).map { String($0.suffix(2000)) } ?? ""
        throw .system("the coordfs daemon did not come up\(tail.isEmpty ? "" : ":\n" + tail)")
    }

    /// posix_spawn of this program with `words`: stdin /dev/null, stdout and stderr appended to `log`,
    /// `readyFD` as descriptor `target`, the default signal mask and dispositions.
    private static func spawn(_ words: [String], readyFD: Int32, as target: Int32, log: String) throws(MountError) -> pid_t {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, log, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW, 0o600)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        posix_spawn_file_actions_adddup2(&actions, readyFD, target)
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var empty = sigset_t()
        sigemptyset(&empty)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for s in [SIGINT, SIGTERM, SIGHUP, SIGPIPE] { sigaddset(&defaults, s) }
        posix_spawnattr_setsigmask(&attributes, &empty)
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        let argv: [UnsafeMutablePointer<CChar>?] = words.map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        var pid: pid_t = 0
        // /proc/self/exe: this very binary, even when its file was replaced since it started.
        let rc = posix_spawn(&pid, "/proc/self/exe", &actions, &attributes, argv, environ)
        guard rc == 0 else { throw .system("cannot start the coordfs daemon: \(String(cString: strerror(rc)))") }
        return pid
    }
}
