import XCTest
import Foundation
import Glibc
import Synchronization
@testable import CoordFS
import Cluster
import ClusterKV
import TestSupport
import Coordination

/// Two daemons of one cluster in this process, each with its own mount point and state folder, over
/// one backing folder and one in-memory etcd: the test case's mount is node A, `mntB` node B (its
/// options A's, named b).
class TwoNodeClusterMountTestCase: InProcessMountTestCase {
    var mntB: String!
    var daemonB: Daemon!
    let etcd = MemoryClusterStore()

    override func configure(_ options: inout MountOptions) {
        super.configure(&options)
        options.cluster.node = "a"
        options.cluster.prefix = "mounttest"
    }

    override func willStart(_ daemon: Daemon) {
        // Node A: the test case's mount, joined to the in-memory etcd before it serves.
        daemon.clusterStoreForTesting = etcd
    }

    override func setUpWithError() throws {
        try super.setUpWithError()
        // Node B: the same backing folder, its own mount point and state folder.
        let b = try makeNode("b", store: etcd)
        mntB = b.mountpoint
        daemonB = b.daemon
        try daemonB.startInProcess()
    }

    /// Another node of node A's cluster, not started: the same backing folder and options, node
    /// name `name`, its own mount point (`root/mnt` + the name in upper case) and state folder,
    /// joining through `store`.
    func makeNode(_ name: String, store: ClusterStore) throws -> (daemon: Daemon, mountpoint: String) {
        let suffix = name.uppercased()
        let mountpoint = root + "/mnt" + suffix
        mkdir(mountpoint, 0o755)
        mkdir(root + "/state" + suffix, 0o755)
        var options = daemon.plan.options
        options.cluster.node = name
        var plan = try MountPreflight.plan(backing: backing, mountpoint: mountpoint, options: options)
        plan.state = StateFolder(backing: root + "/state" + suffix)
        let node = try Daemon(plan: plan)
        node.clusterStoreForTesting = store
        return (node, mountpoint)
    }

    override func tearDownWithError() throws {
        daemonB?.stopAndWait()
        if let mntB, MountTable.coordfsMount(at: mntB) != nil { umount2(mntB, Int32(MNT_DETACH)) }
        try super.tearDownWithError()
    }
}

/// A presenter on node A is asked before a write through node B's mount and told after it, and A's
/// store keeps the version it had.
final class ClusterMountTests: TwoNodeClusterMountTestCase {
    func testAPresenterOnOneNodeIsAskedBeforeAndToldAfterAWriteThroughTheOtherNodesMount() throws {
        try write("doc.txt", "one\n")
        let p = try present("doc.txt")
        XCTAssertEqual(try catThenClear("doc.txt", presentedBy: p), "one\n")
        // B knows A's presenter.
        let deadline = Date().addingTimeInterval(5)
        while daemonB.cluster?.status().nodes.first(where: { $0.name == "a" })?.presenters != [try ItemPath("doc.txt")] && Date() < deadline {
            usleep(10_000)
        }
        try sh("echo two > '\(mntB!)/doc.txt'")
        let log = p.waitUntil { $0.contains("didChange") && $0.contains("reacquire") }
        XCTAssertEqual(log.first, "relinquishToWriter", "\(log)")
        XCTAssertTrue(log.contains("didChange"), "\(log)")
        // A's mount shows B's bytes at once (its caches were dropped before its presenter heard).
        XCTAssertEqual(try read("doc.txt"), "two\n")
        // The write's grant carried a fencing token, in B's log.
        try daemonB.flushEventLog()
        XCTAssertEqual(daemonB.cluster?.status().nodes.map(\.name), ["a", "b"])
    }

    func testNodesShareOneArbitration() throws {
        // A coordinated write held on A makes B's write through its mount wait for it.
        let grant = try XCTUnwrap(coordinator.tryCoordinateImmediately(.writingIntent(with: try ItemPath("held.txt")), origin: .currentProcess)
            ?? waitForGrant(.writingIntent(with: try ItemPath("held.txt"))))
        let started = Date()
        let release = DispatchWorkItem { grant.release() }
        DispatchQueue.global().asyncAfter(deadline: .now() + 1, execute: release)
        try sh("echo x > '\(mntB!)/held.txt'")
        XCTAssertGreaterThan(Date().timeIntervalSince(started), 0.9, "B wrote while A held the item")
    }

