/// Linux names are bytes, not text. coordfs keeps every name and path as the kernel's bytes, also
/// where the code holds it as a Swift `String`, by the rule of PEP 383 ("surrogateescape") moved to
/// private use: a byte that is not part of valid UTF-8 (always 0x80...0xFF) is held as the scalar
/// U+10DC80...U+10DCFF (`U+10DC00 + byte`), because a Swift string cannot hold the lone surrogate
/// U+DC80...U+DCFF that Python uses. A real scalar of that range in a name is held as its four
/// bytes, each escaped, so decoding is one-to-one: `String(nameBytes:)` then `nameBytes` gives back
/// exactly the bytes, and two different names are two different strings.
///
/// Names held so must be compared by `utf8` (never by `==` on `String`, which treats the NFC and NFD
/// spellings of "café" as equal although they are two different Linux names): see `ExactName`.
///
/// At the edges a name becomes bytes again: syscalls (`withNameCString`), JSON (`\udcNN`, the
/// surrogate PEP 383 uses; `JSONText`), and text for people (`displayEscaped`: `\xNN`).
public enum LosslessName {
    /// The first scalar of the escape range: byte `b` (0x80...0xFF) is held as `base + b`.
    public static let base: UInt32 = 0x10DC00

    /// The byte an escape scalar stands for, or nil for any other scalar.
    @inline(__always)
    public static func escapedByte(_ scalar: Unicode.Scalar) -> UInt8? {
        let v = scalar.value
        return v >= base + 0x80 && v <= base + 0xFF ? UInt8(truncatingIfNeeded: v - base) : nil
    }

    /// The escape scalar of byte `b` (0x80...0xFF).
    @inline(__always)
    public static func escape(_ b: UInt8) -> Unicode.Scalar { Unicode.Scalar(base + UInt32(b))! }

    /// The length of the valid UTF-8 scalar at `i`, or 0 when the byte there starts none (a lone
    /// continuation byte, an overlong form, a surrogate, beyond U+10FFFF, or cut short).
    @inline(__always)
    static func scalarLength<C: RandomAccessCollection>(_ b: C, at i: C.Index) -> Int where C.Element == UInt8 {
        let b0 = b[i]
        if b0 < 0x80 { return 1 }
        let left = b.distance(from: i, to: b.endIndex)
        func cont(_ k: Int) -> UInt8? {
            guard k < left else { return nil }
            let x = b[b.index(i, offsetBy: k)]
            return x & 0xC0 == 0x80 ? x : nil
        }
        switch b0 {
        case 0xC2...0xDF: return cont(1) != nil ? 2 : 0
        case 0xE0...0xEF:
            guard let b1 = cont(1), cont(2) != nil else { return 0 }
            if b0 == 0xE0 && b1 < 0xA0 { return 0 }      // overlong
            if b0 == 0xED && b1 >= 0xA0 { return 0 }     // UTF-16 surrogate
            return 3
        case 0xF0...0xF4:
            guard let b1 = cont(1), cont(2) != nil, cont(3) != nil else { return 0 }
            if b0 == 0xF0 && b1 < 0x90 { return 0 }      // overlong
            if b0 == 0xF4 && b1 >= 0x90 { return 0 }     // beyond U+10FFFF
            return 4
        default: return 0
        }
    }

    /// Whether the 4-byte scalar at `i` (known valid) is in the escape range (F4 8D B2 80...F4 8D B3 BF).
    @inline(__always)
    static func isEscapeRange<C: RandomAccessCollection>(_ b: C, at i: C.Index) -> Bool where C.Element == UInt8 {
        b[i] == 0xF4 && b[b.index(i, offsetBy: 1)] == 0x8D && b[b.index(i, offsetBy: 2)] & 0xFE == 0xB2
    }

    /// Whether `bytes` are valid UTF-8 without scalars of the escape range: then the string is the
    /// plain decoding.
    static func isPlain<C: RandomAccessCollection>(_ bytes: C) -> Bool where C.Element == UInt8 {
        var i = bytes.startIndex
        while i != bytes.endIndex {
            if bytes[i] < 0x80 { i = bytes.index(after: i); continue }
            let n = scalarLength(bytes, at: i)
            if n == 0 || (n == 4 && isEscapeRange(bytes, at: i)) { return false }
            i = bytes.index(i, offsetBy: n)
        }
        return true
    }

