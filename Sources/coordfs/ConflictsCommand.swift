import NameBytes
import ArgumentParser
import ControlProtocol
import DocumentStore
import Foundation

/// `coordfs conflicts MOUNTPOINT`: the open conflicts of a mount.
struct ConflictsCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "conflicts",
        abstract: "List the conflicts of a coordfs mount.",
        discussion: """
        A conflict opens when a presented document changes or is deleted while its presenter has \
        unsaved changes, or when a process saves over a document changed since it read it (kind \
        lostUpdate, the presenter named process:PID:START:uid:UID; --json adds theirsVersion, the \
        version it went over). Lists the open ones (with --all, resolved ones too), oldest first: \
        id, document, kind (change, deletion or lostUpdate), the presenter, since when, the base \
        version kept for a merge. Given a folder or a file inside the mount, lists only the conflicts there. \
        Conflicts survive a daemon restart; resolve them with `coordfs resolve`. A user who may not \
        read the store's files (the mount's owner's) gets from the running daemon the open \
        conflicts it may resolve: its own presenters' (also once they exited) and its own processes' \
        lost updates.

        Examples:
          coordfs conflicts /mnt/docs
          coordfs conflicts /mnt/docs --json
        """
    )

    @Argument(help: ArgumentHelp("A coordfs mountpoint (or a folder or file inside it).", valueName: "mountpoint"))
    var mountpoint: String

    @Flag(help: "Include resolved conflicts.")
    var all = false

    @Flag(help: "Print one JSON object per conflict.")
    var json = false

    func run() throws {
        let location = try StoreLocation(mountpoint)
        if location.throughDaemon {
            try listThroughDaemon(location)
            return
        }
        let store = try location.openStore()
        let root = location.mount.mountpoint ?? location.mount.backing
        let conflicts = try storeCall { try store.conflicts(state: all ? nil : .open) }.filter { c in
            location.relative.isEmpty || ExactName.same(c.path, location.relative) || c.path.utf8.starts(with: (location.relative + "/").utf8)
        }
        if json {
            for c in conflicts { print(Self.json(c, root: root)) }
            return
        }
        if conflicts.isEmpty {
            print("no \(all ? "" : "open ")conflicts")
            return
        }
        var rows = [["ID", "PATH", "KIND", "STATE", "PRESENTER", "SINCE", "BASE"]]
        for c in conflicts {
            var state = c.state.rawValue
            if let r = c.resolution { state += " (\(r.rawValue))" }
            rows.append(["\(c.id.rawValue)", root + "/" + c.path, c.kind.rawValue, state, c.presenter.rawValue,
                         StoreFormat.time(c.createdAt), c.baseVersion.map { "\($0.rawValue)" } ?? "-"])
        }
        print(StoreFormat.table(rows), terminator: "")
    }

    /// The open conflicts this user may resolve (its presenters', its processes' lost updates), as
    /// the daemon lists them for a user who may not read the store's files.
    private func listThroughDaemon(_ location: StoreLocation) throws {
        if all { throw CLIError("--all reads the store's history, which only the mount's owner may read; without it, the daemon lists your open conflicts") }
        let (mount, _) = try location.daemon()
        let root = location.mount.mountpoint ?? location.mount.backing
        let conflicts: [ConflictInfo]
        do {
            conflicts = try runBlocking { try await mount.session.conflicts() }.filter { c in
                location.relative.isEmpty || ExactName.same(c.path.rawValue, location.relative)
                    || c.path.rawValue.utf8.starts(with: (location.relative + "/").utf8)
            }
        } catch {
            throw CLIError("cannot list the conflicts of \(location.displayPath): \(error)")
        }
        if json {
            for c in conflicts {
                var o: [String: Any] = [
                    "id": c.conflict.rawValue, "document": c.document.rawValue, "path": root + "/" + c.path.rawValue,
                    "kind": c.kind.rawValue, "state": "open", "presenter": c.storePresenter,
                    "since": StoreFormat.isoTime(Date(timeIntervalSince1970: Double(c.createdMs) / 1000)),
                ]
                if let b = c.baseVersion { o["baseVersion"] = b.rawValue }
                if let t = c.theirsVersion { o["theirsVersion"] = t.rawValue }
                print(StoreFormat.json(o))
            }
            return
        }
        if conflicts.isEmpty {
            print("no open conflicts")
            return
        }
        var rows = [["ID", "PATH", "KIND", "STATE", "PRESENTER", "SINCE", "BASE"]]
        for c in conflicts {
            rows.append(["\(c.conflict.rawValue)", root + "/" + c.path.rawValue, c.kind.rawValue, "open", c.storePresenter,
                         StoreFormat.time(Date(timeIntervalSince1970: Double(c.createdMs) / 1000)), c.baseVersion.map { "\($0.rawValue)" } ?? "-"])
        }
        print(StoreFormat.table(rows), terminator: "")
    }

    static func json(_ c: Conflict, root: String) -> String {
        var o: [String: Any] = [
            "id": c.id.rawValue, "document": c.document.rawValue, "path": root + "/" + c.path, "kind": c.kind.rawValue,
            "state": c.state.rawValue, "presenter": c.presenter.rawValue, "since": StoreFormat.isoTime(c.createdAt),
            "before": StoreFormat.identity(c.before), "after": StoreFormat.identity(c.after),
        ]
        if let b = c.baseVersion { o["baseVersion"] = b.rawValue }
        if let t = c.theirsVersion { o["theirsVersion"] = t.rawValue }
        if let r = c.resolution { o["resolution"] = r.rawValue }
        if let by = c.resolvedBy { o["resolvedBy"] = by }
        if let at = c.resolvedAt { o["resolvedAt"] = StoreFormat.isoTime(at) }
        if let copy = c.conflictCopyPath { o["conflictCopy"] = root + "/" + copy }
        return StoreFormat.json(o)
    }
}
