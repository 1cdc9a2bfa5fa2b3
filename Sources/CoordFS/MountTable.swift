import FuseKit
import Glibc
import Linux

/// One line of /proc/self/mountinfo.
public struct MountEntry: Sendable, Equatable {
    public var mountpoint: String
    public var fsType: String
    public var source: String
    public var options: String
}

/// The kernel's table of mounts, as this process sees it.
public enum MountTable {
    /// Every mount, in mount order.
    public static func entries(from text: String? = nil) -> [MountEntry] {
        guard let text = text ?? readWholeFile("/proc/self/mountinfo") else { return [] }
        var out: [MountEntry] = []
        for line in text.split(separator: "\n") {
            let fields = line.split(separator: " ", omittingEmptySubsequences: false)
            guard let dash = fields.firstIndex(of: "-"), dash >= 6, fields.count >= dash + 3 else { continue }
            out.append(MountEntry(mountpoint: unescape(fields[4]), fsType: String(fields[dash + 1]),
                                  source: unescape(fields[dash + 2]), options: String(fields[5])))
        }
        return out
    }

    /// The topmost coordfs mount at exactly `mountpoint` (an absolute, normalised path).
    public static func coordfsMount(at mountpoint: String, in entries: [MountEntry] = entries()) -> MountEntry? {
        entries.last { $0.mountpoint == mountpoint && $0.fsType == "fuse.coordfs" }
    }

    /// Mountinfo escapes space, tab, newline and backslash as \ooo.
    static func unescape(_ s: Substring) -> String {
        guard s.contains("\\") else { return String(s) }
        var bytes: [UInt8] = []
        var u = Array(s.utf8)[...]
        while let c = u.first {
            u = u.dropFirst()
            if c == UInt8(ascii: "\\"), u.count >= 3,
               let v = UInt8(String(decoding: u.prefix(3), as: UTF8.self), radix: 8) {
                bytes.append(v); u = u.dropFirst(3)
            } else {
                bytes.append(c)
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}
