import Coordination

/// The coordinated mount's rules (docs/semantics.md) as a pure function: an operation and the facts
/// the mount looked up for it (kinds of the items, temp names, what is presented or observed, files
/// just created, saves in progress) in, a plan out (the intents, the store's hooks, what is told, the
/// save recogniser's steps). `CoordinatedFileSystem` looks the facts up, asks, and performs the plan;
/// this type does no I/O and holds no state, so every rule is tested in microseconds
/// (`MountPolicyTests`).
public struct OperationPolicy: Hashable, Sendable {
    /// `save_window` > 0: an unlinked or renamed-away document may come back as the same document,
    /// and a new file is told once it outlives the window.
    public var recognisesSaves: Bool

    public init(recognisesSaves: Bool) { self.recognisesSaves = recognisesSaves }

    // MARK: waits and deadlines

    /// The `-o` options that bound an operation's waits (docs/semantics.md, "Waits and deadlines").
    public struct Waits: Hashable, Sendable {
        /// `ask_timeout`: each presenter ask.
        public var askTimeout: Double
        /// `strict`: a missed ask fails the operation (ETIMEDOUT) instead of being passed over.
        public var strict: Bool
        /// `read_wait`: how long a read waits for a writer.
        public var readWait: Double
        /// `write_wait`: how long a write waits for other accesses.
        public var writeWait: Double
        public init(askTimeout: Double = 5, strict: Bool = false, readWait: Double = 1, writeWait: Double = 5) {
            self.askTimeout = askTimeout; self.strict = strict; self.readWait = readWait; self.writeWait = writeWait
        }
    }

    /// How long a read or a write waits and what it gets at each deadline: a read goes ahead without
    /// exclusion; a write goes ahead past readers and other programs' open files, and gets EBUSY
    /// while an explicit coordinated write holds the item. `pastOpenReaders`: a write that changes
    /// no byte another program's open file for reading could read does not wait for such files at
    /// all: an append (``HandlePlan/appends``: the reader sees the old end or the new bytes, as
    /// natively), and a change of names (create, mkdir, link, symlink, mknod, unlink, rmdir,
    /// rename: the reader keeps reading the file it opened, whatever name it has now, or none).
    /// A read does not wait for another program's open file that only appends (a log being
    /// written: the reader sees its old end or the new bytes, as natively).
    public func waits(write: Bool, pastOpenReaders: Bool = false, _ w: Waits) -> CoordinationPolicy {
        func seconds(_ s: Double) -> Duration { .nanoseconds(Int64(s * 1e9)) }
        return CoordinationPolicy(askDeadline: seconds(w.askTimeout), onAskTimeout: w.strict ? .strict : .proceed,
                                  waitDeadline: seconds(write ? w.writeWait : w.readWait),
                                  atWaitDeadline: write ? .goAheadPastYieldingHolds : .goAhead,
                                  passesYieldingReaders: write && pastOpenReaders, passesYieldingAppenders: !write)
    }

    // MARK: open

    public struct Open: Hashable, Sendable {
        public var path: ItemPath
        public var kind: ItemKind?
        /// Opened for writing, or with O_TRUNC.
        public var write: Bool
        /// Opened with O_TRUNC.
        public var truncate: Bool
        /// Opened with O_APPEND: every write through the handle goes to the end of the file.
        public var append: Bool
        public var tempName: Bool
        public var fresh: Freshness
        public init(path: ItemPath, kind: ItemKind?, write: Bool, truncate: Bool, append: Bool = false, tempName: Bool = false,
                    fresh: Freshness = .told) {
            self.path = path; self.kind = kind; self.write = write; self.truncate = truncate; self.append = append
            self.tempName = tempName; self.fresh = fresh
        }
    }

    /// Only opens of regular files are coordinated (the mount asks before it looks the path up).
    public func coordinatesOpen(of kind: ItemKind?) -> Bool { kind == .file }

