import Coordination
import EventLog
import Foundation
import NameBytes
import Synchronization
import XCTest

@testable import CoordFS

/// The formatter's encoding of intents, without a mount: every option by its Foundation name.
final class RecordFormatterTests: XCTestCase {
    private func decodedIntent(_ intent: FileAccessIntent) throws -> EventRecord {
        var batch = EncodedRecords()
        batch.fields.path(intent.path.components)
        RecordFormatter.encodeIntent(intent, into: &batch.fields)
        batch.finish(.intentRequested, at: EventTime(millisecondsSinceEpoch: 0))
        let dir = NSTemporaryDirectory() + "/coordfs-formatter-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let log = try EventLogWriter(directory: dir)
        log.append(encoded: &batch)
        try log.close()
        let records = try EventLogReader(directory: dir).read(limit: 10)
        XCTAssertEqual(records.count, 1)
        return try XCTUnwrap(records.first)
    }

    func testEveryOptionIsRecordedByItsFoundationName() throws {
        let path = try ItemPath("dir/doc.txt")
        let read = try decodedIntent(.readingIntent(with: path, options: [
            .withoutChanges, .resolvesSymbolicLink, .immediatelyAvailableMetadataOnly, .forUploading]))
        XCTAssertEqual(read.path, "/dir/doc.txt")
        XCTAssertEqual(read.details.intent, .read)
        XCTAssertEqual(read.details.options, ["withoutChanges", "resolvesSymbolicLink", "immediatelyAvailableMetadataOnly", "forUploading"])
        let write = try decodedIntent(.writingIntent(with: path, options: [
            .forDeleting, .forMoving, .forMerging, .forReplacing, .contentIndependentMetadataOnly]))
        XCTAssertEqual(write.details.intent, .write)
        XCTAssertEqual(write.details.options, ["forDeleting", "forMoving", "forMerging", "forReplacing", "contentIndependentMetadataOnly"])
        let plain = try decodedIntent(.writingIntent(with: .root))
        XCTAssertEqual(plain.path, "/")
        XCTAssertEqual(plain.details.options, [])
    }

    /// Each record names its own actor: the formatter copies the actor fields it encoded for the
    /// previous origin when the next one is the same process, user and executable, and encodes them
    /// afresh when any of the three differs or there is no origin.
    func testEachRecordNamesItsOwnActor() throws {
        let origins: [AccessOrigin?] = [
            AccessOrigin(pid: 10, uid: 1000, gid: 1000, executable: "cp"),
            AccessOrigin(pid: 10, uid: 1000, gid: 1000, executable: "cp"),
            AccessOrigin(pid: 10, uid: 1000, gid: 1000, executable: "cat"),
            AccessOrigin(pid: 11, uid: 1000, gid: 1000, executable: "cat"),
            AccessOrigin(pid: 11, uid: 0, gid: 1000, executable: "cat"),
            nil,
            AccessOrigin(pid: 11, uid: 0, gid: 1000, executable: "cat"),
            AccessOrigin(pid: -1, uid: UInt32.max, gid: 0, executable: "na\u{EF}ve"),
        ]
        var formatter = RecordFormatter()
        var steps: [PendingStep] = []
        for (i, o) in origins.enumerated() {
            let path = try ItemPath("dir/f\(i)")
            steps.append(.event(CoordinationEvent(time: CoordinationEvent.now(), requestID: nil, origin: o, kind: .announced(.changed(path)))))
        }
        formatter.format(steps)
        let dir = NSTemporaryDirectory() + "/coordfs-formatter-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let log = try EventLogWriter(directory: dir)
        log.append(encoded: &formatter.formatted)
        try log.close()
        let records = try EventLogReader(directory: dir).read(limit: 100)
        XCTAssertEqual(records.map(\.path), origins.indices.map { "/dir/f\($0)" })
        XCTAssertEqual(records.map(\.actor), origins.map { $0.map { EventActor(pid: $0.pid, uid: $0.uid, executable: $0.executable) } })
    }

    /// The actor fields are copied from the previous record only for the same executable byte for
    /// byte: two names Swift calls equal (a precomposed and a decomposed accent) are two executables.
    func testAnExecutableEqualOnlyToSwiftIsItsOwnActor() throws {
        let names = ["caf\u{E9}", "cafe\u{301}", "cafe\u{301}", "caf\u{E9}"]
        XCTAssertEqual(names[0], names[1], "Swift's == would take one for the other")
        var formatter = RecordFormatter()
        formatter.format(names.map { name in
            .event(CoordinationEvent(
                time: CoordinationEvent.now(), requestID: nil, origin: AccessOrigin(pid: 5, uid: 0, gid: 0, executable: name),
                kind: .announced(.changed(try! ItemPath("f")))))
        })
        let records = try written(&formatter)
        XCTAssertEqual(records.map { $0.actor?.executable.map { Array($0.utf8) } }, names.map { Array($0.utf8) })
    }

