// File operations the tests make through the mount, from this process (so the records' actor is
// this process) with plain system calls.
import Glibc
import XCTest

enum FileOps {
    /// Creates or truncates `path` and writes `text`.
    static func put(_ path: String, _ text: String, file: StaticString = #filePath, line: UInt = #line) {
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard fd >= 0 else { return XCTFail("open \(path): \(String(cString: strerror(errno)))", file: file, line: line) }
        let bytes = Array(text.utf8)
        if !bytes.isEmpty { XCTAssertEqual(write(fd, bytes, bytes.count), bytes.count, "write \(path)", file: file, line: line) }
        close(fd)
    }

    /// Reads `path` whole.
    static func get(_ path: String) -> String? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var out: [UInt8] = []
        var buf = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = read(fd, &buf, buf.count)
            if n <= 0 { break }
            out += buf[0..<n]
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Opens `path` read-only and closes it, `times` times: three records each (requested,
    /// granted, released). Stops at the first error and returns how many succeeded.
    @discardableResult
    static func openClose(_ path: String, times: Int) -> Int {
        for i in 0..<times {
            let fd = open(path, O_RDONLY | O_CLOEXEC)
            if fd < 0 { return i }
            close(fd)
        }
        return times
    }

    static func check(_ rc: Int32, _ what: String, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertEqual(rc, 0, "\(what): \(String(cString: strerror(errno)))", file: file, line: line)
    }
}
