import Glibc
import Linux

/// Errors from opening, writing or reading an event log directory.
public enum EventLogError: Error, Sendable, Equatable, CustomStringConvertible {
    /// A system call failed: `operation` on `path` with `errno`.
    case system(operation: String, path: String, errno: Int32)
    /// Stored data is damaged or not understood.
    case corrupt(String)
    /// A file in the log directory is not an event log segment (wrong magic or header).
    case notASegment(path: String, reason: String)
    /// Another writer (another coordfs daemon for the same backing folder) holds the log.
    case locked(path: String)
    /// A bad argument: an empty directory path, an unparsable glob or kind, ...
    case invalidArgument(String)
    /// The writer was closed.
    case closed

    /// A failed system call on `path`, named in the message by where its folder is now when the
    /// path goes through a descriptor this process holds (the daemon's `/proc/self/fd/N/log`).
    static func failed(operation: String, path: String, errno: Int32) -> EventLogError {
        .system(operation: operation, path: HeldPath.shown(path), errno: errno)
    }

    /// The errno of a failed system call, nil for the other errors.
    public var errno: Int32? {
        if case .system(_, _, let e) = self { return e }
        return nil
    }

    /// `error` itself when it is an `EventLogError`, otherwise wrapped as `.corrupt`.
    init(_ error: any Error) {
        self = (error as? EventLogError) ?? .corrupt(String(describing: error))
    }

    public var description: String {
        switch self {
        case .system(let op, let path, let e):
            return "\(op) \(path): \(String(cString: strerror(e))) (errno \(e))"
        case .corrupt(let what): return "event log damaged: \(what)"
        case .notASegment(let path, let reason): return "\(path) is not an event log segment: \(reason)"
        case .locked(let path):
            return "event log \(path) is in use by another writer (is another coordfs mounted on this folder?)"
        case .invalidArgument(let what): return what
        case .closed: return "event log writer is closed"
        }
    }
}
