import ClusterKV
import EtcdKV
import EtcdTestSupport
import Foundation
import XCTest

/// What only the real client has: authentication, failover between members, bounded failure
/// when no member answers, configuration checks.
final class EtcdAuthTests: XCTestCase {
    let password = "s3cret-\(UInt32.random(in: 0...UInt32.max))"

    /// With auth on: the right password works for every call and for a watch; a wrong or missing
    /// one is `unauthenticated`, and no error nor description shows the password.
    func testAuthOnAndOff() async throws {
        let etcd = try EtcdCluster(size: 1)
        defer { etcd.stop() }
        // Off: credentials given anyway are not needed, and calls work.
        let passwordFile = etcd.root + "/password"
        try (password + "\n").write(toFile: passwordFile, atomically: true, encoding: .utf8)
        let credentials = try EtcdConfiguration.Credentials(user: "root", passwordFile: passwordFile)
        XCTAssertFalse("\(credentials)".contains(password))
        XCTAssertFalse(String(reflecting: credentials).contains(password))
        let before = try EtcdClusterStore(EtcdConfiguration(endpoints: etcd.endpoints, credentials: credentials))
        try await before.put(Array("k".utf8), [1], lease: 0)
        try await before.shutdown()

        try etcd.enableAuth(rootPassword: password)

        let good = try EtcdClusterStore(EtcdConfiguration(endpoints: etcd.endpoints, credentials: credentials))
        addTeardownBlock { try await good.shutdown() }
        let revision = try await good.put(Array("k".utf8), [2], lease: 0)
        let (lease, _) = try await good.grantLease(ttl: 10)
        _ = try await good.keepAlive(lease)
        let watched = try await firstEvent(good.watch(Array("k".utf8), prefix: false, fromRevision: revision))
        XCTAssertEqual(watched, revision, "a watch with the token")

        let wrong = try EtcdClusterStore(
            EtcdConfiguration(endpoints: etcd.endpoints, credentials: .init(user: "root", password: "not-" + password)))
        let none = try EtcdClusterStore(EtcdConfiguration(endpoints: etcd.endpoints))
        for (name, store) in [("wrong password", wrong), ("no credentials", none)] {
            do {
                _ = try await store.range(Array("k".utf8), prefix: false)
                XCTFail("\(name): read without a valid token")
            } catch ClusterStoreError.unauthenticated(let message) {
                XCTAssertFalse(message.contains(password), "\(name): the error shows the password")
            } catch {
                XCTFail("\(name): \(error), expected unauthenticated")
            }
            do {
                _ = try await firstEvent(store.watch(Array("k".utf8), prefix: false, fromRevision: revision))
                XCTFail("\(name): watch without a valid token")
            } catch ClusterStoreError.unauthenticated {
            } catch {
                XCTFail("\(name): watch: \(error), expected unauthenticated")
            }
            try await store.shutdown()
        }
        XCTAssertThrowsError(try EtcdConfiguration.Credentials(user: "root", passwordFile: etcd.root + "/none")) {
            XCTAssertFalse("\($0)".contains(password))
        }
    }

    /// When etcd forgets the token (a restart forgets simple tokens), the client asks for a new
    /// one and the call goes through.
    func testAnExpiredTokenIsRenewed() async throws {
        let etcd = try EtcdCluster(size: 1)
        defer { etcd.stop() }
        try etcd.enableAuth(rootPassword: password)
        let store = try EtcdClusterStore(
            EtcdConfiguration(endpoints: etcd.endpoints, credentials: .init(user: "root", password: password)))
        try await store.put(Array("k".utf8), [1], lease: 0)
        etcd.kill(0)
        try etcd.restart(0)
        let values = try await store.range(Array("k".utf8), prefix: false).values
        XCTAssertEqual(values.map(\.value), [[1]])
        try await store.shutdown()
    }

