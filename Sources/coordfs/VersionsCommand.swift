import NameBytes
import ArgumentParser
import ControlProtocol
import CoordFS
import CoordFSClient
import DocumentStore
import Foundation
import Glibc

/// `coordfs versions PATH`: the kept versions of a document.
struct VersionsCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "versions",
        abstract: "List the kept versions of a document in a coordfs mount.",
        discussion: """
        Lists what the document store kept of PATH, newest first: the version number (for show, \
        diff and restore), when it was kept, its size, why it was kept and how it is stored. A \
        document with none kept lists nothing (said on stderr, exit status 0); a PATH that does not \
        exist lists the versions kept of what was there (a deleted document's), and with none kept \
        is an error (exit status 1).

        why:  base (a presenter's loaded version), replaced (renamed over by a save), deleted, \
        beforeWrite (before an in-place write), restore (the file a restore replaced), resolution \
        (the file a conflict resolution replaced)
        how:  link (the old inode itself, no copy), reflink (a copy-on-write clone), copy

        A version marked pinned is a presenter's base or an open conflict's; it is never dropped.

        The store is read directly (BACKING/.coordfs/store), so this works while the daemon runs, \
        and on a mount whose daemon died. A user who may not read the store's files (the mount's \
        owner's) asks the running daemon instead, which answers for a document that user may read, \
        with the versions kept from a file that user could read when they were kept.

        Examples:
          coordfs versions /mnt/docs/report.txt
          coordfs versions /mnt/docs/report.txt --json | jq -r '.version'
        """
    )

    @Argument(help: ArgumentHelp("A document inside a coordfs mount.", valueName: "path"))
    var path: String

    @Flag(help: "Print one JSON object per version.")
    var json = false

    func run() throws {
        let location = try StoreLocation(path)
        let versions = try location.versions()
        // A deleted document's versions are listed; a path that names nothing and never did is an error.
        if versions.isEmpty, location.namesNothing {
            throw CLIError("'\(location.displayPath)' does not exist, and no version of it was kept")
        }
        if json {
            for v in versions { print(StoreFormat.json(v)) }
            return
        }
        if versions.isEmpty {
            FileHandle.standardError.write(Data("coordfs: no kept versions of \(location.displayPath.displayEscaped)\n".utf8))
            return
        }
        var rows = [["VERSION", "TIME", "SIZE", "WHY", "HOW", ""]]
        for v in versions {
            rows.append(["\(v.id)", StoreFormat.time(v.createdAt), StoreFormat.size(v.size), v.reason, v.method, v.pinned ? "pinned" : ""])
        }
        print(StoreFormat.table(rows), terminator: "")
    }
}

// MARK: Shared by the store commands

/// A path inside a coordfs mount, resolved to its mount and its document store.
struct StoreLocation {
    let mount: LocatedMount
    /// The document's path relative to the mount root (and the backing folder), without a leading
    /// slash; empty for the mount root.
    let relative: String
    /// What the user named, for messages.
    let displayPath: String

    init(_ given: String) throws {
        let path = exactArgument(given)
        do {
            mount = try locateMount(path)
        } catch {
            throw CLIError(error.description)
        }
        relative = String(mount.pathInMount.drop { $0 == "/" })
        displayPath = path
    }

    var storeDirectory: String { mount.state.store }

    /// True when nothing is at the path (lstat: ENOENT or ENOTDIR), looked up through the mount, or
    /// in the backing folder when the mount's daemon is gone; false when something is, or when
    /// that cannot be told (EACCES, ...).
    var namesNothing: Bool {
        let path = mount.stale ? mount.backing + (relative.isEmpty ? "" : "/" + relative) : displayPath
        var st = stat()
        guard path.withNameCString({ lstat($0, &st) }) != 0 else { return false }
        return errno == ENOENT || errno == ENOTDIR
    }
    /// The path through the mount (for coordinated writes).
    var mountPath: String? { mount.mountpoint.map { relative.isEmpty ? $0 : $0 + "/" + relative } }

    /// Opens the mount's store directly (SQLite WAL; the daemon may have it open too).
    func openStore(unpresentedFiles: UnpresentedFilePolicy = .never) throws -> DocumentStore {
        var st = stat()
        if stat(storeDirectory + "/metadata.sqlite", &st) != 0 {
            let e = errno
            if e == ENOENT {
                throw CLIError("the mount of \(mount.backing) has no document store yet (\(storeDirectory)): nothing was kept")
            }
            throw CLIError("cannot read the document store \(storeDirectory): \(String(cString: strerror(e)))"
                + (e == EACCES ? " (it belongs to the user who mounted; run as that user)" : ""))
        }
        return try storeCall {
            try DocumentStore(backingRoot: mount.backing, stateDirectory: storeDirectory,
                              configuration: StoreConfiguration(unpresentedFiles: unpresentedFiles))
        }
    }

