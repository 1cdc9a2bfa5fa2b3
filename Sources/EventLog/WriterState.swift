import Glibc

/// What a log's writer is doing, as it keeps it in its `writer.lock` file for other processes
/// (`coordfs status`, `coordfs log --info`) and for the next writer: writing, stuck (a write keeps
/// failing: a full disk, an I/O error), or closed cleanly.
///
/// The file is rewritten in place at a fixed size (`fileSize` bytes, written when the writer opens),
/// so saying "stuck" on a full disk needs no new block. Text, one `key=value` per line.
public struct EventLogWriterState: Sendable, Equatable {
    public enum Phase: String, Sendable {
        case writing, stuck, closed
    }

    public var phase: Phase
    /// The writer's process.
    public var pid: Int32
    /// Stuck: since when.
    public var since: EventTime?
    /// Stuck: the error of the last failed write.
    public var error: String?
    /// Stuck: records waiting for the disk (in memory, not in the log yet).
    public var waiting: Int?

    public init(phase: Phase, pid: Int32 = getpid(), since: EventTime? = nil, error: String? = nil, waiting: Int? = nil) {
        self.phase = phase
        self.pid = pid
        self.since = since
        self.error = error
        self.waiting = waiting
    }

    static let fileSize = 512
    static let magic = "coordfs event log writer"

    /// The state in `directory`'s `writer.lock`, or nil when there is none (an older writer, or
    /// none ever opened the log) or it cannot be read.
    public static func read(directory: String) -> EventLogWriterState? {
        let fd = Glibc.open(directory + "/" + SegmentStore.lockFileName, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { Glibc.close(fd) }
        return read(fd: fd)
    }

    static func read(fd: Int32) -> EventLogWriterState? {
        var buf = [UInt8](repeating: 0, count: fileSize)
        let n = buf.withUnsafeMutableBytes { (try? Sys.pread(fd, $0.baseAddress!, fileSize, 0, path: "")) ?? 0 }
        return parse(String(decoding: buf[0..<n], as: UTF8.self))
    }

    static func parse(_ text: String) -> EventLogWriterState? {
        var lines = text.split(separator: "\n").map(String.init)
        guard lines.first == magic else { return nil }
        lines.removeFirst()
        var values: [String: String] = [:]
        for line in lines {
            guard let eq = line.firstIndex(of: "=") else { continue }
            values[String(line[..<eq])] = String(line[line.index(after: eq)...])
        }
        guard let phase = values["state"].flatMap(Phase.init(rawValue:)), let pid = values["pid"].flatMap({ Int32($0) }) else { return nil }
        return EventLogWriterState(
            phase: phase, pid: pid, since: values["since"].flatMap { Int64($0) }.map { EventTime(millisecondsSinceEpoch: $0) },
            error: values["error"], waiting: values["waiting"].flatMap { Int($0) })
    }

    /// The file's bytes: the text, padded with newlines to `fileSize`.
    var bytes: [UInt8] {
        var text = "\(Self.magic)\nstate=\(phase.rawValue)\npid=\(pid)\n"
        if let since { text += "since=\(since.millisecondsSinceEpoch)\n" }
        if let error { text += "error=" + String(error.map { $0 == "\n" ? " " : $0 }) + "\n" }
        if let waiting { text += "waiting=\(waiting)\n" }
        var b = Array(text.utf8.prefix(Self.fileSize))
        b += [UInt8](repeating: 0x0A, count: Self.fileSize - b.count)
        return b
    }

    /// One line for people: "writing", or "stuck since ... (error), N records waiting".
    public var summary: String {
        switch phase {
        case .writing: return "writing (pid \(pid))"
        case .closed: return "closed"
        case .stuck:
            var s = "STUCK"
            if let since { s += " since \(since.iso8601)" }
            if let error { s += ": \(error)" }
            if let waiting { s += "; \(waiting) record(s) waiting to be written" }
            return s + " (pid \(pid))"
        }
    }
}
