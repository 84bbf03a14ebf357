// swift-tools-version: 6.0
import Foundation
import PackageDescription

let package = Package(
    name: "PatchSync",
    platforms: [.macOS(.v13)],
    products: [
        .library(name: "PatchSync", targets: ["PatchSync"]),
        .executable(name: "patchsync", targets: ["patchsync"]),
        .executable(name: "patchsync-tuf-client", targets: ["patchsync-tuf-client"])
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2")
    ],
    targets: [
        .target(name: "CCurl", linkerSettings: [.linkedLibrary("dl")]),
        .target(name: "CLinux"),
        .systemLibrary(name: "CZlib", pkgConfig: "zlib", providers: [.apt(["zlib1g-dev"])]),
        .systemLibrary(name: "CLibCrypto", pkgConfig: "libcrypto", providers: [.apt(["libssl-dev"])]),
        .systemLibrary(name: "CSQLite3", pkgConfig: "sqlite3", providers: [.apt(["libsqlite3-dev"])]),
        .systemLibrary(name: "CLibDeflate", pkgConfig: "libdeflate", providers: [.apt(["libdeflate-dev"])]),
        .systemLibrary(name: "CZstd", pkgConfig: "libzstd", providers: [.apt(["libzstd-dev"])]),
        .target(
            name: "PatchSync",
            dependencies: [
                "CCurl", "CLinux", "CZlib", "CLibDeflate", "CZstd", "CLibCrypto", "CSQLite3",
                .product(name: "Logging", package: "swift-log")
            ]
        ),
        .target(
            name: "PatchSyncCLI",
            dependencies: [
                "PatchSync",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log")
            ]
        ),
        .executableTarget(name: "patchsync", dependencies: ["PatchSyncCLI"]),
        .executableTarget(
            name: "patchsync-tuf-client",
            dependencies: ["PatchSync", .product(name: "ArgumentParser", package: "swift-argument-parser")]
        ),
        .target(name: "PatchSyncTestSupport", dependencies: ["PatchSync"]),
        .executableTarget(name: "patchsync-sample", dependencies: ["PatchSyncTestSupport"]),
        .executableTarget(name: "launcher-example", dependencies: ["PatchSync"], path: "Examples/Launcher"),
        .executableTarget(
            name: "patchsync-bench", dependencies: ["PatchSync"], path: "Benchmarks/Sources/patchsync-bench"),
        .testTarget(name: "PatchSyncTests", dependencies: ["PatchSync", "PatchSyncTestSupport"]),
        .testTarget(
            name: "PatchSyncCLITests",
            dependencies: [
                "PatchSync", "PatchSyncCLI", "PatchSyncTestSupport",
                .product(name: "ArgumentParser", package: "swift-argument-parser")
            ],
            exclude: ["Snapshots"]
        )
    ],
    swiftLanguageModes: [.v6]
)

// libFuzzer targets (Fuzz/), only when PATCHSYNC_FUZZ is set: they link only with -sanitize=fuzzer.
// `make fuzz` builds them into .build-fuzz and runs each one; `make test` replays their corpus.
if ProcessInfo.processInfo.environment["PATCHSYNC_FUZZ"] != nil {
    for name in ["Metadata", "CanonicalJson", "Manifest", "Object", "ShareRequest"] {
        package.targets.append(
            .executableTarget(
                name: "Fuzz\(name)", dependencies: ["PatchSync"], path: "Fuzz/Sources/Fuzz\(name)",
                swiftSettings: [.unsafeFlags(["-parse-as-library"])]))
    }
}
