import NameBytes
import ArgumentParser
import CoordFS
import EventLog
import Glibc
import Linux

/// What `coordfs watch` and `coordfs log` share: which mount, which records, in which format.
struct EventQueryOptions: ParsableArguments {
    @Argument(help: ArgumentHelp(
        "The mountpoint, or any path inside the mount (then only records under that path are shown).",
        valueName: "mountpoint"))
    var mountpoint: String?

    @Option(help: ArgumentHelp(
        "Read the log of this backing folder instead (for a mount that is no longer mounted).",
        valueName: "dir"))
    var backing: String?

    @Option(help: ArgumentHelp(
        "With --backing, in a cluster's shared folder: read this node's log (BACKING/.coordfs/nodes/NODE).",
        valueName: "node"))
    var node: String?

    @Option(help: ArgumentHelp(
        "Start at this sequence number (a cursor: to resume after record N, pass N+1).",
        valueName: "seq"))
    var since: UInt64?

    @Flag(help: "One JSON object per line (for jq), instead of text.")
    var json = false

    @Option(name: .customLong("path"), help: ArgumentHelp(
        "Only records whose path (or old path, for moves) matches this glob, relative to the mount root: "
            + "* within a name, ** across folders, ?, [a-z]; a pattern without / matches the name at any depth. Repeatable.",
        valueName: "glob"))
    var paths: [String] = []

    @Option(name: .customLong("kind"), help: ArgumentHelp(
        "Only records of this kind (e.g. granted, didMove, presenter-timed-out; comma lists allowed). Repeatable.",
        valueName: "kind"))
    var kinds: [String] = []

    @Option(name: .customLong("pid"), help: ArgumentHelp("Only records caused by this process id. Repeatable.", valueName: "pid"))
    var pids: [Int32] = []

    @Option(name: [.customLong("color"), .customLong("colour")], help: ArgumentHelp(
        "Colour the text: auto (on a terminal, unless NO_COLOR is set), always, never.", valueName: "when"))
    var color: ColourChoice = .auto

    enum ColourChoice: String, ExpressibleByArgument, CaseIterable {
        case auto, always, never
    }

    func validate() throws {
        if mountpoint == nil && backing == nil {
            throw ValidationError("give a mountpoint (or a path inside a mount), or --backing DIR")
        }
        if mountpoint != nil && backing != nil {
            throw ValidationError("give either a mountpoint or --backing DIR, not both")
        }
        if node != nil && backing == nil {
            throw ValidationError("--node goes with --backing DIR (a mountpoint finds its node by itself)")
        }
        if let bad = pids.first(where: { $0 <= 0 }) { throw ValidationError("--pid \(bad): expects a process id above 0") }
        if since == 0 { throw ValidationError("--since 0: sequence numbers start at 1") }
        _ = try filter(pathInMount: "/", mountpoint: nil)
    }

    /// The mount and its log directory, with a clear error when there is none.
    func locate() throws -> LocatedMount {
        let mount: LocatedMount
        do {
            if let backing { mount = try MountLocator.locate(backing: exactArgument(backing), node: node) } else { mount = try locateMount(exactArgument(mountpoint ?? "")) }
        } catch .backingOutOfSight(let m, let b) {
            throw CLIError(MountError.backingOutOfSight(mountpoint: m, backing: b).description + "; or give its new path with --backing DIR")
        } catch {
            throw CLIError(error.description)
        }
        var st = stat()
        if stat(mount.eventLog, &st) != 0 {
            let e = errno
            let subject = mount.mountpoint.map { "the mount on \($0)" } ?? "'\(mount.backing)'"
            if e == ENOENT {
                throw CLIError("\(subject) has no event log yet (\(mount.eventLog) is missing; was it mounted with -o log=off?)")
            }
            throw CLIError("cannot read the event log \(mount.eventLog): \(String(cString: strerror(e)))"
                + (e == EACCES ? " (it belongs to the user who mounted; run as that user)" : ""))
        }
        return mount
    }

    /// The record filter. Patterns may also be given as absolute paths through the mountpoint; a
    /// path inside the mount given as the mountpoint argument limits the records to that subtree
    /// unless `--path` is given.
    func filter(pathInMount: String, mountpoint: String?) throws -> EventFilter {
        var patterns = paths.map(exactArgument).map { p -> String in
            if let m = mountpoint, m != "/", p == m { return "/" }
            if let m = mountpoint, m != "/", p.hasPrefix(m + "/") { return String(p.dropFirst(m.count)) }
            return p
        }
        if patterns.isEmpty && pathInMount != "/" {
            let escaped = Self.escapeGlob(pathInMount)
            patterns = [escaped, escaped + "/**"]
        }
        do {
            return try EventFilter(kindNames: kinds, pids: pids, pathPatterns: patterns)
        } catch let e as EventLogError {
            throw ValidationError(e.description)
        }
    }

    /// The formatter for stdout.
    func formatter() -> EventFormatter {
        let colour: Bool
        switch color {
        case .auto: colour = EventFormatter.wantsColour()
        case .always: colour = true
        case .never: colour = false
        }
        return EventFormatter(style: json ? .json : .text, colour: colour)
    }

    /// Text gets column titles on a terminal only, so that pipes and files hold records alone.
    func header(_ f: EventFormatter) -> String? {
        isatty(STDOUT_FILENO) == 1 ? f.header : nil
    }

    /// Backslash-escapes the glob metacharacters of a literal path.
    static func escapeGlob(_ path: String) -> String {
        var out = ""
        for c in path {
            if "*?[]\\".contains(c) { out.append("\\") }
            out.append(c)
        }
        return out
    }

    /// Says on stderr where the history being read is incomplete (for a `gap` record).
    static func reportGap(_ r: EventRecord) {
        guard r.kind == .gap, let range = r.gapRange else { return }
        let next = range.upperBound + 1
        switch r.details.reason {
        case GapReason.retention.rawValue:
            Stderr.print("coordfs: cursor \(range.lowerBound) is older than retention: records \(range.lowerBound)-\(range.upperBound) were deleted; continuing from \(next)")
        case GapReason.dropped.rawValue:
            Stderr.print("coordfs: records \(range.lowerBound)-\(range.upperBound) were dropped by the daemon (its disk stalled); continuing from \(next)")
        default:
            Stderr.print("coordfs: records \(range.lowerBound)-\(range.upperBound) are missing from storage; continuing from \(next)")
        }
    }

    /// Warns when `--since` points past the end of the log (a cursor from another log?).
    func warnIfCursorBeyondEnd(_ bounds: EventLogReader.Bounds) {
        if let since, since > bounds.nextSeq {
            Stderr.print("coordfs: --since \(since) is beyond the end of the log (the next record will be \(bounds.nextSeq)); is the cursor from another log?")
        }
    }
}

/// Unbuffered lines on stderr.
enum Stderr {
    static func print(_ line: String) {
        var bytes = Array((line + "\n").utf8)
        var done = 0
        while done < bytes.count {
            let n = retryingEINTR { bytes.withUnsafeMutableBytes { write(STDERR_FILENO, $0.baseAddress! + done, $0.count - done) } }
            if n <= 0 { return }
            done += n
        }
    }
}
