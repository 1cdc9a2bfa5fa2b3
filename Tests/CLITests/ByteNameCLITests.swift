import Foundation
import Glibc
import XCTest

/// Names are bytes through the command line: `watch`/`log` JSON that round-trips to the exact bytes
/// (PEP 383, checked with Python's own json and os.fsencode), text that shows `\xNN` and cannot be
/// forged by control or bidirectional-override characters, and paths given on the command line
/// that are not UTF-8.
final class ByteNameCLITests: CLITestCase {
    /// A shell word for `bytes` (octal escapes for printf).
    func word(_ bytes: [UInt8]) -> String {
        "\"$(printf '" + bytes.map { String(format: "\\%03o", $0) }.joined() + "')\""
    }

    /// Creates `BACKING/name` (the name as bytes) holding `contents`.
    func makeBackingFile(_ name: [UInt8], _ contents: String = "") {
        let fd = open((Array(backing.utf8) + [UInt8(ascii: "/")] + name + [0]).map { CChar(bitPattern: $0) }, O_CREAT | O_WRONLY, 0o644)
        XCTAssertGreaterThanOrEqual(fd, 0)
        _ = contents.withCString { Glibc.write(fd, $0, strlen($0)) }
        close(fd)
    }

    /// `coordfs present ARGUMENTS` through the shell (so a path can be given as bytes), once registered.
    func presentThroughShell(_ arguments: String) throws -> Child {
        let presenter = try start("/bin/sh", ["-c", "exec '\(binary!)' present \(arguments)"])
        let registered = Date().addingTimeInterval(10)
        while !presenter.lines.contains(where: { $0.hasPrefix("registered") }) && Date() < registered { usleep(20_000) }
        return presenter
    }

    /// `sh(script)` again until it prints something (the store works after the write returned).
    func untilOutput(_ script: String, timeout: Double = 8) -> CommandResult {
        var result = sh(script)
        let deadline = Date().addingTimeInterval(timeout)
        while result.lines.isEmpty && Date() < deadline {
            usleep(50_000)
            result = sh(script)
        }
        return result
    }

    /// `path` (bytes) as the hex Python prints for `os.fsencode(...).hex()`.
    func hex(_ path: [UInt8]) -> String { path.map { String(format: "%02x", $0) }.joined() }

