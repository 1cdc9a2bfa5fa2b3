import NameBytes
import Coordination
import Glibc

extension Daemon {
    /// Registers an in-process presenter with the coordinator and, for a regular file, with the
    /// document store (which keeps the version it has now as its base and sends it
    /// ``DocumentPresenter/presentedDocumentDidChangeUnderneath(_:)`` events). Returns the
    /// coordinator's id.
    ///
    /// - Throws: the coordinator's error (no path, already registered), or the store's (an invalid
    ///   path); nothing stays registered after an error.
    @discardableResult
    public func addDocumentPresenter(_ presenter: any DocumentPresenter) throws -> PresenterID {
        let id = try coordinator.addFilePresenter(presenter)
        guard let store, let path = coordinator.presentedPath(of: id), !path.isRoot else { return id }
        var st = stat()
        let isFile = (plan.state.io.backing + "/" + path.string).withNameCString({ lstat($0, &st) }) == 0 && (st.st_mode & S_IFMT) == S_IFREG
        guard isFile else { return id } // a folder, or nothing yet: no document to keep
        do {
            try store.register(id, path: path, presenter: presenter)
        } catch {
            coordinator.removeFilePresenter(id: id)
            throw error
        }
        return id
    }

    /// Unregisters a presenter from the coordinator and the store (its base is released to
    /// retention; its open conflicts stay until resolved).
    public func removeDocumentPresenter(_ presenter: any FilePresenter) {
        guard let id = coordinator.presenterID(of: presenter) else { return }
        coordinator.removeFilePresenter(id: id)
        store?.unregister(id)
    }
}
