// rename (plain, over existing, RENAME_NOREPLACE, RENAME_EXCHANGE, and its errors), symlink and
// readlink, hard links and nlink, mknod and mkfifo.
import Glibc
import XCTest

final class RenameLinkTests: MountTestCase {
    private func populate() {
        prepare("mkdir d") { s in Sys.call { mkdir(s("d"), 0o755) } }
        prepare("mkdir e") { s in Sys.call { mkdir(s("e"), 0o755) } }
        prepare("mkdir full") { s in Sys.call { mkdir(s("full"), 0o755) } }
        prepare("put full/x") { s in Sys.put(s("full/x"), [1]) }
        prepare("put a") { s in Sys.put(s("a"), Array("A".utf8)) }
        prepare("put b") { s in Sys.put(s("b"), Array("BB".utf8)) }
    }

    func testPlainRenameAndOverExisting() {
        populate()
        same("rename a -> d/a", expect: Outcome.success()) { s in Sys.call { rename(s("a"), s("d/a")) } }
        same("old name gone", expect: Outcome.failure(ENOENT)) { s in Sys.lstat(s("a")).1 }
        same("rename d/a -> b (over an existing file)", expect: Outcome.success()) { s in Sys.call { rename(s("d/a"), s("b")) } }
        same("b holds a's content", expect: "A") { s in String(decoding: Sys.contents(s("b")).0 ?? [], as: UTF8.self) }
        same("rename b -> b (same)", expect: Outcome.success()) { s in Sys.call { rename(s("b"), s("b")) } }
        same("rename dir d -> e (over an empty dir)", expect: Outcome.success()) { s in Sys.call { rename(s("d"), s("e")) } }
        same("rename e -> full (non-empty target)", expect: Outcome.failure(ENOTEMPTY)) { s in Sys.call { rename(s("e"), s("full")) } }
        same("rename file b -> dir e", expect: Outcome.failure(EISDIR)) { s in Sys.call { rename(s("b"), s("e")) } }
        same("rename dir e -> file b", expect: Outcome.failure(ENOTDIR)) { s in Sys.call { rename(s("e"), s("b")) } }
        same("rename missing", expect: Outcome.failure(ENOENT)) { s in Sys.call { rename(s("missing"), s("x")) } }
        same("rename into a missing dir", expect: Outcome.failure(ENOENT)) { s in Sys.call { rename(s("b"), s("nodir/b")) } }
        same("rename a dir into itself", expect: Outcome.failure(EINVAL)) { s in Sys.call { rename(s("full"), s("full/sub")) } }
        same("rename . ", expect: Outcome.failure(EBUSY)) { s in Sys.call { rename(s("full/."), s("z")) } }
        same("rename a dir with contents", expect: Outcome.success()) { s in Sys.call { rename(s("full"), s("e/moved")) } }
        same("content moved along", expect: [1]) { s in Sys.contents(s("e/moved/x")).0 ?? [] }
        sameMeta("e")
        // A renamed file keeps working through an fd opened before.
        guard let fds = openBoth("b", O_RDWR) else { return }
        same("rename an open file", expect: Outcome.success()) { s in Sys.call { rename(s("b"), s("e/b2")) } }
        same("write through the old fd", on: fds, expect: Outcome.success(1)) { fd in Sys.write(fd, Array("Z".utf8), at: 1) }
        closeBoth(fds)
        same("content via the new name", expect: "AZ") { s in String(decoding: Sys.contents(s("e/b2")).0 ?? [], as: UTF8.self) }
        // Hard links of the same inode: rename one onto the other is a no-op.
        prepare("link e/b2 e/b3") { s in Sys.call { link(s("e/b2"), s("e/b3")) } }
        same("rename between two links of one inode", expect: Outcome.success()) { s in Sys.call { rename(s("e/b2"), s("e/b3")) } }
        same("both names stay", expect: Outcome.success()) { s in Sys.lstat(s("e/b2")).1 }
    }

