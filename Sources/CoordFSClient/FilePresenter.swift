import ControlProtocol

/// Run after an access to give the item back to a presenter that relinquished it.
public typealias Reacquirer = @Sendable () async -> Void

/// An object in this process that presents a file or directory inside a coordfs mount and takes
/// part in coordinated access to it from any process (Apple's `NSFilePresenter`, with async
/// methods instead of completion blocks, and paths instead of URLs, as in the `Coordination`
/// module).
///
/// Every method has a default that does nothing, so a presenter implements only what it needs.
/// Calls to one presenter arrive one at a time, in order. Register it with
/// `FileCoordinator.addFilePresenter(_:)`.
public protocol FilePresenter: AnyObject, Sendable {
    /// The presented item's absolute path (inside a coordfs mount). Read once, at registration;
    /// afterwards moves arrive through `presentedItemDidMove(to:)`.
    var presentedItemPath: String? { get }
    /// Whether a file or a directory is presented (default: whatever is at the path now; a file
    /// if nothing is).
    var presentedItemKind: ItemKind { get }
    /// The asks to receive (default: all). Leaving one out spares the daemon waiting for it.
    var presentedItemAsks: Set<AskKind> { get }

    /// Someone is about to read the item. Return a reacquirer to be run after the read.
    func relinquishPresentedItemToReader() async -> Reacquirer?
    /// Someone is about to write the item (or move or delete it). Return a reacquirer to be run
    /// after the write.
    func relinquishPresentedItemToWriter() async -> Reacquirer?
    /// Write unsaved changes so that a reader sees what the user sees. Throwing fails the ask.
    func savePresentedItemChanges() async throws
    /// The item is about to be deleted or replaced. Throwing fails the ask.
    func accommodatePresentedItemDeletion() async throws
    /// An item inside the presented directory is about to be deleted. Throwing fails the ask.
    func accommodatePresentedSubitemDeletion(at path: String) async throws
    /// The item's contents or attributes were written by someone else.
    func presentedItemDidChange() async
    /// The item moved; `newPath` is absolute.
    func presentedItemDidMove(to newPath: String) async
    /// The item was deleted.
    func presentedItemDidDelete() async
    /// An item appeared inside the presented directory.
    func presentedSubitemDidAppear(at path: String) async
    /// An item inside the presented directory changed.
    func presentedSubitemDidChange(at path: String) async
    /// An item inside the presented directory moved.
    func presentedSubitem(at oldPath: String, didMoveTo newPath: String) async
    /// An item inside the presented directory was deleted.
    func presentedSubitemDidDelete(at path: String) async
    /// The document changed or was deleted underneath the presenter (someone else wrote,
    /// replaced or deleted it), once per change however it was made, with what the mount's
    /// document store did about it: `.reload` (no unsaved changes: load the file again), `.close`
    /// (deleted, nothing unsaved: close the document) or `.conflict(id)` (the presenter has unsaved
    /// changes: resolve it with `resolve(_:with:mine:)`), or `.failed(message:)` (the store could
    /// not record the change, a full disk for one: nothing was decided, look at the file yourself).
    /// Like Nutrient's "underlying file changed".
    func presentedItemDidChangeUnderneath(_ change: UnderlyingFileChange) async
    /// Foundation's `presentedItemDidGainConflictVersion(_:)`: a conflict opened for this
    /// presenter (right after the `presentedItemDidChangeUnderneath` that names it).
    func presentedItemDidGainConflictVersion(_ version: FileVersion) async
    /// Foundation's `presentedItemDidResolveConflictVersion(_:)`: one of this presenter's
    /// conflicts was resolved, by it or by someone else (`coordfs resolve`, root); `how` says how.
    func presentedItemDidResolveConflictVersion(_ version: FileVersion, how: Resolution) async
    /// Any other event: events newer than this library.
    func presentedItemDidReceive(_ event: PresenterEvent) async
    /// The presenter could not be registered again after the daemon restarted (its item may be
    /// gone); it receives nothing more until added again.
    func presentedItemRegistrationLost(_ error: CoordFSClientError) async
}

extension FilePresenter {
    public var presentedItemKind: ItemKind {
        guard let path = presentedItemPath else { return .file }
        return LocalFileSystem.isDirectory(path) ? .directory : .file
    }
    public var presentedItemAsks: Set<AskKind> { Set(AskKind.allCases) }
    public func relinquishPresentedItemToReader() async -> Reacquirer? { nil }
    public func relinquishPresentedItemToWriter() async -> Reacquirer? { nil }
    public func savePresentedItemChanges() async throws {}
    public func accommodatePresentedItemDeletion() async throws {}
    public func accommodatePresentedSubitemDeletion(at path: String) async throws {}
    public func presentedItemDidChange() async {}
    public func presentedItemDidMove(to newPath: String) async {}
    public func presentedItemDidDelete() async {}
    public func presentedSubitemDidAppear(at path: String) async {}
    public func presentedSubitemDidChange(at path: String) async {}
    public func presentedSubitem(at oldPath: String, didMoveTo newPath: String) async {}
    public func presentedSubitemDidDelete(at path: String) async {}
    public func presentedItemDidChangeUnderneath(_ change: UnderlyingFileChange) async {}
    public func presentedItemDidGainConflictVersion(_ version: FileVersion) async {}
    public func presentedItemDidResolveConflictVersion(_ version: FileVersion, how: Resolution) async {}
    public func presentedItemDidReceive(_ event: PresenterEvent) async {}
    public func presentedItemRegistrationLost(_ error: CoordFSClientError) async {}
}
