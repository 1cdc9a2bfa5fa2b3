import Foundation
import XCTest

@testable import EventLog

/// Each user's share of the log (`UserLogShare`, docs/event-log.md, "Each user's share"): records
/// of a user over its share are summarised in `coalesced` records that say how many of each kind,
/// the first and last item and the time span; nothing is lost without a trace, exempt users (root,
/// the owner) are never summarised, and what retention deleted gives the user room again.
final class UserLogShareTests: XCTestCase {
    let nobody: UInt32 = 65534
    let t0: Int64 = 1_800_000_000_000

    /// Finishes a record of `uid` naming `/d/<name>` and lets `share` look at it.
    private func add(_ share: inout UserLogShare, _ batch: inout EncodedRecords, _ kind: EventKind, _ name: String, uid: UInt32, at ms: Int64) {
        batch.fields.path(["d", name])
        batch.fields.actor(pid: 42, uid: uid, executable: "python3")
        batch.finish(kind, at: EventTime(millisecondsSinceEpoch: ms))
        share.admit(uid: uid, into: &batch)
    }

    /// How many records a summary's message says it summarised.
    private func summarised(_ r: EventRecord) -> Int {
        guard let m = r.details.message, let range = m.range(of: " records summarised") else { return 0 }
        return Int(m[..<range.lowerBound].split(separator: " ").last ?? "") ?? 0
    }

    func testAUserOverItsShareIsSummarisedAndRootAndTheOwnerNeverAre() throws {
        let dir = makeLogDirectory(self)
        let writer = try EventLogWriter(directory: dir)
        // 10% of 100,000 bytes; a summary every 100 ms.
        var share = UserLogShare(percent: 10, logBytes: 100_000, exempt: [0, 1000], summaryMillis: 100)
        var batch = EncodedRecords()
        let kinds: [EventKind] = [.intentRequested, .granted, .released, .didDelete]
        for i in 0..<2000 {
            let ms = t0 + Int64(i)
            add(&share, &batch, kinds[i % 4], "n\(i)", uid: nobody, at: ms)
            if i % 10 == 0 {
                add(&share, &batch, .didChange, "root\(i)", uid: 0, at: ms)
                add(&share, &batch, .didChange, "owner\(i)", uid: 1000, at: ms)
            }
        }
        share.emitDue(now: EventTime(millisecondsSinceEpoch: t0 + 5000), into: &batch, force: true)
        writer.append(encoded: &batch)
        try writer.flush()
        try writer.close()
        let records = try readAll(dir)

        let stored = records.filter { $0.actor?.uid == nobody && $0.kind != .coalesced }
        // A record here takes more than 40 bytes: at most 10,000 bytes of them are stored.
        XCTAssertGreaterThan(stored.count, 100, "nobody's first records are stored one by one")
        XCTAssertLessThanOrEqual(stored.count * 40, 10_000, "nobody's stored records stay within its share")
        XCTAssertLessThan(share.usage(of: nobody), 20_000, "with its summaries")
        XCTAssertEqual(stored.map(\.path), (0..<stored.count).map { "/d/n\($0)" }, "its first records, in order")
        // Root's and the owner's records are all there.
        XCTAssertEqual(records.filter { $0.actor?.uid == 0 }.count, 200)
        XCTAssertEqual(records.filter { $0.actor?.uid == 1000 }.count, 200)
        // The rest is in summaries: one when it reached its share, then one per 100 ms.
        let summaries = records.filter { $0.kind == .coalesced }
        XCTAssertTrue(summaries.allSatisfy { $0.actor?.uid == nobody && $0.details.reason == "userShare" }, "\(summaries)")
        XCTAssertEqual(summaries.first?.path, "/d/n\(stored.count)", "the first summary names the first record it summarises")
        XCTAssertTrue(summaries.first?.details.message?.contains("reached its share of the log (log_user_share=10: 10000 of 100000 bytes)") == true,
                      "\(String(describing: summaries.first))")
        XCTAssertGreaterThanOrEqual(summaries.count, 15)
        XCTAssertLessThanOrEqual(summaries.count, 25)
        XCTAssertEqual(stored.count + summaries.map(summarised).reduce(0, +), 2000, "every record of nobody's is stored or counted")
        XCTAssertEqual(summaries.last?.oldPath, "/d/n1999", "the last summary names the last record")
        let counts = summaries.compactMap(\.details.message).joined()
        for kind in kinds { XCTAssertTrue(counts.contains("\(kind.rawValue) "), "counts by kind: \(counts)") }
        XCTAssertTrue(summaries.dropFirst().allSatisfy { ($0.details.bytes ?? 0) > 0 }, "each says the bytes it saved")
    }

