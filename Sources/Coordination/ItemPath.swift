import NameBytes

/// A mount-relative path to an item: normalised components, the empty path being the mount root.
///
/// Paths are values, never URLs, so the FUSE layer, the control socket and in-process callers all
/// name items the same way. Construction rejects anything that could escape or confuse the tree:
/// `..` and `.` components, empty components (`a//b`), and NUL bytes.
///
/// Linux names are bytes: components are lossless strings (`LosslessName`: a byte that is not UTF-8
/// is held as U+10DC80+), and paths are parsed, compared, hashed and ordered by those bytes, never
/// by `String`'s canonical equivalence (the NFC and NFD spellings of a name are two paths).
public struct ItemPath: Hashable, Sendable, Comparable, CustomStringConvertible {
    /// The components from the mount root down; empty for the root itself.
    public let components: [String]

    /// The mount root.
    public static let root = ItemPath(validated: [])

    /// Parses a slash-separated path. A single leading and a single trailing slash are accepted
    /// (`"/a/b/"` is `a/b`); `""` and `"/"` are the root. Split at the byte `/` (a combining mark
    /// after a slash does not hide it).
    ///
    /// - Throws: ``ItemPathError`` for `.`/`..`, empty components or NUL bytes.
    public init(_ string: String) throws(ItemPathError) {
        let slash = UInt8(ascii: "/")
        var text = Array(string.utf8)[...]
        if text.contains(0) { throw .nulByte(string) }
        if text.first == slash { text = text.dropFirst() }
        if text.isEmpty {
            self.components = []
            return
        }
        if text.last == slash {
            text = text.dropLast()
            if text.isEmpty { throw .emptyComponent(string) }
        }
        var parts: [String] = []
        for part in text.split(separator: slash, omittingEmptySubsequences: false) {
            try Self.validate(part, in: string)
            parts.append(String(decoding: part, as: UTF8.self))
        }
        self.components = parts
    }

    /// Parses a path given as the kernel's bytes (`init(_:)` on its lossless string).
    public init<C: RandomAccessCollection>(bytes: C) throws(ItemPathError) where C.Element == UInt8 {
        try self.init(String(nameBytes: bytes))
    }

    /// Builds a path from components, validating each one.
    ///
    /// - Throws: ``ItemPathError`` when a component is empty, `.`/`..`, or contains `/` or NUL.
    public init(components: [String]) throws(ItemPathError) {
        for part in components {
            if part.utf8.contains(UInt8(ascii: "/")) { throw .slashInComponent(part) }
            try Self.validate(part.utf8[...], in: part)
        }
        self.components = components
    }

    init(validated components: [String]) {
        self.components = components
    }

    private static func validate<S: Collection>(_ part: S, in whole: String) throws(ItemPathError) where S.Element == UInt8 {
        if part.isEmpty { throw .emptyComponent(whole) }
        if part.elementsEqual(".".utf8) || part.elementsEqual("..".utf8) { throw .dotComponent(whole) }
        if part.contains(0) { throw .nulByte(whole) }
    }

    /// Whether this is the mount root.
    public var isRoot: Bool { components.isEmpty }

    /// The last component, or nil for the root.
    public var name: String? { components.last }

    /// The containing directory, or nil for the root.
    public var parent: ItemPath? {
        components.isEmpty ? nil : ItemPath(validated: Array(components.dropLast()))
    }

    /// Number of components (0 for the root).
    public var depth: Int { components.count }

    /// True when `other` lies strictly inside this path (the root is an ancestor of every other path).
    public func isAncestor(of other: ItemPath) -> Bool {
        other.components.count > components.count && other.components.starts(with: components, by: ExactName.same)
    }

    /// True when `other` is this path or lies inside it.
    public func isSameOrAncestor(of other: ItemPath) -> Bool {
        other.components.count >= components.count && other.components.starts(with: components, by: ExactName.same)
    }

    /// This path with one more component.
    ///
    /// - Throws: ``ItemPathError`` when `component` is not a valid single component.
    public func appending(_ component: String) throws(ItemPathError) -> ItemPath {
        // Every open builds its path so: the name is checked as one buffer (a small one on the stack).
        var name = component
        let problem: ItemPathError? = name.withUTF8 { bytes in
            if bytes.contains(UInt8(ascii: "/")) { return .slashInComponent(component) }
            do throws(ItemPathError) { try Self.validate(bytes, in: component) } catch { return error }
            return nil
        }
        if let problem { throw problem }
        var all = components
        all.reserveCapacity(components.count + 1)
        all.append(component)
        return ItemPath(validated: all)
    }

    /// This path followed by every component of `path`.
    public func appending(_ path: ItemPath) -> ItemPath {
        ItemPath(validated: components + path.components)
    }

    /// Replaces a leading `prefix` with `replacement` (`a/b/c` with `a` → `x` is `x/b/c`).
    /// Returns nil when `prefix` is neither this path nor one of its ancestors.
    public func replacingPrefix(_ prefix: ItemPath, with replacement: ItemPath) -> ItemPath? {
        guard prefix.isSameOrAncestor(of: self) else { return nil }
        return ItemPath(validated: replacement.components + components.dropFirst(prefix.components.count))
    }

    /// The slash-separated form without a leading slash; `""` for the root. A lossless string:
    /// `bytes` for I/O, `String.displayEscaped` for text shown to people.
    public var string: String { components.joined(separator: "/") }

    /// The slash-separated path as the kernel's bytes.
    public var bytes: [UInt8] { string.nameBytes }

    public var description: String { components.isEmpty ? "/" : string }

    /// Byte equality of every component.
    public static func == (lhs: ItemPath, rhs: ItemPath) -> Bool {
        lhs.components.count == rhs.components.count && lhs.components.elementsEqual(rhs.components, by: ExactName.same)
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(components.count)
        for c in components { ExactName.hash(c, into: &hasher) }
    }

    /// Component by component, each by its bytes.
    public static func < (lhs: ItemPath, rhs: ItemPath) -> Bool {
        lhs.components.lexicographicallyPrecedes(rhs.components) { $0.utf8.lexicographicallyPrecedes($1.utf8) }
    }
}

/// Why a string or component list is not a valid ``ItemPath``.
public enum ItemPathError: Error, Hashable, Sendable, CustomStringConvertible {
    /// Two slashes in a row, or an empty component.
    case emptyComponent(String)
    /// A `.` or `..` component: paths are normalised and may not climb out of the mount.
    case dotComponent(String)
    /// A NUL byte anywhere in the path.
    case nulByte(String)
    /// A single component that contains `/`.
    case slashInComponent(String)

    public var description: String {
        switch self {
        case .emptyComponent(let s): return "invalid item path \(s.debugDescription): empty component"
        case .dotComponent(let s): return "invalid item path \(s.debugDescription): '.' and '..' are not allowed"
        case .nulByte(let s): return "invalid item path \(s.debugDescription): contains NUL"
        case .slashInComponent(let s): return "invalid path component \(s.debugDescription): contains '/'"
        }
    }
}
