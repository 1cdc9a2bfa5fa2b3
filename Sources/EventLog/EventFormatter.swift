import NameBytes
import Glibc

/// Turns records into lines for `coordfs watch` and `coordfs log`.
///
/// `.json`: one JSON object per line, keys always in the order `seq`, `time`, `kind`, `path`,
/// `oldPath`, `documentID`, `actor` {`pid`, `uid`, `executable`}, `details` {...}; absent values are
/// omitted. It decodes with `JSONDecoder` into an equal `EventRecord` (docs/event-log.md has the
/// schema). `.text`: aligned columns `seq time kind uid actor path details`, moves as
/// `old -> new`; control characters in names are escaped so one record is always one line, and
/// ANSI colours (by kind) are added only when `colour` is true (a terminal).
public struct EventFormatter: Sendable {
    public enum Style: String, Sendable, CaseIterable {
        case json
        case text
    }

    public var style: Style
    public var colour: Bool

    public init(style: Style = .text, colour: Bool = false) {
        self.style = style
        self.colour = colour && style == .text
    }

    /// True when `fd` is a terminal and the user has not opted out (`NO_COLOR`, `TERM=dumb`).
    public static func wantsColour(fd: Int32 = STDOUT_FILENO) -> Bool {
        guard isatty(fd) == 1 else { return false }
        if let v = getenv("NO_COLOR"), v.pointee != 0 { return false }
        if let t = getenv("TERM"), String(cString: t) == "dumb" { return false }
        return true
    }

    /// The column titles for `.text` (nil for `.json`, whose lines must all be records).
    public var header: String? {
        guard style == .text else { return nil }
        var out: [UInt8] = []
        pad(&out, "SEQ", Column.seq, right: true)
        out.append(32)
        pad(&out, "TIME (UTC)", Column.time, right: false)
        out.append(32)
        pad(&out, "KIND", Column.kind, right: false)
        out.append(32)
        pad(&out, "UID", Column.uid, right: true)
        out.append(32)
        pad(&out, "ACTOR", Column.actor, right: false)
        out.append(32)
        out.append(contentsOf: "PATH  DETAILS".utf8)
        return String(decoding: out, as: UTF8.self)
    }

    /// One line without the trailing newline.
    public func format(_ r: EventRecord) -> String {
        var out: [UInt8] = []
        out.reserveCapacity(160)
        appendLine(r, to: &out, newline: false)
        return String(decoding: out, as: UTF8.self)
    }

    /// Appends the line and a newline to `out` (the fast path for printing many records).
    public func append(_ r: EventRecord, to out: inout [UInt8]) {
        appendLine(r, to: &out, newline: true)
    }

    private func appendLine(_ r: EventRecord, to out: inout [UInt8], newline: Bool) {
        switch style {
        case .json: JSON.append(r, to: &out)
        case .text: appendText(r, to: &out)
        }
        if newline { out.append(10) }
    }

    // MARK: Text

    private enum Column {
        static let seq = 8
        static let time = 23
        static let kind = 17
        static let uid = 5
        static let actor = 20
    }

    private func pad(_ out: inout [UInt8], _ s: String, _ width: Int, right: Bool) {
        let n = s.unicodeScalars.count
        if right && n < width { out.append(contentsOf: repeatElement(32, count: width - n)) }
        out.append(contentsOf: s.utf8)
        if !right && n < width { out.append(contentsOf: repeatElement(32, count: width - n)) }
    }

    private static func colourCode(_ kind: EventKind) -> String {
        switch kind {
        case .mount, .unmount: "1"
        case .intentRequested: "36"
        case .granted: "32"
        case .released: "90"
        case .presenterAsked, .presenterAnswered, .presenterAdded, .presenterRemoved, .presenterNotAsked: "33"
        case .presenterTimedOut, .presenterGone, .denied: "31"
        case .didChange, .didMove, .didDelete: "34"
        case .subitemAppeared, .subitemChanged, .subitemMoved, .subitemDeleted: "94"
        case .snapshotTaken: "35"
        case .conflictDetected, .lostUpdate: "1;31"
        case .conflictResolved: "1;32"
        case .gap, .retention, .logRecovered, .logStalled, .storeFailed, .coalesced: "7;31"
        }
    }

