/// Everything the document store refuses, with a message a person can act on.
///
/// Every refusal happens before anything is changed: a thrown error means the backing folder and
/// the store's metadata are as they were.
public enum DocumentStoreError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The path is absolute, empty, contains `..`, a NUL byte, leads through a symbolic link out of
    /// the backing folder, or points into the store's own state directory.
    case invalidPath(String, reason: String)
    /// The path exists but is not a regular file (documents are regular files).
    case notARegularFile(String)
    /// No file at this path.
    case fileNotFound(String)
    /// The store has no document at this path.
    case unknownDocument(String)
    /// The presenter has not registered interest in this document.
    case unknownPresenter(presenter: String, path: String)
    /// No kept version with this id.
    case unknownVersion(UInt64)
    /// No conflict with this id.
    case unknownConflict(UInt64)
    /// The conflict was already resolved.
    case conflictAlreadyResolved(UInt64, resolution: String)
    /// Reload and merge need the file on disk; it was deleted.
    case resolutionNotApplicableToDeletion(String)
    /// Save, keep both and merge need the presenter's bytes ("mine").
    case missingContents(String)
    /// A three-way merge needs the base version, which the store could not keep (the file was
    /// changed outside the store's view before the base was captured).
    case baseUnavailable(path: String)
    /// Merge works on text only; one of the three inputs looks binary (it contains a NUL byte).
    case binaryContents(String)
    /// The user already pins as many versions or bytes as ``UserPinBudget`` allows (a presenter's
    /// base, open conflicts, versions kept for its live readers): nothing was registered.
    case userPinsExceeded(uid: UInt32, versions: Int, bytes: Int64)
    /// A system call failed.
    case system(operation: String, path: String, errno: Int32)
    /// The metadata database failed or holds something this version does not understand.
    case database(String)

    public var description: String {
        switch self {
        case let .invalidPath(path, reason): return "invalid path '\(path)': \(reason)"
        case let .notARegularFile(path): return "'\(path)' is not a regular file"
        case let .fileNotFound(path): return "no file at '\(path)'"
        case let .unknownDocument(path): return "the store has no document at '\(path)'"
        case let .unknownPresenter(presenter, path):
            return "presenter '\(presenter)' has not registered '\(path)'"
        case let .unknownVersion(id): return "no kept version \(id)"
        case let .unknownConflict(id): return "no conflict \(id)"
        case let .conflictAlreadyResolved(id, resolution):
            return "conflict \(id) is already resolved (\(resolution))"
        case let .resolutionNotApplicableToDeletion(what):
            return "cannot \(what): the file was deleted (save restores it, close drops it, keep both writes a copy)"
        case let .missingContents(what): return "\(what) needs the presenter's contents (mine)"
        case let .baseUnavailable(path):
            return "cannot merge '\(path)': the base version was not kept (the file changed outside the store's view); use save, reload or keep both"
        case let .binaryContents(path):
            return "cannot merge '\(path)': binary contents (three-way merge is for text)"
        case let .userPinsExceeded(uid, versions, bytes):
            return "uid \(uid) already pins \(versions) versions (\(bytes) bytes) in the document store (max_user_pinned_versions, max_user_pinned_mb): "
                + "close documents or resolve conflicts, then try again"
        case let .system(operation, path, code):
            return "\(operation) '\(path)' failed: \(String(cString: strerrorMessage(code))) (errno \(code))"
        case let .database(message): return "document store database: \(message)"
        }
    }
}

import Glibc

private func strerrorMessage(_ code: Int32) -> UnsafeMutablePointer<CChar> { strerror(code) }
