import ArgumentParser
import CoordFS
import EventLog
import Glibc
import NameBytes

/// `coordfs log`: prints a mount's stored event history and exits.
struct LogCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "log",
        abstract: "Print a mount's stored coordination events and exit.",
        discussion: """
        Prints the records stored in the mount's event log (BACKING/.coordfs/log; a cluster node's: \
        BACKING/.coordfs/nodes/NODE/log, with --backing DIR --node NODE), oldest first, up to \
        the last record written when the command started. Takes the same filters and formats as `coordfs \
        watch`. The log is read without the daemon, so the history of a crashed mount is readable from \
        its mountpoint, and that of an unmounted folder with --backing. A backing folder renamed \
        while mounted is found where it is now (stderr says so). The log's files belong to the user \
        who mounted; any other user reads through the daemon, only the records naming items it could \
        find in the folder itself (and without --info). Sequence numbers are continuous: \
        where retention deleted old records, a `gap` record stands in for them (and stderr says so when \
        --since asked for them).

        Examples:
          coordfs log /mnt/docs --last 20
          coordfs log /mnt/docs --kind granted,released --path 'reports/**'
          coordfs log /mnt/docs --json | jq -r 'select(.actor.uid == 1000) | .path'
          coordfs log /mnt/docs --info
          coordfs log --backing /srv/shared --json > history.jsonl
        """
    )

    @OptionGroup var query: EventQueryOptions

    @Option(help: ArgumentHelp("Stop after the record with this sequence number.", valueName: "seq"))
    var until: UInt64?

    @Option(help: ArgumentHelp("Print at most this many records (the first ones from --since).", valueName: "n"))
    var limit: Int?

    @Option(help: ArgumentHelp("Print only the last N matching records.", valueName: "n"))
    var last: Int?

    @Flag(help: "Print what the log holds (sequence range, segments, size) instead of records.")
    var info = false

    func validate() throws {
        if let limit, limit <= 0 { throw ValidationError("--limit expects a number above 0") }
        if let last, last <= 0 { throw ValidationError("--last expects a number above 0") }
        if limit != nil && last != nil { throw ValidationError("give --limit or --last, not both") }
        if let until, let since = query.since, until < since {
            throw ValidationError("--until \(until) is before --since \(since)")
        }
    }

    func run() throws {
        let mount = try query.locate()
        let filter = try query.filter(pathInMount: mount.pathInMount, mountpoint: mount.mountpoint)
        do {
            let recordBounds = try mount.recordBounds()
            let bounds = recordBounds.readerBounds
            if info {
                guard recordBounds.storage != nil else {
                    throw CLIError("--info reads the log's files, which belong to the user who mounted \(mount.mountpoint ?? mount.backing); run as that user")
                }
                return try printInfo(mount, bounds)
            }
            query.warnIfCursorBeyondEnd(bounds)
            // The end is fixed now, so a busy mount cannot keep this command reading forever.
            let end = min(until ?? UInt64.max, bounds.nextSeq &- 1)
            let first = query.since ?? 1
            // Through the daemon, only the records this user may see come back: the last N of
            // them are not the last N seqs, even without a filter.
            let throughDaemon = recordBounds.storage == nil
            var start = first
            if let last, filter.isEmpty, !throughDaemon, bounds.nextSeq > UInt64(last) {
                // Without a filter the last N records are the last N seqs: skip the rest unread.
                start = max(start, bounds.nextSeq - UInt64(last))
            }
            let formatter = query.formatter()
            let out = RecordOutput(formatter: formatter)
            if let h = query.header(formatter) { out.add(line: h) }
            do {
                if let last, throughDaemon {
                    try emit(lastThroughDaemon(last, mount, filter, from: first, oldest: bounds.oldestSeq, end), out)
                } else if let last {
                    let reader = try mount.recordSource(position: start <= 1 ? .start : .from(start), filter: filter)
                    try printLast(last, reader, end, out)
                } else {
                    let reader = try mount.recordSource(position: start <= 1 ? .start : .from(start), filter: filter)
                    try printAll(reader, end, out)
                }
            } catch let stop as RecordOutput.Stop {
                if let e = stop.commandError { throw e }  // else the reader of our output is gone: say nothing
            }
        } catch let e as EventLogError {
            throw CLIError("reading the event log \(mount.eventLog): \(e.description)")
        }
    }

    private func printAll(_ reader: any RecordSource, _ end: UInt64, _ out: RecordOutput) throws {
        while let r = try reader.next(), Self.starts(r, atOrBefore: end) {
            report(r)
            out.add(r)
            if let limit, out.count >= limit { break }
            if out.pending >= 1 << 16 { try out.flush() }
        }
        try out.flush()
    }

    /// Keeps the last `n` matching records in a ring, then prints them.
    private func printLast(_ n: Int, _ reader: any RecordSource, _ end: UInt64, _ out: RecordOutput) throws {
        var ring: [EventRecord] = []
        ring.reserveCapacity(min(n, 1 << 16))
        var head = 0
        while let r = try reader.next(), Self.starts(r, atOrBefore: end) {
            if ring.count < n { ring.append(r) } else { ring[head] = r; head = (head + 1) % n }
        }
        try emit((0..<ring.count).map { ring[(head + $0) % ring.count] }, out)
    }

    private func emit(_ records: [EventRecord], _ out: RecordOutput) throws {
        for r in records {
            report(r)
            out.add(r)
            if out.pending >= 1 << 16 { try out.flush() }
        }
        try out.flush()
    }

    /// The last `n` matching records of `first...end` that the daemon passes on to this user. It
    /// leaves out the records naming items the user may not see, so they are read back from the
    /// end in windows of seqs growing fourfold (`n`, then `4n`, ...) until `n` are found or
    /// `first` is reached: a user whose last records are near the end reads little, one who sees
    /// few reads the log once (a window that would reach the oldest kept record goes on to
    /// `first`, so a deleted beginning is one `gap` record, as when reading from the start).
    private func lastThroughDaemon(_ n: Int, _ mount: LocatedMount, _ filter: EventFilter, from first: UInt64,
                                   oldest: UInt64?, _ end: UInt64) throws -> [EventRecord] {
        var found: [EventRecord] = []
        var hi = end
        var width = UInt64(n)
        var newest = true
        while true {
            var lo = hi >= width ? hi - width + 1 : 0
            if lo <= max(first, oldest ?? 0) { lo = first }
            let reader = try mount.recordSource(position: lo <= 1 ? .start : .from(lo), filter: filter)
            var window: [EventRecord] = []
            // The newest window takes a gap record whose range starts by `end`, as `printLast`;
            // an older one only records up to its own end (the rest were in the window after it).
            while let r = try reader.next(), newest ? Self.starts(r, atOrBefore: hi) : r.seq <= hi {
                window.append(r)
            }
            found = window + found
            if found.count >= n || lo <= first { return Array(found.suffix(n)) }
            hi = lo - 1
            width = width.multipliedReportingOverflow(by: 4).overflow ? UInt64.max : width * 4
            newest = false
        }
    }

    /// A gap record stands for its whole range: it belongs to the output if the range starts in it.
    private static func starts(_ r: EventRecord, atOrBefore end: UInt64) -> Bool {
        (r.gapRange?.lowerBound ?? r.seq) <= end
    }

    /// Gaps go to stderr too, except the deleted beginning of a log read from its start (that
    /// is what retention is for; only a cursor that asked for deleted records is news).
    private func report(_ r: EventRecord) {
        guard r.kind == .gap else { return }
        if query.since == nil && r.details.reason == GapReason.retention.rawValue { return }
        EventQueryOptions.reportGap(r)
    }

    private func printInfo(_ mount: LocatedMount, _ b: EventLogReader.Bounds) throws {
        let out = RecordOutput(formatter: EventFormatter(style: .json))
        let last = b.nextSeq &- 1
        if query.json {
            var line = "{\"log\":" + jsonString(mount.eventLog) + ",\"backing\":" + jsonString(mount.backing)
            if let m = mount.mountpoint { line += ",\"mountpoint\":" + jsonString(m) }
            if let o = b.oldestSeq { line += ",\"oldestSeq\":\(o),\"lastSeq\":\(last)" }
            line += ",\"nextSeq\":\(b.nextSeq),\"segments\":\(b.segments),\"bytes\":\(b.bytes)}"
            out.add(line: line)
        } else {
            out.add(line: "log:       \(mount.eventLog)")
            if let m = mount.mountpoint { out.add(line: "mount:     \(m) (\(mount.stale ? "daemon gone" : "mounted"))") } else { out.add(line: "mount:     not mounted") }
            if let o = b.oldestSeq {
                out.add(line: "records:   \(o)-\(last)" + (o > 1 ? " (1-\(o - 1) deleted by retention)" : ""))
            } else {
                out.add(line: "records:   none")
            }
            out.add(line: "next seq:  \(b.nextSeq)")
            out.add(line: "segments:  \(b.segments), \(b.bytes) bytes")
        }
        do { try out.flush() } catch { if let e = error.commandError { throw e } }
    }

    /// A JSON string literal as every JSON coordfs writes has it (`JSONString`).
    private func jsonString(_ s: String) -> String { JSONString.literal(s) }
}
