import ControlProtocol
import Coordination
import Glibc
import Linux

// The two rules of docs/protocol.md, "Threat model", in one place: what a user may learn of an
// item (visibility) and which accesses it may delay or refuse. Everything that leaves the daemon
// for a user other than root (asks, notifications, status, the event log, store queries) is
// screened with them.

extension ControlPathResolver {
    /// Visibility: `peer` may learn of the item at `path` (its name, its events, its versions) iff it
    /// could find it in the backing folder with its own credentials: every directory from the root
    /// down to the item's directory is searchable, and the item's directory is readable (listable).
    /// POSIX mode bits with the peer's uid, gid and supplementary groups; root sees everything; the
    /// root of the mount is visible to all. The item itself need not exist (a deleted item is
    /// judged by the directory that held it); a path through a missing directory is not visible.
    func maySee(_ path: MountPath, for peer: Peer) -> Bool {
        if peer.credentials.uid == 0 || path.isRoot { return true }
        guard let item = try? resolve(path, for: peer, followFinal: false), let parent = item.parent else { return false }
        return peer.may(parent, .search) && peer.may(parent, .read)
    }

    /// Delay: `peer` may be asked before an access to `intent` (and so delay or refuse it) iff it
    /// may see the item and could make that access itself, by the rule the protocol applies to its
    /// own `coordinate` writes: write permission on the item (on its directory when it does not
    /// exist yet); for deleting, moving or replacing also write permission on the directory, and in a
    /// sticky directory only as the owner of the item or of the directory (of the directory alone
    /// when the item is not there: a presented document's deletion is coordinated once `save_window`
    /// passed, after its unlink, when its owner can no longer be looked at). A read counts as a
    /// write here: a user may hold up only accesses to items it could itself write.
    ///
    /// In a sticky directory (`/tmp`, a shared 1777 drop folder) another user's items are out of
    /// reach of a user who owns neither them nor the directory, and so is a name that is not there
    /// yet (created, it is its maker's): such a user is not asked before another user's create of a
    /// new name there, nor before a write of the sticky directory itself (its entries: a create,
    /// `mkdir`, a rename or removal in it), which it does not own; the writer's change to one of
    /// its own items is judged by that item's own intent. It is still told, where it may see.
    func mayMake(_ intent: FileAccessIntent, for peer: Peer) -> Bool {
        if peer.credentials.uid == 0 { return true }
        guard let path = MountPath.of(intent.path), maySee(path, for: peer) else { return false }
        let structural = !intent.writingOptions.isDisjoint(with: [.forDeleting, .forMoving, .forReplacing])
        guard let item = try? authorize(path, for: peer, write: true, structural: structural, followFinal: !structural) else { return false }
        let sticky = UInt32(S_ISVTX)
        if let parent = item.parent, parent.mode & sticky != 0 {
            if structural {
                guard let attributes = item.attributes else { return peer.credentials.uid == parent.uid }
                return peer.credentials.uid == attributes.uid || peer.credentials.uid == parent.uid
            }
            // A new name there (a create).
            if intent.isWriting, item.attributes == nil { return peer.credentials.uid == parent.uid }
        }
        if intent.isWriting, !structural, let attributes = item.attributes, attributes.isDirectory, attributes.mode & sticky != 0 {
            return peer.credentials.uid == attributes.uid
        }
        return true
    }
}

extension ControlPathResolver.Peer {
    /// The peer a presenter's credentials stand for.
    init(_ credentials: PresenterCredentials) {
        self.init(credentials: PeerCredentials(pid: 0, uid: credentials.uid, gid: credentials.gid), groups: credentials.groups)
    }

    /// The credentials remote presenters of this peer are screened with.
    var presenterCredentials: PresenterCredentials {
        PresenterCredentials(uid: credentials.uid, gid: credentials.gid, groups: groups)
    }
}

/// The coordinator's screen for presenters registered through the control socket.
struct BackingPermissions: PresenterPermissions {
    let resolver: ControlPathResolver

    func maySee(_ path: ItemPath, as credentials: PresenterCredentials) -> Bool {
        guard let mountPath = MountPath.of(path) else { return false }
        return resolver.maySee(mountPath, for: ControlPathResolver.Peer(credentials))
    }

    func mayMake(_ intent: FileAccessIntent, as credentials: PresenterCredentials) -> Bool {
        resolver.mayMake(intent, for: ControlPathResolver.Peer(credentials))
    }

    /// An access's user with its supplementary groups, from its process's `/proc/PID/status` while
    /// that process still is the user's (its file-system uid, the one FUSE reports); the uid and gid
    /// alone when it is gone or the pid now is another user's.
    func credentials(of origin: AccessOrigin) -> PresenterCredentials {
        var credentials = PresenterCredentials(uid: origin.uid, gid: origin.gid)
        guard let status = ProcessStatus.read(pid: origin.pid) else { return credentials }
        if status.uids?.filesystem == origin.uid { credentials.groups = status.groups ?? [] }
        return credentials
    }
}
