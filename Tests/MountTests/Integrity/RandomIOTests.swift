// Random reads, writes and truncates at random offsets through the mount, checked after every
// read against an in-memory model of the file, and at checkpoints against the backing file.
// Seeded: a failure prints the seed and the operation number to replay it
// (COORDFS_TEST_SEED=<seed>).
import Foundation
import Glibc
import XCTest

final class RandomIOTests: MountTestCase {
    override var comparesTreesAtEnd: Bool { false }   // only the mount side is exercised

    private var seed: UInt64 {
        ProcessInfo.processInfo.environment["COORDFS_TEST_SEED"].flatMap { UInt64($0) } ?? 0xC00D_F5
    }

    func testRandomReadsWritesTruncatesAgainstAModel() {
        let operations = 5000
        var rng = SeededRandom(seed: seed)
        var model: [UInt8] = []
        let maxSize = 1 << 20
        // Two descriptors on the same file: what one writes the other must read.
        let path = mnt("model.bin")
        let a = Sys.open(path, O_CREAT | O_RDWR | O_TRUNC, 0o644)
        guard a.ok else { return XCTFail("open \(path) O_CREAT|O_RDWR|O_TRUNC: \(a)") }
        defer { close(Int32(a.ret)) }
        let b = Sys.open(path, O_RDWR)
        guard b.ok else { return XCTFail("a second open of \(path) O_RDWR, while the first is open: \(b)") }
        defer { close(Int32(b.ret)) }
        let fds = [Int32(a.ret), Int32(b.ret)]
        var counts: [String: Int] = [:]
        for n in 0..<operations {
            let fd = fds[Int(rng.next() % 2)]
            let roll = rng.next() % 100
            let where_ = "seed \(seed) op \(n)"
            switch roll {
            case 0..<45:   // write
                let offset = Int(rng.next() % UInt64(maxSize))
                let length = Int(rng.next() % 4 == 0 ? rng.next() % 100_000 : rng.next() % 5000) + 1
                let bytes = randomBytes(length, &rng)
                let o = Sys.write(fd, bytes, at: offset)
                guard o == .success(length) else { return XCTFail("\(where_): pwrite \(length) at \(offset) gave \(o)") }
                if model.count < offset + length { model += [UInt8](repeating: 0, count: offset + length - model.count) }
                model.replaceSubrange(offset..<(offset + length), with: bytes)
                counts["write", default: 0] += 1
            case 45..<85:  // read
                let offset = Int(rng.next() % UInt64(maxSize + 100_000))
                let length = Int(rng.next() % 100_000) + 1
                let (got, o) = Sys.read(fd, count: length, at: offset)
                let expected = offset < model.count ? Array(model[offset..<min(model.count, offset + length)]) : []
                guard o.ok, got == expected else {
                    let firstBad = zip(got, expected).enumerated().first { $0.element.0 != $0.element.1 }?.offset
                    return XCTFail("\(where_): pread \(length) at \(offset) gave \(got.count) bytes (\(o)), model has \(expected.count); first difference at +\(firstBad.map(String.init) ?? "length")")
                }
                counts["read", default: 0] += 1
            case 85..<93:  // truncate (shrink or grow)
                let size = Int(rng.next() % UInt64(maxSize))
                let o = Sys.call { ftruncate(fd, off_t(size)) }
                guard o.ok else { return XCTFail("\(where_): ftruncate \(size) gave \(o)") }
                if size < model.count { model.removeSubrange(size...) } else { model += [UInt8](repeating: 0, count: size - model.count) }
                counts["truncate", default: 0] += 1
            case 93..<98:  // size
                let size = Sys.fstat(fd).0?.size
                guard size == model.count else { return XCTFail("\(where_): fstat size \(size ?? -1), model \(model.count)") }
                counts["fstat", default: 0] += 1
            default:       // checkpoint: fsync, then the backing file must equal the model
                _ = Sys.call { fsync(fd) }
                guard let disk = Sys.contents(backing("model.bin")).0, disk == model else {
                    return XCTFail("\(where_): the backing file differs from the model (backing \(Sys.lstat(backing("model.bin")).0?.size ?? -1) bytes, model \(model.count))")
                }
                counts["checkpoint", default: 0] += 1
            }
        }
        XCTAssertEqual(Sys.contents(mnt("model.bin")).0, model, "final content through the mount differs from the model")
        XCTAssertEqual(Sys.contents(backing("model.bin")).0, model, "final backing content differs from the model")
        XCTAssertGreaterThan(counts["checkpoint", default: 0], 10)
        print("random I/O, seed \(seed): \(counts.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")), final size \(model.count)")
    }

    /// `count` random bytes, filled a word at a time (a byte at a time is slow in debug builds).
    private func randomBytes(_ count: Int, _ rng: inout SeededRandom) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: (count + 7) & ~7)
        bytes.withUnsafeMutableBytes { raw in
            let words = raw.bindMemory(to: UInt64.self)
            for i in 0..<words.count { words[i] = rng.next() }
        }
        return Array(bytes.prefix(count))
    }
}