    /// An open of a regular file is a read or a write for the life of the handle; nil: not
    /// coordinated (directories, devices, FIFOs). An open for writing with O_APPEND and without
    /// O_TRUNC appends: it changes no byte a reader could already read, so it does not wait for
    /// other programs' files open for reading (a `tail -f` of a log); it waits for explicit
    /// coordinated reads and for writers as any write, and asks and tells the same presenters.
    public func open(_ op: Open) -> HandlePlan? {
        guard coordinatesOpen(of: op.kind) else { return nil }
        let p = op.path
        var first: [SaveStep] = []
        if op.fresh == .byAnother { first.append(.revealFresh(p)) } // another process opens it: told it appeared first
        if op.write { first.append(.moveArrives(p, unlessBackTo: nil)) } // a document moved here moments ago: told first
        return HandlePlan(first: first, adopts: op.write ? p : nil,
                          intents: [op.write ? .writingIntent(with: p) : .readingIntent(with: p)], write: op.write,
                          before: op.write ? [.beforeInPlaceWrite(p)] : [], truncated: op.truncate, quiet: op.tempName,
                          appends: op.write && op.append && !op.truncate)
    }

    // MARK: close

    public struct Close: Hashable, Sendable {
        public var path: ItemPath
        /// Written, truncated or resized while open (with kernel passthrough: its ctime, mtime or size
        /// moved between open and close).
        public var contentsChanged: Bool
        /// Its attributes changed while open (fchmod, futimens, or by path from the same process).
        public var attributesChanged: Bool
        /// Opened by a temp name (``HandlePlan/quiet``).
        public var quiet: Bool
        /// Its opener created it and nobody has been told of it yet: told when it appears.
        public var freshByOpener: Bool
        /// Removed meanwhile (no link left): its deletion was told.
        public var removed: Bool
        public init(path: ItemPath, contentsChanged: Bool, attributesChanged: Bool = false, quiet: Bool = false,
                    freshByOpener: Bool = false, removed: Bool = false) {
            self.path = path; self.contentsChanged = contentsChanged; self.attributesChanged = attributesChanged
            self.quiet = quiet; self.freshByOpener = freshByOpener; self.removed = removed
        }
    }

    /// What a handle's close tells (at its release, or before its process removes or renames it).
    /// Contents changed: the store hears of it (a version, a conflict). Attributes alone (a mode,
    /// times): presenters are told it changed, the store is not.
    public func close(_ op: Close) -> [Step] {
        guard op.contentsChanged || op.attributesChanged, !op.quiet, !op.freshByOpener, !op.removed else { return [] }
        let p = op.path
        return op.contentsChanged ? [.store(.didChange(p)), .announce(.changed(p)), .saved(p)] : [.announce(.changed(p))]
    }

    // MARK: create

    public struct Create: Hashable, Sendable {
        public var path: ItemPath
        public var parent: ItemPath
        public var tempName: Bool
        /// The folder, or one above it, is presented.
        public var parentObserved: Bool
        /// The new name is presented (a presenter of a document not there yet).
        public var presented: Bool
        public init(path: ItemPath, parent: ItemPath, tempName: Bool = false, parentObserved: Bool = false, presented: Bool = false) {
            self.path = path; self.parent = parent; self.tempName = tempName; self.parentObserved = parentObserved; self.presented = presented
        }
    }

    /// A create writes the new file for the life of its handle and its folder for the create (a
    /// handle opened for reading only is finished as soon as the file is made: nothing can be
    /// written through it; `CoordinatedFileSystem.finishCreate`).
    public func create(_ op: Create) -> HandlePlan {
        let p = op.path
        // The document of a save in progress comes back (vim, emacs, git checkout): same document.
        // A temp, swap or lock file: nobody presents it, and its directory's presenters are not asked.
        if op.tempName {
            return HandlePlan(adopts: p, intents: [.writingIntent(with: p)], write: true, truncated: true, quiet: true)
        }
        // When a folder above it is presented (and nobody presents the new name), its presenters hear
        // of it once it outlives save_window or another process touches it: a file its creator
        // removes or renames away before that was a temp file, and they never hear of it.
        let later = recognisesSaves && op.parentObserved && !op.presented
        return HandlePlan(adopts: p, intents: [.writingIntent(with: p)], write: true, parentIntents: [.writingIntent(with: op.parent)],
                          created: [later ? .appearsLater(p) : .announce(.subitemAppeared(p))], truncated: true)
    }

