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
    /// Foundation's `presentedItemDidGainConflictVersion(_:)`: a conflict opened for this presenter.
    case didGainConflict(ConflictID)
    /// Foundation's `presentedItemDidResolveConflictVersion(_:)`: one of this presenter's
    /// conflicts was resolved, by it or by someone else (`coordfs resolve`, root), and how.
    case didResolveConflict(ConflictID, resolution: Resolution)
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
        case .didGainConflict: return "didGainConflict"
        case .didResolveConflict: return "didResolveConflict"
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
