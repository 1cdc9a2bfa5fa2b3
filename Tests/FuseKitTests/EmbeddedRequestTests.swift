import Dispatch
import FuseKit
import Glibc
import SystemPackage
import Synchronization
import XCTest

/// The reply-once rules of `Request` and `ParkedRequest`, through the request double (no mount).
/// A second reply to one `Request` does not compile (`~Copyable`, every reply `consuming`); what
/// runs is checked here.
final class EmbeddedRequestTests: XCTestCase {
    func testARequestIsAnsweredWithWhatItIsGivenOnce() {
        let probe = EmbeddedRequest(context: RequestContext(uid: 65534, gid: 65534, pid: 4242, umask: 0o077))
        let request = probe.request()
        XCTAssertEqual(request.context, RequestContext(uid: 65534, gid: 65534, pid: 4242, umask: 0o077))
        XCTAssertFalse(request.isInterrupted)
        request.reply(error: .permissionDenied)
        XCTAssertEqual(probe.replies.map(\.errorCode), [EACCES])
        probe.request().replyOK()
        probe.request().reply(written: 12)
        XCTAssertEqual(probe.replies.map(\.errorCode), [EACCES, 0, nil], "one answer per request, in order")
        guard case .written(12) = probe.replies[2] else { return XCTFail("\(probe.replies[2])") }
    }

    func testARequestDroppedUnansweredGetsEIO() {
        let probe = EmbeddedRequest()
        do { _ = probe.request() }
        XCTAssertEqual(probe.replies.map(\.errorCode), [EIO], "the caller never hangs on a forgotten request")
    }

