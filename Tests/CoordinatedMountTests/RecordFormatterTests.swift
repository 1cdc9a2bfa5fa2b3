import Coordination
import EventLog
import Foundation
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
}

/// The recorder under concurrency, without a mount: FUSE-like threads record through a real
/// coordinator while one thread formats between "requests" (`help`) and the writer thread drains.
final class EventRecorderConcurrencyTests: XCTestCase {
    func testEveryStepOfManyThreadsIsRecordedOnceInItsRequestsOrder() throws {
        // Whether the helper gets to format steps before the writer thread does depends on the
        // scheduler: on a busy machine it may get none in one round. Every round checks every
        // record; rounds repeat (at most five) until one had the helper format some.
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
