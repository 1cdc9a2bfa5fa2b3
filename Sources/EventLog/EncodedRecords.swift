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
    package private(set) var bytes: [UInt8] = []

    package init() {}

    package var count: Int { bytes.count }

    /// The item's path, `/` followed by `components` joined with `/` (the root has none).
    package mutating func path(_ components: [String]) { appendPath(.path, components) }

    /// The source path of a move, like `path`.
    package mutating func oldPath(_ components: [String]) { appendPath(.oldPath, components) }

    package mutating func actor(pid: Int32, uid: UInt32, executable: String?) {
        RecordCodec.appendActor(pid: pid, uid: uid, executable: executable, to: &bytes)
    }

    package mutating func intent(_ v: IntentKind) { RecordCodec.appendString(.intent, v.rawValue, to: &bytes) }

    /// One reading or writing option by its Foundation name (repeat for several).
    package mutating func option(_ name: String) { RecordCodec.appendString(.option, name, to: &bytes) }

    package mutating func requestID(_ v: UInt64) { RecordCodec.appendVarintField(.requestID, v, to: &bytes) }

    package mutating func latencyMicros(_ v: UInt64) { RecordCodec.appendVarintField(.latencyMicros, v, to: &bytes) }

    /// The fields of a `denied` record: the errno, a short reason and a message.
    package mutating func failure(errno: Int32, reason: String, message: String) {
        RecordCodec.appendVarintField(.errno, RecordCodec.zigzag(Int64(errno)), to: &bytes)
        RecordCodec.appendString(.reason, reason, to: &bytes)
        RecordCodec.appendString(.message, message, to: &bytes)
    }

    /// A reason and a message on a record that is not a failure (a `granted` that went ahead
    /// without exclusion).
    package mutating func note(reason: String, message: String) {
        RecordCodec.appendString(.reason, reason, to: &bytes)
        RecordCodec.appendString(.message, message, to: &bytes)
    }

    /// Every field of `record` (its seq, time and kind aside).
    package mutating func fields(of record: borrowing EventRecord) { RecordCodec.appendFields(of: record, to: &bytes) }

    /// Copies fields encoded elsewhere: `other.bytes[range]`, which must start and end at field
    /// boundaries.
    package mutating func append(_ other: borrowing RecordFields, _ range: Range<Int>) {
        bytes.append(contentsOf: other.bytes[range])
    }

    package mutating func removeAll() { bytes.removeAll(keepingCapacity: bytes.capacity <= 1 << 20) }

    private mutating func appendPath(_ field: RecordCodec.Field, _ components: [String]) {
        // "/" before each component; the root is "/" alone.
        var length = components.isEmpty ? 1 : components.count
        for c in components { length += c.utf8.count }
        guard length <= RecordCodec.maxStringBytes, components.allSatisfy(LosslessName.isPlain) else {
            // A name that is not UTF-8 is stored as its bytes (`RecordCodec.appendString`).
            // Beyond any real path; let the string encoder cut it at a character boundary.
            RecordCodec.appendString(field, "/" + components.joined(separator: "/"), to: &bytes)
            return
        }
        RecordCodec.appendVarint(field.rawValue << 1 | 1, to: &bytes)
        RecordCodec.appendVarint(UInt64(length), to: &bytes)
        if components.isEmpty { bytes.append(UInt8(ascii: "/")) }
        for c in components {
            bytes.append(UInt8(ascii: "/"))
            var c = c
            c.withUTF8 { bytes.append(contentsOf: $0) }
        }
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

    package mutating func removeAll() {
        fields.removeAll()
        records.removeAll(keepingCapacity: records.capacity <= 1 << 14)
    }

    /// Calls `body` with each record's kind, time and fields, in order.
    func forEach(_ body: (EventKind, EventTime, UnsafeRawBufferPointer) -> Void) {
        fields.bytes.withUnsafeBytes { all in
            var start = 0
            for r in records {
                body(r.kind, r.time, UnsafeRawBufferPointer(rebasing: all[start..<r.end]))
                start = r.end
            }
        }
    }
}
