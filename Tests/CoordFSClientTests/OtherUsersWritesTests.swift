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
final class OtherUsersWritesTests: OtherUsersTurnTestCase {
    func testAnotherUsersWritesOfRootsDocumentQueueAtMostOneAheadOfRootsSave() throws {
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
        let (alone, busy, ahead) = try rootsSaveOfAPresentedDocument(mode: 0o666, program: loop)
        print("OtherUsersWritesTests: root's save \(alone) s alone, \(busy) s with \(Self.processes) of nobody's writers; nobody's asks answered ahead of it: \(ahead)")
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
        for i in 0..<Self.processes {
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
        print("OtherUsersWritesTests: root's create \(alone) s alone, \(busy) s with \(Self.processes) of nobody's deleters; nobody's asks answered ahead of it: \(ahead)")
        XCTAssertLessThanOrEqual(ahead, 2, "at most one of nobody's asks queued ahead of root's")
        // Without the rule it waited for every deletion of nobody's queued at the presenter.
        XCTAssertLessThan(busy, alone + 10 * Self.delay, "root's create took \(busy) s with nobody's deletions, \(alone) s without")
        XCTAssertEqual(readBacking("shared/root-busy.txt"), "root\n")
    }
}
