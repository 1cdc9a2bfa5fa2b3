// readdir (names and d_type), readdirplus (a stat of every entry right after listing), mkdir and
// rmdir with their errors, unlink, fsync on a directory fd, and creation modes under umask.
import Glibc
import TestSupport
import XCTest

final class DirectoryTests: MountTestCase {
    private func populate() {
        prepare("mkdir dir") { s in Sys.call { mkdir(s("dir"), 0o755) } }
        prepare("mkdir dir/sub") { s in Sys.call { mkdir(s("dir/sub"), 0o700) } }
        prepare("create dir/file") { s in Sys.put(s("dir/file"), pattern(3000)) }
        prepare("symlink dir/link") { s in Sys.call { symlink("file", s("dir/link")) } }
        prepare("mkfifo dir/fifo") { s in Sys.call { mkfifo(s("dir/fifo"), 0o644) } }
        prepare("mknod dir/null (char 1,3)") { s in Sys.call { mknod(s("dir/null"), S_IFCHR | 0o600, makedev(1, 3)) } }
        prepare("mknod dir/reg (S_IFREG)") { s in Sys.call { mknod(s("dir/reg"), S_IFREG | 0o640, 0) } }
        prepare("create dir/.hidden") { s in Sys.put(s("dir/.hidden"), []) }
        prepare("create dir/spaced name ü") { s in Sys.put(s("dir/spaced name ü"), [1]) }
        prepare("bind a unix socket dir/sock") { s in bindSocket(s("dir/sock")) }
    }

    /// Binds (and closes) a unix-domain socket at `path`, leaving the socket inode behind.
    private func bindSocket(_ path: String) -> Outcome {
        let fd = UnixSocket.bind(path)
        guard fd >= 0 else { return .failure(errno) }
        close(fd)
        return .success(0)
    }

    func testReaddirNamesAndTypes() {
        populate()
        let listing = same("readdir dir (names and d_type)") { s in Sys.readdir(s("dir")).0 }
        XCTAssertEqual(listing.count, 9, "the populated folder should list 9 entries: \(listing)")
        XCTAssertTrue(listing.allSatisfy { $0.type != UInt8(DT_UNKNOWN) }, "native d_type unknown: \(listing)")
        same("readdir empty dir/sub", expect: [Sys.Entry]()) { s in Sys.readdir(s("dir/sub")).0 }
        same("opendir a file", expect: Outcome.failure(ENOTDIR)) { s in Sys.readdir(s("dir/file")).1 }
        same("opendir missing", expect: Outcome.failure(ENOENT)) { s in Sys.readdir(s("missing")).1 }
        // "." and ".." are listed too.
        same("readdir lists . and ..", expect: true) { s in
            guard let d = opendir(s("dir")) else { return false }
            defer { closedir(d) }
            var names = Set<String>()
            while let e = readdir(d) {
                names.insert(withUnsafeBytes(of: e.pointee.d_name) { String(decoding: $0.prefix(while: { $0 != 0 }), as: UTF8.self) })
            }
            return names.contains(".") && names.contains("..")
        }
    }

    func testReaddirplusStatOfEveryEntry() {
        populate()
        // What `ls -l` does: list, then lstat each name (the kernel may answer from readdirplus).
        let n = Sys.readdir(native("dir")).0, m = Sys.readdir(mnt("dir")).0
        XCTAssertEqual(n, m)
        for e in n { sameMeta("dir/" + e.name) }
        // An entry changed behind the listing is seen fresh by the next stat.
        same("chmod dir/file 0600 after listing") { s in Sys.call { chmod(s("dir/file"), 0o600) } }
        _ = Sys.readdir(mnt("dir"))
        sameMeta("dir/file")
    }

    func testReaddirOfALargeDirectoryWithRewind() {
        prepare("mkdir big") { s in Sys.call { mkdir(s("big"), 0o755) } }
        for i in 0..<1500 { prepare("create big/\(i)") { s in Sys.put(s("big/entry-\(i)-" + String(repeating: "x", count: i % 97)), []) } }
        same("readdir 1500 entries") { s in Sys.readdir(s("big")).0 }
        // Two passes over one open stream (rewinddir) see the same names.
        same("readdir twice with rewinddir", expect: true) { s in
            guard let d = opendir(s("big")) else { return false }
            defer { closedir(d) }
            func pass() -> [String] {
                var names: [String] = []
                while let e = readdir(d) { names.append(withUnsafeBytes(of: e.pointee.d_name) { String(decoding: $0.prefix(while: { $0 != 0 }), as: UTF8.self) }) }
                return names.sorted()
            }
            let first = pass()
            rewinddir(d)
            return first == pass() && first.count == 1502
        }
        // Removing entries while listing must not skip the ones that stay.
        same("unlink every other entry while reading", expect: 750) { s in
            guard let d = opendir(s("big")) else { return -1 }
            defer { closedir(d) }
            var kept = 0
            while let e = readdir(d) {
                let name = withUnsafeBytes(of: e.pointee.d_name) { String(decoding: $0.prefix(while: { $0 != 0 }), as: UTF8.self) }
                guard name.hasPrefix("entry-"), let i = Int(name.split(separator: "-")[1]) else { continue }
                if i % 2 == 0 { unlink(s("big/" + name)) } else { kept += 1 }
            }
            return kept
        }
        same("listing after the removals") { s in Sys.readdir(s("big")).0 }
    }

