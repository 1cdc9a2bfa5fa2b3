/// Three-way merge, unified diff and the binary test, on bytes, line by line.
public enum TextMerge {
    /// Like git: a NUL byte in the first 8000 bytes means binary.
    public static func looksBinary(_ bytes: [UInt8]) -> Bool {
        bytes.prefix(8000).contains(0)
    }

    /// The result of a three-way merge.
    public struct Merged: Sendable, Hashable {
        /// The merged bytes, conflicting hunks between markers.
        public var text: [UInt8]
        /// How many conflicting hunks were marked.
        public var conflicts: Int
    }

    /// diff3-style merge of `mine` and `theirs` against `base`: changes made on one side only are
    /// taken; changes on both sides that overlap or touch are a conflict unless both sides made
    /// the same change. Conflicts are marked the way `git merge-file -L mine -L base -L theirs`
    /// marks them (lines both sides share at the edges of a conflict are left outside it):
    ///
    ///     <<<<<<< mine
    ///     …
    ///     =======
    ///     …
    ///     >>>>>>> theirs
    public static func merge(base: [UInt8], mine: [UInt8], theirs: [UInt8], mineLabel: String = "mine", theirsLabel: String = "theirs") -> Merged {
        let baseLines = LineDiff.lines(base)
        let mineLines = LineDiff.lines(mine)
        let theirsLines = LineDiff.lines(theirs)
        let ids = LineDiff.intern([baseLines, mineLines, theirsLines])
        let mineHunks = LineDiff.hunks(ids[0], ids[1]).map { ($0, true) }
        let theirsHunks = LineDiff.hunks(ids[0], ids[2]).map { ($0, false) }
        let all = (mineHunks + theirsHunks).sorted { ($0.0.aStart, $0.0.aEnd) < ($1.0.aStart, $1.0.aEnd) }

        /// What the merged text is made of, before rendering.
        enum Chunk {
            case unchanged([ArraySlice<UInt8>])
            case taken([ArraySlice<UInt8>])
            case conflict(mine: [ArraySlice<UInt8>], theirs: [ArraySlice<UInt8>])
        }
        var chunks: [Chunk] = []

        /// The lines of one side covering base lines regionStart..<regionEnd.
        func sideRegion(_ hunks: [DiffHunk], _ lines: [ArraySlice<UInt8>], _ regionStart: Int, _ regionEnd: Int) -> [ArraySlice<UInt8>] {
            guard let first = hunks.first, let last = hunks.last else { return Array(baseLines[regionStart..<regionEnd]) }
            let start = first.bStart - (first.aStart - regionStart)
            let end = last.bEnd + (regionEnd - last.aEnd)
            return Array(lines[start..<end])
        }

        var basePosition = 0
        var index = 0
        while index < all.count {
            let regionStart = all[index].0.aStart
            var regionEnd = all[index].0.aEnd
            var group = [all[index]]
            index += 1
            // Overlapping or touching changes form one region (git conflicts on adjacent changes).
            while index < all.count && all[index].0.aStart <= regionEnd {
                regionEnd = max(regionEnd, all[index].0.aEnd)
                group.append(all[index])
                index += 1
            }
            chunks.append(.unchanged(Array(baseLines[basePosition..<regionStart])))
            let mineGroup = group.filter { $0.1 }.map { $0.0 }
            let theirsGroup = group.filter { !$0.1 }.map { $0.0 }
            let mineRegion = sideRegion(mineGroup, mineLines, regionStart, regionEnd)
            let theirsRegion = sideRegion(theirsGroup, theirsLines, regionStart, regionEnd)
            if theirsGroup.isEmpty {
                chunks.append(.taken(mineRegion))
            } else if mineGroup.isEmpty || mineRegion == theirsRegion {
                chunks.append(.taken(theirsRegion))
            } else {
                // Like git's zealous level: diff the two sides and mark only what differs.
                let sideIDs = LineDiff.intern([mineRegion, theirsRegion])
                var position = 0
                for hunk in LineDiff.hunks(sideIDs[0], sideIDs[1]) {
                    chunks.append(.unchanged(Array(mineRegion[position..<hunk.aStart])))
                    chunks.append(.conflict(mine: Array(mineRegion[hunk.aStart..<hunk.aEnd]), theirs: Array(theirsRegion[hunk.bStart..<hunk.bEnd])))
                    position = hunk.aEnd
                }
                chunks.append(.unchanged(Array(mineRegion[position...])))
            }
            basePosition = regionEnd
        }
        chunks.append(.unchanged(Array(baseLines[basePosition...])))

        // Coalesce unchanged runs, then join conflicts at most 3 unchanged lines apart into one,
        // as git does (xdl_simplify_non_conflicts).
        var simplified: [Chunk] = []
        for chunk in chunks {
            if case let .unchanged(lines) = chunk {
                if lines.isEmpty { continue }
                if case let .unchanged(previous)? = simplified.last {
                    simplified[simplified.count - 1] = .unchanged(previous + lines)
                    continue
                }
            }
            if case let .conflict(mine, theirs) = chunk, simplified.count >= 2,
               case let .unchanged(gap) = simplified[simplified.count - 1], gap.count <= 3,
               case let .conflict(previousMine, previousTheirs) = simplified[simplified.count - 2]
            {
                simplified.removeLast(2)
                simplified.append(.conflict(mine: previousMine + gap + mine, theirs: previousTheirs + gap + theirs))
                continue
            }
            if case let .conflict(mine, theirs) = chunk, case let .conflict(previousMine, previousTheirs)? = simplified.last {
                simplified[simplified.count - 1] = .conflict(mine: previousMine + mine, theirs: previousTheirs + theirs)
                continue
            }
            simplified.append(chunk)
        }

        var out: [UInt8] = []
        var conflicts = 0
        func emit(_ lines: [ArraySlice<UInt8>]) { for line in lines { out.append(contentsOf: line) } }
        func emitMarker(_ marker: String) {
            if let last = out.last, last != 0x0A { out.append(0x0A) }
            out.append(contentsOf: Array(marker.utf8))
            out.append(0x0A)
        }
        for chunk in simplified {
            switch chunk {
            case let .unchanged(lines), let .taken(lines):
                emit(lines)
            case let .conflict(mine, theirs):
                emitMarker("<<<<<<< \(mineLabel)")
                emit(mine)
                emitMarker("=======")
                emit(theirs)
                emitMarker(">>>>>>> \(theirsLabel)")
                conflicts += 1
            }
        }
        return Merged(text: out, conflicts: conflicts)
    }

