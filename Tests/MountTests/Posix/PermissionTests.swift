// Permission checks as a non-root user (nobody, via a forked child), and ownership of what that
// user creates through the mount: both must match the native folder (default_permissions).
import Glibc
import XCTest

class PermissionTests: MountTestCase {
    private func populate() {
        prepare("mkdir private 0700") { s in Sys.call { mkdir(s("private"), 0o700) } }
        prepare("put private/secret") { s in Sys.put(s("private/secret"), [1]) }
        prepare("mkdir shared 0777") { s in Sys.call { mkdir(s("shared"), 0o777) } }
        prepare("chmod shared 0777") { s in Sys.call { chmod(s("shared"), 0o777) } }
        prepare("mkdir sticky 01777") { s in Sys.call { mkdir(s("sticky"), 0o777) } }
        prepare("chmod sticky 01777") { s in Sys.call { chmod(s("sticky"), 0o1777) } }
        prepare("put sticky/roots") { s in Sys.put(s("sticky/roots"), [1], mode: 0o666) }
        prepare("chmod sticky/roots 0666") { s in Sys.call { chmod(s("sticky/roots"), 0o666) } }
        prepare("put readonly 0644") { s in Sys.put(s("readonly"), [1, 2]) }
        prepare("put secret 0600") { s in Sys.put(s("secret"), [3], mode: 0o600) }
        prepare("put script 0700") { s in Sys.put(s("script"), Array("#!/bin/sh\n".utf8), mode: 0o700) }
        prepare("put open 0666") { s in Sys.put(s("open"), [4]) }
        prepare("chmod open 0666") { s in Sys.call { chmod(s("open"), 0o666) } }
    }

    func testEACCESForANonRootUser() {
        populate()
        sameAsNobody("read a 0600 root file", expect: .failure(EACCES)) { s in Sys.open(s("secret"), O_RDONLY) }
        sameAsNobody("write a 0644 root file", expect: .failure(EACCES)) { s in Sys.open(s("readonly"), O_WRONLY) }
        sameAsNobody("read a 0644 root file", expect: .success()) { s in Sys.contents(s("readonly")).1.ok ? .success() : .failure(EIO) }
        sameAsNobody("lookup inside a 0700 dir", expect: .failure(EACCES)) { s in Sys.lstat(s("private/secret")).1 }
        sameAsNobody("list a 0700 dir", expect: .failure(EACCES)) { s in Sys.readdir(s("private")).1 }
        sameAsNobody("create in a 0755 root dir", expect: .failure(EACCES)) { s in Sys.open(s("new"), O_CREAT | O_WRONLY) }
        sameAsNobody("mkdir in a 0755 root dir", expect: .failure(EACCES)) { s in Sys.call { mkdir(s("newdir"), 0o755) } }
        sameAsNobody("unlink in a 0755 root dir", expect: .failure(EACCES)) { s in Sys.call { unlink(s("readonly")) } }
        sameAsNobody("rename in a 0755 root dir", expect: .failure(EACCES)) { s in Sys.call { rename(s("readonly"), s("moved")) } }
        sameAsNobody("symlink in a 0755 root dir", expect: .failure(EACCES)) { s in Sys.call { symlink("x", s("link")) } }
        sameAsNobody("link in a 0755 root dir") { s in Sys.call { link(s("open"), s("hard")) } }
        sameAsNobody("truncate a 0644 root file", expect: .failure(EACCES)) { s in Sys.call { truncate(s("readonly"), 0) } }
        sameAsNobody("exec a 0700 root script", expect: .failure(EACCES)) { s in Sys.call { access(s("script"), X_OK) } }
        sameAsNobody("chmod a root file", expect: .failure(EPERM)) { s in Sys.call { chmod(s("open"), 0o777) } }
        sameAsNobody("chown a root file", expect: .failure(EPERM)) { s in Sys.call { chown(s("open"), nobodyUID, nobodyGID) } }
        sameAsNobody("utimensat explicit times on a root file", expect: .failure(EPERM)) { s in
            Sys.utimens(s("open"), atime: ts(1, 0), mtime: ts(1, 0))
        }
        sameAsNobody("utimensat NOW on a writable root file", expect: .success()) { s in
            Sys.utimens(s("open"), atime: ts(0, Linux.UTIME_NOW), mtime: ts(0, Linux.UTIME_NOW))
        }
        sameAsNobody("write a 0666 root file", expect: .success(1)) { s in
            let o = Sys.open(s("open"), O_WRONLY)
            guard o.ok else { return o }
            defer { close(Int32(o.ret)) }
            return Sys.write(Int32(o.ret), [9])
        }
        sameAsNobody("unlink another user's file in a sticky dir", expect: .failure(EPERM)) { s in Sys.call { unlink(s("sticky/roots")) } }
        sameAsNobody("setxattr user.* on a root file", expect: .failure(EACCES)) { s in Sys.setxattr(s("readonly"), "user.x", [1]) }
        sameAsNobody("getxattr on a 0600 root file", expect: .failure(EACCES)) { s in Sys.getxattr(s("secret"), "user.x").1 }
        sameAsNobody("setxattr trusted.* ", expect: .failure(EPERM)) { s in Sys.setxattr(s("open"), "trusted.x", [1]) }
        sameAsNobody("mknod a device", expect: .failure(EPERM)) { s in Sys.call { mknod(s("shared/dev"), S_IFCHR | 0o600, makedev(1, 3)) } }
    }

