import XCTest
@testable import ControlProtocol

/// `StatusReport.frames`: a report of any size in frames within the limit, none lost or reordered.
final class StatusPartsTests: XCTestCase {
    private func report(presenters: Int, accesses: Int) throws -> StatusReport {
        let path = try MountPath(validating: "folder/document with a longish name.txt")
        return StatusReport(
            id: RequestID(7),
            presenters: (0..<presenters).map { StatusReport.Presenter(presenter: PresenterID(UInt64($0)), path: path, kind: .file, pid: 42, uid: 1000) },
            accesses: (0..<accesses).map { StatusReport.Access(access: AccessID(UInt64($0)), intents: [.writing(path)], pid: 43, uid: 0, heldMs: 5) },
            waiting: [StatusReport.Waiting(intents: [.reading(path)], pid: 44, uid: 0, waitingMs: 1)])
    }

    private func decode(_ frames: [[UInt8]], limit: Int) throws -> [StatusReport] {
        try frames.map { frame in
            var decoder = FrameDecoder(maxFrameSize: limit)
            decoder.append(frame)
            guard case .statusReport(let part) = try ControlMessage.decode(payload: try XCTUnwrap(try decoder.nextFrame())) else {
                throw XCTSkip("not a statusReport")
            }
            return part
        }
    }

    func testASmallReportIsOneFrameAsBefore() throws {
        let small = try report(presenters: 3, accesses: 2)
        XCTAssertEqual(try decode(small.frames(), limit: Framing.defaultMaxFrameSize), [small])
        XCTAssertFalse(String(decoding: small.frames()[0], as: UTF8.self).contains("more"), "no `more` on a report in one frame")
    }

    func testALargeReportComesInPartsWithinTheLimitInOrder() throws {
        let big = try report(presenters: 30_000, accesses: 5_000)
        let limit = 64 * 1024
        let frames = big.frames(maxFrameSize: limit)
        XCTAssertGreaterThan(frames.count, 40)
        for frame in frames { XCTAssertLessThanOrEqual(frame.count - Framing.headerSize, limit) }
        let parts = try decode(frames, limit: limit)
        XCTAssertEqual(parts.map(\.more), Array(repeating: true, count: parts.count - 1) + [false])
        XCTAssertEqual(Set(parts.map(\.id)), [RequestID(7)])
        var whole = StatusReport(id: RequestID(7))
        for part in parts { whole.append(part) }
        XCTAssertEqual(whole, big)
    }
    /// The users over their share of the log (`logShare`) go in the first part only, within the
    /// limit, and come back whole; a report without them has no `logShare` key.
    func testTheLogShareUsersComeInTheFirstPartOnly() throws {
        var big = try report(presenters: 3_000, accesses: 500)
        big.logShare = (0..<40).map { StatusReport.LogShareUser(uid: UInt32(60_000 + $0), sinceMs: 1_764_000_000_000, records: UInt64($0) * 1000, bytes: 10_000, limitBytes: 10_485) }
        let limit = 64 * 1024
        let frames = big.frames(maxFrameSize: limit)
        XCTAssertGreaterThan(frames.count, 4)
        for frame in frames { XCTAssertLessThanOrEqual(frame.count - Framing.headerSize, limit) }
        XCTAssertEqual(frames.map { String(decoding: $0, as: UTF8.self).contains("logShare") }, [true] + Array(repeating: false, count: frames.count - 1))
        var whole = StatusReport(id: RequestID(7))
        for part in try decode(frames, limit: limit) { whole.append(part) }
        XCTAssertEqual(whole, big)
        let small = try report(presenters: 1, accesses: 1)
        XCTAssertFalse(String(decoding: small.frames()[0], as: UTF8.self).contains("logShare"))
    }

    /// One access (and one waiting request) larger than a frame: 64 intents whose paths are 40
    /// components of 250 control characters (each `\\u0001` in JSON), about 3.8 MiB
    /// each. Every frame stays within the 1 MiB limit the client enforces; the access arrives as
    /// several entries marked `continues`, joined again into the one access.
    func testAnAccessLargerThanAFrameIsSplitAndJoined() throws {
        let component = String(repeating: "\u{1}", count: 250)
        let paths = try (0..<64).map { n in
            try MountPath(validating: (Array(repeating: component, count: 39) + ["\(n)-" + component]).joined(separator: "/"))
        }
        let big = StatusReport(
            id: RequestID(9),
            presenters: [StatusReport.Presenter(presenter: PresenterID(1), path: paths[0], kind: .file, pid: 42, uid: 0)],
            accesses: [StatusReport.Access(access: AccessID(5), intents: paths.map { .writing($0) }, pid: 43, uid: 0, heldMs: 5),
                       StatusReport.Access(access: AccessID(6), intents: [.reading(paths[1])], pid: 43, uid: 0, heldMs: 5)],
            waiting: [StatusReport.Waiting(intents: paths.map { .reading($0) }, pid: 44, uid: 0, waitingMs: 1)])
        let limit = Framing.defaultMaxFrameSize
        let frames = big.frames()
        XCTAssertGreaterThanOrEqual(frames.count, 8, "about 7.6 MiB of JSON")
        for frame in frames { XCTAssertLessThanOrEqual(frame.count - Framing.headerSize, limit) }
        XCTAssertTrue(frames.contains { String(decoding: $0, as: UTF8.self).contains(#""continues":true"#) })
        let parts = try decode(frames, limit: limit)
        XCTAssertEqual(parts.map(\.more), Array(repeating: true, count: parts.count - 1) + [false])
        var whole = StatusReport(id: RequestID(9))
        for part in parts { whole.append(part) }
        XCTAssertEqual(whole, big)
        XCTAssertEqual(whole.accesses.map(\.intents.count), [64, 1])
        XCTAssertEqual(whole.waiting.map(\.intents.count), [64])
    }
}
