extension StatusReport {
    /// The report as `statusReport` frames, each at most `maxFrameSize` bytes of payload: one
    /// frame when it fits, otherwise parts in order, every one but the last with `"more":true`
    /// (docs/protocol.md, `status`). Each entry is encoded once. An access or a waiting request
    /// too large for one frame (64 intents of long paths: up to 64 x 393 KiB of JSON) is sent as
    /// several entries, each with some of its intents and all but the last marked `continues`,
    /// which the decoder joins (`joinContinued`); nothing else is ever split, and one intent
    /// always fits in the default frame (a path's 65,535 bytes are at most 393,210 in JSON).
    package func frames(maxFrameSize: Int = Framing.defaultMaxFrameSize) -> [[UInt8]] {
        let head = Array(#"{"type":"statusReport","id":\#(id.rawValue)"#.utf8)
        // Room for the head, the three keys and brackets, and `"more":true`.
        let budget = max(maxFrameSize - head.count - 96, 1)
        let lists: [(key: String, entries: [[UInt8]])] = [
            ("presenters", presenters.map { JSONWriter.write($0.wireValue) }),
            ("accesses", accesses.flatMap { Self.entries($0, within: budget - 1) }),
            ("waiting", waiting.flatMap { Self.entries($0, within: budget - 1) }),
        ]
        var parts: [[[UInt8]]] = []  // per part: the three lists' bodies
        var current: [[UInt8]] = [[], [], []]
        var used = 0
        for (index, list) in lists.enumerated() {
            for entry in list.entries {
                let cost = entry.count + 1
                if used > 0 && used + cost > budget {
                    parts.append(current)
                    current = [[], [], []]
                    used = 0
                }
                if !current[index].isEmpty { current[index].append(UInt8(ascii: ",")) }
                current[index] += entry
                used += cost
            }
        }
        parts.append(current)
        return parts.enumerated().map { number, bodies in
            var payload = head
            for (index, list) in lists.enumerated() {
                payload += Array(#","\#(list.key)":["#.utf8)
                payload += bodies[index]
                payload.append(UInt8(ascii: "]"))
            }
            if number < parts.count - 1 { payload += Array(#","more":true"#.utf8) }
            payload.append(UInt8(ascii: "}"))
            return Framing.frame(payload)
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
