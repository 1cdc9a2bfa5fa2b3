import NameBytes

/// The binary form of one record inside a segment.
///
/// Frame: `u32 LE payload length` `u32 LE CRC-32 of the payload` `payload`.
/// Payload: `u8 format version (1)` `u8 kind code` `u64 LE seq` `i64 LE time (ms)` then fields as
/// `varint tag` (`field number << 1 | wire type`) with wire type 0 = varint, 1 = varint length +
/// bytes. Absent optional fields are not written; unknown field numbers are skipped, so a newer
/// writer can add fields without breaking older readers. A string field holds bytes: UTF-8 text,
/// or for a name that is not UTF-8 the name's own bytes (read back losslessly, `LosslessName`).
enum RecordCodec {
    static let formatVersion: UInt8 = 1
    static let frameHeaderSize = 8
    /// Fixed payload prefix: version, kind, seq, time.
    static let fixedPayloadSize = 18
    /// A frame larger than this is treated as damage, never as a record.
    static let maxPayloadSize = 1 << 20
    /// Strings are cut to this many bytes so a record always fits a frame.
    /// 64 KiB: a path the mount coordinates (`MountPath.maxLength`) is kept whole.
    static let maxStringBytes = 64 * 1024
    static let maxOptions = 32

    enum Field: UInt64 {
        case path = 1, oldPath, documentID, actorPID, actorUID, actorExecutable
        case intent = 16, option, requestID, presenterID, ask, latencyMicros, snapshotMethod, bytes
        case versionID, resolution, errno, reason, message, gapFrom, gapTo
    }

    // MARK: Encoding

    /// Appends the framed record to `out`.
    static func appendFrame<Out: ByteSink>(_ r: EventRecord, to out: inout Out) {
        let start = beginFrame(kind: r.kind, seq: r.seq, time: r.time, to: &out)
        appendFields(of: r, to: &out)
        endFrame(at: start, in: &out)
    }

    /// Appends the frame of a record whose fields (everything after the fixed payload prefix) are
    /// already encoded (`EncodedRecords`).
    static func appendFrame<Out: ByteSink>(
        kind: EventKind, seq: UInt64, time: EventTime, fields: UnsafeRawBufferPointer, to out: inout Out
    ) {
        let start = beginFrame(kind: kind, seq: seq, time: time, to: &out)
        out.append(contentsOf: fields)
        endFrame(at: start, in: &out)
    }

    /// Appends the frame header (to be filled by `endFrame`) and the fixed payload prefix; returns
    /// where the frame starts.
    private static func beginFrame<Out: ByteSink>(kind: EventKind, seq: UInt64, time: EventTime, to out: inout Out) -> Int {
        let start = out.count
        // Built on the stack and appended at once (one capacity check, not one a byte).
        var prefix: (UInt64, UInt64, UInt64, UInt16) = (0, 0, 0, 0)
        withUnsafeMutableBytes(of: &prefix) { p in
            p[frameHeaderSize] = formatVersion
            p[frameHeaderSize + 1] = kind.code
            p.storeBytes(of: seq.littleEndian, toByteOffset: frameHeaderSize + 2, as: UInt64.self)
            p.storeBytes(of: UInt64(bitPattern: time.millisecondsSinceEpoch).littleEndian, toByteOffset: frameHeaderSize + 10, as: UInt64.self)
            out.append(contentsOf: UnsafeRawBufferPointer(rebasing: p[0..<(frameHeaderSize + fixedPayloadSize)]))
        }
        return start
    }

    /// Fills in the header of the frame that starts at `start` and runs to the end of `out`.
    private static func endFrame<Out: ByteSink>(at start: Int, in out: inout Out) {
        let payloadCount = out.count - start - frameHeaderSize
        let crc = out.withUnsafeBytes {
            CRC32.checksum(UnsafeRawBufferPointer(rebasing: $0[(start + frameHeaderSize)...]))
        }
        out.store((UInt64(UInt32(payloadCount)) | UInt64(crc) << 32).littleEndian, at: start)
    }

