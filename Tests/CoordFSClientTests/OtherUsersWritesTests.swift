import XCTest
import Foundation
import Glibc
import Coordination
@testable import CoordFS

/// Another user's writes and deletions must not queue ahead of root's save through root's
/// presenter (docs/protocol.md, "Who may delay or refuse what"; docs/coordination.md, "Other
/// users' turns" and "Fair queues"). A presenter answers one ask at a time, and each of nobody's
/// looping writes of root's `0666` document and deletions in root's presented shared folder asked
/// it; before, root's save waited for all of them,
/// queued at the presenter and on the item. Now each user other than root and the presenter's own
/// has one turn at a presenter (one ask chain or reacquire queued there at a time), and a queue
/// serves each user's first access before any user's second.
final class OtherUsersWritesTests: ClientMountTestCase {
    let nobody = (uid: uid_t(65534), gid: gid_t(65534))
    static let delay = 0.5
    static let writers = 30

    override func configure(_ options: inout MountOptions) {
        super.configure(&options)
        options.allowOther = true
        // Long enough that root's save, queued behind nobody's accesses, waits for every one of them.
        options.coordination.askTimeout = 60
        options.coordination.writeWait = 300
    }

    private var all: [CoordinationEvent] { recorded { _ in true } }

    /// Runs `command` as root through /bin/sh; returns how long it took, in seconds.
    private func timed(_ command: String) throws -> Double {
        let start = Date()
        let result = try run(["/bin/sh", "-c", command], timeout: 600)
        XCTAssertEqual(result.status, 0, result.output)
        return Date().timeIntervalSince(start)
    }

    private func asked(by uid: UInt32, _ events: [CoordinationEvent]) -> Int {
        events.filter { if case .presenterAsked = $0.kind { $0.origin?.uid == uid } else { false } }.count
    }

    /// Root's save under nobody's looping `program` (one process per tag, as nobody): its time
    /// without them (`alone`) and with them, and how many of nobody's asks the presenter answered
    /// between root's first ask and root's last answer.
    private func rootsSave(alone aloneCommand: String, busy busyCommand: String, program: String,
                           arguments: (Int) -> [String]) throws -> (alone: Double, busy: Double, ahead: Int) {
        let alone = try timed(aloneCommand)
        let stop = root + "/stop"
        var loops: [Child] = []
        defer {
            close(open(stop, O_CREAT | O_WRONLY, 0o644))
            for loop in loops { wait(loop, timeout: 300) }
        }
        for i in 0..<Self.writers {
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
        XCTAssertGreaterThan(asked(by: 65534, all), 2, "nobody's accesses still ask the presenter, one at a time")
        close(open(stop, O_CREAT | O_WRONLY, 0o644))
        for loop in loops {
            XCTAssertEqual(wait(loop, timeout: 300), 0)
            XCTAssertEqual(loop.text, "", "nobody's accesses succeed")
        }
        loops = []
        return (alone, busy, ahead)
    }

    func testAnotherUsersWritesOfRootsDocumentQueueAtMostOneAheadOfRootsSave() throws {
        let bin = try Self.coordfsBinary()
        try writeBacking("doc.txt", "hello\n", mode: 0o666)
        chmod(backing + "/doc.txt", 0o666)
        let presenter = try start([bin, "present", mnt + "/doc.txt", "--delay", "\(Self.delay)"])
        XCTAssertTrue(eventually { self.presenterCount == 1 }, presenter.text)
        // Each of nobody's processes writes the document over and over (an open for writing: a
        // relinquish of root's presenter, the write, its reacquire).
        let loop = """
        import sys, os
        stop, doc = sys.argv[1], sys.argv[2]
        while not os.path.exists(stop):
            try:
                with open(doc, "w") as f:
                    f.write("nobody\\n")
            except OSError as e:
                print(e, flush=True)
        """
        let doc = mnt + "/doc.txt"
        let (alone, busy, ahead) = try rootsSave(alone: "echo root-alone > \(doc)", busy: "echo root-busy > \(doc)",
                                                 program: loop, arguments: { _ in [doc] })
        print("OtherUsersWritesTests: root's save \(alone) s alone, \(busy) s with \(Self.writers) of nobody's writers; nobody's asks answered ahead of it: \(ahead)")
        XCTAssertLessThanOrEqual(ahead, 2, "at most one of nobody's asks (the writer holding the document's reacquire) ahead of root's save")
        // A generous bound: without the rule it waited for every queued write of nobody's, each a
        // relinquish and a reacquire (half a minute at 0.5 s an ask).
        XCTAssertLessThan(busy, alone + 10 * Self.delay, "root's save took \(busy) s with nobody's writers, \(alone) s without")
    }

    func testAnotherUsersDeletionsInRootsPresentedFolderQueueAtMostOneAheadOfRootsCreate() throws {
        let bin = try Self.coordfsBinary()
        // A shared folder everyone may create in (root's, sticky), and in it a folder of nobody's
        // for each of its processes, with files to delete. (Each process in a folder of its own:
        // the kernel lets one create or deletion at a time into one folder, holding the folder
        // while the daemon asks; docs/protocol.md says what that leaves.)
        let shared = backing + "/shared"
        mkdir(shared, 0o1777)
        chmod(shared, 0o1777)
        for i in 0..<Self.writers {
            let own = shared + "/n\(i)"
            mkdir(own, 0o755)
            chown(own, nobody.uid, nobody.gid)
            for k in 0..<40 {
                let path = own + "/old-\(k)"
                close(open(path, O_CREAT | O_WRONLY, 0o644))
                chown(path, nobody.uid, nobody.gid)
            }
        }
        let presenter = try start([bin, "present", mnt + "/shared", "--delay", "\(Self.delay)"])
        XCTAssertTrue(eventually { self.presenterCount == 1 }, presenter.text)
        // Each of nobody's processes deletes its files one by one (root's presenter of the shared
        // folder accommodates each deletion), then creates, writes and removes new ones.
        let loop = """
        import sys, os
        stop, folder = sys.argv[1], sys.argv[2]
        old = ["%s/old-%d" % (folder, k) for k in range(40)]
        k = 0
        while not os.path.exists(stop):
            try:
                if old:
                    os.unlink(old.pop())
                new = "%s/new-%d" % (folder, k)
                k += 1
                with open(new, "w") as f:
                    f.write("nobody\\n")
                os.unlink(new)
            except OSError as e:
                print(e, flush=True)
        """
        let folder = mnt + "/shared"
        // Root's save: a new file in the shared folder (its create writes the folder: a relinquish).
        let (alone, busy, ahead) = try rootsSave(alone: "echo root > \(folder)/root-alone.txt", busy: "echo root > \(folder)/root-busy.txt",
                                                 program: loop, arguments: { ["\(folder)/n\($0)"] })
        print("OtherUsersWritesTests: root's create \(alone) s alone, \(busy) s with \(Self.writers) of nobody's deleters; nobody's asks answered ahead of it: \(ahead)")
        XCTAssertLessThanOrEqual(ahead, 2, "at most one of nobody's asks queued ahead of root's")
        // Without the rule it waited for every deletion of nobody's queued at the presenter.
        XCTAssertLessThan(busy, alone + 10 * Self.delay, "root's create took \(busy) s with nobody's deletions, \(alone) s without")
        XCTAssertEqual(readBacking("shared/root-busy.txt"), "root\n")
    }
}
