import EtcdTestSupport
import Foundation
import Glibc
import XCTest

/// What users of two hosts sharing one folder through etcd meet (docs/cluster.md), each node a
/// daemon process of its own started as a user starts it, node a's in a network namespace of its
/// own where a test cuts its link (`Tests/EtcdTestSupport/NetworkNamespace.swift`), through the real
/// mounts and the real CLI. Teardown restores the link, unmounts both, deletes the namespace and
/// stops etcd, also when a test fails.
final class ClusterTwoHostsTests: ClusterProcessTestCase {
    /// Node a's daemon in a network namespace reaching etcd over a veth pair (`namespace`), node b's
    /// on this side; etcd listens on both.
    func mountAInANamespaceAndB(_ extraA: [String] = [], _ extraB: [String] = []) throws -> NetworkNamespace {
        let ns: NetworkNamespace
        do { ns = try NetworkNamespace() } catch { throw XCTSkip("no network namespace: \(error)") }
        namespace = ns
        etcd.stop()
        etcd = try EtcdCluster(size: 1, alsoListenOn: [ns.hostAddress])
        try mount("a", at: mnt, launcher: ns.enter, endpoints: etcd.endpoints(on: ns.hostAddress), extraA)
        try mount("b", at: mntB, extraB)
        return ns
    }

    /// etcd's current revision.
    func etcdRevision() throws -> Int64 {
        let json = etcdctl(["endpoint", "status", "-w", "json"])
        guard let list = try? JSONSerialization.jsonObject(with: Data(json.utf8)) as? [[String: Any]],
              let header = (list.first?["Status"] as? [String: Any])?["header"] as? [String: Any],
              let revision = header["revision"] as? NSNumber else { throw CLIError("etcdctl endpoint status: \(json)") }
        return revision.int64Value
    }

    /// A presenter on host a with unsaved changes while host b writes its document, a cut off from
    /// etcd at that moment, and etcd compacting its history meanwhile (as `--auto-compaction-*`
    /// does): b's writer waits for an answer no one can give until a's lease ends, then goes on;
    /// when the link returns, a's presenter hears of b's change as a conflict (its unsaved changes
    /// against b's bytes), so no change is lost, and a presenter of a file b wrote last is told
    /// too. Before, a's watch, finding the revisions it had not read compacted, read etcd's keys
    /// again and told nothing of the change records among them: a's presenter, never told, would
    /// have saved over b's bytes.
    func testAPresenterCutOffWhileTheOtherHostWritesAndEtcdCompactsHearsOfItWhenTheLinkReturns() throws {
        let ns = try mountAInANamespaceAndB()
        FileManager.default.createFile(atPath: backing + "/doc.txt", contents: Data("v0\n".utf8))
        FileManager.default.createFile(atPath: backing + "/notes.txt", contents: Data("n0\n".utf8))
        let presenter = try startCoordfs(["present", mnt + "/doc.txt", "--unsaved"])
        let notes = try present("notes.txt", on: mnt)
        XCTAssertTrue(waitUntil(10) { presenter.lines.contains { $0.hasPrefix("registered") } }, presenter.stdout)
        XCTAssertTrue(waitUntilKnown(presenters: 2, of: "a", through: mntB), "a's presenters in etcd and known to b")

        try ns.cut()
        let started = Date()
        let r = sh("echo b1 > '\(mntB!)/doc.txt'", timeout: 60)
        let took = Date().timeIntervalSince(started)
        XCTAssertEqual(r.status, 0, "b's write while a is cut off: \(r)")
        print("b's write while a was cut off took \(String(format: "%.2f", took)) s (a's TTL \(ttl) s)")
        // Later records of b's overwrite the one of doc.txt in etcd (one key per node).
        XCTAssertEqual(sh("echo x > '\(mntB!)/x.txt' && sleep 0.2 && echo n1 > '\(mntB!)/notes.txt'").status, 0)
        // a's watch fails (its probe times out) before the history goes: it then needs what etcd compacted.
        XCTAssertTrue(waitUntil(20) { daemonLog("a").contains("etcd unreachable") }, "a's log: \(daemonLog("a"))")
        let revision = try etcdRevision()
        XCTAssertTrue(etcdctl(["compact", String(revision)]).contains("compacted revision"))
        try ns.restore()
        XCTAssertTrue(waitUntil(20) { daemonLog("a").contains("etcd compacted its history") }, "a's log: \(daemonLog("a"))")

        // a's presenter hears of b's change: a conflict, since it had unsaved changes.
        XCTAssertTrue(waitUntil(15) { presenter.lines.contains { $0.hasPrefix("notification documentChanged doc.txt") } },
                      "a's presenter never heard of b's write: \(presenter.stdout)")
        let changed = presenter.lines.first { $0.hasPrefix("notification documentChanged doc.txt") } ?? ""
        XCTAssertTrue(changed.contains("action=conflict"), changed)
        XCTAssertTrue(waitUntil(10) { notes.lines.contains { $0.hasPrefix("notification didChange notes.txt") } }, notes.stdout)
        let conflicts = coordfs("conflicts", mnt, "--json")
        XCTAssertEqual(conflicts.status, 0, "\(conflicts)")
        XCTAssertEqual(conflicts.lines.count, 1, "one conflict on a: \(conflicts)")
        XCTAssertEqual(FileOps.get(mnt + "/doc.txt"), "b1\n", "a's mount shows b's bytes")
        presenter.stop(SIGKILL)
        notes.stop(SIGKILL)
    }

