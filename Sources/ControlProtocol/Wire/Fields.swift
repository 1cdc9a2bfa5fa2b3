// Strict, typed reading of a message's fields (every error names the message and the field) and
// the small helpers messages use to write theirs.

/// Typed, strict access to one message's (or one nested object's) fields; every error names the
/// message type and the field, and carries the request id once it is known.
struct Fields {
    let object: JSONObject
    let context: String
    var requestIDValue: UInt64?

    init(object: JSONObject, context: String, requestIDValue: UInt64? = nil) {
        self.object = object
        self.context = context
        self.requestIDValue = requestIDValue
    }

    static func optionalID(_ object: JSONObject) -> UInt64? {
        if case .int(let value)? = object["id"], value >= 0, UInt64(value) <= maxWireInteger { return UInt64(value) }
        return nil
    }

    func fail(_ code: ErrorCode, _ message: String) -> ProtocolError {
        ProtocolError(code, "\(context): \(message)", requestID: requestIDValue)
    }

    func has(_ key: String) -> Bool { object[key] != nil }

    func remaining(except keys: Set<String>) -> JSONObject {
        var rest = JSONObject()
        for (key, value) in object where !keys.contains(key) { rest[key] = value }
        return rest
    }

    func required(_ key: String) throws(ProtocolError) -> JSONValue {
        guard let value = object[key] else { throw fail(.missingField, "missing field \"\(key)\"") }
        return value
    }

    mutating func requestID() throws(ProtocolError) -> RequestID {
        let value = try uint("id")
        requestIDValue = value
        return RequestID(value)
    }

    func uint(_ key: String, max: UInt64 = maxWireInteger) throws(ProtocolError) -> UInt64 {
        let value = try required(key)
        guard case .int(let number) = value else {
            throw fail(.wrongFieldType, "field \"\(key)\" must be a non-negative integer, not a \(value.typeName)")
        }
        guard number >= 0, UInt64(number) <= max else {
            throw fail(.invalidValue, "field \"\(key)\" is \(number); it must be between 0 and \(max)")
        }
        return UInt64(number)
    }

    func optionalUInt(_ key: String, max: UInt64 = maxWireInteger) throws(ProtocolError) -> UInt64? {
        if object[key] == nil || object[key] == .null { return nil }
        return try uint(key, max: max)
    }

    func pid() throws(ProtocolError) -> Int32 { Int32(try uint("pid", max: UInt64(Int32.max))) }
    func uid() throws(ProtocolError) -> UInt32 { UInt32(try uint("uid", max: UInt64(UInt32.max))) }

    func string(_ key: String, maxBytes: Int) throws(ProtocolError) -> String {
        let value = try required(key)
        guard case .string(let text) = value else {
            throw fail(.wrongFieldType, "field \"\(key)\" must be a string, not a \(value.typeName)")
        }
        if text.utf8.count > maxBytes {
            throw fail(.invalidValue, "field \"\(key)\" is longer than \(maxBytes) bytes")
        }
        return text
    }

    func optionalString(_ key: String, maxBytes: Int) throws(ProtocolError) -> String? {
        if object[key] == nil || object[key] == .null { return nil }
        return try string(key, maxBytes: maxBytes)
    }

    func path(_ key: String) throws(ProtocolError) -> MountPath {
        let value = try required(key)
        guard case .string(let text) = value else {
            throw fail(.wrongFieldType, "field \"\(key)\" must be a path string, not a \(value.typeName)")
        }
        do {
            return try MountPath(validating: text)
        } catch {
            throw fail(.invalidPath, "field \"\(key)\": \(error.message)")
        }
    }

    func optionalPath(_ key: String) throws(ProtocolError) -> MountPath? {
        if object[key] == nil || object[key] == .null { return nil }
        return try path(key)
    }

    func array(_ key: String) throws(ProtocolError) -> [JSONValue] {
        let value = try required(key)
        guard case .array(let elements) = value else {
            throw fail(.wrongFieldType, "field \"\(key)\" must be an array, not a \(value.typeName)")
        }
        return elements
    }

    func enumeration<E: RawRepresentable & CaseIterable>(_ key: String) throws(ProtocolError) -> E where E.RawValue == String {
        let name = try string(key, maxBytes: 64)
        guard let value = E(rawValue: name) else {
            throw fail(.invalidValue, "field \"\(key)\": unknown value \(MountPath.quoted(name)); known: \(E.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        return value
    }

    func bool(_ key: String) throws(ProtocolError) -> Bool {
        let value = try required(key)
        guard case .bool(let flag) = value else {
            throw fail(.wrongFieldType, "field \"\(key)\" must be true or false, not a \(value.typeName)")
        }
        return flag
    }

    func optionalBool(_ key: String) throws(ProtocolError) -> Bool? {
        if object[key] == nil || object[key] == .null { return nil }
        return try bool(key)
    }

    func optionalBase64(_ key: String) throws(ProtocolError) -> [UInt8]? {
        if object[key] == nil || object[key] == .null { return nil }
        let value = object[key]!
        guard case .string(let text) = value else {
            throw fail(.wrongFieldType, "field \"\(key)\" must be a base64 string, not a \(value.typeName)")
        }
        guard let bytes = Base64.decode(text) else {
            throw fail(.invalidValue, "field \"\(key)\" is not canonical base64 (RFC 4648, standard alphabet, padded)")
        }
        return bytes
    }

    /// A 64-bit integer spelled in decimal (`device`, `inode`, `mtimeNs`): canonical digits only.
    func decimal(_ key: String, signed: Bool) throws(ProtocolError) -> (UInt64, negative: Bool) {
        let text = try string(key, maxBytes: 21)
        var digits = Substring(text)
        let negative = signed && digits.first == "-"
        if negative { digits = digits.dropFirst() }
        guard !digits.isEmpty, digits.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }),
              digits == "0" || digits.first != "0", !(negative && digits == "0"),
              let magnitude = UInt64(digits)
        else {
            throw fail(.invalidValue, "field \"\(key)\" must be a decimal integer in a string, not \(MountPath.quoted(text))")
        }
        return (magnitude, negative)
    }

