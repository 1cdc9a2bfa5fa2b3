// swift-tools-version: 6.1
import PackageDescription

// Module layout (dependency arrows point down; only FuseKit imports libfuse's CFuse3, only LinuxGNU
// imports CLinux, the GNU calls Glibc's module hides; Glibc itself is fine anywhere):
//   coordfs (CLI) ─▶ CoordFS ─▶ FuseKit ─▶ CFuse3, CURing (FUSE over io_uring, C over liburing)
//                      │   └──▶ Loopback
//   CoordFS, Loopback, EventLog, DocumentStore, CoordFSWeb ─▶ LinuxGNU ─▶ CLinux (LinuxCalls: renameat2, xattrs,
//     file handles, fanotify, a loopback TCP peer's owner by sock_diag; CarrylessCRC32, the log's CRC by PCLMULQDQ; sys/sysValue giving
//     swift-system's Errno) and ─▶ Linux
//   DocumentStore ─▶ CSQLiteShm (C: a SQLite VFS whose WAL index has no holes, for full disks)
//   FuseKit, ControlProtocol, CoordFSClient ─▶ Linux (no C: the one EINTR retry, the one mountinfo
//     reader, stderr lines, small file reads; an app linking CoordFSClient needs no C module)
//                      ├──▶ Coordination, DocumentStore, EventLog, ControlProtocol
//                      └──▶ MountPolicy ─▶ Coordination (the operation → intent rules, pure)
//   every module but CFuse3 ─▶ NameBytes (names as bytes: LosslessName, ExactName; JSONString, the
//     one JSON writer of the protocol, the log and the CLI)
//   Coordination, EventLog, ControlProtocol, DocumentStore, CoordFSClient ─▶ Vocabulary (the shared
//     ids and enums: PresenterID, DocumentID, ConflictID, VersionID, Resolution, SnapshotMethod,
//     reading/writing options; dependency-free, re-exported by each, so one type of each everywhere)
//   CoordFSClient ─▶ ControlProtocol
//   CoordFS ─▶ swift-metrics, swift-prometheus (the daemon's metrics endpoint, docs/metrics.md)
//   coordfs ─▶ CoordFSWeb ─▶ CoordFSClient, EventLog, DocumentStore (TextMerge), Hummingbird (coordfs web, docs/web.md)
//   ClusterKV: the etcd v3 primitives the cluster (issue 19) is built on, dependency-free
//   EtcdKV ─▶ ClusterKV: ClusterStore against a real etcd (v3 JSON gateway, async-http-client)
//   Cluster ─▶ ClusterKV, Coordination: a node of a cluster, the coordinator's gate (FUSE-free, etcd-free)
let package = Package(
    name: "coordfs",
    platforms: [.macOS(.v14)],
    products: [
        .executable(name: "coordfs", targets: ["coordfs"]),
        .library(name: "CoordFSClient", targets: ["CoordFSClient"]),
        .library(name: "Coordination", targets: ["Coordination"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-system", from: "1.4.0"),
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.0.0"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.4.1"),
        .package(url: "https://github.com/swift-server/async-http-client", from: "1.37.0"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.100.0"),
        .package(url: "https://github.com/apple/swift-nio-ssl", from: "2.30.0"),
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.1"),
        .package(url: "https://github.com/hummingbird-project/hummingbird-websocket", from: "2.8.1"),
    ],
    targets: [
        .systemLibrary(
            name: "CFuse3",
            pkgConfig: "fuse3",
            providers: [.apt(["libfuse3-dev"])]
        ),
        // FUSE over io_uring's few calls in C over liburing (liburing-dev); only opaque rings cross.
        .target(name: "CURing", linkerSettings: [.linkedLibrary("uring")]),
        .target(name: "CSQLiteShm", linkerSettings: [.linkedLibrary("sqlite3")]),
        .target(name: "NameBytes"),
        .systemLibrary(name: "CLinux"),
        .target(name: "Linux", dependencies: ["CLinux", "NameBytes"]),
        .target(name: "LinuxGNU", dependencies: ["CLinux", "Linux", .product(name: "SystemPackage", package: "swift-system")]),
        .target(name: "Vocabulary"),
        .target(
            name: "FuseKit",
            dependencies: ["CFuse3", "CURing", "Linux", "LinuxGNU", "NameBytes", .product(name: "SystemPackage", package: "swift-system")]
        ),
        .target(
            name: "Loopback",
            dependencies: ["FuseKit", "LinuxGNU", "NameBytes", .product(name: "SystemPackage", package: "swift-system")]
        ),
        .target(name: "Coordination", dependencies: ["NameBytes", "Vocabulary"]),
        .target(name: "MountPolicy", dependencies: ["Coordination"]),
        .target(name: "ClusterKV"),
        .target(
            name: "EtcdKV",
            dependencies: [
                "ClusterKV",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ]
        ),
        .target(name: "Cluster", dependencies: ["ClusterKV", "Coordination", "NameBytes"]),
        .target(name: "EventLog", dependencies: ["Linux", "LinuxGNU", "NameBytes", "Vocabulary"]),
        .target(name: "ControlProtocol", dependencies: ["Linux", "NameBytes", "Vocabulary"]),
        .target(
            name: "DocumentStore",
            dependencies: ["CSQLiteShm", "Linux", "LinuxGNU", "NameBytes", "Vocabulary", .product(name: "GRDB", package: "GRDB.swift")]
        ),
        .target(
            name: "CoordFS",
            dependencies: [
                "FuseKit", "LinuxGNU", "Loopback", "Coordination", "MountPolicy", "EventLog", "ControlProtocol", "DocumentStore", "NameBytes",
                "Cluster", "ClusterKV", "EtcdKV",
                .product(name: "SystemPackage", package: "swift-system"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
            ]
        ),
        .target(
            name: "CoordFSWeb",
            dependencies: [
                "CoordFSClient", "ControlProtocol", "EventLog", "DocumentStore", "Linux", "LinuxGNU", "NameBytes",
                .product(name: "Hummingbird", package: "hummingbird"),
                // ServerChildChannel: a connection's first handler at its accept (PeerBounds.swift).
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "HummingbirdWebSocket", package: "hummingbird-websocket"),
                // The HTTP/1 decoder's errors and parts: a malformed request's answer (RequestBounds.swift).
                .product(name: "NIOHTTP1", package: "swift-nio"),
                // DocumentStore's own dependency, whose module a release build needs to see.
                .product(name: "GRDB", package: "GRDB.swift"),
            ],
            resources: [.copy("Assets")]
        ),
        .target(name: "CoordFSClient", dependencies: ["ControlProtocol", "Linux", "NameBytes", "Vocabulary"]),
        .executableTarget(
            name: "coordfs",
            dependencies: [
                "CoordFS", "EventLog", "ControlProtocol", "CoordFSClient", "DocumentStore", "NameBytes", "CoordFSWeb",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        .executableTarget(
            name: "coordfs-bench",
            dependencies: ["Coordination", "EventLog", "ControlProtocol", "CoordFS", "FuseKit", "CURing", "DocumentStore", "ClusterKV", "CoordFSClient", "EtcdKV", "EtcdTestSupport"]
        ),
        .testTarget(name: "CoordinationTests", dependencies: ["Coordination", "NameBytes", "CoordinationTestSupport"]),
        .testTarget(name: "FuseKitTests", dependencies: ["FuseKit", "Loopback"]),
        .testTarget(name: "MountPolicyTests", dependencies: ["MountPolicy", "Coordination"]),
        .testTarget(name: "EventLogTests", dependencies: ["EventLog", "NameBytes"]),
        .testTarget(name: "ControlProtocolTests", dependencies: ["ControlProtocol", "EventLog", "NameBytes"]),
        .testTarget(name: "DocumentStoreTests", dependencies: ["DocumentStore", .product(name: "GRDB", package: "GRDB.swift")]),
        .testTarget(name: "MountTests", dependencies: ["CoordFS", "Coordination", "LinuxGNU", "TestSupport"]),
        .testTarget(name: "CoordinatedMountTests", dependencies: ["EtcdTestSupport", "TestSupport", "CoordFS", "FuseKit", "LinuxGNU", "Loopback", "Coordination", "EventLog", "ControlProtocol", "CoordFSClient", "DocumentStore", "Cluster", "ClusterKV"]),
        .testTarget(name: "CoordFSClientTests", dependencies: ["CoordFSClient", "ControlProtocol", "CoordFS", "Coordination", "TestSupport"]),
        .testTarget(name: "CLITests", dependencies: ["EtcdTestSupport", "TestSupport"]),
        .testTarget(name: "ClusterKVTests", dependencies: ["ClusterKV"]),
        .testTarget(name: "LinuxTests", dependencies: ["Linux", "LinuxGNU"]),
        // The web server's request bounds on an EmbeddedChannel, whose clock the test drives (docs/web.md).
        .testTarget(name: "CoordFSWebTests", dependencies: [
            "CoordFSWeb",
            .product(name: "NIOCore", package: "swift-nio"),
            .product(name: "NIOEmbedded", package: "swift-nio"),
            .product(name: "NIOHTTP1", package: "swift-nio"),
        ]),
        // Helpers more than one test target needs (POSIX ACL bytes, the Python protocol client's start, a plain HTTP client; a journal and a recording presenter).
        .target(name: "TestSupport", dependencies: ["Linux"], path: "Tests/TestSupport"),
        .target(name: "CoordinationTestSupport", dependencies: ["Coordination"], path: "Tests/CoordinationTestSupport"),
        // Real etcd members for the tests (started on free loopback ports, always stopped).
        .target(name: "EtcdTestSupport", path: "Tests/EtcdTestSupport"),
        .testTarget(name: "EtcdKVTests", dependencies: ["EtcdKV", "ClusterKV", "EtcdTestSupport"]),
        .testTarget(name: "ClusterTests", dependencies: ["Cluster", "ClusterKV", "Coordination", "CoordinationTestSupport"]),
    ]
)
