import Glibc
import NameBytes

/// Whether a state folder found by its name (`BACKING/.coordfs`, down to the folder of a node or
/// of the control socket) is the mount's: every folder from `.coordfs` down to `folder` a folder,
/// not a link, of `owner`'s (the user whose daemon serves the mount: `MountInfo.Entry.fuseOwner`)
/// that no other user may write. Where others may write the backing folder and it is not sticky,
/// they can move the mount's `.coordfs` away and put one of their own in its place: the daemon
/// keeps using the folder it holds (`StateFolder.hold`), and a command must not take theirs for
/// it (talk to their socket, read their log). Returns why not, or nil when it is.
public func whyStateFolderIsNotTheMounts(backing: String, folder: String, owner: uid_t) -> String? {
    let root = (backing.hasSuffix("/") ? String(backing.dropLast()) : backing) + "/.coordfs"
    guard ExactName.same(folder, root) || folder.utf8.starts(with: (root + "/").utf8) else { return nil }
    var chain = [root]
    for component in folder.utf8.dropFirst(root.utf8.count).split(separator: UInt8(ascii: "/")) {
        chain.append(chain.last! + "/" + String(nameBytes: Array(component)))
    }
    for path in chain {
        var st = stat()
        guard path.withNameCString({ lstat($0, &st) }) == 0 else { return nil }  // not there: nothing to trust or distrust
        guard st.st_mode & S_IFMT == S_IFDIR else {
            return "'\(path)' is not a folder: it is not the mount's state folder (another user may have put it there)"
        }
        guard st.st_uid == owner else {
            return "'\(path)' belongs to uid \(st.st_uid), not to the mount's daemon (uid \(owner)): it is not the mount's state folder (another user may have moved the mount's away and put this one there)"
        }
        guard st.st_mode & 0o022 == 0 else {
            return "'\(path)' may be written by other users (mode \(String(st.st_mode & 0o7777, radix: 8))): it is not the mount's state folder"
        }
    }
    return nil
}