    func testRenameNoReplaceAndExchange() {
        populate()
        same("RENAME_NOREPLACE onto existing", expect: Outcome.failure(EEXIST)) { s in Sys.rename2(s("a"), s("b"), Linux.RENAME_NOREPLACE) }
        same("b untouched", expect: "BB") { s in String(decoding: Sys.contents(s("b")).0 ?? [], as: UTF8.self) }
        same("RENAME_NOREPLACE to a new name", expect: Outcome.success()) { s in Sys.rename2(s("a"), s("c"), Linux.RENAME_NOREPLACE) }
        same("RENAME_EXCHANGE c <-> b", expect: Outcome.success()) { s in Sys.rename2(s("c"), s("b"), Linux.RENAME_EXCHANGE) }
        same("b after exchange", expect: "A") { s in String(decoding: Sys.contents(s("b")).0 ?? [], as: UTF8.self) }
        same("c after exchange", expect: "BB") { s in String(decoding: Sys.contents(s("c")).0 ?? [], as: UTF8.self) }
        same("RENAME_EXCHANGE file <-> dir", expect: Outcome.success()) { s in Sys.rename2(s("c"), s("full"), Linux.RENAME_EXCHANGE) }
        sameMeta("c")
        sameMeta("full")
        same("full is now the file", expect: "BB") { s in String(decoding: Sys.contents(s("full")).0 ?? [], as: UTF8.self) }
        same("RENAME_EXCHANGE with a missing target", expect: Outcome.failure(ENOENT)) { s in Sys.rename2(s("b"), s("nothere"), Linux.RENAME_EXCHANGE) }
        same("RENAME_EXCHANGE|NOREPLACE", expect: Outcome.failure(EINVAL)) { s in
            Sys.rename2(s("b"), s("c"), Linux.RENAME_EXCHANGE | Linux.RENAME_NOREPLACE)
        }
        same("RENAME_EXCHANGE across dirs", expect: Outcome.success()) { s in Sys.rename2(s("b"), s("c/x"), Linux.RENAME_EXCHANGE) }
        same("unknown renameat2 flag", expect: Outcome.failure(EINVAL)) { s in Sys.rename2(s("b"), s("z"), 0x80) }
    }

    func testSymlinkAndReadlink() {
        populate()
        let targets = ["a", "../x/y", "/etc/passwd", String(repeating: "t/", count: 1000) + "end", "with space", "ü"]
        for (i, t) in targets.enumerated() {
            same("symlink l\(i) -> \(t.prefix(30))", expect: Outcome.success()) { s in Sys.call { symlink(t, s("l\(i)")) } }
            same("readlink l\(i)", expect: t) { s in Sys.readlink(s("l\(i)")).0 ?? "error" }
            sameMeta("l\(i)")
        }
        same("symlink onto existing", expect: Outcome.failure(EEXIST)) { s in Sys.call { symlink("x", s("a")) } }
        same("symlink with an empty target", expect: Outcome.failure(ENOENT)) { s in Sys.call { symlink("", s("empty")) } }
        same("readlink a file", expect: Outcome.failure(EINVAL)) { s in Sys.readlink(s("a")).1 }
        same("readlink missing", expect: Outcome.failure(ENOENT)) { s in Sys.readlink(s("missing")).1 }
        same("read through l0", expect: "A") { s in String(decoding: Sys.contents(s("l0")).0 ?? [], as: UTF8.self) }
        same("a directory symlink resolves", expect: [1]) { s in
            symlink("full", s("dl")) == 0 ? Sys.contents(s("dl/x")).0 ?? [] : []
        }
        // A short buffer truncates without error.
        same("readlink into a 3-byte buffer", expect: 3) { s in
            var buf = [CChar](repeating: 0, count: 3)
            return readlink(s("l2"), &buf, 3)
        }
        same("unlink a symlink leaves the target", expect: Outcome.success()) { s in Sys.call { unlink(s("l0")) } }
        same("target still there", expect: Outcome.success()) { s in Sys.lstat(s("a")).1 }
    }

