import NameBytes

/// Serialises a `JSONValue` compactly as UTF-8, keys in insertion order, with `JSONString`'s
/// literals and numbers (the event log's and the CLI's JSON use the same). Non-finite doubles
/// (which JSON cannot express) are written as `null`.
package enum JSONWriter {
    package static func write(_ value: JSONValue) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(128)
        write(value, into: &out)
        return out
    }

    package static func write(_ value: JSONValue, into out: inout [UInt8]) {
        switch value {
        case .null: out.append(contentsOf: "null".utf8)
        case .bool(let flag): out.append(contentsOf: (flag ? "true" : "false").utf8)
        case .int(let number): JSONString.appendNumber(number, to: &out)
        case .double(let number):
            if number.isFinite {
                // Swift prints the shortest representation that reads back exactly; it keeps
                // ".0" on whole numbers, so a double stays a double when parsed again.
                out.append(contentsOf: number.description.utf8)
            } else {
                out.append(contentsOf: "null".utf8)
            }
        case .string(let text): writeString(text, into: &out)
        case .array(let elements):
            out.append(UInt8(ascii: "["))
            for (offset, element) in elements.enumerated() {
                if offset > 0 { out.append(UInt8(ascii: ",")) }
                write(element, into: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .object(let object):
            out.append(UInt8(ascii: "{"))
            var first = true
            for (key, element) in object {
                if !first { out.append(UInt8(ascii: ",")) }
                first = false
                writeString(key, into: &out)
                out.append(UInt8(ascii: ":"))
                write(element, into: &out)
            }
            out.append(UInt8(ascii: "}"))
        }
    }

    /// A JSON string literal: PEP 383 for bytes that are not UTF-8 (`\udcNN`), controls escaped.
    static func writeString(_ text: String, into out: inout [UInt8]) { JSONString.append(text, to: &out) }
}
