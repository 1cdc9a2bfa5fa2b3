import NameBytes

/// A strict RFC 8259 parser over raw bytes: UTF-8 validated, no trailing garbage, no duplicate
/// keys, no lone surrogates but `\udc80`...`\udcff` (PEP 383: one byte of a name that is not
/// UTF-8, held by `LosslessName`), bounded nesting. Errors are `ProtocolError`s with code
/// `malformedJSON` (or `malformedFrame` for bytes that are not UTF-8) and a byte offset.
package struct JSONParser {
    /// Deepest nesting of arrays and objects accepted. Control messages need 4; the margin keeps
    /// room for extension fields without letting a hostile frame recurse deeply.
    package static let maxDepth = 32

    /// Parses exactly one JSON value filling all of `bytes` (surrounding whitespace allowed).
    package static func parse(_ bytes: some Collection<UInt8>) throws(ProtocolError) -> JSONValue {
        let array = Array(bytes)
        return try array.withUnsafeBufferPointer { (buffer) throws(ProtocolError) -> JSONValue in
            var parser = JSONParser(buffer)
            parser.skipWhitespace()
            let value = try parser.parseValue(depth: 0)
            parser.skipWhitespace()
            if parser.index != buffer.count {
                throw parser.error("unexpected data after the JSON value")
            }
            return value
        }
    }

    private let bytes: UnsafeBufferPointer<UInt8>
    private var index = 0

    private init(_ bytes: UnsafeBufferPointer<UInt8>) { self.bytes = bytes }

    private func error(_ what: String) -> ProtocolError {
        ProtocolError(.malformedJSON, "malformed JSON at byte \(index): \(what)")
    }

    private mutating func skipWhitespace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x09, 0x0A, 0x0D: index += 1
            default: return
            }
        }
    }

    private func describeNext() -> String {
        guard index < bytes.count else { return "end of data" }
        let byte = bytes[index]
        if byte >= 0x21 && byte < 0x7F { return "'\(Character(Unicode.Scalar(byte)))'" }
        return "byte 0x" + String(byte, radix: 16)
    }

    private mutating func parseValue(depth: Int) throws(ProtocolError) -> JSONValue {
        guard index < bytes.count else { throw error("expected a value, found end of data") }
        switch bytes[index] {
        case UInt8(ascii: "{"): return try parseObject(depth: depth + 1)
        case UInt8(ascii: "["): return try parseArray(depth: depth + 1)
        case UInt8(ascii: "\""): return .string(try parseString())
        case UInt8(ascii: "t"): try expectLiteral("true"); return .bool(true)
        case UInt8(ascii: "f"): try expectLiteral("false"); return .bool(false)
        case UInt8(ascii: "n"): try expectLiteral("null"); return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try parseNumber()
        default: throw error("expected a value, found \(describeNext())")
        }
    }

    private mutating func expectLiteral(_ literal: StaticString) throws(ProtocolError) {
        let count = literal.utf8CodeUnitCount
        guard bytes.count - index >= count else { throw error("truncated literal") }
        let start = literal.utf8Start
        for offset in 0..<count where bytes[index + offset] != start[offset] {
            throw error("invalid literal")
        }
        index += count
    }

    private mutating func parseObject(depth: Int) throws(ProtocolError) -> JSONValue {
        if depth > JSONParser.maxDepth { throw error("nesting deeper than \(JSONParser.maxDepth)") }
        index += 1  // {
        var object = JSONObject()
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "}") {
            index += 1
            return .object(object)
        }
        while true {
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else {
                throw error("expected a string key, found \(describeNext())")
            }
            let keyOffset = index
            let key = try parseString()
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else {
                throw error("expected ':' after a key, found \(describeNext())")
            }
            index += 1
            skipWhitespace()
            let value = try parseValue(depth: depth)
            if !object.insertNew(key, value) {
                throw ProtocolError(.malformedJSON, "malformed JSON at byte \(keyOffset): duplicate key \"\(key)\"")
            }
            skipWhitespace()
            guard index < bytes.count else { throw error("unterminated object") }
            if bytes[index] == UInt8(ascii: ",") { index += 1; continue }
            if bytes[index] == UInt8(ascii: "}") { index += 1; return .object(object) }
            throw error("expected ',' or '}' in an object, found \(describeNext())")
        }
    }

    private mutating func parseArray(depth: Int) throws(ProtocolError) -> JSONValue {
        if depth > JSONParser.maxDepth { throw error("nesting deeper than \(JSONParser.maxDepth)") }
        index += 1  // [
        var elements: [JSONValue] = []
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "]") {
            index += 1
            return .array(elements)
        }
        while true {
            skipWhitespace()
            elements.append(try parseValue(depth: depth))
            skipWhitespace()
            guard index < bytes.count else { throw error("unterminated array") }
            if bytes[index] == UInt8(ascii: ",") { index += 1; continue }
            if bytes[index] == UInt8(ascii: "]") { index += 1; return .array(elements) }
            throw error("expected ',' or ']' in an array, found \(describeNext())")
        }
    }

    private mutating func parseNumber() throws(ProtocolError) -> JSONValue {
        let start = index
        var isInteger = true
        if bytes[index] == UInt8(ascii: "-") { index += 1 }
        guard index < bytes.count, isDigit(bytes[index]) else { throw error("expected a digit") }
        if bytes[index] == UInt8(ascii: "0") {
            index += 1
            if index < bytes.count, isDigit(bytes[index]) { throw error("leading zero in a number") }
        } else {
            while index < bytes.count, isDigit(bytes[index]) { index += 1 }
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            isInteger = false
            index += 1
            guard index < bytes.count, isDigit(bytes[index]) else { throw error("expected a digit after '.'") }
            while index < bytes.count, isDigit(bytes[index]) { index += 1 }
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
            isInteger = false
            index += 1
            if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") {
                index += 1
            }
            guard index < bytes.count, isDigit(bytes[index]) else { throw error("expected a digit in the exponent") }
            while index < bytes.count, isDigit(bytes[index]) { index += 1 }
        }
        // The grammar above admits only ASCII, so this decoding cannot fail.
        let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
        if isInteger, let value = Int64(text) { return .int(value) }
        guard let value = Double(text), value.isFinite else {
            throw ProtocolError(.malformedJSON, "malformed JSON at byte \(start): number out of range")
        }
        return .double(value)
    }

    private func isDigit(_ byte: UInt8) -> Bool { byte &- UInt8(ascii: "0") < 10 }

    private mutating func parseString() throws(ProtocolError) -> String {
        index += 1  // opening quote
        // Fast path: no escapes, all ASCII.
        let start = index
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "\"") {
                let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
                index += 1
                return text
            }
            if byte == UInt8(ascii: "\\") || byte >= 0x80 || byte < 0x20 { break }
            index += 1
        }
        // The string's bytes: UTF-8 of what it says, plus a raw byte for each \udc80...\udcff escape
        // (PEP 383), held losslessly at the end (`LosslessName`).
        var text = Array(UnsafeBufferPointer(rebasing: bytes[start..<index]))
        while true {
            guard index < bytes.count else { throw error("unterminated string") }
            let byte = bytes[index]
            switch byte {
            case UInt8(ascii: "\""):
                index += 1
                return String(nameBytes: text)
            case UInt8(ascii: "\\"):
                index += 1
                try parseEscape(into: &text)
            case 0..<0x20:
                throw error("unescaped control character in a string")
            case 0..<0x80:
                text.append(byte)
                index += 1
            default:
                let first = index
                _ = try parseUTF8Scalar()
                text.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[first..<index]))
            }
        }
    }

    /// Appends what the escape at `index` stands for: the UTF-8 of its scalar, or for a lone
    /// `\udc80`...`\udcff` the one byte 0x80...0xFF it carries (PEP 383: a name that is not UTF-8).
    private mutating func parseEscape(into text: inout [UInt8]) throws(ProtocolError) {
        if bytes.count - index >= 5, bytes[index] == UInt8(ascii: "u"), bytes[index + 1] | 0x20 == UInt8(ascii: "d"),
           bytes[index + 2] | 0x20 == UInt8(ascii: "c") {
            let start = index
            index += 1
            let unit = try parseHex4()
            if unit >= 0xDC80 && unit <= 0xDCFF {
                text.append(UInt8(unit & 0xFF))
                return
            }
            index = start
        }
        text.append(contentsOf: String(try parseEscape()).utf8)
    }

    private mutating func parseEscape() throws(ProtocolError) -> Unicode.Scalar {
        guard index < bytes.count else { throw error("unterminated escape") }
        let byte = bytes[index]
        index += 1
        switch byte {
        case UInt8(ascii: "\""): return "\""
        case UInt8(ascii: "\\"): return "\\"
        case UInt8(ascii: "/"): return "/"
        case UInt8(ascii: "b"): return "\u{08}"
        case UInt8(ascii: "f"): return "\u{0C}"
        case UInt8(ascii: "n"): return "\n"
        case UInt8(ascii: "r"): return "\r"
        case UInt8(ascii: "t"): return "\t"
        case UInt8(ascii: "u"):
            let unit = try parseHex4()
            if unit >= 0xD800 && unit < 0xDC00 {
                guard bytes.count - index >= 6, bytes[index] == UInt8(ascii: "\\"),
                    bytes[index + 1] == UInt8(ascii: "u")
                else { throw error("lone high surrogate in \\u escape") }
                index += 2
                let low = try parseHex4()
                guard low >= 0xDC00 && low < 0xE000 else { throw error("high surrogate not followed by a low one") }
                let value = 0x10000 + ((UInt32(unit) - 0xD800) << 10) + (UInt32(low) - 0xDC00)
                return Unicode.Scalar(value)!
            }
            if unit >= 0xDC00 && unit < 0xE000 { throw error("lone low surrogate in \\u escape (only \\udc80...\\udcff, a byte of a name, stands alone)") }
            return Unicode.Scalar(unit)!
        default:
            index -= 1
            throw error("invalid escape \\\(describeNext())")
        }
    }

    private mutating func parseHex4() throws(ProtocolError) -> UInt16 {
        guard bytes.count - index >= 4 else { throw error("truncated \\u escape") }
        var value: UInt16 = 0
        for _ in 0..<4 {
            let byte = bytes[index]
            let digit: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
            default: throw error("invalid hex digit in \\u escape")
            }
            value = value << 4 | UInt16(digit)
            index += 1
        }
        return value
    }

    /// Decodes one multi-byte UTF-8 sequence, rejecting overlong forms, surrogates and values
    /// above U+10FFFF.
    private mutating func parseUTF8Scalar() throws(ProtocolError) -> Unicode.Scalar {
        let lead = bytes[index]
        let length: Int
        var value: UInt32
        switch lead {
        case 0xC2...0xDF: length = 2; value = UInt32(lead & 0x1F)
        case 0xE0...0xEF: length = 3; value = UInt32(lead & 0x0F)
        case 0xF0...0xF4: length = 4; value = UInt32(lead & 0x07)
        default:
            throw ProtocolError(.malformedFrame, "invalid UTF-8 at byte \(index)")
        }
        guard bytes.count - index >= length else {
            throw ProtocolError(.malformedFrame, "truncated UTF-8 sequence at byte \(index)")
        }
        for offset in 1..<length {
            let byte = bytes[index + offset]
            guard byte & 0xC0 == 0x80 else {
                throw ProtocolError(.malformedFrame, "invalid UTF-8 at byte \(index + offset)")
            }
            value = value << 6 | UInt32(byte & 0x3F)
        }
        let minimum: UInt32 = length == 2 ? 0x80 : length == 3 ? 0x800 : 0x10000
        guard value >= minimum, value <= 0x10FFFF, !(0xD800...0xDFFF).contains(value),
            let scalar = Unicode.Scalar(value)
        else {
            throw ProtocolError(.malformedFrame, "invalid UTF-8 (overlong, surrogate or out of range) at byte \(index)")
        }
        index += length
        return scalar
    }
}
