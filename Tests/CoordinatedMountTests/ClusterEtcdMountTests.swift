import XCTest
import Foundation
import Glibc
@testable import CoordFS
import Cluster
import ClusterKV
import Coordination
import EtcdTestSupport

/// Two daemons of one cluster in this process (node a: the test case's mount; node b: `mntB`, its
/// own mount point and state folder over the same backing folder) over a real etcd of
/// `etcdSize` members through the daemon's own etcd client (EtcdKV). etcd stopped and both
/// mounts gone at the end, also on failure.
class TwoNodeEtcdMountTestCase: InProcessMountTestCase {
    var mntB: String!
    var daemonB: Daemon!
    var etcd: EtcdCluster!
    var etcdSize: Int { 1 }

    override func configure(_ options: inout MountOptions) {
        super.configure(&options)
        options.cluster.node = "a"
        options.cluster.prefix = "etcdmounttest"
        options.cluster.leaseTTL = 2
        options.cluster.endpoints = etcd.endpoints
    }

    override func setUpWithError() throws {
        etcd = try EtcdCluster(size: etcdSize)
        let template = "/tmp/coordfs-cle-XXXXXX"
        var buf = Array(template.utf8CString)
        guard let made = mkdtemp(&buf) else { throw XCTSkip("mkdtemp failed") }
        root = String(cString: made)
        backing = root + "/backing"
        mnt = root + "/mnt"
        mntB = root + "/mntB"
        for d in [backing!, mnt!, mntB!, root + "/stateB"] { mkdir(d, 0o755) }
        try prepareBacking()
        var options = MountOptions()
        configure(&options)
        let plan = try MountPreflight.plan(backing: backing, mountpoint: mnt, options: options)
        daemon = try Daemon(plan: plan)
        try daemon.startInProcess()
        var optionsB = options
        optionsB.cluster.node = "b"
        var planB = try MountPreflight.plan(backing: backing, mountpoint: mntB, options: optionsB)
        planB.state = StateFolder(backing: root + "/stateB")
        daemonB = try Daemon(plan: planB)
        try daemonB.startInProcess()
    }

    override func tearDownWithError() throws {
        daemonB?.stopAndWait()
        if let mntB, MountTable.coordfsMount(at: mntB) != nil { umount2(mntB, Int32(MNT_DETACH)) }
        try super.tearDownWithError()
        etcd?.stop()
    }

    func waitUntil(_ seconds: Double, _ condition: () -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while !condition() && Date() < deadline { usleep(20_000) }
        return condition()
    }
}

/// ClusterMountTests' two nodes over a real three-member etcd, with etcd's faults: one member of
/// three killed (the leader, then the member the clients used), all of them down, all back.
final class ClusterEtcdMountTests: TwoNodeEtcdMountTestCase {
    override var etcdSize: Int { 3 }

    private func bKnowsPresenter(_ path: String) throws -> Bool {
        let item = try ItemPath(path)
        return waitUntil(10) { daemonB.cluster?.status().nodes.first(where: { $0.name == "a" })?.presenters == [item] }
    }

    /// One etcd member of three killed, the leader first and then another member the clients
    /// used: every write through B's mount to a document presented on A goes through right after
    /// the kill (A's presenter asked before, told after), A's mount shows B's bytes, and a file
    /// written through A shows through B. Before the client resent on "no leader" and the node
    /// retried its guarded changes, the first write after the leader's kill failed with EIO.
    func testOneEtcdMemberOfThreeKilledTheLeaderTooCoordinationGoesOn() throws {
        try write("doc.txt", "one\n")
        let p = try present("doc.txt")
        XCTAssertEqual(try catThenClear("doc.txt", presentedBy: p), "one\n")
        XCTAssertTrue(try bKnowsPresenter("doc.txt"))
        for round in 0..<2 {
            let leader = try XCTUnwrap(etcd.leaderIndex(), "no etcd leader")
            // The leader, then a member that does not lead (the first: the clients' first choice).
            let victim = round == 0 ? leader : (0..<3).first { $0 != leader }!
            etcd.kill(victim)
            let killed = Date()
            for i in 0..<3 {
                p.clear()
                let text = "r\(round)w\(i)"
                let b = try sh("echo \(text) > '\(mntB!)/doc.txt'", allowFailure: true, timeout: 30)
                XCTAssertEqual(b.status, 0, "write \(i) through B after member \(victim) (leader: \(victim == leader)) was killed: \(b.output)")
                let log = p.waitUntil(timeout: 10) { $0.contains("didChange") && $0.contains("reacquire") }
                XCTAssertEqual(log.first, "relinquishToWriter", "round \(round) write \(i): \(log)")
                XCTAssertTrue(log.contains("didChange"), "round \(round) write \(i): \(log)")
                XCTAssertEqual(try read("doc.txt"), text + "\n")
                let a = try sh("echo \(text) > a-\(round)-\(i).txt", allowFailure: true, timeout: 30)
                XCTAssertEqual(a.status, 0, "write through A: \(a.output)")
                XCTAssertEqual(try sh("cat '\(mntB!)/a-\(round)-\(i).txt'", allowFailure: true, timeout: 30).output, text + "\n")
            }
            print("round \(round): member \(victim) killed (leader: \(victim == leader)); 3 writes through each node in \(Date().timeIntervalSince(killed)) s")
            try etcd.restart(victim)
        }
    }

    /// All of etcd down under the default policy (fail): a write through B's mount that needs the
    /// cluster fails within a bound and B's status says etcd is unreachable; etcd back, both nodes
    /// come back without a restart (A's presenter registered again, B's writes go through, A asked).
    func testAllOfEtcdDownFailsWithinTheBoundAndNodesComeBackWithoutARestart() throws {
        try write("doc.txt", "one\n")
        let p = try present("doc.txt")
        XCTAssertEqual(try catThenClear("doc.txt", presentedBy: p), "one\n")
        XCTAssertTrue(try bKnowsPresenter("doc.txt"))
        for i in 0..<3 { etcd.kill(i) }
        let started = Date()
        let failed = try sh("echo down > '\(mntB!)/new.txt'", allowFailure: true, timeout: 30)
        let took = Date().timeIntervalSince(started)
        XCTAssertNotEqual(failed.status, 0, "a write that needs the cluster went through with etcd down")
        XCTAssertLessThan(took, 15, "bounded")
        XCTAssertTrue(waitUntil(10) { daemonB.cluster?.status().reachable == false }, "B's status says etcd is unreachable")

        try etcd.restartAll()
        XCTAssertTrue(waitUntil(15) { daemonB.cluster?.status().reachable == true }, "B back")
        XCTAssertTrue(try bKnowsPresenter("doc.txt"), "A's presenter registered again")
        p.clear()
        try sh("echo three > '\(mntB!)/doc.txt'")
        let log = p.waitUntil { $0.contains("didChange") }
        XCTAssertTrue(log.contains("didChange"), "\(log)")
        XCTAssertEqual(try read("doc.txt"), "three\n")
    }
}
