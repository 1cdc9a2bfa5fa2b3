import ControlProtocol
import CoordFSClient
import DocumentStore
import EventLog
import Glibc
import Linux
import NameBytes

/// A reader of the mount's event log as the user who runs `coordfs web` may read it: the log's
/// files, or the daemon (`readLog`) for a user who may not read them (the CLI's `RecordSource`).
public protocol WebRecordSource: AnyObject {
    /// The next record, or nil when everything written so far was read.
    func next() throws -> EventRecord?
    /// Waits for more records (or `timeout`).
    @discardableResult func waitForChanges(timeout: Duration) -> Bool
    /// Waits for more records, `timeout`, or one of `others` readable (`EventStream`'s wake-ups:
    /// the page gone, the mount gone). A source that cannot wait on them waits as
    /// `waitForChanges(timeout:)` does, for at most a short while.
    @discardableResult func waitForChanges(timeout: Duration, orReadable others: [Int32]) -> Bool
    /// The last sequence number read.
    var cursor: UInt64 { get }
}

extension WebRecordSource {
    public func waitForChanges(timeout: Duration, orReadable others: [Int32]) -> Bool {
        waitForChanges(timeout: min(timeout, .milliseconds(250)))
    }
}

/// What the page needs from the mount, all of it as the user who started `coordfs web`: the
/// control socket (through `CoordFSMount`, exactly as the CLI), the event log, and the files
/// through the mount itself (reads, which the kernel checks as for any program of that user).
public struct WebBackend: Sendable {
    /// Where the file system is mounted.
    public var mountPoint: String
    /// The connection to the mount's daemon.
    public var mount: CoordFSMount
    /// A log reader after `after` (nil: the last `recent` records, then live ones).
    public var openLog: @Sendable (_ after: UInt64?, _ recent: Int) throws -> any WebRecordSource
    /// `coordfs status --json`'s object.
    public var status: @Sendable () async throws -> [UInt8]
    /// Whether the mount is still there (the command watches it).
    public var watch: MountWatch

    public init(mountPoint: String, mount: CoordFSMount,
                openLog: @escaping @Sendable (_ after: UInt64?, _ recent: Int) throws -> any WebRecordSource,
                status: @escaping @Sendable () async throws -> [UInt8], watch: MountWatch = MountWatch()) {
        self.mountPoint = mountPoint
        self.mount = mount
        self.openLog = openLog
        self.status = status
        self.watch = watch
    }

    /// What is at `path` (inside the mount) now, read through the mount as this user, without
    /// following a symbolic link: a link put in place of the document (or of a folder on its way)
    /// is said to be one, and where it points is never shown or merged as the document (a
    /// document's name is the document's, not whatever file its link names: for the document
    /// store it was deleted). Before, the page read through it, so another user's link to a file
    /// this user may read (root's page, for a link made in a shared folder to a root-only file)
    /// showed that file's bytes as the document's, and into mine's editor they went.
    enum Current {
        case bytes([UInt8])
        case missing
        case link(path: String, target: String)
    }

    func currentFile(_ path: MountPath) throws -> Current {
        let shown = path.rawValue.displayEscaped
        switch NoLinkRead.read(path.rawValue, below: mountPoint, atMost: WebLimits.maxDocument) {
        case .bytes(let bytes): return .bytes(bytes)
        case .missing: return .missing
        case .link(let at, let target): return .link(path: at, target: target)
        case .notAFile: throw WebError(status: 409, "\(shown) is not a regular file")
        case .tooLarge: throw WebError(status: 413, "\(shown) is larger than \(WebLimits.maxDocument) bytes")
        case .failed(let code):
            throw WebError(status: code == EACCES ? 403 : 500, "cannot read \(shown): \(String(cString: strerror(code)))")
        }
    }

    /// The file's bytes now; nil when it does not exist. A link: 409, saying where it points.
    func current(_ path: MountPath) throws -> [UInt8]? {
        switch try currentFile(path) {
        case .bytes(let bytes): return bytes
        case .missing: return nil
        case .link(let at, let target): throw WebError(status: 409, Self.linkMessage(at, target))
        }
    }

    static func linkMessage(_ at: String, _ target: String) -> String {
        "\(at.displayEscaped) is a symbolic link (to \(target.displayEscaped)), not a document: coordfs web does not follow links"
    }
}

/// Sizes the page works with.
enum WebLimits {
    /// Documents shown and merged (bigger ones: use the CLI).
    static let maxDocument = 8 << 20
    /// A request body (mine, a restore).
    static let maxBody = 16 << 20
}

/// An error with the HTTP status it answers.
struct WebError: Error, CustomStringConvertible {
    var status: Int
    var description: String
    init(status: Int, _ description: String) {
        self.status = status
        self.description = description
    }
}

/// Side-by-side views: which lines of each text differ from the other's.
enum SideBySide {
    /// The lines of `text` (without their newline).
    static func lines(_ text: [UInt8]) -> [String] {
        if text.isEmpty { return [] }
        var lines = text.split(separator: 0x0A, omittingEmptySubsequences: false).map { String(decoding: $0, as: UTF8.self) }
        if text.last == 0x0A { lines.removeLast() }
        return lines
    }

    /// `{"lines": [...], "changed": [indices]}` for `text` against `other`.
    static func view(_ text: [UInt8], against other: [UInt8]) -> JSONValue {
        let marks = TextMerge.changedLines(old: other, new: text).new
        return .object(JSONObject(["lines": .array(lines(text).map { .string($0) }),
                                   "changed": .array(marks.sorted().map { .int(Int64($0)) })]))
    }
}