    private func waitForGrant(_ intent: FileAccessIntent) -> CoordinatedAccess? {
        let done = DispatchSemaphore(value: 0)
        nonisolated(unsafe) var out: CoordinatedAccess?
        coordinator.coordinate([intent], origin: .currentProcess) { r in
            out = try? r.get()
            done.signal()
        }
        _ = done.wait(timeout: .now() + 5)
        return out
    }
}

/// The control socket serves only once the node has joined: an access granted through it before
/// the join would hold no gate pass, unseen by the other nodes for as long as it is held.
final class ClusterJoinTests: TwoNodeClusterMountTestCase {
    /// A node whose etcd calls wait until the test lets them through.
    final class HeldStore: ClusterStore, @unchecked Sendable {
        let store: MemoryClusterStore
        private let state = Mutex((open: false, asked: false))
        init(_ store: MemoryClusterStore) { self.store = store }
        var asked: Bool { state.withLock { $0.asked } }
        func open() { state.withLock { $0.open = true } }
        private func pass() async throws {
            state.withLock { $0.asked = true }
            while !state.withLock({ $0.open }) { try await Task.sleep(for: .milliseconds(5)) }
        }
        func range(_ key: [UInt8], prefix: Bool) async throws -> (values: [KeyValue], revision: Revision) {
            try await pass(); return try await store.range(key, prefix: prefix)
        }
        func put(_ key: [UInt8], _ value: [UInt8], lease: LeaseID) async throws -> Revision {
            try await pass(); return try await store.put(key, value, lease: lease)
        }
        func delete(_ key: [UInt8], prefix: Bool) async throws -> (revision: Revision, deleted: Int) {
            try await pass(); return try await store.delete(key, prefix: prefix)
        }
        func transaction(_ compare: [Compare], success: [ClusterOperation], failure: [ClusterOperation]) async throws -> TransactionResult {
            try await pass(); return try await store.transaction(compare, success: success, failure: failure)
        }
        func grantLease(ttl: Int64) async throws -> (id: LeaseID, ttl: Int64) {
            try await pass(); return try await store.grantLease(ttl: ttl)
        }
        func keepAlive(_ lease: LeaseID) async throws -> Int64 { try await pass(); return try await store.keepAlive(lease) }
        func revokeLease(_ lease: LeaseID) async throws { try await pass(); try await store.revokeLease(lease) }
        func watch(_ key: [UInt8], prefix: Bool, fromRevision: Revision) -> AsyncThrowingStream<WatchBatch, Error> {
            store.watch(key, prefix: prefix, fromRevision: fromRevision)
        }
    }

    func testTheControlSocketAcceptsNoConnectionUntilTheNodeHasJoined() throws {
        let held = HeldStore(etcd)
        let (daemonC, mntC) = try makeNode("c", store: held)
        let started = DispatchSemaphore(value: 0)
        var waitedForStart = false
        let failure = Mutex<String?>(nil)
        Thread.detachNewThread {
            do { try daemonC.startInProcess(timeoutSeconds: 30) } catch { failure.withLock { $0 = "\(error)" } }
            started.signal()
        }
        defer {
            held.open()
            if !waitedForStart { _ = started.wait(timeout: .now() + 30) }
            daemonC.stopAndWait()
            if MountTable.coordfsMount(at: mntC) != nil { umount2(mntC, Int32(MNT_DETACH)) }
        }
        let socket = daemonC.plan.state.io.controlSocket
        let deadline = Date().addingTimeInterval(10)
        while !held.asked && Date() < deadline { usleep(2_000) }
        XCTAssertTrue(held.asked, "the node never began to join")
        // The join has begun and waits for etcd: nobody may coordinate through this node yet.
        XCTAssertFalse(UnixSocket.accepts(socket), "the control socket accepted a connection before the node joined")
        usleep(200_000)
        XCTAssertFalse(UnixSocket.accepts(socket), "the control socket accepted a connection before the node joined")
        held.open()
        let result = started.wait(timeout: .now() + 30)
        waitedForStart = result == .success
        XCTAssertEqual(result, .success, "the node did not start once etcd answered")
        XCTAssertNil(failure.withLock { $0 })
        XCTAssertNotNil(daemonC.cluster, "the node did not join")
        XCTAssertTrue(UnixSocket.accepts(socket), "the control socket does not serve after the join")
    }
}

