import NameBytes
import ArgumentParser
import ControlProtocol
import CoordFS
import CoordFSClient
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
        lostUpdate; --json adds theirsVersion, the version it went over). Lists the open ones \
        (with --all, resolved ones too), oldest first: id, document, kind (change, deletion or \
        lostUpdate), the presenter, since when, the base version kept for a merge. The presenter \
        is shown as status shows presenters: presenter#N with its program[pid] and uid while it is \
        registered, presenter#N (gone) after; for a lost update the saving process, program[pid] \
        and uid while it runs, pid N (exited) after. --json keeps the store's full name \
        (presenter) and adds presenterProcess (presenter, pid, executable, uid, running). Given a folder or a file inside the mount, lists only the conflicts there. \
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
        // The daemon is asked who its presenters are only when there is a conflict to show.
        let live = conflicts.isEmpty ? [:] : PresenterShown.live((try? location.daemon())?.0)
        if json {
            for c in conflicts { print(Self.json(c, root: root, shown: PresenterShown(c.presenter, owner: c.owner, live: live))) }
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
            rows.append(["\(c.id.rawValue)", root + "/" + c.path, c.kind.rawValue, state, PresenterShown(c.presenter, owner: c.owner, live: live).text,
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
        let live = conflicts.isEmpty ? [:] : PresenterShown.live(mount)
        if json {
            for c in conflicts {
                var o: [String: Any] = [
                    "id": c.conflict.rawValue, "document": c.document.rawValue, "path": root + "/" + c.path.rawValue,
                    "kind": c.kind.rawValue, "state": "open", "presenter": c.storePresenter,
                    "since": StoreFormat.isoTime(Date(timeIntervalSince1970: Double(c.createdMs) / 1000)),
                ]
                if let b = c.baseVersion { o["baseVersion"] = b.rawValue }
                if let t = c.theirsVersion { o["theirsVersion"] = t.rawValue }
                o["presenterProcess"] = PresenterShown(StorePresenterID(c.storePresenter), owner: nil, live: live).json
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
            rows.append(["\(c.conflict.rawValue)", root + "/" + c.path.rawValue, c.kind.rawValue, "open",
                         PresenterShown(StorePresenterID(c.storePresenter), owner: nil, live: live).text,
                         StoreFormat.time(Date(timeIntervalSince1970: Double(c.createdMs) / 1000)), c.baseVersion.map { "\($0.rawValue)" } ?? "-"])
        }
        print(StoreFormat.table(rows), terminator: "")
    }

    static func json(_ c: Conflict, root: String, shown: PresenterShown) -> String {
        var o: [String: Any] = [
            "id": c.id.rawValue, "document": c.document.rawValue, "path": root + "/" + c.path, "kind": c.kind.rawValue,
            "state": c.state.rawValue, "presenter": c.presenter.rawValue, "presenterProcess": shown.json,
            "since": StoreFormat.isoTime(c.createdAt),
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

/// A conflict's presenter as people read it, as `coordfs status` shows presenters (its program
/// and pid, its user), where the store's name for it is long and internal
/// (`coordfs-PID-START-BOOT/presenter#N`, `process:PID:START:uid:UID`): `presenter#7 vim[5120]
/// uid 1000` while it is registered, `presenter#7 (gone) uid 1000` after; a lost update's saving
/// process `python3[4242] uid 1000` while it runs, `pid 4242 (exited) uid 1000` after.
struct PresenterShown {
    let name: StorePresenterName
    let raw: String
    /// The conflict's user (the presenter's, as the store recorded it), when known.
    let owner: UInt32?
    /// The registered presenter, when it still is.
    let registered: StatusReport.Presenter?

    init(_ presenter: StorePresenterID, owner: UInt32?, live: [PresenterID: StatusReport.Presenter]) {
        name = StorePresenterName(presenter)
        raw = presenter.rawValue
        self.owner = owner
        if case .presenter(let id, daemonRuns: true) = name { registered = live[id] } else { registered = nil }
    }

    /// The presenters the mount's running daemon (`mount`, nil when it is gone) has registered
    /// (those this user may see), by id; none when it cannot be asked.
    static func live(_ mount: CoordFSMount?) -> [PresenterID: StatusReport.Presenter] {
        guard let mount, let report = try? runBlocking({ try await mount.status() }) else { return [:] }
        return Dictionary(report.presenters.map { ($0.presenter, $0) }, uniquingKeysWith: { first, _ in first })
    }

    var text: String {
        switch name {
        case .presenter(let id, _):
            if let p = registered { return "\(id) \(processName(p.pid))[\(p.pid)] uid \(p.uid)" }
            return "\(id) (gone)" + (owner.map { " uid \($0)" } ?? "")
        case .saver(let pid, let uid, let running):
            switch running {
            case true?: return "\(processName(pid))[\(pid)] uid \(uid)"
            case false?: return "pid \(pid) (exited) uid \(uid)"
            case nil: return "pid \(pid) uid \(uid)"
            }
        case .other: return raw
        }
    }

    /// For --json (beside the store's full name, `presenter`): `presenter` (its number), `pid`,
    /// `executable` (while it runs), `uid` (when known), `running`.
    var json: [String: Any] {
        var o: [String: Any] = [:]
        switch name {
        case .presenter(let id, _):
            o["presenter"] = id.rawValue
            o["running"] = registered != nil
            if let p = registered {
                o["pid"] = p.pid
                o["executable"] = processName(p.pid)
                o["uid"] = p.uid
            } else if let owner {
                o["uid"] = owner
            }
        case .saver(let pid, let uid, let running):
            o["pid"] = pid
            o["uid"] = uid
            if let running {
                o["running"] = running
                if running { o["executable"] = processName(pid) }
            }
        case .other: break
        }
        return o
    }
}
