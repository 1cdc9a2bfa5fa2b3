/// The one JSON text writer's primitives, for the protocol (ControlProtocol's `JSONWriter`), the
/// event log (`JSONLine`) and the CLI's JSON output: string literals and integers.
///
/// String literals are for lossless strings (`LosslessName`), PEP 383 on the wire: a byte that is
/// not UTF-8 is written as the lone surrogate escape `\udcNN` (what Python's `json` and
/// `os.fsencode` read back as exactly that byte); everything else is plain JSON, controls escaped.
/// The output is always valid UTF-8 and valid JSON.
public enum JSONString {
    private static let hex: [UInt8] = Array("0123456789abcdef".utf8)

    /// Appends `s` as a quoted JSON string literal.
    public static func append(_ s: String, to out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        var s = s
        s.withUTF8 { u in
            var i = 0
            while i < u.count {
                let b = u[i]
                switch b {
                case UInt8(ascii: "\""): out.append(contentsOf: [92, 34])
                case UInt8(ascii: "\\"): out.append(contentsOf: [92, 92])
                case 10: out.append(contentsOf: [92, UInt8(ascii: "n")])
                case 13: out.append(contentsOf: [92, UInt8(ascii: "r")])
                case 9: out.append(contentsOf: [92, UInt8(ascii: "t")])
                case 0..<0x20, 0x7F:
                    out.append(contentsOf: [92, UInt8(ascii: "u"), 48, 48, hex[Int(b >> 4)], hex[Int(b & 15)]])
                case 0xF4 where i + 3 < u.count && u[i + 1] == 0x8D && u[i + 2] & 0xFE == 0xB2:
                    // An escaped byte (U+10DC80...U+10DCFF): \udcNN.
                    let byte = 0x80 + ((u[i + 2] & 1) << 6 | (u[i + 3] & 0x3F))
                    out.append(contentsOf: [92, UInt8(ascii: "u"), UInt8(ascii: "d"), UInt8(ascii: "c"), hex[Int(byte >> 4)], hex[Int(byte & 15)]])
                    i += 3
                default: out.append(b)
                }
                i += 1
            }
        }
        out.append(UInt8(ascii: "\""))
    }

    /// Appends `v` in decimal.
    public static func appendNumber(_ v: UInt64, to out: inout [UInt8]) {
        var digits: (UInt64, Int) = (v, 0)
        var tmp = [UInt8](repeating: 0, count: 20)
        repeat {
            tmp[19 - digits.1] = UInt8(48 + digits.0 % 10)
            digits.0 /= 10
            digits.1 += 1
        } while digits.0 > 0
        out.append(contentsOf: tmp[(20 - digits.1)...])
    }

    /// Appends `v` in decimal.
    public static func appendNumber(_ v: Int64, to out: inout [UInt8]) {
        if v < 0 { out.append(UInt8(ascii: "-")) }
        appendNumber(v.magnitude, to: &out)
    }

    /// `s` as a quoted JSON string literal.
    public static func literal(_ s: String) -> String {
        var out: [UInt8] = []
        append(s, to: &out)
        return String(decoding: out, as: UTF8.self)
    }
}
