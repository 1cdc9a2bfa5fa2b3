/// Frames on the control socket: a 4-byte big-endian payload length, then that many bytes of one
/// UTF-8 JSON object. No other framing, no padding.
package enum Framing {
    /// Default (and documented) largest payload: 1 MiB.
    package static let defaultMaxFrameSize = 1 << 20
    /// Bytes in the length prefix.
    package static let headerSize = 4

    /// Prepends the length prefix to `payload`.
    package static func frame(_ payload: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(payload.count + headerSize)
        appendFrame(payload, to: &out)
        return out
    }

    /// Appends one frame (prefix and payload) to `out`.
    package static func appendFrame(_ payload: [UInt8], to out: inout [UInt8]) {
        let length = UInt32(truncatingIfNeeded: payload.count)
        out.append(UInt8(truncatingIfNeeded: length >> 24))
        out.append(UInt8(truncatingIfNeeded: length >> 16))
        out.append(UInt8(truncatingIfNeeded: length >> 8))
        out.append(UInt8(truncatingIfNeeded: length))
        out.append(contentsOf: payload)
    }
}

/// Splits a byte stream into frame payloads, however the stream was chunked by `read`.
///
/// Rejects a length prefix above the maximum as soon as the 4 bytes are in (before buffering the
/// payload), a zero length, and (at `finish()`) a stream that ends inside a frame.
package struct FrameDecoder: Sendable {
    package let maxFrameSize: Int
    private var buffer: [UInt8] = []
    private var consumed = 0

    package init(maxFrameSize: Int = Framing.defaultMaxFrameSize) {
        self.maxFrameSize = maxFrameSize
    }

    /// Bytes received but not yet returned as a frame.
    package var bufferedByteCount: Int { buffer.count - consumed }

    /// Adds bytes read from the stream.
    package mutating func append(_ bytes: some Sequence<UInt8>) {
        compact()
        buffer.append(contentsOf: bytes)
    }

    /// Adds bytes read from the stream.
    package mutating func append(_ bytes: UnsafeRawBufferPointer) {
        compact()
        buffer.append(contentsOf: bytes)
    }

    /// The next complete payload, or `nil` if more bytes are needed.
    package mutating func nextFrame() throws(ProtocolError) -> [UInt8]? {
        let available = buffer.count - consumed
        guard available >= Framing.headerSize else { return nil }
        let length = Int(buffer[consumed]) << 24 | Int(buffer[consumed + 1]) << 16
            | Int(buffer[consumed + 2]) << 8 | Int(buffer[consumed + 3])
        if length > maxFrameSize {
            throw ProtocolError(.frameTooLarge, "frame of \(length) bytes exceeds the maximum of \(maxFrameSize) bytes")
        }
        if length == 0 {
            throw ProtocolError(.malformedFrame, "empty frame (length 0); a frame holds one JSON object")
        }
        guard available - Framing.headerSize >= length else { return nil }
        let start = consumed + Framing.headerSize
        let payload = Array(buffer[start..<(start + length)])
        consumed = start + length
        if consumed == buffer.count {
            // Drop a large buffer once drained so an idle connection holds no memory.
            if buffer.capacity > 64 * 1024 { buffer = [] } else { buffer.removeAll(keepingCapacity: true) }
            consumed = 0
        }
        return payload
    }

    /// Call at end of stream: throws `truncatedFrame` if a partial frame is buffered.
    package func finish() throws(ProtocolError) {
        let available = buffer.count - consumed
        if available > 0 {
            throw ProtocolError(.truncatedFrame, "connection closed after \(available) bytes of an incomplete frame")
        }
    }

    private mutating func compact() {
        if consumed > 0 {
            buffer.removeFirst(consumed)
            consumed = 0
        }
    }
}
