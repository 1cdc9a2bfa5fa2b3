import NameBytes
import Glibc
import Linux

/// The few local file system questions the client asks.
enum LocalFileSystem {
    static func isDirectory(_ path: String) -> Bool {
        var info = stat()
        return path.withNameCString({ stat($0, &info) }) == 0 && info.st_mode & S_IFMT == S_IFDIR
    }

    static func exists(_ path: String) -> Bool {
        var info = stat()
        return path.withNameCString({ lstat($0, &info) }) == 0
    }
}

extension LocalFileSystem {
    /// The whole file, read with this process's permissions.
    static func read(_ path: String) throws(CoordFSClientError) -> [UInt8] {
        let fd = path.withNameCString { open($0, O_RDONLY | O_CLOEXEC) }
        guard fd >= 0 else { throw .unreadable(path, errno: errno) }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let n = retryingEINTR { buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) } }
            guard n >= 0 else { throw .unreadable(path, errno: errno) }
            if n == 0 { return bytes }
            bytes += buffer[0..<n]
        }
    }
}

extension LocalFileSystem {
    /// A private folder (0700) for snapshot copies, under $TMPDIR or /tmp.
    static func makeSnapshotFolder() throws(CoordFSClientError) -> String {
        let base = getenv("TMPDIR").map { String(nameCString: $0) }.flatMap { $0.isEmpty ? nil : $0 } ?? "/tmp"
        var template = (base + "/coordfs-snapshot-XXXXXX").nameBytes.map { CChar(bitPattern: $0) } + [0]
        guard let made = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) else {
            throw .unreadable(base, errno: errno)
        }
        return String(nameCString: made)
    }

    /// Copies the item at `source` (a file, a folder with what is inside it, or a symbolic link)
    /// to `destination`, which must not exist. Names are bytes: paths are lossless strings.
    static func copyItem(_ source: String, to destination: String) throws(CoordFSClientError) {
        var info = stat()
        guard source.withNameCString({ lstat($0, &info) }) == 0 else { throw .unreadable(source, errno: errno) }
        switch info.st_mode & S_IFMT {
        case S_IFDIR:
            guard destination.withNameCString({ mkdir($0, 0o700) }) == 0 else { throw .unreadable(destination, errno: errno) }
            guard let folder = source.withNameCString({ opendir($0) }) else { throw .unreadable(source, errno: errno) }
            defer { closedir(folder) }
            while let entry = readdir(folder) {
                let name = withUnsafeBytes(of: &entry.pointee.d_name) { raw in
                    Array(raw.prefix { $0 != 0 })
                }
                if name == [0x2E] || name == [0x2E, 0x2E] { continue }
                let child = String(nameBytes: name)
                try copyItem(source + "/" + child, to: destination + "/" + child)
            }
        case S_IFLNK:
            var target = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
            let n = source.withNameCString { readlink($0, &target, target.count - 1) }
            guard n >= 0 else { throw .unreadable(source, errno: errno) }
            target[n] = 0
            guard destination.withNameCString({ d in target.withUnsafeBufferPointer { symlink($0.baseAddress!, d) } }) == 0 else {
                throw .unreadable(destination, errno: errno)
            }
        default:
            let bytes = try read(source)
            let fd = destination.withNameCString { open($0, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600) }
            guard fd >= 0 else { throw .unreadable(destination, errno: errno) }
            defer { close(fd) }
            var offset = 0
            while offset < bytes.count {
                let n = retryingEINTR { bytes.withUnsafeBytes { write(fd, $0.baseAddress! + offset, $0.count - offset) } }
                guard n > 0 else { throw .unreadable(destination, errno: errno) }
                offset += n
            }
        }
    }

    /// Removes `path` and everything inside it (best effort).
    static func removeTree(_ path: String) {
        var info = stat()
        guard path.withNameCString({ lstat($0, &info) }) == 0 else { return }
        if info.st_mode & S_IFMT == S_IFDIR, let folder = path.withNameCString({ opendir($0) }) {
            var children: [String] = []
            while let entry = readdir(folder) {
                let name = withUnsafeBytes(of: &entry.pointee.d_name) { raw in Array(raw.prefix { $0 != 0 }) }
                if name != [0x2E] && name != [0x2E, 0x2E] { children.append(String(nameBytes: name)) }
            }
            closedir(folder)
            for child in children { removeTree(path + "/" + child) }
            _ = path.withNameCString { rmdir($0) }
        } else {
            _ = path.withNameCString { unlink($0) }
        }
    }
}

extension LocalFileSystem {
    static func makeFolder(_ path: String) throws(CoordFSClientError) {
        guard path.withNameCString({ mkdir($0, 0o700) }) == 0 else { throw .unreadable(path, errno: errno) }
    }
}
