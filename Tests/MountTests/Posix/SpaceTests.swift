// Space and layout: fallocate (plain, KEEP_SIZE, PUNCH_HOLE|KEEP_SIZE), copy_file_range,
// lseek SEEK_DATA / SEEK_HOLE on a sparse file, and statfs/statvfs.
import Glibc
import XCTest
import LinuxGNU

final class SpaceTests: MountTestCase {
    private let block = 4096

    func testFallocate() {
        guard let fds = openBoth("f", O_CREAT | O_RDWR) else { return }
        same("fallocate 0..1MiB", on: fds, expect: Outcome.success()) { fd in Sys.call { LinuxCalls.fallocate(fd, 0, 0, 1 << 20) } }
        same("size after fallocate", on: fds, expect: 1 << 20) { fd in Sys.fstat(fd).0?.size ?? -1 }
        same("fallocate KEEP_SIZE beyond EOF", on: fds, expect: Outcome.success()) { fd in
            Sys.call { LinuxCalls.fallocate(fd, Linux.FALLOC_FL_KEEP_SIZE, 1 << 20, 1 << 20) }
        }
        same("size kept", on: fds, expect: 1 << 20) { fd in Sys.fstat(fd).0?.size ?? -1 }
        same("blocks cover 2 MiB", on: fds, expect: true) { fd in (Sys.fstat(fd).0?.blocks ?? 0) * 512 >= 2 << 20 }
        same("write data", on: fds, expect: Outcome.success(1 << 20)) { fd in Sys.write(fd, [UInt8](repeating: 0xAB, count: 1 << 20), at: 0) }
        same("PUNCH_HOLE|KEEP_SIZE 64K..192K", on: fds, expect: Outcome.success()) { fd in
            Sys.call { LinuxCalls.fallocate(fd, Linux.FALLOC_FL_PUNCH_HOLE | Linux.FALLOC_FL_KEEP_SIZE, 65_536, 131_072) }
        }
        same("the hole reads zeros", on: fds, expect: [UInt8](repeating: 0, count: 131_072)) { fd in Sys.read(fd, count: 131_072, at: 65_536).0 }
        same("data around the hole kept", on: fds, expect: [UInt8]([0xAB, 0xAB])) { fd in
            Sys.read(fd, count: 1, at: 65_535).0 + Sys.read(fd, count: 1, at: 196_608).0
        }
        same("size kept after punching", on: fds, expect: 1 << 20) { fd in Sys.fstat(fd).0?.size ?? -1 }
        same("SEEK_HOLE finds the punched hole", on: fds, expect: Outcome.success(65_536)) { fd in Sys.lseek(fd, 0, Linux.SEEK_HOLE) }
        same("PUNCH_HOLE without KEEP_SIZE", on: fds, expect: Outcome.failure(EOPNOTSUPP)) { fd in
            Sys.call { LinuxCalls.fallocate(fd, Linux.FALLOC_FL_PUNCH_HOLE, 0, 4096) }
        }
        same("ZERO_RANGE", on: fds) { fd in Sys.call { LinuxCalls.fallocate(fd, Linux.FALLOC_FL_ZERO_RANGE, 0, 4096) } }
        same("fallocate a negative length", on: fds, expect: Outcome.failure(EINVAL)) { fd in Sys.call { LinuxCalls.fallocate(fd, 0, 0, -1) } }
        closeBoth(fds)
        guard let ro = openBoth("f", O_RDONLY) else { return }
        same("fallocate on a read-only fd", on: ro, expect: Outcome.failure(EBADF)) { fd in Sys.call { LinuxCalls.fallocate(fd, 0, 0, 4096) } }
        closeBoth(ro)
    }

    func testCopyFileRange() {
        let data = pattern(300_000, seed: 11)
        prepare("put src") { s in Sys.put(s("src"), data) }
        prepare("put dst") { s in Sys.put(s("dst"), [UInt8](repeating: 1, count: 10)) }
        guard let src = openBoth("src", O_RDONLY), let dst = openBoth("dst", O_RDWR) else { return }
        let fds = Pair(native: (src.native, dst.native), mnt: (src.mnt, dst.mnt))
        same("copy_file_range 200000 from 1000 to 5", on: fds, expect: Outcome.success(200_000)) { pair in
            var inOff = 1000, outOff = 5
            return Sys.call { LinuxCalls.copyFileRange(pair.0, &inOff, pair.1, &outOff, 200_000, 0) }
        }
        same("copy with file positions", on: fds) { pair in
            _ = Sys.lseek(pair.0, 299_000, SEEK_SET)
            _ = Sys.lseek(pair.1, 0, SEEK_END)
            return Sys.call { LinuxCalls.copyFileRange(pair.0, nil, pair.1, nil, 5000, 0) }
        }
        same("positions moved", on: fds) { pair in "\(Sys.lseek(pair.0, 0, SEEK_CUR)) \(Sys.lseek(pair.1, 0, SEEK_CUR))" }
        same("copy at EOF returns 0", on: fds, expect: Outcome.success(0)) { pair in
            var inOff = 300_000, outOff = 0
            return Sys.call { LinuxCalls.copyFileRange(pair.0, &inOff, pair.1, &outOff, 10, 0) }
        }
        same("copy_file_range with flags", on: fds, expect: Outcome.failure(EINVAL)) { pair in
            var inOff = 0, outOff = 0
            return Sys.call { LinuxCalls.copyFileRange(pair.0, &inOff, pair.1, &outOff, 10, 1) }
        }
        same("copy into a read-only fd", on: Pair(native: (src.native, src.native), mnt: (src.mnt, src.mnt)), expect: Outcome.failure(EBADF)) { pair in
            var inOff = 0, outOff = 0
            return Sys.call { LinuxCalls.copyFileRange(pair.0, &inOff, pair.1, &outOff, 10, 0) }
        }
        closeBoth(src)
        closeBoth(dst)
        same("destination content") { s in Sys.contents(s("dst")).0.map(Tree.fnv) ?? 0 }
        same("destination size", expect: 201_005) { s in Sys.lstat(s("dst")).0?.size ?? -1 }
    }

