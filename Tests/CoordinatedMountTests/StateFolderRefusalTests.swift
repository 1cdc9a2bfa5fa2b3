// Why a state folder of another user's is refused: a squashing NFS export (root_squash for a root
// daemon) is said to be one, with the fix docs/cluster.md gives, not taken for another user's trap.
import Foundation
import Glibc
import XCTest
@testable import CoordFS

final class StateFolderRefusalTests: XCTestCase {
    /// A folder the mount has just made that belongs to another uid: the export squashes.
    func testAFolderRootJustMadeThatTheExportGaveNobodyIsSaidToBeRootSquash() {
        let m = StateFolder.notOwnedMessage(folder: "/nfs/shared/.coordfs", owner: 65534, user: 0, madeNow: true, onNFS: true)
        for part in ["'/nfs/shared/.coordfs'", "uid 65534", "squashes root", "root_squash", "no_root_squash",
                     "remove '/nfs/shared/.coordfs'", "docs/cluster.md"] {
            XCTAssertTrue(m.contains(part), "lacks \(part): \(m)")
        }
        XCTAssertFalse(m.contains("redirect"), "a squashed folder is no other user's trap: \(m)")
        // Another user's squash (all_squash, anonuid): mapped to another uid, told to mount as that one.
        let user = StateFolder.notOwnedMessage(folder: "/nfs/shared/.coordfs", owner: 65534, user: 1000, madeNow: true, onNFS: true)
        XCTAssertTrue(user.contains("all_squash") && user.contains("uid 65534") && !user.contains("no_root_squash"), user)
    }

    /// One found there: another user's, or, by root on NFS, possibly a squashed earlier try.
    func testAFolderFoundOwnedByAnotherUserIsRefusedAndOnNFSMentionsRootSquash() {
        let local = StateFolder.notOwnedMessage(folder: "/srv/x/.coordfs", owner: 65534, user: 0, madeNow: false, onNFS: false)
        XCTAssertTrue(local.contains("belongs to uid 65534") && local.contains("redirect"), local)
        XCTAssertFalse(local.contains("squash"), local)
        let nfs = StateFolder.notOwnedMessage(folder: "/nfs/x/.coordfs", owner: 65534, user: 0, madeNow: false, onNFS: true)
        XCTAssertTrue(nfs.contains("belongs to uid 65534") && nfs.contains("root_squash") && nfs.contains("no_root_squash"), nfs)
    }

    /// Through `hold()` on a local file system (no NFS server here): a `.coordfs` of nobody's found
    /// there is refused with the generic message, which names the owner and suspects no squash.
    func testHoldRefusesAStateFolderOfNobodysWithoutClaimingASquash() throws {
        guard geteuid() == 0 else { throw XCTSkip("needs root to give the folder to nobody") }
        var template = Array("/tmp/coordfs-statefolder-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { return XCTFail("mkdtemp") }
        let backing = String(cString: made)
        defer { try? FileManager.default.removeItem(atPath: backing) }
        XCTAssertEqual(mkdir(backing + "/.coordfs", 0o700), 0)
        XCTAssertEqual(chown(backing + "/.coordfs", 65534, 65534), 0)
        var state = StateFolder(backing: backing)
        XCTAssertThrowsError(try state.hold()) {
            let m = "\($0)"
            XCTAssertTrue(m.contains("belongs to uid 65534") && !m.contains("squash"), m)
        }
    }
}
