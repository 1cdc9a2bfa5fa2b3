/// A kernel file handle as a dictionary key: its type, its length and its bytes, the first 32 in
/// four words (ext4's handles are 8 bytes, XFS's and btrfs's up to 40, `MAX_HANDLE_SZ` is 128),
/// any beyond in an array. Hashed as a few words, where a `[UInt8]` is fed to the hasher a byte at
/// a time, and made from an event's bytes in place, without an array (the backing watcher looks up
/// each fanotify event's handles by it). Two keys are equal for the same type and the same bytes.
public struct FileHandleKey: Hashable, Sendable {
    private let type: Int32, count: Int32
    private var words: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
    private let rest: [UInt8]?

    /// `bytes`: the handle's `f_handle` bytes (`handle_bytes` of them), `type` its `handle_type`.
    public init(type: Int32, bytes: UnsafeRawBufferPointer) {
        self.type = type
        count = Int32(truncatingIfNeeded: bytes.count)
        let head = min(bytes.count, 32)
        withUnsafeMutableBytes(of: &words) { $0.copyMemory(from: UnsafeRawBufferPointer(rebasing: bytes[0..<head])) }
        rest = bytes.count > 32 ? Array(bytes[32...]) : nil
    }

    public init(type: Int32, bytes: [UInt8]) {
        self = bytes.withUnsafeBytes { FileHandleKey(type: type, bytes: $0) }
    }

    public init(_ handle: LinuxCalls.KernelFileHandle) {
        self.init(type: handle.type, bytes: handle.bytes)
    }

    /// The handle itself (to open it, or find its path).
    public var kernelHandle: LinuxCalls.KernelFileHandle {
        var w = words
        let head = withUnsafeBytes(of: &w) { Array($0.prefix(min(Int(count), 32))) }
        return LinuxCalls.KernelFileHandle(bytes: head + (rest ?? []), type: type)
    }

    public static func == (a: FileHandleKey, b: FileHandleKey) -> Bool {
        a.type == b.type && a.count == b.count && a.words == b.words && a.rest == b.rest
    }

    /// The words that hold bytes of the handle, and the bytes past them.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(UInt64(UInt32(bitPattern: type)) << 32 | UInt64(UInt32(bitPattern: count)))
        hasher.combine(words.0)
        if count > 8 { hasher.combine(words.1) }
        if count > 16 { hasher.combine(words.2) }
        if count > 24 { hasher.combine(words.3) }
        if let rest { rest.withUnsafeBytes { hasher.combine(bytes: $0) } }
    }
}