    /// The records `formatter` formatted, as a reader of the log reads them.
    private func written(_ formatter: inout RecordFormatter) throws -> [EventRecord] {
        let dir = NSTemporaryDirectory() + "/coordfs-formatter-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let log = try EventLogWriter(directory: dir)
        log.append(encoded: &formatter.formatted)
        try log.close()
        return try EventLogReader(directory: dir).read(limit: 1000)
    }

    private func event(_ request: UInt64, _ kind: CoordinationEvent.Kind) -> PendingStep {
        .event(CoordinationEvent(
            time: CoordinationEvent.now(), requestID: RequestID(rawValue: request),
            origin: AccessOrigin(pid: 7, uid: 0, gid: 0, executable: "t"), kind: kind))
    }

    /// A did* record copies its path from its request's encoded intent only when the two paths are
    /// the same bytes: a file renamed during the access, a name Swift calls equal to the intent's
    /// (a precomposed and a decomposed accent, different names on disk), another name that is not
    /// UTF-8, and a request already released each get their own path.
    func testADidRecordNamesItsOwnPathByteForByte() throws {
        let composed = try ItemPath("d/caf\u{E9}")
        let decomposed = try ItemPath("d/cafe\u{301}")
        XCTAssertEqual(composed.components[1], decomposed.components[1], "Swift's == would take one name for the other")
        let byteA = try ItemPath("d/" + LosslessName.string([0x61, 0xFF]))
        let byteB = try ItemPath("d/" + LosslessName.string([0x61, 0xFE]))
        let renamed = try ItemPath("d/new")
        let write = FileAccessIntent.writingIntent(with: composed)
        let writeBytes = FileAccessIntent.writingIntent(with: byteA)
        var formatter = RecordFormatter()
        formatter.format([
            event(1, .requested(intents: [write], purpose: nil)),
            event(1, .granted(intents: [write], waitedNanos: 0)),
            event(1, .announced(.changed(decomposed))),
            event(1, .announced(.changed(composed))),
            event(1, .announced(.moved(from: composed, to: renamed))),
            event(1, .announced(.deleted(renamed))),
            event(2, .requested(intents: [writeBytes], purpose: nil)),
            event(2, .announced(.changed(byteB))),
            event(2, .announced(.subitemAppeared(byteA))),
            event(1, .released(heldNanos: 1000)),
            event(1, .announced(.changed(composed))),
            event(2, .released(heldNanos: 1000)),
        ])
        let records = try written(&formatter)
        let bytes = { (p: ItemPath) in Array("/".utf8) + Array(p.components.joined(separator: "/").utf8) }
        let nameBytes = { (tail: [UInt8]) in Array("/d/".utf8) + tail }
        XCTAssertEqual(records.map(\.kind), [
            .intentRequested, .granted, .didChange, .didChange, .didMove, .didDelete,
            .intentRequested, .didChange, .subitemAppeared, .released, .didChange, .released])
        XCTAssertEqual(records.map(\.path.nameBytes), [
            bytes(composed), bytes(composed), bytes(decomposed), bytes(composed), bytes(renamed), bytes(renamed),
            nameBytes([0x61, 0xFF]), nameBytes([0x61, 0xFE]), nameBytes([0x61, 0xFF]), bytes(composed), bytes(composed),
            nameBytes([0x61, 0xFF])])
        XCTAssertEqual(records[4].oldPath?.nameBytes, bytes(composed))
        XCTAssertEqual(records[2].details.requestID, 1)
        XCTAssertNil(records[2].details.intent, "a did* record names no intent")
    }

    /// Two mounts (two recorders, each with its formatter) with the same request ids and paths:
    /// each log's records name that mount's paths only.
    func testTheSameRequestUnderTwoMountsKeepsEachMountsPaths() throws {
        let one = try ItemPath("x/one"), two = try ItemPath("y/two")
        var a = RecordFormatter(), b = RecordFormatter()
        a.format([event(1, .requested(intents: [.writingIntent(with: one)], purpose: nil))])
        b.format([event(1, .requested(intents: [.writingIntent(with: two)], purpose: nil))])
        a.format([event(1, .announced(.changed(two))), event(1, .announced(.changed(one)))])
        b.format([event(1, .announced(.changed(one))), event(1, .announced(.changed(two)))])
        XCTAssertEqual(try written(&a).map(\.path), ["/x/one", "/y/two", "/x/one"])
        XCTAssertEqual(try written(&b).map(\.path), ["/y/two", "/x/one", "/y/two"])
    }