    /// The string that holds `bytes` losslessly.
    public static func string<C: RandomAccessCollection>(_ bytes: C) -> String where C.Element == UInt8 {
        if isPlain(bytes) { return String(decoding: bytes, as: UTF8.self) }
        var scalars = String.UnicodeScalarView()
        var i = bytes.startIndex
        while i != bytes.endIndex {
            let n = scalarLength(bytes, at: i)
            if n == 0 || (n == 4 && isEscapeRange(bytes, at: i)) {
                for k in 0..<max(n, 1) { scalars.append(escape(bytes[bytes.index(i, offsetBy: k)])) }
                i = bytes.index(i, offsetBy: max(n, 1))
                continue
            }
            let end = bytes.index(i, offsetBy: n)
            scalars.append(contentsOf: String(decoding: bytes[i..<end], as: UTF8.self).unicodeScalars)
            i = end
        }
        return String(scalars)
    }

    /// Whether `string` holds only valid UTF-8 (no escaped bytes): its `utf8` are its bytes.
    @inline(__always)
    public static func isPlain(_ string: String) -> Bool {
        // Escape scalars are the only ones whose UTF-8 starts F4 8D B2 or F4 8D B3.
        var s = string
        return s.withUTF8 { u in
            guard u.contains(0xF4) else { return true }
            var i = 0
            while i < u.count {
                if u[i] == 0xF4, i + 2 < u.count, u[i + 1] == 0x8D, u[i + 2] & 0xFE == 0xB2 { return false }
                i += 1
            }
            return true
        }
    }

    /// How many bytes `string` holds (see the type's rule): its UTF-8 less three for each escaped
    /// byte (an escape scalar is four bytes of UTF-8 and stands for one byte).
    public static func byteCount<S: StringProtocol>(_ string: S) -> Int {
        var count = 0
        var lead = 0   // how far into a possible escape's F4 8D B2/B3 prefix the last bytes were
        for b in string.utf8 {
            count += 1
            switch (lead, b) {
            case (_, 0xF4): lead = 1
            case (1, 0x8D): lead = 2
            case (2, 0xB2), (2, 0xB3): count -= 3; lead = 0
            default: lead = 0
            }
        }
        return count
    }

    /// The bytes `string` holds (see the type's rule).
    public static func bytes(_ string: String) -> [UInt8] {
        if isPlain(string) { return Array(string.utf8) }
        var out: [UInt8] = []
        out.reserveCapacity(string.utf8.count)
        for scalar in string.unicodeScalars {
            if let b = escapedByte(scalar) { out.append(b) } else { out.append(contentsOf: String(scalar).utf8) }
        }
        return out
    }
}

extension String {
    /// The string that holds `bytes` losslessly (`LosslessName`).
    public init<C: RandomAccessCollection>(nameBytes bytes: C) where C.Element == UInt8 {
        self = LosslessName.string(bytes)
    }

    /// `init(nameBytes:)` for an array: chosen over the generic one wherever the bytes are an
    /// array (a path read from /proc, a name from a record), so those callers in other modules run
    /// the walk made for a buffer here, not the unspecialized generic one (17,800 instructions for
    /// a 40-byte path, against a few hundred).
    public init(nameBytes bytes: [UInt8]) {
        self = bytes.withUnsafeBufferPointer { LosslessName.string($0) }
    }

    /// `init(nameBytes:)` for a slice of an array (see the array's).
    public init(nameBytes bytes: ArraySlice<UInt8>) {
        self = bytes.withUnsafeBufferPointer { LosslessName.string($0) }
    }

    /// The string that holds the bytes of `buffer` losslessly (`LosslessName`): the generic
    /// `init(nameBytes:)` made for one buffer type here, so that a caller in another module with
    /// bytes in memory (the backing watcher's fanotify records) does not run the unspecialized
    /// generic walk (some 2,800 instructions for a short name, against 250).
    public init(nameBuffer buffer: UnsafeBufferPointer<UInt8>) {
        self = LosslessName.string(buffer)
    }

    /// The string that holds the NUL-terminated `cString` losslessly (`LosslessName`).
    public init(nameCString cString: UnsafePointer<CChar>) {
        let n = strlenNoLibc(cString)
        self = cString.withMemoryRebound(to: UInt8.self, capacity: n) {
            LosslessName.string(UnsafeBufferPointer(start: $0, count: n))
        }
    }

    /// The bytes this string holds (`LosslessName`): a name's bytes as the kernel has them.
    public var nameBytes: [UInt8] { LosslessName.bytes(self) }

    /// Calls `body` with the NUL-terminated bytes this string holds: for syscalls on names.
    public func withNameCString<R>(_ body: (UnsafePointer<CChar>) throws -> R) rethrows -> R {
        if LosslessName.isPlain(self) { return try withCString(body) }
        var bytes = LosslessName.bytes(self)
        bytes.append(0)
        return try bytes.withUnsafeBufferPointer { b in
            try b.withMemoryRebound(to: CChar.self) { try body($0.baseAddress!) }
        }
    }
}

@inline(__always)
private func strlenNoLibc(_ p: UnsafePointer<CChar>) -> Int {
    var n = 0
    while p[n] != 0 { n += 1 }
    return n
}