    func testAParkedRequestIsResumedForOneReplyOnly() {
        let probe = EmbeddedRequest()
        let parked = probe.request().park()
        XCTAssertTrue(probe.replies.isEmpty, "parking is no answer")
        let done = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            parked.resume()?.reply(error: .resourceBusy)
            done.signal()
        }
        done.wait()
        if let again = parked.resume() { // a second resume gets nothing
            XCTFail("resumed twice")
            again.replyOK()
        }
        XCTAssertEqual(probe.replies.map(\.errorCode), [EBUSY])
    }

    func testAParkedRequestNeverResumedGetsEIOWhenReleased() {
        let probe = EmbeddedRequest()
        do { _ = probe.request().park() }
        XCTAssertEqual(probe.replies.map(\.errorCode), [EIO])
        do {
            let parked = probe.request().park()
            parked.resume()?.replyOK()
        }
        XCTAssertEqual(probe.replies.map(\.errorCode), [EIO, 0], "answered once, not again when released")
    }

    func testTheKernelsInterruptReachesAParkedRequestUntilItIsAnswered() {
        let probe = EmbeddedRequest()
        let parked = probe.request().park()
        let interrupted = expectation(description: "interrupt handler")
        parked.onInterrupt {
            parked.resume()?.reply(error: .interrupted)
            interrupted.fulfill()
        }
        probe.interrupt()
        wait(for: [interrupted], timeout: 5)
        XCTAssertTrue(parked.isInterrupted)
        XCTAssertEqual(probe.replies.map(\.errorCode), [EINTR])

        // Interrupted before the handler is set: it runs at once. Answered first: it never runs.
        let early = EmbeddedRequest()
        early.interrupt()
        let late = early.request().park()
        let ran = expectation(description: "runs at once")
        late.onInterrupt { late.resume()?.reply(error: .interrupted); ran.fulfill() }
        wait(for: [ran], timeout: 5)
        let answered = EmbeddedRequest()
        let first = answered.request().park()
        first.resume()?.replyOK()
        first.onInterrupt { XCTFail("an answered request has no interrupt to handle") }
        answered.interrupt()
        XCTAssertEqual(early.replies.map(\.errorCode), [EINTR])
        XCTAssertEqual(answered.replies.map(\.errorCode), [0])
    }

    // MARK: The session's end

    /// A parked request outliving its session: the end answers it (ECONNABORTED), and then nothing
    /// touches it: its resume gets nothing, its interrupt runs nothing, its release answers nothing.
    func testTheSessionsEndAnswersAParkedRequestAndNothingAfter() {
        let probe = EmbeddedRequest()
        let parked = probe.request().park()
        parked.onInterrupt { XCTFail("an interrupt after the session's end runs nothing") }
        XCTAssertEqual(probe.waiting, 1)
        XCTAssertEqual(probe.endSession(), 1, "the session's end answers the request still parked")
        XCTAssertEqual(probe.replies.map(\.errorCode), [ECONNABORTED])
        XCTAssertEqual(probe.waiting, 0)
        if let late = parked.resume() { // gets nothing: the end answered it
            XCTFail("resumed after the session's end")
            late.replyOK()
        }
        probe.interrupt()
        parked.onInterrupt { XCTFail("an interrupt after the session's end runs nothing") }
        XCTAssertEqual(parked.context, probe.context, "the caller, as it was when parked")
        XCTAssertEqual(probe.endSession(), 0, "answered once")
        XCTAssertEqual(probe.replies.map(\.errorCode), [ECONNABORTED], "nothing more")
    }

    /// The two orders: the session's end, then the last holder lets go (no second answer); the last
    /// holder lets go first (EIO, as ever), then the end (nothing left to answer).
    func testTheSessionEndsBeforeOrAfterTheParkedRequestIsLetGo() {
        let sessionFirst = EmbeddedRequest()
        do {
            let parked = sessionFirst.request().park()
            XCTAssertEqual(sessionFirst.endSession(), 1)
            _ = parked
        }
        XCTAssertEqual(sessionFirst.replies.map(\.errorCode), [ECONNABORTED], "let go after the end: no EIO on top")

        let holdersFirst = EmbeddedRequest()
        do { _ = holdersFirst.request().park() }
        XCTAssertEqual(holdersFirst.waiting, 0)
        XCTAssertEqual(holdersFirst.endSession(), 0)
        XCTAssertEqual(holdersFirst.replies.map(\.errorCode), [EIO])
    }

    /// A request taken back (resumed) and not yet answered when the session ends: the end answers
    /// it, and its own answer (or its drop) later sends nothing. One taken back and parked again
    /// waits again.
    func testARequestTakenBackButNotAnsweredIsAnsweredByTheEndOnly() {
        let probe = EmbeddedRequest(context: RequestContext(uid: 65534, gid: 65534, pid: 4242, umask: 0o077), groups: [7])
        let parked = probe.request().park()
        guard let taken = parked.resume() else { return XCTFail("not resumed") }
        XCTAssertEqual(probe.waiting, 1, "taken back, not yet answered: still the session's")
        XCTAssertEqual(probe.endSession(), 1)
        XCTAssertEqual(taken.context.pid, 4242)
        XCTAssertEqual(taken.supplementaryGroups(), [7])
        taken.reply(error: .resourceBusy)
        do { let dropped = probe.request().park(); _ = dropped.resume() }   // parked after the end
        XCTAssertEqual(probe.replies.map(\.errorCode), [ECONNABORTED, ECONNABORTED],
                       "the late answer sends nothing; a request parked after the end is answered at once")

        let again = EmbeddedRequest()
        let first = again.request().park()
        guard let back = first.resume() else { return XCTFail("not resumed") }
        let second = back.park()
        XCTAssertTrue(second === first, "parked again in the same parked request")
        XCTAssertEqual(again.waiting, 1)
        second.resume()?.replyOK()
        XCTAssertEqual(again.waiting, 0)
        XCTAssertEqual(again.endSession(), 0)
        XCTAssertEqual(again.replies.map(\.errorCode), [0])
    }

    /// Resumes and answers racing the session's end, on many threads: every request is answered
    /// exactly once, by its resume or by the end, never both.
    func testAResumeRacingTheSessionsEndAnswersOnce() {
        for round in 0..<20 {
            let probe = EmbeddedRequest()
            let count = 200
            let parked = (0..<count).map { _ in probe.request().park() }
            let ended = Atomic<Int>(0)
            DispatchQueue.concurrentPerform(iterations: count + 1) { i in
                if i == count / 2 { return ended.store(probe.endSession(), ordering: .relaxed) }
                parked[i < count / 2 ? i : i - 1].resume()?.reply(error: .resourceBusy)
            }
            let codes = probe.replies.map(\.errorCode)
            XCTAssertEqual(codes.count, count, "round \(round): one answer per request")
            XCTAssertEqual(codes.filter { $0 == ECONNABORTED }.count, ended.load(ordering: .relaxed), "round \(round)")
            XCTAssertEqual(codes.filter { $0 == EBUSY }.count, count - ended.load(ordering: .relaxed), "round \(round)")
            XCTAssertEqual(probe.waiting, 0)
        }
    }

    /// The last references let go racing the session's end, on many threads: every request is
    /// answered exactly once, with EIO by its release or by the end, and one the end answered is
    /// not freed while the end still looks at it (its release waits for the end's lock).
    func testALastReleaseRacingTheSessionsEndAnswersOnce() {
        final class Holder: @unchecked Sendable { var parked: ParkedRequest? }
        for round in 0..<20 {
            let probe = EmbeddedRequest()
            let count = 200
            let holders = (0..<count).map { _ in let h = Holder(); h.parked = probe.request().park(); return h }
            let ended = Atomic<Int>(0)
            DispatchQueue.concurrentPerform(iterations: count + 1) { i in
                if i == count / 2 { return ended.store(probe.endSession(), ordering: .relaxed) }
                holders[i < count / 2 ? i : i - 1].parked = nil
            }
            let codes = probe.replies.map(\.errorCode)
            XCTAssertEqual(codes.count, count, "round \(round): one answer per request")
            XCTAssertEqual(codes.filter { $0 == ECONNABORTED }.count, ended.load(ordering: .relaxed), "round \(round)")
            XCTAssertEqual(codes.filter { $0 == EIO }.count, count - ended.load(ordering: .relaxed), "round \(round)")
            XCTAssertEqual(probe.waiting, 0)
        }
    }
}

extension Reply {
    /// The errno of an error reply (0: success without data), nil for any other reply.
    var errorCode: Int32? {
        if case .error(let e) = self { return e?.rawValue ?? 0 }
        return nil
    }
    var entry: EntryReply? {
        switch self {
        case .entry(let e), .create(let e, _, _): return e
        default: return nil
        }
    }
}
