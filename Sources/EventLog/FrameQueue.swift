/// Records waiting for the writer, already encoded: their frames (`RecordCodec`) back to back in
/// seq order, and where each one ends.
///
/// Records are encoded when they are appended, on the appending thread, so the writer thread only
/// writes bytes. The daemon's records are appended by the event recorder, whose formatting runs on
/// the writer thread or, between requests, on the FUSE worker that holds /dev/fuse and would
/// otherwise only be polling it: encoding there costs the workload nothing.
struct FrameQueue {
    /// The frames, back to back.
    private(set) var buffer = ByteBuffer()
    /// The frames, as an array (tests).
    var bytes: [UInt8] { buffer.array }
    /// Each frame's seq and the offset in `bytes` just past it.
    private(set) var frames: [(seq: UInt64, end: Int)] = []

    var count: Int { frames.count }
    var isEmpty: Bool { frames.isEmpty }

    /// Encodes `record` (its seq and time already set) at the end.
    mutating func append(_ record: borrowing EventRecord) {
        RecordCodec.appendFrame(record, to: &buffer)
        frames.append((record.seq, buffer.count))
    }

    /// Frames a record whose fields are already encoded (`EncodedRecords`) at the end.
    mutating func append(kind: EventKind, seq: UInt64, time: EventTime, fields: UnsafeRawBufferPointer) {
        RecordCodec.appendFrame(kind: kind, seq: seq, time: time, fields: fields, to: &buffer)
        frames.append((seq, buffer.count))
    }

    /// Where frame `i` starts in `bytes`.
    func start(of i: Int) -> Int { i == 0 ? 0 : frames[i - 1].end }

    /// The frames from `i` on, as a queue of their own (what a failed write left).
    func suffix(from i: Int) -> FrameQueue {
        guard i < count else { return FrameQueue() }
        let base = start(of: i)
        var rest = FrameQueue()
        rest.buffer = buffer.withUnsafeBytes { ByteBuffer(UnsafeRawBufferPointer(rebasing: $0[base...])) }
        rest.frames = frames[i...].map { ($0.seq, $0.end - base) }
        return rest
    }

    /// Empties the queue; keeps its buffers unless a rare burst made them large.
    mutating func removeAll() {
        if buffer.capacity > 1 << 22 || frames.capacity > 1 << 16 {
            self = FrameQueue()
        } else {
            buffer.removeAll(keepingCapacity: true)
            frames.removeAll(keepingCapacity: true)
        }
    }
}
