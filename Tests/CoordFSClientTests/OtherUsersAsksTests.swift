import XCTest
import Foundation
import Glibc
import Coordination
@testable import CoordFS

/// Another user's reads of root's presented world-readable document must not queue their asks
/// ahead of root's own save (docs/protocol.md, "Who may delay or refuse what"). A presenter answers
/// one ask at a time; before, each of nobody's looping read opens asked root's presenter, and root's
/// save waited behind all of them (5 s with 60 readers and a presenter taking 0.2 s an ask). Now a
/// read of another user than root and the presenter's own is not asked of a presenter while an ask
/// chain of that user's to it is open: at most one such chain is ahead of root's save.
final class OtherUsersAsksTests: OtherUsersTurnTestCase {

    func testAnotherUsersReadsQueueAtMostOneAskChainAheadOfRootsSave() throws {
        // Each of nobody's processes reads the document over and over.
        let loop = """
        import os, sys
        stop, doc = sys.argv[1], sys.argv[2]
        while not os.path.exists(stop):
            try:
                open(doc).read()
            except OSError as e:
                print(e, flush=True)
        """
        let (alone, busy, ahead) = try rootsSaveOfAPresentedDocument(mode: 0o644, program: loop)
        print("OtherUsersAsksTests: root's save \(alone) s without readers, \(busy) s with \(Self.processes); nobody's asks answered ahead of it: \(ahead)")
        XCTAssertLessThanOrEqual(ahead, 2, "at most one of nobody's ask chains (relinquish, save) ahead of root's save")
        // The same as a generous bound on root's wait: without the rule it waited for every
        // queued ask of nobody's, 30 readers' worth (15 s and more at 0.5 s an ask).
        XCTAssertLessThan(busy, alone + 10 * Self.delay, "root's save took \(busy) s with nobody's readers, \(alone) s without")
        XCTAssertEqual(readBacking("doc.txt"), "root-busy\n")

        // The event log says why nobody's reads were not asked (as `coordfs log -f` shows an
        // operator), at most twice a turn: once for the first read, once counting the others.
        let bin = try Self.coordfsBinary()
        var records: [[String: Any]] = []
        XCTAssertTrue(eventually(timeout: 30) {
            guard let log = try? self.run([bin, "log", self.mnt, "--kind", "presenterNotAsked", "--json"], timeout: 60),
                  log.status == 0 else { return false }
            records = log.output.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
            return !records.isEmpty
        }, "presenterNotAsked records in the log")
        for record in records {
            XCTAssertEqual(((record["actor"] as? [String: Any])?["uid"] as? NSNumber)?.intValue, 65534, "\(record)")
            XCTAssertEqual((record["details"] as? [String: Any])?["reason"] as? String, "otherUserTurn", "\(record)")
            XCTAssertEqual(record["path"] as? String, "/doc.txt", "\(record)")
        }
        let notAsked = recorded { if case .presenterNotAsked = $0 { true } else { false } }
        let reads = notAsked.reduce(0) { n, e in if case .presenterNotAsked(_, let r, _) = e.kind { n + r } else { n } }
        print("OtherUsersAsksTests: \(reads) of nobody's reads not asked, in \(notAsked.count) events (\(records.count) in the log), \(asked(by: 65534, all)) of nobody's asks")
        XCTAssertLessThanOrEqual(notAsked.count, 2 * asked(by: 65534, all), "at most two records a turn")
        XCTAssertGreaterThan(reads, notAsked.count, "the records count the reads not asked rather than one each")
    }
}