    // MARK: Both hosts saving one document

    /// The open `coordfs conflicts` of the node at `mountpoint`, as JSON objects.
    func openConflicts(_ mountpoint: String) -> [[String: Any]] {
        let r = coordfs("conflicts", mountpoint, "--json")
        XCTAssertEqual(r.status, 0, "\(r)")
        return r.lines.compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
    }

    /// Host a saves doc.txt with `sed -i` (a new file renamed over it, through a's mount), then host
    /// b does, then a reads it at once: a reads b's bytes. Before, a's kernel still named a's own
    /// file (b's change record, paced, had not come) and the daemon, finding that file removed and
    /// so without a path, opened it uncoordinated: a read its own replaced version, and its next
    /// save went over b's change. Then both hosts `sed -i` the document at the same moment, each its
    /// own line, 10 rounds (`saveAtOnce`): no change is ever lost silently.
    func testBothHostsSavingOneDocumentWithSedReadWhatTheOtherSaved() throws {
        try mount("a", at: mnt)
        try mount("b", at: mntB)
        FileOps.put(mnt + "/doc.txt", "a=0\nb=0\n")
        let disk = { FileOps.get(self.backing + "/doc.txt") ?? "" }
        for i in 1...5 {
            XCTAssertEqual(sh("sed -i 's/^a=.*/a=\(i)/' '\(mnt!)/doc.txt' && sed -i 's/^b=.*/b=\(i)/' '\(mntB!)/doc.txt' && cat '\(mnt!)/doc.txt'").stdout,
                           "a=\(i)\nb=\(i)\n", "round \(i): a read its own replaced version, the disk has \(disk())")
        }
        XCTAssertTrue(openConflicts(mnt).isEmpty && openConflicts(mntB).isEmpty, "saves one after the other lose nothing")
        try saveAtOnce("sed -i", rounds: 6...15) { key, value, path in "sed -i 's/^\(key)=.*/\(key)=\(value)/' '\(path)'" }
    }

