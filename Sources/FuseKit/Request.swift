import CFuse3
import Glibc
import SystemPackage
import Synchronization
import Dispatch

/// One kernel request, answered exactly once.
///
/// The type is `~Copyable` and every reply is `consuming`, so the compiler rejects a second reply.
/// A request dropped without a reply is answered with EIO by `deinit` (as cberner/fuser does), so the
/// calling process never hangs on a forgotten request.
///
/// A request that must wait (for a presenter, for a conflicting access) is `park()`ed: the FUSE worker
/// thread returns at once and the `ParkedRequest` is answered later from any thread.
public struct Request: ~Copyable {
    @usableFromInline let raw: fuse_req_t

    @inlinable init(_ raw: fuse_req_t) { self.raw = raw }

    deinit { fuse_reply_err(raw, EIO) }

    /// The calling process (`fuse_req_ctx`).
    public var context: RequestContext {
        let c = fuse_req_ctx(raw)!.pointee
        return RequestContext(uid: c.uid, gid: c.gid, pid: c.pid, umask: c.umask)
    }

    /// The caller's supplementary groups (from /proc; costs a read, use only when needed).
    public func supplementaryGroups(max: Int = 64) -> [gid_t] {
        var list = [gid_t](repeating: 0, count: max)
        let n = list.withUnsafeMutableBufferPointer { fuse_req_getgroups(raw, Int32(max), $0.baseAddress) }
        return n > 0 ? Array(list.prefix(Int(min(n, Int32(max))))) : []
    }

    /// True when the kernel interrupted this request (the caller got a signal).
    public var isInterrupted: Bool { fuse_req_interrupted(raw) != 0 }

    public consuming func reply(error: Errno) {
        fuse_reply_err(raw, error.rawValue)
        discard self
    }
    /// Success without data (`fuse_reply_err(req, 0)`).
    public consuming func replyOK() {
        fuse_reply_err(raw, 0)
        discard self
    }
    public consuming func reply(entry: EntryReply) {
        var e = entry.c
        fuse_reply_entry(raw, &e)
        discard self
    }
    public consuming func reply(create entry: EntryReply, open: OpenReply, flags: Int32) {
        var e = entry.c
        var fi = fuse_file_info()
        fi.flags = flags
        open.apply(to: &fi)
        withPendingBackingID(open.backingID) { _ = fuse_reply_create(raw, &e, &fi) }
        discard self
    }
    public consuming func reply(attributes: stat, timeout: Double) {
        var st = attributes
        fuse_reply_attr(raw, &st, timeout)
        discard self
    }
    public consuming func reply(link target: UnsafePointer<CChar>) {
        fuse_reply_readlink(raw, target)
        discard self
    }
    public consuming func reply(open: OpenReply, flags: Int32) {
        var fi = fuse_file_info()
        fi.flags = flags
        open.apply(to: &fi)
        withPendingBackingID(open.backingID) { _ = fuse_reply_open(raw, &fi) }
        discard self
    }
    public consuming func reply(written count: Int) {
        fuse_reply_write(raw, count)
        discard self
    }
    public consuming func reply(buffer: UnsafeRawBufferPointer) {
        fuse_reply_buf(raw, buffer.baseAddress?.assumingMemoryBound(to: CChar.self), buffer.count)
        discard self
    }
    /// Reply to a read with up to `size` bytes of `fd` at `offset`; libfuse splices when it can.
    public consuming func reply(dataFrom fd: Int32, offset: Int, size: Int) {
        var bufv = fuse_bufvec()
        bufv.count = 1
        bufv.idx = 0
        bufv.off = 0
        bufv.buf.size = size
        bufv.buf.flags = fuse_buf_flags(rawValue: FUSE_BUF_IS_FD.rawValue | FUSE_BUF_FD_SEEK.rawValue)
        bufv.buf.fd = fd
        bufv.buf.pos = offset
        fuse_reply_data(raw, &bufv, FUSE_BUF_SPLICE_MOVE)
        discard self
    }
    public consuming func reply(statfs: statvfs) {
        var s = statfs
        fuse_reply_statfs(raw, &s)
        discard self
    }
    /// The size of an attribute value or list, for a getxattr/listxattr with size 0.
    public consuming func reply(xattrSize: Int) {
        fuse_reply_xattr(raw, xattrSize)
        discard self
    }
    public consuming func reply(lock: flock) {
        var l = lock
        fuse_reply_lock(raw, &l)
        discard self
    }
    public consuming func reply(seekOffset: Int) {
        fuse_reply_lseek(raw, seekOffset)
        discard self
    }
    /// For forget: the kernel expects no answer.
    public consuming func replyNone() {
        fuse_reply_none(raw)
        discard self
    }