    func testHardLinks() {
        populate()
        same("link a -> d/a2", expect: Outcome.success()) { s in Sys.call { link(s("a"), s("d/a2")) } }
        same("nlink of a", expect: 2) { s in Int(Sys.lstat(s("a")).0?.nlink ?? 0) }
        same("nlink of d/a2", expect: 2) { s in Int(Sys.lstat(s("d/a2")).0?.nlink ?? 0) }
        same("link a -> a3", expect: Outcome.success()) { s in Sys.call { link(s("a"), s("a3")) } }
        same("nlink 3", expect: 3) { s in Int(Sys.lstat(s("d/a2")).0?.nlink ?? 0) }
        same("write via one name", expect: Outcome.success()) { s in Sys.put(s("a3"), Array("shared".utf8)) }
        same("read via another", expect: "shared") { s in String(decoding: Sys.contents(s("d/a2")).0 ?? [], as: UTF8.self) }
        same("chmod via one name shows on the other", expect: S_IFREG | 0o600) { s in
            chmod(s("a"), 0o600) == 0 ? Sys.lstat(s("d/a2")).0?.mode ?? 0 : 0
        }
        same("unlink a", expect: Outcome.success()) { s in Sys.call { unlink(s("a")) } }
        same("nlink 2 after unlink", expect: 2) { s in Int(Sys.lstat(s("a3")).0?.nlink ?? 0) }
        same("link onto existing", expect: Outcome.failure(EEXIST)) { s in Sys.call { link(s("a3"), s("b")) } }
        same("link a directory", expect: Outcome.failure(EPERM)) { s in Sys.call { link(s("d"), s("d2")) } }
        same("link missing", expect: Outcome.failure(ENOENT)) { s in Sys.call { link(s("missing"), s("m2")) } }
        same("link into a missing dir", expect: Outcome.failure(ENOENT)) { s in Sys.call { link(s("b"), s("nodir/b")) } }
        // link() of a symlink links the symlink itself.
        prepare("symlink sl -> b") { s in Sys.call { symlink("b", s("sl")) } }
        same("link a symlink", expect: Outcome.success()) { s in Sys.call { link(s("sl"), s("sl2")) } }
        sameMeta("sl2")
        same("linkat AT_SYMLINK_FOLLOW", expect: Outcome.success()) { s in Sys.call { linkat(AT_FDCWD, s("sl"), AT_FDCWD, s("b2"), AT_SYMLINK_FOLLOW) } }
        same("nlink of b after linking through a symlink", expect: 2) { s in Int(Sys.lstat(s("b")).0?.nlink ?? 0) }
    }

    func testMknodAndMkfifo() {
        same("mkfifo p", expect: Outcome.success()) { s in Sys.call { mkfifo(s("p"), 0o640) } }
        sameMeta("p")
        same("mknod S_IFIFO q", expect: Outcome.success()) { s in Sys.call { mknod(s("q"), S_IFIFO | 0o600, 0) } }
        same("mknod S_IFCHR zero (1,5)", expect: Outcome.success()) { s in Sys.call { mknod(s("zero"), S_IFCHR | 0o666, makedev(1, 5)) } }
        same("mknod S_IFBLK (7,0)", expect: Outcome.success()) { s in Sys.call { mknod(s("blk"), S_IFBLK | 0o600, makedev(7, 0)) } }
        same("mknod S_IFREG", expect: Outcome.success()) { s in Sys.call { mknod(s("reg"), S_IFREG | 0o604, 0) } }
        for rel in ["q", "zero", "blk", "reg"] { sameMeta(rel) }
        same("mkfifo over existing", expect: Outcome.failure(EEXIST)) { s in Sys.call { mkfifo(s("p"), 0o600) } }
        same("mknod with a bad type", expect: Outcome.failure(EINVAL)) { s in Sys.call { mknod(s("bad"), 0o170000 | 0o600, 0) } }
        // A FIFO through the mount carries data between a reader and a writer (nonblocking open).
        same("FIFO round trip", expect: [UInt8]([1, 2, 3])) { s in
            let r = open(s("p"), O_RDONLY | O_NONBLOCK)
            guard r >= 0 else { return [] }
            defer { close(r) }
            let w = open(s("p"), O_WRONLY | O_NONBLOCK)
            guard w >= 0 else { return [] }
            _ = Sys.write(w, [1, 2, 3])
            close(w)
            return Sys.read(r, count: 10).0
        }
    }
}
