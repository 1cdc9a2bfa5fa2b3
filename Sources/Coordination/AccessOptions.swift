extension FileCoordinator {
    /// Options for a coordinated read (Apple's `NSFileCoordinator.ReadingOptions`, same raw values).
    public typealias ReadingOptions = Vocabulary.ReadingOptions
    /// Options for a coordinated write (Apple's `NSFileCoordinator.WritingOptions`, same raw values).
    public typealias WritingOptions = Vocabulary.WritingOptions
}

/// How an intent occupies its path in the arbitration tree.
public enum LockMode: UInt8, Sendable {
    /// Shared with other readers of the same item.
    case read
    /// Exclusive on the item itself; items inside are unaffected.
    case write
    /// Exclusive on the item and everything inside it (forDeleting / forMoving / forReplacing).
    case subtreeWrite
}

/// The details of one coordinated read or write (Apple's `NSFileAccessIntent`).
public struct FileAccessIntent: Hashable, Sendable, CustomStringConvertible {
    /// Read or write, with its options.
    public enum Kind: Hashable, Sendable {
        case reading(FileCoordinator.ReadingOptions)
        case writing(FileCoordinator.WritingOptions)
    }

    /// The item accessed. After the grant this is the path actually coordinated (a resolved
    /// symbolic link target when ``FileCoordinator/ReadingOptions/resolvesSymbolicLink`` applied).
    public internal(set) var path: ItemPath
    /// Read or write, and the options.
    public let kind: Kind

    public init(path: ItemPath, kind: Kind) {
        self.path = path
        self.kind = kind
    }

    /// A coordinated read of `path`.
    public static func readingIntent(with path: ItemPath, options: FileCoordinator.ReadingOptions = []) -> FileAccessIntent {
        FileAccessIntent(path: path, kind: .reading(options))
    }

    /// A coordinated write of `path`.
    public static func writingIntent(with path: ItemPath, options: FileCoordinator.WritingOptions = []) -> FileAccessIntent {
        FileAccessIntent(path: path, kind: .writing(options))
    }

    /// True for writes.
    public var isWriting: Bool {
        if case .writing = kind { return true }
        return false
    }

    /// The write options, or `[]` for a read.
    public var writingOptions: FileCoordinator.WritingOptions {
        if case .writing(let o) = kind { return o }
        return []
    }

    /// True for a write that deletes or replaces what is at `path`.
    public var isDeleting: Bool { !writingOptions.isDisjoint(with: [.forDeleting, .forReplacing]) }

    /// How the intent holds its path: shared, exclusive on the item, or exclusive on its subtree.
    @inline(__always) public var lockMode: LockMode {
        switch kind {
        case .reading: return .read
        case .writing(let o):
            return o.isDisjoint(with: [.forDeleting, .forMoving, .forReplacing]) ? .write : .subtreeWrite
        }
    }

    public var description: String {
        switch kind {
        case .reading(let o): return "read \(path)" + (o.isEmpty ? "" : " options=\(o.rawValue)")
        case .writing(let o): return "write \(path)" + (o.isEmpty ? "" : " options=\(o.rawValue)")
        }
    }
}

/// What happened during an access, announced on the ``CoordinatedAccess`` so that the right "did"
/// messages reach presenters after it ends.
public enum AccessChange: Hashable, Sendable, CustomStringConvertible {
    /// The item's contents or attributes changed.
    case changed(ItemPath)
    /// The item (and everything inside it) moved. Presenters at or below `from` follow at once.
    case moved(from: ItemPath, to: ItemPath)
    /// The item was deleted.
    case deleted(ItemPath)
    /// A new item appeared (a create inside a directory).
    case subitemAppeared(ItemPath)

    /// The paths the change concerns: the item's, or a move's two.
    public var paths: [ItemPath] {
        switch self {
        case .changed(let p), .deleted(let p), .subitemAppeared(let p): return [p]
        case .moved(let a, let b): return [a, b]
        }
    }

    public var description: String {
        switch self {
        case .changed(let p): return "changed \(p)"
        case .moved(let a, let b): return "moved \(a) -> \(b)"
        case .deleted(let p): return "deleted \(p)"
        case .subitemAppeared(let p): return "appeared \(p)"
        }
    }
}
