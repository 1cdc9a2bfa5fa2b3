import Glibc
import NameBytes

/// `/proc/self/mountinfo` (proc(5)), read one way for the whole program: the daemon's mount table
/// and the client's socket locator both use it.
public enum MountInfo {
    /// One line: a mount as this process sees it.
    public struct Entry: Sendable, Hashable {
        /// Where it is mounted (escapes like `\040` decoded; a name that is not UTF-8 is held
        /// losslessly, `LosslessName`).
        public var mountPoint: String
        /// The file system type (`fuse.coordfs`).
        public var fileSystemType: String
        /// The mount source; for coordfs the backing folder.
        public var source: String
        /// The per-mount options (`rw,nosuid,...`).
        public var options: String
        /// The file system's device, `major:minor` (for a FUSE mount the minor is its connection's
        /// number under /sys/fs/fuse/connections).
        public var device: String = ""
        /// The file system's own options (`rw,user_id=0,group_id=0,...` for FUSE).
        public var superOptions: String = ""

        /// For a FUSE mount, the user whose daemon serves it (`user_id=`: who mounted it).
        public var fuseOwner: uid_t? {
            for option in superOptions.split(separator: ",") where option.hasPrefix("user_id=") {
                return uid_t(option.dropFirst("user_id=".count))
            }
            return nil
        }
    }

    /// Every mount in `text`, in mount order; lines that are not mountinfo are skipped.
    public static func parse(_ text: String) -> [Entry] {
        var entries: [Entry] = []
        for line in text.split(separator: "\n") {
            let fields = line.split(separator: " ", omittingEmptySubsequences: true)
            guard fields.count >= 10, let dash = fields.firstIndex(of: "-"), dash >= 6, fields.count > dash + 2 else { continue }
            entries.append(Entry(
                mountPoint: unescape(fields[4]), fileSystemType: unescape(fields[dash + 1]),
                source: unescape(fields[dash + 2]), options: unescape(fields[5]), device: String(fields[2]),
                superOptions: fields.count > dash + 3 ? unescape(fields[dash + 3]) : ""))
        }
        return entries
    }

    /// The mounts of this process now (none if /proc cannot be read).
    public static func current(path: String = "/proc/self/mountinfo") -> [Entry] {
        parse(text(path) ?? "")
    }

    /// The file's text in the lossless form of names (mountinfo escapes only space, tab, newline
    /// and backslash; other bytes of a name are there as they are).
    public static func text(_ path: String = "/proc/self/mountinfo") -> String? {
        readWholeFileBytes(path).map { String(nameBytes: $0) }
    }

    /// Decodes mountinfo's octal escapes (`\040` for space, `\011`, `\012`, `\134`); the bytes are
    /// kept as they are, in the lossless form of a name.
    public static func unescape(_ field: Substring) -> String {
        guard field.contains("\\") else { return String(field) }
        var bytes: [UInt8] = []
        let utf8 = String(field).nameBytes  // the name's own bytes, not the UTF-8 of its lossless form
        var index = 0
        while index < utf8.count {
            if utf8[index] == UInt8(ascii: "\\"), index + 3 < utf8.count {
                let digits = utf8[(index + 1)..<min(index + 4, utf8.count)]
                if digits.count == 3, digits.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "7") }) {
                    let value = digits.reduce(0) { $0 * 8 + Int($1 - UInt8(ascii: "0")) }
                    if value < 256 {
                        bytes.append(UInt8(value))
                        index += 4
                        continue
                    }
                }
            }
            bytes.append(utf8[index])
            index += 1
        }
        return String(nameBytes: bytes)
    }
}