    func testSeekDataAndHole() {
        guard let fds = openBoth("sparse", O_CREAT | O_RDWR) else { return }
        // Layout: hole [0, 1M), data [1M, 1M+8K), hole up to 3M, data [3M, 3M+4K), EOF at 4M.
        same("write at 1 MiB", on: fds, expect: Outcome.success(8192)) { fd in Sys.write(fd, pattern(8192), at: 1 << 20) }
        same("write at 3 MiB", on: fds, expect: Outcome.success(4096)) { fd in Sys.write(fd, pattern(4096), at: 3 << 20) }
        same("ftruncate 4 MiB", on: fds, expect: Outcome.success()) { fd in Sys.call { ftruncate(fd, 4 << 20) } }
        same("fsync", on: fds, expect: Outcome.success()) { fd in Sys.call { fsync(fd) } }
        let probes: [(Int, Int32, String)] = [
            (0, Linux.SEEK_DATA, "SEEK_DATA 0"), (0, Linux.SEEK_HOLE, "SEEK_HOLE 0"),
            ((1 << 20) + 100, Linux.SEEK_DATA, "SEEK_DATA inside data"), ((1 << 20) + 100, Linux.SEEK_HOLE, "SEEK_HOLE inside data"),
            (2 << 20, Linux.SEEK_DATA, "SEEK_DATA 2M"), ((3 << 20) + 4096, Linux.SEEK_HOLE, "SEEK_HOLE after last data"),
            ((3 << 20) + 4096, Linux.SEEK_DATA, "SEEK_DATA after last data"), (4 << 20, Linux.SEEK_DATA, "SEEK_DATA at EOF"),
            (4 << 20, Linux.SEEK_HOLE, "SEEK_HOLE at EOF"), (-1, Linux.SEEK_DATA, "SEEK_DATA negative"),
        ]
        for (offset, whence, name) in probes {
            same(name, on: fds) { fd in Sys.lseek(fd, offset, whence) }
        }
        XCTAssertEqual(Sys.lseek(fds.mnt, 0, Linux.SEEK_DATA), .success(1 << 20), "SEEK_DATA through the mount")
        XCTAssertEqual(Sys.lseek(fds.mnt, 0, Linux.SEEK_HOLE), .success(0), "SEEK_HOLE through the mount")
        same("st_blocks of the sparse file", on: fds) { fd in Sys.fstat(fd).0?.blocks ?? -1 }
        closeBoth(fds)
    }

    func testStatfs() {
        var n = statvfs(), m = statvfs()
        let on = Sys.call { statvfs(native.root, &n) }, om = Sys.call { statvfs(mnt.root, &m) }
        XCTAssertEqual(on, om, "statvfs: native gave \(on), mount gave \(om)")
        XCTAssertEqual(n.f_bsize, m.f_bsize, "statvfs f_bsize")
        XCTAssertEqual(n.f_frsize, m.f_frsize, "statvfs f_frsize")
        XCTAssertEqual(n.f_blocks, m.f_blocks, "statvfs f_blocks")
        XCTAssertEqual(n.f_files, m.f_files, "statvfs f_files")
        XCTAssertEqual(n.f_namemax, m.f_namemax, "statvfs f_namemax")
        // Free space moves with other writers on the machine: allow 1% of the disk.
        let slack = Double(n.f_blocks) / 100
        XCTAssertLessThanOrEqual(abs(Double(n.f_bfree) - Double(m.f_bfree)), slack, "statvfs f_bfree")
        XCTAssertLessThanOrEqual(abs(Double(n.f_bavail) - Double(m.f_bavail)), slack, "statvfs f_bavail")
        XCTAssertLessThanOrEqual(abs(Double(n.f_ffree) - Double(m.f_ffree)), Double(n.f_files) / 100, "statvfs f_ffree")
        if target.isMount {
            XCTAssertEqual(Sys.filesystemType(mnt.root), Linux.FUSE_SUPER_MAGIC, "statfs f_type: the mount is not a FUSE filesystem")
        }
        same("statvfs of a file path", expect: Outcome.success()) { s in
            var v = statvfs()
            _ = Sys.put(s("f"), [])
            return Sys.call { statvfs(s("f"), &v) }
        }
        same("statvfs missing", expect: Outcome.failure(ENOENT)) { s in
            var v = statvfs()
            return Sys.call { statvfs(s("missing"), &v) }
        }
    }
}
