// Names from DocumentStore that clash with Coordination's and EventLog's (PresenterID, Resolution,
// SnapshotMethod) when a file imports several of them. This file imports DocumentStore alone, so
// the aliases below are unambiguous everywhere in CoordFS.
import DocumentStore

/// The document store's name for a presenter (a persisted string), as opposed to the
/// coordinator's numeric `Coordination.PresenterID`.
public typealias StorePresenterID = PresenterID
/// A way out of a conflict (close, save, reload, keep both, merge).
public typealias DocumentResolution = Resolution
/// How the store kept a version (link, reflink, copy).
public typealias DocumentSnapshotMethod = SnapshotMethod
