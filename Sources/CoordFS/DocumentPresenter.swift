import Coordination
import DocumentStore

/// What the store did, or asks the presenter to do, after its document changed underneath it.
public enum DocumentAction: Sendable, Hashable {
    /// No unsaved changes: the store already took the new file as the presenter's base; reload it.
    case reload
    /// Deleted and nothing unsaved: the store dropped the presenter's interest; close the document.
    case close
    /// Unsaved changes (or a default action configured to ask): resolve this conflict with
    /// `StoreService.resolve(_:with:mine:)` (close, save, reload, keep both, merge).
    case conflict(ConflictID)
    /// The store could not record the change (a full disk, an I/O error; the message says which):
    /// no reload or conflict was decided, and the version the presenter loaded may not be kept.
    /// The file changed underneath; look at it yourself. Recorded as `storeFailed` in the log.
    case failed(String)
}

/// The one "underlying file changed" event a presenter gets for one external change or deletion of
/// its document, however the change was made (in place, or an atomic save by rename).
public struct DocumentChangeEvent: Sendable, Hashable, CustomStringConvertible {
    /// The coordinator's id of the presenter this event is for (nil when the presenter is only
    /// known to the store, for example one registered before a restart).
    public var presenter: PresenterID?
    /// The store's name of the presenter.
    public var storePresenter: StorePresenterID
    /// The document's stable id.
    public var document: DocumentID
    /// The document's path in the mount.
    public var path: ItemPath
    /// `.change` or `.deletion`.
    public var kind: ChangeKind
    /// The file before the change (device, inode, size, mtime).
    public var before: FileIdentity?
    /// The file after it (nil for a deletion).
    public var after: FileIdentity?
    /// What the presenter should do.
    public var action: DocumentAction
    /// The change was made while no daemon watched the document, after a gone presenter of the same
    /// user had loaded it, and is told to this presenter as it registers again (docs/document-store.md,
    /// "Presenters"). Over the control socket it is followed by `didChange` (`didDelete`), as the
    /// coordinator follows a change it sees.
    public var whileAway = false

    public var description: String {
        let what: String
        switch action {
        case .reload: what = "reload"
        case .close: what = "close"
        case .conflict(let id): what = "\(id)"
        case .failed(let message): what = "failed: \(message)"
        }
        return "\(kind.rawValue) \(path) (\(document)) -> \(what)"
    }
}

/// A presenter that also hears from the document store: one ``presentedDocumentDidChangeUnderneath(_:)``
/// per external change or deletion of its document, with what to do about it. Its ordinary
/// ``FilePresenter`` messages (relinquish, did change, ...) still arrive from the coordinator.
///
/// Register it with `Daemon.addDocumentPresenter(_:)`, tell the store about unsaved changes with
/// `StoreService.setUnsavedChanges(_:_:)`, resolve conflicts with `StoreService.resolve(_:with:mine:)`.
/// Events to one presenter arrive one at a time, in order.
public protocol DocumentPresenter: FilePresenter {
    /// The document changed or was deleted by someone else.
    func presentedDocumentDidChangeUnderneath(_ event: DocumentChangeEvent) async
}
