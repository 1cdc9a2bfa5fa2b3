import Foundation
import Glibc
import XCTest
@testable import DocumentStore

/// The scenarios on the machine's own disk (/tmp: ext4 here, no reflink).
final class StoreOnDiskTests: XCTestCase {
    var scenarios: Scenarios!

    override func setUpWithError() throws {
        let parent = "/tmp/coordfs-store-tests"
        try FileSystem.mkdirs(parent)
        // Whatever /tmp is, expect what the probe of a scratch store finds; report it.
        let probe = try Fixture(under: parent)
        scenarios = Scenarios(make: { try Fixture(under: parent, configuration: $0) }, expectsReflink: probe.store.cloneSupported)
    }

    func testSnapshotMethods() throws { try scenarios.snapshotMethods() }
    func testKeptVersionsShareNoInodeWithLiveFiles() throws { try scenarios.keptVersionsShareNoInodeWithLiveFiles() }
    func testLinkVersionsOfOlderStoresAreDetachedAtOpen() throws { try scenarios.linkVersionsOfOlderStoresAreDetachedAtOpen() }
    func testLazyBaseCapturedBeforeARename() throws { try scenarios.lazyBaseCapturedBeforeARename() }
    func testBaseLostOutsideTheStore() throws { try scenarios.baseLostOutsideTheStore() }
    func testDefaultActions() throws { try scenarios.defaultActions() }
    func testOneConflictPerPresenter() throws { try scenarios.oneConflictPerPresenter() }
    func testChangeSave() throws { try scenarios.changeSave() }
    func testChangeReload() throws { try scenarios.changeReload() }
    func testChangeClose() throws { try scenarios.changeClose() }
    func testChangeKeepBoth() throws { try scenarios.changeKeepBoth() }
    func testChangeMerge() throws { try scenarios.changeMerge() }
    func testDeletionSave() throws { try scenarios.deletionSave() }
    func testDeletionReloadAndMergeRefused() throws { try scenarios.deletionReloadRefused() }
    func testDeletionClose() throws { try scenarios.deletionClose() }
    func testDeletionKeepBoth() throws { try scenarios.deletionKeepBoth() }
    func testRestartMidConflict() throws { try scenarios.restartMidConflict() }
    func testKilledMidConflict() throws { try scenarios.killedMidConflict() }
    func testVersionsDiffRestore() throws { try scenarios.versionsDiffRestore() }
    func testRemoveOtherVersions() throws { try scenarios.removeOtherVersions() }
    func testRetention() throws { try scenarios.retention() }
    func testHostilePaths() throws { try scenarios.hostilePaths() }
    func testMoves() throws { try scenarios.moves() }
    func testSaveStyles() throws { try scenarios.saveStyles() }
    func testConcurrentCalls() throws { try scenarios.concurrentCalls() }

    func testFilesystemReported() throws {
        let f = try Fixture(under: "/tmp/coordfs-store-tests")
        print("DocumentStore on /tmp: filesystem \(f.store.filesystemName), FICLONE \(f.store.cloneSupported ? "supported" : "not supported"), in-place method \(f.store.inPlaceMethod)")
        XCTAssertFalse(f.store.filesystemName.isEmpty)
    }
}

/// The same scenarios on a real reflink filesystem: XFS (reflink=1) on a loop device, created for
/// this class and always unmounted and detached afterwards. Skipped where loop devices are not
/// available.
final class StoreOnReflinkTests: XCTestCase {
    nonisolated(unsafe) static var image: XFSImage?
    nonisolated(unsafe) static var skipReason: String?
    var scenarios: Scenarios!

    override class func setUp() {
        super.setUp()
        if let reason = XFSImage.unavailableReason() { skipReason = reason; return }
        do { image = try XFSImage() } catch { skipReason = "could not build an XFS image: \(error)" }
    }

    override class func tearDown() {
        image?.destroy()
        image = nil
        super.tearDown()
    }

    override func setUpWithError() throws {
        if let reason = Self.skipReason { throw XCTSkip("reflink tests skipped: \(reason)") }
        let mountPoint = try XCTUnwrap(Self.image?.mountPoint)
        scenarios = Scenarios(make: { try Fixture(under: mountPoint, configuration: $0) }, expectsReflink: true)
    }

    func testSnapshotMethods() throws { try scenarios.snapshotMethods() }
    func testKeptVersionsShareNoInodeWithLiveFiles() throws { try scenarios.keptVersionsShareNoInodeWithLiveFiles() }
    func testLinkVersionsOfOlderStoresAreDetachedAtOpen() throws { try scenarios.linkVersionsOfOlderStoresAreDetachedAtOpen() }
    func testLazyBaseCapturedBeforeARename() throws { try scenarios.lazyBaseCapturedBeforeARename() }
    func testBaseLostOutsideTheStore() throws { try scenarios.baseLostOutsideTheStore() }
    func testDefaultActions() throws { try scenarios.defaultActions() }
    func testOneConflictPerPresenter() throws { try scenarios.oneConflictPerPresenter() }
    func testChangeSave() throws { try scenarios.changeSave() }
    func testChangeReload() throws { try scenarios.changeReload() }
    func testChangeClose() throws { try scenarios.changeClose() }
    func testChangeKeepBoth() throws { try scenarios.changeKeepBoth() }
    func testChangeMerge() throws { try scenarios.changeMerge() }
    func testDeletionSave() throws { try scenarios.deletionSave() }
    func testDeletionReloadAndMergeRefused() throws { try scenarios.deletionReloadRefused() }
    func testDeletionClose() throws { try scenarios.deletionClose() }
    func testDeletionKeepBoth() throws { try scenarios.deletionKeepBoth() }
    func testRestartMidConflict() throws { try scenarios.restartMidConflict() }
    func testKilledMidConflict() throws { try scenarios.killedMidConflict() }
    func testVersionsDiffRestore() throws { try scenarios.versionsDiffRestore() }
    func testRetention() throws { try scenarios.retention() }
    func testHostilePaths() throws { try scenarios.hostilePaths() }
    func testMoves() throws { try scenarios.moves() }
    func testSaveStyles() throws { try scenarios.saveStyles() }
    func testConcurrentCalls() throws { try scenarios.concurrentCalls() }

    /// A clone shares extents: cloning 64 MiB takes next to no space.
    func testCloneUsesNoExtraSpace() throws {
        let mountPoint = try XCTUnwrap(Self.image?.mountPoint)
        let f = try Fixture(under: mountPoint)
        let fd = open(f.path("big.bin"), O_WRONLY | O_CREAT, 0o644)
        let chunk = [UInt8](repeating: 0x5A, count: 1 << 20)
        for _ in 0..<64 { XCTAssertEqual(Glibc.write(fd, chunk, chunk.count), chunk.count) }
        fsync(fd)
        close(fd)
        var before = statvfs()
        statvfs(mountPoint, &before)
        let snapshot = try XCTUnwrap(f.store.preserveBeforeInPlaceWrite("big.bin"))
        syncfs_all(mountPoint)
        var after = statvfs()
        statvfs(mountPoint, &after)
        XCTAssertEqual(snapshot.version.method, .reflink)
        let used = (Int64(before.f_bfree) - Int64(after.f_bfree)) * Int64(before.f_frsize)
        XCTAssertLessThan(used, 4 << 20, "a 64 MiB clone used \(used) bytes")
    }
}

private func syncfs_all(_ path: String) {
    let fd = open(path, O_RDONLY)
    if fd >= 0 { fsync(fd); close(fd) }
    sync()
}