    /// TLS with a private CA and client certificates: with the CA, the certificate and its key
    /// every call and a watch work; without a client certificate, or without the CA, none does.
    func testTLSWithAClientCertificate() async throws {
        let folder = NSTemporaryDirectory() + "/coordfs-etcd-tls-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let files = try EtcdCluster.TLSFiles.make(in: folder)
        let etcd = try EtcdCluster(size: 1, tls: files)
        defer { etcd.stop() }
        XCTAssertTrue(etcd.endpoints[0].hasPrefix("https://"))
        let good = try EtcdClusterStore(
            EtcdConfiguration(
                endpoints: etcd.endpoints,
                tls: .init(caFile: files.ca, certificateFile: files.clientCertificate, keyFile: files.clientKey)))
        let noCertificate = try EtcdClusterStore(EtcdConfiguration(endpoints: etcd.endpoints, tls: .init(caFile: files.ca)))
        let noCA = try EtcdClusterStore(EtcdConfiguration(endpoints: etcd.endpoints))
        addTeardownBlock {
            try await good.shutdown()
            try await noCertificate.shutdown()
            try await noCA.shutdown()
        }
        let revision = try await good.put(Array("t".utf8), [1], lease: 0)
        let values = try await good.range(Array("t".utf8), prefix: false).values
        XCTAssertEqual(values.map(\.value), [[1]])
        let watched = try await firstEvent(good.watch(Array("t".utf8), prefix: false, fromRevision: revision))
        XCTAssertEqual(watched, revision)
        for (name, store) in [("no client certificate", noCertificate), ("no CA", noCA)] {
            do {
                _ = try await store.range(Array("t".utf8), prefix: false)
                XCTFail("\(name): answered")
            } catch ClusterStoreError.unavailable {
            } catch {
                XCTFail("\(name): \(error), expected unavailable")
            }
        }
    }

    func firstEvent(_ stream: AsyncThrowingStream<WatchBatch, Error>) async throws -> Revision? {
        for try await batch in stream {
            if let event = batch.events.first { return ClusterStoreConformance.revision(of: event) }
        }
        return nil
    }
}

final class EtcdFailoverTests: XCTestCase {
    /// Three members, the client's first endpoint killed: reads, writes, leases and a watch go on
    /// through the others (the watch without losing or repeating an event); the member back, it
    /// serves again.
    func testOneMemberOfThreeKilled() async throws {
        let etcd = try EtcdCluster(size: 3)
        defer { etcd.stop() }
        let store = try EtcdClusterStore(EtcdConfiguration(endpoints: etcd.endpoints))
        let key = Array("f/k".utf8)
        let (lease, _) = try await store.grantLease(ttl: 5)
        let first = try await store.put(key, [0], lease: 0)
        let watch = store.watch(Array("f/".utf8), prefix: true, fromRevision: first)
        var iterator = watch.makeAsyncIterator()
        var seen: [Revision] = []
        if let batch = try await iterator.next() { seen += batch.events.map(ClusterStoreConformance.revision) }

        etcd.kill(0)
        // If it led, the others elect a new leader first (a change sent meanwhile may time out:
        // `unavailable`, not sent again); then everything goes on.
        try etcd.waitUntilHealthy(timeout: 10)
        var written = [first]
        for i in 1...5 { written.append(try await store.put(key, [UInt8(i)], lease: 0)) }
        _ = try await store.keepAlive(lease)
        let values = try await store.range(key, prefix: false).values
        XCTAssertEqual(values.map(\.value), [[5]])
        while seen.count < written.count, let batch = try await iterator.next() {
            seen += batch.events.map(ClusterStoreConformance.revision)
        }
        XCTAssertEqual(seen, written, "the watch went on elsewhere, nothing lost, nothing twice")

        try etcd.restart(0)
        let alone = try EtcdClusterStore(EtcdConfiguration(endpoints: [etcd.endpoints[0]]))
        let back = try await alone.range(key, prefix: false).values
        XCTAssertEqual(back.map(\.value), [[5]], "the member back serves the cluster's data")
        try await alone.shutdown()
        try await store.shutdown()
    }

