import Foundation
import NameBytes
import GRDB
import Glibc
import NameBytes

/// What resolving a conflict writes in the backing folder: the coordinated write it runs in
/// (``Conflict/writes(_:mine:)``).
public enum ResolutionWrites: Sendable, Hashable {
    /// Nothing: the presenter takes the file as it is, or drops the document.
    case nothing
    /// The document itself (written over, or back when it was deleted).
    case document
    /// A new file beside the document, in its folder (keep both's conflict copy).
    case besideDocument
}

extension Conflict {
    /// What ``DocumentStore/resolve(_:with:mine:by:owner:)`` writes for `resolution` (`mine`: given),
    /// so that the integrator wraps it in a coordinated write of that item, as a change through the
    /// mount is made: save and merge write the document, keep both a copy beside it; a lost
    /// update's reload writes theirs back over it, and its save writes only a given `mine`.
    public func writes(_ resolution: Resolution, mine: Bool) -> ResolutionWrites {
        switch (resolution, kind) {
        case (.close, _): .nothing
        case (.reload, .lostUpdate): .document
        case (.reload, _): .nothing
        case (.save, .lostUpdate): mine ? .document : .nothing
        case (.save, _), (.merge, _): .document
        case (.keepBoth, _): .besideDocument
        }
    }
}

extension DocumentStore {
    /// Resolves a conflict (the integrator wraps save, keep both and merge in a coordinated write).
    ///
    /// - close: the presenter drops the document and its changes; its interest ends.
    /// - save: `mine` is written over the file (restoring it if it was deleted).
    /// - reload: the presenter takes the file as it is; refused for a deletion.
    /// - keepBoth: `mine` is written beside the file as `name (conflict YYYY-MM-DD HHMMSS).ext`;
    ///   the presenter takes the file as it is (or closes, when it was deleted).
    /// - merge: three-way merge of `mine` and the file against the presenter's base, written over
    ///   the file, conflicting hunks marked as `git merge-file` marks them; refused for a deletion,
    ///   for binary contents and when the base was not kept.
    ///
    /// Whatever save, merge write over is kept first (so a resolution is undoable); the other
    /// presenters of the document get the resulting "underlying file changed" event in the outcome.
    ///
    /// - Parameter owner: whom a file the resolution creates belongs to (the conflict copy of keep
    ///   both, a deleted document that save writes back), when the store runs as root; nil: the
    ///   store's own user. A file written over keeps its owner.
    public func resolve(_ id: ConflictID, with resolution: Resolution, mine: Contents? = nil, by actor: String,
                        owner: FileOwner? = nil) throws -> ResolutionOutcome {
        try write { db in
            let (conflict, relative, absolute, st) = try openConflict(db, id)
            let deleted = st == nil
            let hasInterest = try Bool.fetchOne(
                db, sql: "SELECT 1 FROM interest WHERE documentId = ? AND presenter = ?",
                arguments: [conflict.document.rawValue, conflict.presenter.rawValue]) != nil
            var outcome = ResolutionOutcome(conflict: conflict, writtenPath: nil, preserved: nil, mergeConflicts: 0, after: st.map(FileIdentity.init), othersNotified: nil)

            func dropInterest() throws {
                try db.execute(sql: "DELETE FROM interest WHERE documentId = ? AND presenter = ?", arguments: [conflict.document.rawValue, conflict.presenter.rawValue])
            }
            func takeTheirs() throws {
                if hasInterest, let now = try statDocument(absolute, relative) {
                    _ = try setBase(db, conflict.document, conflict.presenter, relative, absolute, now)
                }
            }
            /// Writes new contents over the document, keeping what was there, and tells the others.
            func replaceDocument(with contents: Contents) throws {
                if let st { outcome.preserved = try takeSnapshot(db, conflict.document, relative, absolute, st, reason: .resolution) }
                try writeFile(contents, to: relative, permissionsFrom: st, owner: st == nil ? owner : nil)
                guard let now = try statDocument(absolute, relative) else { throw DocumentStoreError.fileNotFound(relative) }
                outcome.after = FileIdentity(now)
                outcome.writtenPath = relative
                outcome.recreated = st == nil
                try takeTheirs()
                outcome.othersNotified = try announce(
                    db, conflict.document, relative, absolute, .change, before: st.map(FileIdentity.init), after: outcome.after, writer: conflict.presenter)
            }

            // The resolution's rules, checked again here: the file may have changed since checkResolution.
            let step = try plan(db, conflict, resolution, mine: mine, relative, deleted: deleted)
            func perform(_ step: ResolutionStep) throws {
                switch step {
                case .keepFile:
                    break
                case .dropInterest:
                    try dropInterest()
                case .takeTheirs:
                    try takeTheirs()
                case let .replace(contents):
                    try replaceDocument(with: contents)
                case let .merge(base, mine, theirs):
                    let merged = TextMerge.merge(base: base, mine: mine, theirs: theirs)
                    outcome.mergeConflicts = merged.conflicts
                    try replaceDocument(with: .bytes(merged.text))
                case let .copyBeside(contents, then):
                    let copy = try writeConflictCopy(contents, beside: relative, owner: owner)
                    let copyRelative = String(copy.dropFirst(backingRoot.count + 1))
                    outcome.writtenPath = copyRelative
                    try db.execute(sql: "UPDATE conflict SET conflictCopyPath = ? WHERE id = ?", arguments: [copyRelative, id.rawValue])
                    try perform(then)
                }
            }
            try perform(step)
            try db.execute(
                sql: "UPDATE conflict SET state = 'resolved', resolution = ?, resolvedBy = ?, resolvedAt = ? WHERE id = ?",
                arguments: [resolution.rawValue, actor, Self.now(), id.rawValue])
            if hasInterest && resolution != .close {
                try db.execute(sql: "UPDATE interest SET hasUnsavedChanges = 0 WHERE documentId = ? AND presenter = ?",
                               arguments: [conflict.document.rawValue, conflict.presenter.rawValue])
            }
            outcome.conflict = try fetchConflict(db, id)
            return outcome
        }
    }

