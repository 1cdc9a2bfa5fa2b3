import ArgumentParser
import ControlProtocol
import CoordFS
import EventLog
import Glibc

/// `coordfs watch`: follows a mount's event log live.
struct WatchCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "watch",
        abstract: "Follow a mount's coordination events live.",
        discussion: """
        Prints each record of the mount's event log as it is written: who asked for which item, which \
        presenters were asked and how long they took, what was granted, changed, moved or deleted. \
        Without --since only new records are shown; with --since SEQ the history from SEQ comes first, \
        then live records, with nothing missed in between: a slow or paused watcher catches up from the \
        log on disk, never from a queue that could overflow.

        The log lives on the backing side (BACKING/.coordfs/log; a cluster node's in \
        BACKING/.coordfs/nodes/NODE/log), so watching needs no daemon: a watcher \
        keeps following across an unmount and the next mount of the same folder. The log's files belong \
        to the user who mounted; any other user watches through the daemon and sees only the records \
        naming items it could find in the folder itself. On a terminal the \
        output is aligned, coloured text with a header; in a pipe it is plain text, or JSON lines with \
        --json. When the records a cursor asks for were deleted by retention, a `gap` record says so and \
        stderr names the range; it then continues from the oldest kept record. Ends on Ctrl-C (status \
        0), at --limit, or quietly when the reader of a pipe exits.

        With --cluster, on a node of a cluster (-o cluster=, docs/cluster.md): every node's \
        coordination steps (joined, left, presents, holds, asks, answered, did ...) in one stream, \
        in the order of etcd's revisions, as the mount's node sees them, live from now; another \
        user sees only steps about items it could find in the folder itself. A mount that is no \
        node of a cluster says so, with exit status 66.

        Examples:
          coordfs watch /mnt/docs
          coordfs watch /mnt/docs/reports         # only records under reports/
          coordfs watch /mnt/docs --kind presenter-timed-out --kind denied
          coordfs watch /mnt/docs --path '*.odt' --pid 4242
          coordfs watch /mnt/docs --json | jq -c 'select(.kind == "didMove")'
          coordfs watch /mnt/docs --json --since 1200   # resume after 1199
          coordfs watch --backing /srv/shared --since 1 # folder not mounted
          coordfs watch /mnt/docs --cluster --json      # every node's steps
        """
    )

    @OptionGroup var query: EventQueryOptions

    @Option(help: ArgumentHelp("Exit after printing this many records.", valueName: "n"))
    var limit: Int?

    @Flag(help: "Every node's coordination steps instead (a node of a cluster, -o cluster=), one stream in etcd's revision order.")
    var cluster = false

    func validate() throws {
        if let limit, limit <= 0 { throw ValidationError("--limit expects a number above 0") }
        if cluster && (query.backing != nil || query.since != nil || !query.paths.isEmpty || !query.kinds.isEmpty || !query.pids.isEmpty) {
            throw ValidationError("--cluster follows a mounted node's daemon: give its mountpoint, with --json and --limit only")
        }
    }

    func run() throws {
        if cluster {
            let location: ControlSocketLocator.Location
            do { location = try locateControlSocket(query.mountpoint ?? "") } catch { error.exit() }
            return ClusterViews.watch(location, json: query.json, limit: limit)
        }
        let mount = try query.locate()
        let filter = try query.filter(pathInMount: mount.pathInMount, mountpoint: mount.mountpoint)
        let reader: any RecordSource
        let bounds: EventLogReader.Bounds
        do {
            // Bounds first: `.end` then cannot start before the last record named here.
            bounds = try mount.recordBounds().readerBounds
            reader = try mount.recordSource(position: query.since.map { .from($0) } ?? .end, filter: filter)
        } catch let e as EventLogError {
            throw CLIError("cannot read the event log \(mount.eventLog): \(e.description)")
        }
        query.warnIfCursorBeyondEnd(bounds)
        let formatter = query.formatter()
        let out = RecordOutput(formatter: formatter)
        StopSignals.install()
        if isatty(STDERR_FILENO) == 1 {
            let what = mount.mountpoint.map { "watching \($0)" + (mount.stale ? " (its daemon is gone)" : "") } ?? "watching \(mount.backing)"
            let from = query.since.map { "from record \($0)" } ?? "new records after \(reader.cursor)"
            Stderr.print("coordfs: \(what), \(from); Ctrl-C to stop")
        }
        if let h = query.header(formatter) { out.add(line: h) }
        do {
            try follow(reader, out)
        } catch let stop as RecordOutput.Stop {
            if let e = stop.commandError { throw e }  // else the reader of our output is gone: say nothing
        } catch let e as EventLogError {
            try? out.flush()
            throw CLIError("reading the event log \(mount.eventLog): \(e.description)")
        }
    }

    private func follow(_ reader: any RecordSource, _ out: RecordOutput) throws {
        while StopSignals.received == 0 {
            while let r = try reader.next() {
                if r.kind == .gap { EventQueryOptions.reportGap(r) }
                out.add(r)
                if let limit, out.count >= limit { return try out.flush() }
                if out.pending >= 1 << 16 { try out.flush() }
                if StopSignals.received != 0 { break }
            }
            try out.flush()
            if out.readerGone { throw RecordOutput.Stop.closed }
            // inotify wakes this at once on a write; the timeout bounds how late a signal or a
            // vanished pipe reader is noticed.
            reader.waitForChanges(timeout: .milliseconds(250))
        }
        try out.flush()
    }
}