    /// `coordfs log --info --json` writes strings as every JSON coordfs writes does (the protocol,
    /// the log's records, `versions`/`conflicts`): a backing folder named with a tab, a quote, a
    /// backslash and DEL is `\t`, `\"`, `\\` and `\u007f` there (it wrote `\u0009` and DEL raw
    /// with an escaper of its own).
    func testLogInfoJSONEscapesAsTheOtherJSONDoes() throws {
        let name = "b\t\"q\\\u{7F}k"
        backing = root + "/" + name
        XCTAssertEqual(mkdir(backing, 0o755), 0)
        try mount()
        FileOps.put(mnt + "/f", "x")
        unmount()
        let r = coordfs("log", "--backing", backing, "--info", "--json")
        XCTAssertEqual(r.status, 0, "\(r)")
        XCTAssertTrue(r.stdout.contains(#""backing":""# + root + #"/b\t\"q\\\u007fk""#), r.stdout)
        let object = try JSONSerialization.jsonObject(with: Data(r.stdout.utf8)) as? [String: Any]
        XCTAssertEqual(object?["backing"] as? String, backing)
    }

    func testWatchAndLogJSONRoundTripTheBytesAndTextEscapesThem() throws {
        try mount()
        let watcher = try startCoordfs(["watch", mnt, "--json"])
        let listening = Date().addingTimeInterval(10)
        while watcher.lines.isEmpty && Date() < listening { _ = sh("touch '\(mnt!)/.poke'"); usleep(50_000) }
        let names: [[UInt8]] = [Array("col".utf8) + [0xFF], Array("col".utf8) + [0xFE], Array("\u{1B}[31mred\u{202E}txt.exe".utf8)]
        for name in names {
            let r = sh("cd '\(mnt!)' && printf x > \(word(name))")
            XCTAssertEqual(r.status, 0, "\(r)")
        }
        // Every line is JSON (Python's strict loads), and the paths are exactly the bytes created.
        let python = """
            import json, os, sys
            seen = set()
            for line in sys.stdin:
                r = json.loads(line)
                if r["kind"] == "subitemAppeared" or r["kind"] == "intentRequested":
                    seen.add(os.fsencode(r["path"]).hex())
            print(" ".join(sorted(seen)))
            """
        let all = names.map { hex([UInt8(ascii: "/")] + $0) }
        let watched = Date().addingTimeInterval(10)
        while !all.allSatisfy({ h in sh("python3 -c '\(python)' < '\(watcher.stdoutPath)'").stdout.contains(h) }) && Date() < watched { usleep(50_000) }
        watcher.stop()
        for source in ["\"$COORDFS\" log '\(mnt!)' --json", "cat '\(watcher.stdoutPath)'"] {
            let r = sh("\(source) | python3 -c '\(python)'")
            XCTAssertEqual(r.status, 0, "\(source): \(r)")
            let seen = Set(r.stdout.split(whereSeparator: { $0 == " " || $0 == "\n" }).map(String.init))
            for h in all { XCTAssertTrue(seen.contains(h), "\(source): no record with the path bytes \(h): \(r.stdout)") }
        }
        // A path given on the command line as bytes selects exactly that name's records.
        let one = sh("\"$COORDFS\" log \(word(Array(mnt.utf8) + [UInt8(ascii: "/")] + names[0])) --json | python3 -c 'import json, os, sys; print(\" \".join(sorted(set(os.fsencode(json.loads(l)[\"path\"]).hex() for l in sys.stdin))))'")
        XCTAssertEqual(one.lines, [hex([UInt8(ascii: "/")] + names[0])], "\(one)")
        // Text: \xff, and no raw ESC or U+202E reaches the terminal.
        let text = coordfs("log", mnt)
        XCTAssertEqual(text.status, 0, "\(text)")
        XCTAssertTrue(text.stdout.contains("/col\\xff"), text.stdout)
        XCTAssertTrue(text.stdout.contains("/col\\xfe"), text.stdout)
        XCTAssertTrue(text.stdout.contains("/\\x1b[31mred\\u202etxt.exe"), text.stdout)
        XCTAssertFalse(text.stdout.contains("\u{1B}"), text.stdout)
        XCTAssertFalse(text.stdout.contains("\u{202E}"), text.stdout)
        XCTAssertFalse(text.stdout.contains("\u{FFFD}"), text.stdout)
    }
}

extension ByteNameCLITests {
    func testPresentVersionsAndShowWorkForANameThatIsNotUTF8() throws {
        let name = Array("doc".utf8) + [0xFF] + Array(".txt".utf8)
        makeBackingFile(name, "one\n")
        try mount()
        let mounted = word(Array(mnt.utf8) + [UInt8(ascii: "/")] + name)
        // The path comes from argv as bytes (Swift's CommandLine.arguments would say doc\u{FFFD}.txt).
        let presenter = try presentThroughShell(mounted)
        XCTAssertTrue(presenter.lines.contains { $0.hasPrefix("registered") && $0.hasSuffix(" doc\\xff.txt") }, presenter.stdout + presenter.stderr)

        XCTAssertEqual(sh("printf 'two\\n' > \(mounted)").status, 0)
        let told = Date().addingTimeInterval(5)
        while !presenter.lines.contains(where: { $0.hasPrefix("notification didChange") }) && Date() < told { usleep(20_000) }
        XCTAssertTrue(presenter.lines.contains { $0.hasPrefix("ask ") && $0.contains(" relinquishToWriter doc\\xff.txt ") }, presenter.stdout)
        XCTAssertTrue(presenter.lines.contains("notification didChange doc\\xff.txt"), presenter.stdout)

        // The store kept the old contents under the exact name: JSON carries the bytes, text escapes them.
        let kept = untilOutput("\"$COORDFS\" versions --json \(mounted) | python3 -c 'import json, os, sys; [print(os.fsencode(json.loads(l)[\"path\"]).hex(), json.loads(l)[\"version\"]) for l in sys.stdin]'")
        XCTAssertEqual(kept.status, 0, "\(kept)")
        XCTAssertEqual(kept.lines.first?.split(separator: " ").first.map(String.init), hex([UInt8(ascii: "/")] + name), "\(kept)")
        let version = try XCTUnwrap(kept.lines.first?.split(separator: " ").last.map(String.init))
        XCTAssertEqual(sh("\"$COORDFS\" show \(mounted) --version \(version)").stdout, "one\n")
        let diff = sh("\"$COORDFS\" diff \(mounted) --version \(version)")
        XCTAssertTrue(diff.stdout.contains("a/doc\\xff.txt (version \(version))") && diff.stdout.contains("-one\n+two\n"), "\(diff)")
        let table = sh("\"$COORDFS\" versions \(mounted)")
        XCTAssertEqual(table.status, 0, "\(table)")
        XCTAssertFalse(table.stdout.contains("\u{FFFD}"), table.stdout)
        presenter.stop()
    }
}

extension ByteNameCLITests {
    func testStatusEscapesHostileNamesInTextAndKeepsTheirBytesInJSON() throws {
        let name = Array("\u{1B}[31mred\u{202E}".utf8) + [0xFF]
        makeBackingFile(name)
        try mount()
        let presenter = try presentThroughShell(word(Array(mnt.utf8) + [UInt8(ascii: "/")] + name))
        XCTAssertTrue(presenter.lines.contains { $0.hasSuffix(" \\x1b[31mred\\u202e\\xff") }, presenter.stdout + presenter.stderr)
        XCTAssertFalse(presenter.stdout.contains("\u{1B}"), presenter.stdout)

        let text = coordfs("status", mnt)
        XCTAssertEqual(text.status, 0, "\(text)")
        XCTAssertTrue(text.stdout.contains("\\x1b[31mred\\u202e\\xff"), text.stdout)
        XCTAssertFalse(text.stdout.contains("\u{1B}") || text.stdout.contains("\u{202E}") || text.stdout.contains("\u{FFFD}"), text.stdout)
        let json = sh("\"$COORDFS\" status '\(mnt!)' --json | python3 -c 'import json, os, sys; print(\" \".join(os.fsencode(p[\"path\"]).hex() for p in json.load(sys.stdin)[\"presenters\"]))'")
        XCTAssertEqual(json.status, 0, "\(json)")
        XCTAssertTrue(json.stdout.contains(hex(name)), "\(json)")
        presenter.stop()
    }
}

extension ByteNameCLITests {
    func testConflictsAndAKeepBothResolutionOfANameThatIsNotUTF8() throws {
        let name = Array("c".utf8) + [0xFF] + Array(".txt".utf8)
        makeBackingFile(name, "base\n")
        try mount()
        let mounted = word(Array(mnt.utf8) + [UInt8(ascii: "/")] + name)
        let presenter = try presentThroughShell("--unsaved " + mounted)
        XCTAssertEqual(sh("printf 'theirs\\n' > \(mounted)").status, 0)

        // The conflict's path is the exact bytes in JSON, escaped in the table.
        let python = "import json, os, sys; [print(os.fsencode(json.loads(l)[\"path\"]).hex()) for l in sys.stdin]"
        let listed = untilOutput("\"$COORDFS\" conflicts '\(mnt!)' --json | python3 -c '\(python)'")
        XCTAssertEqual(listed.lines, [hex(Array(mnt.utf8) + [UInt8(ascii: "/")] + name)], "\(listed)")
        let table = coordfs("conflicts", mnt)
        XCTAssertTrue(table.stdout.contains("/c\\xff.txt"), table.stdout)
        XCTAssertEqual(sh("\"$COORDFS\" conflicts \(mounted) --json").lines.count, 1, "conflicts of the path given as bytes")

        let mine = root + "/mine.txt"
        try "mine\n".write(toFile: mine, atomically: false, encoding: .utf8)
        let resolved = sh("\"$COORDFS\" resolve \(mounted) --keep-both --from '\(mine)'")
        XCTAssertEqual(resolved.status, 0, "\(resolved)")
        XCTAssertTrue(resolved.stdout.contains("c\\xff"), resolved.stdout)
        // The copy sits beside the document under a name that starts with the document's bytes.
        var names: [[UInt8]] = []
        if let dir = opendir(backing) {
            while let entry = readdir(dir) {
                names.append(withUnsafeBytes(of: entry.pointee.d_name) { Array($0.prefix { $0 != 0 }) })
            }
            closedir(dir)
        }
        XCTAssertTrue(names.contains(name), "\(names)")
        XCTAssertTrue(names.contains { $0.starts(with: Array("c".utf8) + [0xFF] + Array(" (conflict ".utf8)) && $0.hasSuffixBytes(Array(").txt".utf8)) }, "\(names)")
        presenter.stop()
    }
}

extension ByteNameCLITests {
    /// A name of every byte but NUL and `/` (254 bytes) and one of 255 bytes that are not UTF-8 are
    /// presented, asked and told, listed with their conflicts, and a keep-both of the long one
    /// writes a copy whose name fits 255 bytes. `coordfs present` refused both ("a component of the
    /// path is 638 bytes long": the UTF-8 of the name's lossless form was counted, four bytes for
    /// each byte that is not UTF-8), and a keep-both copy of a name past about 225 bytes failed with
    /// ENAMETOOLONG.
    func testEveryByteAndNamesOf255BytesArePresentedToldAndKeptBoth() throws {
        let everyByte = (1...255).map(UInt8.init).filter { $0 != UInt8(ascii: "/") }
        let long = [UInt8](repeating: 0xFF, count: 251) + Array(".txt".utf8)
        XCTAssertEqual(long.count, 255)
        for name in [everyByte, long] { makeBackingFile(name, "base\n") }
        try mount()
        for name in [everyByte, long] {
            let mounted = word(Array(mnt.utf8) + [UInt8(ascii: "/")] + name)
            let presenter = try presentThroughShell("--unsaved " + mounted)
            defer { presenter.stop() }
            guard presenter.lines.contains(where: { $0.hasPrefix("registered") }) else {
                return XCTFail("\(name.count)-byte name not presented: \(presenter.stdout) \(presenter.stderr)")
            }
            XCTAssertEqual(sh("printf 'theirs\\n' > \(mounted)").status, 0)
            let told = Date().addingTimeInterval(5)
            while !presenter.lines.contains(where: { $0.hasPrefix("notification didChange") }) && Date() < told { usleep(20_000) }
            XCTAssertTrue(presenter.lines.contains { $0.hasPrefix("ask ") && $0.contains(" relinquishToWriter ") }, presenter.stdout)
            XCTAssertTrue(presenter.lines.contains { $0.hasPrefix("notification didChange ") }, presenter.stdout)
            let python = "import json, os, sys; [print(os.fsencode(json.loads(l)[\"path\"]).hex()) for l in sys.stdin]"
            let listed = untilOutput("\"$COORDFS\" conflicts \(mounted) --json | python3 -c '\(python)'")
            XCTAssertEqual(listed.lines, [hex(Array(mnt.utf8) + [UInt8(ascii: "/")] + name)], "\(listed)")
        }
        let mine = root + "/mine.txt"
        try "mine\n".write(toFile: mine, atomically: false, encoding: .utf8)
        let resolved = sh("\"$COORDFS\" resolve \(word(Array(mnt.utf8) + [UInt8(ascii: "/")] + long)) --keep-both --from '\(mine)'")
        XCTAssertEqual(resolved.status, 0, "keep both of a 255-byte name: \(resolved)")
        // The path the user gave is shown with its bytes escaped (it was shown with U+FFFD).
        XCTAssertTrue(resolved.stdout.contains("of \(mnt!)/" + String(repeating: "\\xff", count: 251) + ".txt"), resolved.stdout)
        XCTAssertFalse(resolved.stdout.contains("\u{FFFD}"), resolved.stdout)
        var names: [[UInt8]] = []
        if let dir = opendir(backing) {
            while let entry = readdir(dir) {
                names.append(withUnsafeBytes(of: entry.pointee.d_name) { Array($0.prefix { $0 != 0 }) })
            }
            closedir(dir)
        }
        let copies = names.filter { $0 != long && $0.starts(with: [UInt8](repeating: 0xFF, count: 100)) }
        XCTAssertEqual(copies.count, 1, "the keep-both copy beside the 255-byte name: \(names.map { $0.count })")
        if let copy = copies.first {
            XCTAssertTrue(copy.hasSuffixBytes(Array(").txt".utf8)) && copy.count <= 255, "copy name of \(copy.count) bytes")
            let fd = open((Array(backing.utf8) + [UInt8(ascii: "/")] + copy + [0]).map { CChar(bitPattern: $0) }, O_RDONLY)
            var buffer = [UInt8](repeating: 0, count: 16)
            let n = fd >= 0 ? read(fd, &buffer, 16) : -1
            if fd >= 0 { close(fd) }
            XCTAssertEqual(n > 0 ? Array(buffer[..<n]) : [], Array("mine\n".utf8), "the copy holds mine")
        }
    }
}

private extension Array where Element == UInt8 {
    func hasSuffixBytes(_ suffix: [UInt8]) -> Bool { count >= suffix.count && Array(self[(count - suffix.count)...]) == suffix }
}

extension ByteNameCLITests {
    /// The one exception to "names are bytes": the folders' own paths. Refused, saying why.
    func testAMountOfAFolderWhosePathIsNotUTF8IsRefusedSayingWhy() throws {
        let folder = word(Array(root.utf8) + Array("/b".utf8) + [0xFF])
        let r = sh("mkdir \(folder) && \"$COORDFS\" mount \(folder) '\(mnt!)'")
        XCTAssertNotEqual(r.status, 0, "\(r)")
        XCTAssertTrue(r.stderr.contains("the backing folder's path \(root!)/b\\xff is not UTF-8"), "\(r)")
        XCTAssertTrue(Self.mounts(under: root).isEmpty)
    }

    /// Mount points are bytes: the NFC and NFD spellings of one name are two folders, so a mount on
    /// one does not make the other "already mounted", and `coordfs unmount` finds each by its own
    /// bytes (given with a trailing slash, or through `..`), leaving the other mounted; a mount point
    /// whose name mountinfo escapes (space, tab, newline, backslash) is found too.
    func testNFCAndNFDMountPointsAreTwoMounts() throws {
        let nfd = root + "/m-cafe\u{301}", nfc = root + "/m-caf\u{E9}"
        func mounted(_ path: String) -> Bool { Self.mounts(under: root).contains { Array($0.utf8) == Array(path.utf8) } }
        XCTAssertEqual(mkdir(nfd, 0o755), 0)
        XCTAssertEqual(mkdir(nfc, 0o755), 0)
        let second = root + "/backing2"
        XCTAssertEqual(mkdir(second, 0o755), 0)
        mnt = nfd
        try mount()
        let r = coordfs("mount", second, nfc)
        XCTAssertEqual(r.status, 0, "a mount on the NFD name is none on the NFC one: \(r)")
        XCTAssertTrue(mounted(nfc) && mounted(nfd), "\(Self.mounts(under: root))")
        let u = coordfs("unmount", nfc + "/")
        XCTAssertEqual(u.status, 0, "\(u)")
        XCTAssertFalse(mounted(nfc))
        XCTAssertTrue(mounted(nfd), "the NFD mount is another mount: left alone")
        XCTAssertEqual(coordfs("unmount", nfc).status == 0, false, "nothing mounted there any more")
        let v = coordfs("unmount", root + "/backing2/../m-cafe\u{301}")
        XCTAssertEqual(v.status, 0, "\(v)")
        XCTAssertFalse(mounted(nfd))
        // mountinfo writes a space, tab, newline and backslash as octal escapes: found all the same.
        let escaped = root + "/m a\tb\\c\nd"
        XCTAssertEqual(mkdir(escaped, 0o755), 0)
        mnt = escaped
        try mount()
        let again = coordfs("mount", second, escaped)
        XCTAssertNotEqual(again.status, 0, "\(again)")
        XCTAssertTrue(again.stderr.contains("is already a coordfs mount"), "\(again)")
        let w = coordfs("unmount", escaped)
        XCTAssertEqual(w.status, 0, "\(w)")
        XCTAssertFalse(mounted(escaped))
    }
}