    /// Refuses now, writing nothing, what ``resolve(_:with:mine:by:owner:)`` would refuse: a
    /// conflict that is not open, a resolution that does not apply (reload or merge of a deletion),
    /// contents missing, a merge without a kept base or of binary contents, a lost update's theirs
    /// gone. The integrator calls it before it takes the resolution's coordinated write, so that a
    /// refused resolution asks no presenter: a refusal changes nothing and disturbs no one.
    /// (`resolve` checks again inside its write: the file may change in between.)
    public func checkResolution(_ id: ConflictID, with resolution: Resolution, mine: Contents? = nil) throws {
        try read { db in
            let (conflict, relative, _, st) = try openConflict(db, id)
            _ = try plan(db, conflict, resolution, mine: mine, relative, deleted: st == nil)
        }
    }

    /// What a resolution does, once its rules allow it: decided by ``plan(_:_:_:mine:_:deleted:)``,
    /// carried out by ``resolve(_:with:mine:by:owner:)``.
    private indirect enum ResolutionStep {
        /// The file stays as it is (a lost update's close, and its save without contents).
        case keepFile
        /// The presenter's interest ends (close; keep both of a deletion, after its copy).
        case dropInterest
        /// The presenter takes the file as it is (reload; keep both, after its copy).
        case takeTheirs
        /// The contents written over the document (save; a lost update's reload writes theirs back).
        case replace(Contents)
        /// The three-way merge of mine and theirs against the base, written over the document.
        case merge(base: [UInt8], mine: [UInt8], theirs: [UInt8])
        /// The contents written beside the document as its conflict copy, then the next step.
        case copyBeside(Contents, then: ResolutionStep)
    }

