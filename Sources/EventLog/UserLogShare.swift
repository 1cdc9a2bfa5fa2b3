/// One user's share of the log (`-o log_user_share`, docs/event-log.md, "Each user's share"):
/// retention drops the oldest segments whoever wrote them, so without a bound one user of an
/// `allow_other` mount creating and deleting files in a loop would push everyone's history out of
/// the log (and cover its own tracks). This counts, per uid, the bytes of that uid's records still
/// stored; once a uid's records take `limitBytes`, its further records are not stored one by one
/// but summarised in `coalesced` records (how many of each kind, the first and last item, from when
/// to when, the bytes they would have taken), one when it reaches its share and then one per
/// `summaryMillis` while it stays over it. Exempt uids (root, the mount's owner) are never
/// summarised; records without an actor are not counted. When retention has deleted enough of the
/// uid's old records, its records are stored one by one again (after a last summary).
///
/// A value type, kept by the daemon's record formatter under its lock. The caller finishes each
/// record in an `EncodedRecords`, then calls `admit`, which takes the record out again if it is
/// summarised; after handing the records to the writer it calls `settle` with the writer's last
/// seq and oldest stored seq, so that what retention deleted stops counting.
package struct UserLogShare {
    /// Bytes of records one uid may have in the stored log.
    package let limitBytes: UInt64
    /// The share as the option gave it (for messages).
    package let percent: Int
    /// The log's size limit (for messages).
    package let logBytes: UInt64
    /// uids never summarised (root, the mount's owner).
    package let exempt: Set<UInt32>
    /// How often a summary is written while a uid stays over its share.
    package let summaryMillis: Int64

    /// The stored size of a record beyond its fields: frame header (length, CRC) and the payload's
    /// fixed prefix (version, kind, seq, time).
    static let frameOverhead = 26

    /// Bytes per uid in stored records, per range of seqs: `sealed` buckets end at a known seq, the
    /// open one holds what was admitted since the last seal.
    private var sealed: [(lastSeq: UInt64, bytes: [UInt32: UInt64])] = []
    private var open: [UInt32: UInt64] = [:]
    private var openBytes: UInt64 = 0
    /// Per uid: bytes in `sealed` and `open` together.
    private var totals: [UInt32: UInt64] = [:]
    /// A bucket is sealed once it holds this many bytes (or while someone is summarised).
    private let bucketBytes: UInt64

    /// Uids over their share now, with what is not yet said of them.
    private var pending: [UInt32: Pending] = [:]

    /// Records summarised since the mount, of every uid (the metrics' counter).
    package private(set) var summarisedRecords: UInt64 = 0

    struct Pending {
        /// When the uid reached its share.
        var reached: EventTime
        /// When the summary now being gathered began (the first record in it, or the last summary).
        var since: EventTime
        var counts: [EventKind: UInt64] = [:]
        var records: UInt64 = 0
        var bytes: UInt64 = 0
        var firstTime: EventTime?
        var lastTime: EventTime?
        /// The fields of the first and the last record summarised (for their items and actor).
        var first: [UInt8]?
        var last: [UInt8]?
        /// Summaries written for this uid since it reached its share, and what they summarised.
        var summaries: UInt64 = 0
        var totalRecords: UInt64 = 0
    }

    /// `percent` (1 to 100) of `logBytes`, the log's size limit; 100 turns it off.
    package init(percent: Int, logBytes: UInt64, exempt: Set<UInt32>, summaryMillis: Int64 = 10_000) {
        self.percent = percent
        self.logBytes = logBytes
        self.limitBytes = logBytes / 100 * UInt64(max(1, min(percent, 100)))
        self.exempt = exempt
        self.summaryMillis = summaryMillis
        bucketBytes = max(4096, limitBytes / 16)
    }

    /// Off (a share of 100%).
    package var isOff: Bool { percent >= 100 }

    /// Bytes `uid`'s records take in the stored log (as far as counted since the mount).
    package func usage(of uid: UInt32) -> UInt64 { totals[uid] ?? 0 }

    /// Uids summarised now.
    package var summarised: Set<UInt32> { Set(pending.keys) }

    /// A uid summarised now, as `coordfs status` shows it.
    package struct Summarised: Sendable, Equatable {
        package var uid: UInt32
        /// When it reached its share.
        package var since: EventTime
        /// Its records summarised since then (written in `coalesced` records, or gathered for the next).
        package var records: UInt64
        /// Bytes its records take in the stored log (`usage`), against `limitBytes`.
        package var bytes: UInt64
    }

    /// The uids summarised now, by uid.
    package var summarisedUsers: [Summarised] {
        pending.keys.sorted().map { uid in
            let p = pending[uid]!
            return Summarised(uid: uid, since: p.reached, records: p.totalRecords + p.records, bytes: usage(of: uid))
        }
    }

    /// Whether a summary waits for its time (a uid over its share that went quiet): the writer's
    /// retention check pulls the recorder, which writes it once due (`emitDue`).
    package var hasUnsaid: Bool { pending.values.contains { $0.records > 0 } }

    /// Whether anything is waiting to be said (`emitDue`).
    package var hasPending: Bool { !pending.isEmpty }

    /// Whether `settle` has work (a bucket to seal, or someone summarised who may have room again).
    package var wantsSettle: Bool { openBytes >= bucketBytes || !pending.isEmpty }

    /// Looks at the last record finished in `records`, made by `uid`: counts it, or, if `uid` is
    /// over its share, takes it out again and counts it into its summary (writing the first
    /// summary when `uid` just reached it). When `uid` has room again, its last summary is written
    /// before the record.
    package mutating func admit(uid: UInt32, into records: inout EncodedRecords) {
        if uid == 0 || isOff || exempt.contains(uid) { return }
        let size = UInt64(records.lastSize + Self.frameOverhead)
        if pending[uid] != nil {
            if usage(of: uid) + size <= limitBytes {
                // Retention made room: say what was summarised, then store this one.
                let record = records.removeLast()
                summarise(uid, at: record.time, into: &records, final: true)
                pending[uid] = nil
                records.append(kind: record.kind, time: record.time, fields: record.fields)
                count(uid, size)
                return
            }
            let record = records.removeLast()
            note(uid, record, size)
            if record.time.millisecondsSinceEpoch - pending[uid]!.since.millisecondsSinceEpoch >= summaryMillis {
                summarise(uid, at: record.time, into: &records, final: false)
            }
            return
        }
        if usage(of: uid) + size <= limitBytes {
            count(uid, size)
            return
        }
        // Reached: this record and the uid's next ones are summarised; say so at once.
        let record = records.removeLast()
        pending[uid] = Pending(reached: record.time, since: record.time)
        note(uid, record, size)
        reached(uid, record, into: &records)
    }

    /// Writes the summaries that are due by `now` (of uids that went quiet), or all of them when
    /// `force` (the log is closing).
    package mutating func emitDue(now: EventTime, into records: inout EncodedRecords, force: Bool = false) {
        for uid in pending.keys.sorted() {
            guard let p = pending[uid], p.records > 0 else { continue }
            if force || now.millisecondsSinceEpoch - p.since.millisecondsSinceEpoch >= summaryMillis {
                summarise(uid, at: now, into: &records, final: false)
            }
        }
    }

    /// After the records admitted so far were appended: `lastSeq` is the writer's last seq, and
    /// `oldestSeq` the oldest it still stores; what retention deleted stops counting.
    package mutating func settle(lastSeq: UInt64, oldestSeq: UInt64?) {
        if openBytes > 0 && (openBytes >= bucketBytes || !pending.isEmpty) {
            sealed.append((lastSeq, open))
            open = [:]
            openBytes = 0
        }
        guard let oldest = oldestSeq else { return }
        var dropped = 0
        for bucket in sealed {
            guard bucket.lastSeq < oldest else { break }
            for (uid, bytes) in bucket.bytes {
                let left = (totals[uid] ?? 0) - min(bytes, totals[uid] ?? 0)
                totals[uid] = left == 0 ? nil : left
            }
            dropped += 1
        }
        if dropped > 0 { sealed.removeFirst(dropped) }
    }

    // MARK: Private

    private mutating func count(_ uid: UInt32, _ size: UInt64) {
        open[uid, default: 0] += size
        openBytes += size
        totals[uid, default: 0] += size
    }

    private mutating func note(_ uid: UInt32, _ record: (kind: EventKind, time: EventTime, fields: [UInt8]), _ size: UInt64) {
        summarisedRecords += 1
        pending[uid]!.counts[record.kind, default: 0] += 1
        pending[uid]!.records += 1
        pending[uid]!.bytes += size
        if pending[uid]!.first == nil {
            pending[uid]!.first = record.fields
            pending[uid]!.firstTime = record.time
        }
        pending[uid]!.last = record.fields
        pending[uid]!.lastTime = record.time
    }

    private var shareText: String {
        "log_user_share=\(percent): \(limitBytes) of \(logBytes) bytes"
    }

    /// The first `coalesced` record of a uid that reached its share.
    private mutating func reached(_ uid: UInt32, _ record: (kind: EventKind, time: EventTime, fields: [UInt8]), into records: inout EncodedRecords) {
        var fields = RecordFields()
        Self.appendField(1, of: record.fields, to: &fields, as: 1)
        fields.actor(pid: Self.pid(in: record.fields), uid: uid, executable: nil)
        fields.note(reason: Self.reason, message: "uid \(uid) reached its share of the log (\(shareText)): its records are summarised from here, every \(summaryMillis / 1000) s while it stays over it")
        fields.bytes(0)
        let size = UInt64(fields.count + Self.frameOverhead)
        fields.buffer.withUnsafeBytes { records.fields.appendEncoded($0) }
        records.finish(.coalesced, at: record.time)
        count(uid, size)
    }

    /// A `coalesced` record of what was gathered for `uid`; starts gathering again (`final`: the
    /// uid has room again).
    private mutating func summarise(_ uid: UInt32, at time: EventTime, into records: inout EncodedRecords, final: Bool) {
        guard var p = pending[uid] else { return }
        if p.records > 0, let first = p.first, let last = p.last {
            var fields = RecordFields()
            Self.appendField(1, of: first, to: &fields, as: 1)
            Self.appendField(1, of: last, to: &fields, as: 2)
            fields.actor(pid: Self.pid(in: last), uid: uid, executable: nil)
            let kinds = p.counts.sorted { $0.key.code < $1.key.code }.map { "\($0.key.rawValue) \($0.value)" }.joined(separator: ", ")
            let span = "\(p.firstTime?.iso8601 ?? "?") to \(p.lastTime?.iso8601 ?? "?")"
            p.summaries += 1
            p.totalRecords += p.records
            let tail = final
                ? "; it is under its share again (\(p.totalRecords) records summarised in all)"
                : "; \(p.totalRecords) summarised since it reached its share"
            fields.note(reason: Self.reason, message: "uid \(uid) is over its share of the log (\(shareText)): \(p.records) records summarised, \(span): \(kinds)\(tail)")
            fields.bytes(p.bytes)
            let size = UInt64(fields.count + Self.frameOverhead)
            fields.buffer.withUnsafeBytes { records.fields.appendEncoded($0) }
            records.finish(.coalesced, at: time)
            count(uid, size)
        }
        p.since = time
        p.counts = [:]
        p.records = 0
        p.bytes = 0
        p.first = nil
        p.last = nil
        p.firstTime = nil
        p.lastTime = nil
        pending[uid] = p
    }

    /// The `reason` of `coalesced` records.
    package static let reason = "userShare"

    // MARK: Reading encoded fields

    /// Appends field number `number` of the encoded `fields` (a string field) as field `target`;
    /// if it is not there, `/` (the mount's root).
    static func appendField(_ number: UInt64, of fields: [UInt8], to out: inout RecordFields, as target: UInt64) {
        var at = 0
        while at < fields.count {
            guard let tag = varint(fields, &at) else { break }
            if tag & 1 == 0 {
                guard varint(fields, &at) != nil else { break }
                continue
            }
            guard let length = varint(fields, &at), at + Int(length) <= fields.count else { break }
            if tag >> 1 == number {
                var header: [UInt8] = []
                putVarint(target << 1 | 1, &header)
                putVarint(length, &header)
                header.withUnsafeBytes { out.appendEncoded($0) }
                fields[at..<at + Int(length)].withUnsafeBytes { out.appendEncoded($0) }
                return
            }
            at += Int(length)
        }
        var root: [UInt8] = []
        putVarint(target << 1 | 1, &root)
        putVarint(1, &root)
        root.append(UInt8(ascii: "/"))
        root.withUnsafeBytes { out.appendEncoded($0) }
    }

    /// The actor's pid in the encoded `fields` (0 when there is none).
    static func pid(in fields: [UInt8]) -> Int32 {
        var at = 0
        while at < fields.count {
            guard let tag = varint(fields, &at) else { break }
            if tag & 1 == 0 {
                guard let v = varint(fields, &at) else { break }
                if tag >> 1 == 4 { return Int32(truncatingIfNeeded: Int64(bitPattern: v >> 1) ^ -Int64(bitPattern: v & 1)) }
                continue
            }
            guard let length = varint(fields, &at) else { break }
            at += Int(length)
        }
        return 0
    }

    private static func varint(_ b: [UInt8], _ at: inout Int) -> UInt64? {
        var v: UInt64 = 0
        var shift: UInt64 = 0
        while at < b.count && shift < 64 {
            let byte = b[at]
            at += 1
            v |= UInt64(byte & 0x7f) << shift
            if byte & 0x80 == 0 { return v }
            shift += 7
        }
        return nil
    }

    private static func putVarint(_ value: UInt64, _ out: inout [UInt8]) {
        var v = value
        while v >= 0x80 {
            out.append(UInt8(v & 0x7f) | 0x80)
            v >>= 7
        }
        out.append(UInt8(v))
    }
}
