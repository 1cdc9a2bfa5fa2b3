import CFuse3
import Glibc
import SystemPackage
import Synchronization
import Dispatch

/// A request waiting off the FUSE worker threads. Answer it once from any thread; a second answer is
/// ignored, and one never answered gets EIO when the last reference goes away.
///
/// It may outlive its session (held by a presenter's ask, a deadline, a closure, after an in-process
/// mount was stopped and let go): the session's end answers it first (`ParkedRequests.end`, before
/// libfuse frees the session and the request with it), and from then on nothing touches the
/// kernel's request: `resume()` returns nil, a request taken back earlier answers nothing, the last
/// release sends nothing, `onInterrupt` does nothing and `isInterrupted` reads only what was seen.
public final class ParkedRequest: Sendable {
    private let raw: UInt // fuse_req_t as bits: libfuse allows the reply from any thread; 0 for a double's
    let embedded: EmbeddedRequest?
    /// The caller, read when the request was parked: the kernel's request is freed once answered,
    /// also when the session's end answered it.
    public let context: RequestContext

    enum Phase {
        /// Waiting: `resume` takes it back.
        case parked
        /// Taken back by `resume`, its answer not yet sent (the `Request` holds this object).
        case taken
        /// Answered (by the request taken back, or with EIO when let go).
        case answered
        /// Answered by its session's end: libfuse freed the request, nothing may touch it.
        case ended
    }

    /// Guards the request's life: libfuse frees it when it is answered, so nothing may touch it
    /// after. Lock order: the session's stripe (`ParkedRequests`, only its end holds one while it
    /// takes this), then `phase`, then libfuse's request lock, then `interruptHandler` (a leaf, taken
    /// by the interrupt callback under libfuse's lock).
    private let phase = Mutex<Phase>(.parked)
    private let interruptHandler = Mutex<(@Sendable () -> Void)?>(nil)
    /// The kernel's interrupt reached this request's callback (what `isInterrupted` says once the
    /// request is answered, when the kernel's request may be gone).
    private let interruptSeen = Atomic<Bool>(false)
    /// The session's list this request is on while it waits.
    private let stripe: ParkedRequests.Stripe
    // The stripe's links, read and written under the stripe's lock only.
    nonisolated(unsafe) fileprivate var next: Unmanaged<ParkedRequest>?
    nonisolated(unsafe) fileprivate var previous: Unmanaged<ParkedRequest>?
    nonisolated(unsafe) fileprivate var listed = false

    init(_ raw: fuse_req_t, of requests: ParkedRequests) {
        self.raw = UInt(bitPattern: raw)
        embedded = nil
        context = Request.context(of: raw)
        stripe = requests.stripe(for: self.raw)
        register()
    }

    init(embedded: EmbeddedRequest) {
        raw = 0
        self.embedded = embedded
        context = embedded.context
        stripe = embedded.requests.stripe(for: UInt(bitPattern: Unmanaged.passUnretained(embedded).toOpaque()))
        register()
    }

    private func register() {
        guard !stripe.add(self) else { return }
        // Parked after its session ended (a double's only: a kernel request is parked by a worker of
        // the session's loop, which has returned before the session ends): answered as the end
        // answers, a kernel request's not at all (its session is going).
        phase.withLock { $0 = .ended }
        embedded?.record(.error(Self.sessionEnded))
    }

    deinit {
        let onList = phase.withLock { phase -> Bool in
            switch phase {
            case .parked:
                phase = .answered
                if let embedded { embedded.record(.error(.ioError)) } else { fuse_reply_err(req, EIO) }
                return true
            case .ended:
                // The session's end answered it and may still be looking at it under its stripe's
                // lock (after this lock, `answerAtSessionEnd` clears the interrupt handler): the
                // stripe's lock is taken before this object's memory goes.
                return true
            case .taken, .answered:
                return false
            }
        }
        if onList { stripe.remove(self) }
    }

    /// What the session's end answers a request still waiting with: what the kernel answers a
    /// request it ends with its connection, so the caller sees one error whichever ends first.
    static let sessionEnded = Errno(rawValue: ECONNABORTED)

    private var req: fuse_req_t { fuse_req_t(bitPattern: raw)! }

    var kernelRequest: fuse_req_t? { fuse_req_t(bitPattern: raw) }

    /// Runs `body` (once, on another thread) if the kernel interrupts this request, i.e. the waiting
    /// process got a signal; at once if that already happened. Does nothing once the request was
    /// answered. The request must still be answered (typically with EINTR by what `body` cancels).
    public func onInterrupt(_ body: @escaping @Sendable () -> Void) {
        phase.withLock { phase in
            guard phase == .parked else { return }
            interruptHandler.withLock { $0 = body }
            if let embedded {
                embedded.onInterrupt { [self] in
                    interruptSeen.store(true, ordering: .relaxed)
                    let handler = interruptHandler.withLock { h in defer { h = nil }; return h }
                    if let handler { DispatchQueue.global().async(execute: handler) }
                }
                return
            }
            // The parked request stays alive until answered (its owner holds it), and libfuse never
            // calls back after `resume` cleared the callback or a reply freed the request, so the
            // unretained pointer is valid.
            fuse_req_interrupt_func(req, { _, data in
                guard let data else { return }
                let parked = Unmanaged<ParkedRequest>.fromOpaque(data).takeUnretainedValue()
                parked.interruptSeen.store(true, ordering: .relaxed)
                let handler = parked.interruptHandler.withLock { h in defer { h = nil }; return h }
                // libfuse calls this holding the request's lock; answering the request takes that
                // lock again, so the handler runs elsewhere.
                if let handler { DispatchQueue.global().async(execute: handler) }
            }, Unmanaged.passUnretained(self).toOpaque())
        }
    }

