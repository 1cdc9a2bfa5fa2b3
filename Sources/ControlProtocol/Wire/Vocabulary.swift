/// What a presenter presents.
public enum ItemKind: String, Sendable, Hashable, CaseIterable {
    case file
    case directory
}

/// The asks the daemon sends a presenter before an access that conflicts with it; the presenter
/// answers each. Names follow `NSFilePresenter`.
public enum AskKind: String, Sendable, Hashable, CaseIterable, Comparable {
    /// `relinquishPresentedItem(toReader:)`: stop writing until `reacquire`.
    case relinquishToReader
    /// `relinquishPresentedItem(toWriter:)`: stop reading and writing until `reacquire`.
    case relinquishToWriter
    /// The access that made the presenter relinquish is over: resume.
    case reacquire
    /// `savePresentedItemChanges(completionHandler:)`: write unsaved changes now.
    case save
    /// `accommodatePresentedItemDeletion(completionHandler:)`: the item is about to be deleted.
    case accommodateDeletion
    /// `accommodatePresentedSubitemDeletion(at:completionHandler:)`: an item inside is about to go.
    case accommodateSubitemDeletion

    public static func < (a: Self, b: Self) -> Bool { a.rawValue < b.rawValue }
}

/// `NSFileCoordinator.ReadingOptions`, by Apple's names.
public struct ReadingOptions: OptionSet, Sendable, Hashable {
    public let rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }

    /// Read without asking presenters to save first.
    public static let withoutChanges = ReadingOptions(rawValue: 1 << 0)
    /// Resolve a symbolic link at the path and coordinate on its target.
    public static let resolvesSymbolicLink = ReadingOptions(rawValue: 1 << 1)
    /// Only metadata that is available at once (no saves).
    public static let immediatelyAvailableMetadataOnly = ReadingOptions(rawValue: 1 << 2)
    /// Read for uploading a copy elsewhere.
    public static let forUploading = ReadingOptions(rawValue: 1 << 3)

    /// Wire names in a fixed order.
    public static let names: [(String, ReadingOptions)] = [
        ("withoutChanges", .withoutChanges), ("resolvesSymbolicLink", .resolvesSymbolicLink),
        ("immediatelyAvailableMetadataOnly", .immediatelyAvailableMetadataOnly),
        ("forUploading", .forUploading),
    ]
}

/// `NSFileCoordinator.WritingOptions`, by Apple's names.
public struct WritingOptions: OptionSet, Sendable, Hashable {
    public let rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }

    /// The write deletes the item; presenters get `accommodateDeletion`.
    public static let forDeleting = WritingOptions(rawValue: 1 << 0)
    /// The write moves the item; presenters get `didMove` afterwards.
    public static let forMoving = WritingOptions(rawValue: 1 << 1)
    /// The write merges with the current contents; presenters save first.
    public static let forMerging = WritingOptions(rawValue: 1 << 2)
    /// The write replaces the item; presenters get `accommodateDeletion`.
    public static let forReplacing = WritingOptions(rawValue: 1 << 3)
    /// Only metadata that does not depend on the contents changes.
    public static let contentIndependentMetadataOnly = WritingOptions(rawValue: 1 << 4)

    /// Wire names in a fixed order.
    public static let names: [(String, WritingOptions)] = [
        ("forDeleting", .forDeleting), ("forMoving", .forMoving), ("forMerging", .forMerging),
        ("forReplacing", .forReplacing),
        ("contentIndependentMetadataOnly", .contentIndependentMetadataOnly),
    ]
}

/// One item of a coordinated access: read or write, which path, which options.
public enum Intent: Sendable, Hashable {
    case reading(MountPath, options: ReadingOptions = [])
    case writing(MountPath, options: WritingOptions = [])

    /// The item's path.
    public var path: MountPath {
        switch self {
        case .reading(let path, _), .writing(let path, _): return path
        }
    }

    /// Whether this is a write.
    public var isWriting: Bool {
        if case .writing = self { return true }
        return false
    }
}

/// What a coordinated writer did to an item, reported in `release`.
package enum ItemChange: Sendable, Hashable {
    /// The contents or attributes changed.
    case changed(MountPath)
    /// The item moved from the first path to the second.
    case moved(MountPath, to: MountPath)
    /// The item was deleted.
    case deleted(MountPath)

    package var path: MountPath {
        switch self {
        case .changed(let path), .moved(let path, _), .deleted(let path): return path
        }
    }
}

/// The "did" notifications a presenter receives after an access (it never hears of its own).
///
/// The set is open: a newer daemon may send events this build does not know; they decode as
/// `.unknown` and clients ignore them.
public enum PresenterEvent: Sendable, Equatable {
    /// `presentedItemDidChange()`.
    case didChange
    /// `presentedItemDidMove(to:)`: the presented item now lives at the new path.
    case didMove(to: MountPath)
    /// The presented item was deleted.
    case didDelete
    /// `presentedSubitemDidAppear(at:)`.
    case subitemDidAppear(MountPath)
    /// `presentedSubitemDidChange(at:)`.
    case subitemDidChange(MountPath)
    /// `presentedSubitem(at:didMoveTo:)`.
    case subitemDidMove(MountPath, to: MountPath)
    /// A subitem was deleted.
    case subitemDidDelete(MountPath)
    /// The document store's "underlying file changed": the presented document was changed or
    /// deleted by someone else, and what the store did (reload, close) or asks (a conflict).
    case documentChanged(DocumentChange)
    /// An event this build does not know: the `event` name and all fields but `type`,
    /// `presenter` and `event`.
    case unknown(event: String, fields: JSONObject)

    /// The wire name of the event.
    public var name: String {
        switch self {
        case .didChange: return "didChange"
        case .didMove: return "didMove"
        case .didDelete: return "didDelete"
        case .subitemDidAppear: return "subitemDidAppear"
        case .subitemDidChange: return "subitemDidChange"
        case .subitemDidMove: return "subitemDidMove"
        case .subitemDidDelete: return "subitemDidDelete"
        case .documentChanged: return "documentChanged"
        case .unknown(let event, _): return event
        }
    }
}

/// A code and a message, as carried by `error` frames and failed answers.
package struct ErrorBody: Sendable, Hashable, CustomStringConvertible {
    package var code: ErrorCode
    package var message: String
    package init(code: ErrorCode, message: String) {
        self.code = code
        self.message = message
    }
    package init(_ error: ProtocolError) {
        self.code = error.code
        self.message = error.message
    }
    package var description: String { "\(code.rawValue): \(message)" }
}
