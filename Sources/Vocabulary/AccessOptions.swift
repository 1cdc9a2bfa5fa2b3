/// Options for a coordinated read: Apple's `NSFileCoordinator.ReadingOptions`, by Apple's names
/// and raw values. The coordinator, the protocol and the event log use these.
public struct ReadingOptions: OptionSet, Hashable, Sendable {
    public let rawValue: UInt
    public init(rawValue: UInt) { self.rawValue = rawValue }

    /// Read what is on disk now: presenters relinquish but are not asked to save first.
    public static let withoutChanges = ReadingOptions(rawValue: 1 << 0)
    /// If the item is a symbolic link, coordinate on its target (needs a resolver in the
    /// coordinator's configuration; without one the link itself is coordinated).
    public static let resolvesSymbolicLink = ReadingOptions(rawValue: 1 << 1)
    /// Only metadata that is already available is read: no presenter is asked anything, but
    /// the read still waits for conflicting writers.
    public static let immediatelyAvailableMetadataOnly = ReadingOptions(rawValue: 1 << 2)
    /// The item is read to be uploaded. Arbitrated and asked like an ordinary read.
    public static let forUploading = ReadingOptions(rawValue: 1 << 3)

    /// The options by their Foundation names, in the order the wire, the log and the CLI list them.
    public static let names: [(String, ReadingOptions)] = [
        ("withoutChanges", .withoutChanges), ("resolvesSymbolicLink", .resolvesSymbolicLink),
        ("immediatelyAvailableMetadataOnly", .immediatelyAvailableMetadataOnly),
        ("forUploading", .forUploading),
    ]
}

/// Options for a coordinated write: Apple's `NSFileCoordinator.WritingOptions`, by Apple's names
/// and raw values.
public struct WritingOptions: OptionSet, Hashable, Sendable {
    public let rawValue: UInt
    public init(rawValue: UInt) { self.rawValue = rawValue }

    /// The item will be deleted: presenters of it (and of items inside it) accommodate the
    /// deletion, presenters of ancestors accommodate a subitem deletion; holds off the subtree.
    public static let forDeleting = WritingOptions(rawValue: 1 << 0)
    /// The item will be moved: presenters of it and of items inside it relinquish, and get
    /// `didMove` afterwards; holds off the subtree.
    public static let forMoving = WritingOptions(rawValue: 1 << 1)
    /// The write merges: presenters of the item save their changes first.
    public static let forMerging = WritingOptions(rawValue: 1 << 2)
    /// The item will be replaced: treated like a deletion of what is there now; holds off the subtree.
    public static let forReplacing = WritingOptions(rawValue: 1 << 3)
    /// Only content-independent metadata (tags, xattrs) changes: presenters are not asked
    /// anything; the write is still exclusive.
    public static let contentIndependentMetadataOnly = WritingOptions(rawValue: 1 << 4)

    /// The options by their Foundation names, in the order the wire, the log and the CLI list them.
    public static let names: [(String, WritingOptions)] = [
        ("forDeleting", .forDeleting), ("forMoving", .forMoving), ("forMerging", .forMerging),
        ("forReplacing", .forReplacing),
        ("contentIndependentMetadataOnly", .contentIndependentMetadataOnly),
    ]
}