    /// No member answers: every call fails `unavailable` within its bound, and so does a watch;
    /// etcd back, the same store works again.
    func testEveryMemberDownIsUnavailableWithinTheBound() async throws {
        let etcd = try EtcdCluster(size: 1)
        defer { etcd.stop() }
        let store = try EtcdClusterStore(
            EtcdConfiguration(endpoints: etcd.endpoints, connectTimeout: .milliseconds(500), requestTimeout: .seconds(1)))
        let (lease, _) = try await store.grantLease(ttl: 30)
        etcd.signal(0, SIGSTOP)  // accepts connections, answers nothing
        let clock = ContinuousClock()
        let start = clock.now
        do {
            _ = try await store.keepAlive(lease)
            XCTFail("keepAlive answered by a stopped etcd")
        } catch ClusterStoreError.unavailable {}
        XCTAssertLessThan(clock.now - start, .seconds(3), "bounded by the request timeout")
        etcd.signal(0, SIGCONT)
        etcd.kill(0)
        let killed = clock.now
        do {
            try await store.put(Array("k".utf8), [1], lease: 0)
            XCTFail("put answered with etcd down")
        } catch ClusterStoreError.unavailable(let message) {
            XCTAssertTrue(message.contains(etcd.endpoints[0]), message)
        }
        do {
            for try await _ in store.watch(Array("k".utf8), prefix: false, fromRevision: 0) {}
            XCTFail("a watch with etcd down ended without an error")
        } catch ClusterStoreError.unavailable {}
        XCTAssertLessThan(clock.now - killed, .seconds(3))
        try etcd.restart(0)
        let revision = try await store.put(Array("k".utf8), [2], lease: 0)
        XCTAssertGreaterThan(revision, 1)
        try await store.shutdown()
    }

    /// etcd's data lost (a new etcd on the same address and port, its revisions from 1 again): a
    /// watch going on from the revision after the last it delivered (far above the new etcd's)
    /// throws `historyLost` with etcd's revision, where etcd would have let it wait in silence
    /// until its revisions passed that one; a watch from the new etcd's next revision works, and
    /// so does one from a revision not reached yet of an etcd that lost nothing.
    func testAWatchBeyondAWipedEtcdsRevisionSaysItsHistoryIsLost() async throws {
        let etcd = try EtcdCluster(size: 1)
        defer { etcd.stop() }
        let store = try EtcdClusterStore(EtcdConfiguration(endpoints: etcd.endpoints))
        let key = Array("w/".utf8)
        var last: Revision = 0
        for i in 0..<50 { last = try await store.put(key + [UInt8(i)], [1], lease: 0) }
        // Not lost: a watch from the revision after the last one just waits for it.
        let ahead = store.watch(key, prefix: true, fromRevision: last + 1)
        let written = Task { try await Task.sleep(for: .milliseconds(300)); return try await store.put(key, [2], lease: 0) }
        var iterator = ahead.makeAsyncIterator()
        let batch = try await iterator.next()
        let put = try await written.value
        XCTAssertEqual(batch?.events.first.map(ClusterStoreConformance.revision), put)

        try etcd.restartEmpty()
        let now = try await store.put(key, [3], lease: 0)
        XCTAssertLessThan(now, last, "a new etcd")
        do {
            for try await batch in store.watch(key, prefix: true, fromRevision: last + 2) { XCTFail("an event from a wiped etcd: \(batch)") }
            XCTFail("the watch ended without an error")
        } catch ClusterStoreError.historyLost(let current) {
            XCTAssertEqual(current, now)
        }
        let fresh = store.watch(key, prefix: true, fromRevision: now)
        var freshIterator = fresh.makeAsyncIterator()
        let first = try await freshIterator.next()
        XCTAssertEqual(first?.events.first.map(ClusterStoreConformance.revision), now)
        try await store.shutdown()
    }