    /// The recorder's backlog (a ring) gives its steps back in the order they came, across its
    /// wrapping around and growing.
    func testTheBacklogKeepsItsOrderAcrossWrapAndGrowth() {
        var backlog = Backlog()
        var next: UInt64 = 0, expected: UInt64 = 0
        func check(_ step: PendingStep?) {
            guard case .record(_, let at)? = step else { return XCTFail("no step") }
            XCTAssertEqual(at, expected)
            expected += 1
        }
        for round in 0..<200 {
            for _ in 0...(round % 9) {
                backlog.append(.record(EventRecord(kind: .mount, path: "/"), at: next))
                next += 1
            }
            for _ in 0..<min(backlog.count, round % 7) { check(backlog.popFirst()) }
            XCTAssertEqual(backlog.count, Int(next - expected))
        }
        while backlog.count > 0 { check(backlog.popFirst()) }
        XCTAssertEqual(expected, next)
        XCTAssertNil(backlog.popFirst())
    }
}

/// The recorder under concurrency, without a mount: FUSE-like threads record through a real
/// coordinator while one thread formats between "requests" (`help`) and the writer thread drains.
final class EventRecorderConcurrencyTests: XCTestCase {
    func testEveryStepOfManyThreadsIsRecordedOnceInItsRequestsOrder() throws {
        // Whether the helpers get to format steps before the writer thread does depends on the
        // scheduler: on a busy machine they may get none in one round. Every round checks every
        // record; rounds repeat (at most five) until one had a helper format some.
        for round in 1...5 {
            if try recordManyThreadsAndCheck() > 0 { return }
            if round == 5 { XCTFail("the helper formatted no step in five rounds") }
        }
    }

    /// One round; returns the number of steps the helper formatted.
    private func recordManyThreadsAndCheck() throws -> Int {
        let dir = NSTemporaryDirectory() + "/coordfs-recorder-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let log = try EventLogWriter(directory: dir, options: EventLogOptions(coalescing: .milliseconds(1)))
        let recorder = EventRecorder(log: log)
        let coordinator = Coordinator(eventSink: recorder as any CoordinationEventSink)
        let threads = 4, accesses = 2_000
        let helping = Atomic<Bool>(true)
        let helperStarted = DispatchSemaphore(value: 0)
        let helper = Thread {
            helperStarted.signal()
            while helping.load(ordering: .relaxed) { _ = recorder.help() }
        }
        helper.start()
        helperStarted.wait() // the workers start once the helper runs
        DispatchQueue.concurrentPerform(iterations: threads) { t in
            let origin = AccessOrigin(pid: Int32(1000 + t), uid: 0, gid: 0, executable: "worker\(t)")
            for i in 0..<accesses {
                let path = try! ItemPath("t\(t)/f\(i)")
                guard let access = coordinator.tryCoordinateImmediately(.writingIntent(with: path), origin: origin) else {
                    return XCTFail("uncontended write refused")
                }
                access.didChange(path)
                access.release()
                // Between its requests, as a FUSE worker polling the empty device does: the
                // helper thread alone may never run while the backlog is small on a busy machine
                // (in CI: five rounds with no step formatted by it).
                _ = recorder.help()
            }
        }
        helping.store(false, ordering: .relaxed)
        try recorder.flush()
        try log.close()

        let records = try EventLogReader(directory: dir).read(limit: 1_000_000)
        XCTAssertEqual(records.count, threads * accesses * 4)
        XCTAssertEqual(records.map(\.seq), Array(1...UInt64(records.count)))
        XCTAssertEqual(records.map(\.time), records.map(\.time).sorted(), "times never go backwards")
        var byRequest: [UInt64: [EventRecord]] = [:]
        for r in records {
            guard let id = r.details.requestID else { XCTFail("\(r.kind) without a request id"); return 0 }
            byRequest[id, default: []].append(r)
        }
        XCTAssertEqual(byRequest.count, threads * accesses)
        for (id, steps) in byRequest {
            XCTAssertEqual(steps.map(\.kind), [.intentRequested, .granted, .didChange, .released], "request \(id)")
            XCTAssertEqual(Set(steps.map(\.path)).count, 1, "request \(id) names one file: \(steps.map(\.path))")
            XCTAssertEqual(Set(steps.compactMap(\.actor?.executable)).count, 1)
            XCTAssertEqual(steps.filter { $0.kind != .didChange }.map(\.details.intent), [.write, .write, .write])
        }
        return recorder.helped.load(ordering: .relaxed)
    }
}
