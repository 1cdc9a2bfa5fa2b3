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
    /// The kernel reads and writes this open through its backing file (writes never reach the
    /// daemon); nil when they come to the daemon.
    public let backingID: Int32?
    /// Counted in the node's passthrough opens (until release).
    let sharesInodeMode: Bool
    /// Served by the daemon with direct_io, counted in the node's `served` opens until the kernel
    /// surely took the open (`taken()`).
    public let servedByDaemon: Bool
    private let takenFlag = Atomic<Bool>(false)

    /// A request on this open came: the kernel took its open reply. Once, for an open the daemon
    /// serves on purpose: the inode's new opens may pass through again.
    @inline(__always)
    func taken() {
        guard servedByDaemon, !takenFlag.load(ordering: .relaxed),
              !takenFlag.exchange(true, ordering: .relaxed) else { return }
        inode.passthrough.withLock { $0.served -= 1 }
    }
    /// For a passthrough open for writing (not a create, not O_TRUNC): ctime, mtime and size when
    /// opened, to tell at release whether the file changed (multigrain timestamps: a change after
    /// this fstat gets a new ctime).
    private let openedState: Mutex<FileState?>
    /// For an open for writing the daemon serves (not a create, not O_TRUNC): the file when opened,
    /// for `wroteNothing` (its writes reach the daemon and mark it modified; this tells a change
    /// made through another open since).
    private let servedAtOpen: FileState?
    /// An open for writing that may be held without writing: neither a create nor O_TRUNC, which
    /// change the file by themselves (`wroteNothing`).
    public let mayWriteNothing: Bool
    /// The file as another program's change left it, made past this open while it was held
    /// without writing (`noteChangedPast`): for `wroteNothing`, as good as the file at the open.
    private let changedPast = Mutex<FileState?>(nil)
    /// State the layer above keeps with this open (the coordinated access it holds). Set before the
    /// open is answered and read after release, so no lock is needed.
    public var attachment: AnyObject?
    /// The descriptors this open holds for a user other than root and the owner
    /// (`OpenFileBounds`), given back when its descriptor closes. Set before the open is answered.
    var hold: OpenFileBounds.Hold?

    init(fd: Int32, inode: BackingNode, flags: Int32, backingID: Int32? = nil, sharesInodeMode: Bool = false, servedByDaemon: Bool = false) {
        self.fd = fd; self.inode = inode; self.flags = flags
        self.backingID = backingID; self.sharesInodeMode = sharesInodeMode; self.servedByDaemon = servedByDaemon
        // A create or an O_TRUNC open is a change whatever it writes: nothing to compare.
        let write = flags & O_ACCMODE != O_RDONLY && flags & (O_TRUNC | O_CREAT) == 0
        mayWriteNothing = write
        openedState = Mutex(backingID != nil && write ? FileState(fd) : nil)
        servedAtOpen = backingID == nil && write ? FileState(fd) : nil
    }
    deinit {
        close(fd)
        hold?.giveBack()
    }

    /// True once data or size changed through this open (write, truncate, fallocate, copy into it).
    public var modified: Bool { modifiedFlag.load(ordering: .relaxed) }

    @inline(__always)
    func markModified() {
        if !modifiedFlag.load(ordering: .relaxed) { modifiedFlag.store(true, ordering: .relaxed) }
    }

    /// Marks the open modified if the file changed since it was opened (passthrough writes).
    public func noteChangesSinceOpen() {
        if let before = openedState.withLock({ $0 }), before != FileState(fd) { markModified() }
    }

    /// The open wrote (a passthrough write of it the backing watcher saw): its release tells a
    /// change whatever the file's times say then.
    public func noteWritten() { markModified() }

    /// A change made beside the mount while this open was held was told already: its release tells
    /// a change only if the file changed after now (or it wrote, `noteWritten`).
    public func noteChangedBeside() {
        openedState.withLock { if $0 != nil { $0 = FileState(fd) } }
    }

    /// Attributes were just set for this open (a mode, times; call `noteChangesSinceOpen` before
    /// setting them, so that a write before them counts): the new ctime and times are not a write.
    public func noteAttributesSet() {
        openedState.withLock { if $0 != nil { $0 = FileState(fd) } }
    }

    /// The file's size, mtime and ctime when this passthrough open for writing began (nil: a create
    /// or an O_TRUNC open, which change the file by themselves, or an open the daemon serves).
    public var stateAtOpen: (size: Int64, mtime: (Int, Int), ctime: (Int, Int))? {
        openedState.withLock { s in
            s.map { (Int64($0.size), ($0.mtime.tv_sec, $0.mtime.tv_nsec), ($0.ctime.tv_sec, $0.ctime.tv_nsec)) }
        }
    }

    /// Whether this is an open for writing (not a create, not O_TRUNC) through which nothing was
    /// written: its file is as it was when opened (for a passthrough open, or as when a change
    /// beside the mount or an attribute set was last noted), and its status last changed before
    /// `limit` (CLOCK_REALTIME, as file times are); or just as a request that went ahead past it
    /// left it (`noteChangedPast`), however recently. A program that holds its file open to write it
    /// some time, not now: an office suite's loaded document, a database connection that only read.
    public func wroteNothing(changedBefore limit: timespec) -> Bool {
        guard !modified, let before = openedState.withLock({ $0 }) ?? servedAtOpen, let now = FileState(fd) else { return false }
        // Just as a request that went ahead past it left the file: its change, however recent.
        if now == changedPast.withLock({ $0 }) { return true }
        guard now == before else { return false }
        return now.changed(before: limit)
    }

    /// Whether this is an open for writing in place (not a create, not O_TRUNC) whose file nobody
    /// changed since `limit` (CLOCK_REALTIME), whatever was written through it before: a program
    /// that wrote, and has not for a while (a database connection between its transactions).
    public func unchanged(since limit: timespec) -> Bool {
        guard mayWriteNothing, let now = FileState(fd) else { return false }
        return now.changed(before: limit)
    }

    /// A request that went ahead past this open while it was held without writing has ended (a
    /// `cp` over the document an office suite holds): the file as it is now is that request's
    /// change, not this open's, and `wroteNothing` takes it as the file at the open. What the
    /// release tells is unchanged. Call it while the open is surely held (its descriptor open).
    public func noteChangedPast() {
        guard mayWriteNothing, let now = FileState(fd) else { return }
        changedPast.withLock { $0 = now }
    }

    /// Opened for writing (O_WRONLY or O_RDWR) or with O_TRUNC.
    public var isWrite: Bool { flags & O_ACCMODE != O_RDONLY || flags & O_TRUNC != 0 }

    var handle: FileHandleID { FileHandleID(rawValue: UInt64(UInt(bitPattern: Unmanaged.passUnretained(self).toOpaque()))) }

    static func from(_ handle: FileHandleID) -> OpenFile {
        Unmanaged<OpenFile>.fromOpaque(UnsafeRawPointer(bitPattern: UInt(handle.rawValue))!).takeUnretainedValue()
    }
}

/// What a write changes in a file's metadata.
public struct FileState: Equatable, Sendable {
    var ctime: timespec, mtime: timespec, size: off_t

    /// The state `st` shows.
    public init(_ st: stat) {
        ctime = st.st_ctim; mtime = st.st_mtim; size = st.st_size
    }

    /// The state of `fd`'s file now; nil when it cannot be read.
    public init?(_ fd: Int32) {
        var st = stat()
        guard fstat(fd, &st) == 0 else { return nil }
        ctime = st.st_ctim; mtime = st.st_mtim; size = st.st_size
    }

    /// Whether the file's status last changed before `limit` (CLOCK_REALTIME).
    func changed(before limit: timespec) -> Bool {
        ctime.tv_sec < limit.tv_sec || (ctime.tv_sec == limit.tv_sec && ctime.tv_nsec < limit.tv_nsec)
    }

    public static func == (a: FileState, b: FileState) -> Bool {
        a.size == b.size && a.ctime.tv_sec == b.ctime.tv_sec && a.ctime.tv_nsec == b.ctime.tv_nsec
            && a.mtime.tv_sec == b.mtime.tv_sec && a.mtime.tv_nsec == b.mtime.tv_nsec
    }
}