    func testRetentionOfAUsersRecordsGivesItRoomAgainAfterALastSummary() throws {
        var share = UserLogShare(percent: 10, logBytes: 100_000, exempt: [0], summaryMillis: 60_000)
        var batch = EncodedRecords()
        for i in 0..<600 { add(&share, &batch, .granted, "n\(i)", uid: nobody, at: t0 + Int64(i)) }
        XCTAssertEqual(share.summarised, [nobody])
        // Everything appended so far (seqs 1...N) is stored: nothing changes.
        share.settle(lastSeq: UInt64(batch.count), oldestSeq: 1)
        batch.removeAll()
        add(&share, &batch, .granted, "still", uid: nobody, at: t0 + 700)
        XCTAssertEqual(batch.count, 0, "still over its share: summarised")
        // Retention deleted all of it.
        share.settle(lastSeq: 1000, oldestSeq: 1001)
        XCTAssertEqual(share.usage(of: nobody), 0)
        add(&share, &batch, .released, "again", uid: nobody, at: t0 + 800)
        XCTAssertEqual(batch.count, 2, "a last summary, then the record itself")
        XCTAssertTrue(share.summarised.isEmpty)
        let dir = makeLogDirectory(self)
        let writer = try EventLogWriter(directory: dir)
        writer.append(encoded: &batch)
        try writer.close()
        let records = try readAll(dir)
        XCTAssertEqual(records.map(\.kind), [.coalesced, .released])
        XCTAssertTrue(records[0].details.message?.contains("under its share again") == true, "\(records[0])")
        XCTAssertEqual(records[1].path, "/d/again")
    }

    func testOffAndExemptUsersCostNothing() {
        var off = UserLogShare(percent: 100, logBytes: 1000, exempt: [0])
        var batch = EncodedRecords()
        for i in 0..<1000 { add(&off, &batch, .granted, "n\(i)", uid: nobody, at: t0) }
        XCTAssertEqual(batch.count, 1000)
        XCTAssertEqual(off.usage(of: nobody), 0)
        var share = UserLogShare(percent: 1, logBytes: 1000, exempt: [0, 1000])
        batch.removeAll()
        for i in 0..<1000 { add(&share, &batch, .granted, "n\(i)", uid: [0, 1000][i % 2], at: t0) }
        XCTAssertEqual(batch.count, 1000)
        XCTAssertFalse(share.hasPending)
    }

    /// What `coordfs status` and the metrics show: the uids summarised now, since when, how many
    /// records; and whether a summary waits for its time (`hasUnsaid`: the writer's retention
    /// check then pulls the recorder, which writes it once due, without a wake-up of its own).
    func testTheSummarisedUsersAndAWaitingSummaryAreKnown() {
        var share = UserLogShare(percent: 10, logBytes: 100_000, exempt: [0, 1000], summaryMillis: 10_000)
        var batch = EncodedRecords()
        XCTAssertTrue(share.summarisedUsers.isEmpty)
        XCTAssertFalse(share.hasUnsaid)
        for i in 0..<1000 { add(&share, &batch, .granted, "n\(i)", uid: nobody, at: t0 + Int64(i)) }
        let users = share.summarisedUsers
        XCTAssertEqual(users.map(\.uid), [nobody])
        let over = share.summarisedRecords
        XCTAssertGreaterThan(over, 500)
        XCTAssertEqual(users.first?.records, over, "each summarised record counted")
        XCTAssertLessThanOrEqual(users.first?.bytes ?? .max, 10_000 + 1_000, "its stored records stay about its share")
        XCTAssertTrue(share.hasUnsaid, "the records since it reached its share wait for their summary")
        // Not due yet, then due: written, and nothing waits any more.
        share.emitDue(now: EventTime(millisecondsSinceEpoch: t0 + 5_000), into: &batch)
        XCTAssertTrue(share.hasUnsaid)
        let before = batch.count
        share.emitDue(now: EventTime(millisecondsSinceEpoch: t0 + 20_000), into: &batch)
        XCTAssertEqual(batch.count, before + 1, "one coalesced record")
        XCTAssertFalse(share.hasUnsaid)
        XCTAssertEqual(share.summarisedUsers.map(\.uid), [nobody], "still over its share")
    }
}
