import FuseKit
import Glibc
import LinuxGNU
import NameBytes

/// One line of /proc/self/mountinfo.
public struct MountEntry: Sendable, Equatable {
    public var mountpoint: String
    public var fsType: String
    public var source: String
    public var options: String
    /// For a FUSE mount, the user whose daemon serves it (`MountInfo.Entry.fuseOwner`).
    public var owner: uid_t? = nil
    /// The file system's device, `major:minor` (`MountInfo.Entry.device`), when known.
    public var device: String? = nil
}

/// The kernel's table of mounts, as this process sees it.
public enum MountTable {
    /// Every mount, in mount order (`Linux.MountInfo`, the one mountinfo reader).
    public static func entries(from text: String? = nil) -> [MountEntry] {
        guard let text = text ?? MountInfo.text() else { return [] }
        return MountInfo.parse(text).map {
            MountEntry(mountpoint: $0.mountPoint, fsType: $0.fileSystemType, source: $0.source, options: $0.options, owner: $0.fuseOwner,
                       device: $0.device.isEmpty ? nil : $0.device)
        }
    }

    /// The topmost coordfs mount at exactly `mountpoint` (an absolute, normalised path), compared
    /// byte for byte: names are bytes, so two spellings of one word in NFC and NFD are two mount
    /// points (String `==` would take one for the other).
    public static func coordfsMount(at mountpoint: String, in entries: [MountEntry] = entries()) -> MountEntry? {
        entries.last { ExactName.same($0.mountpoint, mountpoint) && $0.fsType == "fuse.coordfs" }
    }

    /// The kernel's id (mountinfo's first field) of the topmost coordfs mount at exactly
    /// `mountpoint`, nil when none is there: a new mount at the same place has another id.
    public static func coordfsMountID(at mountpoint: String, text: String? = nil) -> Int? {
        guard let text = text ?? MountInfo.text() else { return nil }
        var found: Int?
        for line in text.split(separator: "\n") {
            guard let entry = MountInfo.parse(String(line)).first, entry.fileSystemType == "fuse.coordfs",
                  ExactName.same(entry.mountPoint, mountpoint), let id = line.split(separator: " ").first.flatMap({ Int($0) }) else { continue }
            found = id
        }
        return found
    }
}
