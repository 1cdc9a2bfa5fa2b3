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
        // One of the five flags, not all of them (the generated usage listed them side by side).
        usage: "coordfs resolve <path> (--close | --save | --reload | --keep-both | --merge) [--from <file>] [--conflict <id>]",
        discussion: """
        Resolves the open conflict of PATH (see `coordfs conflicts`):
          --close      drop your version; the file stays as it is (or deleted)
          --save       write your version (--from FILE) over theirs; restores a deleted file
          --reload     take theirs, drop yours; refused when the file was deleted
          --keep-both  write your version (--from FILE) beside the file as \
        "NAME (conflict DATE TIME).EXT" (a long NAME shortened to fit 255 bytes); the file stays theirs
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

        On a running mount the daemon lists and resolves the conflict with your rights: you may \
        resolve the conflicts of your own presenters (from any terminal, also once they exited) and the lost updates of \
        your own processes (root: any), and a resolution that writes needs your permission to \
        write what it writes. The resolution is a coordinated write recorded in the event log as \
        yours; it counts as one of your accesses until done (beyond the mount's \
        max_user_accesses: refused at once, exit status 75, try again later). On a mount whose daemon died (or an unmounted folder) the mount's owner resolves in \
        the store directly.

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

        static func help(for value: Choice) -> ArgumentHelp? {
            switch value {
            case .close: "Drop your version; the file stays as it is."
            case .save: "Write your version (--from FILE) over theirs."
            case .reload: "Take theirs, drop yours."
            case .keepBoth: "Write your version (--from FILE) beside the file."
            case .merge: "Three-way merge of yours (--from FILE) and theirs."
            }
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

    /// Optional for the parser only, so that naming none gets `validate`'s error (the parser's own
    /// showed `--close <close>`); `choice` is always set past `validate`.
    @Flag(exclusivity: .exclusive)
    var picked: Choice?

    var choice: Choice { picked! }

    @Option(help: ArgumentHelp("Your version of the document (for --save, --keep-both, --merge).", valueName: "file"))
    var from: String?

    @Option(name: .customLong("conflict"), help: ArgumentHelp("The conflict id, when PATH has several.", valueName: "id"))
    var conflictID: Int64?

    func validate() throws {
        guard let choice = picked else {
            throw ValidationError("name one resolution: --close, --save, --reload, --keep-both or --merge")
        }
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
        // A live mount resolves through its daemon, which decides with the caller's rights: the
        // conflicts it lists are the caller's to resolve, the resolution is a coordinated write
        // (presenters asked and told), the event log records it, and the conflict's presenter
        // hears of it. The CLI reads none of the store's files (they are the mount owner's).
        if !location.mount.stale, location.mountPath != nil {
            try resolveThroughDaemon(location)
            return
        }
        // A dead mount (or an unmounted folder) is resolved in the store directly.
        let store = try location.openStore()
        let open = try storeCall { try store.conflicts(atPath: location.relative) }
        let conflict = try pick(open.map { ($0.id.rawValue, $0.kind == .lostUpdate, $0.presenter.rawValue) })
        let chosen = open.first { $0.id.rawValue == conflict.id }!
        var mine: Contents?
        if let from = try checkedFrom() { mine = .file(absolutePath: from) }
        let outcome = try storeCall { try store.resolve(chosen.id, with: choice.resolution, mine: mine, by: "cli:\(getuid())") }
        let root = location.mount.mountpoint ?? location.mount.backing
        print(summary(of: conflict.id, kind: chosen.kind.rawValue, written: outcome.writtenPath.map { "\(root)/\($0)" },
                      preserved: outcome.preserved.map { "\($0.version.id.rawValue)" }, mergeConflicts: outcome.mergeConflicts))
    }

    /// Asks the daemon for the open conflicts of PATH the caller may resolve, and resolves one.
    private func resolveThroughDaemon(_ location: StoreLocation) throws {
        let (mount, relative) = try location.daemon()
        let open: [ConflictInfo]
        do {
            open = try runBlocking { try await mount.session.conflicts() }.filter { $0.path == relative }
        } catch {
            throw CLIError("cannot list the conflicts of \(exactArgument(path)): \(error)")
        }
        let conflict = try pick(open.map { ($0.conflict.rawValue, $0.kind == .lostUpdate, $0.storePresenter) })
        let chosen = open.first { $0.conflict.rawValue == conflict.id }!
        let contents = try checkedFrom().map { DocumentContents.file($0) }
        let result: DocumentResolutionResult
        do {
            result = try runBlocking { try await mount.resolve(chosen.conflict, with: choice.resolution, mine: contents) }
        } catch {
            throw ControlExit.documentRequestFailed("cannot resolve conflict \(conflict.id) of \(exactArgument(path))", error)
        }
        print(summary(of: conflict.id, kind: chosen.kind.rawValue, written: result.writtenPath,
                      preserved: result.preservedVersion.map { "\($0.rawValue)" }, mergeConflicts: result.mergeConflicts))
    }

    /// The conflict to resolve among PATH's open ones (id, whether a lost update, its presenter):
    /// the one `--conflict` names, or the only one. A conflict the caller may not resolve is not
    /// among them (the daemon lists only the caller's), so it is refused as unknown.
    private func pick(_ open: [(id: UInt64, lostUpdate: Bool, presenter: String)]) throws -> (id: UInt64, lostUpdate: Bool) {
        if !open.contains(where: { $0.lostUpdate }) { try requireMine() }
        let chosen: (id: UInt64, lostUpdate: Bool, presenter: String)
        if let conflictID {
            guard let c = open.first(where: { Int64(exactly: $0.id) == conflictID }) else {
                throw CLIError("\(exactArgument(path)) has no open conflict \(conflictID) that you may resolve" + (open.isEmpty ? "" : " (open: \(open.map { "\($0.id)" }.joined(separator: ", ")))"))
            }
            chosen = c
        } else {
            guard let first = open.first else { throw CLIError("\(exactArgument(path)) has no open conflict that you may resolve (see `coordfs conflicts`)") }
            guard open.count == 1 else {
                throw CLIError("\(exactArgument(path)) has \(open.count) open conflicts (\(open.map { "\($0.id) for \($0.presenter)" }.joined(separator: ", "))): pick one with --conflict ID")
            }
            chosen = first
        }
        // A lost update's "mine" is the file the late save left; a presenter's is its own bytes.
        if !chosen.lostUpdate { try requireMine() }
        return (chosen.id, chosen.lostUpdate)
    }

    /// `--from` as an absolute path, once it is known to be a regular file this user may name.
    private func checkedFrom() throws -> String? {
        guard let from = from.map(exactArgument) else { return nil }
        var st = stat()
        guard from.withNameCString({ stat($0, &st) }) == 0 else { throw CLIError("--from \(from): \(String(cString: strerror(errno)))") }
        guard (st.st_mode & S_IFMT) == S_IFREG else { throw CLIError("--from \(from) is not a regular file") }
        return absolute(from)
    }

    /// The line printed after a resolution, through the daemon or in the store directly.
    private func summary(of conflict: UInt64, kind: String, written: String?, preserved: String?, mergeConflicts: Int) -> String {
        var message = "resolved conflict \(conflict) of \(exactArgument(path)) (\(kind)) with \(choice == .keepBoth ? "keep-both" : choice.rawValue)"
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