    // MARK: mkdir, mknod, symlink, link

    /// A new item other than by create: a short write on its folder; the item appears.
    ///
    /// `leaf`: a symbolic link or a node (`mknod`, `mkfifo`, a socket bound there), not a folder or
    /// another name of a file. When a folder above it is presented (`parentObserved`, and nobody
    /// presents the new name), its presenters hear of it as of a created file: once it outlives
    /// save_window or another process touches it; one its maker removes before that was a probe
    /// (git's `init` and `clone` make `.git/tXXXXXX` a symbolic link to see whether the file
    /// system has them, and remove it at once) and they never hear of it.
    public func make(_ path: ItemPath, in parent: ItemPath, tempName: Bool, leaf: Bool = false,
                     parentObserved: Bool = false, presented: Bool = false) -> Plan {
        if tempName { return Plan(intents: [.writingIntent(with: parent)]) }
        let later = recognisesSaves && leaf && parentObserved && !presented
        return Plan(intents: [.writingIntent(with: parent)], done: [later ? .appearsLater(path) : .announce(.subitemAppeared(path))])
    }

    /// An unnamed file (O_TMPFILE) linked in: its first name, so a new file its caller made, under
    /// a create's rules (a `Create`'s facts), its access only for the link (the file was written
    /// before it had a name, unseen). A temp name: nobody presents it, its folder's presenters are
    /// not asked, nobody is told. Otherwise the name and its folder are written; a presented folder
    /// hears of it once it outlives save_window (renamed over a document by its linker before that,
    /// it was the save's temp file: one did change there); a presenter of the new name itself is
    /// told of a change to its document, as after a create's close.
    public func linkUnnamed(_ op: Create) -> Plan {
        let p = op.path
        if op.tempName { return Plan(intents: [.writingIntent(with: p)]) }
        let later = recognisesSaves && op.parentObserved && !op.presented
        let document: [Step] = op.presented ? [.store(.didChange(p)), .announce(.changed(p)), .saved(p)] : []
        return Plan(intents: [.writingIntent(with: p), .writingIntent(with: op.parent)],
                    done: [later ? .appearsLater(p) : .announce(.subitemAppeared(p))] + document)
    }

    /// A regular file linked in (a named one, or an unnamed one's first name) where a save is in
    /// progress: a presented document unlinked moments ago (`rm doc; ln copy doc`, or an unnamed
    /// file linked in after the unlink) comes back, as a create there brings it back: one did
    /// change under the save's access, which its unlink took (no deletion once the window closes).
    public func linkBack(_ path: ItemPath) -> Plan {
        Plan(adopts: path, done: [.store(.didChange(path)), .announce(.changed(path)), .saved(path)])
    }

    // MARK: truncate, chmod, chown, utimens

    /// What a change of attributes on a file its caller holds open for writing is: covered by that
    /// open's access, and its one did change at close reports it.
    public enum CoveredChange: Hashable, Sendable {
        /// A size change (ftruncate): a change of contents.
        case contents
        /// Attributes alone (fchmod, futimens): a change of attributes unless the open also wrote.
        case attributes
    }

    public func setAttributesUnderOpenWrite(sizeChanges: Bool) -> CoveredChange { sizeChanges ? .contents : .attributes }

    /// Whether a change of attributes under an open for writing waits for readers first: a size
    /// change (ftruncate) under an append (``HandlePlan/appends``), whose open did not wait for
    /// other programs' files open for reading, changes bytes they could read, so it waits for them
    /// as a write does (`write_wait`, then past them), still told as part of the open's one change.
    public func setAttributesUnderOpenWaitsForReaders(sizeChanges: Bool, appends: Bool) -> Bool { sizeChanges && appends }

    /// What a setattr by path settles before its facts are looked up.
    public func setAttributesPrelude(_ path: ItemPath) -> [SaveStep] { [.moveArrives(path, unlessBackTo: nil)] }

