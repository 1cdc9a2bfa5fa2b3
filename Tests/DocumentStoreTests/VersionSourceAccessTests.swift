import Foundation
import GRDB
import Glibc
import XCTest
@testable import DocumentStore

/// Each kept version records who could read its file then (mode, owner, group, access ACL), for the
/// daemon to check a reader against; versions of an older store have nothing recorded.
final class VersionSourceAccessTests: XCTestCase {
    var f: Fixture!

    /// XCTest keeps every test object until the process ends: the fixture (whose deinit removes its
    /// folder) is let go here.
    override func tearDown() {
        f = nil
        super.tearDown()
    }

    override func setUpWithError() throws { f = try Fixture.onDisk() }

    func testAVersionRecordsWhoCouldReadItsFile() throws {
        try f.write("doc.txt", "private\n")
        XCTAssertEqual(chmod(f.path("doc.txt"), 0o640), 0)
        XCTAssertEqual(chown(f.path("doc.txt"), 65534, 100), 0)
        let plain = try XCTUnwrap(f.store.preserveBeforeReplace("doc.txt")).version
        XCTAssertEqual(plain.sourceAccess, SourceAccess(mode: UInt32(S_IFREG) | 0o640, uid: 65534, gid: 100, acl: nil))
        try f.replace("doc.txt", "with an ACL\n")
        XCTAssertEqual(try Shell.run("/usr/bin/setfacl", ["-m", "u:4242:r", f.path("doc.txt")]).status, 0)
        let withACL = try XCTUnwrap(f.store.preserveBeforeReplace("doc.txt")).version
        let acl = try XCTUnwrap(withACL.sourceAccess?.acl, "the ACL is recorded")
        XCTAssertEqual(acl.count, 4 + 8 * 5, "version 2 header, then owner, named user, group, mask, other")
        try f.reopen()
        XCTAssertEqual(try f.store.version(withACL.id).sourceAccess, withACL.sourceAccess)
    }

    func testVersionsOfAnOlderStoreRecordNothing() throws {
        try f.write("doc.txt", "old\n")
        let old = try XCTUnwrap(f.store.preserveBeforeReplace("doc.txt")).version
        try f.store.database.write { db in
            for column in ["srcMode", "srcUid", "srcGid", "srcAcl"] { try db.execute(sql: "ALTER TABLE version DROP COLUMN \(column)") }
            try db.execute(sql: "DELETE FROM grdb_migrations WHERE identifier = 'v4'")
        }
        try f.reopen()
        XCTAssertNil(try f.store.version(old.id).sourceAccess)
        try f.replace("doc.txt", "new\n")
        XCTAssertNotNil(try XCTUnwrap(f.store.preserveBeforeReplace("doc.txt")).version.sourceAccess)
    }
}
