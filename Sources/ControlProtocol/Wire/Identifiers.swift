// PresenterID, DocumentID, ConflictID, VersionID, Resolution and the reading and writing options
// are Vocabulary's (shared with the coordinator, the store and the log); this module's users see
// them through it.
@_exported import Vocabulary

/// The id of a request a client sends (`hello`, `register`, `coordinate`, ...); the reply echoes it.
/// Clients choose it; it must be unique among that connection's outstanding requests.
package struct RequestID: RawRepresentable, Hashable, Comparable, Sendable, CustomStringConvertible {
    package var rawValue: UInt64
    package init(rawValue: UInt64) { self.rawValue = rawValue }
    package init(_ rawValue: UInt64) { self.rawValue = rawValue }
    package var description: String { "#\(rawValue)" }
    package static func < (a: Self, b: Self) -> Bool { a.rawValue < b.rawValue }
}

/// The id of an ask the daemon sends to a presenter; the client's `answer` echoes it.
package struct AskID: RawRepresentable, Hashable, Comparable, Sendable, CustomStringConvertible {
    package var rawValue: UInt64
    package init(rawValue: UInt64) { self.rawValue = rawValue }
    package init(_ rawValue: UInt64) { self.rawValue = rawValue }
    package var description: String { "ask#\(rawValue)" }
    package static func < (a: Self, b: Self) -> Bool { a.rawValue < b.rawValue }
}

/// A granted coordinated access, as numbered by the daemon; `release` ends it.
public struct AccessID: RawRepresentable, Hashable, Comparable, Sendable, CustomStringConvertible {
    public var rawValue: UInt64
    public init(rawValue: UInt64) { self.rawValue = rawValue }
    public init(_ rawValue: UInt64) { self.rawValue = rawValue }
    public var description: String { "access#\(rawValue)" }
    public static func < (a: Self, b: Self) -> Bool { a.rawValue < b.rawValue }
}

/// Ids on the wire are JSON integers no larger than 2^53 - 1, so that every language's JSON
/// library (JavaScript's doubles included) reads them exactly.
package let maxWireInteger: UInt64 = (1 << 53) - 1