    func testMkdirRmdirAndErrors() {
        same("mkdir a 0777 under umask 022", expect: Outcome.success()) { s in Sys.call { mkdir(s("a"), 0o777) } }
        same("mode of a", expect: S_IFDIR | 0o755) { s in Sys.lstat(s("a")).0?.mode ?? 0 }
        same("mkdir a again", expect: Outcome.failure(EEXIST)) { s in Sys.call { mkdir(s("a"), 0o755) } }
        same("mkdir a/b/c (missing parent)", expect: Outcome.failure(ENOENT)) { s in Sys.call { mkdir(s("a/b/c"), 0o755) } }
        prepare("create f") { s in Sys.put(s("f"), []) }
        same("mkdir f/x (file parent)", expect: Outcome.failure(ENOTDIR)) { s in Sys.call { mkdir(s("f/x"), 0o755) } }
        same("mkdir over a file", expect: Outcome.failure(EEXIST)) { s in Sys.call { mkdir(s("f"), 0o755) } }
        same("mkdir a/sticky 01777", expect: Outcome.success()) { s in Sys.call { mkdir(s("a/sticky"), 0o1777) } }
        same("mode of a/sticky (umask 022)", expect: S_IFDIR | 0o1755) { s in Sys.lstat(s("a/sticky")).0?.mode ?? 0 }
        sameMeta("a")   // nlink 3 now
        same("rmdir a (not empty)", expect: Outcome.failure(ENOTEMPTY)) { s in Sys.call { rmdir(s("a")) } }
        same("rmdir a file", expect: Outcome.failure(ENOTDIR)) { s in Sys.call { rmdir(s("f")) } }
        same("rmdir missing", expect: Outcome.failure(ENOENT)) { s in Sys.call { rmdir(s("missing")) } }
        same("rmdir a/sticky/.", expect: Outcome.failure(EINVAL)) { s in Sys.call { rmdir(s("a/sticky/.")) } }
        same("rmdir a/sticky", expect: Outcome.success()) { s in Sys.call { rmdir(s("a/sticky")) } }
        sameMeta("a")   // nlink back to 2
        same("unlink a directory", expect: Outcome.failure(EISDIR)) { s in Sys.call { unlink(s("a")) } }
        same("unlink f", expect: Outcome.success()) { s in Sys.call { unlink(s("f")) } }
        same("unlink f again", expect: Outcome.failure(ENOENT)) { s in Sys.call { unlink(s("f")) } }
        same("rmdir a", expect: Outcome.success()) { s in Sys.call { rmdir(s("a")) } }
        same("lstat a after rmdir", expect: Outcome.failure(ENOENT)) { s in Sys.lstat(s("a")).1 }
    }

    func testCreationModesFollowUmask() {
        for mask: mode_t in [0o022, 0o077, 0o000, 0o027] {
            umask(mask)
            same("mkdir d\(mask) 0777 under umask \(String(mask, radix: 8))", expect: S_IFDIR | (0o777 & ~mask)) { s in
                mkdir(s("d\(mask)"), 0o777) == 0 ? Sys.lstat(s("d\(mask)")).0?.mode ?? 0 : 0
            }
            same("create f\(mask) 0666 under umask \(String(mask, radix: 8))", expect: S_IFREG | (0o666 & ~mask)) { s in
                let o = Sys.open(s("f\(mask)"), O_CREAT | O_EXCL | O_WRONLY, 0o666)
                guard o.ok else { return 0 }
                close(Int32(o.ret))
                return Sys.lstat(s("f\(mask)")).0?.mode ?? 0
            }
            same("mkfifo p\(mask) 0666 under umask \(String(mask, radix: 8))", expect: S_IFIFO | (0o666 & ~mask)) { s in
                mkfifo(s("p\(mask)"), 0o666) == 0 ? Sys.lstat(s("p\(mask)")).0?.mode ?? 0 : 0
            }
        }
        umask(0o022)
    }

