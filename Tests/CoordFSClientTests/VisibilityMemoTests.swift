import XCTest
import Foundation
import Glibc
import ControlProtocol
import Coordination
@testable import CoordFS

/// What a status, cluster or log reply costs per item: the visibility rule is judged once per
/// folder of one request (`VisibilityMemo`), so listing many presenters or records of one folder
/// walks that folder's path on disk once, with the answers the resolver gives item by item.
final class VisibilityMemoTests: XCTestCase {
    func testEachFolderIsJudgedOnceWithTheResolversAnswers() throws {
        var template = Array("/tmp/coordfs-visibility-XXXXXX".utf8CString)
        let root = String(cString: try XCTUnwrap(mkdtemp(&template)))
        defer { try? FileManager.default.removeItem(atPath: root) }
        chmod(root, 0o755)
        mkdir(root + "/open", 0o755)
        mkdir(root + "/open/inner", 0o755)
        mkdir(root + "/closed", 0o700)
        chmod(root + "/closed", 0o700)
        mkdir(root + "/.coordfs", 0o755)
        for i in 0..<50 {
            for folder in ["open", "open/inner", "closed"] {
                FileManager.default.createFile(atPath: "\(root)/\(folder)/f\(i)", contents: Data("x".utf8))
            }
        }
        let resolver = ControlPathResolver(backing: root, mountpoint: root + "-mnt")
        let nobody = ControlPathResolver.Peer(credentials: PeerCredentials(pid: 0, uid: 65534, gid: 65534), groups: [])

        var paths = ["top.txt"]
        for i in 0..<200 {
            paths += ["open/f\(i % 50)", "open/inner/f\(i % 50)", "closed/f\(i % 50)", "closed/missing-\(i)", "open/new-\(i)"]
        }
        // The state folder's name in the root is no item: asked first, it decides nothing for the root.
        paths.insert(StateFolder.name, at: 0)

        var memo = VisibilityMemo(resolver: resolver, peer: nobody)
        for path in paths {
            let mountPath = try MountPath(validating: path)
            XCTAssertEqual(memo.maySee(mountPath), resolver.maySee(mountPath, for: nobody), path)
        }
        XCTAssertEqual(memo.lookups, 4, "the root, open, open/inner and closed, once each")
        XCTAssertTrue(memo.maySee(try MountPath(validating: "open/f1")))
        XCTAssertFalse(memo.maySee(try MountPath(validating: "closed/f1")))
        XCTAssertTrue(memo.maySee(try MountPath(validating: "top.txt")))
        XCTAssertFalse(memo.maySee(try MountPath(validating: StateFolder.name)))

        // Log records (paths as the log writes them) alike.
        var logMemo = VisibilityMemo(resolver: resolver, peer: nobody)
        for path in paths {
            XCTAssertEqual(logMemo.maySee("/" + path), resolver.maySee(try MountPath(validating: path), for: nobody), path)
        }
        XCTAssertEqual(logMemo.lookups, 4)
    }
}