    /// The rules of each resolution, in one place: what `resolution` of the open `conflict` does to
    /// its document at `relative` (`deleted`: the file is gone), or the refusal, in this order: a
    /// resolution that does not apply (reload or merge of a deletion), contents missing, a lost
    /// update's theirs gone, a merge without a kept base or of binary contents. Writes nothing:
    /// ``checkResolution(_:with:mine:)`` runs it before the coordinated write, ``resolve(_:with:mine:by:owner:)``
    /// again inside its own, and carries out the step.
    ///
    /// A lost update's "mine" is the file the late save left (or `mine`, when given), "theirs" the
    /// version it went over (kept), the base what the saver had read (when kept): close, and save
    /// without `mine`, leave the file mine (save with `mine` writes that over it); reload writes
    /// theirs back over the file (restored, if the file was deleted since); keep both writes theirs
    /// beside the file as its conflict copy; merge merges mine and theirs against the base.
    private func plan(_ db: Database, _ conflict: Conflict, _ resolution: Resolution, mine: Contents?, _ relative: String,
                      deleted: Bool) throws -> ResolutionStep {
        if conflict.kind == .lostUpdate {
            switch resolution {
            case .close:
                return .keepFile
            case .save:
                return mine.map { .replace($0) } ?? .keepFile
            case .reload:
                return .replace(.file(absolutePath: try theirsOfLostUpdate(db, conflict, relative)))
            case .keepBoth:
                return .copyBeside(.file(absolutePath: try theirsOfLostUpdate(db, conflict, relative)), then: .keepFile)
            case .merge:
                if deleted { throw DocumentStoreError.resolutionNotApplicableToDeletion("merge") }
                return try merge(db, conflict.baseVersion?.rawValue, mine: try mine.map(Self.bytes(of:)) ?? readDocument(relative),
                                 theirs: try FileSystem.readAll(try theirsOfLostUpdate(db, conflict, relative)), relative)
            }
        }
        switch resolution {
        case .close:
            return .dropInterest
        case .reload:
            if deleted { throw DocumentStoreError.resolutionNotApplicableToDeletion("reload") }
            return .takeTheirs
        case .save:
            guard let mine else { throw DocumentStoreError.missingContents("save") }
            return .replace(mine)
        case .keepBoth:
            guard let mine else { throw DocumentStoreError.missingContents("keep both") }
            return .copyBeside(mine, then: deleted ? .dropInterest : .takeTheirs)
        case .merge:
            if deleted { throw DocumentStoreError.resolutionNotApplicableToDeletion("merge") }
            guard let mine else { throw DocumentStoreError.missingContents("merge") }
            return try merge(db, try mergeBaseID(db, conflict), mine: try Self.bytes(of: mine), theirs: try readDocument(relative), relative)
        }
    }

    /// The merge of `mine` and `theirs` against the kept version `baseID`; refused without a base
    /// and for binary input.
    private func merge(_ db: Database, _ baseID: UInt64?, mine: [UInt8], theirs: [UInt8], _ relative: String) throws -> ResolutionStep {
        guard let baseID, let baseName = try String.fetchOne(db, sql: "SELECT storedName FROM version WHERE id = ?", arguments: [baseID])
        else { throw DocumentStoreError.baseUnavailable(path: relative) }
        let base = try FileSystem.readAll(storedPath(baseName))
        for input in [base, mine, theirs] where TextMerge.looksBinary(input) {
            throw DocumentStoreError.binaryContents(relative)
        }
        return .merge(base: base, mine: mine, theirs: theirs)
    }

    /// The conflict `id`, still open, and its document: its path (relative to the backing folder
    /// and absolute) and its state now (nil: deleted). What a resolution and its check start from.
    private func openConflict(_ db: Database, _ id: ConflictID) throws -> (Conflict, relative: String, absolute: String, stat?) {
        let conflict = try fetchConflict(db, id)
        guard conflict.state == .open else {
            throw DocumentStoreError.conflictAlreadyResolved(id.rawValue, resolution: conflict.resolution?.rawValue ?? "?")
        }
        guard let relative = try String.fetchOne(db, sql: "SELECT path FROM document WHERE id = ?", arguments: [conflict.document.rawValue]) else {
            throw DocumentStoreError.unknownDocument("\(conflict.document)")
        }
        let (_, absolute) = try resolve(relative)
        return (conflict, relative, absolute, try statDocument(absolute, relative))
    }

