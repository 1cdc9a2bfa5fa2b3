import NameBytes

/// The fields of records in their stored form (`RecordCodec`): everything but the frame header and
/// the fixed payload prefix (version, kind, seq, time), which the writer adds when it gives each
/// record its seq.
///
/// For a producer that turns many steps into records, such as the daemon's event recorder: it writes
/// each field straight into bytes, without building an `EventRecord` (a 320-byte value with its
/// strings) that would only be encoded and thrown away, and it can keep the bytes of fields that
/// several records repeat (a request's items) and copy them. Decoding does not depend on the order
/// of fields.
package struct RecordFields {
    /// The encoded fields.
    package private(set) var buffer = ByteBuffer()

    package init() {}

    /// The encoded fields, as an array (tests).
    package var bytes: [UInt8] { buffer.array }

    package var count: Int { buffer.count }

    /// The item's path, `/` followed by `components` joined with `/` (the root has none).
    package mutating func path(_ components: [String]) { appendPath(.path, components) }

    /// The source path of a move, like `path`.
    package mutating func oldPath(_ components: [String]) { appendPath(.oldPath, components) }

    package mutating func actor(pid: Int32, uid: UInt32, executable: String?) {
        RecordCodec.appendActor(pid: pid, uid: uid, executable: executable, to: &buffer)
    }

    package mutating func intent(_ v: IntentKind) { RecordCodec.appendString(.intent, v.rawValue, to: &buffer) }

    /// The intent field of a write (`true`) or a read: the same bytes as `intent(.write)` or
    /// `intent(.read)`, stored as one constant (tag 16 << 1 | 1, length, the name).
    package mutating func intent(write: Bool) {
        // Little-endian: 0x21, the length, then "write" or "read".
        let word: UInt64 = write ? 0x00_65_74_69_72_77_05_21 : 0x00_00_64_61_65_72_04_21
        buffer.append(upTo: 8) { p in
            p.storeBytes(of: word.littleEndian, as: UInt64.self)
            return write ? 7 : 6
        }
    }

    /// One reading or writing option by its Foundation name (repeat for several).
    package mutating func option(_ name: String) { RecordCodec.appendString(.option, name, to: &buffer) }

    package mutating func requestID(_ v: UInt64) { RecordCodec.appendVarintField(.requestID, v, to: &buffer) }

    package mutating func latencyMicros(_ v: UInt64) { RecordCodec.appendVarintField(.latencyMicros, v, to: &buffer) }

    /// The fields of a `denied` record: the errno, a short reason and a message.
    package mutating func failure(errno: Int32, reason: String, message: String) {
        RecordCodec.appendVarintField(.errno, RecordCodec.zigzag(Int64(errno)), to: &buffer)
        RecordCodec.appendString(.reason, reason, to: &buffer)
        RecordCodec.appendString(.message, message, to: &buffer)
    }

    /// A reason and a message on a record that is not a failure (a `granted` that went ahead
    /// without exclusion).
    package mutating func note(reason: String, message: String) {
        RecordCodec.appendString(.reason, reason, to: &buffer)
        RecordCodec.appendString(.message, message, to: &buffer)
    }

    /// Fields encoded elsewhere, whole.
    package mutating func appendEncoded(_ bytes: UnsafeRawBufferPointer) { buffer.append(contentsOf: bytes) }

    /// Drops the fields from `offset` on.
    package mutating func removeSuffix(from offset: Int) { buffer.removeSuffix(from: offset) }

    /// The `bytes` detail.
    package mutating func bytes(_ v: UInt64) { RecordCodec.appendVarintField(.bytes, v, to: &buffer) }

    /// Every field of `record` (its seq, time and kind aside).
    package mutating func fields(of record: borrowing EventRecord) { RecordCodec.appendFields(of: record, to: &buffer) }

    /// Copies fields encoded elsewhere: `other.bytes[range]`, which must start and end at field
    /// boundaries.
    package mutating func append(_ other: borrowing RecordFields, _ range: Range<Int>) {
        buffer.append(other.buffer, range)
    }

    package mutating func removeAll() { buffer.removeAll(keepingCapacity: buffer.capacity <= 1 << 20) }

    private mutating func appendPath(_ field: RecordCodec.Field, _ components: [String]) {
        // "/" before each component; the root is "/" alone.
        var length = components.isEmpty ? 1 : components.count
        for c in components { length += c.utf8.count }
        if length <= RecordCodec.maxStringBytes {
            var plain = true
            // The tag and the length (at most 2 + 3 bytes), then the path, written in place.
            buffer.append(upTo: 5 + length) { p in
                var at = RecordCodec.storeVarint(field.rawValue << 1 | 1, at: 0, in: p)
                at = RecordCodec.storeVarint(UInt64(length), at: at, in: p)
                if components.isEmpty {
                    p.storeBytes(of: UInt8(ascii: "/"), toByteOffset: at, as: UInt8.self)
                    return at + 1
                }
                for c in components {
                    p.storeBytes(of: UInt8(ascii: "/"), toByteOffset: at, as: UInt8.self)
                    at += 1
                    // 0xF4 leads the escape scalars of names that are not UTF-8 (`LosslessName`):
                    // a path with one is encoded below instead (nothing of it is kept).
                    // (Read in place: `withUTF8` is mutating, and a copy of the name to call it
                    // on was a retain and a release a component.)
                    let copied = c.utf8.withContiguousStorageIfAvailable { u -> Bool in
                        if u.contains(0xF4) { return false }
                        if let base = u.baseAddress { (p + at).copyMemory(from: base, byteCount: u.count) }
                        return true
                    } ?? false
                    if !copied {
                        guard LosslessName.isPlain(c) else {
                            plain = false
                            return 0
                        }
                        var c = c
                        c.withUTF8 { u in if let base = u.baseAddress { (p + at).copyMemory(from: base, byteCount: u.count) } }
                    }
                    at += c.utf8.count
                }
                return at
            }
            if plain { return }
        }
        // A name that is not UTF-8 is stored as its bytes (`RecordCodec.appendString`).
        // Beyond any real path; let the string encoder cut it at a character boundary.
        RecordCodec.appendString(field, "/" + components.joined(separator: "/"), to: &buffer)
    }
}

