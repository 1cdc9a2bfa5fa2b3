// A comparable description of a whole folder tree, to check that a sequence of operations left
// the mount (and its backing folder) in the same state as the native folder.
import Glibc

enum Tree {
    /// Relative path → description of everything that must match (type, mode, owner, size,
    /// link count, device, symlink target, content digest, user xattrs). Times are left out:
    /// the two sides were built at different moments. `skipTopLevel` names are not visited.
    static func snapshot(_ root: String, skipTopLevel: Set<String> = []) -> [String: String] {
        var out: [String: String] = [:]
        walk(root, rel: "", skip: skipTopLevel, into: &out)
        return out
    }

    private static func walk(_ root: String, rel: String, skip: Set<String>, into out: inout [String: String]) {
        let dir = rel.isEmpty ? root : root + "/" + rel
        let (entries, o) = Sys.readdir(dir)
        guard o.ok else { out[rel + "/"] = "readdir failed: \(o)"; return }
        for entry in entries {
            if rel.isEmpty && skip.contains(entry.name) { continue }
            let path = rel.isEmpty ? entry.name : rel + "/" + entry.name
            out[path] = describe(root + "/" + path, dtype: entry.type)
            if entry.type == UInt8(DT_DIR) { walk(root, rel: path, skip: skip, into: &out) }
        }
    }

    static func describe(_ path: String, dtype: UInt8) -> String {
        let (meta, o) = Sys.lstat(path)
        guard let m = meta else { return "lstat failed: \(o)" }
        var d = "d_type=\(dtype) " + m.shape
        switch m.type {
        case S_IFLNK: d += " -> " + (Sys.readlink(path).0 ?? "readlink failed: \(Sys.readlink(path).1)")
        case S_IFREG: d += " content=" + digest(path, size: m.size)
        default: break
        }
        let (xattrs, xo) = Sys.xattrs(path)
        if !xo.ok && xo.err != EOPNOTSUPP && xo.err != EPERM {
            d += " listxattr=\(xo)"
        } else if !xattrs.isEmpty {
            d += " xattrs=" + xattrs.keys.sorted().map { "\($0)=\(fnv(xattrs[$0]!))" }.joined(separator: ",")
        }
        return d
    }

    /// FNV-1a of the content; for files over 64 MiB only the first and last MiB (huge sparse
    /// files have their own dedicated checks).
    static func digest(_ path: String, size: Int) -> String {
        guard size > 64 << 20 else {
            guard let bytes = Sys.contents(path).0 else { return "unreadable: \(Sys.contents(path).1)" }
            return String(fnv(bytes), radix: 16)
        }
        let o = Sys.open(path, O_RDONLY)
        guard o.ok else { return "unreadable: \(o)" }
        defer { close(Int32(o.ret)) }
        let head = Sys.read(Int32(o.ret), count: 1 << 20, at: 0).0
        let tail = Sys.read(Int32(o.ret), count: 1 << 20, at: size - (1 << 20)).0
        return "large:" + String(fnv(head + tail), radix: 16)
    }

    static func fnv(_ bytes: [UInt8]) -> UInt64 {
        var h: UInt64 = 0xcbf2_9ce4_8422_2325
        for b in bytes { h = (h ^ UInt64(b)) &* 0x100_0000_01b3 }
        return h
    }

    /// Human-readable differences between two snapshots, at most `limit` lines.
    static func diff(_ a: [String: String], _ b: [String: String], labels: (String, String), limit: Int = 20) -> [String] {
        var lines: [String] = []
        for key in Set(a.keys).union(b.keys).sorted() where a[key] != b[key] {
            lines.append("\(key): \(labels.0)={\(a[key] ?? "missing")} \(labels.1)={\(b[key] ?? "missing")}")
            if lines.count == limit { lines.append("..."); break }
        }
        return lines
    }
}
