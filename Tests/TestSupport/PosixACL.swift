// Small helpers shared by more than one test target (a target of its own, so each is written once).

/// The bytes of a POSIX ACL as `system.posix_acl_access` holds them.
public enum PosixACL {
    /// An ACL for a 0600 file: the owner rw, the user `uid` with `perm`, the owning group nothing,
    /// mask `perm`, others nothing.
    public static func user(_ uid: UInt32, perm: UInt16) -> [UInt8] {
        acl(owner: 6, users: [(uid, perm)], group: 0, mask: perm, other: 0)
    }

    /// An ACL (access or default: the same bytes) of the owner's, the owning group's and others'
    /// permissions, entries for the users `users`, and `mask`.
    public static func acl(owner: UInt16, users: [(UInt32, UInt16)] = [], group: UInt16, mask: UInt16, other: UInt16) -> [UInt8] {
        var bytes: [UInt8] = []
        func u32(_ v: UInt32) { withUnsafeBytes(of: v.littleEndian) { bytes += $0 } }
        func u16(_ v: UInt16) { withUnsafeBytes(of: v.littleEndian) { bytes += $0 } }
        u32(2) // POSIX_ACL_XATTR_VERSION
        let entries: [(UInt16, UInt16, UInt32)] = [(0x01, owner, UInt32.max)] + users.map { (0x02, $0.1, $0.0) }
            + [(0x04, group, UInt32.max), (0x10, mask, UInt32.max), (0x20, other, UInt32.max)]
        for (tag, p, id) in entries {
            u16(tag); u16(p); u32(id)
        }
        return bytes
    }
}
