// DocumentStore's ids clash with ControlProtocol's (ConflictID, VersionID) in the control
// service, which imports both; this file imports DocumentStore alone, so these are unambiguous.
import DocumentStore

/// The store's conflict id (the protocol's is `ControlProtocol.ConflictID`).
typealias StoreConflictID = ConflictID
/// The store's version id (the protocol's is `ControlProtocol.VersionID`).
typealias StoreVersionID = VersionID