    func testFilesCreatedByANonRootUserBelongToThem() {
        populate()
        sameAsNobody("create shared/mine", expect: .success()) { s in
            let o = Sys.open(s("shared/mine"), O_CREAT | O_EXCL | O_WRONLY, 0o640)
            if o.ok { close(Int32(o.ret)) }
            return o.ok ? .success() : o
        }
        sameAsNobody("mkdir shared/dir", expect: .success()) { s in Sys.call { mkdir(s("shared/dir"), 0o750) } }
        sameAsNobody("symlink shared/sl", expect: .success()) { s in Sys.call { symlink("mine", s("shared/sl")) } }
        sameAsNobody("mkfifo shared/fifo", expect: .success()) { s in Sys.call { mkfifo(s("shared/fifo"), 0o600) } }
        sameAsNobody("create in sticky", expect: .success()) { s in Sys.put(s("sticky/own"), [1]) }
        for rel in ["shared/mine", "shared/dir", "shared/sl", "shared/fifo", "sticky/own"] {
            same("owner of \(rel)", expect: "\(nobodyUID):\(nobodyGID)") { s in Sys.lstat(s(rel)).0.map { "\($0.uid):\($0.gid)" } ?? "error" }
            sameMeta(rel)
        }
        // The owner may chmod, utimens, and remove what they made; others may not chmod it.
        sameAsNobody("chmod own file", expect: .success()) { s in Sys.call { chmod(s("shared/mine"), 0o600) } }
        sameAsNobody("utimensat own file", expect: .success()) { s in Sys.utimens(s("shared/mine"), atime: ts(5, 5), mtime: ts(6, 6)) }
        sameAsNobody("chown own file to root", expect: .failure(EPERM)) { s in Sys.call { chown(s("shared/mine"), 0, 0) } }
        sameAsNobody("unlink own file in sticky", expect: .success()) { s in Sys.call { unlink(s("sticky/own")) } }
        sameMeta("shared/mine")
        // A set-group-ID folder passes its group to new entries.
        prepare("mkdir sgid") { s in Sys.call { mkdir(s("sgid"), 0o777) } }
        prepare("chown sgid 0:100, chmod 02777") { s in
            chown(s("sgid"), 0, 100) == 0 ? Sys.call { chmod(s("sgid"), 0o2777) } : .failure(errno)
        }
        sameAsNobody("create in a setgid folder") { s in Sys.put(s("sgid/f"), [1]) }
        sameAsNobody("mkdir in a setgid folder") { s in Sys.call { mkdir(s("sgid/d"), 0o777) } }
        same("group of sgid/f", expect: "\(nobodyUID):100") { s in Sys.lstat(s("sgid/f")).0.map { "\($0.uid):\($0.gid)" } ?? "error" }
        sameMeta("sgid/d")   // inherits S_ISGID too
        // Writing as a non-owner clears set-user-ID.
        prepare("put shared/suid 06777") { s in Sys.put(s("shared/suid"), [1]) }
        prepare("chmod shared/suid 04777") { s in Sys.call { chmod(s("shared/suid"), 0o4777) } }
        sameAsNobody("write a setuid root file", expect: .success(1)) { s in
            let o = Sys.open(s("shared/suid"), O_WRONLY)
            guard o.ok else { return o }
            defer { close(Int32(o.ret)) }
            return Sys.write(Int32(o.ret), [2])
        }
        same("setuid cleared by the write", expect: S_IFREG | 0o777) { s in Sys.lstat(s("shared/suid")).0?.mode ?? 0 }
    }