    func identity() throws(ProtocolError) -> DocumentIdentity {
        let device = try decimal("device", signed: false).0
        let inode = try decimal("inode", signed: false).0
        let (magnitude, negative) = try decimal("mtimeNs", signed: true)
        guard magnitude <= (negative ? UInt64(Int64.max) + 1 : UInt64(Int64.max)) else {
            throw fail(.invalidValue, "field \"mtimeNs\" does not fit in 64 bits")
        }
        let mtime = negative ? Int64(truncatingIfNeeded: 0 &- magnitude) : Int64(magnitude)
        return DocumentIdentity(device: device, inode: inode, size: try uint("size"), modificationTimeNanoseconds: mtime)
    }

    func optionalIdentity(_ key: String) throws(ProtocolError) -> DocumentIdentity? {
        if object[key] == nil || object[key] == .null { return nil }
        return try nested(object[key]!, key).identity()
    }

    func documentChange() throws(ProtocolError) -> DocumentChange {
        let document = DocumentID(try uint("document"))
        let path = try path("path")
        let kind: DocumentChangeKind = try enumeration("kind")
        let before = try optionalIdentity("before")
        let after = try optionalIdentity("after")
        let action: DocumentAction
        switch try string("action", maxBytes: 64) {
        case "reload": action = .reload
        case "close": action = .close
        case "conflict": action = .conflict(ConflictID(try uint("conflict")))
        case "failed": action = .failed(message: try string("message", maxBytes: 4096))
        case let other:
            throw fail(.invalidValue, "field \"action\": unknown action \(MountPath.quoted(other)); known: reload, close, conflict, failed")
        }
        return DocumentChange(document: document, path: path, kind: kind, before: before, after: after, action: action)
    }

    func nested(_ value: JSONValue, _ name: String) throws(ProtocolError) -> Fields {
        guard case .object(let inner) = value else {
            throw fail(.wrongFieldType, "field \"\(name)\" must be an object, not a \(value.typeName)")
        }
        return Fields(object: inner, context: "\(context).\(name)", requestIDValue: requestIDValue)
    }

    func intents(_ key: String) throws(ProtocolError) -> [Intent] {
        let list = try array(key)
        if list.count > Coordinate.maxIntents {
            throw fail(.invalidValue, "field \"\(key)\" lists more than \(Coordinate.maxIntents) intents")
        }
        var intents: [Intent] = []
        for (offset, value) in list.enumerated() {
            let item = try nested(value, "\(key)[\(offset)]")
            let path = try item.path("path")
            var names: [String] = []
            if item.has("options") {
                for (index, option) in try item.array("options").enumerated() {
                    guard case .string(let name) = option else {
                        throw item.fail(.wrongFieldType, "field \"options[\(index)]\" must be a string")
                    }
                    names.append(name)
                }
            }
            switch try item.string("intent", maxBytes: 16) {
            case "read":
                var options: ReadingOptions = []
                for name in names {
                    guard let option = ReadingOptions.names.first(where: { $0.0 == name }) else {
                        throw item.fail(.invalidValue, "unknown reading option \(MountPath.quoted(name)); known: \(ReadingOptions.names.map(\.0).joined(separator: ", "))")
                    }
                    options.insert(option.1)
                }
                intents.append(.reading(path, options: options))
            case "write":
                var options: WritingOptions = []
                for name in names {
                    guard let option = WritingOptions.names.first(where: { $0.0 == name }) else {
                        throw item.fail(.invalidValue, "unknown writing option \(MountPath.quoted(name)); known: \(WritingOptions.names.map(\.0).joined(separator: ", "))")
                    }
                    options.insert(option.1)
                }
                intents.append(.writing(path, options: options))
            case let other:
                throw item.fail(.invalidValue, "field \"intent\" is \(MountPath.quoted(other)); it must be \"read\" or \"write\"")
            }
        }
        return intents
    }
}

extension JSONObject {
    /// Writes a request id (`id`).
    mutating func put(id: RequestID) { self["id"] = .int(Int64(id.rawValue)) }
}

extension Intent {
    /// The intent as `coordinate`, `statusReport` carry it (`Fields.intents` reads it back).
    var wireValue: JSONValue {
        var item = JSONObject()
        switch self {
        case .reading(let path, let options):
            item["intent"] = .string("read")
            item["path"] = .string(path.wireValue)
            item["options"] = .array(ReadingOptions.names.filter { options.contains($0.1) }.map { .string($0.0) })
        case .writing(let path, let options):
            item["intent"] = .string("write")
            item["path"] = .string(path.wireValue)
            item["options"] = .array(WritingOptions.names.filter { options.contains($0.1) }.map { .string($0.0) })
        }
        return .object(item)
    }
}

extension DocumentIdentity {
    /// The identity with its 64-bit numbers as decimal strings (`Fields.identity` reads it back).
    var wireValue: JSONValue {
        .object(JSONObject([
            "device": .string(String(device)), "inode": .string(String(inode)),
            "size": .int(Int64(size)), "mtimeNs": .string(String(modificationTimeNanoseconds)),
        ]))
    }
}
