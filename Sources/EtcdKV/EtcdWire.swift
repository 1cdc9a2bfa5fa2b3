import ClusterKV
import Foundation

// etcd v3's messages as its JSON gateway (grpc-gateway) writes them: field names in snake_case
// (but `ID` and `TTL` in leases), bytes in base64, 64-bit integers as strings, fields at their
// default value (0, false, empty) left out, stream messages one per line wrapped in `{"result":…}`
// and failures as `{"error":…,"message":…,"code":<gRPC code>}`.

/// A 64-bit integer the gateway writes as a string (it also accepts a number).
struct WireInt64: Decodable, Sendable {
    var value: Int64

    init(from decoder: Decoder) throws {
        let container = try decoder.singleValueContainer()
        if let text = try? container.decode(String.self) {
            guard let v = Int64(text) else {
                throw DecodingError.dataCorruptedError(in: container, debugDescription: "not an int64: \(text)")
            }
            value = v
        } else {
            value = try container.decode(Int64.self)
        }
    }
}

struct WireHeader: Decodable, Sendable {
    var revision: WireInt64?
}

struct WireKeyValue: Decodable, Sendable {
    var key: String?
    var value: String?
    var create_revision: WireInt64?
    var mod_revision: WireInt64?
    var version: WireInt64?
    var lease: WireInt64?

    func keyValue() throws -> KeyValue {
        KeyValue(
            key: try Base64.decode(key), value: try Base64.decode(value),
            createRevision: create_revision?.value ?? 0, modRevision: mod_revision?.value ?? 0,
            version: version?.value ?? 0, lease: lease?.value ?? 0)
    }
}

struct WireRangeResponse: Decodable, Sendable {
    var header: WireHeader?
    var kvs: [WireKeyValue]?
}

struct WirePutResponse: Decodable, Sendable {
    var header: WireHeader?
}

struct WireDeleteResponse: Decodable, Sendable {
    var header: WireHeader?
    var deleted: WireInt64?
}

struct WireTxnResponse: Decodable, Sendable {
    struct Op: Decodable, Sendable {
        var response_range: WireRangeResponse?
        var response_put: WirePutResponse?
        var response_delete_range: WireDeleteResponse?
    }
    var header: WireHeader?
    var succeeded: Bool?
    var responses: [Op]?
}

struct WireLeaseGrantResponse: Decodable, Sendable {
    var header: WireHeader?
    var ID: WireInt64?
    var TTL: WireInt64?
    var error: String?
}

struct WireLeaseKeepAliveResponse: Decodable, Sendable {
    var ID: WireInt64?
    var TTL: WireInt64?
}

struct WireAuthenticateResponse: Decodable, Sendable {
    var token: String?
}

struct WireEvent: Decodable, Sendable {
    /// "PUT" is the default and left out; "DELETE".
    var type: String?
    var kv: WireKeyValue?
}

struct WireWatchResponse: Decodable, Sendable {
    var header: WireHeader?
    var watch_id: WireInt64?
    var created: Bool?
    var canceled: Bool?
    var compact_revision: WireInt64?
    var cancel_reason: String?
    var events: [WireEvent]?
}

/// One line of a streamed answer: a message, or the error that ended the stream.
struct WireStreamLine<Message: Decodable & Sendable>: Decodable, Sendable {
    var result: Message?
    var error: WireError?
}

/// A failure as the gateway writes it; `code` is the gRPC status code.
struct WireError: Decodable, Sendable {
    var error: String?
    var message: String?
    var code: Int?
}

enum Base64 {
    static func encode(_ bytes: [UInt8]) -> String { Data(bytes).base64EncodedString() }

    static func decode(_ text: String?) throws -> [UInt8] {
        guard let text, !text.isEmpty else { return [] }
        guard let data = Data(base64Encoded: text) else {
            throw ClusterStoreError.failed("etcd sent bytes that are not base64")
        }
        return [UInt8](data)
    }
}

