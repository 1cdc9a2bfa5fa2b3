/// A shell-style path pattern for `--path`: `*` matches within one path component, `**` matches
/// across components (`docs/**` is everything under docs; `**/x` is x at any depth, including the
/// top), `?` matches one character other than `/`, `[abc]`, `[a-z]`, `[!x]` match one character
/// from a set, and `\` escapes the next character.
///
/// Paths and patterns are compared relative to the mount root, so a leading `/` on either is
/// ignored. A pattern without `/` matches the last component at any depth (`*.txt` matches
/// `/a/b/c.txt`), as in rsync and gitignore.
public struct PathGlob: Sendable, Hashable, CustomStringConvertible {
    public let pattern: String
    private let bytes: [UInt8]
    private let basenameOnly: Bool

    /// Parses `pattern`; throws `EventLogError.invalidArgument` for an empty pattern or an
    /// unterminated `[` set.
    public init(_ pattern: String) throws {
        var b = Array(pattern.utf8)
        while b.first == UInt8(ascii: "/") { b.removeFirst() }
        guard !b.isEmpty else {
            if pattern.isEmpty { throw EventLogError.invalidArgument("path pattern is empty") }
            // `/` alone means the mount root.
            self.pattern = pattern
            bytes = []
            basenameOnly = false
            return
        }
        var i = 0
        while i < b.count {
            if b[i] == UInt8(ascii: "\\") {
                i += 2
                continue
            }
            if b[i] == UInt8(ascii: "[") {
                var j = i + 1
                if j < b.count && b[j] == UInt8(ascii: "!") { j += 1 }
                if j < b.count && b[j] == UInt8(ascii: "]") { j += 1 }
                while j < b.count && b[j] != UInt8(ascii: "]") { j += 1 }
                guard j < b.count else {
                    throw EventLogError.invalidArgument("path pattern \(pattern): unterminated [ set")
                }
                i = j
            }
            i += 1
        }
        self.pattern = pattern
        bytes = b
        basenameOnly = !b.contains(UInt8(ascii: "/"))
    }

    public var description: String { pattern }

    /// True when `path` (relative to the mount root, leading `/` optional) matches.
    public func matches(_ path: String) -> Bool {
        var p = path
        return p.withUTF8 { raw in
            var s = UnsafeBufferPointer(rebasing: raw[...])
            while let f = s.first, f == UInt8(ascii: "/") { s = UnsafeBufferPointer(rebasing: s.dropFirst()) }
            if basenameOnly, let slash = s.lastIndex(of: UInt8(ascii: "/")) {
                s = UnsafeBufferPointer(rebasing: s[(slash + 1)...])
            }
            return bytes.withUnsafeBufferPointer { pat in
                var budget = 100_000  // bounds backtracking on pathological patterns
                return PathGlob.match(pat, 0, s, s.startIndex, &budget)
            }
        }
    }

    private static let slash = UInt8(ascii: "/")

    private static func match(
        _ p: UnsafeBufferPointer<UInt8>, _ pi: Int, _ s: UnsafeBufferPointer<UInt8>, _ si: Int, _ budget: inout Int
    ) -> Bool {
        var pi = pi
        var si = si
        budget -= 1
        if budget < 0 { return false }
        while pi < p.count {
            let c = p[pi]
            switch c {
            case UInt8(ascii: "*"):
                if pi + 1 < p.count && p[pi + 1] == UInt8(ascii: "*") {
                    // `**`: any run of characters, slashes included. `**/` may also match nothing.
                    var next = pi + 2
                    while next < p.count && p[next] == UInt8(ascii: "*") { next += 1 }
                    if next < p.count && p[next] == slash {
                        if match(p, next + 1, s, si, &budget) { return true }
                    }
                    if next == p.count { return true }
                    var k = si
                    while k <= s.endIndex {
                        if match(p, next, s, k, &budget) { return true }
                        k += 1
                    }
                    return false
                }
                var k = si
                while true {
                    if match(p, pi + 1, s, k, &budget) { return true }
                    if k >= s.endIndex || s[k] == slash { return false }
                    k += 1
                }
            case UInt8(ascii: "?"):
                guard si < s.endIndex, s[si] != slash else { return false }
                si = nextScalar(s, si)
                pi += 1
            case UInt8(ascii: "["):
                guard si < s.endIndex, s[si] != slash else { return false }
                var j = pi + 1
                var negate = false
                if p[j] == UInt8(ascii: "!") {
                    negate = true
                    j += 1
                }
                var found = false
                var first = true
                while first || p[j] != UInt8(ascii: "]") {
                    first = false
                    var lo = p[j]
                    if lo == UInt8(ascii: "\\") && j + 1 < p.count {
                        j += 1
                        lo = p[j]
                    }
                    var hi = lo
                    if j + 2 < p.count && p[j + 1] == UInt8(ascii: "-") && p[j + 2] != UInt8(ascii: "]") {
                        hi = p[j + 2]
                        j += 2
                    }
                    if s[si] >= lo && s[si] <= hi { found = true }
                    j += 1
                }
                guard found != negate else { return false }
                si = nextScalar(s, si)
                pi = j + 1
            default:
                var lit = c
                if c == UInt8(ascii: "\\") && pi + 1 < p.count {
                    pi += 1
                    lit = p[pi]
                }
                guard si < s.endIndex, s[si] == lit else { return false }
                si += 1
                pi += 1
            }
        }
        return si == s.endIndex
    }

    /// Index after the UTF-8 scalar starting at `i`, so `?` matches a character, not a byte.
    private static func nextScalar(_ s: UnsafeBufferPointer<UInt8>, _ i: Int) -> Int {
        var j = i + 1
        while j < s.endIndex && s[j] & 0xC0 == 0x80 { j += 1 }
        return j
    }
}
