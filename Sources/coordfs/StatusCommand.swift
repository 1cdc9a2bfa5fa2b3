import NameBytes
import ArgumentParser
import ControlProtocol
import CoordFSClient
import EventLog
import Glibc

/// `coordfs status MOUNTPOINT`: who presents what, who holds what, who waits, from the daemon.
struct StatusCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status",
        abstract: "Show a mount's presenters, held accesses and waiting requests.",
        discussion: """
        Asks the mount's daemon over its control socket. Presenters are listed with their id, the \
        process that registered them (pid and executable) and the presented path; accesses with \
        their id, process, intents and how long they have been held; waiting requests with how long \
        they have waited. Unmodified tools appear too: an open file is a held access. Paths are \
        relative to the mount's root. Another user sees only what they could reach through the \
        mount themselves. The second line says what the event log's writer is doing: writing, or \
        STUCK (a full disk, an I/O error) since when, why and how many records wait in memory \
        (shown to users who may read the log; "eventLog" in --json). Then one line per user over \
        its share of the log (-o log_user_share), whose records are summarised in coalesced \
        records: since when, how many, and the bytes its records take against the share (root and \
        the mount's owner see every such user, another user only itself; "logShare" in --json). A \
        report of any size is shown (the daemon sends a large one in parts).

        With --cluster, for a node of a cluster (-o cluster=, docs/cluster.md): this node, whether \
        etcd is reachable and this node's session valid, the policy when it is not and how many \
        accesses were granted locally; every node with when its session began, its lease and TTL; \
        the presenters and holds (rights, with their fencing tokens) of each node. Other users see \
        only the items they could find in the folder themselves, on every node. A mount that is no \
        node of a cluster says so, with exit status 66.

        Exit status: 0; 69 when the path is not in a coordfs mount or its daemon cannot be reached.

        Examples:
          coordfs status /mnt/docs
          coordfs status /mnt/docs --json | jq '.presenters[].path'
          coordfs status /mnt/docs --cluster
        """
    )

    @Argument(help: ArgumentHelp("The mountpoint (or any path inside the mount).", valueName: "mountpoint"))
    var mountpoint: String

    @Flag(help: "Print one JSON object instead of tables.")
    var json = false

    @Flag(help: "The cluster instead (a node of a cluster, -o cluster=): its nodes (alive since, lease, TTL), presenters and holds per node, whether etcd is reachable, accesses granted locally.")
    var cluster = false

    func run() throws {
        let location: ControlSocketLocator.Location
        do { location = try locateControlSocket(mountpoint) } catch { error.exit() }
        if cluster { return ClusterViews.status(location, json: json) }
        let socketPath = location.socketPath
        let report: StatusReport
        do {
            report = try runBlocking {
                let client = try ControlClient.connect(socketPath: socketPath, clientName: "coordfs status")
                defer { client.close() }
                return try await client.status()
            }
        } catch {
            ControlCommandFailure(message: "cannot ask the daemon of \(location.mount.mountPoint) (\(socketPath)): \(error)",
                                  status: ControlExit.unavailable).exit()
        }
        // The event log's writer says in its lock file whether it is stuck (nil: not readable by
        // this user, or no log).
        let logState = EventLogWriterState.read(directory: Self.eventLogDirectory(socketPath: socketPath))
        if json {
            var object = Self.json(report, mountPoint: location.mount.mountPoint)
            if let logState { object["eventLog"] = .object(Self.json(logState)) }
            object["logShare"] = .array(report.logShare.map { u in
                .object(JSONObject(["uid": .int(Int64(u.uid)), "since": .string(EventTime(millisecondsSinceEpoch: u.sinceMs).iso8601),
                                    "records": .int(Int64(clamping: u.records)), "bytes": .int(Int64(clamping: u.bytes)),
                                    "limitBytes": .int(Int64(clamping: u.limitBytes))]))
            })
            Stdout.line(String(decoding: JSONWriter.write(.object(object)), as: UTF8.self))
        } else {
            var lines = Self.text(report, mountPoint: location.mount.mountPoint)
            var at = 1
            if let logState { lines.insert("event log: \(logState.summary)", at: at); at += 1 }
            for line in Self.logShareLines(report.logShare) { lines.insert(line, at: at); at += 1 }
            for line in lines { Stdout.line(line) }
        }
    }

    /// One line per user whose records the event log summarises (over its `log_user_share`).
    static func logShareLines(_ users: [StatusReport.LogShareUser]) -> [String] {
        users.map { u in
            "event log: uid \(u.uid) over its share since \(EventTime(millisecondsSinceEpoch: u.sinceMs).iso8601): "
                + "\(u.records) record(s) summarised in coalesced records; its records take \(u.bytes) of \(u.limitBytes) bytes"
        }
    }

    /// The event log beside the control socket (both in BACKING/.coordfs).
    static func eventLogDirectory(socketPath: String) -> String {
        let folder = socketPath.split(separator: "/", omittingEmptySubsequences: false).dropLast().joined(separator: "/")
        return folder + "/log"
    }

    static func json(_ s: EventLogWriterState) -> JSONObject {
        var o = JSONObject()
        o["state"] = .string(s.phase.rawValue)
        o["pid"] = .int(Int64(s.pid))
        if let since = s.since { o["since"] = .string(since.iso8601) }
        if let error = s.error { o["error"] = .string(error) }
        if let waiting = s.waiting { o["waiting"] = .int(Int64(waiting)) }
        return o
    }

    // MARK: Output

    static func describe(_ intent: Intent) -> String {
        switch intent {
        case .reading(let path, let options):
            let names = ReadingOptions.names.filter { options.contains($0.1) }.map(\.0)
            return "read \(path)" + (names.isEmpty ? "" : " (" + names.joined(separator: ", ") + ")")
        case .writing(let path, let options):
            let names = WritingOptions.names.filter { options.contains($0.1) }.map(\.0)
            return "write \(path)" + (names.isEmpty ? "" : " (" + names.joined(separator: ", ") + ")")
        }
    }

    /// An ask an access not granted yet waits for, after its intents.
    static func describe(_ ask: StatusReport.Asking) -> String {
        ", asking presenter \(ask.presenter.rawValue) to \(ask.ask.rawValue) (\(ask.askingMs) ms)"
    }

    /// Each process's name, read once however many entries it has (100,000 presenters of one
    /// process cost one read of /proc).
    static func processNames(_ report: StatusReport) -> (Int32) -> String {
        var names: [Int32: String] = [:]
        for pid in report.presenters.map(\.pid) + report.accesses.map(\.pid) + report.waiting.map(\.pid) where names[pid] == nil {
            names[pid] = processName(pid)
        }
        return { names[$0] ?? "?" }
    }

    static func text(_ report: StatusReport, mountPoint: String) -> [String] {
        let processName = processNames(report)
        var lines = ["coordfs mount \(mountPoint.displayEscaped)"]
        table("presenters", ["ID", "PID", "EXECUTABLE", "UID", "KIND", "PATH"], report.presenters.map { p in
            [String(p.presenter.rawValue), String(p.pid), processName(p.pid), String(p.uid), p.kind.rawValue, p.path.description]
        }, into: &lines)
        table("held accesses", ["ID", "PID", "EXECUTABLE", "UID", "HELD", "INTENTS"], report.accesses.map { a in
            [String(a.access.rawValue), String(a.pid), processName(a.pid), String(a.uid), "\(a.heldMs) ms",
             a.intents.map(describe).joined(separator: "; ") + a.asking.map(describe).joined()]
        }, into: &lines)
        table("waiting requests", ["PID", "EXECUTABLE", "UID", "WAITING", "INTENTS"], report.waiting.map { w in
            [String(w.pid), processName(w.pid), String(w.uid), "\(w.waitingMs) ms", w.intents.map(describe).joined(separator: "; ")]
        }, into: &lines)
        return lines
    }

    /// A titled table of `cells` under `header`, appended to `lines`.
    static func table(_ title: String, _ header: [String], _ cells: [[String]], into lines: inout [String]) {
            // Every cell escaped: a name cannot break the table, drive the terminal or forge output.
            let rows = cells.map { $0.map(\.displayEscaped) }
            lines.append("")
            lines.append("\(title) (\(rows.count))")
            guard !rows.isEmpty else { return }
            var widths = header.map(\.count)
            for row in rows { for (i, cell) in row.enumerated() where i < header.count - 1 { widths[i] = max(widths[i], cell.count) } }
            func render(_ row: [String]) -> String {
                row.enumerated().map { i, cell in
                    i == row.count - 1 ? cell : cell + String(repeating: " ", count: widths[i] - cell.count)
                }.joined(separator: "  ")
            }
            lines.append("  " + render(header))
            for row in rows { lines.append("  " + render(row)) }
    }

    static func json(_ report: StatusReport, mountPoint: String) -> JSONObject {
        let processName = processNames(report)
        func intents(_ list: [Intent]) -> JSONValue {
            .array(list.map { intent in
                switch intent {
                case .reading(let path, let options):
                    return .object(JSONObject(["intent": .string("read"), "path": .string(path.wireValue),
                                               "options": .array(ReadingOptions.names.filter { options.contains($0.1) }.map { .string($0.0) })]))
                case .writing(let path, let options):
                    return .object(JSONObject(["intent": .string("write"), "path": .string(path.wireValue),
                                               "options": .array(WritingOptions.names.filter { options.contains($0.1) }.map { .string($0.0) })]))
                }
            })
        }
        var object = JSONObject()
        object["mountPoint"] = .string(mountPoint)
        object["presenters"] = .array(report.presenters.map { p in
            .object(JSONObject(["presenter": .int(Int64(p.presenter.rawValue)), "pid": .int(Int64(p.pid)),
                                "executable": .string(processName(p.pid)), "uid": .int(Int64(p.uid)),
                                "kind": .string(p.kind.rawValue), "path": .string(p.path.wireValue)]))
        })
        object["accesses"] = .array(report.accesses.map { a in
            .object(JSONObject(["access": .int(Int64(a.access.rawValue)), "pid": .int(Int64(a.pid)),
                                "executable": .string(processName(a.pid)), "uid": .int(Int64(a.uid)),
                                "heldMs": .int(Int64(clamping: a.heldMs)), "intents": intents(a.intents),
                                "asking": .array(a.asking.map(\.wireValue))]))
        })
        object["waiting"] = .array(report.waiting.map { w in
            .object(JSONObject(["pid": .int(Int64(w.pid)), "executable": .string(processName(w.pid)), "uid": .int(Int64(w.uid)),
                                "waitingMs": .int(Int64(clamping: w.waitingMs)), "intents": intents(w.intents)]))
        })
        return object
    }
}