    /// A member that stops answering (SIGSTOP: its connections stay open) does not keep a watch
    /// silent: the watch's probe finds it and the watch goes on through another member from the
    /// revision after its last event; with no other member, the watch ends `unavailable`.
    func testAStoppedMemberDoesNotKeepAWatchSilent() async throws {
        let etcd = try EtcdCluster(size: 3)
        defer { etcd.stop() }
        let watcher = try EtcdClusterStore(
            EtcdConfiguration(endpoints: etcd.endpoints, requestTimeout: .seconds(1), watchProbeInterval: .milliseconds(500)))
        let writer = try EtcdClusterStore(EtcdConfiguration(endpoints: Array(etcd.endpoints.dropFirst())))
        let alone = try EtcdClusterStore(
            EtcdConfiguration(endpoints: [etcd.endpoints[0]], requestTimeout: .seconds(1), watchProbeInterval: .milliseconds(500)))
        addTeardownBlock {
            try await watcher.shutdown()
            try await writer.shutdown()
            try await alone.shutdown()
        }
        let key = Array("s/k".utf8)
        let first = try await writer.put(key, [0], lease: 0)
        var iterator = watcher.watch(key, prefix: false, fromRevision: first).makeAsyncIterator()
        var aloneIterator = alone.watch(key, prefix: false, fromRevision: first).makeAsyncIterator()
        var seen = try await iterator.next().map { $0.events.map(ClusterStoreConformance.revision) } ?? []
        _ = try await aloneIterator.next()
        XCTAssertEqual(seen, [first])

        etcd.signal(0, SIGSTOP)
        defer { etcd.signal(0, SIGCONT) }
        let clock = ContinuousClock()
        let stopped = clock.now
        try etcd.waitUntilHealthy(timeout: 10, except: [0])  // a new leader if it led
        var written: [Revision] = [first]
        for i in 1...3 { written.append(try await writer.put(key, [UInt8(i)], lease: 0)) }
        while seen.count < written.count, let batch = try await iterator.next() {
            seen += batch.events.map(ClusterStoreConformance.revision)
        }
        XCTAssertEqual(seen, written, "the watch went on through another member, nothing lost or twice")
        XCTAssertLessThan(clock.now - stopped, .seconds(8), "found within an election, the probe interval and the request timeout")
        do {
            while try await aloneIterator.next() != nil {}
            XCTFail("a watch on a stopped member alone ended without an error")
        } catch ClusterStoreError.unavailable {}
        XCTAssertLessThan(clock.now - stopped, .seconds(10))
    }

    /// The member a watch is on stopped, and a second one too, so that the third has no leader
    /// for seconds (a long election): the watch goes round the members again while one says it has
    /// no leader, and goes on once there is one again, nothing lost or twice. Before, it gave up
    /// after one round (the stopped members timed out, the third said "no leader"), as it did under
    /// load when an election took a while after a member's stop.
    func testAWatchWaitsOutAnElection() async throws {
        let etcd = try EtcdCluster(size: 3)
        defer { etcd.stop() }
        let watcher = try EtcdClusterStore(
            EtcdConfiguration(endpoints: etcd.endpoints, requestTimeout: .seconds(1), watchProbeInterval: .milliseconds(500)))
        let writer = try EtcdClusterStore(EtcdConfiguration(endpoints: Array(etcd.endpoints.dropFirst())))
        addTeardownBlock {
            try await watcher.shutdown()
            try await writer.shutdown()
        }
        let key = Array("e/k".utf8)
        let first = try await writer.put(key, [0], lease: 0)
        let watch = watcher.watch(key, prefix: false, fromRevision: first)
        let seen = Task { () throws -> [Revision] in
            var seen: [Revision] = []
            for try await batch in watch {
                seen += batch.events.map(ClusterStoreConformance.revision)
                if seen.count >= 4 { break }
            }
            return seen
        }
        try await Task.sleep(for: .milliseconds(500))  // the watch created on member 0
        etcd.signal(0, SIGSTOP)
        etcd.signal(1, SIGSTOP)
        defer {
            etcd.signal(0, SIGCONT)
            etcd.signal(1, SIGCONT)
        }
        // One round of the old watch: member 0's probe and member 1 time out, member 2 has no leader.
        try await Task.sleep(for: .seconds(4))
        etcd.signal(1, SIGCONT)
        try etcd.waitUntilHealthy(timeout: 20, except: [0])
        var written: [Revision] = [first]
        for i in 1...3 { written.append(try await writer.put(key, [UInt8(i)], lease: 0)) }
        // Bounded: a watch that neither goes on nor ends is cancelled after 20 s.
        let timer = Task {
            try await Task.sleep(for: .seconds(20))
            seen.cancel()
        }
        let result = await seen.result
        timer.cancel()
        switch result {
        case .success(let revisions):
            XCTAssertEqual(revisions, written, "the watch went on after the election, nothing lost or twice")
        case .failure(let error):
            XCTFail("the watch gave up during the election: \(error)")
        }
    }

