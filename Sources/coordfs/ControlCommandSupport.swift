import NameBytes
// What `present`, `coordinate` and `status` share: running async client code from the synchronous
// root command, finding a mount's control socket, and the process names `status` shows.
import ControlProtocol
import Dispatch
import Glibc
import Synchronization
import Linux
import CoordFSClient
import CoordFS

/// Runs `body` in a Task and blocks this (synchronous) thread until it ends.
func runBlocking<T: Sendable>(_ body: @escaping @Sendable () async throws -> T) throws -> T {
    let result = Mutex<Result<T, any Error>?>(nil)
    let done = DispatchSemaphore(value: 0)
    Task {
        do {
            let value = try await body()
            result.withLock { $0 = .success(value) }
        } catch {
            result.withLock { $0 = .failure(error) }
        }
        done.signal()
    }
    done.wait()
    return try result.withLock { $0! }.get()
}

/// Exit statuses of the control commands, when they fail before (or instead of) running anything.
enum ControlExit {
    /// The path is not in a coordfs mount, or the daemon cannot be reached (EX_UNAVAILABLE).
    static let unavailable: Int32 = 69
    /// The daemon refused: permission denied (EX_NOPERM).
    static let permissionDenied: Int32 = 77
    /// The daemon refused: no such item, or a path leading out of the mount (EX_NOINPUT).
    static let notFound: Int32 = 66
    /// The access was not granted in time (EX_TEMPFAIL).
    static let timedOut: Int32 = 75
    /// Any other refusal (a presenter refused, ...).
    static let refused: Int32 = 1
    /// A request refused because the caller's user is at one of the mount's per-user limits
    /// (`limitExceeded`: `max_user_accesses`, `max_user_presenters`, ...) by every command alike
    /// (EX_TEMPFAIL, as EAGAIN: nothing was done, try again later).
    static let tryAgain: Int32 = 75

    /// What a failed document request (`restore`, `resolve` through the daemon) ends with: the
    /// message on stderr and EX_TEMPFAIL when a per-user limit refused it, else the error to throw.
    static func documentRequestFailed(_ message: String, _ error: any Error) -> CLIError {
        if case .refused(let refusal)? = error as? CoordFSClientError, refusal.code == .limitExceeded {
            ControlCommandFailure(message: "\(message): \(error)", status: tryAgain).exit()
        }
        return CLIError("\(message): \(error)")
    }

    static func status(for code: ErrorCode) -> Int32 {
        switch code {
        case .permissionDenied: return permissionDenied
        case .notFound, .invalidPath: return notFound
        case .timedOut: return timedOut
        case .limitExceeded: return tryAgain
        case .shuttingDown: return unavailable
        default: return refused
        }
    }
}

/// A failure that ends a control command with a given status after printing `message`.
struct ControlCommandFailure: Error, CustomStringConvertible {
    var message: String
    var status: Int32
    var description: String { message }

    /// Prints `coordfs: message` on stderr and exits with the status.
    func exit() -> Never {
        Stderr.print("coordfs: \(message.displayEscapedLines)")
        Glibc.exit(status)
    }
}

/// The mount containing `path`, or a failure naming why not. A backing folder renamed or moved
/// while mounted is found where it is now (said once on stderr), or the failure says this user
/// cannot find it (`BackingWhereabouts`).
func locateControlSocket(_ path: String) throws(ControlCommandFailure) -> ControlSocketLocator.Location {
    let location: ControlSocketLocator.Location
    do {
        location = try ControlSocketLocator().locate(exactArgument(path))
    } catch {
        throw ControlCommandFailure(message: error.message, status: ControlExit.unavailable)
    }
    if let from = location.backingMovedFrom { noteBackingMoved(mountpoint: location.mount.mountPoint, from: from, to: location.mount.source) }
    return location
}

/// The coordfs mount containing `path` with its state folder (`MountLocator.locate`), a backing
/// folder renamed or moved while mounted found where it is now, and said once on stderr.
func locateMount(_ path: String) throws(MountError) -> LocatedMount {
    let mount = try MountLocator.locate(path)
    if let from = mount.backingMovedFrom, let m = mount.mountpoint { noteBackingMoved(mountpoint: m, from: from, to: mount.backing) }
    return mount
}

private let notedMoves = Mutex<Set<String>>([])

/// Says on stderr, once per mount in this command, that its backing folder was found elsewhere.
func noteBackingMoved(mountpoint: String, from: String, to: String) {
    guard notedMoves.withLock({ $0.insert(mountpoint).inserted }) else { return }
    Stderr.print("coordfs: " + BackingWhereabouts.movedNote(mountpoint: mountpoint, from: from, to: to).displayEscaped)
}

/// The executable name of a process on this machine (`/proc/PID/comm`), or `?` when it is gone.
func processName(_ pid: Int32) -> String {
    let fd = open("/proc/\(pid)/comm", O_RDONLY | O_CLOEXEC)
    guard fd >= 0 else { return "?" }
    defer { close(fd) }
    var buffer = [UInt8](repeating: 0, count: 64)
    let n = read(fd, &buffer, buffer.count)
    guard n > 0 else { return "?" }
    var text = String(decoding: buffer[0..<n], as: UTF8.self)
    while text.hasSuffix("\n") { text.removeLast() }
    return text
}

/// Writes lines to stdout at once (no buffering: a reader sees each ask as it arrives); reports
/// when the reader of a pipe has gone.
enum Stdout {
    private static let lock = Mutex(())

    /// False when stdout is gone (EPIPE).
    @discardableResult
    static func line(_ text: String) -> Bool {
        lock.withLock { _ in
            var bytes = Array(text.utf8)
            bytes.append(UInt8(ascii: "\n"))
            var offset = 0
            while offset < bytes.count {
                let n = retryingEINTR { bytes.withUnsafeBytes { write(STDOUT_FILENO, $0.baseAddress! + offset, $0.count - offset) } }
                if n <= 0 { return false }
                offset += n
            }
            return true
        }
    }
}

/// The command-line argument `parsed` as the user gave it, byte for byte. Swift's
/// `CommandLine.arguments` (and so ArgumentParser) turn bytes that are not UTF-8 into U+FFFD; a
/// path given on the command line is taken from the raw `argv` instead and held losslessly
/// (`LosslessName`). Matches a whole argument or the value of `--option=value`.
func exactArgument(_ parsed: String) -> String {
    guard parsed.unicodeScalars.contains("\u{FFFD}") else { return parsed }
    for i in 1..<Int(CommandLine.argc) {
        guard let p = CommandLine.unsafeArgv[i] else { continue }
        let raw = Array(UnsafeBufferPointer(start: p, count: strlen(p))).map { UInt8(bitPattern: $0) }
        var candidates = [raw[...]]
        if let eq = raw.firstIndex(of: UInt8(ascii: "=")), raw.first == UInt8(ascii: "-") { candidates.append(raw[(eq + 1)...]) }
        for bytes in candidates where ExactName.same(String(decoding: bytes, as: UTF8.self), parsed) {
            return String(nameBytes: bytes)
        }
    }
    return parsed
}
