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
}
