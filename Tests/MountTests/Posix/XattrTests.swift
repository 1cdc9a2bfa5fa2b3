// Extended attributes: user.* set/get/list/remove, ENODATA, XATTR_CREATE / XATTR_REPLACE, size
// probing, attributes on directories, and on an fd.
import Glibc
import XCTest
import LinuxGNU
import TestSupport

final class XattrTests: MountTestCase {
    func testSetGetListRemove() {
        prepare("put f") { s in Sys.put(s("f"), [1]) }
        prepare("mkdir d") { s in Sys.call { mkdir(s("d"), 0o755) } }
        for rel in ["f", "d"] {
            same("setxattr \(rel) user.a", expect: Outcome.success()) { s in Sys.setxattr(s(rel), "user.a", Array("alpha".utf8)) }
            same("setxattr \(rel) user.empty", expect: Outcome.success()) { s in Sys.setxattr(s(rel), "user.empty", []) }
            same("setxattr \(rel) user.bin (binary, 4000 bytes)", expect: Outcome.success()) { s in Sys.setxattr(s(rel), "user.bin", pattern(4000)) }
            same("getxattr \(rel) user.a", expect: Array("alpha".utf8)) { s in Sys.getxattr(s(rel), "user.a").0 }
            same("getxattr \(rel) user.empty", expect: Outcome.success(0)) { s in Sys.getxattr(s(rel), "user.empty").1 }
            same("getxattr \(rel) user.bin", expect: pattern(4000)) { s in Sys.getxattr(s(rel), "user.bin").0 }
            same("list \(rel)", expect: ["user.a", "user.bin", "user.empty"]) { s in Sys.xattrs(s(rel)).0.keys.sorted() }
            same("getxattr \(rel) missing", expect: Outcome.failure(ENODATA)) { s in Sys.getxattr(s(rel), "user.none").1 }
            same("removexattr \(rel) user.a", expect: Outcome.success()) { s in Sys.call { LinuxCalls.lremovexattr(s(rel), "user.a") } }
            same("removexattr \(rel) user.a again", expect: Outcome.failure(ENODATA)) { s in Sys.call { LinuxCalls.lremovexattr(s(rel), "user.a") } }
            same("list \(rel) after remove", expect: ["user.bin", "user.empty"]) { s in Sys.xattrs(s(rel)).0.keys.sorted() }
        }
        same("setxattr on missing", expect: Outcome.failure(ENOENT)) { s in Sys.setxattr(s("missing"), "user.a", [1]) }
        same("setxattr in an unknown namespace", expect: Outcome.failure(EOPNOTSUPP)) { s in Sys.setxattr(s("f"), "bogus.a", [1]) }
        // user.* is not allowed on symlinks.
        prepare("symlink l -> f") { s in Sys.call { symlink("f", s("l")) } }
        same("lsetxattr user.* on a symlink", expect: Outcome.failure(EPERM)) { s in Sys.setxattr(s("l"), "user.a", [1]) }
    }

    /// `trusted.*` names are listed to root only, as the file system lists them natively (to a
    /// caller with CAP_SYS_ADMIN): nobody's listxattr of root's 0644 file, its size query and the
    /// list, give `user.u` alone on both sides. Before, the daemon listed as root and nobody got
    /// `trusted.t` through the mount too.
    func testTrustedNamesAreListedToRootOnly() {
        prepare("put f") { s in Sys.put(s("f"), [1]) }
        prepare("setxattr f trusted.t") { s in Sys.setxattr(s("f"), "trusted.t", Array("root's".utf8)) }
        prepare("setxattr f user.u") { s in Sys.setxattr(s("f"), "user.u", [1]) }
        func listed(_ path: String) -> ChildOutcome {
            let size = LinuxCalls.llistxattr(path, nil, 0)
            var names = [CChar](repeating: 0, count: max(size, 1))
            let got = LinuxCalls.llistxattr(path, &names, names.count)
            return ChildOutcome(outcome: Outcome(ret: size, err: size < 0 ? errno : 0),
                                data: got > 0 ? names[0..<got].map { UInt8(bitPattern: $0) } : [])
        }
        same("list f as root", expect: ChildOutcome(outcome: .success(17), data: Array("trusted.t\0user.u\0".utf8))) { s in listed(s("f")) }
        same("list f as nobody", expect: ChildOutcome(outcome: .success(7), data: Array("user.u\0".utf8))) { s in asUser { listed(s("f")) } }
    }

