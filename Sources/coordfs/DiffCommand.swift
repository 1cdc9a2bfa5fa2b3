import ArgumentParser
import DocumentStore
import Glibc
import Linux
import NameBytes

/// `coordfs diff PATH --version N`: a unified diff from a kept version to the current file.
struct DiffCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "diff",
        abstract: "Show what changed in a document since a kept version.",
        discussion: """
        Prints a unified diff (3 lines of context) from version N of PATH to the file as it is now; \
        nothing when they are equal, "Binary files ... differ" for binary contents. A deleted file \
        diffs as empty. Exits 0 either way.

        Example:
          coordfs diff /mnt/docs/report.txt --version 12
        """
    )

    @Argument(help: ArgumentHelp("A document inside a coordfs mount.", valueName: "path"))
    var path: String

    @Option(help: ArgumentHelp("The version number (from `coordfs versions`).", valueName: "n"))
    var version: Int64

    func run() throws {
        let location = try StoreLocation(path)
        let diff: String
        if location.throughDaemon {
            // The version from the daemon, the file as it is now through the mount (as this user).
            let old = try location.contentsThroughDaemon(ofVersion: version)
            let current = location.mountPath ?? path
            var new: [UInt8] = []
            if let bytes = readWholeFileBytes(current) {
                new = bytes
            } else if errno != ENOENT {
                throw CLIError("cannot read \(current): \(String(cString: strerror(errno)))")
            }
            diff = TextMerge.unifiedDiff(old: old, new: new, oldLabel: "a/\(location.relative.displayEscaped) (version \(version))",
                                         newLabel: "b/\(location.relative.displayEscaped) (current)")
        } else {
            let store = try location.openStore()
            let kept = try location.version(version, in: store)
            diff = try storeCall { try store.diff(kept.id, againstCurrentOf: location.relative) }
        }
        print(diff, terminator: diff.isEmpty || diff.hasSuffix("\n") ? "" : "\n")
    }
}