    /// A folder's default ACL decides the permissions of what is made in it, not the maker's umask
    /// (files, folders, FIFOs and unnamed files, by root and by nobody), and each inherits the ACL;
    /// beside it a folder without one still takes the umask off. Before, the kernel took the umask
    /// off before the daemon saw the mode: 0600 and 0700 under umask 077 where natively 0660 and 0770.
    func testADefaultACLDecidesNewItemsModesInsteadOfTheUmask() {
        let acl = PosixACL.acl(owner: 7, users: [(nobodyUID, 7)], group: 5, mask: 7, other: 0)
        prepare("mkdir shared 0777 with a default ACL") { s in
            let made = Sys.call { mkdir(s("shared"), 0o777) }
            guard made.ok else { return made }
            chmod(s("shared"), 0o777)
            return Sys.setxattr(s("shared"), "system.posix_acl_default", acl)
        }
        prepare("mkdir plain 0777") { s in Sys.call { mkdir(s("plain"), 0o777) == 0 ? chmod(s("plain"), 0o777) : -1 } }
        defer { umask(0o022) }
        /// The mode of what `make` made at `rel`, made under umask 077 (0: it failed).
        func made(_ s: Side, _ rel: String, _ make: (String) -> Int32) -> Int {
            umask(0o077)
            guard make(s(rel)) == 0 else { return 0 }
            return Int(Sys.lstat(s(rel)).0?.mode ?? 0)
        }
        func create(_ path: String) -> Int32 {
            let fd = open(path, O_CREAT | O_EXCL | O_WRONLY, 0o666)
            return fd < 0 ? -1 : close(fd)
        }
        func unnamed(_ folder: String) -> Int {
            umask(0o077)
            let fd = open(folder, Linux.O_TMPFILE | O_RDWR, 0o666)
            guard fd >= 0 else { return 0 }
            defer { close(fd) }
            var st = stat()
            return fstat(fd, &st) == 0 ? Int(st.st_mode) : 0
        }
        for dir in ["shared", "plain"] {
            let bits: mode_t = dir == "shared" ? 0o660 : 0o600, dirBits: mode_t = dir == "shared" ? 0o770 : 0o700
            same("create \(dir)/f 0666 under umask 077", expect: Int(S_IFREG | bits)) { s in made(s, "\(dir)/f") { create($0) } }
            same("mkdir \(dir)/d 0777 under umask 077", expect: Int(S_IFDIR | dirBits)) { s in made(s, "\(dir)/d") { mkdir($0, 0o777) } }
            same("mkfifo \(dir)/p 0666 under umask 077", expect: Int(S_IFIFO | bits)) { s in made(s, "\(dir)/p") { mkfifo($0, 0o666) } }
            same("O_TMPFILE in \(dir) 0666 under umask 077", expect: Int(S_IFREG | bits)) { s in unnamed(s(dir)) }
            sameAsNobody("create \(dir)/nf 0666 under umask 077", expect: .success(Int(S_IFREG | bits))) { s in
                .success(made(s, "\(dir)/nf") { create($0) })
            }
            sameAsNobody("mkdir \(dir)/nd 0777 under umask 077", expect: .success(Int(S_IFDIR | dirBits))) { s in
                .success(made(s, "\(dir)/nd") { mkdir($0, 0o777) })
            }
        }
        same("the folder made in shared inherits its default ACL", expect: acl) { s in
            Sys.getxattr(s("shared/d"), "system.posix_acl_default").0
        }
    }

    func testFsyncOnADirectoryFd() {
        populate()
        guard let fds = openBoth("dir", O_RDONLY | O_DIRECTORY) else { return }
        same("fsync dir fd", on: fds, expect: Outcome.success()) { fd in Sys.call { fsync(fd) } }
        same("fdatasync dir fd", on: fds, expect: Outcome.success()) { fd in Sys.call { fdatasync(fd) } }
        same("write to a dir fd", on: fds, expect: Outcome.failure(EBADF)) { fd in Sys.write(fd, [1]) }
        same("read from a dir fd", on: fds, expect: Outcome.failure(EISDIR)) { fd in Sys.read(fd, count: 1).1 }
        closeBoth(fds)
        same("open dir O_WRONLY", expect: Outcome.failure(EISDIR)) { s in Sys.open(s("dir"), O_WRONLY) }
        same("open file O_DIRECTORY", expect: Outcome.failure(ENOTDIR)) { s in Sys.open(s("dir/file"), O_RDONLY | O_DIRECTORY) }
    }
}
