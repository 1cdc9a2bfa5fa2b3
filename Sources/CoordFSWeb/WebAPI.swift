import ControlProtocol
import CoordFSClient
import DocumentStore
import EventLog
import Foundation
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
        if let t = c.theirsVersion { o["theirsVersion"] = .int(Int64(t.rawValue)) }
        return .object(o)
    }

    private func findConflict(_ body: JSONObject) async throws -> ConflictInfo {
        let id = try int(body, "id")
        let list = try await clientCall { try await session.conflicts() }
        guard let c = list.first(where: { $0.conflict.rawValue == UInt64(id) }) else {
            throw WebError(status: 404, "conflict \(id) is no longer open (resolved meanwhile, from another page or the CLI?)")
        }
        return c
    }

    /// The three sides of a conflict. A presenter's (`change`, `deletion`): base the version it
    /// loaded, theirs the file now (nil when deleted), mine its unsaved bytes, which only it has
    /// (nil here). A lost update's: base what the saver read, theirs the kept version its save went
    /// over, mine the file the save left (docs/document-store.md, "Lost updates").
    private struct Sides {
        var base: [UInt8]?
        var theirs: [UInt8]?
        var mine: [UInt8]?
        /// A side is larger than the page shows and merges (`WebLimits.maxDocument`): it is there,
        /// its bytes are not (empty).
        var tooLarge = false
        /// The file is a symbolic link now (its name or a folder on its way), not followed: no
        /// side of the file (as when deleted), and where the link is and points.
        var link: (path: String, target: String)?
    }

    private func sides(_ c: ConflictInfo) async throws -> Sides {
        var tooLarge = false
        var link: (path: String, target: String)?
        func version(_ v: VersionID?) async throws -> [UInt8]? {
            guard let v else { return nil }
            // A larger version is not read at all (its size comes with the first reply).
            let kept = try await clientCall { try await session.contents(ofVersion: v, atMost: WebLimits.maxDocument) }
            guard let bytes = kept.bytes else { tooLarge = true; return [] }
            return bytes
        }
        func file() throws -> [UInt8]? {
            do {
                switch try backend.currentFile(c.path) {
                case .bytes(let bytes): return bytes
                case .missing: return nil
                case .link(let at, let target):
                    link = (at, target)
                    return nil
                }
            } catch let e as WebError where e.status == 413 { tooLarge = true; return [] }
        }
        let base = try await version(c.baseVersion)
        var s = Sides(base: base)
        if c.kind == .lostUpdate {
            s.theirs = try await version(c.theirsVersion)
            s.mine = try file()
        } else if c.kind != .deletion {
            s.theirs = try file()
        }
        s.tooLarge = tooLarge
        s.link = link
        return s
    }

    func conflict(_ body: JSONObject) async throws -> JSONValue {
        let c = try await findConflict(body)
        let s = try await sides(c)
        let lostUpdate = c.kind == .lostUpdate
        var o = JSONObject()
        o["conflict"] = Self.json(c)
        let present = [s.base, s.theirs, s.mine].compactMap { $0 }
        let binary = s.tooLarge || present.contains { TextMerge.looksBinary($0) }
        // Text the page can edit and send back as it is: UTF-8 without CR (a browser's editor
        // makes CR LF a LF). Other text (Latin-1, ...) is shown with U+FFFD where a byte is not
        // UTF-8, and mine comes from a file, byte for byte.
        let text = !binary && present.allSatisfy { !$0.contains(0x0D) && String(validating: $0, as: UTF8.self) != nil }
        o["lostUpdate"] = .bool(lostUpdate)
        o["binary"] = .bool(binary)
        o["tooLarge"] = .bool(s.tooLarge)
        o["text"] = .bool(text)
        o["baseAvailable"] = .bool(s.base != nil)
        o["theirsExists"] = .bool(s.theirs != nil)
        o["mineExists"] = .bool(s.mine != nil)
        if let link = s.link {
            o["link"] = .object(JSONObject(["path": .string(link.path), "target": .string(link.target),
                                            "message": .string(WebBackend.linkMessage(link.path, link.target))]))
        }
        if !binary {
            o["base"] = SideBySide.view(s.base ?? [], against: s.theirs ?? [])
            o["theirs"] = SideBySide.view(s.theirs ?? [], against: s.base ?? [])
            if let mine = s.mine { o["mine"] = SideBySide.view(mine, against: s.base ?? []) }
        }
        if text {
            // What the page's editor starts with: a presenter's base (its unsaved bytes are its
            // own), a lost update's file.
            o["mineText"] = .string(String(decoding: (lostUpdate ? s.mine : s.base) ?? [], as: UTF8.self))
        }
        // What `coordfs resolve` offers for this kind of conflict, and which apply now: reload
        // needs theirs (a presenter's: the file, not deleted since; a lost update's: the kept
        // version), keep both of a lost update writes theirs beside the file, merge needs the base,
        // theirs and a file to write over, as text.
        var choices: [String] = ["save"]
        if c.kind != .deletion && s.theirs != nil { choices.append("reload") }
        if !lostUpdate || s.theirs != nil { choices.append("keepBoth") }
        choices.append("close")
        if c.kind != .deletion && s.base != nil && s.theirs != nil && (!lostUpdate || s.mine != nil) && !binary { choices.append("merge") }
        o["resolutions"] = .array(choices.map { .string($0) })
        return .object(o)
    }

    /// Mine from a request: `mine` (text) or `mineBase64` (bytes, a file loaded as it is); nil when neither.
    private func mine(_ body: JSONObject) throws -> [UInt8]? {
        if case .string(let b64)? = body["mineBase64"] {
            guard let data = Data(base64Encoded: b64) else { throw WebError(status: 400, "mineBase64 is not base64") }
            return [UInt8](data)
        }
        if case .string(let text)? = body["mine"] { return Array(text.utf8) }
        return nil
    }

    /// The three-way merge of mine and theirs against the base, as `resolve --merge` would write it.
    func mergePreview(_ body: JSONObject) async throws -> JSONValue {
        let c = try await findConflict(body)
        let s = try await sides(c)
        if s.tooLarge { throw WebError(status: 413, "larger than \(WebLimits.maxDocument >> 20) MiB: merge with `coordfs resolve --merge`") }
        guard let mine = try mine(body) ?? s.mine else { throw WebError(status: 400, "mine is needed for a merge") }
        guard let base = s.base else { throw WebError(status: 409, "the base of conflict \(c.conflict.rawValue) was not kept: no merge") }
        guard let theirs = s.theirs else {
            throw WebError(status: 409, c.kind == .lostUpdate ? "the version the late save went over was not kept: no merge" : "the file was deleted since: no merge")
        }
        let merged = TextMerge.merge(base: base, mine: mine, theirs: theirs)
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
        var mine = try self.mine(body)
        // A presenter's save, keep both and merge write its version, which only it has: the page
        // must send it. A lost update's mine is the file; one given to save or merge replaces it.
        if c.kind != .lostUpdate && [Resolution.save, .keepBoth, .merge].contains(resolution) && mine == nil {
            throw WebError(status: 400, "\(name) needs your version (mine)")
        }
        if resolution == .close || resolution == .reload || (c.kind == .lostUpdate && resolution == .keepBoth) { mine = nil }
        let r: DocumentResolutionResult
        do {
            r = try await backend.mount.resolve(c.conflict, with: resolution, mine: mine.map { .bytes($0) })
        } catch {
            // The page cannot name a file inside the mount as the CLI can (`--from`).
            if case .tooLarge(let bytes, let limit) = error {
                throw WebError(status: 413, "mine is \(bytes) bytes, more than the page can send (\(limit)): resolve it with `coordfs resolve --from FILE`")
            }
            throw error
        }
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
        let kept = try await clientCall { try await session.contents(ofVersion: VersionID(UInt64(id)), atMost: WebLimits.maxDocument) }
        guard let bytes = kept.bytes else {
            // Not read: the page shows no more than 8 MiB (`coordfs show` writes it all).
            return .object(JSONObject(["version": .int(id), "size": .int(Int64(clamping: kept.size)), "binary": .bool(false),
                                       "tooLarge": .bool(true), "text": .null]))
        }
        let binary = TextMerge.looksBinary(bytes)
        return .object(JSONObject(["version": .int(id), "size": .int(Int64(bytes.count)), "binary": .bool(binary), "tooLarge": .bool(false),
                                   "text": binary ? .null : .string(String(decoding: bytes, as: UTF8.self))]))
    }

    /// `coordfs diff PATH --version N`: from the version to the file as it is now.
    func diff(_ body: JSONObject) async throws -> JSONValue {
        let path = try mountPath(body)
        let id = try int(body, "version")
        let list = try await clientCall { try await session.versions(path) }
        guard list.contains(where: { $0.version.rawValue == UInt64(id) }) else {
            throw WebError(status: 404, "version \(id) is not a version of \(path.rawValue)")
        }
        let kept = try await clientCall { try await session.contents(ofVersion: VersionID(UInt64(id)), atMost: WebLimits.maxDocument) }
        guard let old = kept.bytes else {
            throw WebError(status: 413, "version \(id) is larger than \(WebLimits.maxDocument >> 20) MiB: use `coordfs diff`")
        }
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
