#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
// The shared identifiers and options (PresenterID, ReadingOptions, ...) are Vocabulary's; every
// module that speaks of presenters and accesses sees the same types through this module.
@_exported import Vocabulary

/// Identifies one coordination request (and, once granted, its access) within a ``Coordinator``.
/// Ids increase in submission order.
public struct RequestID: RawRepresentable, Hashable, Comparable, Sendable, CustomStringConvertible {
    public let rawValue: UInt64
    public init(rawValue: UInt64) { self.rawValue = rawValue }
    public static func < (lhs: RequestID, rhs: RequestID) -> Bool { lhs.rawValue < rhs.rawValue }
    public var description: String { "request#\(rawValue)" }
}

/// Who is asking for access: carried by every request, every event, and every presenter ask.
///
/// `presenterID` means "on behalf of this presenter": that presenter is neither asked nor told about
/// the access (Apple's `NSFileCoordinator(filePresenter:)`), and while it has an ask pending its own
/// coordinated accesses are not held up by the request that asked it (it is saving for them).
public struct AccessOrigin: Hashable, Sendable, CustomStringConvertible {
    /// Process id of the caller (the FUSE request's pid, or the client's peer pid).
    public var pid: Int32
    /// User id of the caller.
    public var uid: UInt32
    /// Group id of the caller.
    public var gid: UInt32
    /// Executable name of the caller, for logs (`vim`, `rsync`, ...).
    public var executable: String
    /// The presenter this access is made for, if any.
    public var presenterID: PresenterID?

    public init(pid: Int32, uid: UInt32, gid: UInt32, executable: String, presenterID: PresenterID? = nil) {
        self.pid = pid
        self.uid = uid
        self.gid = gid
        self.executable = executable
        self.presenterID = presenterID
    }

    /// The running process (pid, uid, gid, and the base name of argv[0]).
    public static let currentProcess: AccessOrigin = {
        let arg0 = CommandLine.arguments.first ?? ""
        let name = arg0.split(separator: "/").last.map(String.init) ?? arg0
        return AccessOrigin(pid: getpid(), uid: getuid(), gid: getgid(), executable: name)
    }()

    /// This origin, acting on behalf of `presenter`.
    public func onBehalf(of presenter: PresenterID?) -> AccessOrigin {
        var copy = self
        copy.presenterID = presenter
        return copy
    }

    public var description: String {
        var text = "\(executable)[\(pid)] uid=\(uid) gid=\(gid)"
        if let presenterID { text += " for \(presenterID)" }
        return text
    }
}