    /// Whether this user asks the mount's daemon instead of reading the store's files: they are
    /// not readable to it (they are the mount owner's, in its state folder) and the daemon runs.
    /// The daemon answers with this user's rights (docs/protocol.md, "Who may see what"); the CLI
    /// never reads another user's files. As `coordfs log` does for the event log.
    var throughDaemon: Bool {
        guard mountPath != nil, !mount.stale else { return false }
        return access(storeDirectory, R_OK | X_OK) != 0 && errno == EACCES
    }

    /// The running mount's daemon, and the path inside it.
    func daemon() throws -> (CoordFSMount, MountPath) {
        guard let mountPath, !mount.stale else {
            throw CLIError("the mount of \(mount.backing) is not running (mount it again first)")
        }
        do { return try CoordFSMount.containing(mountPath) } catch { throw CLIError("\(error)") }
    }

    /// The kept versions of this document, from the store or (`throughDaemon`) the daemon.
    func versions() throws -> [VersionRow] {
        try requireDocumentPath()
        guard throughDaemon else {
            let store = try openStore()
            return try storeCall { try store.versions(ofPath: relative) }.map(VersionRow.init)
        }
        let (mount, inMount) = try daemon()
        do {
            return try runBlocking { try await mount.versions(of: inMount) }.map(VersionRow.init)
        } catch {
            throw CLIError("cannot list the versions of \(displayPath): \(error)")
        }
    }

    /// The bytes of version `number`, which must be one of this document's, through the daemon.
    func contentsThroughDaemon(ofVersion number: Int64) throws -> [UInt8] {
        try requireDocumentPath()
        guard let id = UInt64(exactly: number), try versions().contains(where: { $0.id == id }) else {
            throw CLIError("version \(number) is not a version of \(displayPath) (see `coordfs versions \(displayPath)`)")
        }
        let (mount, _) = try daemon()
        do {
            return try runBlocking { try await mount.contents(ofVersion: VersionID(id)) }
        } catch {
            throw CLIError("cannot read version \(number): \(error)")
        }
    }

    func requireDocumentPath() throws {
        if relative.isEmpty { throw CLIError("'\(displayPath)' is the mount itself; name a document inside it") }
    }

    /// The kept version `number`, which must be one of this document's.
    func version(_ number: Int64, in store: DocumentStore) throws -> Version {
        try requireDocumentPath()
        // A negative number names no version, as the store would say of a number it never gave.
        guard let id = UInt64(exactly: number) else { throw CLIError("no kept version \(number)") }
        let version = try storeCall { try store.version(VersionID(id)) }
        let ofThisDocument = try storeCall { try store.versions(ofPath: relative) }.contains { $0.id == version.id }
        guard ofThisDocument || ExactName.same(version.path, relative) else {
            throw CLIError("version \(number) is not a version of \(displayPath) (it was kept for /\(version.path); see `coordfs versions \(displayPath)`)")
        }
        return version
    }
}

/// One kept version as the store commands show it, read from the store or from the daemon.
struct VersionRow {
    var id: UInt64
    var document: UInt64
    /// The document's path when the version was kept (relative, no leading slash).
    var path: String
    var createdAt: Date
    var size: Int64
    var reason: String
    var method: String
    var pinned: Bool

    init(_ v: Version) {
        self.init(id: v.id.rawValue, document: v.document.rawValue, path: v.path, createdAt: v.createdAt, size: v.size,
                  reason: v.reason.rawValue, method: v.method.rawValue, pinned: v.isPinned)
    }

    init(_ v: VersionInfo) {
        self.init(id: v.version.rawValue, document: v.document.rawValue, path: v.path.rawValue,
                  createdAt: Date(timeIntervalSince1970: Double(v.createdMs) / 1000), size: Int64(clamping: v.size),
                  reason: v.reason, method: v.method, pinned: v.pinned)
    }

