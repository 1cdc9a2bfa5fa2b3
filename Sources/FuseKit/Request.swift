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
    /// The kernel's request, or nil for an ``EmbeddedRequest``'s.
    @usableFromInline let raw: fuse_req_t?
    /// The double this request answers to instead of the kernel (retained once, released with the
    /// one answer or handed to the parked request): trivially destroyed, as `discard` needs.
    @usableFromInline let embedded: Unmanaged<EmbeddedRequest>?
    /// The parked request this one was taken back from (`ParkedRequest.resume`; retained once,
    /// released with the one answer or the next park). Its answer goes through it, under its lock:
    /// none is sent once the session's end answered the request (libfuse has freed it then).
    @usableFromInline let parked: Unmanaged<ParkedRequest>?

    @inlinable init(_ raw: fuse_req_t) { self.raw = raw; embedded = nil; parked = nil }

    init(embedded: EmbeddedRequest) {
        raw = nil
        self.embedded = .passRetained(embedded)
        parked = nil
    }

    init(taken parked: ParkedRequest) {
        raw = parked.kernelRequest
        embedded = nil
        self.parked = .passRetained(parked)
    }

    deinit { send(.error(.ioError)) }

    /// The one answer: to the kernel, or recorded by the double.
    private func send(_ reply: Reply) {
        deliver(double: { $0.record(reply) }, kernel: { Self.send(reply, to: $0) })
    }

    /// Hands the one answer to `double` (a double's request) or `kernel`; for a request taken back
    /// from a parked one, through that (nothing when its session's end answered it already).
    @inline(__always)
    private func deliver(double: (EmbeddedRequest) -> Void, kernel: (fuse_req_t) -> Void) {
        if let parked {
            parked.takeRetainedValue().answer(double: double, kernel: kernel)
            return
        }
        if let embedded {
            double(embedded.takeRetainedValue())
            return
        }
        kernel(raw!)
    }

    private static func send(_ reply: Reply, to raw: fuse_req_t) {
        switch reply {
        case .error(let e): fuse_reply_err(raw, e?.rawValue ?? 0)
        case .entry(let entry):
            var c = entry.c
            fuse_reply_entry(raw, &c)
        case .create(let entry, let open, let flags):
            var e = entry.c
            var fi = fuse_file_info()
            fi.flags = flags
            open.apply(to: &fi)
            withPendingBackingID(open.backingID) { _ = fuse_reply_create(raw, &e, &fi) }
        case .attributes(let attributes, let timeout):
            var st = attributes
            fuse_reply_attr(raw, &st, timeout)
        case .open(let open, let flags):
            var fi = fuse_file_info()
            fi.flags = flags
            open.apply(to: &fi)
            withPendingBackingID(open.backingID) { _ = fuse_reply_open(raw, &fi) }
        case .written(let count): fuse_reply_write(raw, count)
        case .statfs(let statfs):
            var s = statfs
            fuse_reply_statfs(raw, &s)
        case .xattrSize(let size): fuse_reply_xattr(raw, size)
        case .lock(let lock):
            var l = lock
            fuse_reply_lock(raw, &l)
        case .seekOffset(let offset): fuse_reply_lseek(raw, offset)
        case .none: fuse_reply_none(raw)
        case .link, .buffer: preconditionFailure("sent by their own methods")
        }
    }

    /// The calling process (`fuse_req_ctx`).
    public var context: RequestContext {
        if let parked { return parked.takeUnretainedValue().context }
        if let embedded { return embedded.takeUnretainedValue().context }
        return Self.context(of: raw!)
    }

    static func context(of raw: fuse_req_t) -> RequestContext {
        let c = fuse_req_ctx(raw)!.pointee
        return RequestContext(uid: c.uid, gid: c.gid, pid: c.pid, umask: c.umask)
    }

    /// The caller's supplementary groups (from /proc; costs a read, use only when needed).
    public func supplementaryGroups(max: Int = 64) -> [gid_t] {
        if let parked { return parked.takeUnretainedValue().supplementaryGroups(max: max) }
        if let embedded { return Array(embedded.takeUnretainedValue().groups.prefix(max)) }
        return Self.groups(of: raw!, max: max)
    }

    static func groups(of raw: fuse_req_t, max: Int) -> [gid_t] {
        var list = [gid_t](repeating: 0, count: max)
        let n = list.withUnsafeMutableBufferPointer { fuse_req_getgroups(raw, Int32(max), $0.baseAddress) }
        return n > 0 ? Array(list.prefix(Int(min(n, Int32(max))))) : []
    }

    /// True when the kernel interrupted this request (the caller got a signal).
    public var isInterrupted: Bool {
        if let parked { return parked.takeUnretainedValue().isInterrupted }
        if let embedded { return embedded.takeUnretainedValue().isInterrupted }
        return fuse_req_interrupted(raw!) != 0
    }

    public consuming func reply(error: Errno) {
        send(.error(error))
        discard self
    }
    /// Success without data (`fuse_reply_err(req, 0)`).
    public consuming func replyOK() {
        send(.error(nil))
        discard self
    }
    public consuming func reply(entry: EntryReply) {
        send(.entry(entry))
        discard self
    }
    public consuming func reply(create entry: EntryReply, open: OpenReply, flags: Int32) {
        send(.create(entry, open, flags: flags))
        discard self
    }
    public consuming func reply(attributes: stat, timeout: Double) {
        send(.attributes(attributes, timeout: timeout))
        discard self
    }
    public consuming func reply(link target: UnsafePointer<CChar>) {
        deliver(double: { $0.record(.link(Array(UnsafeBufferPointer(start: target, count: strlen(target))).map { UInt8(bitPattern: $0) })) },
                kernel: { fuse_reply_readlink($0, target) })
        discard self
    }
    public consuming func reply(open: OpenReply, flags: Int32) {
        send(.open(open, flags: flags))
        discard self
    }
    public consuming func reply(written count: Int) {
        send(.written(count))
        discard self
    }
    public consuming func reply(buffer: UnsafeRawBufferPointer) {
        deliver(double: { $0.record(.buffer(Array(buffer))) },
                kernel: { fuse_reply_buf($0, buffer.baseAddress?.assumingMemoryBound(to: CChar.self), buffer.count) })
        discard self
    }
    /// Reply to a read with up to `size` bytes of `fd` at `offset`; libfuse splices when it can.
    /// (The double records the bytes read.)
    public consuming func reply(dataFrom fd: Int32, offset: Int, size: Int) {
        deliver(double: { double in
            var bytes = [UInt8](repeating: 0, count: size)
            let n = bytes.withUnsafeMutableBytes { pread(fd, $0.baseAddress, size, off_t(offset)) }
            double.record(n >= 0 ? .buffer(Array(bytes.prefix(n))) : .error(Errno(rawValue: errno)))
        }, kernel: { raw in
            var bufv = fuse_bufvec()
            bufv.count = 1
            bufv.idx = 0
            bufv.off = 0
            bufv.buf.size = size
            bufv.buf.flags = fuse_buf_flags(rawValue: FUSE_BUF_IS_FD.rawValue | FUSE_BUF_FD_SEEK.rawValue)
            bufv.buf.fd = fd
            bufv.buf.pos = offset
            fuse_reply_data(raw, &bufv, FUSE_BUF_SPLICE_MOVE)
        })
        discard self
    }
    public consuming func reply(statfs: statvfs) {
        send(.statfs(statfs))
        discard self
    }
    /// The size of an attribute value or list, for a getxattr/listxattr with size 0.
    public consuming func reply(xattrSize: Int) {
        send(.xattrSize(xattrSize))
        discard self
    }
    public consuming func reply(lock: flock) {
        send(.lock(lock))
        discard self
    }
    public consuming func reply(seekOffset: Int) {
        send(.seekOffset(seekOffset))
        discard self
    }
    /// For forget: the kernel expects no answer.
    public consuming func replyNone() {
        send(.none)
        discard self
    }

    /// Success without data, or the error.
    public consuming func reply(_ error: Errno?) {
        send(.error(error))
        discard self
    }
    /// The entry, or the error.
    public consuming func reply(_ result: Result<EntryReply, Errno>) {
        switch result {
        case .success(let e): send(.entry(e))
        case .failure(let e): send(.error(e))
        }
        discard self
    }

    /// Detach the request from this worker thread so it can be answered later from any thread.
    /// A request taken back from a parked one is parked again in it (unless its session's end
    /// answered it meanwhile: then it stays answered).
    public consuming func park() -> ParkedRequest {
        let p: ParkedRequest
        if let parked {
            p = parked.takeRetainedValue()
            p.parkAgain()
        } else if let embedded {
            p = ParkedRequest(embedded: embedded.takeRetainedValue())
        } else {
            p = ParkedRequest(raw!, of: SessionState.of(raw!).parkedRequests)
        }
        discard self
        return p
    }

    /// Add directory entries into a caller-owned buffer (`fuse_add_direntry`); returns the entry size
    /// (which may exceed `capacity`: then nothing was written). libfuse only formats here: the
    /// request itself is not read, so a double's works the same.
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

