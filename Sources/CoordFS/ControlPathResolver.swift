import ControlProtocol
import Glibc
import LinuxGNU
import NameBytes

/// Where a protocol path really is below the backing folder, and what the peer may do with it.
///
/// Paths from the control socket are already normalised (`MountPath` refuses `..`, absolute
/// paths and NUL). What spelling cannot show is a symbolic link: this walks the path one component
/// at a time with `fstatat(AT_SYMLINK_NOFOLLOW)` and `openat(O_PATH | O_NOFOLLOW)` relative to the
/// backing folder's descriptor, follows links itself, and refuses any link whose target leaves
/// the mount (an absolute target outside the mountpoint and the backing folder, or too many `..`).
/// The state folder `.coordfs` is not part of the mount and is refused as not found.
///
/// Permissions are judged as the kernel judges them, with the peer's uid, gid and supplementary
/// groups against the backing items: an item's POSIX access ACL when it has one (`AccessACL`),
/// else its mode bits (root may do anything; the sticky bit is not consulted here):
/// every directory walked must be searchable; a read needs read permission on the item (or on its
/// parent when it does not exist yet); a write needs write permission on the item, and on its
/// parent directory when the item does not exist yet or is deleted, moved or replaced.
struct ControlPathResolver: Sendable {
    /// The backing folder, absolute (as mounted).
    let backing: String
    /// The mountpoint, absolute.
    let mountpoint: String
    /// The path this process opens the backing folder by: through a descriptor opened when the
    /// resolver was made (`/proc/self/fd/N`, held as long as a copy of the resolver lives), so a
    /// backing folder renamed or moved while mounted is still the one served (its old path may be
    /// gone, or name another folder). Never shown or handed to another process.
    let root: String
    /// The descriptor `root` names, closed when the last copy of this resolver is gone (the daemon
    /// that made it, and its coordinator's `BackingPermissions`): not before, or its number could
    /// name another file; not later, or the backing folder stays in use after the daemon ended
    /// (a backing folder on another FUSE mount kept that mount's connection, its serving loop and
    /// its io_uring threads alive after its lazy unmount, for as long as the process lived).
    private let descriptor: OwnedDescriptor

    init(backing: String, mountpoint: String) {
        self.backing = backing
        self.mountpoint = mountpoint
        descriptor = OwnedDescriptor(backing.withNameCString { open($0, LinuxCalls.O_PATH | O_DIRECTORY | O_CLOEXEC) })
        root = descriptor.fd >= 0 ? "/proc/self/fd/\(descriptor.fd)" : backing
    }

    /// Symbolic links followed in one resolution before giving up (Linux's MAXSYMLINKS).
    static let maxLinks = 40

    /// What was found at a path.
    struct Item: Sendable {
        /// The path with every symbolic link resolved (the last component too, when followed).
        var path: MountPath
        /// The item's mode, owner and group; nil when nothing exists there yet.
        var attributes: Attributes?
        /// The containing directory's (nil for the root).
        var parent: Attributes?
    }

    struct Attributes: Sendable {
        var mode: UInt32
        var uid: UInt32
        var gid: UInt32
        /// The item's access ACL, nil when it has none (its mode bits decide).
        var acl: AccessACL?
        var isDirectory: Bool { mode & UInt32(S_IFMT) == UInt32(S_IFDIR) }
        init(_ st: stat, acl: AccessACL? = nil) {
            mode = UInt32(st.st_mode)
            uid = UInt32(st.st_uid)
            gid = UInt32(st.st_gid)
            // Symbolic links have no ACL (and are never checked).
            self.acl = UInt32(st.st_mode) & UInt32(S_IFMT) == UInt32(S_IFLNK) ? nil : acl
        }
        /// `name`'s attributes in the folder `directory`, its ACL read too.
        init(_ st: stat, in directory: Int32, _ name: String) {
            self.init(st, acl: UInt32(st.st_mode) & UInt32(S_IFMT) == UInt32(S_IFLNK) ? nil : AccessACL.read(in: directory, name))
        }
    }

    /// Who asks, as the daemon learned it from the socket.
    struct Peer: Sendable {
        var credentials: PeerCredentials
        var groups: [UInt32]

