/// Standard base64 (RFC 4648 §4, with `=` padding), as `resolve` and `versionData` carry bytes.
///
/// Decoding is strict: the standard alphabet only, no whitespace, padding required, and unused
/// trailing bits must be zero, so every byte string has exactly one spelling (a frame that
/// decodes re-encodes to the same frame).
package enum Base64 {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)
    private static let values: [UInt8] = {
        var table = [UInt8](repeating: 0xFF, count: 256)
        for (index, character) in alphabet.enumerated() { table[Int(character)] = UInt8(index) }
        return table
    }()

    /// The base64 text of `bytes`.
    package static func encode(_ bytes: some Collection<UInt8>) -> String {
        var out = [UInt8]()
        out.reserveCapacity((bytes.count + 2) / 3 * 4)
        var iterator = bytes.makeIterator()
        while let a = iterator.next() {
            let b = iterator.next(), c = iterator.next()
            let triple = UInt32(a) << 16 | UInt32(b ?? 0) << 8 | UInt32(c ?? 0)
            out.append(alphabet[Int(triple >> 18 & 63)])
            out.append(alphabet[Int(triple >> 12 & 63)])
            out.append(b == nil ? UInt8(ascii: "=") : alphabet[Int(triple >> 6 & 63)])
            out.append(c == nil ? UInt8(ascii: "=") : alphabet[Int(triple & 63)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// The bytes `text` spells, or nil when it is not canonical base64.
    package static func decode(_ text: String) -> [UInt8]? {
        let input = Array(text.utf8)
        guard input.count % 4 == 0 else { return nil }
        var out = [UInt8]()
        out.reserveCapacity(input.count / 4 * 3)
        var index = 0
        while index < input.count {
            let last = index + 4 == input.count
            var quad: [UInt8] = [0, 0, 0, 0]
            var padding = 0
            for offset in 0..<4 {
                let character = input[index + offset]
                if character == UInt8(ascii: "=") {
                    // Padding only at the very end, only in the last two places.
                    guard last, offset >= 2 else { return nil }
                    padding += 1
                    continue
                }
                guard padding == 0 else { return nil }
                let value = values[Int(character)]
                guard value != 0xFF else { return nil }
                quad[offset] = value
            }
            let triple = UInt32(quad[0]) << 18 | UInt32(quad[1]) << 12 | UInt32(quad[2]) << 6 | UInt32(quad[3])
            out.append(UInt8(triple >> 16 & 0xFF))
            if padding < 2 { out.append(UInt8(triple >> 8 & 0xFF)) }
            if padding < 1 { out.append(UInt8(triple & 0xFF)) }
            // Non-canonical: bits beyond the last byte must be zero.
            if padding == 2 && triple & 0xFFFF != 0 { return nil }
            if padding == 1 && triple & 0xFF != 0 { return nil }
            index += 4
        }
        return out
    }

    /// The length of the base64 text for `count` bytes.
    package static func encodedLength(_ count: Int) -> Int { (count + 2) / 3 * 4 }
}
