/// Records in the log's stored form (`RecordCodec` frames: length, CRC-32C, payload), for passing
/// them on unchanged, such as over the control socket to a user who may not read the log's files.
public enum RecordFrames {
    /// The frames of `records`, back to back.
    public static func encode(_ records: [EventRecord]) -> [UInt8] {
        var out: [UInt8] = []
        for r in records { RecordCodec.appendFrame(r, to: &out) }
        return out
    }

    /// Appends the frame of one record.
    public static func append(_ record: EventRecord, to out: inout [UInt8]) {
        RecordCodec.appendFrame(record, to: &out)
    }

    /// The records of frames made by `encode`.
    /// - Throws: `EventLogError.corrupt` for a cut frame, a wrong checksum or an unreadable record.
    public static func decode(_ bytes: [UInt8]) throws -> [EventRecord] {
        var records: [EventRecord] = []
        try bytes.withUnsafeBytes { raw in
            var at = 0
            while at < raw.count {
                guard raw.count - at >= RecordCodec.frameHeaderSize else { throw EventLogError.corrupt("a frame cut short") }
                let length = Int(UInt32(littleEndian: raw.loadUnaligned(fromByteOffset: at, as: UInt32.self)))
                let crc = UInt32(littleEndian: raw.loadUnaligned(fromByteOffset: at + 4, as: UInt32.self))
                let start = at + RecordCodec.frameHeaderSize
                guard length <= RecordCodec.maxPayloadSize, raw.count - start >= length else { throw EventLogError.corrupt("a frame cut short") }
                let payload = UnsafeRawBufferPointer(rebasing: raw[start..<(start + length)])
                guard CRC32.checksum(payload) == crc else { throw EventLogError.corrupt("a frame with a wrong checksum") }
                records.append(try RecordCodec.decode(payload))
                at = start + length
            }
        }
        return records
    }
}
