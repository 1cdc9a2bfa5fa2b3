import Glibc
import Synchronization
import NameBytes
import LinuxGNU

/// A weak reference to a node (the directory a file was last looked up in), and the name it was
/// looked up by there (its bytes and a NUL; empty: not known).
struct WeakNode: Sendable {
    weak var node: BackingNode?
    var name: [UInt8] = [] {
        didSet { string = nil }
    }
    /// `name` as a String (without its NUL), made by the first `lookedUpName` that needs it: every
    /// open of the file asks for it, and the name changes far less often.
    var string: String?
    /// Until when (`Loopback.entryClock`, nanoseconds) the kernel surely still holds the entry and
    /// attributes last given for this name (`Loopback.kernelHoldsFreshEntry`); 0: not known.
    var freshUntil: UInt64 = 0
}

/// Paths beyond PATH_MAX. The kernel gives an item's path through `/proc/self/fd/N` only while it
/// fits a page (PATH_MAX, 4,096 bytes): deeper, readlink fails with ENAMETOOLONG. Then the path is
/// built from the tree itself, so coordination works at any depth (docs/semantics.md, "Deep paths"):
///
/// - a directory climbs `..` until an ancestor's path can be read (or the backing root is reached),
///   finding each step's name by its inode number in the directory above;
/// - another item is found, by inode number, in the directory it was last looked up in, whose path
///   is built the same way (and when it was moved from there outside the mount, in every directory
///   the kernel knows).
///
/// Names are bytes throughout; nothing here is a path string given to a system call.
extension Loopback {
    /// The item's path relative to the backing root, as bytes ("" for the root), or nil when the item
    /// is gone or outside the backing root.
    func pathBytes(of node: BackingNode) -> [UInt8]? {
        switch node.withDescriptor({ fd in readLinkRelative(fd) }) {
        case .success(.path(let bytes)): return bytes
        case .success(.gone):
            // The name the descriptor was opened by is gone, but the file still has one: an unnamed
            // file (O_TMPFILE) linked in, whose descriptor never had a name. Found as beyond PATH_MAX.
            guard !node.isDirectory, case .success(let st) = attributes(of: node), st.st_nlink > 0 else { return nil }
            return longPathBytes(of: node)
        case .failure: return nil
        case .success(.tooLong): return longPathBytes(of: node)
        }
    }

    /// What `/proc/self/fd/N` says of an item.
    enum ProcPath {
        case path([UInt8])
        case gone
        /// Longer than the kernel gives there (ENAMETOOLONG).
        case tooLong
    }

    /// The path of the item `fd` refers to, relative to the backing root. The backing root's own
    /// path is the one it had at mount time until an item's path is not under it: then it is read
    /// again from the root's descriptor (the backing folder renamed or moved while mounted), and
    /// kept.
    func readLinkRelative(_ fd: Int32) -> ProcPath {
        let max = Int(PATH_MAX)
        return withUnsafeTemporaryAllocation(of: CChar.self, capacity: max + 1) { buf -> ProcPath in
            let n = withProcPath(fd) { p in Glibc.readlink(p, buf.baseAddress!, max) }
            if n < 0 && errno == ENAMETOOLONG { return .tooLong }
            guard n > 0 else { return .gone }
            let bytes = UnsafeRawBufferPointer(start: buf.baseAddress, count: n)
            let root = rootPathBytes.withLock { $0 }
            if let found = Self.relative(bytes, to: root) { return found }
            guard let now = currentRootPath(), now != root else { return .gone }
            rootPathBytes.withLock { $0 = now }
            return Self.relative(bytes, to: now) ?? .gone
        }
    }

    /// `bytes` (a path read from /proc/self/fd) relative to the root at `root`; nil when not under it.
    private static func relative(_ bytes: UnsafeRawBufferPointer, to root: [UInt8]) -> ProcPath? {
        let n = bytes.count
        guard n > root.count, bytes[root.count] == 0x2F, bytes.starts(with: root) else {
            return bytes.elementsEqual(root) ? .path([]) : nil
        }
        if isDeleted(bytes) { return .gone }
        return .path(Array(bytes[(root.count + 1)...]))
    }

    /// Whether a path read from /proc/self/fd is of an item that was removed (the kernel's suffix).
    private static func isDeleted(_ bytes: UnsafeRawBufferPointer) -> Bool {
        let deleted = " (deleted)".utf8
        return bytes.count >= deleted.count && bytes[(bytes.count - deleted.count)...].elementsEqual(deleted)
    }