/// Records whose fields are encoded (`RecordFields`), each with its kind and the time its step
/// happened, for `EventLogWriter.append(encoded:)`.
package struct EncodedRecords {
    /// The fields of all records, back to back.
    package var fields = RecordFields()
    /// Each record's kind, time, and the end of its fields in `fields`.
    private(set) var records: [(kind: EventKind, time: EventTime, end: Int)] = []

    package init() {}

    package var count: Int { records.count }
    package var isEmpty: Bool { records.isEmpty }

    /// Ends a record: the fields appended since the previous one are its fields.
    package mutating func finish(_ kind: EventKind, at time: EventTime) {
        records.append((kind, time, fields.count))
    }

    /// Appends `record` whole, as having happened at `time`.
    package mutating func append(_ record: borrowing EventRecord, at time: EventTime) {
        fields.fields(of: record)
        finish(record.kind, at: time)
    }

    /// The stored size of the last record's fields.
    package var lastSize: Int { records.isEmpty ? 0 : records[records.count - 1].end - (records.count > 1 ? records[records.count - 2].end : 0) }

    /// Takes the last record out: its kind, time and fields.
    package mutating func removeLast() -> (kind: EventKind, time: EventTime, fields: [UInt8]) {
        let last = records.removeLast()
        let start = records.last?.end ?? 0
        let bytes = fields.buffer.withUnsafeBytes { Array($0[start..<last.end]) }
        fields.removeSuffix(from: start)
        return (last.kind, last.time, bytes)
    }

    /// Appends a record whose fields are `bytes` (as `removeLast` gave them).
    package mutating func append(kind: EventKind, time: EventTime, fields bytes: [UInt8]) {
        bytes.withUnsafeBytes { fields.appendEncoded($0) }
        finish(kind, at: time)
    }

    package mutating func removeAll() {
        fields.removeAll()
        records.removeAll(keepingCapacity: records.capacity <= 1 << 14)
    }

    /// Calls `body` with each record's kind, time and fields, in order.
    package func forEach(_ body: (EventKind, EventTime, UnsafeRawBufferPointer) -> Void) {
        fields.buffer.withUnsafeBytes { all in
            var start = 0
            for r in records {
                body(r.kind, r.time, UnsafeRawBufferPointer(rebasing: all[start..<r.end]))
                start = r.end
            }
        }
    }
}