    /// Appends the fields of `r`: everything but the fixed payload prefix.
    static func appendFields<Out: ByteSink>(of r: borrowing EventRecord, to out: inout Out) {
        appendString(.path, r.path, to: &out)
        if let v = r.oldPath { appendString(.oldPath, v, to: &out) }
        if let v = r.documentID { appendString(.documentID, v, to: &out) }
        if let a = r.actor { appendActor(pid: a.pid, uid: a.uid, executable: a.executable, to: &out) }
        let d = r.details
        if let v = d.intent { appendString(.intent, v.rawValue, to: &out) }
        for option in d.options.prefix(maxOptions) { appendString(.option, option, to: &out) }
        if let v = d.requestID { appendVarintField(.requestID, v, to: &out) }
        if let v = d.presenterID { appendString(.presenterID, v, to: &out) }
        if let v = d.ask { appendString(.ask, v.rawValue, to: &out) }
        if let v = d.latencyMicros { appendVarintField(.latencyMicros, v, to: &out) }
        if let v = d.snapshotMethod { appendString(.snapshotMethod, v.rawValue, to: &out) }
        if let v = d.bytes { appendVarintField(.bytes, v, to: &out) }
        if let v = d.versionID { appendString(.versionID, v, to: &out) }
        if let v = d.resolution { appendString(.resolution, v.rawValue, to: &out) }
        if let v = d.errno { appendVarintField(.errno, zigzag(Int64(v)), to: &out) }
        if let v = d.reason { appendString(.reason, v, to: &out) }
        if let v = d.message { appendString(.message, v, to: &out) }
        if let v = d.gapFrom { appendVarintField(.gapFrom, v, to: &out) }
        if let v = d.gapTo { appendVarintField(.gapTo, v, to: &out) }
    }

    static func appendActor<Out: ByteSink>(pid: Int32, uid: UInt32, executable: String?, to out: inout Out) {
        appendVarintField(.actorPID, zigzag(Int64(pid)), to: &out)
        appendVarintField(.actorUID, UInt64(uid), to: &out)
        if let e = executable { appendString(.actorExecutable, e, to: &out) }
    }

    static func zigzag(_ v: Int64) -> UInt64 { UInt64(bitPattern: (v << 1) ^ (v >> 63)) }
    private static func unzigzag(_ v: UInt64) -> Int64 { Int64(bitPattern: v >> 1) ^ -Int64(bitPattern: v & 1) }

    static func appendVarint<Out: ByteSink>(_ v: UInt64, to out: inout Out) {
        if v < 0x80 { return out.append(UInt8(v)) }
        // Written in place (one capacity check, not one a byte; no copy).
        out.append(upTo: 10) { storeVarint(v, at: 0, in: $0) }
    }

    /// Writes `v` as a varint at `offset` of `p` (which has room: at most 10 bytes); returns the
    /// offset after it.
    @inline(__always)
    static func storeVarint(_ v: UInt64, at offset: Int, in p: UnsafeMutableRawPointer) -> Int {
        var x = v
        var i = offset
        while x >= 0x80 {
            p.storeBytes(of: UInt8(truncatingIfNeeded: x) | 0x80, toByteOffset: i, as: UInt8.self)
            x >>= 7
            i += 1
        }
        p.storeBytes(of: UInt8(x), toByteOffset: i, as: UInt8.self)
        return i + 1
    }

    static func appendVarintField<Out: ByteSink>(_ f: Field, _ v: UInt64, to out: inout Out) {
        appendVarints(f.rawValue << 1, v, to: &out)
    }

    /// The tag of a string (bytes) field and the length of its bytes, which the caller appends.
    static func appendStringHeader<Out: ByteSink>(_ f: Field, length: Int, to out: inout Out) {
        appendVarints(f.rawValue << 1 | 1, UInt64(length), to: &out)
    }

    /// Two varints in one append (one capacity check, not one a byte).
    @inline(__always)
    private static func appendVarints<Out: ByteSink>(_ a: UInt64, _ b: UInt64, to out: inout Out) {
        // Written in place: a ByteBuffer reserves the room and the varints are stored there (a
        // copy through the stack and memcpy cost about 70 instructions a field).
        out.append(upTo: 20) { p in storeVarint(b, at: storeVarint(a, at: 0, in: p), in: p) }
    }

    /// A string field: the bytes `s` holds (`LosslessName`: a name that is not UTF-8 is stored as
    /// its own bytes, as it is on disk).
    static func appendString<Out: ByteSink>(_ f: Field, _ s: String, to out: inout Out) {
        var s = s
        // One look at the bytes for the usual string: short, and no byte 0xF4 (the only lead byte
        // of the escape scalars of names that are not UTF-8, `LosslessName`).
        let done = s.withUTF8 { u -> Bool in
            guard u.count <= maxStringBytes, !u.contains(0xF4) else { return false }
            appendStringHeader(f, length: u.count, to: &out)
            out.append(contentsOf: u)
            return true
        }
        if done { return }
        appendVarint(f.rawValue << 1 | 1, to: &out)
        if !LosslessName.isPlain(s) {
            let bytes = s.nameBytes
            appendVarint(UInt64(min(bytes.count, maxStringBytes)), to: &out)
            bytes.withUnsafeBytes { out.append(contentsOf: UnsafeRawBufferPointer(rebasing: $0.prefix(maxStringBytes))) }
            return
        }
        s.withUTF8 { u in
            // Cut long strings at a UTF-8 scalar boundary so the stored text stays valid.
            var n = min(u.count, maxStringBytes)
            while n < u.count, n > 0, u[n] & 0xC0 == 0x80 { n -= 1 }
            appendVarint(UInt64(n), to: &out)
            out.append(contentsOf: UnsafeBufferPointer(rebasing: u[0..<n]))
        }
    }

