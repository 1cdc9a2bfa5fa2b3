extension StatusReport {
    /// The report as `statusReport` frames, each at most `maxFrameSize` bytes of payload: one
    /// frame when it fits, otherwise parts in order, every one but the last with `"more":true`
    /// (docs/protocol.md, `status`). Each entry is encoded once. An access or a waiting request
    /// too large for one frame (64 intents of long paths: up to 64 x 393 KiB of JSON) is sent as
    /// several entries, each with some of its intents and all but the last marked `continues`,
    /// which the decoder joins (`joinContinued`); nothing else is ever split, and one intent
    /// always fits in the default frame (a path's 65,535 bytes are at most 393,210 in JSON).
    package func frames(maxFrameSize: Int = Framing.defaultMaxFrameSize) -> [[UInt8]] {
        var stream = StatusFrameStream(self, maxFrameSize: maxFrameSize)
        var all: [[UInt8]] = []
        while let frame = stream.next() { all.append(frame) }
        return all
    }

    /// The encoded entries of list `list` (0 presenters, 1 accesses, 2 waiting) at `index`: one,
    /// or several for an access or waiting request split by `entries(_:within:)`.
    fileprivate func encodedEntries(list: Int, index: Int, budget: Int) -> [[UInt8]] {
        switch list {
        case 0: [JSONWriter.write(presenters[index].wireValue)]
        case 1: Self.entries(accesses[index], within: budget)
        default: Self.entries(waiting[index], within: budget)
        }
    }

    fileprivate func count(ofList list: Int) -> Int {
        switch list {
        case 0: presenters.count
        case 1: accesses.count
        default: waiting.count
        }
    }

    /// `entry` as one encoded entry when it fits `budget` bytes, else as several, each with as many
    /// of its intents in order as fit (at least one), all but the last marked `continues`.
    private static func entries<Entry: IntentsEntry>(_ entry: Entry, within budget: Int) -> [[UInt8]] {
        let intents = entry.intents
        func encode(_ some: [Intent], _ continues: Bool) -> [UInt8] {
            var part = entry
            part.intents = some
            part.continues = continues
            return JSONWriter.write(part.wireValue)
        }
        let whole = encode(intents, false)
        guard whole.count > budget, intents.count > 1 else { return [whole] }
        // The entry without intents, and each intent's own JSON plus a comma.
        let overhead = encode([], true).count
        let sizes = intents.map { JSONWriter.write($0.wireValue).count + 1 }
        var parts: [[UInt8]] = []
        var start = 0, used = overhead
        for index in intents.indices {
            if index > start && used + sizes[index] > budget {
                parts.append(encode(Array(intents[start..<index]), true))
                start = index
                used = overhead
            }
            used += sizes[index]
        }
        parts.append(encode(Array(intents[start...]), false))
        return parts
    }
}

/// A status entry that lists intents (an access, a waiting request): what `frames` may split.
protocol IntentsEntry {
    var intents: [Intent] { get set }
    var continues: Bool { get set }
    var wireValue: JSONValue { get }
}

extension StatusReport.Access: IntentsEntry {}
extension StatusReport.Waiting: IntentsEntry {}

/// The frames of a status report made one at a time, as the client reads them
/// (`ControlConnection.sendInOrder(stream:)`): what the daemon holds for a report in flight is the
/// report's entries (references to what the coordinator holds) and the frame being made, not the
/// whole report encoded (which one user's long paths could make gigabytes; docs/protocol.md,
/// `status`). The frames are the same as `StatusReport.frames`, which collects them.
package struct StatusFrameStream {
    private let report: StatusReport
    private let head: [UInt8]
    private let budget: Int
    private static let keys = ["presenters", "accesses", "waiting"]
    /// The next entry to encode: its list and index.
    private var list = 0
    private var index = 0
    /// Encoded entries taken from the lists and not yet in a frame (an entry split in several,
    /// or the entry that did not fit the previous frame), each with its list.
    private var carried: [(list: Int, bytes: [UInt8])] = []
    private var finished = false
    /// The users over their share of the log (`logShare`, a short list), in the first frame only.
    private var firstOnly: [UInt8]

    package init(_ report: StatusReport, maxFrameSize: Int = Framing.defaultMaxFrameSize) {
        self.report = report
        head = Array(#"{"type":"statusReport","id":\#(report.id.rawValue)"#.utf8)
        firstOnly = report.logShare.isEmpty ? [] : Array(#","logShare":"#.utf8) + JSONWriter.write(.array(report.logShare.map(\.wireValue)))
        // Room for the head, the three keys and brackets, and `"more":true`.
        budget = max(maxFrameSize - head.count - 96, 1)
    }

    /// The next encoded entry and its list, or nil when there is none left.
    private mutating func take() -> (list: Int, bytes: [UInt8])? {
        if !carried.isEmpty { return carried.removeFirst() }
        while list < 3 {
            if index < report.count(ofList: list) {
                let entries = report.encodedEntries(list: list, index: index, budget: budget - 1)
                index += 1
                carried = entries.dropFirst().map { (list, $0) }
                return (list, entries[0])
            }
            list += 1
            index = 0
        }
        return nil
    }

    /// The next frame, or nil after the last.
    package mutating func next() -> [UInt8]? {
        guard !finished else { return nil }
        var bodies: [[UInt8]] = [[], [], []]
        var used = firstOnly.count
        var more = false
        while let entry = take() {
            let cost = entry.bytes.count + 1
            if used > 0 && used + cost > budget {
                carried.insert(entry, at: 0)
                more = true
                break
            }
            if !bodies[entry.list].isEmpty { bodies[entry.list].append(UInt8(ascii: ",")) }
            bodies[entry.list] += entry.bytes
            used += cost
        }
        if !more { finished = true }
        var payload = head + firstOnly
        firstOnly = []
        for (i, key) in Self.keys.enumerated() {
            payload += Array(#","\#(key)":["#.utf8)
            payload += bodies[i]
            payload.append(UInt8(ascii: "]"))
        }
        if more { payload += Array(#","more":true"#.utf8) }
        payload.append(UInt8(ascii: "}"))
        return Framing.frame(payload)
    }
}
