import Dispatch
import FuseKit
import Glibc
import SystemPackage
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
