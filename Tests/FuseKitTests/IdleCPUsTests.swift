import XCTest
@testable import FuseKit

/// The daemon's log line for a machine whose idle CPUs halt at once (`IdleCPUs.note`): said only
/// for cpuidle-haltpoll with its polling off, from the two sysfs files as the kernel writes them.
final class IdleCPUsTests: XCTestCase {
    func testSaidOnlyWhenHaltpollDoesNotPoll() {
        let said = IdleCPUs.note(driver: "haltpoll\n", haltPollNanoseconds: "0\n")
        XCTAssertNotNil(said)
        XCTAssertTrue(said?.contains("guest_halt_poll_ns 0") ?? false, said ?? "")
        XCTAssertTrue(said?.contains(IdleCPUs.haltPollFile) ?? false, said ?? "")
        XCTAssertNil(IdleCPUs.note(driver: "haltpoll\n", haltPollNanoseconds: "200000\n"), "the idle CPUs poll")
        XCTAssertNil(IdleCPUs.note(driver: "intel_idle\n", haltPollNanoseconds: "0\n"), "another driver: the parameter is unused")
        XCTAssertNil(IdleCPUs.note(driver: "acpi_idle\n", haltPollNanoseconds: nil))
        XCTAssertNil(IdleCPUs.note(driver: nil, haltPollNanoseconds: nil), "no cpuidle at all")
        XCTAssertNil(IdleCPUs.note(driver: "haltpoll\n", haltPollNanoseconds: nil), "no haltpoll module parameters")
        XCTAssertNil(IdleCPUs.note(driver: "haltpoll 0\n", haltPollNanoseconds: "0 0\n"), "not the kernel's format")
    }
}
