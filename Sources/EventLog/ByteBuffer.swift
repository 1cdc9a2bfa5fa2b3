import Glibc

/// Where `RecordCodec` writes: an `[UInt8]`, or a `ByteBuffer`.
protocol ByteSink {
    var count: Int { get }
    mutating func append(_ byte: UInt8)
    mutating func append(contentsOf bytes: UnsafeRawBufferPointer)
    func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R
    /// Overwrites the 8 bytes at `offset`, which were appended before.
    mutating func store(_ value: UInt64, at offset: Int)
    /// Appends at most `limit` (at most 32) bytes that `body` writes at the pointer it is given;
    /// `body` returns how many it wrote.
    mutating func append(upTo limit: Int, _ body: (UnsafeMutableRawPointer) -> Int)
}

extension ByteSink {
    mutating func append(contentsOf bytes: UnsafeBufferPointer<UInt8>) { append(contentsOf: UnsafeRawBufferPointer(bytes)) }
}

extension Array: ByteSink where Element == UInt8 {
    mutating func store(_ value: UInt64, at offset: Int) {
        withUnsafeMutableBytes { $0.storeBytes(of: value, toByteOffset: offset, as: UInt64.self) }
    }

    mutating func append(upTo limit: Int, _ body: (UnsafeMutableRawPointer) -> Int) {
        precondition(limit <= 32)
        var buffer: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
        Swift.withUnsafeMutableBytes(of: &buffer) { p in
            let n = body(p.baseAddress!)
            append(contentsOf: UnsafeRawBufferPointer(rebasing: p[0..<n]))
        }
    }
}

/// A growable run of bytes with value semantics (copy on write), for the event log's encoders:
/// an append is a capacity check and a copy. (`Array`'s generic `append(contentsOf:)` costs 140 to
/// 230 instructions for the few bytes of a field, which made it most of a record's encoding.)
package struct ByteBuffer: ByteSink {
    /// Written only through a buffer that holds the one reference to it (`reserve`), so a
    /// shared one (the empty one, or a copy's) is only read. (A `ManagedBuffer`, bytes and
    /// header in one allocation, measured slower: its accessors are not inlined here.)
    private final class Storage: @unchecked Sendable {
        let pointer: UnsafeMutableRawPointer
        let capacity: Int

        init(capacity: Int) {
            self.capacity = capacity
            pointer = UnsafeMutableRawPointer.allocate(byteCount: max(capacity, 1), alignment: 8)
        }

        deinit { pointer.deallocate() }
    }

    private var storage: Storage
    package private(set) var count = 0

    /// No bytes; the first append allocates.
    package init() { storage = ByteBuffer.empty }

    private static let empty = Storage(capacity: 0)

    /// A buffer holding `bytes`.
    init(_ bytes: UnsafeRawBufferPointer) {
        storage = ByteBuffer.empty
        append(contentsOf: bytes)
    }

    package var isEmpty: Bool { count == 0 }
    var capacity: Int { storage.capacity }

    /// The bytes, as an array (tests, rare callers).
    package var array: [UInt8] { withUnsafeBytes { Array($0) } }

    /// Room for `extra` more bytes, owned by this buffer alone; returns where they go.
    @inline(__always)
    private mutating func reserve(_ extra: Int) -> UnsafeMutableRawPointer {
        if _slowPath(count + extra > storage.capacity || !isKnownUniquelyReferenced(&storage)) { grow(count + extra) }
        return storage.pointer + count
    }

    private mutating func grow(_ needed: Int) {
        let capacity = needed > storage.capacity ? max(needed, storage.capacity * 2, 64) : storage.capacity
        let new = Storage(capacity: capacity)
        if count > 0 { new.pointer.copyMemory(from: storage.pointer, byteCount: count) }
        storage = new
    }

    package mutating func append(_ byte: UInt8) {
        reserve(1).storeBytes(of: byte, as: UInt8.self)
        count += 1
    }

    package mutating func append(contentsOf bytes: UnsafeRawBufferPointer) {
        guard let base = bytes.baseAddress, bytes.count > 0 else { return }
        reserve(bytes.count).copyMemory(from: base, byteCount: bytes.count)
        count += bytes.count
    }

    /// Appends `other`'s bytes in `range`.
    package mutating func append(_ other: ByteBuffer, _ range: Range<Int>) {
        precondition(range.lowerBound >= 0 && range.upperBound <= other.count)
        guard !range.isEmpty else { return }
        let source = other.storage // kept alive (and `other` may be `self`) while copying
        reserve(range.count).copyMemory(from: source.pointer + range.lowerBound, byteCount: range.count)
        count += range.count
    }

    /// Appends at most `limit` bytes that `body` writes at the pointer it is given; `body` returns
    /// how many it wrote.
    @inline(__always)
    mutating func append(upTo limit: Int, _ body: (UnsafeMutableRawPointer) -> Int) {
        let n = body(reserve(limit))
        precondition(n <= limit)
        count += n
    }

    /// Overwrites bytes already appended (a frame's header once its payload is known).
    mutating func store(_ value: UInt64, at offset: Int) {
        precondition(offset >= 0 && offset + 8 <= count)
        let start = reserve(0) - count // (unique now)
        start.storeBytes(of: value, toByteOffset: offset, as: UInt64.self)
    }

    /// Drops the bytes from `offset` on.
    mutating func removeSuffix(from offset: Int) {
        precondition(offset >= 0 && offset <= count)
        count = offset
    }

    /// Empties the buffer; keeps its memory if `keepingCapacity` (and it is not shared).
    package mutating func removeAll(keepingCapacity: Bool = true) {
        count = 0
        if !keepingCapacity { storage = ByteBuffer.empty }
    }

    package func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try withExtendedLifetime(storage) { try body(UnsafeRawBufferPointer(start: storage.pointer, count: count)) }
    }
}
