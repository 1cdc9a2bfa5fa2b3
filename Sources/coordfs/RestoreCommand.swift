import NameBytes
import ArgumentParser
import ControlProtocol
import CoordFSClient

/// `coordfs restore PATH --version N`: asks the mount's daemon to write a kept version back.
struct RestoreCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "restore",
        abstract: "Write a kept version of a document back over it (undoable).",
        discussion: """
        Asks the mount's daemon (the only writer of its document store) to write version N back \
        over PATH. The daemon keeps the current file as a new version first (so the restore can \
        itself be undone with another restore), then replaces the document: a coordinated write \
        like any editor's save, where the document's presenters are asked first and told after. \
        A deleted document is re-created (it then belongs to you). The mount must be running, you \
        must be allowed to replace the document, and N must be one of its versions (see \
        `coordfs versions`). A restore counts as one of your accesses until done: when your user \
        already waits for as many as the mount's max_user_accesses allows, it is refused at once \
        with exit status 75 (try again later).

        Example:
          coordfs restore /mnt/docs/report.txt --version 12
        """
    )

    @Argument(help: ArgumentHelp("A document inside a coordfs mount.", valueName: "path"))
    var path: String

    @Option(help: ArgumentHelp("The version number (from `coordfs versions`).", valueName: "n"))
    var version: Int64

    func validate() throws {
        guard version > 0 else { throw ValidationError("--version must be a version number (from `coordfs versions`)") }
    }

    func run() throws {
        let location = try StoreLocation(path)
        try location.requireDocumentPath()
        guard let target = location.mountPath, !location.mount.stale else {
            throw CLIError("the mount of \(location.mount.backing) is not running: a restore is a coordinated write; mount it again first")
        }
        let wanted = VersionID(UInt64(version))
        let result: DocumentRestoreResult
        do {
            let (mount, relative) = try CoordFSMount.containing(target)
            result = try runBlocking { try await mount.restore(wanted, to: relative) }
        } catch {
            throw ControlExit.documentRequestFailed("cannot restore \(exactArgument(path)) to version \(version)", error)
        }
        var message = "restored \(target) to version \(version)"
        if let preserved = result.preservedVersion {
            message += "; the file it replaced is version \(preserved.rawValue) (coordfs restore \(exactArgument(path)) --version \(preserved.rawValue) undoes this)"
        }
        print(message.displayEscaped)
    }
}