    /// A program on host a reads the document and keeps it open 4 s while it works (a slow `sed -i`),
    /// host b saves it meanwhile (its rename goes ahead at once past a's file open for reading),
    /// then a saves over b's change: the lostUpdate conflict on a has b's change as theirs and, as
    /// its base, what a read. Before, a's node let b's save pass before it kept what its reader had
    /// read (it kept it only when the reader's access ended, when the name led to b's file): the
    /// conflict had no base, and merge could not be done.
    func testASaveOnOneHostPastAReaderOnTheOtherKeepsWhatThatReaderRead() throws {
        try mount("a", at: mnt)
        try mount("b", at: mntB)
        let middle = "one\ntwo\nthree\n"
        FileOps.put(mnt + "/doc.txt", "a=0\n" + middle + "b=0\n")
        let save = "import os,sys,time\np=sys.argv[1]\nf=open(p)\nt=f.read()\nprint('read',flush=True)\ntime.sleep(4)\n" +
            "open(p+'.new','w').write(t.replace('a=0','a=1'))\nos.rename(p+'.new',p)"
        let slow = try start("/usr/bin/python3", ["-c", save, mnt + "/doc.txt"])
        XCTAssertTrue(waitUntil(10) { slow.lines.contains("read") }, slow.stdout)
        let started = Date()
        XCTAssertEqual(sh("sed -i 's/^b=.*/b=1/' '\(mntB!)/doc.txt'").status, 0)
        XCTAssertLessThan(Date().timeIntervalSince(started), 3, "b's save waited for a's reader (it holds the document 4 s)")
        XCTAssertEqual(slow.wait(timeout: 20), 0, slow.stderr)
        XCTAssertEqual(FileOps.get(backing + "/doc.txt"), "a=1\n" + middle + "b=0\n", "a's late save went over b's change")
        XCTAssertTrue(waitUntil(10) { self.openConflicts(self.mnt).count == 1 }, "\(openConflicts(mnt))")
        let conflict = try XCTUnwrap(openConflicts(mnt).first)
        XCTAssertEqual(conflict["kind"] as? String, "lostUpdate")
        let theirs = try XCTUnwrap((conflict["theirsVersion"] as? NSNumber)?.stringValue, "\(conflict)")
        XCTAssertEqual(coordfs("show", mnt + "/doc.txt", "--version", theirs).stdout, "a=0\n" + middle + "b=1\n")
        let base = try XCTUnwrap((conflict["baseVersion"] as? NSNumber)?.stringValue, "no base: \(conflict)")
        XCTAssertEqual(coordfs("show", mnt + "/doc.txt", "--version", base).stdout, "a=0\n" + middle + "b=0\n")
        let merged = coordfs("resolve", mnt + "/doc.txt", "--merge", "--conflict", (conflict["id"] as? NSNumber)?.stringValue ?? "")
        XCTAssertEqual(merged.status, 0, "\(merged)")
        XCTAssertEqual(FileOps.get(backing + "/doc.txt"), "a=1\n" + middle + "b=1\n", "merged: both changes")
    }

    /// Both hosts save the document at the same moment by writing it in place (Python's
    /// `open(p, 'w')`: opened with O_TRUNC, written, closed), each its own line, 10 rounds: no change
    /// is ever lost silently.
    func testBothHostsWritingOneDocumentInPlaceAtOnceLoseNothingSilently() throws {
        try mount("a", at: mnt)
        try mount("b", at: mntB)
        FileOps.put(mnt + "/doc.txt", "a=0\nb=0\n")
        let script = "import re,sys\np,k,i=sys.argv[1:]\nt=open(p).read()\nopen(p,'w').write(re.sub('^'+k+'=.*',k+'='+i,t,flags=re.M))"
        try saveAtOnce("open(p,'w')", rounds: 1...10) { key, value, path in "python3 -c \"\(script)\" '\(path)' \(key) \(value)" }
    }

