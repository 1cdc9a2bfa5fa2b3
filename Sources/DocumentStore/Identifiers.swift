/// A document's stable id in the store: it stays the same across saves, atomic replaces, moves and
/// restarts for as long as the store keeps anything about the document.
public struct DocumentID: RawRepresentable, Hashable, Sendable, Codable, CustomStringConvertible {
    public var rawValue: Int64
    public init(rawValue: Int64) { self.rawValue = rawValue }
    public var description: String { "doc#\(rawValue)" }
}

/// A kept version's id; unique in the store and never reused, so people can name it
/// (`coordfs show PATH --version N`).
public struct VersionID: RawRepresentable, Hashable, Sendable, Codable, CustomStringConvertible {
    public var rawValue: Int64
    public init(rawValue: Int64) { self.rawValue = rawValue }
    public var description: String { "\(rawValue)" }
}

/// A conflict's id; unique in the store and never reused.
public struct ConflictID: RawRepresentable, Hashable, Sendable, Codable, CustomStringConvertible {
    public var rawValue: Int64
    public init(rawValue: Int64) { self.rawValue = rawValue }
    public var description: String { "conflict#\(rawValue)" }
}

/// Who presents a document. The store treats it as an opaque name chosen by the integrator (for
/// example the coordinator's presenter id, or "pid:uid:name" for a client); it is persisted, so it
/// should be stable for as long as the presenter's interest should survive a daemon restart.
public struct PresenterID: RawRepresentable, Hashable, Sendable, Codable, CustomStringConvertible {
    public var rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
    public init(_ rawValue: String) { self.rawValue = rawValue }
    public var description: String { rawValue }
}
