import Synchronization

/// What a writer knows of its log, in memory, for readers in the same process (the daemon's
/// `readLog`): the segments, the seq the next written record gets, and for each segment a sparse
/// seq → file offset index, so that a reader opened at any position seeks instead of scanning.
///
/// The index is a hint built from frames that were read or written whole: an entry is the first
/// frame starting in each `stride`-byte stretch of a segment (and the segment's first frame).
/// That rule depends only on the segment's bytes, so the writer (for everything it writes), its
/// recovery scan (the newest segment at open) and every reader passing through a segment (older
/// segments of a previous writer) record the same entries; each segment is scanned at most once
/// for them. A reader seeks to the last entry at or before the seq it wants and scans at most one
/// stretch from there. The frame format has no resynchronisation marker (a name may hold bytes
/// that look like a frame), so offsets are never guessed: an entry is always a frame boundary
/// that was read or written.
public final class EventLogIndex: Sendable {
    /// Bytes of a segment per entry at most (plus one frame).
    public static let stride = 64 * 1024

    struct Entry: Equatable {
        var seq: UInt64
        var offset: Int
    }

    private struct State {
        /// The segments the writer has, oldest first, and the entries of each.
        var segments: [(name: SegmentName, entries: [Entry])] = []
        var nextSeq: UInt64 = 1
    }

    private let state = Mutex(State())

    init() {}

    /// The seq of the oldest record stored (nil when the log has no segment) and the seq the next
    /// written record will get: what `EventLogReader.bounds(directory:)` finds, without a scan.
    public var bounds: (oldestSeq: UInt64?, nextSeq: UInt64) {
        state.withLock { ($0.segments.first?.name.firstSeq, $0.nextSeq) }
    }

    /// Entries known in all segments (for tests and the benchmark).
    public var entryCount: Int { state.withLock { $0.segments.reduce(0) { $0 + $1.entries.count } } }

    /// Whether a frame at `offset`, following one at `previous` (nil: the segment's first frame), is an entry.
    static func isEntry(offset: Int, previous: Int?) -> Bool {
        guard let previous else { return true }
        return offset / stride != previous / stride
    }

    var segmentNames: [SegmentName] { state.withLock { $0.segments.map(\.name) } }

    /// The last known entry of `segment` at or before `seq`.
    func entry(atOrBefore seq: UInt64, in segment: SegmentName) -> Entry? {
        state.withLock { s in
            guard let i = s.segments.firstIndex(where: { $0.name == segment }) else { return nil }
            let entries = s.segments[i].entries
            // Binary search: the first entry after `seq`, then one back.
            var low = 0, high = entries.count
            while low < high {
                let mid = (low + high) / 2
                if entries[mid].seq <= seq { low = mid + 1 } else { high = mid }
            }
            return low == 0 ? nil : entries[low - 1]
        }
    }

    /// Records entries of `segment` (in offset order); known ones and unknown segments are ignored.
    func note(_ entries: some Collection<Entry>, in segment: SegmentName) {
        guard !entries.isEmpty else { return }
        state.withLock { s in
            guard let i = s.segments.lastIndex(where: { $0.name == segment }) else { return }
            for e in entries {
                if let last = s.segments[i].entries.last, last.offset >= e.offset {
                    // Rarely out of order (a reader ahead of the writer's note): insert if new.
                    let list = s.segments[i].entries
                    var low = 0, high = list.count
                    while low < high {
                        let mid = (low + high) / 2
                        if list[mid].offset < e.offset { low = mid + 1 } else { high = mid }
                    }
                    if low < list.count && list[low].offset == e.offset { continue }
                    s.segments[i].entries.insert(e, at: low)
                } else {
                    s.segments[i].entries.append(e)
                }
            }
        }
    }

    func note(_ entry: Entry, in segment: SegmentName) { note(CollectionOfOne(entry), in: segment) }

    /// A segment the writer created (or found at open); kept in seq order.
    func add(_ segment: SegmentName) {
        state.withLock { s in
            guard !s.segments.contains(where: { $0.name == segment }) else { return }
            let at = s.segments.firstIndex(where: { $0.name > segment }) ?? s.segments.count
            s.segments.insert((segment, []), at: at)
        }
    }

    /// A segment retention deleted.
    func remove(_ segment: SegmentName) {
        state.withLock { s in s.segments.removeAll { $0.name == segment } }
    }

    func setNextSeq(_ seq: UInt64) {
        state.withLock { $0.nextSeq = max($0.nextSeq, seq) }
    }
}
