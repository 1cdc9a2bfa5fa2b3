import Glibc
import FuseKit

/// Starts a daemon in the foreground or in the background.
///
/// Background: mount first (no threads yet), then fork; the child becomes the daemon and tells the
/// parent through a pipe once the kernel's INIT is answered, so `coordfs mount` returns only when the
/// mount answers. Forking after the Swift runtime started threads would be unsafe, which is why
/// nothing before `fork()` here starts one.
public enum DaemonLauncher {
    /// Runs the daemon here until unmounted; returns the exit status.
    public static func runInForeground(_ daemon: Daemon) throws(MountError) -> Int32 {
        let mountpoint = daemon.plan.mountpoint, backing = daemon.plan.backing
        try daemon.mount(onReady: {
            sayOnStandardError("coordfs: mounted \(backing) on \(mountpoint) (pid \(getpid()))")
        })
        return daemon.serve()
    }

    /// Ends a daemon process once `serve()` returned: everything durable is done by then (log closed,
    /// pid file removed), so the process goes without running exit handlers or unwinding Swift objects
    /// while threads of the services may still be finishing.
    public static func end(_ status: Int32) -> Never {
        fflush(nil)
        _exit(status)
    }

    /// Closes every descriptor above stderr that this process inherited. A daemon must not keep its
    /// starter's pipes open (a caller reading our output would wait for EOF forever), sockets or files.
    /// Call it first, before the daemon opens anything of its own.
    public static func closeInheritedDescriptors() {
        guard let dir = opendir("/proc/self/fd") else { return }
        let own = dirfd(dir)
        var inherited: [Int32] = []
        while let entry = readdir(dir) {
            let name = withUnsafePointer(to: &entry.pointee.d_name) { $0.withMemoryRebound(to: CChar.self, capacity: 256) { String(cString: $0) } }
            if let fd = Int32(name), fd > 2, fd != own { inherited.append(fd) }
        }
        closedir(dir)
        for fd in inherited { close(fd) }
    }

    /// Forks the daemon into the background and waits until its mount answers.
    public static func runInBackground(_ daemon: Daemon, timeoutSeconds: Int32 = 30) throws(MountError) {
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else { throw .system("pipe: \(String(cString: strerror(errno)))") }
        let readEnd = fds[0], writeEnd = fds[1]
        try daemon.mount(onReady: {
            _ = write(writeEnd, "ok", 2)
            close(writeEnd)
        })
        let pid = fork()
        if pid < 0 { throw .system("fork: \(String(cString: strerror(errno)))") }
        if pid == 0 {
            close(readEnd)
            setsid()
            redirectStandardStreams(log: daemon.plan.state.daemonLog)
            chdir("/")
            end(daemon.serve())
        }
        close(writeEnd)
        var pfd = pollfd(fd: readEnd, events: Int16(POLLIN), revents: 0)
        var answer = [UInt8](repeating: 0, count: 2)
        let ready = poll(&pfd, 1, timeoutSeconds * 1000) > 0 && read(readEnd, &answer, 2) == 2 && answer == Array("ok".utf8)
        close(readEnd)
        if ready { return }
        // The child died or hung before answering: take the mount down and say why.
        kill(pid, SIGKILL)
        var status: Int32 = 0
        waitpid(pid, &status, 0)
        umount2(daemon.plan.mountpoint, Int32(MNT_DETACH))
        let tail = readWholeFile(daemon.plan.state.daemonLog).map { String($0.suffix(2000)) } ?? ""
        throw .system("the coordfs daemon did not come up\(tail.isEmpty ? "" : ":\n" + tail)")
    }

    private static func redirectStandardStreams(log: String) {
        let null = open("/dev/null", O_RDWR)
        if null >= 0 { dup2(null, 0); close(null) }
        let out = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o600)
        if out >= 0 { dup2(out, 1); dup2(out, 2); close(out) }
    }
}
