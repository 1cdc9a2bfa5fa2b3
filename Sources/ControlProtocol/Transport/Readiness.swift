import Glibc
import Linux

/// Readiness of the control socket's descriptors: one epoll instance of the server's own and one
/// thread waiting on it, which hands each event to `deliver` (the server puts it on its I/O queue).
///
/// Why not Dispatch sources: libdispatch's epoll backend keeps one "muxnote" per descriptor for its
/// read and write sources in a table only its manager thread should touch, but a hangup (EPOLLHUP,
/// which every peer that goes away causes) has the source's deletion acknowledged on the source's
/// target queue, another thread, which unlinks and frees the muxnote while the manager thread
/// registers, cancels or drains others (swift-corelibs-libdispatch #833, #949). A daemon whose
/// clients come and go and whose sends often wait for writability crashed in
/// `_dispatch_event_loop_drain` (session 24). Here nothing is shared but the kernel's epoll:
/// descriptors are registered once, edge-triggered for reading and writing, when accepted and
/// removed when closed; an event carries a token (the connection's id, never reused), so an event
/// for a connection already gone finds nothing and does nothing.
///
/// Glibc's Swift module does not show epoll (it is built without the header), so the three calls
/// are looked up once with dlsym, as `PeerLimits` looks up `malloc_trim`; ControlProtocol stays
/// free of C modules.
final class Readiness: @unchecked Sendable {
    static let readable: UInt32 = 0x001  // EPOLLIN
    static let writable: UInt32 = 0x004  // EPOLLOUT
    static let error: UInt32 = 0x008  // EPOLLERR
    static let hangup: UInt32 = 0x010  // EPOLLHUP
    static let peerHangup: UInt32 = 0x2000  // EPOLLRDHUP
    static let oneShot: UInt32 = 1 << 30  // EPOLLONESHOT
    static let edgeTriggered: UInt32 = 1 << 31  // EPOLLET

    private typealias Create = @convention(c) (Int32) -> Int32
    private typealias Control = @convention(c) (Int32, Int32, Int32, UnsafeMutableRawPointer?) -> Int32
    private typealias Wait = @convention(c) (Int32, UnsafeMutableRawPointer?, Int32, Int32) -> Int32
    private struct Calls {
        let create: Create
        let control: Control
        let wait: Wait
    }
    private static let calls: Calls? = {
        let process = dlopen(nil, RTLD_NOW)
        guard let create = dlsym(process, "epoll_create1"), let control = dlsym(process, "epoll_ctl"),
            let wait = dlsym(process, "epoll_wait")
        else { return nil }
        return Calls(
            create: unsafeBitCast(create, to: Create.self), control: unsafeBitCast(control, to: Control.self),
            wait: unsafeBitCast(wait, to: Wait.self))
    }()

    /// `struct epoll_event`: packed (12 bytes, the data at 4) on x86_64, 16 bytes (the data at 8)
    /// elsewhere.
    #if arch(x86_64)
    private static let eventSize = 12
    private static let dataOffset = 4
    #else
    private static let eventSize = 16
    private static let dataOffset = 8
    #endif

    private static let add: Int32 = 1, remove: Int32 = 2, modify: Int32 = 3
    private static let stopToken = UInt64.max

    private let epoll: Int32
    /// Read end registered with `stopToken`; a byte written to the write end ends the thread.
    private let stopPipe: (read: Int32, write: Int32)
    private var thread: pthread_t?
    private let deliver: @Sendable (_ token: UInt64, _ events: UInt32) -> Void

    /// - Parameter deliver: called on the readiness thread for each event; must not block.
    init(deliver: @escaping @Sendable (_ token: UInt64, _ events: UInt32) -> Void) throws(ControlTransportError) {
        guard let calls = Self.calls else { throw .system(operation: "dlsym(epoll)", errno: ENOSYS) }
        let epoll = calls.create(0o2000000)  // EPOLL_CLOEXEC
        if epoll < 0 { throw .system(operation: "epoll_create1", errno: errno) }
        var ends: [Int32] = [-1, -1]
        if pipe(&ends) != 0 {
            let code = errno
            Glibc.close(epoll)
            throw .system(operation: "pipe", errno: code)
        }
        for fd in ends { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        self.epoll = epoll
        self.stopPipe = (ends[0], ends[1])
        self.deliver = deliver
        if !register(ends[0], token: Self.stopToken, events: Self.readable) {
            let code = errno
            close()
            throw .system(operation: "epoll_ctl", errno: code)
        }
    }

    /// Starts the thread.
    func start() throws(ControlTransportError) {
        thread = try startThread(name: "coordfs-control") { [self] in run() }
    }

    /// Ends the thread (it delivers nothing more once this returns) and closes the epoll instance.
    /// Not from `deliver`.
    func stop() {
        var byte: UInt8 = 1
        _ = retryingEINTR { write(stopPipe.write, &byte, 1) }
        if let thread { pthread_join(thread, nil) }
        thread = nil
        close()
    }

    private func close() {
        Glibc.close(epoll)
        Glibc.close(stopPipe.read)
        Glibc.close(stopPipe.write)
    }

    /// Watches `fd` for `events` (plus error and hangup, which epoll always reports) under
    /// `token`. False (errno set) if epoll refuses.
    @discardableResult
    func register(_ fd: Int32, token: UInt64, events: UInt32) -> Bool {
        control(Self.add, fd, token: token, events: events)
    }

    /// Arms a one-shot registration again.
    @discardableResult
    func rearm(_ fd: Int32, token: UInt64, events: UInt32) -> Bool {
        control(Self.modify, fd, token: token, events: events)
    }

    /// Stops watching `fd`; call before closing it.
    func unregister(_ fd: Int32) {
        _ = control(Self.remove, fd, token: 0, events: 0)
    }

    private func control(_ operation: Int32, _ fd: Int32, token: UInt64, events: UInt32) -> Bool {
        var event = [UInt8](repeating: 0, count: Self.eventSize)
        event.withUnsafeMutableBytes { raw in
            raw.storeBytes(of: events, toByteOffset: 0, as: UInt32.self)
            raw.storeBytes(of: token, toByteOffset: Self.dataOffset, as: UInt64.self)
        }
        return event.withUnsafeMutableBytes { raw in
            retryingEINTR { Self.calls!.control(epoll, operation, fd, raw.baseAddress) }
        } == 0
    }

    private func run() {
        let capacity = 64
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: capacity * Self.eventSize, alignment: 8)
        defer { buffer.deallocate() }
        let wait = Self.calls!.wait
        while true {
            let count = wait(epoll, buffer.baseAddress, Int32(capacity), -1)
            if count < 0 {
                if errno == EINTR { continue }
                return  // EBADF and friends: the instance is gone
            }
            for i in 0..<Int(count) {
                let events = buffer.loadUnaligned(fromByteOffset: i * Self.eventSize, as: UInt32.self)
                let token = buffer.loadUnaligned(fromByteOffset: i * Self.eventSize + Self.dataOffset, as: UInt64.self)
                if token == Self.stopToken { return }
                deliver(token, events)
            }
        }
    }
}