    /// A unified diff (`diff -u` format) from `old` to `new`; empty when equal, a one-line
    /// "Binary files … differ" when either looks binary.
    public static func unifiedDiff(old: [UInt8], new: [UInt8], oldLabel: String, newLabel: String, context: Int = 3) -> String {
        if old == new { return "" }
        if looksBinary(old) || looksBinary(new) { return "Binary files \(oldLabel) and \(newLabel) differ\n" }
        let oldLines = LineDiff.lines(old)
        let newLines = LineDiff.lines(new)
        let ids = LineDiff.intern([oldLines, newLines])
        let hunks = LineDiff.hunks(ids[0], ids[1])
        var out = "--- \(oldLabel)\n+++ \(newLabel)\n"
        func line(_ prefix: Character, _ bytes: ArraySlice<UInt8>) {
            out.append(prefix)
            if bytes.last == 0x0A {
                out += String(decoding: bytes, as: UTF8.self)
            } else {
                out += String(decoding: bytes, as: UTF8.self) + "\n\\ No newline at end of file\n"
            }
        }
        func range(_ start: Int, _ count: Int) -> String {
            count == 1 ? "\(start + 1)" : "\(count == 0 ? start : start + 1),\(count)"
        }
        var index = 0
        while index < hunks.count {
            // Hunks closer than twice the context share one block.
            var last = index
            while last + 1 < hunks.count && hunks[last + 1].aStart - hunks[last].aEnd <= 2 * context { last += 1 }
            let aStart = max(0, hunks[index].aStart - context)
            let aEnd = min(oldLines.count, hunks[last].aEnd + context)
            let bStart = hunks[index].bStart - (hunks[index].aStart - aStart)
            let bEnd = hunks[last].bEnd + (aEnd - hunks[last].aEnd)
            out += "@@ -\(range(aStart, aEnd - aStart)) +\(range(bStart, bEnd - bStart)) @@\n"
            var position = aStart
            for hunk in hunks[index...last] {
                for i in position..<hunk.aStart { line(" ", oldLines[i]) }
                for i in hunk.aStart..<hunk.aEnd { line("-", oldLines[i]) }
                for i in hunk.bStart..<hunk.bEnd { line("+", newLines[i]) }
                position = hunk.aEnd
            }
            for i in position..<aEnd { line(" ", oldLines[i]) }
            index = last + 1
        }
        return out
    }
}

extension TextMerge {
    /// The lines (0-based) of `old` a diff to `new` removes or replaces, and those of `new` it
    /// adds: what a side-by-side view marks.
    public static func changedLines(old: [UInt8], new: [UInt8]) -> (old: Set<Int>, new: Set<Int>) {
        let ids = LineDiff.intern([LineDiff.lines(old), LineDiff.lines(new)])
        var a = Set<Int>(), b = Set<Int>()
        for h in LineDiff.hunks(ids[0], ids[1]) {
            a.formUnion(h.aStart..<h.aEnd)
            b.formUnion(h.bStart..<h.bEnd)
        }
        return (a, b)
    }
}
