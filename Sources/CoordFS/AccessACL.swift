import Glibc
import LinuxGNU
import NameBytes

/// An item's POSIX access ACL (`system.posix_acl_access`), checked as the kernel checks it
/// (`posix_acl_permission` in fs/posix_acl.c), so that what the control socket lets a user learn or
/// do follows what the kernel would let that user do in the folder: a named user's or group's grant
/// counts, and so does a named entry or a mask that takes away what the mode bits would give.
struct AccessACL: Sendable, Equatable {
    struct Entry: Sendable, Equatable {
        var tag: UInt16
        var perm: UInt16
        var id: UInt32
    }

    static let userObject: UInt16 = 0x01, user: UInt16 = 0x02, groupObject: UInt16 = 0x04
    static let group: UInt16 = 0x08, mask: UInt16 = 0x10, other: UInt16 = 0x20

    /// The entries in the xattr's order (the kernel keeps them sorted by tag, then id).
    var entries: [Entry]

    /// Parses the xattr's value: a little-endian version 2 header, then 8 bytes per entry (tag,
    /// perm, id). Nil for anything else (the kernel refuses such a value, so no file carries one).
    init?(xattr bytes: [UInt8]) {
        guard bytes.count >= 4, (bytes.count - 4) % 8 == 0 else { return nil }
        func u16(_ at: Int) -> UInt16 { UInt16(bytes[at]) | UInt16(bytes[at + 1]) << 8 }
        func u32(_ at: Int) -> UInt32 { UInt32(u16(at)) | UInt32(u16(at + 2)) << 16 }
        guard u32(0) == 2 else { return nil }
        entries = stride(from: 4, to: bytes.count, by: 8).map { Entry(tag: u16($0), perm: u16($0 + 2), id: u32($0 + 4)) }
        guard !entries.isEmpty else { return nil }
    }

    init(entries: [Entry]) { self.entries = entries }

    /// Whether a process with `uid`, `gid` and supplementary `groups` (not root) may have every
    /// bit of `want` (4 read, 2 write, 1 search/execute) on an item owned by `ownerUID`:`ownerGID`.
    /// The owner's entry for the owner; else a named user's entry, limited by the mask; else the
    /// group entries (the owning group's and named groups'): any that matches and grants
    /// (through the mask) allows, one that matches without granting denies; else the others' entry.
    func permits(uid: UInt32, gid: UInt32, groups: [UInt32], ownerUID: UInt32, ownerGID: UInt32, want: UInt16) -> Bool {
        let maskPerm = entries.first { $0.tag == Self.mask }?.perm
        func masked(_ perm: UInt16) -> Bool { perm & (maskPerm ?? 0o7) & want == want }
        func inGroup(_ g: UInt32) -> Bool { gid == g || groups.contains(g) }
        var found = false
        for entry in entries {
            switch entry.tag {
            case Self.userObject where uid == ownerUID:
                return entry.perm & want == want
            case Self.user where entry.id == uid:
                return masked(entry.perm)
            case Self.groupObject where inGroup(ownerGID), Self.group where inGroup(entry.id):
                found = true
                if entry.perm & want == want { return masked(entry.perm) }
            case Self.other:
                return !found && entry.perm & want == want
            default:
                continue
            }
        }
        return false
    }

    static let attributeName = "system.posix_acl_access"

    /// The access ACL of `name` in the folder `directory` (a descriptor, O_PATH ones too), not
    /// following a symbolic link; nil when it has none (its mode bits decide) or it cannot be read.
    static func read(in directory: Int32, _ name: String) -> AccessACL? {
        let value = readValue { buffer in
            name.withNameCString { cName in
                attributeName.withCString { LinuxCalls.getxattrat(directory, cName, $0, buffer.baseAddress, buffer.count) }
            }
        }
        // Before Linux 6.13 (no getxattrat): by the folder descriptor's path in /proc.
        if value == nil, errno == ENOSYS { return read(path: "/proc/self/fd/\(directory)/" + name) }
        return value.flatMap(AccessACL.init(xattr:))
    }

    /// The access ACL of the item at `path` (a symbolic link in its last component followed).
    static func read(path: String) -> AccessACL? {
        readValue { buffer in
            path.withNameCString { cPath in
                attributeName.withCString { LinuxCalls.getxattr(cPath, $0, buffer.baseAddress, buffer.count) }
            }
        }.flatMap(AccessACL.init(xattr:))
    }

    /// The access ACL of the file open as `fd` (not an O_PATH descriptor).
    static func read(fd: Int32) -> AccessACL? {
        readValue { buffer in
            attributeName.withCString { LinuxCalls.fgetxattr(fd, $0, buffer.baseAddress, buffer.count) }
        }.flatMap(AccessACL.init(xattr:))
    }

    /// The value `call` reads into a buffer, grown while it is too small; nil (errno set) on failure.
    private static func readValue(_ call: (UnsafeMutableRawBufferPointer) -> Int) -> [UInt8]? {
        var size = 4 + 8 * 32
        while true {
            var buffer = [UInt8](repeating: 0, count: size)
            let n = buffer.withUnsafeMutableBytes { call($0) }
            if n >= 0 { return Array(buffer[0..<n]) }
            guard errno == ERANGE, size < 1 << 20 else { return nil }
            size *= 8
        }
    }
}
