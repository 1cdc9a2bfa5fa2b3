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
final class OtherUsersAsksTests: ClientMountTestCase {
    let nobody = (uid: uid_t(65534), gid: gid_t(65534))
    static let delay = 0.5

    override func configure(_ options: inout MountOptions) {
        super.configure(&options)
        options.allowOther = true
        // Long enough that root's save, queued behind nobody's asks, waits for every one of them.
        options.coordination.askTimeout = 60
        options.coordination.writeWait = 120
    }

    private var all: [CoordinationEvent] { recorded { _ in true } }

    /// Root's save through the mount (a shell's `>`), in seconds.
    private func save(_ text: String) throws -> Double {
        let start = Date()
        let result = try run(["/bin/sh", "-c", "echo \(text) > \(mnt!)/doc.txt"], timeout: 300)
        XCTAssertEqual(result.status, 0, result.output)
        return Date().timeIntervalSince(start)
    }

    func testAnotherUsersReadsQueueAtMostOneAskChainAheadOfRootsSave() throws {
        let bin = try Self.coordfsBinary()
        try writeBacking("doc.txt", "hello\n", mode: 0o644)
        let presenter = try start([bin, "present", mnt + "/doc.txt", "--delay", "\(Self.delay)"])
        XCTAssertTrue(eventually { self.presenterCount == 1 }, presenter.text)
        let alone = try save("root-alone")

        // 30 of nobody's processes read the document in a loop until the stop file appears.
        let stop = root + "/stop"
        let loop = """
        import os, sys
        errors = 0
        while not os.path.exists(sys.argv[2]):
            try:
                open(sys.argv[1]).read()
            except OSError as e:
                errors += 1
                print(e, flush=True)
        """
        var readers: [Child] = []
        defer {
            close(open(stop, O_CREAT | O_WRONLY, 0o644))
            for reader in readers { wait(reader, timeout: 60) }
        }
        for _ in 0..<30 {
            readers.append(try start(["/usr/bin/python3", "-c", loop, mnt + "/doc.txt", stop], user: nobody))
        }
        func asked(by uid: UInt32, _ events: [CoordinationEvent]) -> Int {
            events.filter { if case .presenterAsked = $0.kind { $0.origin?.uid == uid } else { false } }.count
        }
        XCTAssertTrue(eventually(timeout: 60) { asked(by: 65534, self.all) >= 2 }, "nobody's reads ask root's presenter")
        // Let nobody's reads pile up as they did before.
        usleep(3_000_000)

        let mark = all.count
        let busy = try save("root-busy")
        let events = Array(all[mark...])
        // Root's save's asks, and nobody's asks answered between root's first ask and root's last answer.
        let rootAsked = events.firstIndex { if case .presenterAsked = $0.kind { $0.origin?.uid == 0 } else { false } }
        let rootAnswered = events.lastIndex { if case .presenterAnswered = $0.kind { $0.origin?.uid == 0 } else { false } }
        guard let first = rootAsked, let last = rootAnswered, first < last else {
            return XCTFail("root's save asked the presenter and had its answer: \(events.map(\.description).prefix(40))")
        }
        let ahead = events[first...last].filter { event in
            if case .presenterAnswered = event.kind { event.origin?.uid == 65534 } else { false }
        }
        print("OtherUsersAsksTests: root's save \(alone) s without readers, \(busy) s with 30; nobody's asks answered ahead of it: \(ahead.count)")
        XCTAssertLessThanOrEqual(ahead.count, 2, "at most one of nobody's ask chains (relinquish, save) ahead of root's save")
        // The same as a generous bound on root's wait: without the rule it waited for every
        // queued ask of nobody's, 30 readers' worth (15 s and more at 0.5 s an ask).
        XCTAssertLessThan(busy, alone + 10 * Self.delay, "root's save took \(busy) s with nobody's readers, \(alone) s without")
        XCTAssertGreaterThan(asked(by: 65534, all), 2, "nobody's reads still ask the presenter, one chain at a time")
        close(open(stop, O_CREAT | O_WRONLY, 0o644))
        for reader in readers {
            XCTAssertEqual(wait(reader, timeout: 60), 0)
            XCTAssertEqual(reader.text, "", "nobody's reads succeed")
        }
        readers = []
        XCTAssertEqual(readBacking("doc.txt"), "root-busy\n")

        // The event log says why nobody's reads were not asked (as `coordfs log -f` shows an
        // operator), at most twice a turn: once for the first read, once counting the others.
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
