import CLinux
import Glibc
import NameBytes

/// A document's file read below a folder (a mount point) without following a symbolic link on
/// the way: one name at a time with `openat(O_NOFOLLOW)` from the folder's descriptor, so a link
/// put in place of the document, or of a folder on its path, is said to be one and never read
/// through (what `coordfs web` and `coordfs diff` show as a document "now", docs/web.md). The
/// reads are this process's, with its user's rights, as any of its programs would make them.
public enum NoLinkRead: Equatable, Sendable {
    /// The file's bytes.
    case bytes([UInt8])
    /// Nothing at the path (or a name on the way is no folder).
    case missing
    /// `path` (below the folder: the document itself or a folder on its way) is a symbolic link to `target`.
    case link(path: String, target: String)
    /// Something that is not a regular file (a folder, a FIFO, a device).
    case notAFile
    /// Larger than the limit asked for.
    case tooLarge
    /// Another error (EACCES, ...).
    case failed(errno: Int32)

    /// Reads `relative` (names separated by `/`, as bytes) below `root`, at most `limit` bytes.
    public static func read(_ relative: String, below root: String, atMost limit: Int = .max) -> NoLinkRead {
        let names = relative.nameBytes.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: true).map { String(nameBytes: Array($0)) }
        var fd = root.withNameCString { open($0, oPath | O_DIRECTORY | O_CLOEXEC) }
        guard fd >= 0 else { return errno == ENOENT ? .missing : .failed(errno: errno) }
        for (i, name) in names.enumerated() {
            let last = i == names.count - 1
            // O_NONBLOCK: a FIFO at the name opens at once (and is then said to be no file).
            let flags = last ? O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC : oPath | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC
            let next = name.withNameCString { openat(fd, $0, flags) }
            if next < 0 {
                let code = errno
                defer { close(fd) }
                var st = stat()
                if name.withNameCString({ fstatat(fd, $0, &st, AT_SYMLINK_NOFOLLOW) }) == 0, (st.st_mode & S_IFMT) == S_IFLNK {
                    return .link(path: names[...i].joined(separator: "/"), target: linkTarget(fd, name))
                }
                return code == ENOENT || code == ENOTDIR ? .missing : .failed(errno: code)
            }
            close(fd)
            fd = next
        }
        defer { close(fd) }
        var st = stat()
        guard !names.isEmpty, fstat(fd, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG else { return .notAFile }
        var out: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let n = retryingEINTR { Glibc.read(fd, &chunk, chunk.count) }
            if n < 0 { return .failed(errno: errno) }
            if n == 0 { return .bytes(out) }
            out += chunk[0..<n]
            if out.count > limit { return .tooLarge }
        }
    }

    private static func linkTarget(_ folder: Int32, _ name: String) -> String {
        var buffer = [UInt8](repeating: 0, count: Int(PATH_MAX) + 1)
        let n = name.withNameCString { n in buffer.withUnsafeMutableBytes { readlinkat(folder, n, $0.baseAddress!.assumingMemoryBound(to: CChar.self), $0.count - 1) } }
        return n > 0 ? String(nameBytes: Array(buffer[0..<n])) : "?"
    }

    /// `O_PATH` (Glibc's module leaves it out): a folder opened only to name what is in it, which
    /// needs search permission on the way and no read permission on it.
    private static let oPath = CLINUX_O_PATH
}