    /// The kept version a presenter's conflict merges against: the conflict's base, or else the base
    /// its presenter's interest kept.
    private func mergeBaseID(_ db: Database, _ conflict: Conflict) throws -> UInt64? {
        if let base = conflict.baseVersion?.rawValue { return base }
        return try UInt64.fetchOne(
            db, sql: "SELECT baseVersionId FROM interest WHERE documentId = ? AND presenter = ? AND baseState = 'kept'",
            arguments: [conflict.document.rawValue, conflict.presenter.rawValue])
    }

    private static func bytes(of contents: Contents) throws -> [UInt8] {
        switch contents {
        case let .bytes(bytes): bytes
        case let .file(path): try FileSystem.readAll(path)
        }
    }

    // MARK: Writing files

    /// Writes contents to a scratch file in the store, then renames it over the document at
    /// `relative` (atomic: readers see the old or the new file, never a mix), in the folder
    /// `openFolder(of:)` opens. Mode and owner follow the old file; without one the mode is
    /// `newMode` (see `stage`).
    func writeFile(_ contents: Contents, to relative: String, permissionsFrom old: stat?, owner: FileOwner? = nil,
                   newMode: mode_t? = nil) throws {
        let (folder, name) = try openFolder(of: relative)
        defer { FileSystem.close(folder) }
        let scratch = try stage(contents, permissionsFrom: old, owner: owner, newMode: newMode)
        do {
            try FileSystem.retrying("rename", relative) { scratch.withNameCString { a in name.withNameCString { b in renameat(AT_FDCWD, a, folder, b) } } }
        } catch {
            FileSystem.unlinkIfPresent(scratch)
            throw error
        }
    }

    /// The bytes of the document at `relative`, read from the folder `openFolder(of:)` opens,
    /// without following a link.
    func readDocument(_ relative: String) throws -> [UInt8] {
        let (folder, name) = try openFolder(of: relative)
        defer { FileSystem.close(folder) }
        let fd = try FileSystem.retrying("open", relative) { name.withNameCString { openat(folder, $0, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC) } }
        defer { FileSystem.close(fd) }
        guard (try FileSystem.fstat(fd, relative).st_mode & S_IFMT) == S_IFREG else { throw DocumentStoreError.notARegularFile(relative) }
        return try FileSystem.readAll(fd: fd, relative)
    }

    /// A file in the store's scratch directory holding `contents`, synced to disk. Its mode is
    /// `old`'s, else `newMode` (its permission bits), else 0644; its owner `owner`, else `old`'s
    /// (when the store is root). Never the process's umask: a daemon's is 0 (the callers' umasks
    /// and folders' default ACLs decide what it makes through the mount), which made every file
    /// the store re-created writable by every user; and changing it for a moment would change it
    /// for the creates of every other thread.
    func stage(_ contents: Contents, permissionsFrom old: stat?, owner: FileOwner? = nil, newMode: mode_t? = nil) throws -> String {
        let scratch = temporaryPath("write")
        do {
            switch contents {
            case let .bytes(bytes):
                let fd = try FileSystem.open(scratch, O_WRONLY | O_CREAT | O_EXCL, 0o600)
                defer { FileSystem.close(fd) }
                try bytes.withUnsafeBytes { try FileSystem.writeAll(fd, $0, scratch) }
            case let .file(path):
                _ = try keep(path, as: scratch)
            }
            let fd = try FileSystem.open(scratch, O_WRONLY)
            defer { FileSystem.close(fd) }
            if let owner, geteuid() == 0 {
                _ = fchown(fd, owner.uid, owner.gid)
            } else if let old, geteuid() == 0 {
                _ = fchown(fd, old.st_uid, old.st_gid)
            }
            if let old {
                _ = fchmod(fd, old.st_mode & 0o7777)
            } else {
                _ = fchmod(fd, newMode.map { $0 & 0o777 } ?? 0o644)
            }
            try FileSystem.fsync(fd, scratch)
            return scratch
        } catch {
            FileSystem.unlinkIfPresent(scratch)
            throw error
        }
    }

