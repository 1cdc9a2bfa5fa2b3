// Concurrent writers through the mount: threads writing different files, and threads writing
// different ranges of one file; everything is then verified through the backing folder.
import Foundation
import Glibc
import XCTest

final class ConcurrencyTests: MountTestCase {
    override var comparesTreesAtEnd: Bool { false }

    /// The bytes thread `t` writes at `chunk` (distinct per thread and chunk).
    private static func block(thread t: Int, chunk c: Int, size: Int) -> [UInt8] {
        var rng = SeededRandom(seed: UInt64(t) << 32 | UInt64(c))
        return (0..<size).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
    }

    func testWritersToDifferentFiles() {
        let threads = 6, chunks = 64, size = 16_384
        let mntRoot = mnt.root
        let failures = Mutexed<[String]>([])
        DispatchQueue.concurrentPerform(iterations: threads) { t in
            let path = "\(mntRoot)/file-\(t)"
            let o = Sys.open(path, O_CREAT | O_WRONLY | O_TRUNC, 0o644)
            guard o.ok else { return failures.mutate { $0.append("open \(path): \(o)") } }
            let fd = Int32(o.ret)
            for c in 0..<chunks {
                let w = Sys.write(fd, Self.block(thread: t, chunk: c, size: size))
                if w != .success(size) { failures.mutate { $0.append("thread \(t) chunk \(c): \(w)") }; break }
            }
            let closed = Sys.call { close(fd) }
            if !closed.ok { failures.mutate { $0.append("close \(path): \(closed)") } }
        }
        XCTAssertEqual(failures.value, [])
        for t in 0..<threads {
            let expected = (0..<chunks).flatMap { Self.block(thread: t, chunk: $0, size: size) }
            XCTAssertEqual(Sys.contents(backing("file-\(t)")).0.map(Tree.fnv), Tree.fnv(expected), "backing file-\(t) differs")
            XCTAssertEqual(Sys.contents(mnt("file-\(t)")).0.map(Tree.fnv), Tree.fnv(expected), "file-\(t) through the mount differs")
        }
    }

    func testWritersToDifferentRangesOfOneFile() {
        let threads = 8, chunks = 48, size = 8192
        let path = mnt("shared")
        XCTAssertEqual(Sys.put(path, []), .success())
        let failures = Mutexed<[String]>([])
        DispatchQueue.concurrentPerform(iterations: threads) { t in
            // Each thread has its own open file description; ranges interleave: chunk c of
            // thread t lands at (c * threads + t) * size.
            let o = Sys.open(path, O_WRONLY)
            guard o.ok else { return failures.mutate { $0.append("open: \(o)") } }
            let fd = Int32(o.ret)
            for c in 0..<chunks {
                let w = Sys.write(fd, Self.block(thread: t, chunk: c, size: size), at: (c * threads + t) * size)
                if w != .success(size) { failures.mutate { $0.append("thread \(t) chunk \(c): \(w)") }; break }
            }
            if fsync(fd) != 0 { failures.mutate { $0.append("fsync: \(errno)") } }
            close(fd)
        }
        XCTAssertEqual(failures.value, [])
        var expected: [UInt8] = []
        for c in 0..<chunks { for t in 0..<threads { expected += Self.block(thread: t, chunk: c, size: size) } }
        let disk = Sys.contents(backing("shared")).0 ?? []
        XCTAssertEqual(disk.count, expected.count, "backing size")
        if disk != expected, let i = zip(disk, expected).enumerated().first(where: { $0.element.0 != $0.element.1 })?.offset {
            XCTFail("backing differs first at byte \(i) (chunk \(i / size / threads), thread \(i / size % threads))")
        }
        XCTAssertEqual(Sys.contents(mnt("shared")).0.map(Tree.fnv), Tree.fnv(expected), "content through the mount differs")
    }
}
