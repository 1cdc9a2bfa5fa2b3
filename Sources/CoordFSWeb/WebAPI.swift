import ControlProtocol
import CoordFSClient
import DocumentStore
import EventLog
import NameBytes

/// The page's JSON API: what `coordfs conflicts`, `resolve`, `versions`, `show`, `diff` and
/// `restore` do, through the daemon as this user. Paths travel in JSON bodies (a name that is not
/// UTF-8 is `\udcNN`, lossless, as in the protocol).
struct WebAPI: Sendable {
    let backend: WebBackend
    var session: ControlSession { backend.mount.session }

    /// POST endpoints: path → handler of the body's object.
    var posts: [(String, @Sendable (JSONObject) async throws -> JSONValue)] {
        [
            ("/api/conflict", { try await conflict($0) }),
            ("/api/merge-preview", { try await mergePreview($0) }),
            ("/api/resolve", { try await resolve($0) }),
            ("/api/versions", { try await versions($0) }),
            ("/api/version", { try await version($0) }),
            ("/api/diff", { try await diff($0) }),
            ("/api/restore", { try await restore($0) }),
        ]
    }

    // MARK: Conflicts

    func conflicts() async throws -> JSONValue {
        let list = try await clientCall { try await session.conflicts() }
        return .object(JSONObject(["conflicts": .array(list.map(Self.json))]))
    }

    static func json(_ c: ConflictInfo) -> JSONValue {
        var o = JSONObject()
        o["id"] = .int(Int64(c.conflict.rawValue))
        o["document"] = .int(Int64(c.document.rawValue))
        o["path"] = .string(c.path.wireValue)
        o["kind"] = .string(c.kind.rawValue)
        o["createdMs"] = .int(Int64(clamping: c.createdMs))
        o["presenter"] = .string(c.storePresenter)
        if let b = c.baseVersion { o["baseVersion"] = .int(Int64(b.rawValue)) }
        return .object(o)
    }

    private func findConflict(_ body: JSONObject) async throws -> ConflictInfo {
        let id = try int(body, "id")
        let list = try await clientCall { try await session.conflicts() }
        guard let c = list.first(where: { $0.conflict.rawValue == UInt64(id) }) else {
            throw WebError(status: 404, "no open conflict \(id) (resolved meanwhile?)")
        }
        return c
    }

    /// Base, theirs and the merge inputs of one conflict, side by side.
    private func sides(_ c: ConflictInfo) async throws -> (base: [UInt8]?, theirs: [UInt8]?) {
        var base: [UInt8]?
        if let v = c.baseVersion { base = try await clientCall { try await session.contents(ofVersion: v) } }
        let theirs = c.kind == .deletion ? nil : try backend.current(c.path)
        return (base, theirs)
    }

    func conflict(_ body: JSONObject) async throws -> JSONValue {
        let c = try await findConflict(body)
        let (base, theirs) = try await sides(c)
        var o = JSONObject()
        o["conflict"] = Self.json(c)
        let binary = TextMerge.looksBinary(base ?? []) || TextMerge.looksBinary(theirs ?? [])
        o["binary"] = .bool(binary)
        o["baseAvailable"] = .bool(base != nil)
        o["theirsExists"] = .bool(theirs != nil)
        if !binary {
            o["base"] = SideBySide.view(base ?? [], against: theirs ?? [])
            o["theirs"] = SideBySide.view(theirs ?? [], against: base ?? [])
            o["baseText"] = .string(String(decoding: base ?? [], as: UTF8.self))
        }
        // What the CLI's `resolve` offers, and which apply (reload and merge need a changed file;
        // merge needs the base).
        var choices: [JSONValue] = [.string("save"), .string("keepBoth"), .string("close")]
        if c.kind == .change { choices.insert(.string("reload"), at: 1) }
        if c.kind == .change && base != nil && !binary { choices.append(.string("merge")) }
        o["resolutions"] = .array(choices)
        return .object(o)
    }

    /// The three-way merge of mine and theirs against the base, as `resolve --merge` would write it.
    func mergePreview(_ body: JSONObject) async throws -> JSONValue {
        let c = try await findConflict(body)
        let mine = Array(try string(body, "mine").utf8)
        let (base, theirs) = try await sides(c)
        guard let base else { throw WebError(status: 409, "the base of conflict \(c.conflict.rawValue) was not kept: no merge") }
        let merged = TextMerge.merge(base: base, mine: mine, theirs: theirs ?? [])
        return .object(JSONObject([
            "merged": .string(String(decoding: merged.text, as: UTF8.self)),
            "conflicts": .int(Int64(merged.conflicts)),
            "mine": SideBySide.view(mine, against: base),
        ]))
    }

