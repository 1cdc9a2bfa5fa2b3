import TestSupport
import XCTest

extension XCTestCase {
    /// Waits up to `seconds` for `condition`; on timeout fails the test naming `what`. Returns
    /// whether it held. A generous bound for something that must happen, never a speed claim.
    @discardableResult
    func eventually(_ what: String, within seconds: Double = 30, file: StaticString = #filePath, line: UInt = #line,
                    _ condition: () -> Bool) -> Bool {
        if pollUntil(within: seconds, condition) { return true }
        XCTFail("not within \(Int(seconds)) s: \(what)", file: file, line: line)
        return false
    }
}