    func testCreateReplaceAndSizes() {
        prepare("put f") { s in Sys.put(s("f"), [1]) }
        same("XATTR_REPLACE on a missing name", expect: Outcome.failure(ENODATA)) { s in Sys.setxattr(s("f"), "user.k", [1], Linux.XATTR_REPLACE) }
        same("XATTR_CREATE", expect: Outcome.success()) { s in Sys.setxattr(s("f"), "user.k", [1], Linux.XATTR_CREATE) }
        same("XATTR_CREATE on an existing name", expect: Outcome.failure(EEXIST)) { s in Sys.setxattr(s("f"), "user.k", [2], Linux.XATTR_CREATE) }
        same("XATTR_REPLACE", expect: Outcome.success()) { s in Sys.setxattr(s("f"), "user.k", [3, 3], Linux.XATTR_REPLACE) }
        same("value after replace", expect: [UInt8]([3, 3])) { s in Sys.getxattr(s("f"), "user.k").0 }
        // Size probing with a zero-length buffer, and a buffer too small.
        same("getxattr size probe", expect: Outcome.success(2)) { s in Sys.call { LinuxCalls.lgetxattr(s("f"), "user.k", nil, 0) } }
        same("getxattr into a 1-byte buffer", expect: Outcome.failure(ERANGE)) { s in
            var b: UInt8 = 0
            return Sys.call { LinuxCalls.lgetxattr(s("f"), "user.k", &b, 1) }
        }
        same("listxattr size probe", expect: Outcome.success(7)) { s in Sys.call { LinuxCalls.llistxattr(s("f"), nil, 0) } }
        same("listxattr into a 2-byte buffer", expect: Outcome.failure(ERANGE)) { s in
            var b = [CChar](repeating: 0, count: 2)
            return Sys.call { LinuxCalls.llistxattr(s("f"), &b, 2) }
        }
        // ext4 keeps a file's xattrs in one block: a 64 KiB value fails there, alike on both sides.
        same("a 64 KiB value") { s in Sys.setxattr(s("f"), "user.big", pattern(65_000)) }
        same("the 64 KiB value afterwards") { s in Tree.fnv(Sys.getxattr(s("f"), "user.big").0) }
        same("a name over 255 bytes", expect: Outcome.failure(ERANGE)) { s in Sys.setxattr(s("f"), "user." + String(repeating: "n", count: 251), [1]) }
        // Through a file descriptor.
        guard let fds = openBoth("f", O_RDONLY) else { return }
        same("fsetxattr", on: fds, expect: Outcome.success()) { fd in
            [UInt8]([9]).withUnsafeBytes { v in Sys.call { LinuxCalls.fsetxattr(fd, "user.fd", v.baseAddress, 1, 0) } }
        }
        same("fgetxattr", on: fds, expect: Outcome.success(1)) { fd in
            var b: UInt8 = 0
            return Sys.call { LinuxCalls.fgetxattr(fd, "user.fd", &b, 1) }
        }
        closeBoth(fds)
    }
    /// POSIX ACLs through the mount as natively: an ACL grants `nobody` what the mode bits do not
    /// (the kernel's own permission check, on with allow_other, honours ACLs once the mount takes
    /// FUSE_POSIX_ACL; before, it looked at the mode bits alone and refused), the mode shows the
    /// mask, and removing the ACL takes the grant away again (the kernel's cached ACL is dropped).
    func testPOSIXACLsGrantAndRevokeAsNatively() {
        prepare("put f 0600") { s in Sys.put(s("f"), Array("secret".utf8), mode: 0o600) }
        sameAsNobody("read f without an ACL", expect: .failure(EACCES)) { s in Sys.open(s("f"), O_RDONLY) }
        same("set an ACL granting nobody read", expect: Outcome.success()) { s in
            Sys.setxattr(s("f"), "system.posix_acl_access", PosixACL.user(nobodyUID, perm: 4))
        }
        sameMeta("f")
        same("the ACL read back", expect: PosixACL.user(nobodyUID, perm: 4)) { s in Sys.getxattr(s("f"), "system.posix_acl_access").0 }
        sameAsNobody("read f through the ACL", expect: .success()) { s in Sys.contents(s("f")).1.ok ? .success() : .failure(EACCES) }
        sameAsNobody("write f (the ACL grants read only)", expect: .failure(EACCES)) { s in Sys.open(s("f"), O_WRONLY) }
        same("remove the ACL", expect: Outcome.success()) { s in Sys.call { LinuxCalls.lremovexattr(s("f"), "system.posix_acl_access") } }
        sameAsNobody("read f after the ACL is gone", expect: .failure(EACCES)) { s in Sys.open(s("f"), O_RDONLY) }
        same("chmod 0640 then an ACL read", expect: Outcome.failure(ENODATA)) { s in
            _ = Sys.call { chmod(s("f"), 0o640) }
            return Sys.getxattr(s("f"), "system.posix_acl_access").1
        }
        sameMeta("f")
    }
}
