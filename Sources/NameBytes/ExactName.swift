#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A name or path held as a `String` (`LosslessName`) but equal, hashed and ordered by its bytes.
///
/// `String`'s own `==` and hash follow Unicode canonical equivalence: "caf\u{E9}" (NFC) and
/// "cafe\u{301}" (NFD) are equal strings but two different Linux names. Use this as the key
/// wherever names are told apart (tries, dictionaries, sets).
public struct ExactName: Hashable, Sendable, Comparable, CustomStringConvertible {
    public let string: String
    public init(_ string: String) { self.string = string }

    public static func == (a: ExactName, b: ExactName) -> Bool { ExactName.same(a.string, b.string) }
    public func hash(into hasher: inout Hasher) { ExactName.hash(string, into: &hasher) }
    public static func < (a: ExactName, b: ExactName) -> Bool { a.string.utf8.lexicographicallyPrecedes(b.string.utf8) }
    public var description: String { string }

    /// Byte equality of two strings (not canonical equivalence), compared as two buffers (a
    /// small string's on the stack): the generic walk of two UTF-8 views cost an open through the
    /// mount a sixth of its user-space instructions (every step of the path tries is such a
    /// comparison).
    @inline(__always)
    public static func same(_ a: String, _ b: String) -> Bool {
        guard a.utf8.count == b.utf8.count else { return false }
        func equal(_ x: UnsafeBufferPointer<UInt8>, _ y: UnsafeBufferPointer<UInt8>) -> Bool {
            x.isEmpty || memcmp(x.baseAddress!, y.baseAddress!, x.count) == 0
        }
        // Two large native strings are compared in place; else (a small string) through copies.
        if let r = a.utf8.withContiguousStorageIfAvailable({ x in b.utf8.withContiguousStorageIfAvailable { y in equal(x, y) } }),
           let r { return r }
        var a = a, b = b
        return a.withUTF8 { x in b.withUTF8 { y in equal(x, y) } }
    }

    /// Feeds the bytes of `s` (and its length, so that lists of names hash unambiguously).
    @inline(__always)
    public static func hash(_ s: String, into hasher: inout Hasher) {
        var s = s   // withUTF8 gives every string's bytes as one buffer (a small string's on the stack)
        s.withUTF8 { hasher.combine(bytes: UnsafeRawBufferPointer($0)) }
        hasher.combine(s.utf8.count)
    }
}

extension String {
    /// This string (a name, a path, a message) for text shown to people, one line that cannot
    /// forge output: bytes that are not UTF-8 as `\xNN`, controls (C0, DEL) as `\n`, `\t`, `\r`
    /// or `\xNN`, C1 controls, line and paragraph separators and the bidirectional marks,
    /// embeddings, overrides and isolates (U+061C, U+200E, U+200F, U+202A...U+202E,
    /// U+2066...U+2069) as `\uXXXX`, and the backslash as `\\` so the escapes are unambiguous.
    public var displayEscaped: String {
        if utf8.allSatisfy({ $0 >= 0x20 && $0 < 0x7F && $0 != 0x5C }) { return self }
        var out = ""
        out.reserveCapacity(utf8.count + 8)
        for scalar in unicodeScalars {
            if let b = LosslessName.escapedByte(scalar) { out += "\\x" + hex2(UInt32(b)); continue }
            switch scalar.value {
            case 0x5C: out += "\\\\"
            case 0x0A: out += "\\n"
            case 0x09: out += "\\t"
            case 0x0D: out += "\\r"
            case 0..<0x20, 0x7F: out += "\\x" + hex2(scalar.value)
            case 0x80..<0xA0, 0x061C, 0x200E, 0x200F, 0x2028, 0x2029, 0x202A...0x202E, 0x2066...0x2069:
                let h = String(scalar.value, radix: 16)
                out += "\\u" + String(repeating: "0", count: 4 - h.count) + h
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out
    }
}

extension String {
    /// `displayEscaped` line by line, keeping the line breaks: for messages of several lines.
    public var displayEscapedLines: String {
        split(separator: "\n", omittingEmptySubsequences: false).map { String($0).displayEscaped }.joined(separator: "\n")
    }
}

@inline(__always)
private func hex2(_ v: UInt32) -> String {
    let digits = Array("0123456789abcdef".utf8)
    return String(decoding: [digits[Int(v >> 4)], digits[Int(v & 15)]], as: UTF8.self)
}
