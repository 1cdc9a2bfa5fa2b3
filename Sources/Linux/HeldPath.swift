import Glibc
import NameBytes

/// Paths through a descriptor this process holds (`/proc/self/fd/N/...`): how the daemon reaches
/// its backing folder and state folder, so that a folder renamed or moved while mounted is still
/// the one it reads and writes.
public enum HeldPath {
    /// A path as a person reads it in a message: one through a descriptor this process holds is
    /// named by where that folder is now, as the kernel reports it (" (deleted)" when it is gone);
    /// another, or one the kernel cannot name within PATH_MAX, as given. Call it when the message
    /// is made, while the descriptor still names that folder.
    public static func shown(_ path: String) -> String {
        let bytes = path.utf8
        let prefix = "/proc/self/fd/".utf8
        guard bytes.starts(with: prefix) else { return path }
        let digits = bytes.dropFirst(prefix.count).prefix { $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }
        guard !digits.isEmpty else { return path }
        let end = digits.endIndex
        guard end == bytes.endIndex || bytes[end] == UInt8(ascii: "/") else { return path }
        let link = String(Substring(bytes[..<end]))
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let n = readlink(link, &buffer, Int(PATH_MAX))
        guard n > 0, n < Int(PATH_MAX), buffer[0] == CChar(UInt8(ascii: "/")) else { return path }
        buffer[n] = 0
        let folder = buffer.withUnsafeBufferPointer { String(nameCString: $0.baseAddress!) }
        return folder + String(Substring(bytes[end...]))
    }
}
