import ControlProtocol
@testable import DocumentStore
import Foundation
import Glibc
import TestSupport
import XCTest
@testable import CoordFS

/// Who may read a kept version through the daemon (`ControlRequestHandler.mayRead`): whoever could
/// read its file when it was kept, by its mode, owner and access ACL then, as the kernel would have
/// judged; root always; a version of an older store (nothing recorded) as its document now decides.
final class VersionAccessTests: XCTestCase {
    private func version(mode: UInt32, uid: UInt32 = 0, gid: UInt32 = 0, acl: [UInt8]? = nil, recorded: Bool = true) -> Version {
        Version(id: VersionID(rawValue: 1), document: DocumentID(rawValue: 1), path: "doc", createdAt: Date(), size: 1,
                reason: .replaced, method: .copy, source: FileIdentity(device: 1, inode: 1, size: 1, modificationTimeNanoseconds: 1),
                isPinned: false, sourceAccess: recorded ? SourceAccess(mode: UInt32(S_IFREG) | mode, uid: uid, gid: gid, acl: acl) : nil)
    }

    private func peer(_ uid: UInt32, groups: [UInt32] = []) -> ControlPathResolver.Peer {
        ControlPathResolver.Peer(credentials: PeerCredentials(pid: 1, uid: uid, gid: uid), groups: groups)
    }

    /// The bytes of `acl` as `system.posix_acl_access` holds them.
    private func xattr(_ acl: AccessACL) -> [UInt8] {
        var bytes: [UInt8] = [2, 0, 0, 0]
        for e in acl.entries {
            withUnsafeBytes(of: e.tag.littleEndian) { bytes += $0 }
            withUnsafeBytes(of: e.perm.littleEndian) { bytes += $0 }
            withUnsafeBytes(of: e.id.littleEndian) { bytes += $0 }
        }
        return bytes
    }

    func testAVersionIsForWhoCouldReadItsFileThen() {
        let nobody = peer(65534)
        XCTAssertFalse(ControlRequestHandler.mayRead(version(mode: 0o600), nobody), "root's private file")
        XCTAssertTrue(ControlRequestHandler.mayRead(version(mode: 0o600), peer(0)), "root reads every version")
        XCTAssertTrue(ControlRequestHandler.mayRead(version(mode: 0o644), nobody))
        XCTAssertTrue(ControlRequestHandler.mayRead(version(mode: 0o600, uid: 65534, gid: 65534), nobody), "its own file")
        XCTAssertTrue(ControlRequestHandler.mayRead(version(mode: 0o640, gid: 100), peer(1000, groups: [100])), "by its group")
        XCTAssertFalse(ControlRequestHandler.mayRead(version(mode: 0o640, gid: 100), nobody))
        // An ACL granting nobody read, and one taking it away from what the mode bits give others.
        XCTAssertTrue(ControlRequestHandler.mayRead(version(mode: 0o640, acl: PosixACL.user(65534, perm: 4)), nobody))
        XCTAssertFalse(ControlRequestHandler.mayRead(version(mode: 0o640, acl: PosixACL.user(65534, perm: 4)), peer(4242)))
        let denied = AccessACL(entries: [.init(tag: AccessACL.userObject, perm: 6, id: .max), .init(tag: AccessACL.user, perm: 0, id: 65534),
                                         .init(tag: AccessACL.groupObject, perm: 4, id: .max), .init(tag: AccessACL.mask, perm: 4, id: .max),
                                         .init(tag: AccessACL.other, perm: 4, id: .max)])
        XCTAssertFalse(ControlRequestHandler.mayRead(version(mode: 0o644, acl: xattr(denied)), nobody), "u:nobody:--- on a 0644 file")
        XCTAssertTrue(ControlRequestHandler.mayRead(version(mode: 0o644, acl: xattr(denied)), peer(4242)))
        // Nothing recorded (an older store): the document's permissions now decide, as before.
        XCTAssertTrue(ControlRequestHandler.mayRead(version(mode: 0o600, recorded: false), nobody))
    }
}
