import Coordination

/// What the coordinated mount tells the document store around changes to presented documents. The
/// mount calls these only for paths that a presenter presents (a cheap trie lookup decides), inside
/// the operation's coordinated access: the `before` hooks after the grant and before the change
/// reaches the backing folder, the `did` hooks after it.
public protocol DocumentHooks: AnyObject, Sendable {
    /// An in-place change is about to happen (open for writing, O_TRUNC, truncate): keep the version
    /// the presenters loaded (a clone, or a copy before the first in-place write of a base).
    func beforeInPlaceWrite(_ path: ItemPath)
    /// An open for appending only (`O_APPEND` without `O_TRUNC`) while no other open writes the
    /// file otherwise: keep what presenters loaded as a prefix of the file rather than a copy where
    /// that is possible. Returns the end of that prefix: the open must then be served by the daemon
    /// (no kernel passthrough) and call `beforeInPlaceWrite` before anything it does may change a
    /// byte below it (a write at a lower offset, a truncate, `fallocate`). nil: nothing to watch.
    func beforeAppend(_ path: ItemPath) -> Int64?
    /// Something is about to be renamed over `path`, or `path` renamed away to a backup name (the
    /// first half of a save): keep the old file (a clone or a copy, never a link to the inode).
    func beforeReplace(_ path: ItemPath)
    /// `path` is about to be unlinked: keep the old file (a clone or a copy).
    func beforeDelete(_ path: ItemPath)
    /// The document at `path` changed (written, replaced, re-created by a save).
    func didChange(_ path: ItemPath, by origin: AccessOrigin)
    /// The document at `path` changed beside the mount (the backing watcher, another node): as
    /// `didChange`, and no prefix kept by `beforeAppend` is trusted any more.
    func didChangeBeside(_ path: ItemPath, by origin: AccessOrigin)
    /// The document at `path` is gone for good (the save window closed without it coming back).
    func didDelete(_ path: ItemPath, by origin: AccessOrigin)
    /// The document moved.
    func didMove(from: ItemPath, to: ItemPath, by origin: AccessOrigin)
}

extension DocumentHooks {
    public func beforeAppend(_ path: ItemPath) -> Int64? {
        beforeInPlaceWrite(path)
        return nil
    }
    public func didChangeBeside(_ path: ItemPath, by origin: AccessOrigin) { didChange(path, by: origin) }
}
