/// One difference between two line sequences: `aCount` lines of `a` from `aStart` became
/// `bCount` lines of `b` from `bStart` (0-based; a count of 0 is a pure insertion or deletion).
struct DiffHunk: Hashable, Sendable {
    var aStart: Int
    var aCount: Int
    var bStart: Int
    var bCount: Int
    var aEnd: Int { aStart + aCount }
    var bEnd: Int { bStart + bCount }
}

/// Line diff: Myers' O((N+M)·D) greedy algorithm ("An O(ND) Difference Algorithm and Its
/// Variations", 1986) on interned lines, after stripping the common prefix and suffix.
enum LineDiff {
    /// Beyond this many edits the trace (O(D²) memory) is not kept: the rest of the middle is
    /// reported as one replacement, still a correct diff, just not a minimal one.
    static let maxEdits = 4000

    /// Splits bytes into lines, each keeping its `\n` (the last may have none).
    static func lines(_ bytes: [UInt8]) -> [ArraySlice<UInt8>] {
        var result: [ArraySlice<UInt8>] = []
        var start = 0
        for (index, byte) in bytes.enumerated() where byte == 0x0A {
            result.append(bytes[start...index])
            start = index + 1
        }
        if start < bytes.count { result.append(bytes[start...]) }
        return result
    }

    /// Interns the lines of several sequences into integers (equal lines, equal numbers).
    static func intern(_ sequences: [[ArraySlice<UInt8>]]) -> [[Int]] {
        var table: [ArraySlice<UInt8>: Int] = [:]
        return sequences.map { lines in
            lines.map { line in
                if let id = table[line] { return id }
                let id = table.count
                table[line] = id
                return id
            }
        }
    }

    /// The hunks turning `a` into `b`, in order, separated by at least one equal line.
    static func hunks(_ a: [Int], _ b: [Int]) -> [DiffHunk] {
        var prefix = 0
        while prefix < a.count && prefix < b.count && a[prefix] == b[prefix] { prefix += 1 }
        var suffix = 0
        while suffix < a.count - prefix && suffix < b.count - prefix && a[a.count - 1 - suffix] == b[b.count - 1 - suffix] { suffix += 1 }
        let middleA = Array(a[prefix..<(a.count - suffix)])
        let middleB = Array(b[prefix..<(b.count - suffix)])
        // Matched (i, j) pairs of the middle, ascending, then a sentinel at the end.
        var matches = myersMatches(middleA, middleB)
        matches.append((middleA.count, middleB.count))
        var result: [DiffHunk] = []
        var i = 0
        var j = 0
        for (mi, mj) in matches {
            if mi > i || mj > j {
                result.append(DiffHunk(aStart: prefix + i, aCount: mi - i, bStart: prefix + j, bCount: mj - j))
            }
            i = mi + 1
            j = mj + 1
        }
        return result
    }

    /// The matched index pairs of a shortest edit script, ascending.
    static func myersMatches(_ a: [Int], _ b: [Int]) -> [(Int, Int)] {
        let n = a.count
        let m = b.count
        if n == 0 || m == 0 { return [] }
        let limit = min(n + m, maxEdits)
        let offset = limit + 1
        var v = [Int](repeating: 0, count: 2 * limit + 3)
        // trace[d] holds V for k in -(d-1)...(d-1) as it was before round d.
        var trace: [[Int]] = []
        var found: Int?
        outer: for d in 0...limit {
            trace.append(d == 0 ? [] : Array(v[(offset - d + 1)...(offset + d - 1)]))
            for k in stride(from: -d, through: d, by: 2) {
                var x = (k == -d || (k != d && v[offset + k - 1] < v[offset + k + 1])) ? v[offset + k + 1] : v[offset + k - 1] + 1
                var y = x - k
                while x < n && y < m && a[x] == b[y] { x += 1; y += 1 }
                v[offset + k] = x
                if x >= n && y >= m { found = d; break outer }
            }
        }
        guard let edits = found else { return [] }  // too different: one replacement
        var matches: [(Int, Int)] = []
        var x = n
        var y = m
        var d = edits
        while d > 0 {
            let previous = trace[d]
            func at(_ k: Int) -> Int { previous[k + d - 1] }
            let k = x - y
            let previousK = (k == -d || (k != d && at(k - 1) < at(k + 1))) ? k + 1 : k - 1
            let previousX = at(previousK)
            let previousY = previousX - previousK
            while x > previousX && y > previousY { x -= 1; y -= 1; matches.append((x, y)) }
            x = previousX
            y = previousY
            d -= 1
        }
        while x > 0 && y > 0 { x -= 1; y -= 1; matches.append((x, y)) }
        return matches.reversed()
    }
}
