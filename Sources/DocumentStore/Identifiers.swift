// DocumentID, VersionID and ConflictID (and Resolution, SnapshotMethod) are Vocabulary's: the
// same types on the wire, in the log and in the CLI.
@_exported import Vocabulary

/// Who presents a document, as the store knows it (a persisted string; the coordinator's numeric
/// `PresenterID` is another thing). The store treats it as an opaque name chosen by the integrator
/// (for example the daemon's "coordfs-PID-BOOT/presenter#N", or "pid:uid:name" for a client); it is
/// persisted, so it should be stable for as long as the presenter's interest should survive a
/// daemon restart.
public struct StorePresenterID: RawRepresentable, Hashable, Sendable, Codable, CustomStringConvertible {
    public var rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
    public init(_ rawValue: String) { self.rawValue = rawValue }
    public var description: String { rawValue }
}
