// open/create/read/write with O_APPEND, O_TRUNC, O_EXCL and O_CREAT, flush (close, also of a
// dup), release, fsync and fdatasync, lseek, and the errors of open.
import Glibc
import XCTest

final class FileIOTests: MountTestCase {
    func testCreateExclAndTrunc() {
        same("open missing O_RDONLY", expect: Outcome.failure(ENOENT)) { s in Sys.open(s("f"), O_RDONLY) }
        same("O_CREAT|O_EXCL f 0640", expect: true) { s in
            let o = Sys.open(s("f"), O_CREAT | O_EXCL | O_WRONLY, 0o640)
            if o.ok { close(Int32(o.ret)) }
            return o.ok
        }
        same("mode of f", expect: S_IFREG | 0o640) { s in Sys.lstat(s("f")).0?.mode ?? 0 }
        same("O_CREAT|O_EXCL f again", expect: Outcome.failure(EEXIST)) { s in Sys.open(s("f"), O_CREAT | O_EXCL | O_WRONLY) }
        // O_CREAT without O_EXCL on an existing file keeps its mode and content.
        prepare("put f") { s in Sys.put(s("f"), pattern(5000)) }
        same("O_CREAT existing keeps content", expect: 5000) { s in
            let o = Sys.open(s("f"), O_CREAT | O_WRONLY, 0o600)
            if o.ok { close(Int32(o.ret)) }
            return Sys.lstat(s("f")).0?.size ?? -1
        }
        same("mode kept", expect: S_IFREG | 0o640) { s in Sys.lstat(s("f")).0?.mode ?? 0 }
        same("O_TRUNC empties f", expect: 0) { s in
            let o = Sys.open(s("f"), O_TRUNC | O_WRONLY)
            if o.ok { close(Int32(o.ret)) }
            return Sys.lstat(s("f")).0?.size ?? -1
        }
        prepare("put f") { s in Sys.put(s("f"), pattern(5000)) }
        same("O_TRUNC|O_RDONLY (Linux truncates)", expect: 0) { s in
            let o = Sys.open(s("f"), O_TRUNC | O_RDONLY)
            if o.ok { close(Int32(o.ret)) }
            return Sys.lstat(s("f")).0?.size ?? -1
        }
        // O_EXCL on a dangling symlink fails; O_CREAT through it creates the target.
        prepare("symlink dl -> made") { s in Sys.call { symlink("made", s("dl")) } }
        same("O_CREAT|O_EXCL on a dangling symlink", expect: Outcome.failure(EEXIST)) { s in Sys.open(s("dl"), O_CREAT | O_EXCL | O_WRONLY) }
        same("O_CREAT through a dangling symlink creates its target", expect: Outcome.success()) { s in
            let o = Sys.open(s("dl"), O_CREAT | O_WRONLY, 0o600)
            if o.ok { close(Int32(o.ret)) }
            return o.ok ? Sys.lstat(s("made")).1 : o
        }
        same("open a directory O_RDWR", expect: Outcome.failure(EISDIR)) { s in Sys.open(s(""), O_RDWR) }
        same("open f/ (trailing slash)", expect: Outcome.failure(ENOTDIR)) { s in Sys.open(s("f/"), O_RDONLY) }
        same("O_CREAT on a trailing slash", expect: Outcome.failure(EISDIR)) { s in Sys.open(s("new/"), O_CREAT | O_WRONLY) }
        same("O_CREAT in a missing folder", expect: Outcome.failure(ENOENT)) { s in Sys.open(s("nodir/new"), O_CREAT | O_WRONLY) }
    }

    func testReadWriteAndSeek() {
        guard let fds = openBoth("f", O_CREAT | O_RDWR) else { return }
        let data = pattern(200_000, seed: 7)
        same("write 200000", on: fds, expect: Outcome.success(200_000)) { fd in Sys.write(fd, data) }
        same("lseek SEEK_CUR", on: fds, expect: Outcome.success(200_000)) { fd in Sys.lseek(fd, 0, SEEK_CUR) }
        same("lseek SEEK_SET 1000", on: fds, expect: Outcome.success(1000)) { fd in Sys.lseek(fd, 1000, SEEK_SET) }
        same("read 5000 at the position", on: fds, expect: Array(data[1000..<6000])) { fd in Sys.read(fd, count: 5000).0 }
        same("lseek SEEK_END -10", on: fds, expect: Outcome.success(199_990)) { fd in Sys.lseek(fd, -10, SEEK_END) }
        same("read past the end is short", on: fds, expect: Array(data[199_990...])) { fd in Sys.read(fd, count: 100).0 }
        same("read at EOF", on: fds, expect: Outcome.success(0)) { fd in Sys.read(fd, count: 100).1 }
        same("lseek to a negative offset", on: fds, expect: Outcome.failure(EINVAL)) { fd in Sys.lseek(fd, -1, SEEK_SET) }
        same("pwrite in the middle", on: fds, expect: Outcome.success(4)) { fd in Sys.write(fd, [9, 9, 9, 9], at: 65_534) }
        same("pread across a page boundary", on: fds) { fd in Sys.read(fd, count: 8, at: 65_532).0 }
        same("pwrite far past the end", on: fds, expect: Outcome.success(1)) { fd in Sys.write(fd, [1], at: 1_000_000) }
        same("pread the gap reads zeros", on: fds, expect: [UInt8](repeating: 0, count: 16)) { fd in Sys.read(fd, count: 16, at: 500_000).0 }
        same("fsync", on: fds, expect: Outcome.success()) { fd in Sys.call { fsync(fd) } }
        same("fdatasync", on: fds, expect: Outcome.success()) { fd in Sys.call { fdatasync(fd) } }
        closeBoth(fds)
        same("content") { s in Sys.contents(s("f")).0.map(Tree.fnv) ?? 0 }
        // A large write in one call (more than FUSE's max_write) lands whole.
        let big = pattern(3 << 20, seed: 3)
        same("put 3 MiB in one write") { s in Sys.put(s("big"), big) }
        same("3 MiB read back", expect: true) { s in Sys.contents(s("big")).0 == big }
    }

