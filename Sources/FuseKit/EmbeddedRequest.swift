import Glibc
import SystemPackage
import Synchronization

/// What a request was answered with, as an ``EmbeddedRequest`` records it (and as `Request` sends it
/// to the kernel).
public enum Reply: @unchecked Sendable { // stat, statvfs and flock are plain C structs
    /// `fuse_reply_err`: an error, or nil for success without data.
    case error(Errno?)
    case entry(EntryReply)
    case create(EntryReply, OpenReply, flags: Int32)
    case attributes(stat, timeout: Double)
    /// A symbolic link's target.
    case link([UInt8])
    case open(OpenReply, flags: Int32)
    case written(Int)
    /// Data (a read, a directory listing, an attribute value or list).
    case buffer([UInt8])
    case statfs(statvfs)
    case xattrSize(Int)
    case lock(flock)
    case seekOffset(Int)
    /// `fuse_reply_none` (forget).
    case none
}

/// A request double, as swift-nio's `EmbeddedChannel` is a channel's: it hands out `Request`s that
/// answer to it instead of the kernel and records every answer, so a `FuseFileSystem`'s logic (the
/// Loopback's, the coordinated mount's) and the reply-once rules run in a unit test, without
/// /dev/fuse or a mount. Everything else (a parked request resumed from another thread, the
/// interrupt of a waiting caller, a request dropped unanswered) behaves as with the kernel.
public final class EmbeddedRequest: Sendable {
    /// The calling process the requests report.
    public let context: RequestContext
    /// Its supplementary groups.
    public let groups: [gid_t]
    private let state = Mutex<State>(State())
    /// Its requests that wait (parked, or taken back and not yet answered), as a session's.
    let requests = ParkedRequests()
    private struct State {
        var replies: [Reply] = []
        var interrupted = false
        var interruptHandler: (@Sendable () -> Void)?
    }

    public init(context: RequestContext = RequestContext(uid: getuid(), gid: getgid(), pid: getpid(), umask: 0o022),
                groups: [gid_t] = []) {
        self.context = context
        self.groups = groups
    }

    /// A new request from this caller. Answer it once, as a kernel request.
    public func request() -> Request { Request(embedded: self) }

    /// Every answer so far, in order (one per request handed out, once answered).
    public var replies: [Reply] { state.withLock { $0.replies } }

    /// The kernel interrupts the request (its caller got a signal): a parked request's interrupt
    /// handler runs, and `isInterrupted` is true from now on.
    public func interrupt() {
        let handler = state.withLock { s -> (@Sendable () -> Void)? in
            s.interrupted = true
            defer { s.interruptHandler = nil }
            return s.interruptHandler
        }
        handler?()
    }

    var isInterrupted: Bool { state.withLock { $0.interrupted } }

    /// As the end of the session its requests came through (`FuseSession`'s deinit, before libfuse
    /// frees the session): every request of this double still parked, or taken back and not yet
    /// answered, is answered ECONNABORTED now, and nothing answers it again: a later `resume()`
    /// returns nil, a later reply or release sends nothing, `onInterrupt` does nothing. A request
    /// parked afterwards is answered so at once. Returns how many it answered.
    @discardableResult
    public func endSession() -> Int { requests.end() }

    /// How many of its requests wait (parked, or taken back and not yet answered).
    public var waiting: Int { requests.count }

    func record(_ reply: Reply) { state.withLock { $0.replies.append(reply) } }

    /// As `fuse_req_interrupt_func`: runs `body` at once when already interrupted; nil clears it.
    func onInterrupt(_ body: (@Sendable () -> Void)?) {
        let now = state.withLock { s -> Bool in
            if s.interrupted { return true }
            s.interruptHandler = body
            return false
        }
        if now { body?() }
    }
}
