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
        diffs as empty. Exits 0 either way. A symbolic link put in place of the document (or of a \
        folder on its way inside the mount) is not followed: it is said to be a link, exit 1.

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
            // The file now is read without following a symbolic link (its name, or a folder on
            // its way below the mount point), as the store does for a user who reads it directly:
            // a link put in place of the document is not the document (for the store it was
            // deleted), and where it points is not shown as the document's bytes.
            let old = try location.contentsThroughDaemon(ofVersion: version)
            var new: [UInt8] = []
            switch NoLinkRead.read(location.relative, below: location.mount.mountpoint ?? "/") {
            case .bytes(let bytes): new = bytes
            case .missing: break
            case .link(let at, let target): throw linkError(at, target)
            case .notAFile, .tooLarge: throw CLIError("\(location.relative) is not a regular file")
            case .failed(let code): throw CLIError("cannot read \(location.mountPath ?? path): \(String(cString: strerror(code)))")
            }
            diff = TextMerge.unifiedDiff(old: old, new: new, oldLabel: "a/\(location.relative.displayEscaped) (version \(version))",
                                         newLabel: "b/\(location.relative.displayEscaped) (current)")
        } else {
            let store = try location.openStore()
            let kept = try location.version(version, in: store)
            do {
                diff = try storeCall { try store.diff(kept.id, againstCurrentOf: location.relative) }
            } catch {
                // The store refuses a link in place of the document ("not a regular file"): say it is one.
                if case .link(let at, let target) = NoLinkRead.read(location.relative, below: location.mount.backing, atMost: 0) {
                    throw linkError(at, target)
                }
                throw error
            }
        }
        print(diff, terminator: diff.isEmpty || diff.hasSuffix("\n") ? "" : "\n")
    }

    private func linkError(_ at: String, _ target: String) -> CLIError {
        CLIError("\(at) is a symbolic link (to \(target)), not a document: coordfs diff does not follow it "
            + "(coordfs show \(path) --version \(version) prints the version)")
    }
}
