import ControlProtocol
import Synchronization
import FoundationEssentials

/// Turns the asks and notifications a `ControlSession` delivers into `FilePresenter` calls, with
/// absolute paths, and keeps reacquirers until the daemon's `reacquire`.
final class PresenterAdapter: PresenterEndpoint {
    let presenter: any FilePresenter
    let mount: CoordFSMount
    private let reacquirers = Mutex<[Reacquirer]>([])
    /// The presented item's absolute path, following the moves it is told.
    private let path: Mutex<String>

    init(presenter: any FilePresenter, mount: CoordFSMount) {
        self.presenter = presenter
        self.mount = mount
        path = Mutex(presenter.presentedItemPath ?? mount.mountPoint)
    }

    func perform(_ ask: Ask) async -> ErrorBody? {
        do {
            switch ask.kind {
            case .relinquishToReader:
                if let reacquirer = await presenter.relinquishPresentedItemToReader() { reacquirers.withLock { $0.append(reacquirer) } }
            case .relinquishToWriter:
                if let reacquirer = await presenter.relinquishPresentedItemToWriter() { reacquirers.withLock { $0.append(reacquirer) } }
            case .reacquire:
                let pending = reacquirers.withLock { list -> [Reacquirer] in
                    defer { list = [] }
                    return list
                }
                for reacquirer in pending { await reacquirer() }
            case .save:
                try await presenter.savePresentedItemChanges()
            case .accommodateDeletion:
                try await presenter.accommodatePresentedItemDeletion()
            case .accommodateSubitemDeletion:
                try await presenter.accommodatePresentedSubitemDeletion(at: mount.absolutePath(ask.subitem ?? ask.path))
            }
            return nil
        } catch {
            return ErrorBody(code: .failed, message: String(describing: error))
        }
    }

    func receive(_ event: PresenterEvent) async {
        switch event {
        case .didChange: await presenter.presentedItemDidChange()
        case .didMove(let newPath):
            path.withLock { $0 = mount.absolutePath(newPath) }
            await presenter.presentedItemDidMove(to: mount.absolutePath(newPath))
        case .didDelete: await presenter.presentedItemDidDelete()
        case .subitemDidAppear(let path): await presenter.presentedSubitemDidAppear(at: mount.absolutePath(path))
        case .subitemDidChange(let path): await presenter.presentedSubitemDidChange(at: mount.absolutePath(path))
        case .subitemDidMove(let from, let to):
            await presenter.presentedSubitem(at: mount.absolutePath(from), didMoveTo: mount.absolutePath(to))
        case .subitemDidDelete(let path): await presenter.presentedSubitemDidDelete(at: mount.absolutePath(path))
        case .documentChanged(let change):
            await presenter.presentedItemDidChangeUnderneath(UnderlyingFileChange(change, path: mount.absolutePath(change.path)))
        case .didGainConflict(let conflict):
            await presenter.presentedItemDidGainConflictVersion(conflictVersion(conflict, resolved: false))
        case .didResolveConflict(let conflict, let resolution):
            await presenter.presentedItemDidResolveConflictVersion(conflictVersion(conflict, resolved: true), how: resolution)
        case .unknown: await presenter.presentedItemDidReceive(event)
        }
    }

    private func conflictVersion(_ conflict: ConflictID, resolved: Bool) -> FileVersion {
        FileVersion(persistentIdentifier: .conflict(conflict), path: currentPath, createdMs: UInt64(Date().timeIntervalSince1970 * 1000),
                    isConflict: true, isResolved: resolved)
    }

    /// The presented item's path now (after the moves it was told).
    private var currentPath: String { path.withLock { $0 } }

    func registrationLost(_ error: ControlTransportError) async {
        await presenter.presentedItemRegistrationLost(CoordFSClientError(error))
    }
}
