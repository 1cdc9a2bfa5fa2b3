import Glibc
import XCTest
@testable import Linux

/// The descriptor numbers the daemon keeps for its own files (`DescriptorReserve`): a client's
/// descriptor at or above the floor is not kept, and a truncating open is asked before whether the
/// lowest free number is below it.
final class DescriptorReserveTests: XCTestCase {
    override func tearDown() {
        DescriptorReserve.keepNothing()
        super.tearDown()
    }

    func testTheReserveIsASixteenthWithin32And256() {
        XCTAssertEqual(DescriptorReserve.size(forLimit: 128), 32)
        XCTAssertEqual(DescriptorReserve.size(forLimit: 1024), 64)
        XCTAssertEqual(DescriptorReserve.size(forLimit: 4096), 256)
        XCTAssertEqual(DescriptorReserve.size(forLimit: 1 << 20), 256)
        DescriptorReserve.keep(limit: 1024)
        XCTAssertEqual(DescriptorReserve.floor, 960)
        XCTAssertEqual(DescriptorReserve.kept, 64)
        XCTAssertTrue(DescriptorReserve.admits(959))
        XCTAssertFalse(DescriptorReserve.admits(960))
        XCTAssertFalse(DescriptorReserve.admits(1023))
        DescriptorReserve.keep(limit: 10)
        XCTAssertEqual(DescriptorReserve.floor, 0, "a limit below the reserve keeps every number")
        XCTAssertFalse(DescriptorReserve.admits(3))
    }

    /// As in a process that never kept a reserve (the CLI, a part tested on its own).
    func testKeepingNothingAdmitsEverything() {
        DescriptorReserve.keep(limit: 128)
        DescriptorReserve.keepNothing()
        XCTAssertEqual(DescriptorReserve.floor, .max)
        XCTAssertEqual(DescriptorReserve.kept, 0)
        XCTAssertTrue(DescriptorReserve.admits(1 << 20))
        XCTAssertTrue(DescriptorReserve.hasRoom(probing: 0))
    }

    /// `hasRoom` answers by the lowest free number, whatever the probe's own number.
    func testRoomIsTheLowestFreeNumberBelowTheFloor() throws {
        let probe = open("/dev/null", O_RDONLY | O_CLOEXEC)
        XCTAssertGreaterThanOrEqual(probe, 0)
        defer { close(probe) }
        let lowest = fcntl(probe, F_DUPFD_CLOEXEC, 0)
        XCTAssertGreaterThanOrEqual(lowest, 0)
        close(lowest)
        // A limit whose floor is the lowest free number: no room; one above it: room.
        DescriptorReserve.keep(limit: Int(lowest) + 32)
        XCTAssertEqual(DescriptorReserve.floor, lowest)
        XCTAssertFalse(DescriptorReserve.hasRoom(probing: probe))
        DescriptorReserve.keep(limit: Int(lowest) + 33)
        XCTAssertTrue(DescriptorReserve.hasRoom(probing: probe))
        XCTAssertEqual(fcntl(lowest, F_GETFD), -1, "the probe's duplicate is closed again")
    }
}
