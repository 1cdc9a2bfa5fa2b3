import NameBytes
import Glibc
import Linux

/// Finds a mount's control socket from the mount path alone.
///
/// The default rule: read `/proc/self/mountinfo`, take the mount whose mount point contains the
/// path (the longest match) and whose file system type is `fuse.coordfs`; its mount source is the
/// backing folder, and the socket is `<backing>/.coordfs/control.sock`. The rule is pluggable
/// (`socketPathForMount`) for daemons that keep the socket elsewhere (a runtime directory). A
/// backing folder renamed or moved while mounted is found where it is now (`BackingWhereabouts`;
/// the mount table keeps the old path), or the locator says this user cannot find it.
public struct ControlSocketLocator: Sendable {
    /// One line of mountinfo.
    public struct Mount: Sendable, Hashable {
        /// Where it is mounted (escapes like `\040` decoded).
        public var mountPoint: String
        /// The file system type (`fuse.coordfs`).
        public var fileSystemType: String
        /// The mount source; for coordfs the backing folder.
        public var source: String
        /// The user whose daemon serves the mount (FUSE's `user_id=`), when known.
        public var owner: UInt32?
        /// The file system's device, mountinfo's `major:minor`, when known.
        public var device: String?
        public init(mountPoint: String, fileSystemType: String, source: String, owner: UInt32? = nil, device: String? = nil) {
            self.mountPoint = mountPoint
            self.fileSystemType = fileSystemType
            self.source = source
            self.owner = owner
            self.device = device
        }
    }

    /// A located control socket.
    public struct Location: Sendable, Hashable {
        /// The mount; its `source` is where the backing folder is now (`backingMovedFrom`).
        public var mount: Mount
        public var socketPath: String
        /// The queried path relative to the mount point.
        public var relativePath: MountPath
        /// The mount table's path of a backing folder renamed or moved while mounted, found at
        /// `mount.source` (`BackingWhereabouts`); nil when it is where the table says.
        public var backingMovedFrom: String? = nil
    }

    /// Which file system types count as coordfs mounts.
    public var fileSystemTypes: Set<String>
    /// Where mount information comes from.
    public var mountInfoPath: String
    /// Maps a mount to its socket path.
    public var socketPathForMount: @Sendable (Mount) -> String

    /// The default rule: the socket lives in the backing folder's state directory; for a node of
    /// a cluster, in that node's (`BACKING/.coordfs/nodes/NODE/control.sock`, the node whose mount
    /// record names this mount point: `NodeMountRecord`).
    public static func defaultSocketPath(for mount: Mount) -> String {
        let single = defaultSocketPath(backingFolder: mount.source)
        // Whether a one-host daemon runs here: by its pid file's pid and start (a killed daemon leaves
        // its file, and its pid may be another process's by now).
        let singleRuns = DaemonPIDFile.read(String(single.dropLast("control.sock".count)) + "daemon.pid")?.isRunning == true
        if let node = NodeMountRecord.nodeStateFolder(backing: mount.source, mountpoint: mount.mountPoint, deadDaemonsCount: !singleRuns) {
            return node + "/control.sock"
        }
        return single
    }

    /// `<backing>/.coordfs/control.sock`: what the daemon binds, what clients find.
    public static func defaultSocketPath(backingFolder: String) -> String {
        var base = backingFolder
        while base.count > 1 && base.hasSuffix("/") { base.removeLast() }
        return (base == "/" ? "" : base) + "/.coordfs/control.sock"
    }

    public init(
        fileSystemTypes: Set<String> = ["fuse.coordfs"], mountInfoPath: String = "/proc/self/mountinfo",
        socketPathForMount: @escaping @Sendable (Mount) -> String = ControlSocketLocator.defaultSocketPath(for:)
    ) {
        self.fileSystemTypes = fileSystemTypes
        self.mountInfoPath = mountInfoPath
        self.socketPathForMount = socketPathForMount
    }