    func testAppend() {
        prepare("put log") { s in Sys.put(s("log"), Array("one\n".utf8)) }
        guard let fds = openBoth("log", O_WRONLY | O_APPEND) else { return }
        same("lseek 0 then write appends", on: fds, expect: Outcome.success(4)) { fd in
            _ = Sys.lseek(fd, 0, SEEK_SET)
            return Sys.write(fd, Array("two\n".utf8))
        }
        same("pwrite at 0 on O_APPEND appends (Linux)", on: fds, expect: Outcome.success(6)) { fd in Sys.write(fd, Array("three\n".utf8), at: 0) }
        same("position after appends (pwrite leaves it)", on: fds, expect: Outcome.success(8)) { fd in Sys.lseek(fd, 0, SEEK_CUR) }
        // A second writer appending on another fd interleaves at the end, not over.
        guard let other = openBoth("log", O_WRONLY | O_APPEND) else { return }
        same("append via a second fd", on: other, expect: Outcome.success(5)) { fd in Sys.write(fd, Array("four\n".utf8)) }
        same("append via the first fd again", on: fds, expect: Outcome.success(5)) { fd in Sys.write(fd, Array("five\n".utf8)) }
        closeBoth(other)
        closeBoth(fds)
        same("log content", expect: "one\ntwo\nthree\nfour\nfive\n") { s in String(decoding: Sys.contents(s("log")).0 ?? [], as: UTF8.self) }
        // O_APPEND|O_CREAT on a new file.
        same("O_APPEND|O_CREAT", expect: Outcome.success(2)) { s in
            let o = Sys.open(s("new"), O_WRONLY | O_APPEND | O_CREAT, 0o600)
            guard o.ok else { return o }
            defer { close(Int32(o.ret)) }
            _ = Sys.write(Int32(o.ret), [1, 2])
            return Sys.write(Int32(o.ret), [3], at: 0).ok ? Sys.lseek(Int32(o.ret), 0, SEEK_CUR) : .failure(EIO)
        }
    }

    func testAccessModesOfDescriptors() {
        prepare("put f") { s in Sys.put(s("f"), [1, 2, 3]) }
        guard let ro = openBoth("f", O_RDONLY), let wo = openBoth("f", O_WRONLY) else { return }
        same("write on O_RDONLY", on: ro, expect: Outcome.failure(EBADF)) { fd in Sys.write(fd, [1]) }
        same("read on O_WRONLY", on: wo, expect: Outcome.failure(EBADF)) { fd in Sys.read(fd, count: 1).1 }
        closeBoth(ro)
        closeBoth(wo)
        // O_NOATIME and O_DIRECT-less flags the kernel accepts must pass.
        same("O_RDONLY|O_NOATIME (owner)", expect: true) { s in
            let o = Sys.open(s("f"), O_RDONLY | Linux.O_NOATIME)
            if o.ok { close(Int32(o.ret)) }
            return o.ok
        }
        same("O_RDWR|O_SYNC write", expect: Outcome.success(2)) { s in
            let o = Sys.open(s("f"), O_RDWR | O_SYNC)
            guard o.ok else { return o }
            defer { close(Int32(o.ret)) }
            return Sys.write(Int32(o.ret), [7, 7], at: 1)
        }
    }

    func testFlushAndReleaseOfSharedDescriptors() {
        guard let fds = openBoth("f", O_CREAT | O_RDWR) else { return }
        let dups = Pair(native: dup(fds.native), mnt: dup(fds.mnt))
        same("write via dup", on: dups, expect: Outcome.success(3)) { fd in Sys.write(fd, [1, 2, 3]) }
        same("close the dup (flush, no release)", on: dups, expect: Outcome.success()) { fd in Sys.call { close(fd) } }
        same("the original fd still works", on: fds, expect: Outcome.success(2)) { fd in Sys.write(fd, [4, 5]) }
        same("shared position", on: fds, expect: Outcome.success(5)) { fd in Sys.lseek(fd, 0, SEEK_CUR) }
        closeBoth(fds)
        same("content after release", expect: [1, 2, 3, 4, 5]) { s in Sys.contents(s("f")).0 ?? [] }
        // An unlinked file stays readable and writable through open fds until the last close.
        guard let open = openBoth("f", O_RDWR) else { return }
        same("unlink while open", expect: Outcome.success()) { s in Sys.call { unlink(s("f")) } }
        same("fstat nlink after unlink", on: open, expect: 0) { fd in Int(Sys.fstat(fd).0?.nlink ?? 99) }
        same("write after unlink", on: open, expect: Outcome.success(3)) { fd in Sys.write(fd, [6, 7, 8], at: 5) }
        same("read after unlink", on: open, expect: [1, 2, 3, 4, 5, 6, 7, 8]) { fd in Sys.read(fd, count: 100, at: 0).0 }
        same("lookup after unlink", expect: Outcome.failure(ENOENT)) { s in Sys.lstat(s("f")).1 }
        closeBoth(open)
    }
}
