import Foundation
import Glibc
import XCTest
@testable import DocumentStore

/// Runs ``SnapshotBenchmark`` when `COORDFS_STORE_BENCH=1` (best in release:
/// `swift test -c release -Xswiftc -enable-testing --filter SnapshotBenchmarkRun`), on /tmp and on
/// an 8 GiB (sparse) XFS reflink image. Sizes in MiB from `COORDFS_STORE_BENCH_SIZES` (default 1,16,128,1024).
final class SnapshotBenchmarkRun: XCTestCase {
    func testSnapshotCostAgainstSize() throws {
        let environment = ProcessInfo.processInfo.environment
        guard environment["COORDFS_STORE_BENCH"] == "1" else { throw XCTSkip("set COORDFS_STORE_BENCH=1 to run the snapshot benchmark") }
        let sizes = (environment["COORDFS_STORE_BENCH_SIZES"] ?? "1,16,128,1024").split(separator: ",").compactMap { Int64($0) }.map { $0 << 20 }
        try FileSystem.mkdirs("/tmp/coordfs-store-bench")
        var results = try SnapshotBenchmark.run(directory: "/tmp/coordfs-store-bench", sizes: sizes)
        if XFSImage.unavailableReason() == nil {
            let image = try XFSImage(size: "8G")
            defer { image.destroy() }
            results += try SnapshotBenchmark.run(directory: image.mountPoint, sizes: sizes)
        } else {
            print("reflink benchmark skipped: \(XFSImage.unavailableReason()!)")
        }
        print(SnapshotBenchmark.table(results))
        let overhead = try SnapshotBenchmark.callOverheadForUnpresentedFile(directory: "/tmp/coordfs-store-bench")
        print("store calls for a file that is no document (preserve + note): \(SnapshotBenchmark.duration(overhead)) median")
        XCTAssertFalse(results.isEmpty)
    }
}
