import ControlProtocol
import CoordFSWeb
import CoordFS
import EventLog
import Glibc

/// Where `watch` and `log` read records: the log's files when this user may read them (the user
/// who mounted, root), otherwise the daemon, which passes on only the records naming items this
/// user may see (docs/event-log.md, "Who may read the log").
/// (`next`, `waitForChanges`, `cursor`: `WebRecordSource`'s, so `coordfs web` reads the same way.)
protocol RecordSource: WebRecordSource {}

extension EventLogReader: RecordSource {}

/// What the log holds, as `log` and `watch` need it.
struct RecordBounds {
    var oldestSeq: UInt64?
    var nextSeq: UInt64
    /// Segments and bytes; nil when read through the daemon.
    var storage: (segments: Int, bytes: UInt64)?

    var readerBounds: EventLogReader.Bounds {
        EventLogReader.Bounds(oldestSeq: oldestSeq, nextSeq: nextSeq, segments: storage?.segments ?? 0, bytes: storage?.bytes ?? 0)
    }
}

extension LocatedMount {
    /// Whether this user must read the log through the daemon (the files are not readable, the
    /// daemon is running).
    var readsLogThroughDaemon: Bool {
        access(eventLog, R_OK | X_OK) != 0 && errno == EACCES && mountpoint != nil && !stale
    }

    /// The log's bounds, from the files or from the daemon.
    func recordBounds() throws -> RecordBounds {
        if readsLogThroughDaemon {
            let reader = try DaemonLogReader(mount: self, position: .end, filter: EventFilter())
            return RecordBounds(oldestSeq: reader.oldest, nextSeq: reader.end, storage: nil)
        }
        let b = try EventLogReader.bounds(directory: eventLog)
        return RecordBounds(oldestSeq: b.oldestSeq, nextSeq: b.nextSeq, storage: (b.segments, b.bytes))
    }

    /// A reader at `position`.
    func recordSource(position: EventLogPosition, filter: EventFilter) throws -> any RecordSource {
        if readsLogThroughDaemon { return try DaemonLogReader(mount: self, position: position, filter: filter) }
        return try EventLogReader(directory: eventLog, position: position, filter: filter)
    }
}

/// Reads the records this user may see through the mount's daemon (`readLog`).
final class DaemonLogReader: RecordSource {
    private let client: ControlClient
    private let filter: EventFilter
    /// Where the next `readLog` starts; nil: at the end.
    private var from: UInt64?
    private var buffer: [EventRecord] = []
    private var index = 0
    /// Whether the last reply reached the end of what was written.
    private var caughtUp = false
    private(set) var cursor: UInt64 = 0
    private(set) var end: UInt64 = 1
    private(set) var oldest: UInt64?

    init(mount: LocatedMount, position: EventLogPosition, filter: EventFilter) throws {
        let socket = mount.state.controlSocket
        do {
            client = try ControlClient.connect(socketPath: socket, clientName: "coordfs log")
        } catch {
            throw CLIError("cannot read the event log \(mount.eventLog) (it belongs to the user who mounted) nor ask the daemon (\(socket)): \(error)")
        }
        self.filter = filter
        switch position {
        case .start: from = 1
        case .from(let n): from = max(1, n)
        case .after(let n): from = n &+ 1
        case .end: from = nil
        }
        try fetch()
    }

    deinit { client.close() }

    private func fetch() throws {
        let from = self.from
        let client = self.client
        let reply: LogRecords
        do {
            reply = try runBlocking { try await client.readLog(from: from) }
        } catch {
            throw CLIError("reading the event log through the daemon: \(error)")
        }
        buffer = try RecordFrames.decode(reply.records)
        index = 0
        end = reply.end
        oldest = reply.oldest
        self.from = reply.next
        caughtUp = reply.next >= reply.end
        if buffer.isEmpty { cursor = reply.next &- 1 }
    }

    func next() throws -> EventRecord? {
        while true {
            while index < buffer.count {
                let r = buffer[index]
                index += 1
                cursor = r.seq
                if filter.matches(r) { return r }
            }
            // Everything written when the daemon last answered was read: wait for `waitForChanges`.
            if caughtUp { return nil }
            try fetch()
        }
    }

    func waitForChanges(timeout: Duration) -> Bool {
        let ms = max(0, min(Int64(timeout.components.seconds) * 1000 + timeout.components.attoseconds / 1_000_000_000_000_000, 250))
        usleep(UInt32(ms) * 1000)
        // The next `next()` asks the daemon again.
        caughtUp = false
        return true
    }
}
