/// A JSON value, as the control protocol's strict parser produces it.
///
/// Integers without fraction or exponent that fit in `Int64` are `.int`; other numbers `.double`.
public enum JSONValue: Sendable, Equatable {
    case null
    case bool(Bool)
    case int(Int64)
    case double(Double)
    case string(String)
    case array([JSONValue])
    case object(JSONObject)

    /// The JSON type's name, for error messages.
    public var typeName: String {
        switch self {
        case .null: return "null"
        case .bool: return "boolean"
        case .int, .double: return "number"
        case .string: return "string"
        case .array: return "array"
        case .object: return "object"
        }
    }
}

/// A JSON object that remembers the order its keys were added in (so encoded frames are
/// deterministic and read naturally: `type` first). Equality ignores the order.
public struct JSONObject: Sendable, Equatable, Sequence {
    public private(set) var keys: [String] = []
    private var values: [String: JSONValue] = [:]

    public init() {}

    public init(_ pairs: KeyValuePairs<String, JSONValue>) {
        for (key, value) in pairs { self[key] = value }
    }

    public var count: Int { keys.count }
    public var isEmpty: Bool { keys.isEmpty }

    public subscript(key: String) -> JSONValue? {
        get { values[key] }
        set {
            if let newValue {
                if values.updateValue(newValue, forKey: key) == nil { keys.append(key) }
            } else if values.removeValue(forKey: key) != nil {
                keys.removeAll { $0 == key }
            }
        }
    }

    /// Adds a key the object does not have yet; returns false (and changes nothing) if it has it.
    mutating func insertNew(_ key: String, _ value: JSONValue) -> Bool {
        if values[key] != nil { return false }
        values[key] = value
        keys.append(key)
        return true
    }

    public func makeIterator() -> AnyIterator<(key: String, value: JSONValue)> {
        var index = 0
        return AnyIterator {
            guard index < keys.count else { return nil }
            defer { index += 1 }
            let key = keys[index]
            return (key, values[key]!)
        }
    }

    public static func == (a: JSONObject, b: JSONObject) -> Bool { a.values == b.values }
}
