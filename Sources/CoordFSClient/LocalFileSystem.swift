import NameBytes
import Glibc

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
            let n = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            guard n >= 0 else { throw .unreadable(path, errno: errno) }
            if n == 0 { return bytes }
            bytes += buffer[0..<n]
        }
    }
}
