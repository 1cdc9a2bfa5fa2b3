import EtcdTestSupport
import Foundation
import Glibc
import XCTest

/// `coordfs unmount` of one node while processes on both nodes write, rename and delete in the
/// shared folder and presenters on the other node hold documents (docs/cluster.md, "Faults"): the
/// node leaves within its bounds, gives back everything it held in etcd, tells the other node its
/// last changes, and the other node's writers go on.
final class ClusterUnmountUnderLoadTests: ClusterProcessTestCase {
    /// Each node's kernel caches names, attributes and "no such name" for 60 s and the backing
    /// watcher is off, so only a change record makes node a drop what it cached of node b's
    /// changes; records nobody elsewhere presents wait up to 3 s before they are sent.
    private let options = ["attr_timeout=60", "entry_timeout=60", "negative_timeout=60", "cluster_unpresented_interval=3"]

    /// A shell loop that writes, renames and deletes in `folder` and appends to `appendTo`,
    /// counting its rounds in `root/progress-NAME`; its errors go to its stderr.
    private func writer(_ name: String, in folder: String, appendTo: String) throws -> Child {
        let progress = root + "/progress-" + name
        let script = """
            i=0; while :; do i=$((i+1))
              echo $i > '\(folder)/\(name).tmp' && mv '\(folder)/\(name).tmp' '\(folder)/\(name)' && echo $i >> '\(appendTo)' \
                && rm '\(folder)/\(name)' || exit 1
              echo $i > '\(progress)'
            done
            """
        return try start("/bin/bash", ["-c", script])
    }

    private func rounds(_ name: String) -> Int {
        Int(((try? String(contentsOfFile: root + "/progress-" + name, encoding: .utf8)) ?? "").trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0
    }

    func testANodeUnmountedUnderLoadLeavesNothingBehindAndTellsItsLastChanges() throws {
        for folder in ["shared", "shared/a", "shared/b"] { mkdir(backing + "/" + folder, 0o755) }
        for doc in ["doc1.txt", "doc2.txt", "b.log"] {
            FileManager.default.createFile(atPath: backing + "/shared/" + doc, contents: Data("v\n".utf8))
        }
        try mount("a", at: mnt, options)
        try mount("b", at: mntB, options)
        let presenters = try ["doc1.txt", "doc2.txt"].map { try present("shared/" + $0, on: mnt) }
        // a's writers append to the presented documents; b's to a file of its own.
        let writers = [
            try writer("a1", in: mnt + "/shared/a", appendTo: mnt + "/shared/doc1.txt"),
            try writer("a2", in: mnt + "/shared/a", appendTo: mnt + "/shared/doc2.txt"),
            try writer("b1", in: mntB + "/shared/b", appendTo: mntB + "/shared/b.log"),
            try writer("b2", in: mntB + "/shared/b", appendTo: mntB + "/shared/b.log"),
        ]
        defer { for w in writers { _ = w.stop(SIGKILL) } }
        XCTAssertTrue(waitUntil(60) { ["a1", "a2", "b1", "b2"].allSatisfy { self.rounds($0) >= 5 } },
                      "every writer goes: \(["a1", "a2", "b1", "b2"].map(rounds)) \(writers.map(\.stderr))")
        // a's kernel caches that last.txt is not there; b makes it, the last change b makes.
        XCTAssertNotEqual(access(mnt + "/shared/last.txt", F_OK), 0)
        XCTAssertEqual(sh("echo last > '\(mntB!)/shared/last.txt'").status, 0)

        // Lazily: b's writers hold files open in b's mount (a plain unmount says it is busy).
        let started = Date()
        let r = coordfs("unmount", "--lazy", mntB, timeout: 60)
        let took = Date().timeIntervalSince(started)
        XCTAssertEqual(r.status, 0, "\(r)")
        XCTAssertLessThan(took, 10, "b's unmount took \(took) s")
        XCTAssertEqual(keys(of: "b"), [:], "b left nothing in etcd once its unmount returned")
        // b's last change reached a: its kernel no longer says last.txt is not there.
        XCTAssertTrue(waitUntil(1) { FileOps.get(self.mnt + "/shared/last.txt") == "last\n" },
                      "a does not show b's last change (its record never sent)")

        // a's writers go on, without an error, and its presenters still hear them.
        let before = rounds("a1")
        XCTAssertTrue(waitUntil(20) { self.rounds("a1") >= before + 10 }, "a's writer went from \(before) to \(rounds("a1"))")
        for w in writers.prefix(2) { XCTAssertNil(w.wait(timeout: 0), "a's writer ended: \(w.stderr)") }
        let told = presenters[0].lines.filter { $0.hasPrefix("notification didChange") }.count
        XCTAssertTrue(waitUntil(10) { presenters[0].lines.filter { $0.hasPrefix("notification didChange") }.count > told + 2 },
                      "a's presenter hears a's writes after b left: \(presenters[0].stdout.suffix(300))")
        for p in presenters { XCTAssertEqual(p.stop(), 0) }
        for w in writers { _ = w.stop(SIGKILL) }
        unmount()
    }
}
