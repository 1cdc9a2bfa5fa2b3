import Coordination
import NameBytes
import Testing

/// Names are bytes: the lossless string form, byte equality, and escaping for text.
@Suite struct NameBytesTests {
    @Test(arguments: [
        Array("plain.txt".utf8), [0x63, 0x6F, 0x6C, 0xFF], [0x80], [0xC3], [0xC3, 0xA9], [0xED, 0xA0, 0x80],
        [0xE0, 0x80, 0x80], [0xF4, 0x90, 0x80, 0x80], [0xF4, 0x8D, 0xB2, 0x80], [0xF4, 0x8D, 0xB3, 0xBF, 0x41],
        [0xF4, 0x8D, 0xB2], [0xC0, 0xAF], Array("caf\u{E9}".utf8), Array("cafe\u{301}".utf8),
    ] as [[UInt8]])
    func bytesRoundTrip(bytes: [UInt8]) {
        let s = String(nameBytes: bytes)
        #expect(s.nameBytes == bytes)
        // The buffer initializer (the backing watcher's, on its fanotify records) gives the same string.
        #expect(Array(bytes.withUnsafeBufferPointer { String(nameBuffer: $0) }.utf8) == Array(s.utf8))
        // So do the array slice's and the generic walk (a collection that is neither).
        #expect(Array(String(nameBytes: [0x2F] + bytes + [0x2F]).utf8.dropFirst().dropLast()) == Array(s.utf8))
        #expect(Array(String(nameBytes: ([0x61] + bytes)[1...]).utf8) == Array(s.utf8))
        #expect(Array(String(nameBytes: AnyRandomAccessCollection(bytes)).utf8) == Array(s.utf8))
        var copy: [UInt8] = []
        s.withNameCString { p in var i = 0; while p[i] != 0 { copy.append(UInt8(bitPattern: p[i])); i += 1 } }
        #expect(copy == bytes)
    }

    @Test func validUTF8IsItsOwnString() {
        #expect(String(nameBytes: Array("ç.txt".utf8)) == "ç.txt")
        #expect(LosslessName.isPlain("ç.txt"))
        #expect(!LosslessName.isPlain(String(nameBytes: [0xFF])))
    }

    @Test func differentBytesAreDifferentStrings() {
        // Every undecodable byte, and a real scalar of the escape range, stay apart.
        var seen = Set<[UInt8]>()
        for b in 0x80...0xFF { seen.insert(Array(String(nameBytes: [UInt8(b)]).utf8)) }
        seen.insert(Array(String(nameBytes: [0xF4, 0x8D, 0xB2, 0x80]).utf8))
        #expect(seen.count == 129)
        #expect(String(nameBytes: [0xFF]) != String(nameBytes: [0xFE]))
        #expect(String(nameBytes: [0xFF]) != "\u{FFFD}")
    }

    @Test func normalFormsAreDifferentNames() throws {
        let nfc = "caf\u{E9}", nfd = "cafe\u{301}"
        #expect(nfc == nfd) // String's own ==: canonical equivalence
        #expect(ExactName(nfc) != ExactName(nfd))
        #expect(Set([ExactName(nfc), ExactName(nfd)]).count == 2)
        let a = try ItemPath("d/" + nfc), b = try ItemPath("d/" + nfd)
        #expect(a != b)
        #expect(Set([a, b]).count == 2)
        #expect(!a.isSameOrAncestor(of: b))
        #expect(try !ItemPath(nfc).isAncestor(of: ItemPath(nfd + "/x")))
        #expect(a < b || b < a)
    }

    /// Equality by bytes, for every kind of string storage: small (inline) and large native
    /// strings, substrings made into strings, names that are not UTF-8, and the empty name.
    @Test func exactNamesAreEqualByTheirBytesOnly() {
        let long = String(repeating: "n", count: 40)
        let pairs: [(String, String, Bool)] = [
            ("a", "a", true), ("a", "b", false), ("ab", "a", false), ("", "", true), ("", "a", false),
            (long, String(repeating: "n", count: 40), true), (long, String(long.dropLast()) + "m", false),
            (String(long.dropFirst(20)), String(repeating: "n", count: 20), true),
            ("caf\u{E9}", "cafe\u{301}", false), ("caf\u{E9}", "caf\u{E9}", true),
            (String(nameBytes: [0x66, 0xFF]), String(nameBytes: [0x66, 0xFF]), true),
            (String(nameBytes: [0x66, 0xFF]), String(nameBytes: [0x66, 0xFE]), false),
        ]
        for (a, b, equal) in pairs {
            #expect(ExactName.same(a, b) == equal, "\(a.debugDescription) \(b.debugDescription)")
            #expect((ExactName(a) == ExactName(b)) == equal)
            #expect(ExactName.same(a, b) == (Array(a.utf8) == Array(b.utf8)))
        }
    }

    @Test func aCombiningMarkAfterASlashStillSplits() throws {
        #expect(try ItemPath("a/\u{301}b").components.map(\.utf8.count) == [1, 3])
    }

    @Test func pathsOfBytesKeepEveryByte() throws {
        let bytes: [UInt8] = [0x64, 0xFF, 0x2F, 0x66, 0x80]
        let p = try ItemPath(bytes: bytes)
        #expect(p.components.count == 2)
        #expect(p.bytes == bytes)
        #expect(p != (try ItemPath(bytes: [0x64, 0xFE, 0x2F, 0x66, 0x80])))
    }

    @Test(arguments: [
        ("plain name.txt", "plain name.txt"),
        ("col" + String(nameBytes: [0xFF]), "col\\xff"),
        ("\u{1B}[31mred", "\\x1b[31mred"),
        ("abc\u{202E}txt.exe", "abc\\u202etxt.exe"),
        ("a\u{2066}b\u{2069}\u{200E}\u{200F}", "a\\u2066b\\u2069\\u200e\\u200f"),
        ("line\nbreak\ttab\r", "line\\nbreak\\ttab\\r"),
        ("back\\slash", "back\\\\slash"),
        ("del\u{7F}c1\u{85}", "del\\x7fc1\\u0085"),
        ("ç日本", "ç日本"),
    ])
    func displayEscaping(name: String, shown: String) {
        #expect(name.displayEscaped == shown)
    }
}
