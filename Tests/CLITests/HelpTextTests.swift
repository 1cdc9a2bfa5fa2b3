import XCTest

/// `coordfs --help` and every subcommand's, as a user's terminal shows them (80 columns, the
/// argument parser's width when not on a terminal).
final class HelpTextTests: CLITestCase {
    /// The subcommands `coordfs --help` lists.
    private func subcommands() -> [String] {
        let help = coordfs("--help")
        XCTAssertEqual(help.status, 0, "\(help)")
        let lines = help.stdout.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        guard let start = lines.firstIndex(of: "SUBCOMMANDS:") else { return [] }
        let listed = lines[(start + 1)...].prefix { !$0.isEmpty }
        return listed.compactMap { line in
            // "  NAME[, ALIAS]   abstract": a name at two spaces' indent; an abstract's wrapped
            // line is indented further.
            guard line.hasPrefix("  "), !line.hasPrefix("   "), let name = line.split(separator: " ").first else { return nil }
            return String(name.split(separator: ",")[0])
        }
    }

    /// Lines at the left margin that the text broke before the terminal's width did: each
    /// paragraph's lines are joined in the source, so only the argument parser wraps them. Allowed
    /// are ends of sentences or headings (`.` or `:`) and a next line that starts a label of a list
    /// ("event log: ...").
    private static func brokenLines(_ text: String) -> [String] {
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        var broken: [String] = []
        for (a, b) in zip(lines, lines.dropFirst()) {
            guard let first = a.first, let next = b.first, !first.isWhitespace, !next.isWhitespace else { continue }
            if a.hasSuffix(".") || a.hasSuffix(":") { continue }
            if b.range(of: #"^[\w/ ()-]{1,24}: "#, options: .regularExpression) != nil { continue }
            let word = b.split(separator: " ").first.map(String.init) ?? b
            if a.count + 1 + word.count <= 70 { broken.append("\(a) | \(b)") }
        }
        return broken
    }

    func testEveryHelpTextWrapsAtTheTerminalsWidthOnly() {
        let names = subcommands()
        XCTAssertTrue(names.contains("mount") && names.contains("resolve") && names.count >= 10, "SUBCOMMANDS not found in coordfs --help: \(names)")
        for arguments in [["--help"]] + names.map({ [$0, "--help"] }) {
            let help = coordfs(arguments: arguments)
            XCTAssertEqual(help.status, 0, "coordfs \(arguments.joined(separator: " ")): \(help)")
            XCTAssertGreaterThan(help.stdout.count, 200, "coordfs \(arguments.joined(separator: " "))")
            let broken = Self.brokenLines(help.stdout)
            XCTAssertEqual(broken, [], "coordfs \(arguments.joined(separator: " ")) breaks lines before the width")
        }
    }
}
