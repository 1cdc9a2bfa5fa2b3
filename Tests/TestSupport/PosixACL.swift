// Small helpers shared by more than one test target (a target of its own, so each is written once).

/// The bytes of a POSIX ACL as `system.posix_acl_access` holds them.
public enum PosixACL {
    /// An ACL for a 0600 file: the owner rw, the user `uid` with `perm`, the owning group nothing,
    /// mask `perm`, others nothing.
    public static func user(_ uid: UInt32, perm: UInt16) -> [UInt8] {
        var bytes: [UInt8] = []
        func u32(_ v: UInt32) { withUnsafeBytes(of: v.littleEndian) { bytes += $0 } }
        func u16(_ v: UInt16) { withUnsafeBytes(of: v.littleEndian) { bytes += $0 } }
        u32(2) // POSIX_ACL_XATTR_VERSION
        for (tag, p, id) in [(UInt16(0x01), UInt16(6), UInt32.max), (0x02, perm, uid), (0x04, 0, UInt32.max),
                             (0x10, perm, UInt32.max), (0x20, 0, UInt32.max)] {
            u16(tag); u16(p); u32(id)
        }
        return bytes
    }
}
