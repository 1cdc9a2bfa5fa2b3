import Coordination
import DocumentStore
import Glibc

/// The store's work for ``LostUpdates`` (docs/document-store.md, "Lost updates").
extension StoreService {
    /// The store's name for a saving process: `process:PID:START:uid:UID` (START: what tells it from
    /// another process with its pid, see ``ProcessKey``). `coordfs conflicts` shows it.
    /// `start`: the saver's as it was known while it lived (its save lands at the handle's RELEASE,
    /// which the kernel sends without waiting, so the process may be gone by then); nil: looked up now.
    static func saverName(_ origin: AccessOrigin, start known: UInt64? = nil) -> StorePresenterID {
        let start = (known ?? processStart(origin.pid)).map(String.init) ?? "?"
        return StorePresenterID("process:\(origin.pid):\(start):uid:\(origin.uid)")
    }

    /// The uid in a saver's name (nil for a presenter's name).
    static func saverUID(_ name: StorePresenterID) -> UInt32? {
        let parts = name.rawValue.split(separator: ":")
        guard parts.count == 5, parts[0] == "process", parts[3] == "uid" else { return nil }
        return UInt32(parts[4])
    }

    /// Keeps the file at `path` for its readers (theirs before a late save, or a live reader's
    /// base), held for `holders`; a failure is reported as the store's other failures are, never
    /// fails the operation. True when a version is kept (and held).
    @discardableResult
    func keepForReaders(_ path: ItemPath, reason: VersionReason, holders: [String] = [], users: [String: UInt32] = [:], by origin: AccessOrigin) -> Bool {
        do {
            guard let snapshot = try documentStore.keepForReaders(path.string, reason: reason, holders: holders, users: users) else { return false }
            recorder?.snapshotTaken(snapshot, actor: (origin.pid, origin.uid, origin.executable))
            return true
        } catch DocumentStoreError.notARegularFile {
        } catch {
            report("keepVersion \(path)", error)
            recorder?.storeFailed(path: path.string, reason: "keepVersion", error: error)
        }
        return false
    }

    /// A late save landed: the conflict (base, theirs, mine) is recorded and logged as `lostUpdate`.
    func recordLostUpdate(_ path: ItemPath, by origin: AccessOrigin, saverStart: UInt64? = nil, read: FileIdentity, theirs: FileIdentity) {
        do {
            // The saver's user owns it (may list and resolve it, also once the saver exited).
            let conflict = try documentStore.recordLostUpdate(path.string, saver: Self.saverName(origin, start: saverStart), owner: origin.uid,
                                                              read: read, theirs: theirs)
            recorder?.lostUpdate(path: path.string, conflict: conflict, saver: (origin.pid, origin.uid, origin.executable))
        } catch {
            report("noteChange \(path)", error)
            recorder?.storeFailed(path: path.string, reason: "noteChange", error: error)
        }
    }

    /// A late save refused (`lost_updates=refuse`): logged, nothing else changes.
    func recordRefusedLostUpdate(_ path: ItemPath, by origin: AccessOrigin, errno code: Int32) {
        recorder?.lostUpdate(path: path.string, conflict: nil, errno: code, saver: (origin.pid, origin.uid, origin.executable))
    }
}