    // MARK: Decoding

    /// The seq of a payload without decoding the rest (payload must be at least the fixed size).
    static func peekSeq(_ payload: UnsafeRawBufferPointer) -> UInt64 {
        UInt64(littleEndian: payload.loadUnaligned(fromByteOffset: 2, as: UInt64.self))
    }

    /// Decodes a payload whose checksum has already been verified.
    static func decode(_ p: UnsafeRawBufferPointer) throws -> EventRecord {
        guard p.count >= fixedPayloadSize else { throw EventLogError.corrupt("record shorter than its fixed header") }
        guard p[0] == formatVersion else { throw EventLogError.corrupt("record format version \(p[0]) is not supported") }
        guard let kind = EventKind(code: p[1]) else {
            throw EventLogError.corrupt("unknown record kind code \(p[1]) (written by a newer coordfs?)")
        }
        let seq = UInt64(littleEndian: p.loadUnaligned(fromByteOffset: 2, as: UInt64.self))
        let ms = Int64(littleEndian: p.loadUnaligned(fromByteOffset: 10, as: Int64.self))
        var r = EventRecord(seq: seq, time: EventTime(millisecondsSinceEpoch: ms), kind: kind, path: "")
        var pid: Int32?
        var uid: UInt32?
        var exe: String?
        var i = fixedPayloadSize

        func varint() throws -> UInt64 {
            var v: UInt64 = 0
            var shift: UInt64 = 0
            while true {
                guard i < p.count, shift < 64 else { throw EventLogError.corrupt("truncated varint") }
                let b = p[i]
                i += 1
                v |= UInt64(b & 0x7F) << shift
                if b < 0x80 { return v }
                shift += 7
            }
        }
        func bytes() throws -> UnsafeRawBufferPointer {
            let n = try varint()
            guard n <= UInt64(p.count - i) else { throw EventLogError.corrupt("field longer than its record") }
            let slice = UnsafeRawBufferPointer(rebasing: p[i..<(i + Int(n))])
            i += Int(n)
            return slice
        }
        func string() throws -> String {
            String(nameBytes: try bytes())
        }

        while i < p.count {
            let tag = try varint()
            let wire = tag & 1
            guard let field = Field(rawValue: tag >> 1) else {
                // Unknown field from a newer writer: skip it.
                if wire == 0 { _ = try varint() } else { _ = try bytes() }
                continue
            }
            let wantsBytes: Bool
            switch field {
            case .actorPID, .actorUID, .requestID, .latencyMicros, .bytes, .errno, .gapFrom, .gapTo:
                wantsBytes = false
            default:
                wantsBytes = true
            }
            guard (wire == 1) == wantsBytes else { throw EventLogError.corrupt("field \(field) has the wrong wire type") }
            switch field {
            case .path: r.path = try string()
            case .oldPath: r.oldPath = try string()
            case .documentID: r.documentID = try string()
            case .actorPID: pid = Int32(truncatingIfNeeded: unzigzag(try varint()))
            case .actorUID: uid = UInt32(truncatingIfNeeded: try varint())
            case .actorExecutable: exe = try string()
            case .intent: r.details.intent = IntentKind(rawValue: try string())
            case .option: r.details.options.append(try string())
            case .requestID: r.details.requestID = try varint()
            case .presenterID: r.details.presenterID = try string()
            case .ask: r.details.ask = LoggedAsk(rawValue: try string())
            case .latencyMicros: r.details.latencyMicros = try varint()
            case .snapshotMethod: r.details.snapshotMethod = Recorded(rawValue: try string())
            case .bytes: r.details.bytes = try varint()
            case .versionID: r.details.versionID = try string()
            case .resolution: r.details.resolution = Recorded(rawValue: try string())
            case .errno: r.details.errno = Int32(truncatingIfNeeded: unzigzag(try varint()))
            case .reason: r.details.reason = try string()
            case .message: r.details.message = try string()
            case .gapFrom: r.details.gapFrom = try varint()
            case .gapTo: r.details.gapTo = try varint()
            }
        }
        if let pid, let uid { r.actor = EventActor(pid: pid, uid: uid, executable: exe) }
        return r
    }
}