    /// Appends `s` as `String.displayEscaped` shows it: bytes that are not UTF-8 as `\xNN`,
    /// controls and bidirectional overrides escaped, so hostile file names cannot break lines,
    /// send escape sequences to the terminal or reorder what is shown.
    private static func appendEscaped(_ s: String, to out: inout [UInt8]) {
        out.append(contentsOf: s.displayEscaped.utf8)
    }

    private static func actorText(_ a: EventActor) -> String {
        var name = a.executable ?? "?"
        if let slash = name.lastIndex(of: "/") { name = String(name[name.index(after: slash)...]) }
        if name.isEmpty { name = "?" }
        if name.count > 15 { name = String(name.prefix(15)) }
        return name + "[" + String(a.pid) + "]"
    }

    static func latencyText(_ us: UInt64) -> String {
        if us < 1000 { return String(us) + "µs" }
        let ms = us / 1000
        let frac = us % 1000
        return String(ms) + "." + (frac < 10 ? "00" : frac < 100 ? "0" : "") + String(frac) + "ms"
    }

    private func appendText(_ r: EventRecord, to out: inout [UInt8]) {
        pad(&out, String(r.seq), Column.seq, right: true)
        out.append(32)
        r.time.appendISO8601(to: &out, separator: 32, zone: false)
        out.append(32)
        if colour {
            out.append(contentsOf: "\u{1B}[\(EventFormatter.colourCode(r.kind))m".utf8)
            out.append(contentsOf: r.kind.rawValue.utf8)
            out.append(contentsOf: "\u{1B}[0m".utf8)
            if r.kind.rawValue.count < Column.kind {
                out.append(contentsOf: repeatElement(32, count: Column.kind - r.kind.rawValue.count))
            }
        } else {
            pad(&out, r.kind.rawValue, Column.kind, right: false)
        }
        out.append(32)
        if let a = r.actor {
            pad(&out, String(a.uid), Column.uid, right: true)
            out.append(32)
            var actor: [UInt8] = []
            EventFormatter.appendEscaped(EventFormatter.actorText(a), to: &actor)
            out.append(contentsOf: actor)
            if actor.count < Column.actor { out.append(contentsOf: repeatElement(32, count: Column.actor - actor.count)) }
        } else {
            pad(&out, "-", Column.uid, right: true)
            out.append(32)
            pad(&out, "-", Column.actor, right: false)
        }
        out.append(32)
        if r.kind == .coalesced, let last = r.oldPath {
            // A summary: its first item .. its last.
            EventFormatter.appendEscaped(r.path, to: &out)
            out.append(contentsOf: " .. ".utf8)
            EventFormatter.appendEscaped(last, to: &out)
        } else {
            if let old = r.oldPath {
                EventFormatter.appendEscaped(old, to: &out)
                out.append(contentsOf: " -> ".utf8)
            }
            EventFormatter.appendEscaped(r.path, to: &out)
        }

        var first = true
        func field(_ key: String, _ value: String, quote: Bool = false) {
            out.append(contentsOf: first ? [32, 32] : [32])
            first = false
            out.append(contentsOf: key.utf8)
            out.append(UInt8(ascii: "="))
            if quote { out.append(UInt8(ascii: "\"")) }
            EventFormatter.appendEscaped(value, to: &out)
            if quote { out.append(UInt8(ascii: "\"")) }
        }
        let d = r.details
        if let v = d.intent { field("intent", v.rawValue) }
        if !d.options.isEmpty { field("options", d.options.joined(separator: ",")) }
        if let v = d.ask { field("ask", v.rawValue) }
        if let v = d.latencyMicros { field("latency", EventFormatter.latencyText(v)) }
        if let v = d.snapshotMethod { field("method", v.rawValue) }
        if let v = d.bytes { field("bytes", String(v)) }
        if let v = d.versionID { field("version", v) }
        if let v = d.resolution { field("resolution", v.rawValue) }
        if let v = d.errno {
            field("errno", String(v) + (v > 0 ? "(" + String(cString: strerror(v)) + ")" : ""), quote: false)
        }
        if let v = d.reason { field("reason", v) }
        if let from = d.gapFrom, let to = d.gapTo { field("range", String(from) + "-" + String(to)) }
        if let v = d.requestID { field("req", String(v)) }
        if let v = d.presenterID { field("presenter", v) }
        if let v = r.documentID { field("doc", v) }
        if let v = d.message { field("msg", v, quote: true) }
    }
}