    public struct SetAttributes: Hashable, Sendable {
        public var path: ItemPath
        public var sizeChanges: Bool
        public var tempName: Bool
        public var fresh: Freshness
        /// The caller finished saving this path within the save window.
        public var afterOwnSave: Bool
        public init(path: ItemPath, sizeChanges: Bool, tempName: Bool = false, fresh: Freshness = .told, afterOwnSave: Bool = false) {
            self.path = path; self.sizeChanges = sizeChanges; self.tempName = tempName; self.fresh = fresh; self.afterOwnSave = afterOwnSave
        }
    }

    /// A setattr by path (not covered by an open). Nil: not coordinated, attributes set by path by a
    /// process right after it saved the file (its mode, times or owner): part of that save, which
    /// was told.
    public func setAttributes(_ op: SetAttributes) -> Plan? {
        let p = op.path
        if !op.sizeChanges && op.afterOwnSave { return nil }
        let quiet = op.tempName || op.fresh == .byCaller
        // A change of attributes alone is told to presenters, not to the store: not a content
        // change, so no version and no conflict.
        var done: [Step] = []
        if !quiet {
            if op.sizeChanges { done.append(.store(.didChange(p))) }
            done.append(.announce(.changed(p)))
        }
        return Plan(first: op.fresh == .byAnother ? [.revealFresh(p)] : [],
                    intents: [.writingIntent(with: p, options: op.sizeChanges ? [] : .contentIndependentMetadataOnly)],
                    before: op.sizeChanges ? [.beforeInPlaceWrite(p)] : [], done: done)
    }

    // MARK: unlink, rmdir

    /// What an unlink or rmdir settles before its facts are looked up.
    public func removePrelude(_ path: ItemPath, directory: Bool) -> [SaveStep] {
        directory ? [] : [.finishWrites(path), .moveArrives(path, unlessBackTo: nil)]
    }

    public struct Remove: Hashable, Sendable {
        public var path: ItemPath
        public var directory: Bool
        public var tempName: Bool
        public var presented: Bool
        public var fresh: Freshness
        public init(path: ItemPath, directory: Bool, tempName: Bool = false, presented: Bool = false, fresh: Freshness = .told) {
            self.path = path; self.directory = directory; self.tempName = tempName; self.presented = presented; self.fresh = fresh
        }
    }

    public func remove(_ op: Remove) -> Plan {
        let p = op.path
        // A presented document unlinked: maybe the first half of a save (git checkout). Its presenters
        // are asked to relinquish, not to accommodate a deletion, until the save window tells.
        if !op.directory, recognisesSaves, !op.tempName, op.presented {
            return Plan(intents: [.writingIntent(with: p)], before: [.beforeDelete(p)],
                        done: [.beginSave(p, .deleted, otherwise: .deleted(p))])
        }
        // Temp, swap and lock files go without asking the directory's presenters to accommodate, and
        // so does a file its creator removes before anyone was told of it.
        let first = op.directory ? [] : freshSteps(p, op.fresh)
        let untold = !op.directory && op.fresh == .byCaller
        let quiet = op.tempName || untold
        var done: [Step] = op.directory ? [] : [.store(.didDelete(p))]
        if !quiet { done.append(.announce(.deleted(p))) }
        return Plan(first: first, intents: [.writingIntent(with: p, options: quiet ? [] : .forDeleting)],
                    before: op.directory ? [] : [.beforeDelete(p)], done: done, revealsSettledOnFailure: untold)
    }

    // MARK: rename

    /// What a rename settles before its facts are looked up: the caller's writes of the source are
    /// told, and a document renamed to either name moments ago moved (unless this takes it back).
    public func renamePrelude(from source: ItemPath, to destination: ItemPath) -> [SaveStep] {
        [.finishWrites(source), .moveArrives(destination, unlessBackTo: nil), .moveArrives(source, unlessBackTo: destination)]
    }

