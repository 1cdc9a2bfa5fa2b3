import XCTest
@testable import FuseKit

/// The reader's decision to poll or to block at once (`SpinGovernor`), driven by a fake clock and a
/// fake run queue: it polls while requests mostly come within the spin and a core is idle, stops when
/// they do not or when the machine is busy, and resumes when it would pay again.
final class SpinGovernorTests: XCTestCase {
    private let cap = 200_000          // -o spin=200
    private let ms = 1_000_000

    /// A governor on a 2-CPU machine, and a clock that moves 5 ms per wait (every wait samples).
    private struct Drive {
        var governor: SpinGovernor
        var now = 1_000_000_000
        var runnable = 1
        var reads = 0
        init(cap: Int, adaptive: Bool = true) { governor = SpinGovernor(cap: cap, cpus: 2, adaptive: adaptive) }

        /// One wait: its budget, then a request `waited` after its start.
        mutating func wait(_ waited: Int, step: Int = 5_000_000) -> Int {
            now += step
            let r = runnable
            var count = 0
            let budget = governor.budget(now: now) { count += 1; return r }
            reads += count
            governor.record(waited: waited)
            return budget
        }
    }

    func testItPollsWhileRequestsComeWithinTheSpin() {
        var d = Drive(cap: cap)
        for i in 0..<100 {
            XCTAssertEqual(d.wait(50_000), cap, "wait \(i)")
        }
    }

    func testItStopsWhenFewerThanHalfComeInTimeAndResumesWhenThreeQuartersWould() {
        var d = Drive(cap: cap)
        // One window, exactly half caught: still worth it.
        for i in 0..<SpinGovernor.window { _ = d.wait(i % 2 == 0 ? 50_000 : 5 * ms) }
        XCTAssertEqual(d.wait(5 * ms), cap, "half caught: it keeps polling")
        // The next window misses throughout (none caught of 16: stop).
        for _ in 1..<SpinGovernor.window { _ = d.wait(5 * ms) }
        XCTAssertFalse(d.governor.catching)
        XCTAssertEqual(d.wait(50_000), 0, "fewer than half caught: it blocks at once")
        // While it blocks it still learns what a spin would have caught: 11 of 16 is not enough...
        for i in 1..<SpinGovernor.window { XCTAssertEqual(d.wait(i < 11 ? 50_000 : 5 * ms), 0) }
        XCTAssertFalse(d.governor.catching, "11 of 16 would have been caught: not yet")
        // ...12 of 16 is.
        for i in 0..<SpinGovernor.window { _ = d.wait(i < 12 ? 50_000 : 5 * ms) }
        XCTAssertTrue(d.governor.catching)
        XCTAssertEqual(d.wait(50_000), cap, "three quarters would have been caught: it polls again")
    }

    func testABusyMachineGetsNoSpinWhateverTheCatchRateAndAQuietOneGetsItBack() {
        var d = Drive(cap: cap)
        d.runnable = 3                  // more runnable tasks than the 2 CPUs
        XCTAssertEqual(d.wait(10_000), cap)
        XCTAssertEqual(d.wait(10_000), cap)
        XCTAssertEqual(d.wait(10_000), cap, "three busy samples of eight: not yet")
        XCTAssertEqual(d.wait(10_000), 0, "half of the last eight samples busy: no spin")
        for _ in 0..<20 { XCTAssertEqual(d.wait(10_000), 0) }
        XCTAssertTrue(d.governor.catching, "every request came in time: only the busy machine stops the spin")
        d.runnable = 2                  // the reader and the tool: the cores are theirs
        for _ in 0..<4 { XCTAssertEqual(d.wait(10_000), 0, "the recent samples still say busy") }
        XCTAssertEqual(d.wait(10_000), cap, "five quiet samples of eight: it polls again")
    }

    func testTheRunQueueIsReadAtMostEveryFewMilliseconds() {
        var d = Drive(cap: cap)
        for _ in 0..<1_000 { _ = d.wait(10_000, step: 20_000) }   // a request every 20 µs for 20 ms
        let expected = 1_000 * 20_000 / SpinGovernor.sampleInterval
        XCTAssertLessThanOrEqual(d.reads, expected + 1)
        XCTAssertGreaterThanOrEqual(d.reads, expected - 1)
        XCTAssertEqual(d.governor.sampled, d.reads)
    }

    func testAZeroSpinNeverPollsAndSpinAdaptOffAlwaysDoes() {
        var zero = Drive(cap: 0)
        for _ in 0..<50 { XCTAssertEqual(zero.wait(10_000), 0) }
        XCTAssertEqual(zero.reads, 0, "nothing to decide: the run queue is never read")
        var fixed = Drive(cap: cap, adaptive: false)
        fixed.runnable = 100
        for _ in 0..<50 { XCTAssertEqual(fixed.wait(50 * ms), cap) }
        XCTAssertEqual(fixed.reads, 0)
    }

    func testAnUnknownRunQueueLeavesTheCatchRateToDecide() {
        var g = SpinGovernor(cap: cap, cpus: 2)
        var now = 0
        for _ in 0..<40 {
            now += 5 * ms
            XCTAssertEqual(g.budget(now: now) { nil }, cap)
            g.record(waited: 1_000)
        }
    }

    func testTheRunQueueIsReadFromProcLoadavg() {
        func parse(_ s: String) -> Int? { Array(s.utf8).withUnsafeBytes { RunQueue.parse($0) } }
        XCTAssertEqual(parse("0.52 0.58 0.59 3/250 12345\n"), 3)
        XCTAssertEqual(parse("12.87 4.42 2.25 17/1250 5273\n"), 17)
        XCTAssertNil(parse("0.52 0.58 0.59"))
        XCTAssertNil(parse("garbage"))
        let now = RunQueue.runnable()
        XCTAssertNotNil(now)
        XCTAssertGreaterThanOrEqual(now ?? 0, 1, "at least this thread is running")
    }
}