    /// Where the backing root is now, read from its descriptor; nil when it cannot be told.
    private func currentRootPath() -> [UInt8]? {
        let max = Int(PATH_MAX)
        let read = inodes.root.withDescriptor { fd in
            withUnsafeTemporaryAllocation(of: CChar.self, capacity: max + 1) { buf -> [UInt8]? in
                let n = withProcPath(fd) { p in Glibc.readlink(p, buf.baseAddress!, max) }
                guard n > 0, buf[0] == 0x2F else { return nil }
                let bytes = UnsafeRawBufferPointer(start: buf.baseAddress, count: n)
                return Self.isDeleted(bytes) ? nil : Array(bytes)
            }
        }
        return (try? read.get()) ?? nil
    }

    /// Remembers the directory a file, symlink or special file was looked up in (a directory has
    /// its `..`), and the name (nil: not known); `freshUntil`: until when the kernel keeps the entry
    /// and attributes just given for that name (0: none given).
    func noteLookup(of node: BackingNode, in parent: BackingNode, name: UnsafePointer<CChar>?, freshUntil: UInt64 = 0) {
        guard !node.isDirectory else { return }
        node.lookedUpIn.withLock { last in
            if last.node !== parent { last.node = parent }
            last.freshUntil = freshUntil
            guard let name else { last.name = []; return }
            let count = strlen(name) + 1
            // Unchanged (the usual case: the same file looked up again) costs no allocation.
            if last.name.count == count, last.name.withUnsafeBytes({ memcmp($0.baseAddress!, name, count) == 0 }) { return }
            last.name = Array(UnsafeRawBufferPointer(start: name, count: count))
        }
    }

    /// Where a non-directory was last looked up and by what name, while that name in that directory
    /// still is this item (checked now: a rename or removal since, through the mount or directly in
    /// the backing folder, fails the check). The item's path is then the directory's path and the
    /// name, without reading /proc/self/fd (a procfs walk: most of what an open cost).
    public func lookedUpName(of node: BackingNode) -> (directory: BackingNode, name: String)? {
        guard !node.isDirectory else { return nil }
        let (directory, name, string) = node.lookedUpIn.withLock { ($0.node, $0.name, $0.string) }
        guard let directory, name.count > 1 else { return nil }
        let same = directory.withDescriptor { dfd in
            name.withUnsafeBytes { raw -> Bool in
                var st = stat()
                return fstatat(dfd, raw.baseAddress!.assumingMemoryBound(to: CChar.self), &st, AT_SYMLINK_NOFOLLOW) == 0
                    && st.st_dev == node.key.dev && st.st_ino == node.key.ino
            }
        }
        guard case .success(true) = same else { return nil }
        if let string { return (directory, string) }
        let made = String(nameBytes: name.dropLast())
        node.lookedUpIn.withLock { last in
            if last.name == name { last.string = made } // still that name: kept for the next open
        }
        return (directory, made)
    }

    private func longPathBytes(of node: BackingNode) -> [UInt8]? {
        guard node.isDirectory else {
            let hint = node.lookedUpIn.withLock { $0.node }
            if let hint, let found = path(of: node, in: hint) { return found }
            // Moved away from there outside the mount (the kernel did not look it up again): every
            // directory the kernel knows is searched, so the item is found wherever it is known.
            for directory in inodes.directories where directory !== hint {
                if let found = path(of: node, in: directory) {
                    noteLookup(of: node, in: directory, name: nil)
                    return found
                }
            }
            return nil
        }
        return (try? node.withDescriptor({ climbPathBytes(fromDirectory: $0) }).get()) ?? nil
    }

    /// The path of the directory `fd` refers to, relative to the backing root, built by climbing `..`
    /// from it: every step's name is found in the directory above (nil when "/" is reached outside
    /// the backing root, or the directory is gone).
    private func climbPathBytes(fromDirectory fd: Int32) -> [UInt8]? {
        var child = openat(fd, ".", O_PATH | O_DIRECTORY | O_CLOEXEC)
        guard child >= 0 else { return nil }
        defer { Glibc.close(child) }
        var names: [[UInt8]] = []
        let root = inodes.root.key
        // Every step adds at least two bytes: a bound far past any path the kernel could resolve.
        for _ in 0..<(1 << 20) {
            var st = stat()
            guard fstatat(child, "", &st, AT_EMPTY_PATH) == 0 else { return nil }
            let key = InodeKey(dev: st.st_dev, ino: st.st_ino)
            if key == root { return Self.join([], names.reversed()) }
            if !names.isEmpty, case .path(let above) = readLinkRelative(child) { return Self.join(above, names.reversed()) }
            let parent = openat(child, "..", O_PATH | O_DIRECTORY | O_CLOEXEC)
            guard parent >= 0 else { return nil }
            var pst = stat()
            guard fstatat(parent, "", &pst, AT_EMPTY_PATH) == 0, pst.st_dev != st.st_dev || pst.st_ino != st.st_ino,
                  let name = Self.name(of: key, in: parent)
            else { Glibc.close(parent); return nil } // "/" reached outside the backing root, or gone
            names.append(name)
            Glibc.close(child)
            child = parent
        }
        return nil
    }