    /// A regular file another user makes with set-user-ID or set-group-ID keeps them as natively
    /// (the daemon made it as root and handed it over with chown, which clears them); set-group-ID
    /// with group execute in a set-group-ID folder of a group the maker is not in is dropped.
    func testSetIDBitsAnotherUserCreatesAreKeptAsNatively() {
        populate()
        prepare("mkdir sgid") { s in Sys.call { mkdir(s("sgid"), 0o777) } }
        prepare("chown sgid 0:100, chmod 02777") { s in
            chown(s("sgid"), 0, 100) == 0 ? Sys.call { chmod(s("sgid"), 0o2777) } : .failure(errno)
        }
        for (rel, mode) in [("shared/both", 0o6755), ("shared/suid", 0o4700), ("shared/sgid", 0o2750), ("sgid/sgidx", 0o2775), ("sgid/sgidnox", 0o2664)] as [(String, mode_t)] {
            sameAsNobody("create \(rel) \(String(mode, radix: 8))", expect: .success()) { s in
                let o = Sys.open(s(rel), O_CREAT | O_EXCL | O_WRONLY, mode)
                if o.ok { close(Int32(o.ret)) }
                return o.ok ? .success() : o
            }
            sameMeta(rel)
        }
    }

    /// Set-user-ID and set-group-ID are dropped exactly as on the native folder: by a write, a
    /// truncate or an O_TRUNC open of a caller without CAP_FSETID (nobody), by chown(-1, -1) of
    /// anyone; kept by root's writes and truncates. (With FUSE_HANDLE_KILLPRIV_V2, which the mount
    /// takes with passthrough, the daemon does this: the kernel no longer changes the mode itself.)
    func testSetUserAndGroupIDAreDroppedAsNatively() {
        prepare("mkdir shared 0777") { s in Sys.call { mkdir(s("shared"), 0o777) } }
        prepare("chmod shared 0777") { s in Sys.call { chmod(s("shared"), 0o777) } }
        // (file, mode): set-user-ID, set-group-ID with and without group execute, both.
        // "ours": set-group-ID without group execute, in nobody's own group (kept: the writer is in it).
        let files: [(String, mode_t)] = [("suid", 0o4777), ("sgidx", 0o2777), ("sgid", 0o2767), ("both", 0o6777), ("ours", 0o2767)]
        func reset() {
            for (name, mode) in files {
                prepare("put shared/\(name)") { s in Sys.put(s("shared/\(name)"), [1, 2, 3]) }
                prepare("chown shared/\(name)") { s in Sys.call { chown(s("shared/\(name)"), 0, name == "ours" ? nobodyGID : 0) } }
                prepare("chmod shared/\(name) \(String(mode, radix: 8))") { s in Sys.call { chmod(s("shared/\(name)"), mode) } }
            }
        }
        func modes(_ after: String) {
            for (name, _) in files {
                same("mode of shared/\(name) after \(after)") { s in Sys.lstat(s("shared/\(name)")).0?.mode ?? 0 }
            }
        }
        func writeOne(_ path: String) -> Outcome {
            let o = Sys.open(path, O_WRONLY)
            guard o.ok else { return o }
            defer { close(Int32(o.ret)) }
            return Sys.write(Int32(o.ret), [9])
        }
        reset()
        for (name, _) in files {
            sameAsNobody("write shared/\(name)", expect: .success(1)) { s in writeOne(s("shared/\(name)")) }
        }
        modes("a write by nobody")
        // A second write to the same open inode (the kernel's "no privileges" mark is set by then).
        reset()
        for (name, _) in files {
            sameAsNobody("write shared/\(name) twice", expect: .success(1)) { s in
                let o = Sys.open(s("shared/\(name)"), O_WRONLY)
                guard o.ok else { return o }
                defer { close(Int32(o.ret)) }
                _ = Sys.write(Int32(o.ret), [8])
                return Sys.write(Int32(o.ret), [9])
            }
        }
        modes("two writes by nobody")
        reset()
        for (name, _) in files {
            sameAsNobody("truncate shared/\(name)", expect: .success()) { s in Sys.call { truncate(s("shared/\(name)"), 1) } }
        }
        modes("truncate by nobody")
        reset()
        for (name, _) in files {
            sameAsNobody("ftruncate shared/\(name)", expect: .success()) { s in
                let o = Sys.open(s("shared/\(name)"), O_WRONLY)
                guard o.ok else { return o }
                defer { close(Int32(o.ret)) }
                return Sys.call { ftruncate(Int32(o.ret), 0) }
            }
        }
        modes("ftruncate by nobody")
        reset()
        for (name, _) in files {
            sameAsNobody("open O_TRUNC shared/\(name)", expect: .success()) { s in
                let o = Sys.open(s("shared/\(name)"), O_WRONLY | O_TRUNC)
                if o.ok { close(Int32(o.ret)) }
                return o.ok ? .success() : o
            }
        }
        modes("an O_TRUNC open by nobody")
        reset()
        for (name, _) in files {
            same("write shared/\(name) as root", expect: .success(1)) { s in writeOne(s("shared/\(name)")) }
            same("truncate shared/\(name) as root", expect: .success()) { s in Sys.call { truncate(s("shared/\(name)"), 0) } }
        }
        modes("root's write and truncate")
        for (name, _) in files {
            same("chown -1 -1 shared/\(name) as root", expect: .success()) { s in Sys.call { chown(s("shared/\(name)"), uid_t.max, gid_t.max) } }
        }
        modes("chown(-1, -1) by root")
    }

