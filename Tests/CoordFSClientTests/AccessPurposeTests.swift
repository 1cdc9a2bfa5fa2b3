@testable import CoordFS
import Glibc
import XCTest

/// Every access of one process through the mount shares the purpose `pid:N`, so that a process
/// never waits for itself; the purpose is written digit by digit (not through `String(_:radix:)`).
final class AccessPurposeTests: XCTestCase {
    func testThePurposeIsThePidInDecimal() {
        var pids: [pid_t] = [0, 1, 9, 10, 99, 100, 4242, 65_535, 4_194_304, pid_t.max, -1, pid_t.min]
        for power in 0..<10 {
            let p = pid_t(truncatingIfNeeded: (0..<power).reduce(1) { v, _ in v * 10 })
            pids += [p - 1, p, p + 1]
        }
        for pid in pids {
            XCTAssertEqual(CoordinatedFileSystem.purpose(of: pid), "pid:" + String(Int(pid), radix: 10), "\(pid)")
        }
    }
}
