// swift-tools-version: 6.1
import PackageDescription

// Module layout (dependency arrows point down; only FuseKit imports the C module):
//   coordfs (CLI) ─▶ CoordFS ─▶ FuseKit ─▶ CFuse3
//                      │   └──▶ Loopback
//                      ├──▶ Coordination, DocumentStore, EventLog, ControlProtocol
//   CoordFSClient ─▶ ControlProtocol
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
    ],
    targets: [
        .systemLibrary(
            name: "CFuse3",
            pkgConfig: "fuse3",
            providers: [.apt(["libfuse3-dev"])]
        ),
        .target(
            name: "FuseKit",
            dependencies: ["CFuse3", .product(name: "SystemPackage", package: "swift-system")]
        ),
        .target(
            name: "Loopback",
            dependencies: ["FuseKit", .product(name: "SystemPackage", package: "swift-system")]
        ),
        .target(name: "Coordination"),
        .target(name: "EventLog"),
        .target(name: "ControlProtocol"),
        .target(
            name: "DocumentStore",
            dependencies: [.product(name: "GRDB", package: "GRDB.swift")]
        ),
        .target(
            name: "CoordFS",
            dependencies: [
                "FuseKit", "Loopback", "Coordination", "EventLog", "ControlProtocol", "DocumentStore",
                .product(name: "SystemPackage", package: "swift-system"),
            ]
        ),
        .target(name: "CoordFSClient", dependencies: ["ControlProtocol"]),
        .executableTarget(
            name: "coordfs",
            dependencies: [
                "CoordFS", "EventLog", "ControlProtocol", "CoordFSClient", "DocumentStore",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        .executableTarget(
            name: "coordfs-bench",
            dependencies: ["Coordination", "EventLog", "ControlProtocol", "CoordFS", "DocumentStore"]
        ),
        .testTarget(name: "CoordinationTests", dependencies: ["Coordination"]),
        .testTarget(name: "EventLogTests", dependencies: ["EventLog"]),
        .testTarget(name: "ControlProtocolTests", dependencies: ["ControlProtocol"]),
        .testTarget(name: "DocumentStoreTests", dependencies: ["DocumentStore"]),
        .testTarget(name: "MountTests", dependencies: ["CoordFS", "Coordination"]),
        .testTarget(name: "CoordinatedMountTests", dependencies: ["CoordFS", "FuseKit", "Loopback", "Coordination", "EventLog", "ControlProtocol", "CoordFSClient", "DocumentStore"]),
        .testTarget(name: "CoordFSClientTests", dependencies: ["CoordFSClient", "ControlProtocol", "CoordFS", "Coordination"]),
        .testTarget(name: "CLITests", dependencies: []),
    ]
)
