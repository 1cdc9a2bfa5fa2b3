import Glibc

/// What identifies one state of a file on the backing filesystem: the inode (device, inode
/// number) and its size and modification time, in nanoseconds.
///
/// The change time is deliberately left out: `link()`, which the store uses to keep an old inode,
/// updates it, and the store must still recognise the file afterwards. A write that keeps the size
/// and lands in the same kernel timestamp tick as the previous one is indistinguishable; every write
/// through the mount reaches the store first, so this only matters for edits made behind its back.
public struct FileIdentity: Hashable, Sendable, Codable, CustomStringConvertible {
    /// `st_dev`.
    public var device: UInt64
    /// `st_ino`.
    public var inode: UInt64
    /// `st_size`, in bytes.
    public var size: Int64
    /// `st_mtim`, in nanoseconds since the epoch.
    public var modificationTimeNanoseconds: Int64

    public init(device: UInt64, inode: UInt64, size: Int64, modificationTimeNanoseconds: Int64) {
        self.device = device
        self.inode = inode
        self.size = size
        self.modificationTimeNanoseconds = modificationTimeNanoseconds
    }

    init(_ st: stat) {
        self.init(
            device: UInt64(st.st_dev), inode: UInt64(st.st_ino), size: Int64(st.st_size),
            modificationTimeNanoseconds: Int64(st.st_mtim.tv_sec) * 1_000_000_000 + Int64(st.st_mtim.tv_nsec))
    }

    /// Reads the identity of the regular file at an absolute path without following a final
    /// symbolic link; `nil` when nothing is there.
    public static func of(absolutePath path: String) throws -> FileIdentity? {
        guard let st = try FileSystem.lstatIfPresent(path) else { return nil }
        guard (st.st_mode & S_IFMT) == S_IFREG else { throw DocumentStoreError.notARegularFile(path) }
        return FileIdentity(st)
    }

    public var description: String {
        "dev \(device) ino \(inode) size \(size) mtime \(modificationTimeNanoseconds / 1_000_000_000).\(String(modificationTimeNanoseconds % 1_000_000_000).leftPadded(9))"
    }
}

extension String {
    func leftPadded(_ width: Int, with pad: Character = "0") -> String {
        count >= width ? self : String(repeating: pad, count: width - count) + self
    }
}
