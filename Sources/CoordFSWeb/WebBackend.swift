import ControlProtocol
import CoordFSClient
import DocumentStore
import EventLog
import Glibc
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

    /// The file at `path` (inside the mount) as it is now, read through the mount as this user;
    /// nil when it does not exist.
    func current(_ path: MountPath) throws -> [UInt8]? {
        let absolute = mount.absolutePath(path)
        let fd = absolute.withNameCString { open($0, O_RDONLY | O_CLOEXEC) }
        if fd < 0 {
            if errno == ENOENT { return nil }
            throw WebError(status: errno == EACCES ? 403 : 500, "cannot read \(path.rawValue): \(String(cString: strerror(errno)))")
        }
        defer { close(fd) }
        var out: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let n = read(fd, &buffer, buffer.count)
            if n < 0 && errno == EINTR { continue }
            if n < 0 { throw WebError(status: 500, "cannot read \(path.rawValue): \(String(cString: strerror(errno)))") }
            if n == 0 { break }
            out += buffer[..<n]
            if out.count > WebLimits.maxDocument { throw WebError(status: 413, "\(path.rawValue) is larger than \(WebLimits.maxDocument) bytes") }
        }
        return out
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
