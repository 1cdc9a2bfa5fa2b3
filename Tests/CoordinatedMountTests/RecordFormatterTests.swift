import Coordination
import EventLog
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
}