    /// Locates the socket of the coordfs mount containing `path` (absolute, or relative to the
    /// working directory; symbolic links in its existing part are resolved).
    /// - Throws: `notFound` if no coordfs mount contains the path.
    public func locate(_ path: String) throws(ProtocolError) -> Location {
        let absolute = Self.resolve(path)
        let text = MountInfo.text(mountInfoPath) ?? ""
        let mounts = Self.parseMountInfo(text).filter { fileSystemTypes.contains($0.fileSystemType) }
        var best: (Mount, String)?
        for mount in mounts {
            guard let rest = Self.relative(absolute, to: mount.mountPoint) else { continue }
            if best == nil || mount.mountPoint.count >= best!.0.mountPoint.count { best = (mount, rest) }
        }
        guard let (found, rest) = best else {
            throw ProtocolError(.notFound, "\(absolute) is not inside a coordfs mount (no \(fileSystemTypes.sorted().joined(separator: "/")) mount contains it)")
        }
        let relativePath = rest.isEmpty ? MountPath.root : try MountPath(validating: rest)
        // A backing folder renamed or moved while mounted: its daemon is where the folder is now.
        var mount = found, movedFrom: String?
        switch BackingWhereabouts.of(mountpoint: mount.mountPoint, source: mount.source, owner: mount.owner, device: mount.device) {
        case .inPlace: break
        case .moved(let to): (movedFrom, mount.source) = (mount.source, to)
        case .movedOutOfSight:
            throw ProtocolError(.notFound, BackingWhereabouts.outOfSightMessage(mountpoint: mount.mountPoint, source: mount.source))
        }
        let socketPath = socketPathForMount(mount)
        // A state folder another user put where the mount's was: its socket is not the daemon's.
        if let owner = mount.owner, let slash = socketPath.utf8.lastIndex(of: UInt8(ascii: "/")),
           let why = whyStateFolderIsNotTheMounts(backing: mount.source, folder: String(Substring(socketPath.utf8[..<slash])), owner: owner) {
            throw ProtocolError(.notFound, "the coordfs mount at \(mount.mountPoint): \(why)")
        }
        return Location(mount: mount, socketPath: socketPath, relativePath: relativePath, backingMovedFrom: movedFrom)
    }

    /// Parses `/proc/self/mountinfo` text (see proc(5)) with `Linux.MountInfo`, the one
    /// mountinfo reader.
    public static func parseMountInfo(_ text: String) -> [Mount] {
        MountInfo.parse(text).map {
            Mount(mountPoint: $0.mountPoint, fileSystemType: $0.fileSystemType, source: $0.source, owner: $0.fuseOwner,
                  device: $0.device.isEmpty ? nil : $0.device)
        }
    }

    /// `path` relative to `mountPoint` ("" for the mount point itself), or nil if outside.
    static func relative(_ path: String, to mountPoint: String) -> String? {
        if mountPoint == "/" { return String(path.dropFirst()) }
        if ExactName.same(path, mountPoint) { return "" }
        guard path.utf8.starts(with: (mountPoint + "/").utf8) else { return nil }
        return String(Substring(path.utf8.dropFirst(mountPoint.utf8.count + 1)))
    }

    /// Absolute, with `.`/`..` folded and symbolic links resolved in the longest existing prefix
    /// (the rest may not exist yet). A symbolic link in the last component is kept: the daemon
    /// follows it or not (a read without `resolvesSymbolicLink` coordinates the link itself).
    static func resolve(_ path: String) -> String {
        var absolute = path
        if absolute.utf8.first != UInt8(ascii: "/") {
            var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
            if getcwd(&buffer, buffer.count) != nil {
                absolute = String(nameBytes: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }) + "/" + path
            }
        }
        // Names are bytes (`LosslessName`): split at the byte '/', resolve with the name's bytes.
        var components: [Substring] = []
        for component in absolute.utf8.split(separator: UInt8(ascii: "/")).map(Substring.init) {
            if component.utf8.elementsEqual(".".utf8) { continue }
            if component.utf8.elementsEqual("..".utf8) { _ = components.popLast(); continue }
            components.append(component)
        }
        // Resolve the longest existing prefix with realpath; keep the remainder as written.
        var split = components.count
        var info = stat()
        if split > 0, ("/" + components.joined(separator: "/")).withNameCString({ lstat($0, &info) }) == 0,
           info.st_mode & S_IFMT == S_IFLNK {
            split -= 1
        }
        while split >= 0 {
            let prefix = "/" + components[0..<split].joined(separator: "/")
            if let real = prefix.withNameCString({ realpath($0, nil) }) {
                defer { free(real) }
                let resolved = String(nameCString: real)
                let rest = components[split...].joined(separator: "/")
                if rest.isEmpty { return resolved }
                return resolved == "/" ? "/" + rest : resolved + "/" + rest
            }
            split -= 1
        }
        return "/" + components.joined(separator: "/")
    }
}
