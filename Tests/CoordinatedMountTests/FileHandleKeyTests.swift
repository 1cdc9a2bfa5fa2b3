import XCTest
import Glibc
import LinuxGNU

/// `FileHandleKey`, the kernel file handles the backing watcher and `PassthroughWrites` look files
/// up by: equal exactly for the same type and bytes, however long, whether made from a handle the
/// kernel gave or from an event's bytes in place.
final class FileHandleKeyTests: XCTestCase {
    private func key(_ type: Int32, _ bytes: [UInt8]) -> FileHandleKey { FileHandleKey(type: type, bytes: bytes) }

    func testKeysAreEqualExactlyForTheSameTypeAndBytes() {
        for n in [0, 1, 7, 8, 9, 16, 24, 31, 32, 33, 40, 64, 128] {
            let bytes = (0..<n).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) }
            let a = key(1, bytes)
            let b = bytes.withUnsafeBytes { FileHandleKey(type: 1, bytes: $0) }
            XCTAssertEqual(a, b, "\(n) bytes")
            XCTAssertEqual(a.hashValue, b.hashValue, "\(n) bytes")
            XCTAssertEqual(a.kernelHandle, LinuxCalls.KernelFileHandle(bytes: bytes, type: 1), "the handle back, \(n) bytes")
            XCTAssertNotEqual(a, key(2, bytes), "another type, \(n) bytes")
            XCTAssertNotEqual(a, key(1, bytes + [0]), "one zero byte more than \(n)")
            for i in 0..<n {
                var other = bytes
                other[i] ^= 0x40
                XCTAssertNotEqual(a, key(1, other), "byte \(i) of \(n)")
            }
        }
        XCTAssertNotEqual(key(1, []), key(1, [0]))
    }

    func testADictionaryFindsEachOfManyKeys() {
        var table: [FileHandleKey: Int] = [:]
        let handles = (0..<500).map { i -> [UInt8] in
            var h = (0..<[8, 12, 20, 40, 128][i % 5]).map { UInt8(truncatingIfNeeded: $0) }
            h[h.count - 1] = UInt8(truncatingIfNeeded: i)
            h[h.count - 2] = UInt8(truncatingIfNeeded: i >> 8)
            return h
        }
        for (i, h) in handles.enumerated() { table[key(1, h)] = i }
        XCTAssertEqual(table.count, 500)
        for h in handles { XCTAssertEqual(table[key(1, h)].map { handles[$0] }, h) }
    }

    /// The kernel's handle of a file, by two descriptors of it, is one key; another file's is not.
    func testAFilesHandleThroughTwoDescriptorsIsOneKey() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("coordfs-handle-key-\(getpid())").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let a = open(dir + "/a", O_CREAT | O_RDWR | O_CLOEXEC, 0o644), a2 = open(dir + "/a", O_RDONLY | O_CLOEXEC)
        let b = open(dir + "/b", O_CREAT | O_RDWR | O_CLOEXEC, 0o644)
        defer { close(a); close(a2); close(b) }
        XCTAssertTrue(a >= 0 && a2 >= 0 && b >= 0)
        let ha = try XCTUnwrap(LinuxCalls.identityHandle(of: a)), ha2 = try XCTUnwrap(LinuxCalls.identityHandle(of: a2))
        let hb = try XCTUnwrap(LinuxCalls.identityHandle(of: b))
        XCTAssertEqual(FileHandleKey(ha), FileHandleKey(ha2))
        XCTAssertEqual(FileHandleKey(ha).kernelHandle, ha)
        XCTAssertNotEqual(FileHandleKey(ha), FileHandleKey(hb))
    }
}