enum KeyRange {
    /// The end of the range of every key starting with `prefix` (etcd's `GetPrefixRangeEnd`): the
    /// prefix with its last byte below 0xff increased and what follows dropped; `[0]` (every key)
    /// when there is no such byte.
    static func prefixEnd(_ prefix: [UInt8]) -> [UInt8] {
        var end = prefix
        while let last = end.last {
            if last < 0xff {
                end[end.count - 1] = last + 1
                return end
            }
            end.removeLast()
        }
        return [0]
    }

    /// `key` and, for a prefix, `range_end`, as the gateway's JSON fields.
    static func fields(_ key: [UInt8], prefix: Bool) -> JSONObject {
        var fields = JSONObject()
        fields.string("key", Base64.encode(key))
        if prefix { fields.string("range_end", Base64.encode(prefixEnd(key))) }
        return fields
    }
}

/// A request body, written directly: every value the client sends is base64, a decimal number
/// (etcd's 64-bit integers travel as strings) or one of etcd's enum names, so no character needs
/// escaping and nothing goes through `JSONSerialization`, which bridges every value through `Any`
/// (it was most of the client's CPU for a transaction). Names and values given here must be such
/// text; anything else (a user name, a password) goes through `JSONSerialization`.
struct JSONObject {
    private(set) var text = ""

    /// `"name":"value"`.
    mutating func string(_ name: String, _ value: String) {
        separate()
        text += "\"\(name)\":\"\(value)\""
    }

    /// `"name":value` with `value` JSON already (an object, an array, a boolean).
    mutating func raw(_ name: String, _ value: String) {
        separate()
        text += "\"\(name)\":\(value)"
    }

    mutating func object(_ name: String, _ value: JSONObject) { raw(name, value.json) }

    mutating func array(_ name: String, _ values: [JSONObject]) {
        raw(name, "[" + values.map(\.json).joined(separator: ",") + "]")
    }

    private mutating func separate() { if !text.isEmpty { text += "," } }

    var json: String { "{" + text + "}" }
    var data: Data { Data(json.utf8) }
}

enum WireRequest {
    static func compare(_ c: Compare) -> JSONObject {
        var fields = JSONObject()
        fields.string("key", Base64.encode(c.key))
        let result =
            switch c.result {
            case .equal: "EQUAL"
            case .notEqual: "NOT_EQUAL"
            case .greater: "GREATER"
            case .less: "LESS"
            }
        fields.string("result", result)
        switch c.target {
        case .version(let v):
            fields.string("target", "VERSION")
            fields.string("version", String(v))
        case .createRevision(let r):
            fields.string("target", "CREATE")
            fields.string("create_revision", String(r))
        case .modRevision(let r):
            fields.string("target", "MOD")
            fields.string("mod_revision", String(r))
        case .value(let v):
            fields.string("target", "VALUE")
            fields.string("value", Base64.encode(v))
        case .lease(let l):
            fields.string("target", "LEASE")
            fields.string("lease", String(l))
        }
        return fields
    }

    static func put(_ key: [UInt8], _ value: [UInt8], lease: LeaseID) -> JSONObject {
        var fields = JSONObject()
        fields.string("key", Base64.encode(key))
        fields.string("value", Base64.encode(value))
        if lease != 0 { fields.string("lease", String(lease)) }
        return fields
    }

    static func operation(_ op: ClusterOperation) -> JSONObject {
        var fields = JSONObject()
        switch op {
        case .put(let key, let value, let lease): fields.object("request_put", put(key, value, lease: lease))
        case .delete(let key, let prefix): fields.object("request_delete_range", KeyRange.fields(key, prefix: prefix))
        case .range(let key, let prefix): fields.object("request_range", KeyRange.fields(key, prefix: prefix))
        }
        return fields
    }

    static func transaction(_ compare: [Compare], success: [ClusterOperation], failure: [ClusterOperation]) -> JSONObject {
        var body = JSONObject()
        body.array("compare", compare.map(Self.compare))
        body.array("success", success.map(operation))
        body.array("failure", failure.map(operation))
        return body
    }

    /// `{"name":"value"}` (a lease's ID or TTL).
    static func single(_ name: String, _ value: String) -> JSONObject {
        var fields = JSONObject()
        fields.string(name, value)
        return fields
    }
}
