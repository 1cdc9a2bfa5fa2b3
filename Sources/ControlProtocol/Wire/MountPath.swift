import NameBytes

/// A path inside a mount, relative to the mount's root, in normal form: no leading `/`, no empty,
/// `.` or `..` components, no NUL. The root itself is `MountPath.root` (written `"."`).
///
/// Names are bytes: `rawValue` is a lossless string (`LosslessName`; on the wire a byte that is not
/// UTF-8 is `\udcNN`), split at the byte `/`, and compared, hashed and ordered by its bytes.
///
/// Every path that crosses the control socket is one of these, so a peer can never name a file
/// outside the mount by spelling. (Escapes through symbolic links depend on the file system and
/// are the daemon's job: it resolves the path below the backing folder and refuses what leaves it.)
public struct MountPath: Hashable, Comparable, Sendable, CustomStringConvertible {
    /// Normal form; `""` for the root.
    public let rawValue: String

    /// Longest accepted path in bytes: 16 times Linux's PATH_MAX, less one. An item deeper than
    /// PATH_MAX cannot be named in one system call, but the mount reaches it (every name is
    /// resolved against its parent) and coordinates it, and tells presenters about it, up to here.
    public static let maxLength = 65_535
    /// Longest accepted component in bytes (Linux NAME_MAX).
    public static let maxComponentLength = 255

    /// The mount's root directory.
    public static let root = MountPath(normalized: "")

    private init(normalized: String) { rawValue = normalized }

    /// Validates and normalises `text` (`"a//b/./c/"` becomes `"a/b/c"`; `"."` is the root).
    /// - Throws: `ProtocolError` with code `invalidPath` for an empty, absolute, too long path,
    ///   one with a `..` component or a NUL byte.
    public init(validating text: String) throws(ProtocolError) {
        let utf8 = text.utf8
        if utf8.isEmpty {
            throw ProtocolError(.invalidPath, "path is empty (use \".\" for the mount's root)")
        }
        // Lengths are the name's bytes, not the UTF-8 of its lossless form (four for a byte that
        // is not UTF-8).
        if utf8.count > MountPath.maxLength, case let length = LosslessName.byteCount(text), length > MountPath.maxLength {
            throw ProtocolError(.invalidPath, "path is \(length) bytes long; the limit is \(MountPath.maxLength)")
        }
        if utf8.first == UInt8(ascii: "/") {
            throw ProtocolError(.invalidPath, "path \(MountPath.quoted(text)) is absolute; paths are relative to the mount's root")
        }
        if utf8.contains(0) {
            throw ProtocolError(.invalidPath, "path contains a NUL byte")
        }
        var kept: [Substring] = []
        for component in MountPath.split(text) {
            if component.utf8.elementsEqual(".".utf8) { continue }
            if component.utf8.elementsEqual("..".utf8) {
                throw ProtocolError(.invalidPath, "path \(MountPath.quoted(text)) contains \"..\"; paths may not leave the mount")
            }
            if component.utf8.count > MountPath.maxComponentLength,
               case let length = LosslessName.byteCount(component), length > MountPath.maxComponentLength {
                throw ProtocolError(.invalidPath, "a component of the path is \(length) bytes long; the limit is \(MountPath.maxComponentLength)")
            }
            kept.append(component)
        }
        rawValue = kept.joined(separator: "/")
    }

    /// Whether this is the mount's root.
    public var isRoot: Bool { rawValue.isEmpty }

    /// The path's components (empty for the root).
    public var components: [Substring] { MountPath.split(rawValue) }

    /// The non-empty components of `text`, split at the byte `/` (a combining mark after a slash
    /// does not hide it, as it would from a split by `Character`).
    static func split(_ text: String) -> [Substring] {
        text.utf8.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: true).map { Substring($0) }
    }

    /// The last component, or `nil` for the root.
    public var lastComponent: Substring? { components.last }

    /// The containing directory, or `nil` for the root.
    public var parent: MountPath? {
        if isRoot { return nil }
        guard let slash = rawValue.utf8.lastIndex(of: UInt8(ascii: "/")) else { return .root }
        return MountPath(normalized: String(rawValue[..<slash]))
    }

    /// Appends one relative path (itself validated).
    public func appending(_ relative: String) throws(ProtocolError) -> MountPath {
        let tail = try MountPath(validating: relative)
        if tail.isRoot { return self }
        if isRoot { return tail }
        return MountPath(normalized: rawValue + "/" + tail.rawValue)
    }

    /// Whether `other` lies strictly inside this directory path.
    public func isAncestor(of other: MountPath) -> Bool {
        if isRoot { return !other.isRoot }
        return other.rawValue.utf8.count > rawValue.utf8.count
            && other.rawValue.utf8.starts(with: rawValue.utf8)
            && other.rawValue.utf8.dropFirst(rawValue.utf8.count).first == UInt8(ascii: "/")
    }

    /// The form written on the wire: `"."` for the root, the normal form otherwise.
    public var wireValue: String { isRoot ? "." : rawValue }

    public var description: String { wireValue }

    /// By bytes (names are bytes: `String`'s order and equality follow canonical equivalence).
    public static func < (a: MountPath, b: MountPath) -> Bool { a.rawValue.utf8.lexicographicallyPrecedes(b.rawValue.utf8) }
    public static func == (a: MountPath, b: MountPath) -> Bool { ExactName.same(a.rawValue, b.rawValue) }
    public func hash(into hasher: inout Hasher) { ExactName.hash(rawValue, into: &hasher) }

    static func quoted(_ text: String) -> String {
        let short = text.unicodeScalars.count > 80 ? String(String.UnicodeScalarView(text.unicodeScalars.prefix(80))) + "..." : text
        return "\"" + short.displayEscaped + "\""
    }
}