    /// Writes `contents` as a new file `name (conflict YYYY-MM-DD HHMMSS).ext` beside the document
    /// at `relative` (" 2", " 3"... appended when taken), in the folder `openFolder(of:)` opens;
    /// never overwrites anything. Returns its absolute path.
    func writeConflictCopy(_ contents: Contents, beside relative: String, owner: FileOwner? = nil) throws -> String {
        let (folderFD, name) = try openFolder(of: relative)
        defer { FileSystem.close(folderFD) }
        let absolute = backingRoot + "/" + relative
        let slash = absolute.utf8.lastIndex(of: UInt8(ascii: "/"))!
        let directory = String(absolute[..<slash])
        // As a file the owner made there itself: its group is the folder's in a set-group-ID folder.
        var owner = owner
        var folder = stat()
        if owner != nil, fstat(folderFD, &folder) == 0, folder.st_mode & S_ISGID != 0 { owner?.gid = folder.st_gid }
        var now = time(nil)
        var parts = tm()
        localtime_r(&now, &parts)
        let stamp = "\(parts.tm_year + 1900)-\(String(parts.tm_mon + 1).leftPadded(2))-\(String(parts.tm_mday).leftPadded(2)) "
            + "\(String(parts.tm_hour).leftPadded(2))\(String(parts.tm_min).leftPadded(2))\(String(parts.tm_sec).leftPadded(2))"
        let scratch = try stage(contents, permissionsFrom: try? FileSystem.lstatIfPresent(absolute), owner: owner)
        defer { FileSystem.unlinkIfPresent(scratch) }
        for attempt in 1...1000 {
            let candidate = Self.conflictCopyName(of: name, stamp: stamp, attempt: attempt)
            // link() refuses to overwrite: the copy appears whole, and only where nothing was.
            do {
                try FileSystem.retrying("link", relative) { scratch.withNameCString { a in candidate.withNameCString { b in linkat(AT_FDCWD, a, folderFD, b, 0) } } }
                return directory + "/" + candidate
            } catch DocumentStoreError.system(_, _, let code) where code == EEXIST {
                continue
            }
        }
        throw DocumentStoreError.system(operation: "create conflict copy", path: relative, errno: EEXIST)
    }
}

extension DocumentStore {
    /// The name of a conflict copy of the document `name`: `STEM (conflict STAMP[ ATTEMPT]).EXT`,
    /// within NAME_MAX (255 bytes): the stem of a long name is shortened (at the start of a UTF-8
    /// sequence, never inside one); an extension too long to leave room for a stem counts as stem.
    static func conflictCopyName(of name: String, stamp: String, attempt: Int) -> String {
        let nameMax = 255
        var stem = name.nameBytes
        var ext: [UInt8] = []
        if let dot = stem.lastIndex(of: UInt8(ascii: ".")), dot != 0 {
            ext = Array(stem[dot...])
            stem = Array(stem[..<dot])
        }
        let mark = Array(" (conflict \(stamp)\(attempt == 1 ? "" : " \(attempt)"))".utf8)
        if mark.count + ext.count >= nameMax {   // no room for a stem: the whole name is the stem
            stem += ext
            ext = []
        }
        let room = nameMax - mark.count - ext.count
        if stem.count > room {
            var cut = room
            // A UTF-8 sequence is at most four bytes: back off at most three continuation bytes.
            for _ in 0..<3 where cut > 0 && stem[cut] & 0xC0 == 0x80 { cut -= 1 }
            stem = Array(stem[..<cut])
        }
        return String(nameBytes: stem + mark + ext)
    }
}

/// Who a file the store creates for someone belongs to.
public struct FileOwner: Sendable, Hashable {
    public var uid: UInt32
    public var gid: UInt32
    public init(uid: UInt32, gid: UInt32) {
        self.uid = uid
        self.gid = gid
    }
}
