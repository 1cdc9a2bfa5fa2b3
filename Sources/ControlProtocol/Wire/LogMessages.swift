// The event log over the socket (docs/protocol.md, "The event log"): for users who may not read
// the log's files, the daemon reads them and passes on only the records that user may see.

/// `readLog`: event-log records from a cursor, those the peer may see. Replied to with `logRecords`.
package struct ReadLog: Sendable, Hashable {
    package var id: RequestID
    /// The first sequence number wanted; nil: from the end (only records written from now on).
    package var from: UInt64?
    /// At most this many records (1 to `maxLimit`; default `maxLimit`).
    package var limit: UInt32?
    /// The most records one reply carries.
    package static let maxLimit: UInt32 = 4096
    package init(id: RequestID, from: UInt64? = nil, limit: UInt32? = nil) {
        self.id = id
        self.from = from
        self.limit = limit
    }
}

extension ReadLog: WireMessage {
    static let wireName = "readLog"
    static let direction = ControlMessage.Direction.toDaemon
    var requestID: RequestID? { id }
    var wrapped: ControlMessage { .readLog(self) }

    init(wire fields: inout Fields) throws(ProtocolError) {
        id = try fields.requestID()
        limit = nil
        if let value = try fields.optionalUInt("limit", max: UInt64(Self.maxLimit)) {
            if value == 0 { throw fields.fail(.invalidValue, "field \"limit\" must be between 1 and \(Self.maxLimit)") }
            limit = UInt32(value)
        }
        from = try fields.optionalUInt("from")
    }

    func encode(to o: inout JSONObject) {
        o.put(id: id)
        if let from { o["from"] = .int(Int64(from)) }
        if let limit { o["limit"] = .int(Int64(limit)) }
    }
}

/// `logRecords`: records in the log's own binary frames (docs/event-log.md, "On disk"), base64 on
/// the wire, oldest first, possibly none.
package struct LogRecords: Sendable, Hashable {
    package var id: RequestID
    /// The frames, back to back.
    package var records: [UInt8]
    /// Where to go on: `from` of the next `readLog` (past records read but not shown, too).
    package var next: UInt64
    /// The sequence number the next record written will have.
    package var end: UInt64
    /// The oldest record the log still keeps (nil when it keeps none).
    package var oldest: UInt64?
    package init(id: RequestID, records: [UInt8], next: UInt64, end: UInt64, oldest: UInt64? = nil) {
        self.id = id
        self.records = records
        self.next = next
        self.end = end
        self.oldest = oldest
    }
}

extension LogRecords: WireMessage {
    static let wireName = "logRecords"
    static let direction = ControlMessage.Direction.toClient
    var requestID: RequestID? { id }
    var wrapped: ControlMessage { .logRecords(self) }

    init(wire fields: inout Fields) throws(ProtocolError) {
        id = try fields.requestID()
        guard let records = try fields.optionalBase64("records") else { throw fields.fail(.missingField, "missing field \"records\"") }
        self.records = records
        next = try fields.uint("next")
        end = try fields.uint("end")
        oldest = try fields.optionalUInt("oldest")
    }

    func encode(to o: inout JSONObject) {
        o.put(id: id)
        o["records"] = .string(Base64.encode(records))
        o["next"] = .int(Int64(next))
        o["end"] = .int(Int64(end))
        if let oldest { o["oldest"] = .int(Int64(oldest)) }
    }
}
