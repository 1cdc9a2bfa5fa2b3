import NameBytes
import ArgumentParser
import DocumentStore
import CoordFSClient
import ControlProtocol
import Foundation
import Glibc

/// `coordfs resolve PATH --save|--reload|--close|--keep-both|--merge`.
struct ResolveCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "resolve",
        abstract: "Resolve a document's conflict.",
        discussion: """
        Resolves the open conflict of PATH (see `coordfs conflicts`):
          --close      drop your version; the file stays as it is (or deleted)
          --save       write your version (--from FILE) over theirs; restores a deleted file
          --reload     take theirs, drop yours; refused when the file was deleted
          --keep-both  write your version (--from FILE) beside the file as \
        "NAME (conflict DATE TIME).EXT"; the file stays theirs
          --merge      three-way merge of yours (--from FILE) and theirs against the base, written \
        over the file; overlapping changes are marked <<<<<<< mine / ======= / >>>>>>> theirs as \
        git merge-file marks them. Text only; refused for deletions.
        A lost update (KIND lostUpdate: a process saved over a version changed since it read it) \
        needs no --from: "yours" is the file the late save left and "theirs" the version it went \
        over (kept). --save and --close keep the file, --reload restores theirs, --keep-both writes \
        theirs beside the file, --merge merges the two against what the saver had read.
        Whatever --save and --merge write over is kept as a version first (undo with `coordfs \
        restore`). A refused resolution changes nothing and the conflict stays open. When several \
        presenters have a conflict on PATH, pick one with --conflict ID.

        The store is changed directly in the backing folder: this works while the daemon runs, \
        and after it died or was restarted. Through a running mount the new file shows once the \
        kernel's entry cache expires (entry_timeout, 1 s by default).

        Examples:
          coordfs resolve /mnt/docs/report.txt --merge --from ~/report-mine.txt
          coordfs resolve /mnt/docs/report.txt --reload
        """
    )

    enum Choice: String, EnumerableFlag {
        case close, save, reload, keepBoth, merge

        static func name(for value: Choice) -> NameSpecification {
            value == .keepBoth ? .customLong("keep-both") : .long
        }

        /// The resolution (the protocol's and the store's).
        var resolution: Resolution {
            switch self {
            case .close: .close
            case .save: .save
            case .reload: .reload
            case .keepBoth: .keepBoth
            case .merge: .merge
            }
        }
    }

    @Argument(help: ArgumentHelp("A document inside a coordfs mount.", valueName: "path"))
    var path: String

    @Flag(exclusivity: .exclusive, help: "How to resolve.")
    var choice: Choice

    @Option(help: ArgumentHelp("Your version of the document (for --save, --keep-both, --merge).", valueName: "file"))
    var from: String?

    @Option(name: .customLong("conflict"), help: ArgumentHelp("The conflict id, when PATH has several.", valueName: "id"))
    var conflictID: Int64?

    func validate() throws {
        switch choice {
        case .save, .keepBoth, .merge:
            break // --from is needed unless the conflict is a lost update (checked once it is known)
        case .close, .reload:
            if from != nil { throw ValidationError("--from is only for --save, --keep-both and --merge") }
        }
    }

    /// Save, keep both and merge of a presenter's conflict need its version.
    private func requireMine() throws {
        if from == nil, [.save, .keepBoth, .merge].contains(choice) {
            throw CLIError("--\(choice == .keepBoth ? "keep-both" : choice.rawValue) needs your version: --from FILE")
        }
    }

    func run() throws {
        let location = try StoreLocation(path)
        try location.requireDocumentPath()
        let store = try location.openStore()
        let open = try storeCall { try store.conflicts(atPath: location.relative) }
        if !open.contains(where: { $0.kind == .lostUpdate }) { try requireMine() }
        let conflict: Conflict
        if let conflictID {
            guard let c = open.first(where: { $0.id.rawValue == conflictID }) else {
                throw CLIError("\(path) has no open conflict \(conflictID)" + (open.isEmpty ? "" : " (open: \(open.map { "\($0.id.rawValue)" }.joined(separator: ", ")))"))
            }
            conflict = c
        } else {
            guard let first = open.first else { throw CLIError("\(path) has no open conflict (see `coordfs conflicts`)") }
            guard open.count == 1 else {
                throw CLIError("\(path) has \(open.count) open conflicts (\(open.map { "\($0.id.rawValue) for \($0.presenter)" }.joined(separator: ", "))): pick one with --conflict ID")
            }
            conflict = first
        }
        // A lost update's "mine" is the file the late save left; a presenter's is its own bytes.
        if conflict.kind != .lostUpdate { try requireMine() }
        var mine: Contents?
        if let from = from.map(exactArgument) {
            var st = stat()
            guard from.withNameCString({ stat($0, &st) }) == 0 else { throw CLIError("--from \(from): \(String(cString: strerror(errno)))") }
            guard (st.st_mode & S_IFMT) == S_IFREG else { throw CLIError("--from \(from) is not a regular file") }
            mine = .file(absolutePath: absolute(from))
        }
        let root = location.mount.mountpoint ?? location.mount.backing
        // A live mount resolves through its daemon: the resolution is a coordinated write (presenters
        // are asked and told), the event log records it, and the conflict's presenter hears of it.
        // A dead mount (or an unmounted folder) is resolved in the store directly.
        if !location.mount.stale, let mountPath = location.mountPath {
                        let contents: DocumentContents? = from.map { .file(absolute($0)) }
            let result: DocumentResolutionResult
            do {
                let (mount, _) = try CoordFSMount.containing(mountPath)
                result = try runBlocking { try await mount.resolve(conflict.id, with: choice.resolution, mine: contents) }
            } catch {
                throw CLIError("cannot resolve conflict \(conflict.id.rawValue) of \(path): \(error)")
            }
            print(summary(of: conflict, written: result.writtenPath, preserved: result.preservedVersion.map { "\($0.rawValue)" },
                          mergeConflicts: result.mergeConflicts))
            return
        }
        let outcome = try storeCall { try store.resolve(conflict.id, with: choice.resolution, mine: mine, by: "cli:\(getuid())") }
        print(summary(of: conflict, written: outcome.writtenPath.map { "\(root)/\($0)" }, preserved: outcome.preserved.map { "\($0.version.id.rawValue)" },
                      mergeConflicts: outcome.mergeConflicts))
    }

    /// The line printed after a resolution, through the daemon or in the store directly.
    private func summary(of conflict: Conflict, written: String?, preserved: String?, mergeConflicts: Int) -> String {
        var message = "resolved conflict \(conflict.id.rawValue) of \(path) (\(conflict.kind.rawValue)) with \(choice == .keepBoth ? "keep-both" : choice.rawValue)"
        if let written { message += "; wrote \(written)" }
        if let preserved { message += "; the file it replaced is version \(preserved)" }
        if choice == .merge {
            message += mergeConflicts == 0 ? "; merged cleanly" : "; \(mergeConflicts) conflicting hunk(s) marked"
        }
        return message.displayEscaped
    }

    private func absolute(_ path: String) -> String {
        if path.hasPrefix("/") { return path }
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX))
        guard getcwd(&buffer, buffer.count) != nil else { return path }
        return String(nameCString: buffer) + "/" + path
    }
}
