import Foundation
import Glibc
import TestSupport
import XCTest

/// A daemon still running after its unmount says why in the teardown's message: besides where its
/// threads wait, whether its FUSE connection outlived the unmount and which mount namespaces still
/// list the mount. The kernel ends a FUSE connection (and so the daemon's session) only when the
/// connection's last mount goes; where / has private propagation, as here, a mount namespace copied
/// while the mount was there keeps a mount of its own that the unmount does not reach.
final class DaemonAfterUnmountTests: MountTestCase {
    override var mountsInSetUp: Bool { false }
    override var comparesTreesAtEnd: Bool { false }

    func testTheTeardownNamesTheMountNamespaceThatKeepsAnUnmountedDaemonAlive() throws {
        guard target.isCoordFS else { throw XCTSkip("a coordfs daemon is watched") }
        guard let unshare = Spawn.which("unshare"), let fusermount = Spawn.which("fusermount3") else {
            throw XCTSkip("unshare and fusermount3 are needed")
        }
        try fixture.mount(options: [])
        let connection = try XCTUnwrap(fixture.connection, "the mount's FUSE connection")
        let daemon = try XCTUnwrap(fixture.daemonPids.first, "the mount's daemon")
        // Only this test's mount is copied: another test's, copied too, would outlive its unmount.
        let copy = try Spawn.start(unshare, ["--mount", "--propagation", "unchanged", "--"]
                                   + OwnMountNamespace.detachingOtherFUSEMounts(keeping: fixture.mountpoint, "/bin/sleep", ["60"]))
        var ended = false
        defer { if !ended { kill(copy, SIGKILL); var status: Int32 = 0; waitpid(copy, &status, 0) } }
        let ours = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/ns/mnt")
        eventually("the copy runs in a mount namespace of its own") {
            let comm = (try? String(contentsOfFile: "/proc/\(copy)/comm", encoding: .utf8)) ?? ""
            let ns = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(copy)/ns/mnt")
            return comm.hasPrefix("sleep") && ns != nil && ns != ours
        }
        let copied = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(copy)/ns/mnt")
        XCTAssertEqual(Spawn.run(fusermount, ["-u", fixture.mountpoint]).status, 0)
        XCTAssertFalse(Mounts.isMounted(fixture.mountpoint))
        XCTAssertTrue(Mounts.isAlive(daemon), "the copy keeps the connection, so the daemon runs on")
        let said = MountedFolder.whereItWaits(daemon, log: fixture.backing + "/.coordfs/daemon.log", connection: connection)
        XCTAssertTrue(said.contains("FUSE connection \(connection)"), said)
        XCTAssertTrue(said.contains("the mount is still listed in \(copied) by pid \(copy) (sleep)"), said)
        // The copy's end takes the last mount: the connection ends, and the daemon with it.
        kill(copy, SIGKILL)
        var status: Int32 = 0
        waitpid(copy, &status, 0)
        ended = true
        eventually("the daemon ends once the last mount went") { !Mounts.isAlive(daemon) }
        // Eventually: another test's copy of its own namespace lists every mount for the moment
        // between its `unshare` and its detaching of the mounts it does not keep (make test runs this
        // test in two lanes at once).
        eventually("no mount namespace lists the mount") {
            Mounts.connectionState(connection).hasSuffix("no mount namespace lists the mount")
        }
    }
}
