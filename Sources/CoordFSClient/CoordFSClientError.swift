import ControlProtocol
import Glibc

/// Why a `FileCoordinator` call or a presenter registration failed.
public enum CoordFSClientError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The path is not inside a coordfs mount (or not a valid path inside it).
    case notInMount(String, reason: String)
    /// The presenter has no `presentedItemPath`.
    case noPresentedItem
    /// The daemon refused the request (`permissionDenied`, `notFound`, `timedOut`, ...).
    case refused(ProtocolError)
    /// The daemon could not be reached or the connection broke.
    case transport(ControlTransportError)
    /// The presenter is not registered (`FileCoordinator.addFilePresenter(_:)`).
    case notRegistered
    /// A local file could not be read (`DocumentContents.file` outside the mount).
    case unreadable(String, errno: Int32)
    /// The bytes do not fit in one protocol frame; write them to a file inside the mount and pass
    /// its path instead.
    case tooLarge(bytes: Int, limit: Int)

    public var description: String {
        switch self {
        case .notInMount(let path, let reason): return "\(path): \(reason)"
        case .noPresentedItem: return "the presenter has no presentedItemPath"
        case .refused(let error): return "refused: \(error)"
        case .transport(let error): return error.description
        case .notRegistered: return "the presenter is not registered (FileCoordinator.addFilePresenter)"
        case .unreadable(let path, let code): return "cannot read \(path): \(String(cString: strerror(code)))"
        case .tooLarge(let bytes, let limit):
            return "\(bytes) bytes do not fit in one message (at most \(limit)); pass a file inside the mount instead"
        }
    }

    /// The daemon's error code, for refusals.
    public var code: ErrorCode? {
        if case .refused(let error) = self { return error.code }
        return nil
    }

    init(_ error: ControlTransportError) {
        if case .protocolError(let protocolError) = error {
            self = .refused(protocolError)
        } else {
            self = .transport(error)
        }
    }
}
