/// Which records a reader returns. Empty criteria match everything; criteria combine with AND,
/// values inside one criterion with OR. `gap` records always pass, so a filtered view still says
/// where history is missing.
public struct EventFilter: Sendable, Hashable {
    /// Only these kinds (nil = all).
    public var kinds: Set<EventKind>?
    /// Only records whose actor has one of these pids (nil = all).
    public var pids: Set<Int32>?
    /// Only records whose `path` or `oldPath` matches one of these patterns (empty = all).
    public var paths: [PathGlob]

    public init(kinds: Set<EventKind>? = nil, pids: Set<Int32>? = nil, paths: [PathGlob] = []) {
        self.kinds = kinds
        self.pids = pids
        self.paths = paths
    }

    /// Builds a filter from command-line strings: kind names (see `EventKind.init(name:)`), pids
    /// and glob patterns. Throws `EventLogError.invalidArgument` naming the bad value.
    public init(kindNames: [String], pids: [Int32], pathPatterns: [String]) throws {
        var kinds: Set<EventKind> = []
        for name in kindNames {
            for part in name.split(separator: ",") where !part.isEmpty {
                guard let k = EventKind(name: String(part)) else {
                    let known = EventKind.allCases.map(\.rawValue).joined(separator: ", ")
                    throw EventLogError.invalidArgument("unknown event kind \(part); known kinds: \(known)")
                }
                kinds.insert(k)
            }
        }
        self.kinds = kinds.isEmpty ? nil : kinds
        self.pids = pids.isEmpty ? nil : Set(pids)
        self.paths = try pathPatterns.map { try PathGlob($0) }
    }

    /// True when no criterion is set.
    public var isEmpty: Bool { kinds == nil && pids == nil && paths.isEmpty }

    public func matches(_ r: EventRecord) -> Bool {
        if r.kind == .gap { return true }
        if let kinds, !kinds.contains(r.kind) { return false }
        if let pids {
            guard let pid = r.actor?.pid, pids.contains(pid) else { return false }
        }
        if !paths.isEmpty {
            let hit = paths.contains { g in g.matches(r.path) || (r.oldPath.map { g.matches($0) } ?? false) }
            if !hit { return false }
        }
        return true
    }
}