    /// The path, relative to the backing root, of the item a kernel file handle names: one fanotify
    /// reported and the kernel may never have looked up (the item a rename made beside the mount
    /// moved into a folder the backing watcher has no mark on, `BackingWatcher`). Nil when the
    /// mount does not show it there: gone, outside the backing root, the backing root itself or
    /// inside a hidden root name (the state folder); and when it cannot be opened by its handle (a
    /// daemon without CAP_DAC_READ_SEARCH, a file system whose handles do not open again: overlayfs
    /// without nfs_export). The path the kernel gives is checked, not trusted: from the backing
    /// root it must lead to that very item (a directory beyond PATH_MAX: built by climbing `..`
    /// from it). Bytes all the way: the answer is the path's lossless `String`.
    public func path(ofHandle handle: LinuxCalls.KernelFileHandle) -> String? {
        guard opensByHandle, let (_, mountFD) = inodes.handleToOpen(inodes.root) else { return nil }
        let fd = retryingEINTR { LinuxCalls.open(handle, mountFD: mountFD, flags: O_PATH | O_NOFOLLOW | O_CLOEXEC) }
        guard fd >= 0 else { return nil }
        defer { Glibc.close(fd) }
        var st = stat()
        guard fstatat(fd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) == 0 else { return nil }
        let bytes: [UInt8]
        switch readLinkRelative(fd) {
        case .path(let read):
            // Where the kernel says it is, if that name leads there from the root now.
            var there = stat()
            let same = inodes.root.withDescriptor { root in
                (read + [0]).withUnsafeBytes { raw in
                    fstatat(root, raw.baseAddress!.assumingMemoryBound(to: CChar.self), &there, AT_SYMLINK_NOFOLLOW) == 0
                }
            }
            guard !read.isEmpty, case .success(true) = same, there.st_dev == st.st_dev, there.st_ino == st.st_ino else { return nil }
            bytes = read
        case .tooLong:
            guard st.st_mode & S_IFMT == S_IFDIR, let built = climbPathBytes(fromDirectory: fd), !built.isEmpty else { return nil }
            bytes = built
        case .gone:
            return nil
        }
        let first = bytes.prefix { $0 != 0x2F }
        if hidden.contains(where: { $0.elementsEqual(first) }) { return nil }
        return String(nameBytes: bytes)
    }

    /// The path of `node` as an entry of `directory`, or nil when the directory does not hold it.
    private func path(of node: BackingNode, in directory: BackingNode) -> [UInt8]? {
        guard let name = (try? directory.withDescriptor({ fd in Self.name(of: node.key, in: fd) }).get()) ?? nil,
              let above = pathBytes(of: directory)
        else { return nil }
        return Self.join(above, [name])
    }

    /// `above` + "/" + each of `names` ("" and no leading slash for the root).
    private static func join(_ above: [UInt8], _ names: some Sequence<[UInt8]>) -> [UInt8] {
        var out = above
        for name in names {
            if !out.isEmpty { out.append(0x2F) }
            out += name
        }
        return out
    }

    /// The name under which the directory `directory` (an O_PATH descriptor) holds the item `key`.
    static func name(of key: InodeKey, in directory: Int32) -> [UInt8]? {
        let fd = openat(directory, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        guard let stream = fdopendir(fd) else { Glibc.close(fd); return nil }
        defer { Glibc.closedir(stream) }
        while let entry = Glibc.readdir(stream) {
            guard entry.pointee.d_ino == key.ino else { continue }
            let name = withUnsafeBytes(of: &entry.pointee.d_name) { raw in Array(raw.prefix(while: { $0 != 0 })) }
            if name == [0x2E] || name == [0x2E, 0x2E] { continue }
            // d_ino is the inode beneath a mount point, not the one mounted there: check by stat.
            var st = stat()
            let cName = name + [0]
            let same = cName.withUnsafeBytes { fstatat(directory, $0.baseAddress!.assumingMemoryBound(to: CChar.self), &st, AT_SYMLINK_NOFOLLOW) == 0 }
            if same && st.st_dev == key.dev && st.st_ino == key.ino { return name }
        }
        return nil
    }
}