    public struct Rename: Hashable, Sendable {
        public var source: ItemPath
        public var destination: ItemPath
        /// RENAME_EXCHANGE.
        public var exchange: Bool
        public var sourceKind: ItemKind?
        public var destinationKind: ItemKind?
        public var sourceTempName: Bool
        public var destinationTempName: Bool
        public var sourceFresh: Freshness
        /// With `exchange`: whether the destination is a file created moments ago nobody was told of.
        public var destinationFresh: Freshness
        public var sourcePresented: Bool
        /// The source, or a folder above it, is presented.
        public var sourceObserved: Bool
        public var destinationPresented: Bool
        /// A save in progress holds the destination (a document renamed or unlinked away from it).
        public var saveInProgressAtDestination: Bool
        public init(source: ItemPath, destination: ItemPath, exchange: Bool = false, sourceKind: ItemKind? = .file,
                    destinationKind: ItemKind? = nil, sourceTempName: Bool = false, destinationTempName: Bool = false,
                    sourceFresh: Freshness = .told, destinationFresh: Freshness = .told, sourcePresented: Bool = false,
                    sourceObserved: Bool = false, destinationPresented: Bool = false, saveInProgressAtDestination: Bool = false) {
            self.source = source; self.destination = destination; self.exchange = exchange
            self.sourceKind = sourceKind; self.destinationKind = destinationKind
            self.sourceTempName = sourceTempName; self.destinationTempName = destinationTempName
            self.sourceFresh = sourceFresh; self.destinationFresh = destinationFresh
            self.sourcePresented = sourcePresented; self.sourceObserved = sourceObserved
            self.destinationPresented = destinationPresented; self.saveInProgressAtDestination = saveInProgressAtDestination
        }

        /// With `exchange`, an atomic swap save: the document saved, when one name holds a file its
        /// caller made moments ago (nobody told of it yet) or a file of a temp name, and the other a
        /// document (a file that is neither). The caller removes the other name next: it holds the
        /// old version now. Nil for any other rename (two documents exchanged are a change at both).
        public var swapSavedDocument: ItemPath? {
            guard exchange, sourceKind == .file, destinationKind == .file else { return nil }
            let tempSource = sourceTempName || sourceFresh == .byCaller
            let tempDestination = destinationTempName || destinationFresh == .byCaller
            guard tempSource != tempDestination else { return nil }
            return tempSource ? destination : source
        }
    }