    /// Host a sets line `a=` and host b line `b=` of doc.txt to the round's number at the same
    /// moment (`save(key, value, path)`: the shell command of one host's save), round after round.
    /// Every save succeeds; both mounts read what the disk holds; every round in which one host's
    /// change is missing leaves exactly one more `lostUpdate` conflict, on the node of the save that
    /// went over it (docs/cluster.md, "Both hosts saving one document"), whose `theirs` holds the
    /// missing change and whose base is what the document held before the round; a round
    /// that kept both changes leaves none. The conflicts are resolved where they are. Fencing
    /// tokens of the two nodes' grants on the document never coincide.
    func saveAtOnce(_ tool: String, rounds: ClosedRange<Int>, _ save: (String, Int, String) -> String,
                    file: StaticString = #filePath, line: UInt = #line) throws {
        let disk = { FileOps.get(self.backing + "/doc.txt") ?? "" }
        var lost = 0
        var conflicts = ["a": openConflicts(mnt).count, "b": openConflicts(mntB).count]
        for i in rounds {
            let before = disk()
            let r = sh("(\(save("a", i, mnt + "/doc.txt"))) & A=$!; (\(save("b", i, mntB + "/doc.txt"))) & B=$!; wait $A; a=$?; wait $B; b=$?; echo \"$a $b\"")
            XCTAssertEqual(r.stdout, "0 0\n", "round \(i): both saves succeed: \(r)", file: file, line: line)
            let onDisk = disk()
            XCTAssertEqual(FileOps.get(mnt + "/doc.txt"), onDisk, "round \(i): a's mount", file: file, line: line)
            XCTAssertEqual(FileOps.get(mntB + "/doc.txt"), onDisk, "round \(i): b's mount", file: file, line: line)
            let now = ["a": openConflicts(mnt).count, "b": openConflicts(mntB).count]
            let added = now.merging(conflicts) { after, before in after - before }
            defer { conflicts = now }
            let missing = ["a", "b"].filter { !onDisk.contains("\($0)=\(i)\n") }
            guard let gone = missing.first else {
                XCTAssertEqual(added.values.reduce(0, +), 0, "round \(i): both changes kept, yet a conflict: \(added)", file: file, line: line)
                continue
            }
            lost += 1
            XCTAssertEqual(missing.count, 1, "round \(i): neither save: \(onDisk)", file: file, line: line)
            let saver = gone == "a" ? "b" : "a"
            XCTAssertEqual(added[saver], 1, "round \(i): \(gone)'s change went under \(saver)'s save and no conflict on \(saver) (\(added)): \(onDisk)",
                           file: file, line: line)
            XCTAssertEqual(added[gone], 0, "round \(i): \(added)", file: file, line: line)
            // On the late saver's node: theirs holds the change it went over, its base is what it
            // read (kept there before the other node's change went through), mine is the file.
            let m = saver == "a" ? mnt! : mntB!
            let newest = openConflicts(m).max { (($0["id"] as? NSNumber)?.intValue ?? 0) < (($1["id"] as? NSNumber)?.intValue ?? 0) }
            if let theirs = (newest?["theirsVersion"] as? NSNumber)?.stringValue {
                let shown = coordfs("show", m + "/doc.txt", "--version", theirs)
                XCTAssertTrue(shown.stdout.contains("\(gone)=\(i)\n"), "round \(i): theirs: \(shown)", file: file, line: line)
            } else {
                XCTFail("round \(i): no theirs: \(String(describing: newest))", file: file, line: line)
            }
            if let base = (newest?["baseVersion"] as? NSNumber)?.stringValue {
                XCTAssertEqual(coordfs("show", m + "/doc.txt", "--version", base).stdout, before, "round \(i): base", file: file, line: line)
            } else {
                XCTFail("round \(i): no base: \(String(describing: newest))", file: file, line: line)
            }
        }
        print("\(rounds.count) rounds of \(tool) on both hosts at once: \(lost) saves went over the other host's change, \(conflicts.values.reduce(0, +)) lostUpdate conflicts open")
        for m in [mnt!, mntB!] {
            for c in openConflicts(m) {
                XCTAssertEqual(c["kind"] as? String, "lostUpdate", "\(c)", file: file, line: line)
                let id = try XCTUnwrap((c["id"] as? NSNumber)?.stringValue)
                let r = coordfs("resolve", m + "/doc.txt", "--close", "--conflict", id)
                XCTAssertEqual(r.status, 0, "\(r)", file: file, line: line)
            }
            XCTAssertTrue(openConflicts(m).isEmpty, file: file, line: line)
        }
        let tokens = fencedGrants("doc.txt")
        let a = Set(tokens.filter { $0.node == "a" }.map(\.token)), b = Set(tokens.filter { $0.node == "b" }.map(\.token))
        XCTAssertFalse(a.isEmpty || b.isEmpty, "\(tokens)", file: file, line: line)
        XCTAssertTrue(a.isDisjoint(with: b), "a token granted on both nodes: \(a.intersection(b))", file: file, line: line)
    }
}