    func resolve(_ body: JSONObject) async throws -> JSONValue {
        let c = try await findConflict(body)
        let name = try string(body, "resolution")
        guard let resolution = Resolution(rawValue: name) else { throw WebError(status: 400, "unknown resolution \(name)") }
        var mine: DocumentContents?
        if case .string(let text)? = body["mine"] { mine = .bytes(Array(text.utf8)) }
        if [Resolution.save, .keepBoth, .merge].contains(resolution) && mine == nil {
            throw WebError(status: 400, "\(name) needs your version (mine)")
        }
        let r = try await backend.mount.resolve(c.conflict, with: resolution, mine: resolution == .close || resolution == .reload ? nil : mine)
        var o = JSONObject()
        o["conflict"] = .int(Int64(r.conflict.rawValue))
        o["resolution"] = .string(r.resolution.rawValue)
        if let w = r.writtenPath { o["written"] = .string(w) }
        if let p = r.preservedVersion { o["preservedVersion"] = .int(Int64(p.rawValue)) }
        o["mergeConflicts"] = .int(Int64(r.mergeConflicts))
        return .object(o)
    }

    // MARK: Versions

    func versions(_ body: JSONObject) async throws -> JSONValue {
        let path = try mountPath(body)
        let list = try await clientCall { try await session.versions(path) }
        return .object(JSONObject(["path": .string(path.wireValue), "versions": .array(list.map { v in
            .object(JSONObject([
                "version": .int(Int64(v.version.rawValue)), "document": .int(Int64(v.document.rawValue)),
                "path": .string(v.path.wireValue), "createdMs": .int(Int64(clamping: v.createdMs)),
                "size": .int(Int64(clamping: v.size)), "reason": .string(v.reason), "method": .string(v.method),
                "pinned": .bool(v.pinned),
            ]))
        })]))
    }

    func version(_ body: JSONObject) async throws -> JSONValue {
        let id = try int(body, "version")
        let bytes = try await clientCall { try await session.contents(ofVersion: VersionID(UInt64(id))) }
        let binary = TextMerge.looksBinary(bytes)
        return .object(JSONObject(["version": .int(id), "size": .int(Int64(bytes.count)), "binary": .bool(binary),
                                   "text": binary ? .null : .string(String(decoding: bytes.prefix(WebLimits.maxDocument), as: UTF8.self))]))
    }

    /// `coordfs diff PATH --version N`: from the version to the file as it is now.
    func diff(_ body: JSONObject) async throws -> JSONValue {
        let path = try mountPath(body)
        let id = try int(body, "version")
        let list = try await clientCall { try await session.versions(path) }
        guard list.contains(where: { $0.version.rawValue == UInt64(id) }) else {
            throw WebError(status: 404, "version \(id) is not a version of \(path.rawValue)")
        }
        let old = try await clientCall { try await session.contents(ofVersion: VersionID(UInt64(id))) }
        let now = try backend.current(path) ?? []
        let label = path.rawValue.displayEscaped
        let text = TextMerge.unifiedDiff(old: old, new: now, oldLabel: "a/\(label)", newLabel: "b/\(label)")
        return .object(JSONObject(["diff": .string(text), "equal": .bool(old == now)]))
    }

    /// `coordfs restore PATH --version N`: a coordinated write by the daemon, as this user.
    func restore(_ body: JSONObject) async throws -> JSONValue {
        let path = try mountPath(body)
        let id = try int(body, "version")
        let r = try await backend.mount.restore(VersionID(UInt64(id)), to: path)
        var o = JSONObject()
        o["version"] = .int(Int64(r.version.rawValue))
        o["path"] = .string(r.path)
        if let p = r.preservedVersion { o["preservedVersion"] = .int(Int64(p.rawValue)) }
        return .object(o)
    }

    // MARK: Arguments

    private func int(_ body: JSONObject, _ key: String) throws -> Int64 {
        guard case .int(let n)? = body[key], n > 0 else { throw WebError(status: 400, "\(key) must be a number above 0") }
        return n
    }

    private func string(_ body: JSONObject, _ key: String) throws -> String {
        guard case .string(let s)? = body[key] else { throw WebError(status: 400, "\(key) must be a string") }
        return s
    }

    private func mountPath(_ body: JSONObject) throws -> MountPath {
        var text = try string(body, "path")
        while text.hasPrefix("/") { text.removeFirst() }
        do { return try MountPath(validating: text) } catch { throw WebError(status: 400, "bad path: \(error)") }
    }

    private func clientCall<T>(_ body: () async throws -> T) async throws -> T {
        do {
            return try await body()
        } catch let e as ControlTransportError {
            var status = 502
            if case .protocolError(let p) = e {
                switch p.code {
                case .permissionDenied: status = 403
                case .notFound, .unknownVersion, .invalidPath: status = 404
                default: status = 409
                }
            }
            throw WebError(status: status, e.description)
        }
    }
}
