extension StatusReport {
    /// The report as `statusReport` frames, each at most `maxFrameSize` bytes of payload: one
    /// frame when it fits, otherwise parts in order, every one but the last with `"more":true`
    /// (docs/protocol.md, `status`). Each entry is encoded once; an entry is never split. (One
    /// entry alone larger than a frame, an access with 64 intents of 4 KiB paths each, still goes
    /// in a frame of its own.)
    package func frames(maxFrameSize: Int = Framing.defaultMaxFrameSize) -> [[UInt8]] {
        let lists: [(key: String, entries: [[UInt8]])] = [
            ("presenters", presenters.map { JSONWriter.write($0.wireValue) }),
            ("accesses", accesses.map { JSONWriter.write($0.wireValue) }),
            ("waiting", waiting.map { JSONWriter.write($0.wireValue) }),
        ]
        let head = Array(#"{"type":"statusReport","id":\#(id.rawValue)"#.utf8)
        // Room for the head, the three keys and brackets, and `"more":true`.
        let budget = max(maxFrameSize - head.count - 96, 1)
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
}