        func may(_ attributes: Attributes, _ access: Access) -> Bool {
            let c = credentials
            // The kernel consults an ACL only while the mode's group bits (its mask) are not all
            // clear (`acl_permission_check`): with a mask of ---, the mode bits decide.
            if c.uid != 0, let acl = attributes.acl, attributes.mode & 0o070 != 0 {
                let want: UInt16 = switch access { case .read: 4; case .write: 2; case .search: 1 }
                return acl.permits(uid: c.uid, gid: c.gid, groups: groups, ownerUID: attributes.uid, ownerGID: attributes.gid, want: want)
            }
            switch access {
            case .read: return c.mayAccess(mode: attributes.mode, ownerUID: attributes.uid, ownerGID: attributes.gid, write: false, groups: groups)
            case .write: return c.mayAccess(mode: attributes.mode, ownerUID: attributes.uid, ownerGID: attributes.gid, write: true, groups: groups)
            case .search:
                // Root searches every directory; others need an x bit, by the same owner/group/other rule.
                if c.uid == 0 { return true }
                let m = attributes.mode
                if c.uid == attributes.uid { return m & 0o100 != 0 }
                if c.gid == attributes.gid || groups.contains(attributes.gid) { return m & 0o010 != 0 }
                return m & 0o001 != 0
            }
        }
    }

    enum Access: Sendable { case read, write, search }

    /// Resolves `path` for `peer`. `followFinal` follows a symbolic link in the last component
    /// (presenting and plain reads and writes act on what a link points to; deleting, moving and
    /// replacing act on the link itself).
    /// - Throws: `notFound` for a missing directory on the way, a link out of the mount, a loop,
    ///   or the state folder; `permissionDenied` for a directory the peer may not search.
    func resolve(_ path: MountPath, for peer: Peer, followFinal: Bool) throws(ProtocolError) -> Item {
        let rootFD = open(root, LinuxCalls.O_PATH | O_DIRECTORY | O_CLOEXEC)
        guard rootFD >= 0 else { throw ProtocolError(.internalError, "cannot open the backing folder: \(Self.describe(errno))") }
        var fds: [Int32] = [rootFD]        // fds[i] is the directory holding names[i]
        var names: [String] = []
        defer { for fd in fds { close(fd) } }
        var pending = path.components.map(String.init)
        var links = 0
        var rootAttributes = stat()
        guard fstat(rootFD, &rootAttributes) == 0 else { throw ProtocolError(.internalError, "cannot stat the backing folder: \(Self.describe(errno))") }
        var dirAttributes: [Attributes] = [Attributes(rootAttributes, acl: AccessACL.read(path: root))]

        while !pending.isEmpty {
            let name = pending.removeFirst()
            if name == "." || name.isEmpty { continue }
            if name == ".." {
                guard !names.isEmpty else { throw Self.escape(path) }
                names.removeLast()
                close(fds.removeLast())
                dirAttributes.removeLast()
                continue
            }
            let last = pending.isEmpty
            guard peer.may(dirAttributes[dirAttributes.count - 1], .search) else {
                throw ProtocolError(.permissionDenied, "uid \(peer.credentials.uid) may not search \(Self.show(names))")
            }
            if names.isEmpty && name == StateFolder.name {
                throw ProtocolError(.notFound, "\(path) does not exist in the mount (.coordfs is the daemon's state folder)")
            }
            let directoryFD = fds[fds.count - 1]
            var st = stat()
            if name.withNameCString({ fstatat(directoryFD, $0, &st, AT_SYMLINK_NOFOLLOW) }) != 0 {
                let code = errno
                if code == ENOENT && last {
                    names.append(name)
                    return Item(path: try Self.mountPath(names), attributes: nil, parent: dirAttributes.last)
                }
                if code == ENOENT || code == ENOTDIR {
                    throw ProtocolError(.notFound, "\(path): \(Self.show(names + [name])) does not exist")
                }
                throw ProtocolError(.internalError, "\(path): cannot stat \(Self.show(names + [name])): \(Self.describe(code))")
            }
            let type = UInt32(st.st_mode) & UInt32(S_IFMT)
            if type == UInt32(S_IFLNK) && (!last || followFinal) {
                links += 1
                if links > Self.maxLinks { throw ProtocolError(.notFound, "\(path): too many levels of symbolic links") }
                let target = try readLink(directoryFD, name, path)
                var rest = Self.components(target)
                if target.utf8.first == UInt8(ascii: "/") {
                    guard let inside = insideMount(target) else {
                        throw ProtocolError(.notFound, "\(path): \(Self.show(names + [name])) is a symbolic link to \(target), outside the mount")
                    }
                    rest = inside
                    // Back to the root: an absolute target starts from there.
                    while fds.count > 1 { close(fds.removeLast()) }
                    names = []
                    dirAttributes = [dirAttributes[0]]
                }
                pending = rest + pending
                continue
            }
            if last {
                names.append(name)
                return Item(path: try Self.mountPath(names), attributes: Attributes(st, in: directoryFD, name), parent: dirAttributes.last)
            }
            guard type == UInt32(S_IFDIR) else {
                throw ProtocolError(.notFound, "\(path): \(Self.show(names + [name])) is not a directory")
            }
            let next = name.withNameCString { openat(directoryFD, $0, LinuxCalls.O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) }
            guard next >= 0 else {
                throw ProtocolError(.notFound, "\(path): cannot open \(Self.show(names + [name])): \(Self.describe(errno))")
            }
            fds.append(next)
            names.append(name)
            dirAttributes.append(Attributes(st, in: directoryFD, name))
        }
        // The root itself (or a path that resolved back to it).
        return Item(path: try Self.mountPath(names), attributes: dirAttributes.last, parent: names.isEmpty ? nil : dirAttributes[dirAttributes.count - 2])
    }

