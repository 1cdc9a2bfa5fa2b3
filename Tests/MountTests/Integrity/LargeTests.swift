// Scale: a sparse file larger than 4 GiB, and a directory of 20,000 entries.
import Glibc
import XCTest

final class LargeTests: MountTestCase {
    func testSparseFileBeyond4GiB() {
        let fiveGiB = 5 << 30
        let marker = Array("past the 32-bit limit".utf8)
        guard let fds = openBoth("huge", O_CREAT | O_RDWR) else { return }
        same("pwrite at 5 GiB", on: fds, expect: Outcome.success(marker.count)) { fd in Sys.write(fd, marker, at: fiveGiB) }
        same("size", on: fds, expect: fiveGiB + marker.count) { fd in Sys.fstat(fd).0?.size ?? -1 }
        same("allocated blocks stay small", on: fds, expect: true) { fd in (Sys.fstat(fd).0?.blocks ?? .max) < 1024 }
        for offset in [0, 4096, (4 << 30) - 1, 4 << 30, (4 << 30) + 12345, fiveGiB - 4096] {
            same("a hole at \(offset) reads zeros", on: fds, expect: [UInt8](repeating: 0, count: 4096)) { fd in Sys.read(fd, count: 4096, at: offset).0 }
        }
        same("data at 5 GiB", on: fds, expect: marker) { fd in Sys.read(fd, count: 100, at: fiveGiB).0 }
        same("SEEK_DATA from 0", on: fds) { fd in Sys.lseek(fd, 0, Linux.SEEK_DATA) }
        same("SEEK_HOLE from 0", on: fds, expect: Outcome.success(0)) { fd in Sys.lseek(fd, 0, Linux.SEEK_HOLE) }
        same("SEEK_DATA from 4 GiB + 1", on: fds) { fd in Sys.lseek(fd, (4 << 30) + 1, Linux.SEEK_DATA) }
        XCTAssertEqual(Sys.lseek(fds.mnt, 0, Linux.SEEK_DATA).ret & ~4095, fiveGiB, "SEEK_DATA through the mount does not find the data at 5 GiB")
        same("lseek SEEK_END", on: fds, expect: Outcome.success(fiveGiB + marker.count)) { fd in Sys.lseek(fd, 0, SEEK_END) }
        same("a write just below 4 GiB", on: fds, expect: Outcome.success(8)) { fd in Sys.write(fd, [1, 2, 3, 4, 5, 6, 7, 8], at: (4 << 30) - 4) }
        same("read across the 4 GiB boundary", on: fds, expect: [UInt8]([0, 1, 2, 3, 4, 5, 6, 7, 8, 0])) { fd in Sys.read(fd, count: 10, at: (4 << 30) - 5).0 }
        same("ftruncate to 6 GiB", on: fds, expect: Outcome.success()) { fd in Sys.call { ftruncate(fd, off_t(6 << 30)) } }
        same("ftruncate back to 4 GiB + 2", on: fds, expect: Outcome.success()) { fd in Sys.call { ftruncate(fd, off_t((4 << 30) + 2)) } }
        same("tail after shrinking", on: fds, expect: [UInt8]([5, 6])) { fd in Sys.read(fd, count: 10, at: 4 << 30).0 }
        closeBoth(fds)
        XCTAssertEqual(Sys.lstat(backing("huge")).0?.size, (4 << 30) + 2, "backing size")
        let o = Sys.open(backing("huge"), O_RDONLY)
        if o.ok {
            XCTAssertEqual(Sys.read(Int32(o.ret), count: 6, at: (4 << 30) - 4).0, [1, 2, 3, 4, 5, 6], "backing content across 4 GiB")
            close(Int32(o.ret))
        }
    }

    func testDirectoryOf20000Entries() {
        let count = 20_000
        XCTAssertEqual(Sys.call { mkdir(mnt("many"), 0o755) }, .success())
        XCTAssertEqual(Sys.call { mkdir(native("many"), 0o755) }, .success())
        let names = (0..<count).map { "entry-\(String($0, radix: 36))-" + String(repeating: "x", count: $0 % 40) }
        for side in [native!, mnt!] {
            for (i, name) in names.enumerated() {
                let o = Sys.open(side("many/" + name), O_CREAT | O_EXCL | O_WRONLY, 0o644)
                guard o.ok else { return XCTFail("create \(side) many/\(name) (#\(i)): \(o)") }
                if i % 1000 == 0 { _ = Sys.write(Int32(o.ret), Array(name.utf8)) }
                close(Int32(o.ret))
            }
        }
        let listed = same("readdir 20000 entries") { s in Sys.readdir(s("many")).0 }
        XCTAssertEqual(listed.count, count)
        XCTAssertEqual(Set(listed.map(\.name)), Set(names), "the listing does not hold every created name")
        XCTAssertTrue(listed.allSatisfy { $0.type == UInt8(DT_REG) })
        XCTAssertEqual(Sys.readdir(backing("many")).0.count, count, "backing does not hold 20000 entries")
        // stat every entry (what ls -l does); sizes must match.
        var mismatches: [String] = []
        for (i, name) in names.enumerated() {
            let n = Sys.lstat(native("many/" + name)).0, m = Sys.lstat(mnt("many/" + name)).0
            if m == nil || n.map({ !$0.sameShape(as: m!) }) ?? true { mismatches.append("\(name): native \(n?.shape ?? "-") mount \(m?.shape ?? "-")") }
            if i % 1000 == 0 { XCTAssertEqual(m?.size, name.utf8.count) }
        }
        XCTAssertTrue(mismatches.isEmpty, "\(mismatches.count) entries differ, first: \(mismatches.prefix(3))")
        sameMeta("many")
        for side in [native!, mnt!] {
            for name in names {
                let o = Sys.call { unlink(side("many/" + name)) }
                guard o.ok else { return XCTFail("unlink \(side) many/\(name): \(o)") }
            }
        }
        same("empty after removing all", expect: [Sys.Entry]()) { s in Sys.readdir(s("many")).0 }
        same("rmdir many", expect: Outcome.success()) { s in Sys.call { rmdir(s("many")) } }
    }
}
