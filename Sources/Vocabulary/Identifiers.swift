// The identifiers the coordinator, the document store, the event log, the control protocol and the
// command line all speak of. One definition each: a presenter numbered by the coordinator is the
// same number on the wire, and a store's document, conflict or version id is the same number in
// the store, on the wire and in `coordfs` output.
//
// Ids on the wire are JSON integers no larger than 2^53 - 1 (ControlProtocol checks that when
// decoding); the store's ids are SQLite row ids, so never negative.

/// A registered presenter, as numbered by the coordinator (unique for the daemon's lifetime). The
/// control protocol carries the same number (`presenter` on the wire, `presenter#N` in the log).
public struct PresenterID: RawRepresentable, Hashable, Comparable, Sendable, Codable, CustomStringConvertible {
    public var rawValue: UInt64
    public init(rawValue: UInt64) { self.rawValue = rawValue }
    public init(_ rawValue: UInt64) { self.rawValue = rawValue }
    public var description: String { "presenter#\(rawValue)" }
    public static func < (a: Self, b: Self) -> Bool { a.rawValue < b.rawValue }
}

/// A document's stable id in the mount's document store (`document` on the wire): it stays the
/// same across saves, atomic replaces, moves and restarts for as long as the store keeps anything
/// about the document.
public struct DocumentID: RawRepresentable, Hashable, Comparable, Sendable, Codable, CustomStringConvertible {
    public var rawValue: UInt64
    public init(rawValue: UInt64) { self.rawValue = rawValue }
    public init(_ rawValue: UInt64) { self.rawValue = rawValue }
    public var description: String { "doc#\(rawValue)" }
    public static func < (a: Self, b: Self) -> Bool { a.rawValue < b.rawValue }
}

/// A conflict's id in the document store; unique and never reused (`coordfs conflicts` shows the
/// same number).
public struct ConflictID: RawRepresentable, Hashable, Comparable, Sendable, Codable, CustomStringConvertible {
    public var rawValue: UInt64
    public init(rawValue: UInt64) { self.rawValue = rawValue }
    public init(_ rawValue: UInt64) { self.rawValue = rawValue }
    public var description: String { "conflict#\(rawValue)" }
    public static func < (a: Self, b: Self) -> Bool { a.rawValue < b.rawValue }
}

/// A kept version's id in the document store; unique and never reused, so people can name it
/// (`coordfs show PATH --version N`; `coordfs versions` shows the bare number, `rawValue`).
public struct VersionID: RawRepresentable, Hashable, Comparable, Sendable, Codable, CustomStringConvertible {
    public var rawValue: UInt64
    public init(rawValue: UInt64) { self.rawValue = rawValue }
    public init(_ rawValue: UInt64) { self.rawValue = rawValue }
    public var description: String { "version#\(rawValue)" }
    public static func < (a: Self, b: Self) -> Bool { a.rawValue < b.rawValue }
}
