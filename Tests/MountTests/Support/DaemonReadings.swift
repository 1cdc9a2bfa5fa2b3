import Foundation
import TestSupport

extension MountTestCase {
    /// The coordfs daemon's log of the fixture's mount ("" when there is none).
    func daemonLog() -> String {
        (try? String(contentsOfFile: fixture.backing + "/.coordfs/daemon.log", encoding: .utf8)) ?? ""
    }

    /// The value of `series` on the daemon's metrics endpoint (its port from the daemon's log), or nil.
    func metric(_ series: String) -> Double? {
        let log = daemonLog()
        guard let at = log.range(of: "metrics at http://127.0.0.1:"),
              let port = UInt16(log[at.upperBound...].prefix { $0.isNumber }),
              let text = HTTP.request(port: port, "GET", "/metrics")?.text
        else { return nil }
        for line in text.split(separator: "\n") where line.hasPrefix(series + " ") {
            return Double(line.dropFirst(series.count + 1).trimmingCharacters(in: .whitespaces))
        }
        return nil
    }
}
