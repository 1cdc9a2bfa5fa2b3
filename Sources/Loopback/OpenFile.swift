import Glibc
import FuseKit
import Synchronization

/// One open of a backing file: its descriptor and what happened through it. The kernel's file handle
/// is the object's address (retained from open until release).
public final class OpenFile: @unchecked Sendable {
    public let fd: Int32
    public let inode: BackingNode
    /// The open(2) flags as the kernel sent them.
    public let flags: Int32
    private let modifiedFlag = Atomic<Bool>(false)
    /// State the layer above keeps with this open (the coordinated access it holds). Set before the
    /// open is answered and read after release, so no lock is needed.
    public var attachment: AnyObject?

    init(fd: Int32, inode: BackingNode, flags: Int32) {
        self.fd = fd; self.inode = inode; self.flags = flags
    }
    deinit { close(fd) }

    /// True once data or size changed through this open (write, truncate, fallocate, copy into it).
    public var modified: Bool { modifiedFlag.load(ordering: .relaxed) }

    @inline(__always)
    func markModified() {
        if !modifiedFlag.load(ordering: .relaxed) { modifiedFlag.store(true, ordering: .relaxed) }
    }

    /// Opened for writing (O_WRONLY or O_RDWR) or with O_TRUNC.
    public var isWrite: Bool { flags & O_ACCMODE != O_RDONLY || flags & O_TRUNC != 0 }

    var handle: FileHandleID { FileHandleID(rawValue: UInt64(UInt(bitPattern: Unmanaged.passUnretained(self).toOpaque()))) }

    static func from(_ handle: FileHandleID) -> OpenFile {
        Unmanaged<OpenFile>.fromOpaque(UnsafeRawPointer(bitPattern: UInt(handle.rawValue))!).takeUnretainedValue()
    }
}