    /// Takes the request back for exactly one reply; nil when it was already answered (or taken
    /// back, or answered by its session's end).
    public func resume() -> Request? {
        let first = phase.withLock { phase -> Bool in
            guard phase == .parked else { return false }
            phase = .taken
            if let embedded { embedded.onInterrupt(nil) } else { fuse_req_interrupt_func(req, nil, nil) }
            return true
        }
        guard first else { return nil }
        interruptHandler.withLock { $0 = nil }
        return Request(taken: self)
    }

    /// The answer of the request taken back (`Request`): sent unless the session's end answered it.
    func answer(double: (EmbeddedRequest) -> Void, kernel: (fuse_req_t) -> Void) {
        let sent = phase.withLock { phase -> Bool in
            guard phase == .taken else { return false }
            if let embedded { double(embedded) } else { kernel(req) }
            phase = .answered
            return true
        }
        if sent { stripe.remove(self) }
    }

    /// The request taken back is parked again (`Request.park`).
    func parkAgain() {
        phase.withLock { phase in
            if phase == .taken { phase = .parked }
        }
    }

    /// The session ends (`ParkedRequests.end`, under the stripe's lock): a request still waiting or
    /// taken back and not yet answered is answered (`sessionEnded`) and never touched again. True
    /// when it was answered here.
    fileprivate func answerAtSessionEnd() -> Bool {
        let answered = phase.withLock { phase -> Bool in
            guard phase == .parked || phase == .taken else { return false }
            phase = .ended
            if let embedded {
                embedded.onInterrupt(nil)
                embedded.record(.error(Self.sessionEnded))
            } else {
                // Frees the request (libfuse's only way: a reply), and reaches a caller the kernel
                // still has waiting on /dev/fuse.
                fuse_reply_err(req, ECONNABORTED)
            }
            return true
        }
        if answered { interruptHandler.withLock { $0 = nil } }
        return answered
    }

    /// Whether the kernel interrupted the waiting caller (e.g. Ctrl-C on a blocked `cat`). Once the
    /// request was answered: whether its interrupt callback (`onInterrupt`) saw one.
    public var isInterrupted: Bool {
        phase.withLock { phase in
            if let embedded { return embedded.isInterrupted }
            guard phase == .parked || phase == .taken else { return interruptSeen.load(ordering: .relaxed) }
            return fuse_req_interrupted(req) != 0
        }
    }

    /// The caller's supplementary groups (`Request.supplementaryGroups`), none once answered.
    func supplementaryGroups(max: Int) -> [gid_t] {
        if let embedded { return Array(embedded.groups.prefix(max)) }
        return phase.withLock { phase in
            guard phase == .parked || phase == .taken else { return [] }
            return Request.groups(of: req, max: max)
        }
    }
}

/// The requests of one session that wait: parked, or taken back (`ParkedRequest.resume`) and not
/// yet answered. The session's end answers each of them before libfuse frees the session (`end`):
/// libfuse frees a request only when it is answered, unlinking it from the session's list under the
/// session's lock, so a request answered after that wrote into freed memory.
///
/// A park and its answer each take one of 16 locks, picked by the request's address, and link or
/// unlink the request in that stripe's list (intrusive: no allocation, O(1)); threads parking at
/// once rarely share a lock, and nothing else takes them until the end.
final class ParkedRequests: Sendable {
    static let stripeCount = 16
    let stripes: [Stripe]

    init() {
        stripes = (0..<Self.stripeCount).map { _ in Stripe() }
    }

    @inline(__always)
    func stripe(for address: UInt) -> Stripe {
        stripes[Int(truncatingIfNeeded: (address >> 6) ^ (address >> 12)) & (Self.stripeCount - 1)]
    }

    /// Answers every request of the session still waiting or taken back and not yet answered
    /// (`ParkedRequest.sessionEnded`); from now on none is touched again, and one parked later is
    /// answered at once. How many it answered.
    func end() -> Int {
        stripes.reduce(0) { $0 + $1.end() }
    }

    /// How many wait (tests).
    var count: Int { stripes.reduce(0) { $0 + $1.count } }

    final class Stripe: Sendable {
        private struct List {
            var head: Unmanaged<ParkedRequest>?
            var count = 0
            var ended = false
        }
        private let list = Mutex<List>(List())

        /// Links `request` in; false once the session ended.
        func add(_ request: ParkedRequest) -> Bool {
            list.withLock { list in
                guard !list.ended else { return false }
                let this = Unmanaged.passUnretained(request)
                request.previous = nil
                request.next = list.head
                list.head?._withUnsafeGuaranteedRef { $0.previous = this }
                list.head = this
                request.listed = true
                list.count += 1
                return true
            }
        }

        /// Unlinks `request` (answered), unless the end did.
        func remove(_ request: ParkedRequest) {
            list.withLock { list in
                guard request.listed else { return }
                request.listed = false
                if let previous = request.previous {
                    previous._withUnsafeGuaranteedRef { $0.next = request.next }
                } else {
                    list.head = request.next
                }
                request.next?._withUnsafeGuaranteedRef { $0.previous = request.previous }
                request.next = nil
                request.previous = nil
                list.count -= 1
            }
        }

        /// Each request on the list is alive while the lock is held: one let go unlinks itself
        /// (after its deinit's answer) under this lock, so it waits until the end let go of it.
        func end() -> Int {
            list.withLock { list in
                list.ended = true
                var answered = 0
                while let head = list.head {
                    head._withUnsafeGuaranteedRef { request in
                        list.head = request.next
                        request.next = nil
                        request.previous = nil
                        request.listed = false
                        if request.answerAtSessionEnd() { answered += 1 }
                    }
                }
                list.count = 0
                return answered
            }
        }

        var count: Int { list.withLock { $0.count } }
    }
}
