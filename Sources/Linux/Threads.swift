import Glibc

/// Names the calling thread (`/proc/PID/task/TID/comm`, `top -H`, `perf`): at most 15 bytes are kept.
/// pthread_setname_np is a GNU extension Swift's Glibc module does not show; this is what it does.
/// Foundation's `Thread.current.name` is no substitute: on Linux it names the system thread only once
/// the thread that started it has stored the thread's handle, so a thread that sets its name at once
/// may keep the process's name when its starter is slow to run (seen under load).
public func nameCurrentThread(_ name: String) {
    let comm = open("/proc/thread-self/comm", O_WRONLY | O_CLOEXEC)
    guard comm >= 0 else { return }
    _ = name.withCString { text in retryingEINTR { write(comm, text, strlen(text)) } }
    close(comm)
}

/// Blocks every signal in the calling thread, first thing in a thread the daemon starts itself:
/// signals are for the threads that expect them (libfuse's workers, a daemon's signal thread),
/// whatever the mask of the thread that started this one.
public func blockAllSignalsInThisThread() {
    var all = sigset_t()
    sigfillset(&all)
    pthread_sigmask(SIG_BLOCK, &all, nil)
}
