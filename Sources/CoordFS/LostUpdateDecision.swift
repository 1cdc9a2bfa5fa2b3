import DocumentStore
import Glibc

/// What the mount does when a process saves over a document that changed since it read it
/// (`-o lost_updates=`, docs/semantics.md "Lost updates").
public enum LostUpdateMode: String, Sendable, Equatable, CaseIterable {
    /// Detect and keep (the default): the version being overwritten and the saver's base are kept,
    /// a conflict is recorded; the save goes ahead.
    case keep
    /// Not tracked at all: no reader table, no check.
    case off
    /// The late save fails with ``LostUpdateDecision/refusal`` (ECANCELED) and changes nothing.
    case refuse
}

/// The lost-update rule as a pure function of what the mount knows at the moment a process is about
/// to save a document (write it in place, truncate it, rename over it, unlink or rename it away to
/// write it anew): no FUSE, no files, unit-tested on its own (`LostUpdateDecisionTests`).
enum LostUpdateDecision: Equatable, Sendable {
    /// Not a lost update: the save goes ahead as usual.
    case save
    /// A lost update: keep `current` (theirs) and `read`'s version (the base) where it can still be
    /// had, let the save through, and record a conflict once it landed.
    case keep(read: FileIdentity, current: FileIdentity)
    /// A lost update refused (`lost_updates=refuse`): fail with ``refusal``, change nothing.
    case refuse(read: FileIdentity, current: FileIdentity)

    /// The errno a refused late save gets: ECANCELED, "Operation canceled". (Not ESTALE, which
    /// would fit: the kernel retries an open or a rename that gets it, so every refusal came twice.)
    static let refusal = ECANCELED

    /// - Parameters:
    ///   - mode: the mount's `lost_updates` option.
    ///   - presented: the saving process presents the document itself: its presenter's rules apply,
    ///     not these (its save is never reported twice). A presenter of another process (a viewer)
    ///     does not count: the saver's lost update is recorded whoever else presents the document.
    ///   - read: the version this process last read (or saved) at the path, while it is alive; nil
    ///     when it never read it (a process that only writes, or another short-lived process read it:
    ///     `cat` then `cp` are not linked).
    ///   - current: the file at the path now (nil: nothing there, or not a regular file).
    static func decide(mode: LostUpdateMode, presented: Bool, read: FileIdentity?, current: FileIdentity?) -> LostUpdateDecision {
        guard mode != .off, !presented, let read, let current, read != current else { return .save }
        return mode == .refuse ? .refuse(read: read, current: current) : .keep(read: read, current: current)
    }

    /// How a save style overwrites the document: by a new inode (the old one can be kept by a link:
    /// rename over, unlink then create, rename to a backup name) or in place (kept by a clone or copy
    /// before the write: open for writing, truncate).
    enum Overwrite: Sendable, Equatable {
        case replace
        case inPlace
    }
}