    func testEndpointsAreChecked() {
        for bad in ["127.0.0.1:2379", "ftp://h:1", "http://", "http://h:1/v3", "http://u:p@h:1"] {
            XCTAssertThrowsError(try EtcdClusterStore(EtcdConfiguration(endpoints: [bad])), bad)
        }
        XCTAssertThrowsError(try EtcdClusterStore(EtcdConfiguration(endpoints: [])))
        XCTAssertThrowsError(
            try EtcdClusterStore(EtcdConfiguration(endpoints: ["https://h:1"], tls: .init(certificateFile: "/etc/hostname"))))
    }
}

/// A partition made on this machine: etcd in its own network namespace, reached over a veth pair
/// whose link the test cuts and restores.
final class EtcdPartitionTests: XCTestCase {
    /// Cut off: calls fail `unavailable` within their bound and a watch ends `unavailable` (its
    /// probe finds the silence); the lease not renewed meanwhile is gone when the link is back
    /// (`leaseNotFound`: the session is lost), and a new watch from the revision after the last
    /// event seen misses nothing written while cut off.
    func testACutLinkIsUnavailableWithinTheBoundThenTheLeaseIsGone() async throws {
        let ns = try NetworkNamespace()
        defer { ns.remove() }
        let etcd = try EtcdCluster(size: 1, address: ns.innerAddress, launcher: ns.enter)
        defer { etcd.stop() }
        let configuration = EtcdConfiguration(
            endpoints: etcd.endpoints, connectTimeout: .milliseconds(500), requestTimeout: .seconds(1),
            watchProbeInterval: .milliseconds(500))
        let store = try EtcdClusterStore(configuration)
        addTeardownBlock { try await store.shutdown() }
        let key = Array("p/k".utf8)
        let (lease, _) = try await store.grantLease(ttl: 2)
        let first = try await store.put(key, [0], lease: lease)
        var iterator = store.watch(key, prefix: false, fromRevision: first).makeAsyncIterator()
        let seen = try await iterator.next()
        XCTAssertEqual(seen?.events.map(ClusterStoreConformance.revision), [first])

        try ns.cut()
        let clock = ContinuousClock()
        let cut = clock.now
        for (what, call) in [
            ("keepAlive", { _ = try await store.keepAlive(lease) }),
            ("put", { try await store.put(key, [1], lease: 0) }),
            ("range", { _ = try await store.range(key, prefix: false) }),
        ] as [(String, () async throws -> Void)] {
            let start = clock.now
            do {
                try await call()
                XCTFail("\(what) answered across a cut link")
            } catch ClusterStoreError.unavailable {
            } catch {
                XCTFail("\(what): \(error), expected unavailable")
            }
            XCTAssertLessThan(clock.now - start, .milliseconds(2500), "\(what) bounded")
        }
        do {
            while try await iterator.next() != nil {}
            XCTFail("a watch across a cut link ended without an error")
        } catch ClusterStoreError.unavailable {}
        XCTAssertLessThan(clock.now - cut, .seconds(5), "the watch found the silence")
        try await Task.sleep(for: .seconds(3))  // past the lease's TTL, not renewed

        try ns.restore()
        try etcd.waitUntilHealthy(timeout: 10)  // the link up again (a first connection may still fail)
        do {
            _ = try await store.keepAlive(lease)
            XCTFail("a lease not renewed past its TTL is still alive")
        } catch ClusterStoreError.leaseNotFound(let id) {
            XCTAssertEqual(id, lease)
        }
        let values = try await store.range(key, prefix: false).values
        XCTAssertEqual(values, [], "the expired lease took its key")
        var after: [WatchEvent] = []
        for try await batch in store.watch(key, prefix: false, fromRevision: first + 1) {
            after += batch.events
            break
        }
        XCTAssertEqual(after.map(ClusterStoreConformance.describe), ["delete \(key) \(first + 1)"], "the expiry, seen after the link is back")
    }
}
