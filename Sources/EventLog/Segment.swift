import Glibc
import Linux

/// One file of the log: `segment-<first seq, 20 digits>.evlog`, a 16-byte header
/// (`CFSEVLOG` + u64 LE first seq) followed by framed records (see `RecordCodec`).
/// Segments are created under a temporary name and renamed into place with their header already
/// written, so a reader never sees a segment without a header.
struct SegmentName: Comparable, Hashable, Sendable {
    static let prefix = "segment-"
    static let suffix = ".evlog"
    static let headerSize = 16
    static let magic: [UInt8] = Array("CFSEVLOG".utf8)

    let firstSeq: UInt64

    var fileName: String {
        let digits = String(firstSeq)
        return SegmentName.prefix + String(repeating: "0", count: max(0, 20 - digits.count)) + digits
            + SegmentName.suffix
    }

    init(firstSeq: UInt64) { self.firstSeq = firstSeq }

    /// Parses a directory entry name; nil when it is not a segment.
    init?(fileName: String) {
        guard fileName.hasPrefix(SegmentName.prefix), fileName.hasSuffix(SegmentName.suffix) else { return nil }
        let digits = fileName.dropFirst(SegmentName.prefix.count).dropLast(SegmentName.suffix.count)
        guard digits.count == 20, let v = UInt64(digits) else { return nil }
        firstSeq = v
    }

    static func < (a: SegmentName, b: SegmentName) -> Bool { a.firstSeq < b.firstSeq }

    static func header(firstSeq: UInt64) -> [UInt8] {
        var h = magic
        var x = firstSeq
        for _ in 0..<8 {
            h.append(UInt8(truncatingIfNeeded: x))
            x >>= 8
        }
        return h
    }

    /// Checks the header of an open segment against its name.
    func validateHeader(fd: Int32, path: String) throws {
        var h = [UInt8](repeating: 0, count: SegmentName.headerSize)
        let n = try h.withUnsafeMutableBytes { (p) throws -> Int in
            try Sys.pread(fd, p.baseAddress!, SegmentName.headerSize, 0, path: path)
        }
        guard n == SegmentName.headerSize else { throw EventLogError.notASegment(path: HeldPath.shown(path), reason: "shorter than its header") }
        guard Array(h[0..<8]) == SegmentName.magic else { throw EventLogError.notASegment(path: HeldPath.shown(path), reason: "bad magic") }
        var seq: UInt64 = 0
        for i in (8..<16).reversed() { seq = seq << 8 | UInt64(h[i]) }
        guard seq == firstSeq else {
            throw EventLogError.notASegment(path: HeldPath.shown(path), reason: "header says first seq \(seq), name says \(firstSeq)")
        }
    }

    /// The segments in `directory`, oldest first.
    static func list(directory: String) throws -> [SegmentName] {
        guard let dir = opendir(directory) else {
            throw EventLogError.failed(operation: "opendir", path: directory, errno: errno)
        }
        defer { closedir(dir) }
        var names: [SegmentName] = []
        while let entry = readdir(dir) {
            let name = withUnsafePointer(to: &entry.pointee.d_name) {
                $0.withMemoryRebound(to: CChar.self, capacity: Int(NAME_MAX) + 1) { String(cString: $0) }
            }
            if let s = SegmentName(fileName: name) { names.append(s) }
        }
        return names.sorted()
    }
}