    /// Success without data, or the error.
    public consuming func reply(_ error: Errno?) {
        fuse_reply_err(raw, error?.rawValue ?? 0)
        discard self
    }
    /// The entry, or the error.
    public consuming func reply(_ result: Result<EntryReply, Errno>) {
        switch result {
        case .success(let e):
            var c = e.c
            fuse_reply_entry(raw, &c)
        case .failure(let e):
            fuse_reply_err(raw, e.rawValue)
        }
        discard self
    }

    /// Detach the request from this worker thread so it can be answered later from any thread.
    public consuming func park() -> ParkedRequest {
        let p = ParkedRequest(raw)
        discard self
        return p
    }

    /// Add directory entries into a caller-owned buffer (`fuse_add_direntry`); returns the entry size
    /// (which may exceed `capacity`: then nothing was written).
    public func addDirectoryEntry(into buffer: UnsafeMutableRawPointer?, capacity: Int, name: UnsafePointer<CChar>, attributes: stat, nextOffset: Int) -> Int {
        var st = attributes
        return fuse_add_direntry(raw, buffer?.assumingMemoryBound(to: CChar.self), capacity, name, &st, nextOffset)
    }
    /// `fuse_add_direntry_plus`: an entry with its lookup (counts as a lookup when it fits).
    public func addDirectoryEntryPlus(into buffer: UnsafeMutableRawPointer?, capacity: Int, name: UnsafePointer<CChar>, entry: EntryReply, nextOffset: Int) -> Int {
        var e = entry.c
        return fuse_add_direntry_plus(raw, buffer?.assumingMemoryBound(to: CChar.self), capacity, name, &e, nextOffset)
    }
}

/// A request waiting off the FUSE worker threads. Answer it once from any thread; a second answer is
/// ignored, and one never answered gets EIO when the last reference goes away.
public final class ParkedRequest: Sendable {
    private let raw: UInt // fuse_req_t as bits: libfuse allows the reply from any thread
    /// True once resumed. Guards the request's life: libfuse frees it when it is answered, so
    /// nothing may touch it after. Lock order: `answered`, then libfuse's request lock, then
    /// `interruptHandler` (a leaf, taken by the interrupt callback under libfuse's lock).
    private let answered = Mutex<Bool>(false)
    private let interruptHandler = Mutex<(@Sendable () -> Void)?>(nil)

    init(_ raw: fuse_req_t) { self.raw = UInt(bitPattern: raw) }

    deinit {
        if !answered.withLock({ $0 }) { fuse_reply_err(req, EIO) }
    }

    private var req: fuse_req_t { fuse_req_t(bitPattern: raw)! }

    /// Runs `body` (once, on another thread) if the kernel interrupts this request, i.e. the waiting
    /// process got a signal; at once if that already happened. Does nothing once the request was
    /// answered. The request must still be answered (typically with EINTR by what `body` cancels).
    public func onInterrupt(_ body: @escaping @Sendable () -> Void) {
        answered.withLock { done in
            guard !done else { return }
            interruptHandler.withLock { $0 = body }
            // The parked request stays alive until answered (its owner holds it), and libfuse never
            // calls back after `resume` cleared the callback, so the unretained pointer is valid.
            fuse_req_interrupt_func(req, { _, data in
                guard let data else { return }
                let parked = Unmanaged<ParkedRequest>.fromOpaque(data).takeUnretainedValue()
                let handler = parked.interruptHandler.withLock { h in defer { h = nil }; return h }
                // libfuse calls this holding the request's lock; answering the request takes that
                // lock again, so the handler runs elsewhere.
                if let handler { DispatchQueue.global().async(execute: handler) }
            }, Unmanaged.passUnretained(self).toOpaque())
        }
    }

    /// Takes the request back for exactly one reply; nil when it was already answered.
    public func resume() -> Request? {
        let first = answered.withLock { done -> Bool in
            guard !done else { return false }
            done = true
            fuse_req_interrupt_func(req, nil, nil)
            return true
        }
        guard first else { return nil }
        interruptHandler.withLock { $0 = nil }
        return Request(req)
    }

    /// Whether the kernel interrupted the waiting caller (e.g. Ctrl-C on a blocked `cat`).
    public var isInterrupted: Bool { fuse_req_interrupted(req) != 0 }
}