/// The cluster's `-o` options: endpoints split by the list's commas, names and ranges checked.
final class ClusterOptionsTests: XCTestCase {
    func testEndpointsNodeAndRangesAreParsedAndChecked() throws {
        let o = try MountOptions.parse(["cluster=http://10.0.0.5:2379,http://10.0.0.6:2379,node=hostA,cluster_ttl=5,cluster_unreachable=local,cluster_prefix=team/docs"])
        XCTAssertEqual(o.cluster.endpoints, ["http://10.0.0.5:2379", "http://10.0.0.6:2379"])
        XCTAssertEqual(o.cluster.node, "hostA")
        XCTAssertEqual(o.cluster.leaseTTL, 5)
        XCTAssertEqual(o.cluster.unreachable, .local)
        XCTAssertEqual(o.cluster.prefix, "team/docs")
        XCTAssertEqual(o.cluster.recordInterval, 0.002)
        XCTAssertEqual(o.cluster.unpresentedRecordInterval, 0.05)
        let paced = try MountOptions.parse(["cluster=http://a:1,cluster_record_interval=0.5,cluster_unpresented_interval=0"])
        XCTAssertEqual(paced.cluster.recordInterval, 0.0005)
        XCTAssertEqual(paced.cluster.unpresentedRecordInterval, 0)
        XCTAssertFalse(try MountOptions.parse(["ro"]).cluster.enabled)
        for bad in ["cluster=10.0.0.5:2379", "cluster=http://a:1,cluster_ttl=1", "cluster=http://a:1,cluster_ttl=3601",
                    "cluster=http://a:1,node=a/b", "cluster=http://a:1,cluster_unreachable=maybe", "node=alone",
                    "cluster=http://a:1,cluster_user=root", "cluster=http://a:1,cluster_ca=relative.pem",
                    "cluster=http://a:1,cluster_cert=/c.pem", "http://stray:1",
                    "cluster=http://a:1,node=..", "cluster=http://a:1,node=.", "cluster=http://a:1,node=" + String(repeating: "n", count: 65),
                    "cluster=http://a:1,cluster_record_interval=1001", "cluster=http://a:1,cluster_unpresented_interval=-1",
                    "cluster=http://a:1,cluster_unpresented_interval=nan", "cluster=http://a:1,cluster_record_interval=",
                    "backing_watcher=maybe"] {
            XCTAssertThrowsError(try MountOptions.parse([bad]), bad)
        }
        XCTAssertTrue(try MountOptions.parse(["ro"]).backingWatcher)
        XCTAssertFalse(try MountOptions.parse(["backing_watcher=off"]).backingWatcher)
    }

    /// A node's state folder is its own, under `.coordfs/nodes`; a mount on one host keeps `.coordfs`.
    func testEachNodeHasItsOwnStateFolder() throws {
        let node = try MountOptions.parse(["cluster=http://a:1,node=host-1.example"])
        XCTAssertEqual(StateFolder(backing: "/srv/shared", options: node).path, "/srv/shared/.coordfs/nodes/host-1.example")
        XCTAssertEqual(StateFolder(backing: "/srv/shared", options: node).controlSocket, "/srv/shared/.coordfs/nodes/host-1.example/control.sock")
        XCTAssertEqual(StateFolder(backing: "/srv/shared", options: try MountOptions.parse(["ro"])).path, "/srv/shared/.coordfs")
        // Without node=, the host name, kept to what a node name may hold (never "." or "..").
        let byHost = try MountOptions.parse(["cluster=http://a:1"]).cluster.nodeName
        XCTAssertTrue(ClusterOptions.isValidNodeName(byHost), byHost)
        XCTAssertEqual(StateFolder(backing: "/b", options: try MountOptions.parse(["cluster=http://a:1"])).path, "/b/.coordfs/nodes/" + byHost)
    }
}