    /// Resolves and checks that `peer` may read (`write == false`) or write the item.
    /// `structural` marks deletes, moves and replacements, which also need the parent writable.
    func authorize(_ path: MountPath, for peer: Peer, write: Bool, structural: Bool = false, followFinal: Bool = true) throws(ProtocolError) -> Item {
        let item = try resolve(path, for: peer, followFinal: followFinal)
        let verb = write ? "write" : "read"
        func deny(_ what: String) -> ProtocolError {
            ProtocolError(.permissionDenied, "uid \(peer.credentials.uid) may not \(verb) \(what)")
        }
        if let attributes = item.attributes {
            guard peer.may(attributes, write ? .write : .read) else { throw deny(item.path.description) }
            if write && structural, let parent = item.parent, !peer.may(parent, .write) {
                throw deny("\(item.path.parent?.description ?? ".") (needed to delete, move or replace \(item.path))")
            }
        } else if let parent = item.parent {
            // Nothing there yet: reading needs the directory listable, writing needs it writable.
            guard peer.may(parent, write ? .write : .read) else { throw deny("\(item.path.parent?.description ?? ".") (\(item.path) does not exist yet)") }
        }
        return item
    }

    /// Mount-relative components of an absolute symbolic-link target, or nil when it is outside.
    private func insideMount(_ target: String) -> [String]? {
        for base in [mountpoint, backing] where !base.isEmpty {
            let prefix = base == "/" ? "/" : base + "/"
            if ExactName.same(target, base) { return [] }
            if target.utf8.starts(with: prefix.utf8) {
                return Self.components(String(Substring(target.utf8.dropFirst(prefix.utf8.count))))
            }
        }
        return nil
    }

    private func readLink(_ directoryFD: Int32, _ name: String, _ path: MountPath) throws(ProtocolError) -> String {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let n = name.withNameCString { readlinkat(directoryFD, $0, &buffer, buffer.count - 1) }
        guard n >= 0 else { throw ProtocolError(.notFound, "\(path): cannot read the link \(name): \(Self.describe(errno))") }
        return String(nameBytes: buffer[0..<n].map { UInt8(bitPattern: $0) })
    }

    /// The non-empty components of a link target, split at the byte `/`.
    private static func components(_ target: String) -> [String] {
        target.utf8.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: true).map { String(Substring($0)) }
    }

    private static func mountPath(_ names: [String]) throws(ProtocolError) -> MountPath {
        names.isEmpty ? .root : try MountPath(validating: names.joined(separator: "/"))
    }

    private static func escape(_ path: MountPath) -> ProtocolError {
        ProtocolError(.notFound, "\(path) leads out of the mount through a symbolic link")
    }

    private static func show(_ names: [String]) -> String { names.isEmpty ? "." : names.joined(separator: "/") }

    static func describe(_ code: Int32) -> String { String(cString: strerror(code)) }
}
