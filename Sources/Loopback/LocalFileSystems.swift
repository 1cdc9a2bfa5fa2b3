import FuseKit
import LinuxGNU

/// File systems whose contents change only through this machine's kernel: a close never reports a
/// delayed error (no flush operation), and fanotify sees every change (a network file system's
/// remote changes never reach it).
enum LocalFileSystems {
    /// statfs f_type values (linux/magic.h). overlayfs passes a flush on to its upper file, which has
    /// to be a local file system.
    static let types: Set<Int> = [
        0xEF53,      // ext2, ext3, ext4
        0x5846_5342, // xfs
        0x9123_683E, // btrfs
        0x0102_1994, // tmpfs
        0x8584_58F6, // ramfs
        0x794C_7630, // overlayfs
    ]

    /// True when `fd`'s file is on one of `types`.
    static func contains(_ fd: Int32) -> Bool { types.contains(LinuxCalls.fileSystemType(fd)) }
}
