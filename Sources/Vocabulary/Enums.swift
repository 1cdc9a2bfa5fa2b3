/// The ways out of a conflict: what `coordfs resolve` offers, what the store does, what the
/// protocol's `resolve` carries and what a `conflictResolved` record says.
public enum Resolution: String, Sendable, Hashable, Codable, CaseIterable {
    /// Drop the document (and "mine"); the presenter lets go. The file is left as it is.
    case close
    /// Write "mine" over "theirs"; restores a deleted file.
    case save
    /// Discard "mine" and load "theirs"; not for deletions.
    case reload
    /// Write "mine" as a named conflict copy beside the file; the presenter takes "theirs" (or
    /// closes, when the file was deleted).
    case keepBoth
    /// Three-way merge of "mine" and "theirs" against the base, for text; written over the file.
    /// Not for deletions.
    case merge

    /// Whether the resolution needs the presenter's bytes ("mine").
    public var needsContents: Bool { self == .save || self == .keepBoth || self == .merge }
}

/// How the document store kept a version's bytes, cheapest first (`snapshotTaken` records say which).
public enum SnapshotMethod: String, Sendable, Hashable, Codable, CaseIterable {
    /// A hard link to the old inode. No longer made: a name sharing the inode of a live file lets
    /// a write to that file (through another name, an open descriptor, a program working in the
    /// backing folder) change the kept version. Stores written by older builds have such versions;
    /// the store gives each its own copy when it opens.
    case link
    /// A `FICLONE` clone (XFS with reflink=1, btrfs): shares extents, O(extents), no extra space
    /// until one side is written.
    case reflink
    /// A full copy (ext4 and other file systems without clones): paid once per base.
    case copy
}
