import EventLog
import Glibc
import Synchronization
import Linux

/// Formatted records on stdout, written with `write(2)` in batches: one call per batch of records
/// read, so a live watcher shows a record as soon as it is read and a catch-up of a million
/// records costs a few hundred system calls.
///
/// When the reader of a pipe goes away (`coordfs watch | head`), writing fails with EPIPE (SIGPIPE
/// is ignored) and `write()` reports `.closed`: the command exits quietly with status 0.
final class RecordOutput {
    /// Why output stopped.
    enum Stop: Error {
        /// The pipe's reader or the terminal is gone: end quietly.
        case closed
        /// Writing failed otherwise (a full disk, ...): an error for the user.
        case failed(Int32)

        /// What to throw from a command: nothing to say for `.closed`.
        var commandError: (any Error)? {
            switch self {
            case .closed: return nil
            case .failed(let e): return CLIError("cannot write the output: \(String(cString: strerror(e)))")
            }
        }
    }

    private let fd: Int32
    private let formatter: EventFormatter
    private var buffer: [UInt8] = []
    /// Records added so far.
    private(set) var count = 0

    init(formatter: EventFormatter, fd: Int32 = STDOUT_FILENO) {
        self.formatter = formatter
        self.fd = fd
        buffer.reserveCapacity(1 << 16)
        // A broken pipe must surface as EPIPE (a quiet exit), not kill the process mid-line.
        signal(SIGPIPE, SIG_IGN)
    }

    func add(line: String) {
        buffer.append(contentsOf: line.utf8)
        buffer.append(10)
    }

    func add(_ r: EventRecord) {
        formatter.append(r, to: &buffer)
        count += 1
    }

    /// Bytes waiting; callers flush at 64 KiB so memory stays bounded during a catch-up.
    var pending: Int { buffer.count }

    /// Writes everything buffered.
    func flush() throws(Stop) {
        var done = 0
        defer { buffer.removeAll(keepingCapacity: true) }
        while done < buffer.count {
            let n = retryingEINTR { buffer.withUnsafeBytes { write(fd, $0.baseAddress! + done, $0.count - done) } }
            if n >= 0 { done += n; continue }
            switch errno {
            case EAGAIN:
                // A non-blocking stdout (inherited from a shell that set O_NONBLOCK): wait for room.
                var p = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
                _ = poll(&p, 1, 1000)
            case EPIPE, EIO:
                throw .closed  // the pipe's reader exited, or the terminal hung up
            case let e:
                throw .failed(e)
            }
        }
    }

    /// True when nobody can read the output any more (a pipe whose reader exited, a terminal that
    /// hung up). Lets an idle watcher end at once instead of at its next record.
    var readerGone: Bool {
        var p = pollfd(fd: fd, events: 0, revents: 0)
        guard poll(&p, 1, 0) > 0 else { return false }
        return p.revents & Int16(POLLERR | POLLHUP) != 0
    }
}

/// SIGINT, SIGTERM and SIGHUP end a watcher between records (after the current batch is written),
/// so the output never ends mid-line.
enum StopSignals {
    private static let caught = Atomic<Int32>(0)

    static func install() {
        for s in [SIGINT, SIGTERM, SIGHUP] {
            var action = sigaction()
            action.__sigaction_handler.sa_handler = { sig in StopSignals.caught.store(sig, ordering: .relaxed) }
            sigemptyset(&action.sa_mask)
            action.sa_flags = 0  // no SA_RESTART: a blocking poll returns at once
            sigaction(s, &action, nil)
        }
    }

    /// The signal received, or 0.
    static var received: Int32 { caught.load(ordering: .relaxed) }
}