    /// A file capability (`security.capability`) goes exactly as natively: a write (the first to
    /// the inode and a second one through the same open), a truncate, an ftruncate, an O_TRUNC open
    /// and a chown remove it, for root (CAP_FSETID, which keeps set-user-ID) as for nobody, seen
    /// through the mount and in the backing folder; set-user-ID beside it is dropped or kept as
    /// natively by nobody's writes and truncates and by root's writes, truncates and chowns: root's
    /// write removes the capability and keeps set-user-ID (the kernel's SETATTR with nothing to
    /// set after it is not a chown(-1, -1)). chown(-1, -1) by nobody of root's set-ID files is
    /// refused with EPERM and changes nothing, capability included, as natively; of a file with
    /// only a capability it removes it.
    func testFileCapabilitiesAreRemovedAsNatively() {
        prepare("mkdir shared 0777") { s in Sys.call { mkdir(s("shared"), 0o777) } }
        prepare("chmod shared 0777") { s in Sys.call { chmod(s("shared"), 0o777) } }
        // A VFS_CAP_REVISION_2 capability with the effective flag: cap_net_raw permitted.
        let capability: [UInt8] = [0x01, 0x00, 0x00, 0x02, 0x00, 0x20, 0x00, 0x00] + [UInt8](repeating: 0, count: 12)
        func reset(_ name: String, _ mode: mode_t, capable: Bool = true) {
            prepare("put shared/\(name)") { s in Sys.put(s("shared/\(name)"), [1, 2, 3]) }
            prepare("chown shared/\(name)") { s in Sys.call { chown(s("shared/\(name)"), 0, 0) } }
            prepare("chmod shared/\(name) \(String(mode, radix: 8))") { s in Sys.call { chmod(s("shared/\(name)"), mode) } }
            if capable {
                prepare("setcap shared/\(name)") { s in Sys.setxattr(s("shared/\(name)"), "security.capability", capability) }
            }
        }
        /// Mode and capability, as the native folder, the mount and the backing folder show them.
        func state(_ path: String) -> String {
            let mode = Sys.lstat(path).0.map { String($0.mode & 0o7777, radix: 8) } ?? "gone"
            let (value, o) = Sys.getxattr(path, "security.capability")
            return "\(mode) " + (o.ok ? (value == capability ? "cap" : "other cap \(value)") : (o.err == ENODATA ? "no cap" : "\(o)"))
        }
        func check(_ name: String, after op: String) {
            let n = state(native("shared/\(name)"))
            same("shared/\(name) after \(op)") { s in state(s("shared/\(name)")) }
            if target.isMount { XCTAssertEqual(state(backing("shared/\(name)")), n, "backing shared/\(name) after \(op)") }
        }
        func writeOnce(_ path: String) -> Outcome {
            let o = Sys.open(path, O_WRONLY)
            guard o.ok else { return o }
            defer { close(Int32(o.ret)) }
            return Sys.write(Int32(o.ret), [9])
        }
        func writeTwice(_ path: String) -> Outcome {
            let o = Sys.open(path, O_WRONLY)
            guard o.ok else { return o }
            defer { close(Int32(o.ret)) }
            _ = Sys.write(Int32(o.ret), [8])
            return Sys.write(Int32(o.ret), [9])
        }
        func ftruncateOne(_ path: String) -> Outcome {
            let o = Sys.open(path, O_WRONLY)
            guard o.ok else { return o }
            defer { close(Int32(o.ret)) }
            return Sys.call { ftruncate(Int32(o.ret), 1) }
        }
        func openTruncating(_ path: String) -> Outcome {
            let o = Sys.open(path, O_WRONLY | O_TRUNC)
            if o.ok { close(Int32(o.ret)) }
            return o.ok ? .success() : o
        }
        let byNobody: [(String, (String) -> Outcome)] = [
            ("write", writeOnce), ("two writes", writeTwice), ("truncate", { p in Sys.call { truncate(p, 1) } }),
            ("ftruncate", ftruncateOne), ("O_TRUNC open", openTruncating),
        ]
        for (op, body) in byNobody {
            for (name, mode) in [("cap", 0o777), ("capsuid", 0o4777)] as [(String, mode_t)] {
                reset(name, mode)
                sameAsNobody("\(op) shared/\(name)", expect: .success(op.contains("write") ? 1 : 0)) { s in body(s("shared/\(name)")) }
                check(name, after: "\(op) by nobody")
            }
        }
        // chown(-1, -1) by nobody: of a file with only a capability it removes it; of root's set-ID
        // files (set-group-ID without group execute too: nobody is not in group 0) it is refused.
        let chownByNobody: [(String, mode_t, Bool, Outcome)] = [
            ("cap", 0o777, true, .success()), ("capsuid", 0o4777, true, .failure(EPERM)), ("capsgid", 0o2767, true, .failure(EPERM)),
            ("suid", 0o4777, false, .failure(EPERM)), ("sgidx", 0o2777, false, .failure(EPERM)), ("sgid", 0o2767, false, .failure(EPERM)),
        ]
        for (name, mode, capable, expected) in chownByNobody {
            reset(name, mode, capable: capable)
            sameAsNobody("chown(-1, -1) shared/\(name)", expect: expected) { s in Sys.call { chown(s("shared/\(name)"), uid_t.max, gid_t.max) } }
            check(name, after: "chown(-1, -1) by nobody")
        }
        for (op, body) in byNobody {
            for (name, mode) in [("cap", 0o777), ("capsuid", 0o4777), ("capsgidx", 0o2777)] as [(String, mode_t)] {
                reset(name, mode)
                same("\(op) shared/\(name) as root", expect: .success(op.contains("write") ? 1 : 0)) { s in body(s("shared/\(name)")) }
                check(name, after: "\(op) by root")
            }
        }
        let byRoot: [(String, (String) -> Outcome)] = [
            ("truncate", { p in Sys.call { truncate(p, 1) } }), ("ftruncate", ftruncateOne), ("O_TRUNC open", openTruncating),
            ("chown(-1, -1)", { p in Sys.call { chown(p, uid_t.max, gid_t.max) } }), ("chown(0, 0)", { p in Sys.call { chown(p, 0, 0) } }),
        ]
        for (op, body) in byRoot {
            for (name, mode) in [("cap", 0o777), ("capsuid", 0o4777)] as [(String, mode_t)] {
                reset(name, mode)
                same("\(op) shared/\(name) as root", expect: .success()) { s in body(s("shared/\(name)")) }
                check(name, after: "\(op) by root")
            }
        }
    }
}

/// The same checks with open files served by the daemon: no passthrough, so the kernel keeps
/// dropping set-user-ID itself (no FUSE_HANDLE_KILLPRIV_V2) and writes reach the daemon.
final class PermissionTestsWithoutPassthrough: PermissionTests {
    override var mountOptions: [String] {
        (try? MountTarget.fromEnvironment().isCoordFS) == true ? super.mountOptions + ["passthrough=off"] : super.mountOptions
    }

    // XCTest on Linux runs a subclass's inherited tests only when it declares one of its own.
    override func testSetUserAndGroupIDAreDroppedAsNatively() { super.testSetUserAndGroupIDAreDroppedAsNatively() }
    override func testFileCapabilitiesAreRemovedAsNatively() { super.testFileCapabilitiesAreRemovedAsNatively() }
}
