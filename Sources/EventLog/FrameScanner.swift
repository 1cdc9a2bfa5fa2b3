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
