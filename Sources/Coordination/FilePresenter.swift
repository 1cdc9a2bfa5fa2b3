/// Run by the coordinator after an access, to give the item back to a presenter that relinquished it.
public typealias Reacquirer = @Sendable () async -> Void

/// An object that presents a file or directory and takes part in coordinated access to it
/// (Apple's `NSFilePresenter`, with async methods instead of completion blocks).
///
/// Every method has a default that does nothing, so a presenter implements only what it needs.
/// Messages to one presenter are delivered one at a time, in order (like Apple's
/// `presentedItemOperationQueue`). Presenters need not live in this process: an adapter that
/// forwards each call over a socket is a presenter like any other.
///
/// Order around one access, per Apple's header: relinquish, then save or accommodate deletion, then
/// the access, then the "did" messages, then the reacquirer.
public protocol FilePresenter: AnyObject, Sendable {
    /// The item presented. Read once, at registration; afterwards the coordinator tracks moves
    /// itself and tells the presenter through ``presentedItemDidMove(to:)``. Actors implement it
    /// as `nonisolated`.
    var presentedItemPath: ItemPath? { get }

    /// Someone is about to read the item (or an item inside it). Return a reacquirer to be run
    /// after the read.
    func relinquishPresentedItem(toReader reader: AccessOrigin) async -> Reacquirer?
    /// Someone is about to write the item (or move/delete what contains it). Return a reacquirer
    /// to be run after the write.
    func relinquishPresentedItem(toWriter writer: AccessOrigin) async -> Reacquirer?
    /// Write unsaved changes so that a reader sees what the user sees. Throwing fails the access.
    func savePresentedItemChanges() async throws
    /// The item is about to be deleted or replaced. Throwing fails the access.
    func accommodatePresentedItemDeletion() async throws
    /// The item's contents or attributes were written.
    func presentedItemDidChange() async
    /// The item, or a directory containing it, moved; the coordinator already tracks `newPath`.
    func presentedItemDidMove(to newPath: ItemPath) async
    /// An item appeared inside the presented directory.
    func presentedSubitemDidAppear(at path: ItemPath) async
    /// An item inside the presented directory changed.
    func presentedSubitemDidChange(at path: ItemPath) async
    /// An item inside the presented directory was deleted (default: `presentedSubitemDidChange(at:)`,
    /// which is how Foundation tells it).
    func presentedSubitemDidDelete(at path: ItemPath) async
    /// The item, or a directory containing it, was deleted (after `accommodatePresentedItemDeletion()`
    /// when the deleter asked; a deletion it did not ask about is also told as
    /// `presentedItemDidChange()`). Default: nothing, as Foundation has no such message.
    func presentedItemDidDelete() async
    /// An item inside the presented directory moved.
    func presentedSubitem(at oldPath: ItemPath, didMoveTo newPath: ItemPath) async
    /// An item inside the presented directory is about to be deleted. Throwing fails the access.
    func accommodatePresentedSubitemDeletion(at path: ItemPath) async throws
    /// Whether the presenter takes part in `ask` (default: every ask). An ask it does not want is
    /// neither sent nor waited for nor recorded, as Apple skips a presenter that does not
    /// implement the method: a notification-only presenter costs an access nothing before it.
    func wantsAsk(_ ask: PresenterAsk) -> Bool
}

extension FilePresenter {
    public func relinquishPresentedItem(toReader reader: AccessOrigin) async -> Reacquirer? { nil }
    public func relinquishPresentedItem(toWriter writer: AccessOrigin) async -> Reacquirer? { nil }
    public func savePresentedItemChanges() async throws {}
    public func accommodatePresentedItemDeletion() async throws {}
    public func presentedItemDidChange() async {}
    public func presentedItemDidMove(to newPath: ItemPath) async {}
    public func presentedSubitemDidAppear(at path: ItemPath) async {}
    public func presentedSubitemDidChange(at path: ItemPath) async {}
    public func presentedSubitemDidDelete(at path: ItemPath) async { await presentedSubitemDidChange(at: path) }
    public func presentedItemDidDelete() async {}
    public func presentedSubitem(at oldPath: ItemPath, didMoveTo newPath: ItemPath) async {}
    public func accommodatePresentedSubitemDeletion(at path: ItemPath) async throws {}
    public func wantsAsk(_ ask: PresenterAsk) -> Bool { true }
}

/// Told around each presenter registration, so that the holder of an access granted before it (an
/// open file of the mount, held for as long as its process keeps it) can later tell whether it
/// changed the item after the presenter registered (``CoordinatedAccess/tellPresentersRegisteredSinceGrant(except:)``).
/// Both calls run without the coordinator's lock, on the registering thread; they must not block
/// on presenters or accesses.
public protocol PresenterRegistrationWatcher: AnyObject, Sendable {
    /// Before the presenter at `path` is registered; what it returns comes back in ``registered(_:at:before:)``.
    func willRegister(at path: ItemPath) -> (any Sendable)?
    /// After it was registered as `id` (not called when the registration failed).
    func registered(_ id: PresenterID, at path: ItemPath, before: (any Sendable)?)
    /// Presented items at `paths` may name another file now: a presenter there went away, or a
    /// change, deletion, appearance or move there is being told. Called with the coordinator's
    /// lock held: it must only take note (no system call, no call into the coordinator).
    func presentedItemsMayHaveChanged(_ paths: [ItemPath])
}

extension PresenterRegistrationWatcher {
    public func presentedItemsMayHaveChanged(_ paths: [ItemPath]) {}
}
