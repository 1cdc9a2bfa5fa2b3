import Glibc

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
        guard n == SegmentName.headerSize else { throw EventLogError.notASegment(path: path, reason: "shorter than its header") }
        guard Array(h[0..<8]) == SegmentName.magic else { throw EventLogError.notASegment(path: path, reason: "bad magic") }
        var seq: UInt64 = 0
        for i in (8..<16).reversed() { seq = seq << 8 | UInt64(h[i]) }
        guard seq == firstSeq else {
            throw EventLogError.notASegment(path: path, reason: "header says first seq \(seq), name says \(firstSeq)")
        }
    }

    /// The segments in `directory`, oldest first.
    static func list(directory: String) throws -> [SegmentName] {
        guard let dir = opendir(directory) else {
            throw EventLogError.system(operation: "opendir", path: directory, errno: errno)
        }
        defer { closedir(dir) }
        var names: [SegmentName] = []
        while let entry = readdir(dir) {
            let name = withUnsafePointer(to: entry.pointee.d_name) {
                $0.withMemoryRebound(to: CChar.self, capacity: Int(NAME_MAX) + 1) { String(cString: $0) }
            }
            if let s = SegmentName(fileName: name) { names.append(s) }
        }
        return names.sorted()
    }
}

/// Walks the frames of one segment file through a read buffer. Used by the writer's recovery scan
/// and by readers following a file that is still growing.
struct FrameScanner {
    enum Step {
        /// A complete frame with a valid checksum; its payload is at `payload` in `buffer`.
        case frame(payload: Range<Int>)
        /// No complete frame at `offset`: `partialBytes` bytes of an unfinished frame follow it
        /// (0 = a clean end). The frame may still be being written, or be a torn tail.
        case end(partialBytes: Int)
        /// The bytes at `offset` cannot be a frame (bad length or checksum).
        case damaged(String)
    }

    let fd: Int32
    let path: String
    /// File offset of the next frame.
    private(set) var offset: Int
    private(set) var buffer: [UInt8]
    /// File offset of `buffer[0]` and the number of valid bytes.
    private var bufferStart: Int
    private var bufferCount = 0
    /// Size of the last frame returned, consumed by `advance()`.
    private var pendingFrameSize = 0

    init(fd: Int32, path: String, offset: Int = SegmentName.headerSize, bufferSize: Int = 256 * 1024) {
        self.fd = fd
        self.path = path
        self.offset = offset
        self.bufferStart = offset
        buffer = [UInt8](repeating: 0, count: bufferSize)
    }

    /// Makes `[offset, offset + need)` available in the buffer if the file has it; returns how many
    /// bytes from `offset` are available (possibly fewer than `need`).
    private mutating func ensure(_ need: Int) throws -> Int {
        let have = bufferStart + bufferCount - offset
        if have >= need { return have }
        // Compact: keep the bytes from `offset` on, then read more after them.
        let keep = max(0, have)
        if keep > 0 && offset > bufferStart {
            buffer.withUnsafeMutableBytes { p in
                p.baseAddress!.copyMemory(from: p.baseAddress! + (offset - bufferStart), byteCount: keep)
            }
        }
        bufferStart = offset
        bufferCount = keep
        if need > buffer.count { buffer.append(contentsOf: repeatElement(0, count: need - buffer.count)) }
        let room = buffer.count - bufferCount
        let fileOffset = bufferStart + bufferCount
        let fd = self.fd
        let path = self.path
        let count = bufferCount
        let n = try buffer.withUnsafeMutableBytes { (p) throws -> Int in
            try Sys.pread(fd, p.baseAddress! + count, room, fileOffset, path: path)
        }
        bufferCount += n
        return bufferCount
    }

    /// Looks at the frame at `offset` without consuming it.
    mutating func next() throws -> Step {
        let header = RecordCodec.frameHeaderSize
        let have = try ensure(header)
        if have < header { return forgetTail(.end(partialBytes: have)) }
        let base = offset - bufferStart
        let (length, crc) = buffer.withUnsafeBytes { p in
            (Int(UInt32(littleEndian: p.loadUnaligned(fromByteOffset: base, as: UInt32.self))),
             UInt32(littleEndian: p.loadUnaligned(fromByteOffset: base + 4, as: UInt32.self)))
        }
        guard length >= RecordCodec.fixedPayloadSize, length <= RecordCodec.maxPayloadSize else {
            return forgetTail(.damaged("frame length \(length) at offset \(offset) of \(path)"))
        }
        let have2 = try ensure(header + length)
        if have2 < header + length { return forgetTail(.end(partialBytes: have2)) }
        let start = offset - bufferStart + header
        let actual = buffer.withUnsafeBytes { CRC32.checksum(UnsafeRawBufferPointer(rebasing: $0[start..<(start + length)])) }
        guard actual == crc else {
            return forgetTail(.damaged("checksum mismatch at offset \(offset) of \(path)"))
        }
        pendingFrameSize = header + length
        return .frame(payload: start..<(start + length))
    }

    /// Consumes the frame returned by the last `next()`.
    mutating func advance() {
        offset += pendingFrameSize
        pendingFrameSize = 0
    }

    /// Drops buffered bytes from `offset` on, so the next look re-reads them from the file:
    /// a live segment may have grown, or been truncated and rewritten by a restarted writer.
    private mutating func forgetTail(_ step: Step) -> Step {
        bufferCount = max(0, offset - bufferStart)
        pendingFrameSize = 0
        return step
    }
}
