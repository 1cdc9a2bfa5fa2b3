import XCTest
import Foundation
import Glibc
import Coordination
@testable import CoordFS

/// Root's save through root's presenter while many of nobody's processes keep asking that presenter
/// (`OtherUsersAsksTests`: reads; `OtherUsersWritesTests`: writes and deletions): an `allow_other`
/// mount whose presenter takes `delay` seconds an ask, with deadlines long enough that a save queued
/// behind every one of nobody's asks would wait for all of them (docs/coordination.md, "Other users'
/// turns").
class OtherUsersTurnTestCase: ClientMountTestCase {
    let nobody = (uid: uid_t(65534), gid: gid_t(65534))
    static let delay = 0.5
    /// How many of nobody's processes keep asking.
    static let processes = 30

    override func configure(_ options: inout MountOptions) {
        super.configure(&options)
        options.allowOther = true
        options.coordination.askTimeout = 60
        options.coordination.writeWait = 300
    }

    var all: [CoordinationEvent] { recorded { _ in true } }

    /// Runs `command` as root through /bin/sh; returns how long it took, in seconds.
    func timed(_ command: String) throws -> Double {
        let start = Date()
        let result = try run(["/bin/sh", "-c", command], timeout: 600)
        XCTAssertEqual(result.status, 0, result.output)
        return Date().timeIntervalSince(start)
    }

    func asked(by uid: UInt32, _ events: [CoordinationEvent]) -> Int {
        events.filter { if case .presenterAsked = $0.kind { $0.origin?.uid == uid } else { false } }.count
    }

    /// Root's save of `doc.txt` (of `mode`, presented by `coordfs present --delay`) under nobody's
    /// looping `program`, which is given the stop file and the document's path: `rootsSave`'s
    /// times and asks ahead, each save an `echo >` of root's.
    func rootsSaveOfAPresentedDocument(mode: mode_t, program: String) throws -> (alone: Double, busy: Double, ahead: Int) {
        let bin = try Self.coordfsBinary()
        try writeBacking("doc.txt", "hello\n", mode: mode)
        chmod(backing + "/doc.txt", mode)
        let presenter = try start([bin, "present", mnt + "/doc.txt", "--delay", "\(Self.delay)"])
        XCTAssertTrue(eventually { self.presenterCount == 1 }, presenter.text)
        let doc = mnt + "/doc.txt"
        return try rootsSave(alone: "echo root-alone > \(doc)", busy: "echo root-busy > \(doc)",
                             program: program, arguments: { _ in [doc] })
    }

    /// Root's save under nobody's looping `program` (`processes` of them, as nobody, each given the
    /// stop file and then `arguments(i)`; each runs until the stop file appears and prints only its
    /// errors): its time without them (`alone`) and with them, and how many of nobody's asks the
    /// presenter answered between root's first ask and root's last answer. Nobody's processes have
    /// ended, without an error, when it returns.
    func rootsSave(alone aloneCommand: String, busy busyCommand: String, program: String,
                   arguments: (Int) -> [String]) throws -> (alone: Double, busy: Double, ahead: Int) {
        let alone = try timed(aloneCommand)
        let stop = root + "/stop"
        var loops: [Child] = []
        defer {
            close(open(stop, O_CREAT | O_WRONLY, 0o644))
            for loop in loops { wait(loop, timeout: 300) }
        }
        for i in 0..<Self.processes {
            loops.append(try start(["/usr/bin/python3", "-c", program, stop] + arguments(i), user: nobody))
        }
        XCTAssertTrue(eventually(timeout: 60) { self.asked(by: 65534, self.all) >= 2 }, "nobody's accesses ask root's presenter")
        // Let nobody's accesses pile up as they did before.
        usleep(3_000_000)
        let mark = all.count
        let busy = try timed(busyCommand)
        let events = Array(all[mark...])
        let rootAsked = events.firstIndex { if case .presenterAsked = $0.kind { $0.origin?.uid == 0 } else { false } }
        let rootAnswered = events.lastIndex { if case .presenterAnswered = $0.kind { $0.origin?.uid == 0 } else { false } }
        guard let first = rootAsked, let last = rootAnswered, first < last else {
            XCTFail("root's save asked the presenter and had its answer: \(events.map(\.description).prefix(40))")
            return (alone, busy, -1)
        }
        let ahead = events[first...last].filter { event in
            if case .presenterAnswered = event.kind { event.origin?.uid == 65534 } else { false }
        }.count
        XCTAssertGreaterThan(asked(by: 65534, all), 2, "nobody's accesses still ask the presenter, one chain at a time")
        close(open(stop, O_CREAT | O_WRONLY, 0o644))
        for loop in loops {
            XCTAssertEqual(wait(loop, timeout: 300), 0)
            XCTAssertEqual(loop.text, "", "nobody's accesses succeed")
        }
        loops = []
        return (alone, busy, ahead)
    }
}