    init(id: UInt64, document: UInt64, path: String, createdAt: Date, size: Int64, reason: String, method: String, pinned: Bool) {
        self.id = id
        self.document = document
        self.path = path
        self.createdAt = createdAt
        self.size = size
        self.reason = reason
        self.method = method
        self.pinned = pinned
    }
}

/// Runs a store call, turning its errors into messages for people.
func storeCall<T>(_ body: () throws -> T) throws -> T {
    do {
        return try body()
    } catch let error as DocumentStoreError {
        throw CLIError(error.description)
    }
}

/// How the store commands print.
enum StoreFormat {
    static func time(_ date: Date) -> String {
        var t = time_t(date.timeIntervalSince1970)
        var parts = tm()
        localtime_r(&t, &parts)
        func two(_ n: Int32) -> String { n < 10 ? "0\(n)" : "\(n)" }
        return "\(parts.tm_year + 1900)-\(two(parts.tm_mon + 1))-\(two(parts.tm_mday)) \(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec))"
    }

    static func isoTime(_ date: Date) -> String {
        let f = ISO8601DateFormatter()
        f.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return f.string(from: date)
    }

    static func size(_ n: Int64) -> String {
        if n >= 1 << 30 { return String(format: "%.1f GiB", Double(n) / Double(1 << 30)) }
        if n >= 1 << 20 { return String(format: "%.1f MiB", Double(n) / Double(1 << 20)) }
        if n >= 1 << 10 { return String(format: "%.1f KiB", Double(n) / 1024) }
        return "\(n) B"
    }

    /// Left-aligned columns, two spaces apart; every cell escaped (`displayEscaped`), so a name
    /// cannot break the table, drive the terminal or forge output.
    static func table(_ cells: [[String]]) -> String {
        let rows = cells.map { $0.map(\.displayEscaped) }
        guard let columns = rows.map(\.count).max() else { return "" }
        var widths = [Int](repeating: 0, count: columns)
        for row in rows { for (i, cell) in row.enumerated() { widths[i] = max(widths[i], cell.count) } }
        var out = ""
        for row in rows {
            var line = ""
            for (i, cell) in row.enumerated() {
                line += i + 1 == row.count ? cell : cell + String(repeating: " ", count: widths[i] - cell.count + 2)
            }
            while line.hasSuffix(" ") { line.removeLast() }
            out += line + "\n"
        }
        return out
    }

    /// One JSON object, keys sorted. Strings as `JSONString` writes them: a name that is not UTF-8
    /// keeps its bytes as `\udcNN` (PEP 383), where JSONSerialization would write the lossless
    /// string's private-use scalars.
    static func json(_ object: [String: Any]) -> String {
        var out: [UInt8] = []
        append(object, to: &out)
        return String(decoding: out, as: UTF8.self)
    }

    private static func append(_ value: Any, to out: inout [UInt8]) {
        switch value {
        case let s as String: JSONString.append(s, to: &out)
        case let b as Bool: out.append(contentsOf: (b ? "true" : "false").utf8)
        case let n as Int: JSONString.appendNumber(Int64(n), to: &out)
        case let n as Int64: JSONString.appendNumber(n, to: &out)
        case let n as Int32: JSONString.appendNumber(Int64(n), to: &out)
        case let n as UInt64: JSONString.appendNumber(n, to: &out)
        case let n as UInt32: JSONString.appendNumber(UInt64(n), to: &out)
        case let d as Double: out.append(contentsOf: (d.isFinite ? d.description : "null").utf8)
        case let o as [String: Any]:
            out.append(UInt8(ascii: "{"))
            for (i, key) in o.keys.sorted().enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                JSONString.append(key, to: &out)
                out.append(UInt8(ascii: ":"))
                append(o[key]!, to: &out)
            }
            out.append(UInt8(ascii: "}"))
        case let a as [Any]:
            out.append(UInt8(ascii: "["))
            for (i, e) in a.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                append(e, to: &out)
            }
            out.append(UInt8(ascii: "]"))
        default: out.append(contentsOf: "null".utf8)
        }
    }

    static func json(_ v: VersionRow) -> String {
        json([
            "version": v.id, "document": v.document, "path": "/" + v.path,
            "time": isoTime(v.createdAt), "size": v.size, "reason": v.reason,
            "method": v.method, "pinned": v.pinned,
        ])
    }

    static func identity(_ i: FileIdentity?) -> Any {
        guard let i else { return NSNull() }
        return ["device": i.device, "inode": i.inode, "size": i.size, "mtimeNs": i.modificationTimeNanoseconds]
    }
}