    public func rename(_ op: Rename) -> Plan {
        let src = op.source, dst = op.destination
        let sourceIsFile = op.sourceKind == .file, destinationIsFile = op.destinationKind == .file
        // A file its creator renames before anyone was told of it is a temp file: written under one
        // name, then put in place (over a document, or as a new one).
        let first = sourceIsFile ? freshSteps(src, op.sourceFresh) : []
        let untold = sourceIsFile && op.sourceFresh == .byCaller
        let tempSource = op.sourceTempName || untold

        if op.exchange {
            // An atomic swap save: a file its caller made moments ago (nobody told of it yet), or
            // one of a temp name, exchanged with a document, after which the caller removes it
            // (it holds the old version now). The document's save: asked as a rename over it, one
            // did change; the other name stays the caller's temp file, as a file it made: removed
            // within save_window, nobody hears of it, kept longer, it appears then.
            if let document = op.swapSavedDocument {
                let temp = document == dst ? src : dst
                let reveal = [(src, op.sourceFresh), (dst, op.destinationFresh)].compactMap { p, fresh in
                    p == document && fresh == .byAnother ? SaveStep.revealFresh(p) : nil
                }
                return Plan(first: reveal, intents: [.writingIntent(with: temp, options: .forMoving), .writingIntent(with: document)],
                            before: [.beforeReplace(document)],
                            done: [.store(.didChange(document)), .announce(.changed(document)), .saved(document)])
            }
            // Both items stay, each with the other's contents: a change at both paths.
            return Plan(first: first, intents: [.writingIntent(with: src, options: .forMoving), .writingIntent(with: dst, options: .forMoving)],
                        before: [.beforeReplace(src), .beforeReplace(dst)],
                        done: [.store(.didChange(src)), .store(.didChange(dst)), .announce(.changed(src)), .announce(.changed(dst))],
                        revealsSettledOnFailure: untold)
        }

        // Maybe the first half of a rename-to-backup save: the document goes to a backup name (any
        // new name for a presented document, a temp/backup name for one inside a presented folder),
        // and a new file at its name within save_window makes it a save; otherwise it moved. The
        // temp/backup name may hold a file nobody presents (the backup of an earlier save): it is
        // replaced. Over any other existing file it is a move.
        let overOldBackup = destinationIsFile && op.destinationTempName && !op.destinationPresented
        if recognisesSaves, sourceIsFile, op.destinationKind == nil || overOldBackup, !tempSource,
           op.destinationTempName ? op.sourceObserved : op.sourcePresented {
            let replaced = op.destinationKind != nil
            return Plan(first: first, intents: [.writingIntent(with: src)] + (replaced ? [.writingIntent(with: dst, options: .forReplacing)] : []),
                        before: [.beforeReplace(src)] + (replaced ? [.beforeReplace(dst)] : []),
                        done: (replaced ? [.store(.didDelete(dst))] : [])
                            + [.beginSave(src, .renamed(to: dst, kept: !op.destinationTempName), otherwise: .moved(from: src, to: dst))],
                        revealsSettledOnFailure: untold)
        }

        // A new version replaces the document (sed -i, rsync, mv tmp over, LibreOffice, most GUI
        // editors), or comes back after an unlink: the document changed, it was not deleted. The
        // change is told first, to the document's presenters; then a presented source moves there
        // (`mv a b` with both presented): its presenters follow their file, which did not change,
        // and hear only that it moved, and the store's document at `b` takes `a`'s along.
        let adopts = sourceIsFile && op.saveInProgressAtDestination
        let replacesDocument = sourceIsFile && destinationIsFile && (tempSource || op.destinationPresented)
        if adopts || replacesDocument {
            var intents: [FileAccessIntent] = [.writingIntent(with: src, options: .forMoving)]
            if !adopts { intents.append(.writingIntent(with: dst)) }
            let changed = AccessChange.changed(dst)
            return Plan(first: first, adopts: adopts ? dst : nil, intents: intents,
                        before: op.destinationKind != nil ? [.beforeReplace(dst)] : [],
                        done: [.store(.didChange(dst)), adopts ? .announceAdopted(changed) : .announce(changed),
                               .ifPresented(src, [.store(.didMove(from: src, to: dst)), .announce(.moved(from: src, to: dst))]),
                               .saved(dst)],
                        revealsSettledOnFailure: untold)
        }

        var intents: [FileAccessIntent] = [.writingIntent(with: src, options: .forMoving)]
        var done: [Step] = []
        if op.destinationKind != nil {
            intents.append(.writingIntent(with: dst, options: .forReplacing))
            done.append(.store(.didDelete(dst)))
        }
        done.append(.store(.didMove(from: src, to: dst)))
        if tempSource && !op.destinationTempName && op.destinationKind == nil {
            done.append(.announce(.subitemAppeared(dst))) // written under a temp name, then named: a new document
        } else if !(tempSource && op.destinationTempName) {
            done.append(.announce(.moved(from: src, to: dst)))
        }
        return Plan(first: first, intents: intents, before: op.destinationKind != nil ? [.beforeReplace(dst)] : [],
                    done: done, revealsSettledOnFailure: untold)
    }

    // MARK: changes made directly in the backing folder

    /// What a change seen in the backing folder settles before the store and presenters hear of it
    /// (`paths`: the path written, truncated or removed; for a rename, both names): a document
    /// renamed through the mount moments ago to one of them moved, as when the same change is made
    /// through the mount, so the change is the document's change at its new path. A rename back to
    /// the name it left is a move back, not a save: it is seen after it happened, with no access to
    /// hand over.
    public func backingChangePrelude(_ paths: [ItemPath]) -> [SaveStep] {
        paths.map { .moveArrives($0, unlessBackTo: nil) }
    }

    // MARK: Helpers

    /// A file just created: another process's access tells its folder first; its creator's settles it.
    private func freshSteps(_ p: ItemPath, _ fresh: Freshness) -> [SaveStep] {
        switch fresh {
        case .told: []
        case .byCaller: [.settleFresh(p)]
        case .byAnother: [.revealFresh(p)]
        }
    }
}
